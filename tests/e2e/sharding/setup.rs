//! What the sharding test reads and does beside the shared harness (`support::shards`):
//! whether a parent is up to date, and the churn that runs during the kill.

use crate::support::shards::ready;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use std::time::Duration;

/// Ready, at its latest generation, with the status its spec asks for.
pub fn up_to_date(o: &DynamicObject) -> bool {
    let status = &o.data["status"];
    ready(o)
        && status["observedGeneration"].as_i64() == o.metadata.generation
        && status["n"] == o.data["spec"]["n"]
}

/// Creates parents and changes `touched` and `others` (in turn), a few a second, until
/// `stop`; how many writes it made.
pub async fn churn(
    parts: Api<DynamicObject>,
    group: String,
    touched: Vec<String>,
    others: Vec<String>,
    stop: tokio_util::sync::CancellationToken,
) -> usize {
    let changed: Vec<String> = touched.into_iter().chain(others).collect();
    let mut writes = 0;
    let mut turn = 0;
    while !stop.is_cancelled() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Part",
            "metadata": { "name": format!("churn{writes}") }, "spec": { "n": writes },
        }))
        .unwrap();
        parts.create(&PostParams::default(), &o).await.unwrap();
        let p = &changed[turn % changed.len()];
        turn += 1;
        let patch = json!({ "spec": { "n": 100_000 + writes } });
        let params = kube::api::PatchParams::default();
        parts
            .patch(p, &params, &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
        writes += 2;
        // Pacing, not synchronisation: about five writes a second.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    writes
}
