//! khai's finalizer: added while the script defines `finalize`; on deletion `finalize` runs
//! until it returns true, then the finalizer goes; an object that stops matching `when` is
//! cleaned up and let go without being deleted.

use super::harness::{Harness, WIDGETS};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;

const CONFIG: &str = r#"
[[controller]]
for = "Widget"
script = "w.rhai"
when = "selected"
"#;

/// `finalize` leaves a ConfigMap `<name>-finalized` behind, and is not done while the size
/// is 99.
const SCRIPT: &str = r#"
fn selected(obj) { obj.spec.size > 0 }

fn reconcile(obj, ctx) { #{ status: #{ phase: "Ready" } } }

fn finalize(obj, ctx) {
    if obj.spec.size == 99 { return false; }
    k8s::apply(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: obj.metadata.name + "-finalized", namespace: obj.metadata.namespace },
    });
    true
}
"#;

const FINALIZER: &str = "khai.dev/op";

fn harness() -> Harness {
    Harness::new(CONFIG, &[("w.rhai", SCRIPT)])
}

#[tokio::test(start_paused = true)]
async fn a_controller_with_finalize_adds_its_finalizer_before_anything_else() {
    let h = harness();
    h.create("w", json!({ "size": 1 }), json!({}));
    let action = h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(h.writes(), [format!("PATCH {WIDGETS}/w")]);
    let widget = h.widget("w").unwrap();
    assert_eq!(widget["metadata"]["finalizers"], json!([FINALIZER]));
    assert!(
        widget["status"].is_null(),
        "the reconcile comes after the finalizer"
    );
    // The cache shows the finalizer: the reconcile proper.
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(h.widget("w").unwrap()["status"]["phase"], "Ready");
    assert!(h.configmaps().is_empty(), "finalize ran without a deletion");
}

#[tokio::test(start_paused = true)]
async fn deleting_runs_finalize_until_it_is_done_then_removes_the_finalizer() {
    let h = harness();
    h.create("w", json!({ "size": 99 }), json!({}));
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    h.delete("w");
    let ctx = h.ctx().await;
    assert_eq!(
        h.retry_after(&ctx, "w").await,
        Action::requeue(Duration::from_secs(1)),
        "finalize is not done: retried with backoff"
    );
    let held = h.widget("w").expect("held while finalize is not done");
    assert_eq!(held["metadata"]["finalizers"], json!([FINALIZER]));
    h.edit("w", &json!({ "spec": { "size": 1 } }));
    let action = h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert!(h.configmaps().contains_key("w-finalized"), "finalize ran");
    assert!(
        h.widget("w").is_none(),
        "the finalizer went, and the object with it"
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_that_stops_matching_when_is_cleaned_up_and_let_go() {
    let h = harness();
    h.create("w", json!({ "size": 1 }), json!({}));
    h.create("never", json!({ "size": 0 }), json!({}));
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    let before = h.writes().len();
    let action = h.reconcile(&h.ctx().await, "never").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        h.writes().len(),
        before,
        "an object never selected is left alone"
    );
    h.edit("w", &json!({ "spec": { "size": 0 } }));
    let action = h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert!(h.configmaps().contains_key("w-finalized"), "finalize ran");
    let widget = h.widget("w").expect("let go, not deleted");
    assert!(
        widget["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{widget}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_from_a_cache_still_showing_the_finalizer_does_not_clean_up_again() {
    let h = harness();
    h.create("w", json!({ "size": 1 }), json!({}));
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    h.delete("w");
    let seen = h.widget("w").unwrap();
    let ctx = h.ctx().await;
    h.reconcile(&ctx, "w").await.unwrap();
    assert!(h.widget("w").is_none(), "finalized and let go");
    let writes = h.writes().len();
    // The watch has not brought the finalizer's removal yet.
    let action = h.reconcile_stale(&ctx, seen).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        h.writes().len(),
        writes,
        "finalize or the finalizer's removal ran again"
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_let_go_that_matches_again_is_held_and_finalized_again() {
    let h = harness();
    h.create("w", json!({ "size": 1 }), json!({}));
    // One controller that keeps running: what it remembers per object carries over.
    let ctx = h.ctx().await;
    let finalized = || {
        let path = format!("PATCH {}/w-finalized", super::harness::CONFIGMAPS);
        h.writes().iter().filter(|w| **w == path).count()
    };
    h.reconcile(&ctx, "w").await.unwrap();
    h.edit("w", &json!({ "spec": { "size": 0 } }));
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(finalized(), 1, "let go");
    h.edit("w", &json!({ "spec": { "size": 1 } }));
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(
        h.widget("w").unwrap()["metadata"]["finalizers"],
        json!([FINALIZER]),
        "held again"
    );
    h.delete("w");
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(finalized(), 2, "finalize runs for the deletion too");
    assert!(h.widget("w").is_none());
}

/// An object that left the controller's server-side filters and cannot be let go (here every
/// attempt fails: the fake API serves no lists) is given up on after its attempts, and the
/// controller keeps no record of it: it is out of the cache, and no deletion event will come.
#[tokio::test(start_paused = true)]
async fn an_object_given_up_on_after_leaving_the_filters_leaves_no_record_behind() {
    let h = harness();
    h.create(
        "w",
        json!({ "size": 1 }),
        json!({ "metadata": { "finalizers": [FINALIZER] } }),
    );
    let ctx = h.ctx().await;
    let seen: kube::api::DynamicObject = serde_json::from_value(h.widget("w").unwrap()).unwrap();
    crate::controller::release::left(std::sync::Arc::new(seen), ctx.clone()).await;
    assert_eq!(
        h.widget("w").unwrap()["metadata"]["finalizers"],
        json!([FINALIZER]),
        "never let go: every attempt failed"
    );
    assert!(ctx.objects.is_empty(), "{} records kept", ctx.objects.len());
}
