//! Hostile input at the API server's edges: names at 253 characters, objects near the
//! size limit, children with other owners, children in a terminating namespace. Each case must
//! end in the desired state or in a clear error on the object it concerns, in the API server's
//! words, while khai goes on reconciling everything else.

use crate::support::metrics::{metrics_until, sum};
use crate::support::{Khai, TestNamespace, audit, configmaps, wait_for};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tempfile::TempDir;

/// An operator with one namespaced CRD `Edge` in `group`, reconciled by `script`.
fn operator(group: &str, script: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "edges"

[[crd]]
group = "{group}"
kind = "Edge"
versions = ["v1"]
spec.suffix = {{ type = "string", default = "" }}
spec.mode = {{ type = "string", default = "" }}
spec.entries = {{ type = "map", values = {{ type = "string" }} }}
status.phase = {{ type = "string" }}
status.entries = {{ type = "integer" }}

[[controller]]
for = "Edge"
owns = ["v1/ConfigMap"]
script = "edge.rhai"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("edge.rhai"), script).unwrap();
    dir
}

fn edges(client: &kube::Client, group: &str, ns: &str) -> Api<DynamicObject> {
    crate::support::custom_api(client, ns, group, "Edge", "edges")
}

async fn create_edge(api: &Api<DynamicObject>, group: &str, name: &str, spec: serde_json::Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Edge",
        "metadata": { "name": name }, "spec": spec,
    }))
    .unwrap();
    crate::support::wait_for_crd(&api.clone().into_client(), &format!("edges.{group}")).await;
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create Edge {}: {e}", short(name)));
}

fn ready(o: Option<&DynamicObject>) -> bool {
    o.is_some_and(|o| o.data["status"]["phase"] == "Ready")
}

/// The `Ready` condition of `o`, when it is `False`.
fn not_ready(o: Option<&DynamicObject>) -> bool {
    o.is_some_and(|o| {
        o.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "False")
    })
}

/// The message of the `Ready` condition of `o`.
fn ready_message(o: &DynamicObject) -> String {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A long name shortened for messages.
fn short(name: &str) -> String {
    if name.len() > 40 {
        format!("{}…({} chars)", &name[..20], name.len())
    } else {
        name.to_string()
    }
}

/// A message read as a person would: the API server's words, not a Rust debug dump.
fn assert_plain(msg: &str) {
    for dump in ["Status {", "ErrorResponse", "Api(", "ApiError:", "code: "] {
        assert!(!msg.contains(dump), "a debug dump in {msg:?}");
    }
}

/// One ConfigMap named after the parent plus `spec.suffix`.
const NAMED: &str = r#"
fn reconcile(obj, ctx) {
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap",
                     metadata: #{ name: obj.metadata.name + obj.spec.suffix },
                     data: #{ parent: "yes" } }],
       status: #{ phase: "Ready" } }
}
"#;

/// A custom resource name may be a DNS subdomain of 253 characters (the API server refuses
/// 254); a ConfigMap's too. A child named after such a parent is applied; one whose derived
/// name is longer fails its parent with the server's reason and nothing else.
#[tokio::test]
async fn names_at_253_characters_reconcile_and_a_derived_name_too_long_fails_clearly() {
    let group = "names.edges.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "edge-names").await;
    let op = operator(group, NAMED);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = edges(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);

    // The API server's own limit, so the test knows it is at the edge.
    crate::support::wait_for_crd(&client, &format!("edges.{group}")).await;
    let too_long: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Edge",
        "metadata": { "name": "c".repeat(254) }, "spec": {},
    }))
    .unwrap();
    let refused = api.create(&PostParams::default(), &too_long).await;
    assert!(
        refused.is_err(),
        "the API server accepted a 254-character name"
    );

    let long = "a".repeat(253);
    create_edge(&api, group, &long, json!({})).await;
    wait_for(&api, &long, "the 253-character Edge to be Ready", ready).await;
    let child = crate::support::wait_exists(&cms, &long, "its 253-character child").await;
    assert_eq!(child.data["data"]["parent"], "yes");
    let owners = child.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].name, long);

    let over = "b".repeat(253);
    create_edge(&api, group, &over, json!({ "suffix": "-extra" })).await;
    let failed = wait_for(
        &api,
        &over,
        "Ready=False on the Edge whose child's name is too long",
        not_ready,
    )
    .await;
    let msg = ready_message(&failed);
    let child_name = format!("{over}-extra");
    assert!(
        msg.contains(&format!("failed to apply child ConfigMap {child_name}")),
        "the message does not name the child: {msg}"
    );
    assert!(
        msg.contains("must be no more than 253 characters"),
        "the message does not give the API server's reason: {msg}"
    );
    assert_plain(&msg);
    assert!(
        cms.get_opt(&child_name).await.unwrap().is_none(),
        "a child with a 259-character name exists"
    );

    // khai goes on with other objects meanwhile.
    create_edge(&api, group, "calm", json!({})).await;
    wait_for(&api, "calm", "another Edge to be Ready", ready).await;
    crate::support::wait_exists(&cms, "calm", "the other Edge's child").await;
}

