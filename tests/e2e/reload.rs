//! End to end against a real kube-apiserver: hot reload of the config directory. Each
//! test runs the real `khai run --watch` on an operator of its own, in its own namespace and CRD
//! group, edits the directory and waits, through watches with a deadline, for the new behaviour.

use crate::support::metrics::{wait_for_metric, wait_for_reloads};
use crate::support::{Khai, TestNamespace, configmaps, wait_for};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// How soon after an edit the children of existing objects must show the new script's work.
const RELOAD_WITHIN: Duration = Duration::from_secs(2);

fn config(group: &str) -> String {
    format!(
        r#"
[operator]
name = "reloads"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.size = {{ type = "integer", default = 1 }}

[[controller]]
for = "Widget"
owns = ["v1/ConfigMap"]
script = "widget.rhai"
"#
    )
}

/// A script whose one child ConfigMap `<name>-cfg` carries `version`.
fn script(version: &str) -> String {
    format!(
        r#"
fn reconcile(obj, ctx) {{
    #{{ children: [#{{ apiVersion: "v1", kind: "ConfigMap",
                      metadata: #{{ name: `${{obj.metadata.name}}-cfg` }},
                      data: #{{ version: "{version}" }} }}] }}
}}
"#
    )
}

/// A script that does not compile: line 3 has an unfinished `let`.
const BROKEN: &str = "fn reconcile(obj, ctx) {\n    let x = 1;\n    let y = ;\n}\n";

/// Writes `text` to `path` the way an editor saving in place would not: to a temporary file
/// first, then renamed over, so khai never sees half a file.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp-save");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn widgets(client: &kube::Client, group: &str, ns: &str) -> Api<DynamicObject> {
    crate::support::custom_api(client, ns, group, "Widget", "widgets")
}

async fn create_widget(api: &Api<DynamicObject>, group: &str, name: &str) {
    crate::support::wait_for_crd(&api.clone().into_client(), &format!("widgets.{group}")).await;
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": name }, "spec": {},
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create widget {name}: {e}"));
}

/// Waits until the child `<widget>-cfg` carries `version`; returns how long that took.
async fn child_version(cms: &Api<DynamicObject>, widget: &str, version: &str) -> Duration {
    let started = Instant::now();
    let want = version.to_string();
    wait_for(
        cms,
        &format!("{widget}-cfg"),
        &format!("the child of {widget} made by script {version}"),
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["data"]["version"] == *want),
    )
    .await;
    started.elapsed()
}

async fn metrics(addr: &str) -> String {
    crate::support::metrics::http_get(addr, "/metrics").await.1
}

/// The value of `khai_config_reloads_total{result="<result>"}`.
fn reloads(body: &str, result: &str) -> f64 {
    let prefix = format!("khai_config_reloads_total{{result=\"{result}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("/metrics lacks {prefix}:\n{body}"))
}

fn khai_starts(log: &[String]) -> usize {
    log.iter().filter(|l| l.contains("khai starting")).count()
}

#[tokio::test]
async fn editing_a_script_changes_the_children_of_existing_objects_without_a_restart() {
    let group = "edit.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-edit").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), config(group)).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script("v1")).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let pid = khai.pid();
    let addr = khai.metrics_addr().await;
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "a").await;
    create_widget(&api, group, "b").await;
    child_version(&cms, "a", "v1").await;
    child_version(&cms, "b", "v1").await;

    replace(&dir.path().join("widget.rhai"), &script("v2"));
    let took = child_version(&cms, "a", "v2").await;
    child_version(&cms, "b", "v2").await;
    eprintln!("reload latency (edit to child updated): {took:?}");
    assert!(
        took < RELOAD_WITHIN,
        "the edited script took {took:?} to reach existing objects (want < {RELOAD_WITHIN:?})"
    );
    assert_eq!(wait_for_reloads(&addr, "success", 1.0).await, 1.0);
    assert_eq!(khai.pid(), pid);
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    assert_eq!(khai_starts(&log), 1, "khai restarted instead of reloading");
}

/// A FIFO in the watched directory blocked the reader of every later poll (no edit
/// reloaded), and SIGTERM logged "khai stopped" without the process ever exiting; a large file
/// there was read whole every poll. Neither is read now.
#[tokio::test]
async fn a_fifo_in_the_config_directory_blocks_neither_reload_nor_sigterm() {
    let group = "fifo.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-fifo").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), config(group)).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script("v1")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    // Sparse: 200 MB to read, in no disk space.
    let big = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    big.set_len(200 << 20).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "a").await;
    child_version(&cms, "a", "v1").await;

    replace(&dir.path().join("widget.rhai"), &script("v2"));
    let took = child_version(&cms, "a", "v2").await;
    assert!(
        took < RELOAD_WITHIN,
        "the edit beside a FIFO took {took:?} to reach the object (want < {RELOAD_WITHIN:?})"
    );
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    assert!(log.iter().any(|l| l.contains("khai stopped")));
}

