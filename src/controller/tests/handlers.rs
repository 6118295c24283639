//! Handler attempts: a failing create handler is tried again after its backoff, its progress
//! recorded on the object between attempts, until it succeeds; then it is done with that
//! change.

use super::harness::{CONTROLLER, Harness, NOTHING, WIDGETS};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use std::time::Duration;

const HANDLER_ENTRY: &str = r#"
[[handler]]
for = "Widget"
on = "create"
script = "h.rhai"
function = "created"
backoff = "10s"
retries = 5
"#;

/// Fails its first two attempts.
const HANDLER: &str = r#"
fn created(obj, ctx, change) {
    if ctx.retry < 2 { throw "not yet"; }
    #{ status: #{ phase: "Created" },
       events: [#{ type: "Normal", reason: "Created", message: "made it" }] }
}
"#;

const PROGRESS: &str = "op.khai.dev/progress";
const LAST_HANDLED: &str = "op.khai.dev/last-handled";

/// The handler progress recorded on the Widget `name`.
fn progress(h: &Harness, name: &str) -> Option<Value> {
    let w = h.widget(name)?;
    let text = w["metadata"]["annotations"][PROGRESS].as_str()?.to_string();
    Some(serde_json::from_str(&text).expect("progress is JSON"))
}

/// The progress of the one handler on the Widget `w`.
fn attempt(h: &Harness) -> Value {
    let p = progress(h, "w").expect("progress recorded after a failure");
    let handlers = p["handlers"].as_object().expect("progress per handler");
    handlers.values().next().expect("one handler").clone()
}

/// Moves every recorded retry time of `name`'s handlers into the past, as if their backoff had
/// passed. Handler retry times are wall-clock timestamps kept on the object (they survive a
/// restart), so tokio's paused clock does not move them.
fn backoff_passed(h: &Harness, name: &str) {
    let mut p = progress(h, name).expect("a handler waits for its retry");
    for a in p["handlers"]
        .as_object_mut()
        .into_iter()
        .flat_map(|m| m.values_mut())
    {
        a["retryAt"] = json!("2000-01-01T00:00:00.000Z");
    }
    let annotations = json!({ PROGRESS: p.to_string() });
    h.edit(name, &json!({ "metadata": { "annotations": annotations } }));
}

#[tokio::test(start_paused = true)]
async fn a_failing_create_handler_retries_after_its_backoff_and_records_its_progress() {
    let h = Harness::new(
        &format!("{CONTROLLER}{HANDLER_ENTRY}"),
        &[("w.rhai", NOTHING), ("h.rhai", HANDLER)],
    );
    h.create("w", json!({ "size": 1 }), json!({}));
    let ctx = h.ctx().await;

    let action = h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(10)),
        "its backoff"
    );
    assert_eq!(h.events_of("HandlerRetrying"), 1);
    let first = attempt(&h);
    assert_eq!(first["attempts"], 1);
    assert_eq!(first["done"], false);
    assert!(
        first["message"].as_str().unwrap().contains("not yet"),
        "{first}"
    );

    // Before its retry time, the handler is not called again and nothing is written.
    let writes = h.writes().len();
    let waiting = h.reconcile(&ctx, "w").await.unwrap();
    assert_ne!(
        waiting,
        Action::await_change(),
        "a waiting handler asks to be woken"
    );
    assert_ne!(waiting, Action::requeue(Duration::ZERO), "woken at once");
    assert_eq!(h.events_of("HandlerRetrying"), 1);
    assert_eq!(h.writes().len(), writes, "waiting wrote");

    backoff_passed(&h, "w");
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("HandlerRetrying"), 2);
    assert_eq!(attempt(&h)["attempts"], 2);
    // The cache shows the progress khai wrote before the backoff passes.
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("HandlerRetrying"), 2);

    backoff_passed(&h, "w");
    let action = h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(h.events_of("Created"), 1);
    let widget = h.widget("w").unwrap();
    assert_eq!(widget["status"]["phase"], "Created", "the handler's status");
    let annotations = &widget["metadata"]["annotations"];
    assert!(
        annotations[PROGRESS].is_null(),
        "done: no progress left {annotations}"
    );
    assert!(
        annotations[LAST_HANDLED].is_string(),
        "the change is recorded as handled"
    );

    // Handled: a later turn, over a cache that caught up, calls it no more and writes nothing.
    let writes = h.writes().len();
    let action = h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(h.events_of("Created"), 1);
    assert_eq!(h.writes().len(), writes);
    assert!(
        h.writes()
            .iter()
            .any(|w| w == &format!("PATCH {WIDGETS}/w/status"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_out_of_retries_gives_up_and_the_change_counts_as_handled() {
    let config = format!("{CONTROLLER}{HANDLER_ENTRY}").replace("retries = 5", "retries = 1");
    let failing = r#"fn created(obj, ctx, change) { throw "broken"; }"#;
    let h = Harness::new(&config, &[("w.rhai", NOTHING), ("h.rhai", failing)]);
    h.create("w", json!({}), json!({}));
    let ctx = h.ctx().await;
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        Action::requeue(Duration::from_secs(10))
    );
    h.reconcile(&ctx, "w").await.unwrap();
    backoff_passed(&h, "w");
    let action = h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "given up: nothing to wait for"
    );
    assert_eq!(h.events_of("HandlerRetrying"), 1);
    assert_eq!(h.events_of("HandlerFailed"), 1);
    let annotations = &h.widget("w").unwrap()["metadata"]["annotations"];
    assert!(annotations[LAST_HANDLED].is_string(), "{annotations}");
    assert!(annotations[PROGRESS].is_null(), "{annotations}");
}

#[tokio::test(start_paused = true)]
async fn a_call_khai_may_not_make_is_said_once_not_at_every_retry() {
    let reads = r#"fn created(obj, ctx, change) { k8s::get("v1/ConfigMap", "ns", "locked"); }"#;
    let h = Harness::new(
        &format!("{CONTROLLER}{HANDLER_ENTRY}"),
        &[("w.rhai", NOTHING), ("h.rhai", reads)],
    );
    let locked = format!("{}/locked", super::harness::CONFIGMAPS);
    h.api
        .refuse(&locked, 403, "configmaps \"locked\" is forbidden", 10);
    h.create("w", json!({}), json!({}));
    let ctx = h.ctx().await;
    for _ in 0..3 {
        h.reconcile(&ctx, "w").await.unwrap();
        // The cache shows the progress khai wrote, then the backoff passes.
        h.reconcile(&ctx, "w").await.unwrap();
        backoff_passed(&h, "w");
    }
    assert_eq!(attempt(&h)["attempts"], 3, "it was tried again");
    assert_eq!(h.events_of("Forbidden"), 1, "{:?}", h.events());
    assert_eq!(h.events_of("HandlerRetrying"), 0, "{:?}", h.events());
}