/// Copies three entries of a large `spec.entries` into a child and counts them into the status;
/// with `mode = "overflow"` builds, from a small input, a ConfigMap of 6,000 keys of 250
/// characters: empty values keep it within the ConfigMap's 1 MiB of data and the script's
/// limits (which count values, not keys), but with its managed fields it is over 3 MB, past
/// what the API server can store.
const LARGE: &str = r#"
fn reconcile(obj, ctx) {
    let data = #{};
    let count = 0;
    if obj.spec.mode == "overflow" {
        for i in 0..6000 {
            let key = `k${i}-`;
            key.pad(250, 'k');
            data[key] = "";
        }
    } else {
        let entries = obj.spec?.entries ?? #{};
        count = entries.len();
        for key in ["e0", "e5000", "e11999"] {
            data[key] = entries[key];
        }
    }
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap",
                     metadata: #{ name: obj.metadata.name }, data: data }],
       status: #{ phase: "Ready", entries: count } }
}
"#;

/// An object of about 1.4 MB (12,000 map entries of ~110 bytes), within the API server's limit,
/// is an input like any other: its script copies part of it into a child and its status.
#[tokio::test]
async fn an_object_near_the_size_limit_is_reconciled() {
    let group = "large.edges.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "edge-large").await;
    let op = operator(group, LARGE);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = edges(&client, group, &ns.name);
    let entries: serde_json::Map<String, serde_json::Value> = (0..12_000)
        .map(|i| (format!("e{i}"), json!(format!("{i:0>100}"))))
        .collect();
    let size = serde_json::to_string(&entries).unwrap().len();
    assert!(size > 1_300_000, "only {size} bytes");
    create_edge(&api, group, "big", json!({ "entries": entries })).await;
    let big = wait_for(&api, "big", "the 1.4 MB Edge to be Ready", ready).await;
    assert_eq!(big.data["status"]["entries"], 12_000);
    let child = configmaps(&client, &ns.name).get("big").await.unwrap();
    assert_eq!(child.data["data"]["e11999"], format!("{:0>100}", 11_999));
    assert_eq!(child.data["data"].as_object().unwrap().len(), 3);
}

/// A child over the API server's size limit fails its parent with the server's reason, and
/// khai goes on.
#[tokio::test]
async fn a_child_over_the_size_limit_fails_its_parent_clearly() {
    let group = "oversize.edges.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "edge-oversize").await;
    let op = operator(group, LARGE);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = edges(&client, group, &ns.name);
    create_edge(&api, group, "huge", json!({ "mode": "overflow" })).await;
    let failed = wait_for(
        &api,
        "huge",
        "Ready=False on the Edge whose child is over 1 MiB",
        not_ready,
    )
    .await;
    let msg = ready_message(&failed);
    assert!(
        msg.contains("failed to apply child ConfigMap huge"),
        "the message does not name the child: {msg}"
    );
    // etcd's or the API server's limit, as the server words it ("trying to send message larger
    // than max (3096897 vs. 2097152)" from v1.20's etcd client, "request is too large" from etcd).
    assert!(
        msg.contains("larger than max") || msg.contains("too large"),
        "the message does not give the API server's reason: {msg}"
    );
    assert_plain(&msg);
    create_edge(&api, group, "small", json!({ "entries": { "e0": "x" } })).await;
    wait_for(&api, "small", "another Edge to be Ready", ready).await;
}

/// An ownerReference of someone else's, as kubectl would write it.
fn reference(name: &str, uid: &str, controller: bool) -> serde_json::Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid,
            "controller": controller })
}

/// A ConfigMap khai's parent wants already exists with other owners: their (non-controller)
/// ownerReferences stay beside khai's controller reference. When another controller already
/// holds `controller: true`, khai reports the conflict on its parent and leaves the child be.
#[tokio::test]
async fn a_child_with_other_owners_keeps_them_and_another_controller_is_not_fought() {
    let group = "owners.edges.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "edge-owners").await;
    let op = operator(group, NAMED);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = edges(&client, group, &ns.name);
    let cms = configmaps(&client, &ns.name);
    let others: Vec<_> = (1..=4)
        .map(|i| {
            reference(
                &format!("owner-{i}"),
                &format!("00000000-0000-0000-0000-00000000000{i}"),
                false,
            )
        })
        .collect();
    let shared: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "shared", "ownerReferences": others },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &shared).await.unwrap();
    create_edge(&api, group, "shared", json!({})).await;
    let edge = wait_for(&api, "shared", "the Edge to be Ready", ready).await;
    let uid = edge.metadata.uid.clone().unwrap();
    let child = cms.get("shared").await.unwrap();
    let owners = child.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 5, "{owners:#?}");
    for i in 1..=4 {
        let o = owners
            .iter()
            .find(|o| o.name == format!("owner-{i}"))
            .unwrap_or_else(|| panic!("owner-{i}'s reference was dropped: {owners:#?}"));
        assert_ne!(o.controller, Some(true));
    }
    let ours = owners.iter().find(|o| o.uid == uid).unwrap();
    assert_eq!(ours.controller, Some(true));
    assert_eq!(child.data["data"]["parent"], "yes");

    // Another controller holds this one.
    let held: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "held", "ownerReferences": [
            reference("owner-1", "00000000-0000-0000-0000-000000000001", false),
            reference("boss", "00000000-0000-0000-0000-0000000000b0", true),
        ] },
        "data": { "theirs": "yes" },
    }))
    .unwrap();
    let held = cms.create(&PostParams::default(), &held).await.unwrap();
    create_edge(&api, group, "held", json!({})).await;
    let failed = wait_for(
        &api,
        "held",
        "Ready=False on the Edge whose child another controller holds",
        not_ready,
    )
    .await;
    let msg = ready_message(&failed);
    assert!(
        msg.contains("failed to apply child ConfigMap held"),
        "the message does not name the child: {msg}"
    );
    assert!(
        msg.contains("Only one reference can have Controller set to true"),
        "the message does not give the API server's reason: {msg}"
    );
    assert_plain(&msg);
    let after = cms.get("held").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, held.metadata.resource_version,
        "khai changed a child another controller holds"
    );
}

