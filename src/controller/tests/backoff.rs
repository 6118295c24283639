//! Failed reconciles: retried with a per-object delay that doubles up to its cap and starts
//! over after a success, or when and as the script asked (`retry`, `fail`).

use super::harness::Harness;
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;

const CONFIG: &str = r#"
[[controller]]
for = "Widget"
script = "w.rhai"
backoff = { base = "1s", cap = "8s" }
"#;

/// Fails while `spec.size` is negative: 1 with `retry`, 2 with `fail`, any other by throwing.
const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let size = obj.spec.size;
    if size == -1 { retry("not yet", "30s"); }
    if size == -2 { fail("never"); }
    if size < 0 { throw "broken"; }
    #{ status: #{ phase: "Ready" } }
}
"#;

fn secs(s: u64) -> Action {
    Action::requeue(Duration::from_secs(s))
}

#[tokio::test(start_paused = true)]
async fn failures_requeue_with_a_growing_delay_and_a_success_starts_over() {
    let h = Harness::new(CONFIG, &[("w.rhai", SCRIPT)]);
    h.create("w", json!({ "size": -3 }), json!({}));
    h.create("other", json!({ "size": -3 }), json!({}));
    let ctx = h.ctx().await;
    let mut delays = Vec::new();
    for _ in 0..5 {
        delays.push(h.retry_after(&ctx, "w").await);
    }
    assert_eq!(delays, [secs(1), secs(2), secs(4), secs(8), secs(8)]);
    assert_eq!(
        h.retry_after(&ctx, "other").await,
        secs(1),
        "backoff is per object"
    );
    assert_eq!(h.events_of("ReconcileFailed"), 6, "each failure is said");
    h.edit("w", &json!({ "spec": { "size": 1 } }));
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        Action::await_change()
    );
    h.edit("w", &json!({ "spec": { "size": -3 } }));
    assert_eq!(
        h.retry_after(&ctx, "w").await,
        secs(1),
        "the success reset the backoff"
    );
}

#[tokio::test(start_paused = true)]
async fn a_script_that_asks_to_retry_is_retried_when_it_asks_and_one_that_fails_waits() {
    let h = Harness::new(CONFIG, &[("w.rhai", SCRIPT)]);
    h.create("later", json!({ "size": -1 }), json!({}));
    h.create("never", json!({ "size": -2 }), json!({}));
    let ctx = h.ctx().await;
    for _ in 0..3 {
        assert_eq!(h.retry_after(&ctx, "later").await, secs(30));
    }
    assert_eq!(h.retry_after(&ctx, "never").await, Action::await_change());
}
