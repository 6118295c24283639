//! End to end against a real kube-apiserver: the reconcile engine's guarantees, each with an
//! operator written for the test and run by the real `khai` binary.

use crate::support::metrics::wait_for_reloads;
use crate::support::{Khai, TestNamespace, configmaps, reconciled, wait_for};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tempfile::TempDir;

/// Writes an operator with one namespaced CRD `Widget` in `group` and the given script.
fn operator(group: &str, script: &str) -> TempDir {
    operator_with(group, script, "")
}

/// Like [`operator`], with extra lines appended to the `[[controller]]` table.
fn operator_with(group: &str, script: &str, controller_extra: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "widgets"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.count = {{ type = "integer", default = 1 }}
spec.message = {{ type = "string", default = "ok" }}
spec.release = {{ type = "boolean", default = false }}
status.phase = {{ type = "string" }}

[[controller]]
for = "Widget"
owns = ["v1/ConfigMap"]
script = "widget.rhai"
{controller_extra}
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script).unwrap();
    dir
}

/// khai on `op` in `ns`, logging JSON, so that its reconciles can be read field by field.
fn start_json(op: &TempDir, ns: &str) -> Khai {
    Khai::start(op.path(), ns, crate::support::JSON_LOG)
}

/// Changes a label of widget `name`, which passes the change filter, and returns the JSON log
/// line of the reconcile it triggers (khai started by [`start_json`]).
async fn poke(api: &Api<DynamicObject>, name: &str, khai: &Khai) -> Value {
    let seen = khai.log_len();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
    )
    .await
    .unwrap();
    let mut fields = reconciled(name);
    fields["object.reason"] = json!("object updated");
    khai.wait_for_json_log(seen, "the reconcile after the label change", fields)
        .await
}

/// `applied`, `unchanged`, `pruned` and `status_written` of a reconcile's JSON log line.
fn outcome(line: &Value) -> [&Value; 4] {
    ["applied", "unchanged", "pruned", "status_written"].map(|k| &line[k])
}

/// One ConfigMap per `spec.count`, named `<name>-<i>`; throws when `spec.message` is "boom".
const WIDGET: &str = r#"
fn reconcile(obj, ctx) {
    if obj.spec.message == "boom" { throw "widget exploded: " + obj.metadata.name; }
    if obj.spec.message == "spin" { loop { } }
    if obj.spec.message == "huge" { let s = "x"; loop { s += s; } }
    let children = [];
    for i in 0..obj.spec.count {
        children.push(#{ apiVersion: "v1", kind: "ConfigMap",
                         metadata: #{ name: `${obj.metadata.name}-${i}` },
                         data: #{ index: `${i}`, message: obj.spec.message } });
    }
    #{ children: children, status: #{ phase: "Ready" } }
}
"#;

fn widgets(client: &kube::Client, group: &str, ns: &str) -> Api<DynamicObject> {
    crate::support::custom_api(client, ns, group, "Widget", "widgets")
}

async fn create_widget(api: &Api<DynamicObject>, group: &str, name: &str, spec: serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": name }, "spec": spec,
    }))
    .unwrap();
    // khai installs the CRD when it starts; the harness waits for it to be Established.
    let crd = format!("widgets.{group}");
    crate::support::wait_for_crd(&api.clone().into_client(), &crd).await;
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create widget {name}: {e}"));
}

fn ready(o: Option<&DynamicObject>) -> bool {
    o.is_some_and(|o| o.data["status"]["phase"] == "Ready")
}

#[tokio::test]
async fn children_no_longer_desired_are_pruned_and_nothing_else_is_touched() {
    let group = "prune.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "prune").await;
    let op = operator(group, WIDGET);
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let cms = configmaps(&client, &ns.name);
    // A bystander with khai's labels but no ownerReference must survive pruning.
    let bystander: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "w-9", "labels": { "app.kubernetes.io/managed-by": "khai" } },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &bystander)
        .await
        .unwrap();

    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 3 })).await;
    for i in 0..3 {
        crate::support::wait_exists(&cms, &format!("w-{i}"), "child ConfigMap").await;
    }
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "count": 1 } })),
    )
    .await
    .unwrap();
    for i in 1..3 {
        crate::support::wait_until_gone(
            &cms,
            &format!("w-{i}"),
            "pruning of the child no longer desired",
        )
        .await;
    }
    assert!(
        cms.get_opt("w-0").await.unwrap().is_some(),
        "the still-desired child was deleted"
    );
    assert!(
        cms.get_opt("w-9").await.unwrap().is_some(),
        "a bystander was deleted"
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn a_child_deleted_by_someone_else_is_recreated() {
    let group = "recreate.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "recreate").await;
    let op = operator(group, WIDGET);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 1 })).await;
    let cms = configmaps(&client, &ns.name);
    let first = crate::support::wait_exists(&cms, "w-0", "child ConfigMap").await;
    cms.delete("w-0", &DeleteParams::default()).await.unwrap();
    let first_uid = first.metadata.uid.clone();
    wait_for(
        &cms,
        "w-0",
        "the deleted child to be recreated",
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.metadata.uid != first_uid),
    )
    .await;
}

