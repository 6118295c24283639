//! Children khai cannot own and deletes itself: `examples/access`.
//!
//! A namespaced ReadAccess makes a ClusterRole and a ClusterRoleBinding, which cannot carry an
//! ownerReference to it. There is no garbage collector on the test cluster, so everything that
//! happens to them after the ReadAccess goes is khai's own doing: the binding deleted, then the
//! role, then khai's finalizer removed (in that order, by the audit log), a ReadAccess deleted
//! while khai was stopped cleaned up when it starts, and a restart over steady objects costing
//! no write.

use crate::support::metrics::{metrics_until, sample, sum};
use crate::support::{
    Khai, TestNamespace, audit, reconciled, wait_exists, wait_for, wait_until_gone,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::path::{Path, PathBuf};

/// A copy of `examples/access` with its own operator name and API group.
fn config(dir: &Path, tag: &str) -> (PathBuf, String) {
    let group = format!("{tag}.unowned.khai.dev");
    let config = crate::support::example_copy("access", dir, &format!("unowned-{tag}"), &group);
    (config, group)
}

fn accesses(client: &kube::Client, ns: &str, group: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", "ReadAccess"),
        "readaccesses",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn cluster(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
        plural,
    );
    Api::all_with(client.clone(), &ar)
}

fn roles(client: &kube::Client) -> Api<DynamicObject> {
    cluster(client, "ClusterRole", "clusterroles")
}

fn bindings(client: &kube::Client) -> Api<DynamicObject> {
    cluster(client, "ClusterRoleBinding", "clusterrolebindings")
}

fn read_access(group: &str, users: &[&str]) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "ReadAccess",
        "metadata": { "name": "auditors" },
        "spec": { "users": users, "resources": ["configmaps"] },
    }))
    .unwrap()
}

/// Every write since `from` to the role and binding `child` and to the ReadAccesses of `ns`.
fn writes(from: audit::Mark, ns: &str, child: &str) -> audit::Writes {
    audit::writes(from, |e| on(e, ns, child))
}

fn on(e: &serde_json::Value, ns: &str, child: &str) -> bool {
    let r = &e["objectRef"];
    (r["resource"] == "readaccesses" && r["namespace"] == ns)
        || (matches!(
            r["resource"].as_str(),
            Some("clusterroles" | "clusterrolebindings")
        ) && r["name"] == child)
}

async fn quiet(khai: &Khai) {
    let addr = khai.metrics_addr().await;
    metrics_until(&addr, "an idle work queue and no reconcile running", |b| {
        sum(b, "workqueue_depth") == 0.0 && sum(b, "controller_runtime_active_workers") == 0.0
    })
    .await;
}

/// Whether the cluster-scoped `child` carries khai's marks for the parent with `uid`.
fn marked_for(child: &DynamicObject, uid: &str, ns: &str) {
    assert!(
        child.owner_references().is_empty(),
        "an unowned child got an ownerReference: {child:?}"
    );
    assert_eq!(
        child.labels().get("khai.dev/owner").map(String::as_str),
        Some(uid)
    );
    assert_eq!(
        child
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("khai")
    );
    let parent = child.annotations().get("khai.dev/parent").cloned();
    assert!(
        parent.is_some_and(|p| p.ends_with(&format!("/ReadAccess/{ns}/auditors"))),
        "{child:?}"
    );
}

