//! A shard letting go of an object the sharder moves (`khai run --shards`): the acknowledgement
//! is one write, guarded by the version the reconcile read.

use super::harness::{CONTROLLER, Harness, NOTHING};
use crate::shard::Settings;
use serde_json::json;
use std::time::Duration;

fn shard(id: &str) -> Settings {
    Settings {
        operator: "op".into(),
        id: id.into(),
        namespace: "khai".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    }
}

/// A reconcile of a copy read before this shard's own acknowledgement (a cache that has not
/// caught up) must not remove the shard label the sharder has since given the object: that
/// would leave it on no shard.
#[tokio::test(start_paused = true)]
async fn a_stale_copy_of_a_drained_object_leaves_the_new_shards_label_alone() {
    let h = Harness::new(CONTROLLER, &[("w.rhai", NOTHING)]);
    let a = shard("a");
    let (label, drain) = (a.label(), a.drain_label());
    h.create(
        "w",
        json!({ "size": 1 }),
        json!({ "metadata": { "labels": { &label: "a", &drain: "b" } } }),
    );
    let ctx = h.ctx_of_shard(Some(a)).await;
    let stale = h.widget("w").expect("created");

    h.reconcile(&ctx, "w")
        .await
        .expect("the drain is acknowledged");
    let labels = &h.widget("w").expect("still there")["metadata"]["labels"];
    assert_eq!(
        labels,
        &json!({ &drain: "b" }),
        "acknowledged: shard label gone, drain kept"
    );

    // The sharder relabels the object for shard b.
    h.edit(
        "w",
        &json!({ "metadata": { "labels": { &label: "b", &drain: null } } }),
    );
    let writes = h.writes().len();
    h.reconcile_stale(&ctx, stale)
        .await
        .expect("a stale copy is no error");
    let labels = &h.widget("w").expect("still there")["metadata"]["labels"];
    assert_eq!(labels, &json!({ &label: "b" }), "shard b keeps the object");
    assert_eq!(
        h.writes().len(),
        writes + 1,
        "one refused attempt, nothing else"
    );
}