#[tokio::test]
async fn a_steady_state_reconcile_writes_nothing() {
    let group = "steady.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "steady").await;
    let op = operator(group, WIDGET);
    let khai = start_json(&op, &ns.name);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 2 })).await;
    let w = wait_for(&api, "w", "the Widget to be Ready", ready).await;
    let cms = configmaps(&client, &ns.name);
    let before = wait_for(&cms, "w-1", "child", |o: Option<&DynamicObject>| {
        o.is_some()
    })
    .await;
    // A label change passes the change filter and triggers a reconcile whose plan equals what
    // is already stored.
    let line = poke(&api, "w", &khai).await;
    assert_eq!(
        outcome(&line),
        [&json!(0), &json!(2), &json!(0), &json!(false)],
        "{line}"
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let after = cms.get("w-1").await.unwrap();
    assert_eq!(
        before.metadata.resource_version, after.metadata.resource_version,
        "child rewritten"
    );
    let w2 = api.get("w").await.unwrap();
    assert_eq!(w.data["status"], w2.data["status"], "status rewritten");
}

#[tokio::test]
async fn a_failing_script_fails_only_its_object_with_a_condition_and_an_event() {
    let group = "fail.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fail").await;
    let op = operator(group, WIDGET);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "bad", json!({ "message": "boom" })).await;
    create_widget(&api, group, "spinning", json!({ "message": "spin" })).await;
    create_widget(&api, group, "huge", json!({ "message": "huge" })).await;
    create_widget(&api, group, "good", json!({})).await;
    let good = wait_for(&api, "good", "the good Widget to be Ready", ready).await;
    assert_eq!(good.data["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(good.data["status"]["conditions"][0]["status"], "True");
    let bad = wait_for(
        &api,
        "bad",
        "a Ready=False condition on the bad Widget",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["conditions"][0]["status"] == "False")
        },
    )
    .await;
    let msg = bad.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        msg.contains("widget.rhai:3:") && msg.contains("widget exploded: bad"),
        "{msg}"
    );
    assert_eq!(
        bad.data["status"]["conditions"][0]["reason"],
        "ReconcileFailed"
    );
    assert_eq!(bad.data["status"]["conditions"][1]["type"], "Failed");
    assert_eq!(bad.data["status"]["conditions"][1]["status"], "True");

    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(
        events,
        "a ReconcileFailed Warning event for the bad Widget",
        |e| {
            e.reason.as_deref() == Some("ReconcileFailed")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                && e.type_.as_deref() == Some("Warning")
        },
    )
    .await;
}

#[tokio::test]
async fn finalize_holds_deletion_until_it_returns_true() {
    let group = "finalize.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "finalize").await;
    let script = format!("{WIDGET}\nfn finalize(obj, ctx) {{ obj.spec.release }}\n");
    let op = operator(group, &script);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({})).await;
    wait_for(
        &api,
        "w",
        "khai's finalizer",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "khai.dev/widgets")
            })
        },
    )
    .await;
    api.delete("w", &DeleteParams::default()).await.unwrap();
    let held = wait_for(
        &api,
        "w",
        "deletion to start",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.metadata.deletion_timestamp.is_some()),
    )
    .await;
    assert!(
        held.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "khai.dev/widgets")
    );
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "release": true } })),
    )
    .await
    .unwrap();
    crate::support::wait_until_gone(
        &api,
        "w",
        "the Widget to go away once finalize returns true",
    )
    .await;
}