#[tokio::test]
async fn cluster_scoped_children_are_applied_pruned_and_deleted_in_reverse_order_by_khai() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unowned").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, group) = config(dir.path(), "order");
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("readaccesses.{group}")).await;
    let parents = accesses(&client, &ns.name, &group);
    let child = format!("read-{}-auditors", ns.name);

    // Create: one apply per child, one status write, and khai's finalizer.
    let created = audit::mark();
    let parent = parents
        .create(&PostParams::default(), &read_access(&group, &["alice"]))
        .await
        .unwrap();
    let uid = parent.uid().unwrap();
    let role = wait_exists(&roles(&client), &child, "the ClusterRole").await;
    let binding = wait_exists(&bindings(&client), &child, "the ClusterRoleBinding").await;
    marked_for(&role, &uid, &ns.name);
    marked_for(&binding, &uid, &ns.name);
    assert_eq!(role.annotations()["khai.dev/order"], "1");
    assert_eq!(binding.annotations()["khai.dev/order"], "2");
    let parent = wait_for(
        &parents,
        "auditors",
        "its status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["role"] == child.as_str()),
    )
    .await;
    assert_eq!(parent.finalizers(), ["khai.dev/unowned-order"]);
    quiet(&khai).await;
    let w = writes(created, &ns.name, &child);
    assert_eq!(w.get("patch clusterroles"), Some(&1), "{w:?}");
    assert_eq!(w.get("patch clusterrolebindings"), Some(&1), "{w:?}");
    assert_eq!(w.get("patch readaccesses/status"), Some(&1), "{w:?}");

    // Change: only the binding changes.
    let changed = audit::mark();
    let users = json!({ "spec": { "users": ["alice", "bob"] } });
    parents
        .patch("auditors", &PatchParams::default(), &Patch::Merge(&users))
        .await
        .unwrap();
    wait_for(
        &bindings(&client),
        &child,
        "bob bound",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["subjects"][1]["name"] == "bob"),
    )
    .await;
    quiet(&khai).await;
    let w = writes(changed, &ns.name, &child);
    let khais: u64 = w
        .iter()
        .filter(|(k, _)| k.contains("clusterrole"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        (w.get("patch clusterrolebindings"), khais),
        (Some(&1), 1),
        "{w:?}"
    );

    // No users: the binding is pruned, exactly once, and the role stays.
    let pruned = audit::mark();
    let nobody = json!({ "spec": { "users": [] } });
    parents
        .patch("auditors", &PatchParams::default(), &Patch::Merge(&nobody))
        .await
        .unwrap();
    wait_until_gone(&bindings(&client), &child, "the binding pruned").await;
    quiet(&khai).await;
    let w = writes(pruned, &ns.name, &child);
    assert_eq!(w.get("delete clusterrolebindings"), Some(&1), "{w:?}");
    assert_eq!(w.get("delete clusterroles"), None, "{w:?}");
    assert!(roles(&client).get_opt(&child).await.unwrap().is_some());

    // Back to one user, then delete the ReadAccess: binding, role, finalizer, in that order.
    parents
        .patch("auditors", &PatchParams::default(), &Patch::Merge(&users))
        .await
        .unwrap();
    wait_exists(&bindings(&client), &child, "the binding again").await;
    quiet(&khai).await;
    let deleted = audit::mark();
    parents
        .delete("auditors", &DeleteParams::default())
        .await
        .unwrap();
    wait_until_gone(&parents, "auditors", "the ReadAccess gone").await;
    assert!(roles(&client).get_opt(&child).await.unwrap().is_none());
    assert!(bindings(&client).get_opt(&child).await.unwrap().is_none());
    let steps: Vec<(String, String)> = audit::entries(deleted, |e| {
        on(e, &ns.name, &child)
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["subresource"].is_null()
            && e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 300)
    })
    .into_iter()
    .map(|e| {
        let verb = e["verb"].as_str().unwrap_or_default().to_string();
        (
            verb,
            e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    })
    .collect();
    let want: Vec<(String, String)> = [
        ("delete", "clusterrolebindings"),
        ("delete", "clusterroles"),
        ("patch", "readaccesses"),
    ]
    .iter()
    .map(|(v, r)| (v.to_string(), r.to_string()))
    .collect();
    assert_eq!(steps, want, "khai's writes after the delete, in order");
}