#[tokio::test]
async fn a_script_with_a_syntax_error_keeps_the_old_behaviour_and_is_reported() {
    let group = "broken.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-broken").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), config(group)).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script("v1")).unwrap();
    // No Pod runs khai here, but an Event may regard one that does not exist.
    let pod_env = [
        ("POD_NAME", "khai-test-pod"),
        ("POD_NAMESPACE", ns.name.as_str()),
    ];
    let khai = Khai::start_with_env(dir.path(), &ns.name, &["--watch"], &pod_env);
    let addr = khai.metrics_addr().await;
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "a").await;
    child_version(&cms, "a", "v1").await;

    let skip = khai.log_len();
    replace(&dir.path().join("widget.rhai"), BROKEN);
    let failed = khai
        .wait_for_log(skip, "the failed reload", |l| {
            l.contains("config reload failed")
        })
        .await;
    assert!(
        failed.contains("widget.rhai:3:13: syntax error"),
        "the failure does not name the file and line: {failed}"
    );
    let body = metrics(&addr).await;
    assert_eq!(reloads(&body, "failure"), 1.0);
    assert_eq!(reloads(&body, "success"), 0.0);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(
        events,
        "a ConfigReloadFailed Warning event regarding khai's Pod",
        |e| {
            e.reason.as_deref() == Some("ConfigReloadFailed")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("khai-test-pod")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("widget.rhai:3:13"))
        },
    )
    .await;

    // The last good script still runs: a new object gets its child from v1.
    create_widget(&api, group, "b").await;
    child_version(&cms, "b", "v1").await;
    // And fixing the script is picked up.
    replace(&dir.path().join("widget.rhai"), &script("v2"));
    child_version(&cms, "a", "v2").await;
    child_version(&cms, "b", "v2").await;
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    assert_eq!(khai_starts(&log), 1, "khai restarted instead of reloading");
}

/// Lays out `version` of the operator as kubelet mounts a ConfigMap: the files in a timestamped
/// hidden directory, `..data` pointing at it, and each key a symlink through `..data`.
fn configmap_version(dir: &Path, stamp: &str, group: &str, version: &str) {
    let data = dir.join(stamp);
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("operator.toml"), config(group)).unwrap();
    std::fs::write(data.join("widget.rhai"), script(version)).unwrap();
    // Kubelet's atomic writer: a new symlink, renamed over `..data` in one step.
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(stamp, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for key in ["operator.toml", "widget.rhai"] {
        let link = dir.join(key);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(format!("..data/{key}"), link).unwrap();
        }
    }
}

#[tokio::test]
async fn a_configmap_data_symlink_swap_is_reloaded() {
    let group = "configmap.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-configmap").await;
    let dir = tempfile::tempdir().unwrap();
    configmap_version(dir.path(), "..2026_11_22_09_00_00.1", group, "v1");
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "a").await;
    child_version(&cms, "a", "v1").await;

    configmap_version(dir.path(), "..2026_11_22_09_05_00.2", group, "v2");
    let took = child_version(&cms, "a", "v2").await;
    eprintln!("reload latency (..data swap to child updated): {took:?}");
    assert!(
        took < RELOAD_WITHIN,
        "the swapped ConfigMap took {took:?} to reach existing objects (want < {RELOAD_WITHIN:?})"
    );
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    assert_eq!(khai_starts(&log), 1, "khai restarted instead of reloading");
}