#[tokio::test]
async fn filters_select_objects_by_label_annotation_and_script_predicate() {
    let group = "filter.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "filter").await;
    let script = format!("{WIDGET}\nfn wanted(obj) {{ obj.spec.message != \"skip\" }}\n");
    let extra = "selector = \"team=a\"\nannotations = [\"khai.dev/enabled\"]\nwhen = \"wanted\"";
    let op = operator_with(group, &script, extra);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    let meta = |labels: serde_json::Value, ann: serde_json::Value| json!({ "labels": labels, "annotations": ann });
    let on = json!({ "khai.dev/enabled": "" });
    for (name, m, spec) in [
        (
            "chosen",
            meta(json!({ "team": "a" }), on.clone()),
            json!({}),
        ),
        (
            "other-team",
            meta(json!({ "team": "b" }), on.clone()),
            json!({}),
        ),
        (
            "no-annotation",
            meta(json!({ "team": "a" }), json!({})),
            json!({}),
        ),
        (
            "predicate-says-no",
            meta(json!({ "team": "a" }), on.clone()),
            json!({ "message": "skip" }),
        ),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": { "name": name, "labels": m["labels"], "annotations": m["annotations"] }, "spec": spec,
        }))
        .unwrap();
        if name == "chosen" {
            crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
        }
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
    wait_for(&api, "chosen", "the selected Widget to be Ready", ready).await;
    // The unselected ones were created before "chosen" was reconciled and share its watch
    // stream, so had khai meant to touch them it would have by now.
    for name in ["other-team", "no-annotation", "predicate-says-no"] {
        let o = api.get(name).await.unwrap();
        assert!(
            o.data.get("status").is_none_or(|s| s.is_null()),
            "{name} was reconciled: {:?}",
            o.data["status"]
        );
        assert!(
            configmaps(&client, &ns.name)
                .get_opt(&format!("{name}-0"))
                .await
                .unwrap()
                .is_none(),
            "{name} got a child"
        );
    }
}

#[tokio::test]
async fn a_watched_object_retriggers_the_parent_it_names_and_is_visible_through_ctx() {
    let group = "watch.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "watch").await;
    // The child copies data from a Secret-like ConfigMap "<name>-source" that the Widget watches
    // through the label `widget`, looked up from the cache with ctx.get.
    let script = r#"
fn reconcile(obj, ctx) {
    let src = ctx.get("ConfigMap", obj.metadata.name + "-source");
    let value = if src == () { "none" } else { src.data.value };
    #{ children: [#{ apiVersion: "v1", kind: "Secret", metadata: #{ name: obj.metadata.name + "-copy" },
                      stringData: #{ value: value } }],
       status: #{ phase: "Ready" } }
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "watchers"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.message = {{ type = "string", default = "ok" }}
status.phase = {{ type = "string" }}

[[controller]]
for = "Widget"
owns = ["v1/Secret"]
script = "widget.rhai"
watches = [{{ kind = "v1/ConfigMap", label = "widget" }}]
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script).unwrap();
    let _khai = Khai::start(dir.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({})).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let value = |s: &k8s_openapi::api::core::v1::Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    let first = crate::support::wait_for_any(secrets.clone(), "the copy Secret", |s| {
        s.metadata.name.as_deref() == Some("w-copy")
    })
    .await;
    assert_eq!(value(&first).as_deref(), Some("none"));
    let source: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "w-source", "labels": { "widget": "w" } }, "data": { "value": "from-source" },
    }))
    .unwrap();
    configmaps(&client, &ns.name)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    crate::support::wait_for_any(
        secrets,
        "the copy to follow the watched ConfigMap",
        move |s| {
            s.metadata.name.as_deref() == Some("w-copy")
                && value(s).as_deref() == Some("from-source")
        },
    )
    .await;
}