#[tokio::test]
async fn a_parent_deleted_while_khai_is_stopped_loses_its_children_when_khai_starts() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unowned-down").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, group) = config(dir.path(), "down");
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("readaccesses.{group}")).await;
    let parents = accesses(&client, &ns.name, &group);
    let child = format!("read-{}-auditors", ns.name);
    parents
        .create(&PostParams::default(), &read_access(&group, &["alice"]))
        .await
        .unwrap();
    wait_exists(&bindings(&client), &child, "the ClusterRoleBinding").await;
    wait_for(
        &parents,
        "auditors",
        "khai's finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(|o| !o.finalizers().is_empty()),
    )
    .await;
    quiet(&khai).await;

    // A restart over the steady ReadAccess writes nothing.
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let restarted = audit::mark();
    let khai = Khai::start(&config, &ns.name, crate::support::JSON_LOG);
    khai.wait_for_json_log(
        0,
        "the ReadAccess reconciled after the restart",
        reconciled("auditors"),
    )
    .await;
    quiet(&khai).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let w = writes(restarted, &ns.name, &child);
    assert!(
        w.is_empty(),
        "restarting khai over a steady ReadAccess wrote {w:?}"
    );

    // Deleted while khai is down: the finalizer holds it, with its children, until khai starts.
    parents
        .delete("auditors", &DeleteParams::default())
        .await
        .unwrap();
    let held = parents.get("auditors").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(roles(&client).get_opt(&child).await.unwrap().is_some());
    let _khai = Khai::start(&config, &ns.name, &[]);
    wait_until_gone(&parents, "auditors", "the ReadAccess let go").await;
    assert!(roles(&client).get_opt(&child).await.unwrap().is_none());
    assert!(bindings(&client).get_opt(&child).await.unwrap().is_none());
}

/// Without `unowned_children`, the child is refused with a message naming the option, and
/// nothing is applied.
#[tokio::test]
async fn without_the_option_a_cluster_scoped_child_is_refused_naming_it() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unowned-off").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, group) = config(dir.path(), "off");
    let toml = config.join("operator.toml");
    let text = std::fs::read_to_string(&toml)
        .unwrap()
        .replace("unowned_children = true\n", "")
        .replace("delete_children = \"ordered\"\n", "");
    std::fs::write(&toml, text).unwrap();
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("readaccesses.{group}")).await;
    let parents = accesses(&client, &ns.name, &group);
    parents
        .create(&PostParams::default(), &read_access(&group, &["alice"]))
        .await
        .unwrap();
    khai.wait_for_log(0, "the refusal", |l| {
        l.contains("a namespaced ReadAccess cannot own a cluster-scoped object")
            && l.contains("unowned_children = true")
    })
    .await;
    let child = format!("read-{}-auditors", ns.name);
    assert!(roles(&client).get_opt(&child).await.unwrap().is_none());
}

/// A `Mirror` in one namespace with a ConfigMap beside it (owned) and one in the namespace its
/// `spec.to` names (unowned), deleted the default way.
fn mirror_operator(group: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "unowned-mirror"

[[crd]]
group = "{group}"
kind = "Mirror"
versions = ["v1"]
spec.to = {{ type = "string", required = true }}

[[controller]]
for = "Mirror"
owns = ["v1/ConfigMap"]
script = "mirror.rhai"
unowned_children = true
"#
    );
    let script = r#"
fn reconcile(obj, ctx) {
    let name = obj.metadata.name;
    #{ children: [
        #{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: `here-${name}` } },
        #{ apiVersion: "v1", kind: "ConfigMap",
           metadata: #{ name: `there-${name}`, namespace: obj.spec.to },
           data: #{ from: obj.metadata.namespace } },
    ] }
}
"#;
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("mirror.rhai"), script).unwrap();
    dir
}

