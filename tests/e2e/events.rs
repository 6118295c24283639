//! Events through `events.k8s.io/v1` on objects of every scope: a namespaced custom resource, a
//! cluster-scoped one and a built-in cluster-scoped kind (a Namespace). On v1.20 the API server
//! refused an Event about a cluster-scoped object in `default`, and two Events of one reason
//! were folded into one series that kept the first message.

use crate::support::{Khai, TestNamespace, custom_api, nanos_u64, wait_for_crd};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let name = obj.metadata.name;
    #{ events: [
        #{ type: "Normal", reason: "Seen", message: "first about " + name },
        #{ type: "Normal", reason: "Seen", message: "second about " + name },
    ] }
}
"#;

fn operator(group: &str, label: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "evscope"

[[crd]]
group = "{group}"
kind = "Note"
versions = ["v1"]
spec.text = {{ type = "string", default = "" }}

[[crd]]
group = "{group}"
kind = "Banner"
scope = "Cluster"
versions = ["v1"]
spec.text = {{ type = "string", default = "" }}

[[controller]]
for = "Note"
script = "e.rhai"

[[controller]]
for = "Banner"
script = "e.rhai"

[[controller]]
for = "v1/Namespace"
selector = "khai-events={label}"
script = "e.rhai"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("e.rhai"), SCRIPT).unwrap();
    dir
}

/// Waits until both Events of `name` (kind `kind`) are recorded, each with its own message;
/// returns the namespace they were recorded in.
async fn both_events(client: &kube::Client, kind: &str, name: &str) -> String {
    let events: Api<Event> = Api::all(client.clone());
    let mut namespaces = Vec::new();
    for which in ["first", "second"] {
        let note = format!("{which} about {name}");
        let e = crate::support::wait_for_any(
            events.clone(),
            &format!("the Event {note:?} on {kind} {name}"),
            |e: &Event| {
                e.reason.as_deref() == Some("Seen")
                    && e.note.as_deref() == Some(note.as_str())
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                    })
            },
        )
        .await;
        namespaces.push(e.metadata.namespace.unwrap_or_default());
    }
    assert_eq!(namespaces[0], namespaces[1], "{kind} {name}");
    namespaces.remove(0)
}

#[tokio::test]
async fn events_are_recorded_on_objects_of_every_scope_each_with_its_message() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "events-scope").await;
    let group = format!("ev{:x}.events.khai.dev", nanos_u64() % 0xffff_ffff);
    let label = ns.name.clone();
    let op = operator(&group, &label);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    wait_for_crd(&client, &format!("notes.{group}")).await;
    wait_for_crd(&client, &format!("banners.{group}")).await;

    let notes = custom_api(&client, &ns.name, &group, "Note", "notes");
    let note: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Note",
        "metadata": { "name": "n1" }, "spec": { "text": "x" },
    }))
    .unwrap();
    notes.create(&PostParams::default(), &note).await.unwrap();

    let banners = {
        let gvk = kube::core::GroupVersionKind::gvk(&group, "v1", "Banner");
        let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, "banners");
        Api::<DynamicObject>::all_with(client.clone(), &ar)
    };
    let banner_name = format!("b-{}", ns.name);
    let banner: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Banner",
        "metadata": { "name": banner_name }, "spec": { "text": "x" },
    }))
    .unwrap();
    banners
        .create(&PostParams::default(), &banner)
        .await
        .unwrap();

    // The test's own namespace is the Namespace the third controller selects.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &ns.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "metadata": { "labels": { "khai-events": label } } })),
        )
        .await
        .unwrap();

    assert_eq!(both_events(&client, "Note", "n1").await, ns.name);
    // kube-controller-manager's namespace for Events about cluster-scoped objects; servers
    // before v1.22 take them in kube-system only.
    let cluster = if crate::support::k8s_version() == "v1.20.2" {
        "kube-system"
    } else {
        "default"
    };
    assert_eq!(both_events(&client, "Banner", &banner_name).await, cluster);
    assert_eq!(both_events(&client, "Namespace", &ns.name).await, cluster);
    banners
        .delete(&banner_name, &Default::default())
        .await
        .unwrap();
}