/// A watch's `map(obj, ctx)` gets `ctx`, so it can find the parents that name the
/// related object through the cache (`ctx.list`) instead of needing a label on it.
#[tokio::test]
async fn a_watch_map_with_ctx_finds_the_parents_that_name_the_object() {
    let group = "mapctx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "mapctx").await;
    let script = r#"
fn reconcile(obj, ctx) {
    let src = ctx.get("ConfigMap", obj.spec.message);
    let value = if src == () { "none" } else { src.data.value };
    #{ children: [#{ apiVersion: "v1", kind: "Secret", metadata: #{ name: obj.metadata.name + "-copy" },
                      stringData: #{ value: value } }] }
}
fn readers(cm, ctx) {
    ctx.list("Widget").filter(|w| w.spec.message == cm.metadata.name).map(|w| w.metadata.name)
}
"#;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "mapctx"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.message = {{ type = "string", default = "ok" }}

[[controller]]
for = "Widget"
owns = ["v1/Secret"]
script = "widget.rhai"
watches = [{{ kind = "v1/ConfigMap", map = "readers" }}]
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script).unwrap();
    let _khai = Khai::start(dir.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "a", json!({ "message": "shared" })).await;
    create_widget(&api, group, "b", json!({ "message": "shared" })).await;
    create_widget(&api, group, "c", json!({ "message": "other" })).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let value = |s: &k8s_openapi::api::core::v1::Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    for name in ["a-copy", "b-copy", "c-copy"] {
        crate::support::wait_for_any(secrets.clone(), "each copy Secret", move |s| {
            s.metadata.name.as_deref() == Some(name)
        })
        .await;
    }
    let source: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "shared" }, "data": { "value": "from-shared" },
    }))
    .unwrap();
    configmaps(&client, &ns.name)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    for name in ["a-copy", "b-copy"] {
        crate::support::wait_for_any(
            secrets.clone(),
            "the readers' copies to follow the ConfigMap they name",
            move |s| {
                s.metadata.name.as_deref() == Some(name)
                    && value(s).as_deref() == Some("from-shared")
            },
        )
        .await;
    }
    let c = secrets.get("c-copy").await.unwrap();
    assert_eq!(
        value(&c).as_deref(),
        Some("none"),
        "c names another ConfigMap"
    );
}

#[tokio::test]
async fn retry_and_fail_from_a_script_are_reported_as_asked() {
    let group = "retry.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "retry").await;
    let script = r#"
fn reconcile(obj, ctx) {
    if obj.spec.message == "fail" { fail("spec.message may not be fail"); }
    if obj.spec.message == "wait" { retry("waiting for something", "1h"); }
    #{ status: #{ phase: "Ready" }, events: [#{ type: "Normal", reason: "Greeted", message: "hello " + obj.metadata.name }] }
}
"#;
    let op = operator(group, script);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "failing", json!({ "message": "fail" })).await;
    create_widget(&api, group, "waiting", json!({ "message": "wait" })).await;
    create_widget(&api, group, "fine", json!({})).await;
    let cond = |reason: &'static str| {
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["conditions"][0]["reason"] == reason)
        }
    };
    let failing = wait_for(&api, "failing", "a Failed condition", cond("Failed")).await;
    assert_eq!(failing.data["status"]["conditions"][0]["status"], "False");
    assert!(
        failing.data["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .ends_with("spec.message may not be fail")
    );
    wait_for(
        &api,
        "waiting",
        "a RetryRequested condition",
        cond("RetryRequested"),
    )
    .await;
    wait_for(&api, "fine", "the fine Widget to be Ready", ready).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let greeted = crate::support::wait_for_any(events, "the script's Greeted event", |e| {
        e.reason.as_deref() == Some("Greeted")
    })
    .await;
    assert_eq!(greeted.note.as_deref(), Some("hello fine"));
    assert_eq!(greeted.type_.as_deref(), Some("Normal"));
}

#[tokio::test]
async fn a_secret_child_written_with_string_data_is_not_rewritten_when_unchanged() {
    let group = "secrets.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "secret-steady").await;
    let script = r#"
fn reconcile(obj, ctx) {
    #{ children: [#{ apiVersion: "v1", kind: "Secret", metadata: #{ name: `${obj.metadata.name}-creds` },
                     stringData: #{ password: `pw-${obj.spec.count}` } }],
       status: #{ phase: "Ready" } }
}
"#;
    let op = operator(group, script);
    let toml = op.path().join("operator.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text.replace(r#"owns = ["v1/ConfigMap"]"#, r#"owns = ["v1/Secret"]"#),
    )
    .unwrap();
    let khai = start_json(&op, &ns.name);
    let addr = khai.metrics_addr().await;
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 7 })).await;
    wait_for(&api, "w", "the Widget to be Ready", ready).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Secret"), "secrets");
    let secrets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let stored = crate::support::wait_exists(&secrets, "w-creds", "the Secret child").await;
    assert_eq!(
        stored.data["data"]["password"], "cHctNw==",
        "base64 of pw-7"
    );
    let line = poke(&api, "w", &khai).await;
    assert_eq!(outcome(&line)[..2], [&json!(0), &json!(1)], "{line}");
    // One write over the Secret's life: the reconcile its own creation event triggered saw it
    // as already stored. Children are counted before their reconcile logs it.
    let body = crate::support::metrics::http_get(&addr, "/metrics").await.1;
    let applied = crate::support::metrics::sum(&body, "khai_children_applied_total");
    assert_eq!(applied, 1.0, "the Secret was applied {applied} times");
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