/// A child in another namespace: no ownerReference, re-created when deleted by hand (its
/// deletion maps back to its parent in the other namespace), and deleted by khai when the
/// parent goes, while the owned child beside the parent is left to the garbage collector (which
/// the test cluster does not run).
#[tokio::test]
async fn a_child_in_another_namespace_is_tracked_and_only_unowned_children_are_deleted_by_khai() {
    let client = crate::support::client().await;
    let here = TestNamespace::new(&client, "mirror-from").await;
    let there = TestNamespace::new(&client, "mirror-to").await;
    let group = "mirror.unowned.khai.dev";
    let dir = mirror_operator(group);
    let args = ["--namespace", there.name.as_str(), "--log-format", "json"];
    let khai = Khai::start(dir.path(), &here.name, &args);
    crate::support::wait_for_crd(&client, &format!("mirrors.{group}")).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Mirror"), "mirrors");
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &here.name, &ar);
    let mirror: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Mirror",
        "metadata": { "name": "m" }, "spec": { "to": there.name },
    }))
    .unwrap();
    let parent = parents
        .create(&PostParams::default(), &mirror)
        .await
        .unwrap();
    let uid = parent.uid().unwrap();
    let local = crate::support::configmaps(&client, &here.name);
    let remote = crate::support::configmaps(&client, &there.name);
    let owned = wait_exists(&local, "here-m", "the owned child").await;
    let unowned = wait_exists(&remote, "there-m", "the child in the other namespace").await;
    assert_eq!(owned.owner_references()[0].uid, uid);
    assert!(unowned.owner_references().is_empty(), "{unowned:?}");
    assert_eq!(unowned.labels()["khai.dev/owner"], uid);
    assert_eq!(
        unowned.annotations()["khai.dev/parent"],
        format!("{group}/Mirror/{}/m", here.name)
    );

    remote
        .delete("there-m", &DeleteParams::default())
        .await
        .unwrap();
    let first = unowned.uid();
    wait_for(
        &remote,
        "there-m",
        "the child re-created",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.uid() != first),
    )
    .await;

    // A restart over the steady Mirror writes nothing in either namespace.
    quiet(&khai).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let restarted = audit::mark();
    let khai = Khai::start(dir.path(), &here.name, &args);
    khai.wait_for_json_log(
        0,
        "the Mirror reconciled after the restart",
        reconciled("m"),
    )
    .await;
    quiet(&khai).await;
    let w = audit::writes(restarted, |e| {
        let ns = &e["objectRef"]["namespace"];
        *ns == here.name.as_str() || *ns == there.name.as_str()
    });
    assert!(
        w.is_empty(),
        "restarting khai over a steady Mirror wrote {w:?}"
    );

    parents.delete("m", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&parents, "m", "the Mirror let go").await;
    assert!(remote.get_opt("there-m").await.unwrap().is_none());
    assert!(
        local.get_opt("here-m").await.unwrap().is_some(),
        "khai deleted an owned child, which is the garbage collector's"
    );
}

/// The script's `finalize` runs first: until it returns true, khai deletes no child.
#[tokio::test]
async fn finalize_runs_before_khai_deletes_any_child() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unowned-finalize").await;
    let dir = tempfile::tempdir().unwrap();
    let (config, group) = config(dir.path(), "finalize");
    let script = config.join("scripts/access.rhai");
    let mut text = std::fs::read_to_string(&script).unwrap();
    text.push_str("\nfn finalize(obj, ctx) { obj.metadata?.annotations?.release == \"yes\" }\n");
    std::fs::write(&script, text).unwrap();
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("readaccesses.{group}")).await;
    let parents = accesses(&client, &ns.name, &group);
    let child = format!("read-{}-auditors", ns.name);
    parents
        .create(&PostParams::default(), &read_access(&group, &["alice"]))
        .await
        .unwrap();
    wait_exists(&bindings(&client), &child, "the ClusterRoleBinding").await;
    quiet(&khai).await;

    // finalize answering false fails the reconcile, which is counted once reported.
    let addr = khai.metrics_addr().await;
    let errors = |b: &str| sum(b, "controller_runtime_reconcile_errors_total");
    let before = errors(&metrics_until(&addr, "a first scrape", |_| true).await);
    parents
        .delete("auditors", &DeleteParams::default())
        .await
        .unwrap();
    metrics_until(&addr, "finalize holding the ReadAccess", |b| {
        let finalized = [("function", "finalize")];
        sample(b, "khai_script_duration_seconds_count", &finalized).unwrap_or_default() >= 1.0
            && errors(b) > before
    })
    .await;
    assert!(roles(&client).get_opt(&child).await.unwrap().is_some());
    assert!(bindings(&client).get_opt(&child).await.unwrap().is_some());

    let release = json!({ "metadata": { "annotations": { "release": "yes" } } });
    parents
        .patch("auditors", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    wait_until_gone(&parents, "auditors", "the ReadAccess let go").await;
    assert!(roles(&client).get_opt(&child).await.unwrap().is_none());
    assert!(bindings(&client).get_opt(&child).await.unwrap().is_none());
}
