//! Spin damping: an object whose reconciles keep writing is paused, and says so once; a quiet
//! one beside it is not.

use super::harness::{CONTROLLER, Harness};
use crate::object::spin::{FIRST_COOLDOWN, LIMIT};
use kube::runtime::controller::Action;
use serde_json::json;

/// `hot` counts its reconciles in its status, so each one writes; `calm` writes once.
const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    if obj.metadata.name == "hot" {
        let seen = obj.status?.seen ?? 0;
        #{ status: #{ seen: seen + 1 } }
    } else {
        #{ status: #{ phase: "Ready" } }
    }
}
"#;

#[tokio::test(start_paused = true)]
async fn an_object_whose_reconciles_keep_writing_is_paused_and_a_quiet_one_is_not() {
    // Named, so the metric counts this test's controller alone.
    let config = format!("{CONTROLLER}name = \"spinning\"\n");
    let h = Harness::new(&config, &[("w.rhai", SCRIPT)]);
    h.create("hot", json!({}), json!({}));
    h.create("calm", json!({}), json!({}));
    let ctx = h.ctx().await;
    let status_writes = |name: &str| {
        let path = format!("{}/{name}/status", super::harness::WIDGETS);
        h.writes().iter().filter(|w| w.ends_with(&path)).count()
    };
    for _ in 0..=LIMIT {
        assert_eq!(
            h.reconcile(&ctx, "hot").await.unwrap(),
            Action::await_change()
        );
        assert_eq!(
            h.reconcile(&ctx, "calm").await.unwrap(),
            Action::await_change()
        );
    }
    assert_eq!(status_writes("hot"), LIMIT + 1);
    assert_eq!(status_writes("calm"), 1);
    assert_eq!(h.events_of("HotLoop"), 1, "said once: {:?}", h.events());
    let metrics = crate::metrics::encode();
    let hot = "khai_hot_loops_total{controller=\"spinning\"} 1";
    assert!(metrics.contains(hot), "missing {hot} in\n{metrics}");
    // Paused: the reconcile writes nothing and asks to come back when the cooldown ends.
    assert_eq!(
        h.reconcile(&ctx, "hot").await.unwrap(),
        Action::requeue(FIRST_COOLDOWN)
    );
    assert_eq!(status_writes("hot"), LIMIT + 1, "a paused object wrote");
    assert_eq!(
        h.reconcile(&ctx, "calm").await.unwrap(),
        Action::await_change()
    );
    tokio::time::advance(FIRST_COOLDOWN).await;
    assert_eq!(
        h.reconcile(&ctx, "hot").await.unwrap(),
        Action::await_change()
    );
    assert_eq!(status_writes("hot"), LIMIT + 2, "the cooldown is over");
    assert_eq!(h.events_of("HotLoop"), 1);
}