/// khai deleted its finalizer only through `finalize`. Once the script no longer
/// defined it (an edit, a reload), objects carrying the finalizer hung on deletion for ever.
#[tokio::test]
async fn a_finalizer_no_script_needs_any_more_is_removed_and_deletion_completes() {
    let group = "unfinalize.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unfinalize").await;
    let op = operator(
        group,
        &format!("{WIDGET}\nfn finalize(obj, ctx) {{ false }}\n"),
    );
    let khai = Khai::start(op.path(), &ns.name, &["--watch"]);
    let addr = khai.metrics_addr().await;
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({})).await;
    let has_finalizer = |o: &DynamicObject| {
        o.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "khai.dev/widgets")
    };
    wait_for(
        &api,
        "w",
        "khai's finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(has_finalizer),
    )
    .await;
    // The new version of the script has no finalize: nothing needs the finalizer now.
    std::fs::write(op.path().join("widget.rhai"), WIDGET).unwrap();
    wait_for_reloads(&addr, "success", 1.0).await;
    wait_for(
        &api,
        "w",
        "khai to remove its finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(|o| !has_finalizer(o)),
    )
    .await;
    api.delete("w", &DeleteParams::default()).await.unwrap();
    crate::support::wait_until_gone(&api, "w", "the Widget to be deleted").await;
}

/// A child pruned before a reconcile had succeeded after creating it was never created
/// again (the log said `applied=0 unchanged=1` while the child did not exist), and the failure
/// that started it reached the object as a Rust debug dump of the API server's answer.
#[tokio::test]
async fn a_child_pruned_before_a_successful_reconcile_is_created_again_when_wanted() {
    let group = "reprune.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reprune").await;
    // With `release`, a second child whose name the API server refuses follows the first, so
    // the reconcile fails right after creating `<name>-0`.
    let script = r#"
fn reconcile(obj, ctx) {
    let children = [];
    for i in 0..obj.spec.count {
        children.push(#{ apiVersion: "v1", kind: "ConfigMap",
                         metadata: #{ name: `${obj.metadata.name}-${i}` }, data: #{ index: `${i}` } });
    }
    if obj.spec.release {
        children.push(#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: "Not_A_Name" } });
    }
    #{ children: children, status: #{ phase: "Ready" } }
}
"#;
    let op = operator(group, script);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 1, "release": true })).await;
    crate::support::wait_exists(&cms, "w-0", "the first child").await;
    let failed = wait_for(
        &api,
        "w",
        "the Failed condition",
        |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"))
        },
    )
    .await;
    let message = failed.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("failed to apply child ConfigMap Not_A_Name")
            && message.contains("(Invalid, 422)"),
        "the API server's words: {message}"
    );
    for dump in ["Status {", "ErrorResponse", "Some(", "ApiError"] {
        assert!(!message.contains(dump), "debug dump in {message:?}");
    }
    // No child wanted: w-0 is pruned. Wanted again, exactly as before: it is created again.
    let spec = |count: i64| Patch::Merge(json!({ "spec": { "count": count, "release": false } }));
    api.patch("w", &PatchParams::default(), &spec(0))
        .await
        .unwrap();
    crate::support::wait_until_gone(&cms, "w-0", "the pruned child").await;
    api.patch("w", &PatchParams::default(), &spec(1))
        .await
        .unwrap();
    crate::support::wait_exists(&cms, "w-0", "the child, wanted again").await;
}

