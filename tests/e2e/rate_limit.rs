//! The client-side rate limit holds on a real API server: a burst of work never makes khai
//! write faster than `[operator] qps`, allowing the burst, measured from the API server's
//! audit log over 1 s windows; the waits show in khai's metrics. Without a configured limit
//! (the default) nothing is held back.

use crate::support::metrics::{metrics_until, sum};
use crate::support::{Khai, TestNamespace, audit, example_copy, wait_for};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const QPS: f64 = 5.0;
const BURST: usize = 5;
const OBJECTS: usize = 30;

#[tokio::test]
async fn a_burst_of_objects_never_makes_khai_exceed_the_configured_qps() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "qps").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "qps.khai.dev";
    let config = example_copy("hello", dir.path(), "qps", group);
    let toml = std::fs::read_to_string(config.join("operator.toml")).unwrap();
    let toml = toml.replacen(
        "[operator]\n",
        &format!("[operator]\nqps = {QPS}\nburst = {BURST}\n"),
        1,
    );
    std::fs::write(config.join("operator.toml"), toml).unwrap();
    let khai = Khai::start(&config, &ns.name, crate::support::JSON_LOG);
    let limit = json!({ "message": "khai starting", "qps": QPS, "burst": BURST });
    khai.wait_for_json_log(0, "the configured limit", limit)
        .await;
    let mark = audit::mark();
    create_and_wait_ready(&client, &ns.name, group, OBJECTS).await;
    let writes = audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    });
    let at: Vec<jiff::Timestamp> = writes
        .iter()
        .map(|e| audit::timestamp(e, "requestReceivedTimestamp"))
        .collect();
    assert!(
        at.len() >= 2 * OBJECTS,
        "{} writes for {OBJECTS} objects",
        at.len()
    );
    // A token bucket lets at most burst + qps·t requests through in any t seconds.
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
    let floor = (at.len() - BURST) as f64 / QPS;
    eprintln!(
        "{} writes in {span:.1}s; the busiest second had {busiest} (limit {QPS}/s, burst {BURST})",
        at.len()
    );
    assert!(
        busiest <= QPS as usize + BURST,
        "{busiest} writes in one second: more than qps {QPS} + burst {BURST}"
    );
    assert!(
        span >= floor * 0.9,
        "{} writes in {span:.1}s: faster than {QPS}/s after a burst of {BURST} allows ({floor:.1}s)",
        at.len()
    );
    let addr = khai.metrics_addr().await;
    let body = metrics_until(&addr, "the limiter's metrics", |b| {
        sum(b, "rest_client_rate_limiter_duration_seconds_sum") > 1.0
    })
    .await;
    let requests = sum(&body, "rest_client_requests_total");
    assert!(
        requests >= at.len() as f64,
        "rest_client_requests_total {requests} counts fewer than the {} writes",
        at.len()
    );
}

/// Creates `count` Hellos in `ns` at once and waits until every one is Ready.
async fn create_and_wait_ready(client: &kube::Client, ns: &str, group: &str, count: usize) {
    crate::support::wait_for_crd(client, &format!("hellos.{group}")).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Hello"), "hellos");
    let hellos: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    for i in 0..count {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Hello",
            "metadata": { "name": format!("h-{i}") }, "spec": { "message": "hi" },
        }))
        .unwrap();
        hellos.create(&PostParams::default(), &o).await.unwrap();
    }
    // The last object's status is written last: by then all the work is done.
    for i in 0..count {
        wait_for(
            &hellos,
            &format!("h-{i}"),
            "its status",
            |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
        )
        .await;
    }
}

/// khai's default sets no client-side limit, as controller-runtime and kube-rs: 100 objects
/// (over 200 writes, far past any burst) are reconciled without one request waiting.
#[tokio::test]
async fn by_default_a_burst_of_objects_is_never_held_back() {
    const MANY: usize = 100;
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "noqps").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "noqps.khai.dev";
    let config = example_copy("hello", dir.path(), "noqps", group);
    let khai = Khai::start(&config, &ns.name, &[]);
    create_and_wait_ready(&client, &ns.name, group, MANY).await;
    let addr = khai.metrics_addr().await;
    let body = metrics_until(&addr, "every write counted", |b| {
        sum(b, "rest_client_requests_total") >= (2 * MANY) as f64
    })
    .await;
    let waited = sum(&body, "rest_client_rate_limiter_duration_seconds_sum");
    assert_eq!(
        waited, 0.0,
        "requests waited {waited} s for a client-side limit nobody configured"
    );
}
