//! End to end against a real kube-apiserver: scripts' side effects through the `k8s` module
//! (every verb, the error values a script catches, the message of one it does not), budgets,
//! the client rate limit, and inline attempts that leave for the pool before their first call.

use crate::support::metrics::{metrics_until, sample};
use crate::support::{
    Khai, TestNamespace, audit, configmaps, create_widget, reconciled, wait_for, widgets,
};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use tempfile::TempDir;

/// An operator with a namespaced `Widget` (whose controller runs `script`) and a `Gadget` with a
/// status, in `group`; `extra` is appended to the `[[controller]]` table, `operator` to
/// `[operator]`.
fn operator(group: &str, script: &str, operator: &str, extra: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "fx-{tag}"
{operator}

{widget}
[[crd]]
group = "{group}"
kind = "Gadget"
versions = ["v1"]
spec.size = {{ type = "integer", default = 1 }}
status.note = {{ type = "string" }}

[[controller]]
for = "Widget"
script = "widget.rhai"
{extra}
"#,
        tag = group.split('.').next().unwrap_or("x"),
        widget = crate::support::widget_crd(group),
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script).unwrap();
    dir
}

fn phase(o: &DynamicObject) -> String {
    o.data["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every verb and every error value, each result written into the status as `verb:result`.
const EVERY_VERB: &str = r#"
fn reconcile(obj, ctx) {
    let ns = obj.metadata.namespace;
    let out = [];
    out.push("get-missing:" + type_of(k8s::get("v1/ConfigMap", ns, "absent")));
    try { k8s::delete("v1/ConfigMap", ns, "made"); } catch (e) { out.push("cleanup:" + e.reason); }
    let made = k8s::create(#{ apiVersion: "v1", kind: "ConfigMap",
                              metadata: #{ name: "made", namespace: ns }, data: #{ a: "1" } });
    out.push("create:" + made.data.a);
    try {
        k8s::create(#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: "made", namespace: ns } });
    } catch (e) { out.push("create-again:" + e.reason + "/" + e.code); }
    let applied = k8s::apply(#{ apiVersion: "v1", kind: "ConfigMap",
                                metadata: #{ name: "applied", namespace: ns }, data: #{ b: "2" } });
    out.push("apply:" + applied.data.b);
    out.push("get:" + k8s::get("v1/ConfigMap", ns, "made").data.a);
    made = k8s::patch(made, #{ data: #{ c: "3" } });
    out.push("merge-patch:" + made.data.c);
    made = k8s::patch("v1/ConfigMap", ns, "made", [#{ op: "add", path: "/data/d", value: "4" }]);
    out.push("json-patch:" + made.data.d);
    made = k8s::label(made, #{ tier: "x" });
    made = k8s::annotate(made, #{ note: "y" });
    out.push("label:" + made.metadata.labels.tier + made.metadata.annotations.note);
    out.push("list-labels:" + k8s::list("v1/ConfigMap", #{ namespace: ns, labels: #{ tier: "x" } }).len());
    out.push("list-fields:" + k8s::list("ConfigMap", #{ namespace: ns, fields: "metadata.name=applied" }).len());
    let adopted = k8s::adopt(applied, obj);
    out.push("adopt:" + adopted.metadata.ownerReferences[0].name);
    let g = k8s::apply(#{ apiVersion: obj.apiVersion.split("/")[0] + "/v1", kind: "Gadget",
                          metadata: #{ name: "g", namespace: ns }, spec: #{ size: 2 } });
    g = k8s::patch_status("Gadget", ns, "g", #{ status: #{ note: "noted" } });
    out.push("patch-status:" + g.status.note);
    k8s::patch_metadata(obj, #{ labels: #{ seen: "yes" } });
    try {
        k8s::delete(made, #{ resource_version: "1" });
    } catch (e) { out.push("stale-delete:" + e.reason); }
    try {
        k8s::patch("v1/ConfigMap", ns, "absent", #{ data: #{ x: "1" } });
    } catch (e) { out.push("patch-missing:" + e.reason); }
    try {
        k8s::create(#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: "Not_A_Name", namespace: ns } });
    } catch (e) { out.push("bad-name:" + e.reason); }
    try { k8s::get("v1/Nothing", ns, "x"); } catch (e) { out.push("bad-kind:" + e.reason); }
    out.push("delete:" + k8s::delete(made, #{ uid: made.metadata.uid }));
    out.push("delete-again:" + k8s::delete("v1/ConfigMap", ns, "made"));
    #{ status: #{ phase: out.reduce(|s, x| if s == () { x } else { s + " " + x }) } }
}
"#;

#[tokio::test]
async fn every_k8s_verb_works_and_each_error_arrives_as_a_value() {
    let group = "verbs.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-verbs").await;
    let op = operator(group, EVERY_VERB, "", "");
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", "ok").await;
    let w = wait_for(
        &api,
        "w",
        "the widget's status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| !phase(o).is_empty()),
    )
    .await;
    let got = phase(&w);
    let want = "get-missing:() create:1 create-again:already_exists/409 apply:2 get:1 \
                merge-patch:3 json-patch:4 label:xy list-labels:1 list-fields:1 adopt:w \
                patch-status:noted stale-delete:conflict patch-missing:not_found \
                bad-name:invalid bad-kind:unknown_kind delete:true delete-again:false";
    // The first reconcile finds no "made" to clean up; a later one may.
    let got = got.replace("cleanup:", "").to_string();
    assert_eq!(
        got.split(' ')
            .filter(|s| !s.starts_with("not_found") && !s.is_empty())
            .collect::<Vec<_>>(),
        want.split_whitespace().collect::<Vec<_>>(),
        "status: {got}"
    );
    assert_eq!(w.metadata.labels.as_ref().unwrap()["seen"], "yes");
    // `applied` stays, controlled by the widget.
    let applied = configmaps(&client, &ns.name).get("applied").await.unwrap();
    let owner = &applied.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.name.as_str(), owner.controller), ("w", Some(true)));
}

#[tokio::test]
async fn an_uncaught_api_error_fails_the_reconcile_with_verb_kind_object_and_message_at_the_line() {
    let group = "uncaught.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-uncaught").await;
    let script = "fn reconcile(obj, ctx) {\n    k8s::patch(\"v1/ConfigMap\", obj.metadata.namespace, \"absent\", #{ data: #{ x: \"1\" } });\n    #{}\n}\n";
    let op = operator(group, script, "", "");
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", "ok").await;
    let want = format!(
        "in reconcile: k8s::patch v1/ConfigMap {}/absent: configmaps \"absent\" not found (not_found, 404)",
        ns.name
    );
    let line = khai
        .wait_for_log(0, "the reconcile's error", move |l| l.contains("absent"))
        .await;
    assert!(line.contains(&want), "want {want} in {line}");
    assert!(line.contains("widget.rhai:2:"), "the script line in {line}");
}

/// Loops on API calls (deletes, which the audit log counts): each widget's reconcile is stopped at its budget of 5 calls.
const LOOPING: &str = r#"
fn reconcile(obj, ctx) {
    if obj.spec.message == "loop" {
        loop { k8s::delete("v1/ConfigMap", obj.metadata.namespace, "anything"); }
    }
    #{ status: #{ phase: "Ready" } }
}
"#;

#[tokio::test]
async fn a_script_looping_on_api_calls_stops_at_its_budget_backs_off_and_others_reconcile() {
    let group = "budget.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-budget").await;
    let op = operator(
        group,
        LOOPING,
        "",
        "budget = { calls = 5, time = \"10s\" }\nbackoff = { base = \"2s\", cap = \"1m\" }",
    );
    let mark = audit::mark();
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "looping", "loop").await;
    create_widget(&api, group, "fine", "ok").await;
    wait_for(
        &api,
        "fine",
        "the other widget to reconcile",
        |o: Option<&DynamicObject>| o.is_some_and(|o| phase(o) == "Ready"),
    )
    .await;
    let line = khai
        .wait_for_log(0, "the budget error", |l| {
            l.contains("k8s::delete: this call's budget of 5 API and HTTP calls is used up")
        })
        .await;
    assert!(line.contains("widget.rhai:4:"), "{line}");
    // Backing off: the second attempt comes after the backoff's base (2 s), and each attempt
    // made at most its 5 calls.
    let failed = khai
        .wait_for_logs(0, "a second failed reconcile", 2, |l| {
            l.contains("budget of 5 API and HTTP calls")
        })
        .await;
    let at = |l: &str| {
        l.split_whitespace()
            .next()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .unwrap()
    };
    let gap = at(&failed[1]).duration_since(at(&failed[0])).as_secs_f64();
    assert!(gap >= 1.5, "retried after {gap:.2}s: no backoff");
    let calls = count_requests(mark, &ns.name, "delete", "configmaps");
    let failures = khai.tail(10_000).matches("budget of 5 API").count() as u64;
    assert!(
        calls <= 5 * failures,
        "{calls} calls for {failures} failed reconciles"
    );
}

#[tokio::test]
async fn a_script_out_of_time_is_stopped_naming_its_time_budget() {
    let group = "time.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-time").await;
    // At 2 requests a second, 2 s of budget runs out long before 10,000 calls.
    let op = operator(
        group,
        LOOPING,
        "qps = 2\nburst = 1",
        "budget = { calls = 10000, time = \"2s\" }",
    );
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "looping", "loop").await;
    let line = khai
        .wait_for_log(0, "the time budget error", |l| {
            l.contains("reconcile failed") && l.contains("time budget")
        })
        .await;
    assert!(line.contains("2s"), "{line}");
}

/// Requests khai sent since `mark` for `verb` on `resource` in `ns`, from the audit log.
fn count_requests(mark: audit::Mark, ns: &str, verb: &str, resource: &str) -> u64 {
    audit::entries(mark, |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["namespace"] == ns
            && e["objectRef"]["resource"] == resource
            && e["verb"] == verb
    })
    .len() as u64
}

#[tokio::test]
async fn a_call_made_in_an_inline_attempt_is_made_once() {
    let group = "inline.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-inline").await;
    // A short script: it starts as an inline attempt on an async worker.
    let script = r#"
fn reconcile(obj, ctx) {
    k8s::create(#{ apiVersion: "v1", kind: "ConfigMap",
                   metadata: #{ name: obj.metadata.name + "-once", namespace: obj.metadata.namespace } });
    #{ status: #{ phase: "Ready" } }
}
"#;
    let op = operator(group, script, "", "");
    let mark = audit::mark();
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "w", "ok").await;
    wait_for(
        &api,
        "w",
        "the widget to reconcile",
        |o: Option<&DynamicObject>| o.is_some_and(|o| phase(o) == "Ready"),
    )
    .await;
    audit::wait_for_entry(mark, "the create", |e| {
        e["objectRef"]["name"] == "w-once" && e["verb"] == "create"
    })
    .await;
    assert_eq!(count_requests(mark, &ns.name, "create", "configmaps"), 1);
}

fn pods(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Pod"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A Pod (it never runs: the test cluster has no kubelet) with `labels`.
async fn create_pod(api: &Api<DynamicObject>, name: &str, labels: serde_json::Value) {
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
}

fn label_is(o: Option<&DynamicObject>, key: &str, value: Option<&str>) -> bool {
    o.is_some_and(|o| {
        o.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .map(String::as_str)
            == value
    })
}

#[tokio::test]
async fn label_propagation_example_labels_the_pods_that_name_it_and_only_those() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-labels").await;
    let example = crate::support::repo_root().join("examples/kopf/labels");
    let khai = Khai::start(&example, &ns.name, &[]);
    let pods = pods(&client, &ns.name);
    let selector = "kopf.khai.dev/example";
    create_pod(&pods, "named", json!({ selector: "kopf-example-1" })).await;
    create_pod(&pods, "other", json!({ selector: "someone-else" })).await;
    crate::support::wait_for_crd(&client, "kopfexamples.labels.kopf.khai.dev").await;
    let examples = crate::support::custom_api(
        &client,
        &ns.name,
        "labels.kopf.khai.dev",
        "KopfExample",
        "kopfexamples",
    );
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(example.join("kopfexample.yaml")).unwrap())
            .unwrap();
    examples
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    wait_for(
        &pods,
        "named",
        "the example's label on its Pod",
        |o: Option<&DynamicObject>| label_is(o, "somelabel", Some("somevalue")),
    )
    .await;
    // A Pod that names the example later is labelled too (the watch on Pods).
    create_pod(&pods, "later", json!({ selector: "kopf-example-1" })).await;
    wait_for(
        &pods,
        "later",
        "the label on a Pod created later",
        |o: Option<&DynamicObject>| label_is(o, "somelabel", Some("somevalue")),
    )
    .await;
    // A label changed on the example changes on its Pods; one taken off is taken off.
    examples
        .patch(
            "kopf-example-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({ "metadata": { "labels": { "somelabel": null, "tier": "web" } } }),
            ),
        )
        .await
        .unwrap();
    for name in ["named", "later"] {
        wait_for(
            &pods,
            name,
            "the new label and the old one gone",
            |o: Option<&DynamicObject>| {
                label_is(o, "tier", Some("web")) && label_is(o, "somelabel", None)
            },
        )
        .await;
    }
    let other = pods.get("other").await.unwrap();
    assert!(
        label_is(Some(&other), "tier", None) && label_is(Some(&other), "somelabel", None),
        "a Pod naming another example is untouched: {:?}",
        other.metadata.labels
    );
    // A restart over the steady namespace reads the Pods and writes nothing.
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let mark = audit::mark();
    let again = Khai::start(&example, &ns.name, crate::support::JSON_LOG);
    again
        .wait_for_json_log(
            0,
            "the reconcile after the restart",
            reconciled("kopf-example-1"),
        )
        .await;
    let (code, _) = again.terminate().await;
    assert_eq!(code, Some(0));
    let writes = audit::writes(mark, |e| e["objectRef"]["namespace"] == ns.name.as_str());
    assert!(
        writes.is_empty(),
        "a restart over a steady namespace wrote {writes:?}"
    );
}

const QPS: f64 = 5.0;
const BURST: usize = 5;
const CALLS: usize = 25;

/// The script's API calls go through the operator's client rate limit: one reconcile making
/// 25 calls is spread out to `qps` a second after the burst, measured in the audit log.
#[tokio::test]
async fn a_scripts_api_calls_never_exceed_the_configured_qps() {
    let group = "qps.fx.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-qps").await;
    let script = format!(
        r#"
fn reconcile(obj, ctx) {{
    for i in 0..{CALLS} {{ k8s::delete("v1/ConfigMap", obj.metadata.namespace, `absent-${{i}}`); }}
    #{{ status: #{{ phase: "Ready" }} }}
}}
"#
    );
    let op = operator(
        group,
        &script,
        &format!("qps = {QPS}\nburst = {BURST}"),
        "budget = { calls = 50, time = \"30s\" }",
    );
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let api = widgets(&client, group, &ns.name);
    let mark = audit::mark();
    create_widget(&api, group, "w", "ok").await;
    wait_for(
        &api,
        "w",
        "the widget to reconcile",
        |o: Option<&DynamicObject>| o.is_some_and(|o| phase(o) == "Ready"),
    )
    .await;
    audit::wait_for_entry(mark, "the last delete", |e| {
        e["objectRef"]["name"] == format!("absent-{}", CALLS - 1).as_str()
    })
    .await;
    let at: Vec<jiff::Timestamp> = audit::entries(mark, |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["namespace"] == ns.name.as_str()
            && e["verb"] == "delete"
    })
    .iter()
    .map(|e| audit::timestamp(e, "requestReceivedTimestamp"))
    .collect();
    assert_eq!(at.len(), CALLS, "each call made once");
    let second = jiff::SignedDuration::from_secs(1);
    let busiest = (0..at.len())
        .map(|i| {
            at[i..]
                .iter()
                .take_while(|t| t.duration_since(at[i]) < second)
                .count()
        })
        .max()
        .unwrap();
    let span = at[at.len() - 1].duration_since(at[0]).as_secs_f64();
    let floor = (CALLS - BURST) as f64 / QPS;
    eprintln!(
        "{CALLS} calls in {span:.1}s; the busiest second had {busiest} (limit {QPS}/s, burst {BURST})"
    );
    assert!(
        busiest <= QPS as usize + BURST,
        "{busiest} calls in one second: more than qps {QPS} + burst {BURST}"
    );
    assert!(
        span >= floor * 0.9,
        "{CALLS} calls in {span:.1}s: faster than {QPS}/s allows"
    );
    let addr = khai.metrics_addr().await;
    let body = crate::support::metrics::metrics_until(&addr, "the script's API calls", |b| {
        b.contains(
            r#"khai_script_api_calls_total{code="404",kind="v1/ConfigMap",verb="delete"} 25"#,
        )
    })
    .await;
    assert!(body.contains("khai_script_api_call_duration_seconds_bucket{verb=\"delete\""));
}

/// `khai check` names a `k8s` call that `[operator] uses` does not declare, at its line, and
/// fails; declared, the same config passes.
#[test]
fn khai_check_flags_a_k8s_call_uses_does_not_declare() {
    let dir = tempfile::tempdir().unwrap();
    let example = crate::support::repo_root().join("examples/kopf/labels");
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    std::fs::copy(
        example.join("scripts/propagate.rhai"),
        dir.path().join("scripts/propagate.rhai"),
    )
    .unwrap();
    let toml = std::fs::read_to_string(example.join("operator.toml")).unwrap();
    let check = |toml: &str| {
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["check"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    assert!(check(&toml).status.success());
    let narrowed = toml.replace(r#"verbs = ["list", "patch"]"#, r#"verbs = ["patch"]"#);
    assert_ne!(narrowed, toml, "the example declares list and patch");
    let out = check(&narrowed);
    assert_eq!(out.status.code(), Some(1));
    let script = dir.path().join("scripts/propagate.rhai");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "error: {}:13:21: k8s::list(\"v1/Pod\", …): [operator] uses does not declare list on \
             v1/Pod (add {{ kind = \"v1/Pod\", verbs = [\"list\"] }}), so the generated RBAC does \
             not grant it\n",
            script.display()
        )
    );
}

const REFUSED: &str = r#"
fn reconcile(obj, ctx) { #{ status: #{ phase: "ok" } } }
fn on_create(obj, ctx, change) { k8s::get("v1/Secret", obj.metadata.namespace, "from-handler"); }
fn tick(obj, ctx) { k8s::get("v1/Secret", obj.metadata.namespace, "from-timer"); }
"#;

/// A 403 from a script call in a handler or a timer is said once per object and call, as for
/// `reconcile`: one `Forbidden` Warning Event, no series, and no `HandlerRetrying` or
/// `TimerFailed` Event at each retry. khai runs as its ServiceAccount with the generated RBAC,
/// less `get` on Secrets.
#[tokio::test]
async fn a_forbidden_call_in_a_handler_or_timer_is_one_event_not_one_per_retry() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-403").await;
    let group = "refused.fx.khai.dev";
    let extra = r#"
[[handler]]
for = "Widget"
on = "create"
script = "widget.rhai"
function = "on_create"
backoff = "1s"
labels = { by = "handler" }

[[timer]]
for = "Widget"
script = "widget.rhai"
function = "tick"
interval = "1s"
labels = { by = "timer" }
"#;
    let dir = operator(
        group,
        REFUSED,
        r#"uses = [{ kind = "v1/Secret", verbs = ["get"] }]"#,
        extra,
    );
    let mut docs = crate::rbac::generate_rbac(dir.path(), &ns.name);
    let before = docs.len();
    for d in &mut docs {
        if let Some(rules) = d.get_mut("rules").and_then(serde_json::Value::as_array_mut) {
            rules.retain(|r| r["resources"] != json!(["secrets"]));
        }
    }
    assert_eq!(docs.len(), before);
    crate::rbac::apply(&client, &ns.name, &docs).await;
    let kubeconfig =
        crate::rbac::service_account_kubeconfig(&client, &ns.name, "khai-fx-refused").await;
    let khai = Khai::start_with_kubeconfig(
        dir.path(),
        &ns.name,
        &["--log-level", "info,khai=debug"],
        &kubeconfig,
    );
    // One Widget for each: Events of one object with one reason form one series, whatever
    // their messages.
    let api = widgets(&client, group, &ns.name);
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    for by in ["handler", "timer"] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": { "name": by, "labels": { "by": by } },
        }))
        .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    }

    // Three refused attempts of each (the handler's backoff and the timer's interval: 1 s):
    // each call failed its script with a 403. An attempt's Event is sent before the next one.
    let addr = khai.metrics_addr().await;
    let failed = |b: &str, function: &str| {
        sample(b, "khai_script_errors_total", &[("function", function)]).unwrap_or_default()
    };
    metrics_until(
        &addr,
        "three refused attempts of the handler and the timer",
        |b| {
            failed(b, "on_create") >= 3.0
                && failed(b, "tick") >= 3.0
                && sample(b, "khai_script_api_calls_total", &[("code", "403")]).unwrap_or_default()
                    >= 6.0
        },
    )
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let all = events.list(&Default::default()).await.unwrap().items;
    let forbidden: Vec<_> = all
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Forbidden"))
        .collect();
    let note = |e: &k8s_openapi::api::events::v1::Event| e.note.clone().unwrap_or_default();
    let summary: Vec<_> = all
        .iter()
        .map(|e| {
            (
                e.reason.clone(),
                e.series.as_ref().map(|s| s.count),
                note(e).chars().take(120).collect::<String>(),
            )
        })
        .collect();
    assert_eq!(forbidden.len(), 2, "one per refused call: {summary:#?}");
    for name in ["from-handler", "from-timer"] {
        let said: Vec<_> = forbidden
            .iter()
            .filter(|e| note(e).contains(&format!("secrets \"{name}\" is forbidden")))
            .collect();
        assert_eq!(said.len(), 1, "{summary:#?}");
        assert!(
            said[0].series.is_none(),
            "said once, not per retry: {summary:#?}"
        );
    }
    let repeated: Vec<_> = all
        .iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("HandlerRetrying" | "TimerFailed")))
        .collect();
    assert!(repeated.is_empty(), "{summary:#?}");
}

/// `khai check` names a literal URL `[operator.http] allow` refuses and a literal Secret name
/// `[operator] secrets` does not list, each at its line, and fails; allowed, it passes.
#[test]
fn khai_check_flags_a_url_the_allow_list_refuses_and_a_secret_not_listed() {
    let dir = tempfile::tempdir().unwrap();
    let script = "fn reconcile(obj, ctx) {\n    let t = ctx.secret(\"dns-token\", \"token\");\n    \
                  http::post(\"https://dns.example.net/records\", #{ body: t });\n    #{}\n}\n";
    std::fs::write(dir.path().join("dns.rhai"), script).unwrap();
    let check = |operator: &str| {
        let toml = format!(
            "[operator]\nname = \"dns\"\n{operator}\n\n[[controller]]\nfor = \"v1/ConfigMap\"\nscript = \"dns.rhai\"\n"
        );
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["check"])
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let out = check("[operator.http]\nallow = [\"api.example.com\"]");
    assert_eq!(out.status.code(), Some(1));
    let file = dir.path().join("dns.rhai");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "error: {f}:2:17: ctx.secret(\"dns-token\", …): [operator] secrets does not name it \
             (add \"dns-token\"), so scripts cannot read it\n\
             error: {f}:3:11: http::post(\"https://dns.example.net/records\", …): \
             dns.example.net:443 is not in [operator.http] allow\n",
            f = file.display()
        )
    );
    let allowed =
        check("secrets = [\"dns-token\"]\n\n[operator.http]\nallow = [\"dns.example.net\"]");
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}