/// A reconcile that bumped a label on its own child ran 200 reconciles and 200 writes
/// a second. khai pauses such an object, longer each time, says so, and leaves others alone.
#[tokio::test]
async fn an_object_whose_reconciles_keep_writing_is_paused_and_others_go_on() {
    let group = "hotloop.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "hotloop").await;
    let script = r#"
fn reconcile(obj, ctx) {
    let n = 0;
    if obj.spec.message == "loop" {
        for cm in ctx.owned("ConfigMap") { n = parse_int(cm.metadata?.labels?.n ?? "0") + 1; }
    }
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap",
                     metadata: #{ name: `${obj.metadata.name}-child`, labels: #{ n: `${n}` } } }],
       status: #{ phase: "Ready" } }
}
"#;
    let op = operator(group, script);
    let khai = start_json(&op, &ns.name);
    let api = widgets(&client, group, &ns.name);
    let start = crate::support::audit::mark();
    create_widget(&api, group, "hot", json!({ "message": "loop" })).await;
    // A pause is the only line with a cooldown.
    let pauses = khai
        .wait_for_json_logs_where(0, "two pauses of the looping object", 2, |l| {
            l["name"] == "hot" && l.get("cooldown").is_some()
        })
        .await;
    assert_eq!(pauses[0]["cooldown"], "5s", "{}", pauses[0]);
    assert_eq!(pauses[1]["cooldown"], "10s", "doubled: {}", pauses[1]);
    let child_writes = crate::support::audit::writes(start, |e| {
        e["objectRef"]["name"] == "hot-child" && e["objectRef"]["namespace"] == ns.name.as_str()
    });
    let n: u64 = child_writes.values().sum();
    assert!(
        n <= 2 * 11 + 2,
        "the loop went on at full speed: {n} writes before the second pause"
    );
    // Another object of the same controller is reconciled meanwhile.
    create_widget(&api, group, "calm", json!({})).await;
    wait_for(&api, "calm", "the calm Widget to be Ready", ready).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(events, "a HotLoop Warning event for the hot Widget", |e| {
        e.reason.as_deref() == Some("HotLoop")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("hot")
            && e.type_.as_deref() == Some("Warning")
    })
    .await;
    // Each pause is counted: two pauses so far, so the metric shows at least two.
    let addr = khai.metrics_addr().await;
    let body = crate::support::metrics::metrics_until(&addr, "khai_hot_loops_total", |b| {
        crate::support::metrics::sum(b, "khai_hot_loops_total") >= 2.0
    })
    .await;
    assert!(
        body.lines()
            .any(|l| l.starts_with("khai_hot_loops_total{") && l.contains("controller=")),
        "khai_hot_loops_total has no controller label:\n{body}"
    );
}

/// A loop through the script's own `k8s::` write (a label it bumps on its object every time)
/// triggers the object as surely as a child does: khai pauses it the same way, instead of
/// letting it take every request the API server will answer.
#[tokio::test]
async fn an_object_whose_script_keeps_writing_itself_through_k8s_is_paused() {
    let group = "selfloop.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "selfloop").await;
    let script = r#"
fn reconcile(obj, ctx) {
    let n = parse_int(obj.metadata?.labels?.bump ?? "0");
    k8s::label(obj, #{ bump: `${n + 1}` });
    #{ status: #{ phase: "Ready" } }
}
"#;
    let op = operator_with(group, script, "");
    let toml = std::fs::read_to_string(op.path().join("operator.toml")).unwrap();
    let toml = toml.replacen(
        "name = \"widgets\"\n",
        "name = \"widgets\"\nuses = [{ kind = \"Widget\", verbs = [\"patch\"] }]\n",
        1,
    );
    std::fs::write(op.path().join("operator.toml"), toml).unwrap();
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    let start = crate::support::audit::mark();
    create_widget(&api, group, "hot", json!({})).await;
    let addr = khai.metrics_addr().await;
    crate::support::metrics::metrics_until(&addr, "a pause of the self-writing Widget", |b| {
        crate::support::metrics::sum(b, "khai_hot_loops_total") >= 1.0
    })
    .await;
    let writes = crate::support::audit::writes(start, |e| {
        e["objectRef"]["name"] == "hot" && e["objectRef"]["namespace"] == ns.name.as_str()
    });
    let n: u64 = writes.values().sum();
    assert!(
        n <= 2 * (11 + 2),
        "the loop went on at full speed: {n} writes of the Widget before its pause"
    );
}

/// The reconciles of widget `name` khai (logging JSON) has logged so far, and their reasons.
fn reconciles_of(khai: &Khai, name: &str) -> Vec<Value> {
    khai.tail(usize::MAX)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "reconciled" && l["name"] == name)
        .collect()
}