#[tokio::test]
async fn a_config_that_owns_a_new_kind_restarts_the_controller_watching_it() {
    let group = "kinds.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-kinds").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), config(group)).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script("v1")).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let api = widgets(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    create_widget(&api, group, "a").await;
    child_version(&cms, "a", "v1").await;

    // v2 also owns a ServiceAccount: a kind no informer watched before the reload.
    let owns_more = config(group).replace(
        r#"owns = ["v1/ConfigMap"]"#,
        r#"owns = ["v1/ConfigMap", "v1/ServiceAccount"]"#,
    );
    let v2 = r#"
fn reconcile(obj, ctx) {
    let name = obj.metadata.name;
    #{ children: [
        #{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: `${name}-cfg` },
           data: #{ version: "v2" } },
        #{ apiVersion: "v1", kind: "ServiceAccount", metadata: #{ name: `${name}-sa` } },
    ] }
}
"#;
    std::fs::write(dir.path().join("widget.rhai.new"), v2).unwrap();
    replace(&dir.path().join("operator.toml"), &owns_more);
    std::fs::rename(
        dir.path().join("widget.rhai.new"),
        dir.path().join("widget.rhai"),
    )
    .unwrap();
    child_version(&cms, "a", "v2").await;
    let sa_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ServiceAccount"),
        "serviceaccounts",
    );
    let sas: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &sa_ar);
    let first = crate::support::wait_exists(&sas, "a-sa", "the ServiceAccount child of v2").await;
    // The restarted controller watches the new kind: deleting the child brings it back.
    sas.delete("a-sa", &Default::default()).await.unwrap();
    let uid = first.metadata.uid.clone();
    wait_for(
        &sas,
        "a-sa",
        "the deleted ServiceAccount child to be re-created",
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.metadata.uid != uid),
    )
    .await;
    // v3 no longer owns ServiceAccounts: no controller reads that watch, so it stops instead of
    // running until exit.
    let addr = khai.metrics_addr().await;
    let sa_watches = [("kind", "ServiceAccount")];
    wait_for_metric(
        &addr,
        "the ServiceAccount watch",
        "khai_watches",
        &sa_watches,
        |n| n == 1.0,
    )
    .await;
    std::fs::write(dir.path().join("widget.rhai.new"), script("v3")).unwrap();
    replace(&dir.path().join("operator.toml"), &config(group));
    std::fs::rename(
        dir.path().join("widget.rhai.new"),
        dir.path().join("widget.rhai"),
    )
    .unwrap();
    child_version(&cms, "a", "v3").await;
    wait_for_metric(
        &addr,
        "the unused ServiceAccount watch to stop",
        "khai_watches",
        &sa_watches,
        |n| n == 0.0,
    )
    .await;
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    assert_eq!(khai_starts(&log), 1, "khai restarted instead of reloading");
}

/// Log lines of `controller` that contain `what`.
fn controller_lines(log: &[String], controller: &str, what: &str) -> usize {
    let field = format!("controller={controller}");
    log.iter()
        .filter(|l| l.contains(what) && l.contains(&field))
        .count()
}

#[tokio::test]
async fn a_reload_restarts_only_the_controller_that_changed() {
    let group = "only.reload.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "reload-only").await;
    let dir = tempfile::tempdir().unwrap();
    // Two controllers: Widget (widget.rhai) and Gadget (gadget.rhai), each making one ConfigMap.
    let two = format!(
        "{}\n[[crd]]\ngroup = \"{group}\"\nkind = \"Gadget\"\nversions = [\"v1\"]\n\n\
         [[controller]]\nfor = \"Gadget\"\nowns = [\"v1/ConfigMap\"]\nscript = \"gadget.rhai\"\n",
        config(group)
    );
    std::fs::write(dir.path().join("operator.toml"), two).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), script("w1")).unwrap();
    std::fs::write(
        dir.path().join("gadget.rhai"),
        script("g1").replace("-cfg", "-gadget-cfg"),
    )
    .unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let addr = khai.metrics_addr().await;
    let cms = configmaps(&client, &ns.name);
    create_widget(&widgets(&client, group, &ns.name), group, "a").await;
    let gadgets = {
        let gvk = GroupVersionKind::gvk(group, "v1", "Gadget");
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &ns.name,
            &ApiResource::from_gvk_with_plural(&gvk, "gadgets"),
        )
    };
    crate::support::wait_for_crd(&client, &format!("gadgets.{group}")).await;
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": { "name": "b" }, "spec": {},
    }))
    .unwrap();
    gadgets
        .create(&PostParams::default(), &gadget)
        .await
        .unwrap();
    child_version(&cms, "a", "w1").await;
    child_version(&cms, "b-gadget", "g1").await;

    replace(
        &dir.path().join("gadget.rhai"),
        &script("g2").replace("-cfg", "-gadget-cfg"),
    );
    child_version(&cms, "b-gadget", "g2").await;
    // Counted just before the summary is logged, with nothing in between to wait on.
    wait_for_reloads(&addr, "success", 1.0).await;
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit cleanly");
    let summary = log.iter().find(|l| l.contains("config reloaded")).unwrap();
    assert!(
        summary.contains("restarted=1")
            && summary.contains("kept=1")
            && summary.contains("stopped=1"),
        "{summary}"
    );
    assert_eq!(
        controller_lines(&log, "widget", "starting controller"),
        1,
        "{log:#?}"
    );
    assert_eq!(controller_lines(&log, "widget", "controller unchanged"), 1);
    assert_eq!(controller_lines(&log, "gadget", "starting controller"), 2);
    assert_eq!(controller_lines(&log, "gadget", "stopping controller"), 1);
}
