//! How light khai is on the API server when nothing changes, measured from the API server's
//! audit log: every write khai makes in the test's namespace is counted.

use crate::support::{Khai, TestNamespace, audit};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::collections::HashSet;

const OBJECTS: usize = 1000;

#[tokio::test]
async fn a_thousand_objects_cost_two_writes_each_and_an_idle_resync_costs_none() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "idle").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.toml"),
        r#"
[operator]
name = "idle"

[[crd]]
group = "idle.khai.dev"
kind = "Item"
versions = ["v1"]
spec.size = { type = "integer", default = 1 }
status.phase = { type = "string" }
status.configMap = { type = "string" }

[[controller]]
for = "Item"
owns = ["v1/ConfigMap"]
script = "item.rhai"
resync = "5s"
concurrency = 8
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("item.rhai"),
        r#"
fn reconcile(obj, ctx) {
    let name = obj.metadata.name + "-config";
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: name }, data: #{ size: `${obj.spec.size}` } }],
       status: #{ phase: "Ready", configMap: name } }
}
"#,
    )
    .unwrap();
    let khai = Khai::start(dir.path(), &ns.name, crate::support::JSON_LOG);
    crate::support::wait_for_crd(&client, "items.idle.khai.dev").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("idle.khai.dev", "v1", "Item"),
        "items",
    );
    let items: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);

    let start = audit::mark();
    // Watch for readiness from before the first create, so no transition is missed.
    let ready = watcher(items.clone(), watcher::Config::default()).applied_objects();
    let all_ready = async {
        let mut seen = HashSet::new();
        futures::pin_mut!(ready);
        while let Some(Ok(o)) = ready.next().await {
            if o.data["status"]["phase"] == "Ready" {
                seen.insert(o.metadata.name.clone().unwrap());
                if seen.len() == OBJECTS {
                    return;
                }
            }
        }
    };
    let create = futures::stream::iter(0..OBJECTS).for_each_concurrent(16, |i| {
        let items = items.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "idle.khai.dev/v1", "kind": "Item",
                "metadata": { "name": format!("item-{i:04}") }, "spec": { "size": i },
            }))
            .unwrap();
            items.create(&PostParams::default(), &obj).await.unwrap();
        }
    });
    let deadline = std::time::Duration::from_secs(180);
    tokio::time::timeout(deadline, futures::future::join(create, all_ready))
        .await
        .expect("not every Item became Ready within 180s");

    // Idle: khai's resync still reconciles every Item, and must not write anything.
    let before = audit::mark();
    let seen = khai.log_len();
    let resync = json!({ "message": "reconciled", "object.reason": "bulk reconcile requested" });
    let resynced = khai
        .wait_for_json_logs(seen, "a full resync pass", OBJECTS, resync)
        .await;
    let writing: Vec<_> = resynced
        .iter()
        .filter(|l| !(l["applied"] == 0 && l["pruned"] == 0 && l["status_written"] == false))
        .collect();
    assert!(
        writing.is_empty(),
        "resync reconciles that wrote: {writing:?}"
    );
    let idle = audit::khai_writes(before, &ns.name);
    assert!(
        idle.is_empty(),
        "writes during an idle resync of {OBJECTS} objects: {idle:?}"
    );
    // Over the whole run, khai wrote each child once and each status once: no write was repeated
    // because a cache lagged behind khai's own previous write.
    let total = audit::khai_writes(start, &ns.name);
    eprintln!("khai's writes for {OBJECTS} objects created and resynced: {total:?}");
    let each = OBJECTS as u64;
    assert_eq!(
        total,
        audit::Writes::from([
            ("patch configmaps".to_string(), each),
            ("patch items/status".to_string(), each),
        ]),
        "khai's writes"
    );
    // Every request was taken up: nothing is left waiting in the work queue, and each Item's
    // first reconcile and its resync were measured on their way through it.
    let addr = khai.metrics_addr().await;
    let body = crate::support::metrics::metrics_until(&addr, "an empty work queue", |b| {
        crate::support::metrics::sum(b, "workqueue_depth") == 0.0
    })
    .await;
    let waited = crate::support::metrics::sum(&body, "workqueue_queue_duration_seconds_count");
    assert!(
        waited >= 2.0 * OBJECTS as f64,
        "queue duration samples: {waited}"
    );
    // Eight workers over a thousand objects and their children, and never two reconciles of
    // one object at once.
    assert_eq!(
        crate::support::metrics::sum(&body, "khai_reconcile_overlaps_total"),
        0.0
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}