/// SharedConfig (examples/propagate), cluster-scoped, copies its data into each listed
/// namespace; one of them is terminating, where the API server refuses new objects.
#[tokio::test]
async fn a_child_in_a_terminating_namespace_fails_clearly_without_a_hot_loop() {
    let group = "terminating.edges.khai.dev";
    let client = crate::support::client().await;
    let live = TestNamespace::new(&client, "edge-live").await;
    let doomed = TestNamespace::new(&client, "edge-doomed").await;
    // Without a namespace controller, a deleted namespace stays Terminating.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&doomed.name, &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get(&doomed.name).await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    let dir = tempfile::tempdir().unwrap();
    let config = crate::support::example_copy("propagate", dir.path(), "edges-terminating", group);
    let khai = Khai::start(&config, &live.name, &["--namespace", doomed.name.as_str()]);
    crate::support::wait_for_crd(&client, &format!("sharedconfigs.{group}")).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", "SharedConfig"),
        "sharedconfigs",
    );
    let parents: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let name = format!("shared-{}", live.name);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "SharedConfig",
        "metadata": { "name": name },
        // The terminating namespace first: its failure must not hold back the other copy.
        "spec": { "namespaces": [doomed.name, live.name], "data": { "region": "eu-west-1" } },
    }))
    .unwrap();
    let start = audit::mark();
    parents.create(&PostParams::default(), &obj).await.unwrap();

    let copy = crate::support::wait_exists(
        &configmaps(&client, &live.name),
        &name,
        "the copy in the live namespace",
    )
    .await;
    assert_eq!(copy.data["data"]["region"], "eu-west-1");
    let failed = wait_for(
        &parents,
        &name,
        "Ready=False on the SharedConfig",
        not_ready,
    )
    .await;
    let msg = ready_message(&failed);
    assert!(
        msg.contains(&format!("failed to apply child ConfigMap {name}")),
        "the message does not name the child: {msg}"
    );
    assert!(
        msg.contains(&format!(
            "unable to create new content in namespace {} because it is being terminated",
            doomed.name
        )),
        "the message does not give the API server's reason: {msg}"
    );
    assert_plain(&msg);
    // The condition is what this test reads; Events about cluster-scoped objects are
    // tests/e2e/events.rs.

    // Retried with backoff (1 s, 2 s, 4 s...), one refused write per retry, not a hot loop.
    // The SharedConfig is the only object of its controller, whose failures khai counts.
    let addr = khai.metrics_addr().await;
    let body = metrics_until(&addr, "three failed reconciles", |b| {
        sum(b, "controller_runtime_reconcile_errors_total") >= 3.0
    })
    .await;
    let failures = sum(&body, "controller_runtime_reconcile_errors_total") as u64;
    let refused = audit::khai_writes(start, &doomed.name);
    let n = audit::total(&refused);
    assert!(
        (1..=failures + 1).contains(&n),
        "{n} writes into the terminating namespace for {failures} failed reconciles: {refused:?}"
    );
    let reconciles = sum(&body, "controller_runtime_reconcile_total");
    assert!(
        reconciles < 20.0,
        "{reconciles} reconciles of one SharedConfig within a few seconds"
    );
}

/// The failure Event of an object whose name is longer than 236 characters: Events are named
/// `<object name>.<nanoseconds in hex>`, over the 253 the API server allows unless the object's
/// name is shortened.
#[tokio::test]
async fn a_long_named_object_gets_its_failure_event() {
    let group = "longevents.edges.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "edge-longevents").await;
    let op = operator(group, NAMED);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = edges(&client, group, &ns.name);
    let over = "b".repeat(253);
    create_edge(&api, group, &over, json!({ "suffix": "-extra" })).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(
        events,
        "a ReconcileFailed Warning for the long-named Edge",
        |e| {
            e.reason.as_deref() == Some("ReconcileFailed")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(over.as_str())
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("must be no more than 253"))
        },
    )
    .await;
}
