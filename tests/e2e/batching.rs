//! `khai run --reconcile-batch`: a controller holds its reconcile requests for the window and
//! starts them together, so objects created within one window are all written after it and
//! every one ends Ready, and a change to a child waits for the window as well; the default
//! starts each at once (every other test), and shards batch by default (the sharding tests).

use crate::support::{Khai, TestNamespace, audit, example_copy, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const OBJECTS: usize = 10;
const WINDOW_S: i64 = 2;

#[tokio::test]
async fn objects_created_within_a_batch_window_are_reconciled_together_after_it() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "batch").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "batch.khai.dev";
    let config = example_copy("hello", dir.path(), "batch", group);
    let window = format!("{WINDOW_S}s");
    let khai = Khai::start(&config, &ns.name, &["--reconcile-batch", &window]);
    // Ready: its caches are synced, so it hears of each object as it is created.
    crate::operations::readyz_until(&khai.metrics_addr().await, 200).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Hello"), "hellos");
    let hellos: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let create = |name: String| {
        let hellos = hellos.clone();
        async move {
            let o: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{group}/v1"), "kind": "Hello",
                "metadata": { "name": name }, "spec": { "message": "hi" },
            }))
            .unwrap();
            hellos.create(&PostParams::default(), &o).await.unwrap();
        }
    };
    let ready = |name: String| {
        let hellos = hellos.clone();
        async move {
            wait_for(&hellos, &name, "its status", |o: Option<&DynamicObject>| {
                o.is_some_and(|o| o.data["status"]["phase"] == "Ready")
            })
            .await;
        }
    };
    // The API server takes a while over the first object of a new kind: one goes first, alone.
    create("h-first".into()).await;
    ready("h-first".into()).await;
    let mark = audit::mark();
    let first_create = jiff::Timestamp::now();
    for i in 0..OBJECTS {
        create(format!("h-{i}")).await;
    }
    let created_in = jiff::Timestamp::now().duration_since(first_create);
    for i in 0..OBJECTS {
        ready(format!("h-{i}")).await;
    }
    let writes: Vec<jiff::Timestamp> = audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && ["hellos", "configmaps"].contains(&e["objectRef"]["resource"].as_str().unwrap_or(""))
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    })
    .iter()
    .map(|e| audit::timestamp(e, "requestReceivedTimestamp"))
    .collect();
    assert!(
        writes.len() >= 2 * OBJECTS,
        "{} writes of Hellos and their ConfigMaps by khai for {OBJECTS} objects",
        writes.len()
    );
    // The window opens when khai hears of the first object, after it was created.
    let window = jiff::SignedDuration::from_secs(WINDOW_S);
    let earliest = writes.iter().min().unwrap();
    let waited = earliest.duration_since(first_create);
    eprintln!(
        "{OBJECTS} objects created in {created_in:#}; khai's first write {waited:#} after the first create, {} writes",
        writes.len()
    );
    assert!(
        waited >= window,
        "khai wrote {waited:#} after the first create, inside the {WINDOW_S}s batch window"
    );

    // A child deleted: the request its watch brings waits for the window too.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let mark = audit::mark();
    let deleted = jiff::Timestamp::now();
    configmaps
        .delete("h-0-hello", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = audit::wait_for_entry(mark, "khai applying h-0-hello again", |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["name"] == "h-0-hello"
            && e["verb"] == "patch"
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    })
    .await;
    let waited = audit::timestamp(&recreated, "requestReceivedTimestamp").duration_since(deleted);
    eprintln!("the deleted child applied again {waited:#} after its delete");
    assert!(
        waited >= window,
        "khai applied the deleted child {waited:#} after its delete, inside the {WINDOW_S}s batch window"
    );
}