/// The watch event of the child khai had just applied came back to its parent and
/// cost a second reconcile that had nothing to do (3 reconciles here, not 2). A create of a
/// simple parent (one child and a status, a script that reads nothing but its object) is one
/// reconcile; the label change after it is the second, and the last.
#[tokio::test]
async fn khais_own_child_write_does_not_trigger_its_parent_again() {
    let group = "echo.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "echo").await;
    let op = operator(group, WIDGET);
    let khai = start_json(&op, &ns.name);
    let api = widgets(&client, group, &ns.name);
    let start = crate::support::audit::mark();
    create_widget(&api, group, "w", json!({ "count": 1 })).await;
    wait_for(&api, "w", "the Widget to be Ready", ready).await;
    // khai logs the reconcile after its status write.
    khai.wait_for_json_log(0, "the first reconcile", reconciled("w"))
        .await;
    // The label change is queued behind anything the create set off: its reconcile is the
    // last one before the count is read.
    let line = poke(&api, "w", &khai).await;
    assert_eq!(outcome(&line)[..2], [&json!(0), &json!(1)], "{line}");
    let addr = khai.metrics_addr().await;
    let body = crate::support::metrics::metrics_until(&addr, "two reconciles", |b| {
        crate::support::metrics::sum(b, "controller_runtime_reconcile_total") >= 2.0
    })
    .await;
    let runs = reconciles_of(&khai, "w");
    assert_eq!(
        crate::support::metrics::sum(&body, "controller_runtime_reconcile_total"),
        2.0,
        "the create cost more than one reconcile: {runs:#?}"
    );
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(
        runs.iter().all(|l| l["object.reason"] == "object updated"),
        "khai's own child write triggered its parent: {runs:#?}"
    );
    let writes = crate::support::audit::writes(start, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && (e["objectRef"]["name"] == "w-0" || e["objectRef"]["name"] == "w")
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    });
    assert_eq!(
        crate::support::audit::total(&writes),
        2,
        "one child apply and one status write: {writes:?}"
    );
    assert!(
        crate::support::metrics::sum(&body, "khai_echo_skips_total") >= 1.0,
        "the skipped echo is not counted:\n{body}"
    );
}

/// A script that reads its own child (here its uid, which the API server assigns, into
/// status) needs the child's watch event after khai created it: only then can it see the child.
/// Skipping khai's own echoes must not skip this one.
#[tokio::test]
async fn a_script_that_reads_its_child_is_reconciled_again_when_the_child_appears() {
    let group = "readback.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "readback").await;
    let script = r#"
fn reconcile(obj, ctx) {
    let name = `${obj.metadata.name}-0`;
    let child = ctx.get("ConfigMap", name);
    let phase = if type_of(child) == "()" { "Pending" } else { child.metadata.uid };
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: name },
                     data: #{ index: "0" } }],
       status: #{ phase: phase } }
}
"#;
    let op = operator(group, script);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({})).await;
    let cms = configmaps(&client, &ns.name);
    let child = crate::support::wait_exists(&cms, "w-0", "the child").await;
    let uid = child.metadata.uid.clone().unwrap_or_default();
    wait_for(
        &api,
        "w",
        "the child's uid in status, from the reconcile its creation triggers",
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["phase"] == uid.as_str())
        },
    )
    .await;
}

/// A child someone else edits right after khai wrote it carries another resourceVersion: it
/// still triggers the parent, and the edit is reverted.
#[tokio::test]
async fn a_child_edited_right_after_khais_write_is_reverted() {
    let group = "drift.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "drift").await;
    let op = operator(group, WIDGET);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", json!({ "count": 1 })).await;
    let cms = configmaps(&client, &ns.name);
    let first = crate::support::wait_exists(&cms, "w-0", "child ConfigMap").await;
    let edited = cms
        .patch(
            "w-0",
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { "message": "tampered" } })),
        )
        .await
        .unwrap();
    assert_ne!(
        first.metadata.resource_version,
        edited.metadata.resource_version
    );
    let rv = edited.metadata.resource_version.clone();
    wait_for(
        &cms,
        "w-0",
        "the edit to be reverted",
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.data["data"]["message"] == "ok" && o.metadata.resource_version != rv
            })
        },
    )
    .await;
}
