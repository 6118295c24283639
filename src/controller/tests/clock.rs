//! Timers and daemons on tokio's paused clock: a timer runs at its interval; a daemon ticks at
//! its interval with its state and is stopped when its object stops matching or goes.

use super::harness::{CONTROLLER, Harness, NOTHING};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;

fn secs(s: u64) -> Action {
    Action::requeue(Duration::from_secs(s))
}

const TIMER: &str = r#"
[[timer]]
for = "Widget"
script = "t.rhai"
function = "tick"
interval = "30s"
"#;

/// Says each run with a `Ticked` Event.
const TICK: &str = r#"
fn tick(obj, ctx) { #{ events: [#{ type: "Normal", reason: "Ticked", message: "tick" }] } }
"#;

#[tokio::test(start_paused = true)]
async fn a_timer_runs_at_its_interval() {
    let h = Harness::new(
        &format!("{CONTROLLER}{TIMER}"),
        &[("w.rhai", NOTHING), ("t.rhai", TICK)],
    );
    h.create("w", json!({}), json!({}));
    let ctx = h.ctx().await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(30));
    assert_eq!(h.events_of("Ticked"), 1, "a timer first runs at once");
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(30));
    assert_eq!(
        h.events_of("Ticked"),
        1,
        "not due: a change does not run it"
    );
    tokio::time::advance(Duration::from_secs(29)).await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(1));
    assert_eq!(h.events_of("Ticked"), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(30));
    assert_eq!(h.events_of("Ticked"), 2);
}

#[tokio::test(start_paused = true)]
async fn an_idle_timer_waits_until_its_object_has_been_left_alone() {
    let config = format!("{CONTROLLER}{TIMER}idle = \"60s\"\n");
    let h = Harness::new(&config, &[("w.rhai", NOTHING), ("t.rhai", TICK)]);
    h.create("w", json!({ "size": 1 }), json!({}));
    let ctx = h.ctx().await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(60));
    tokio::time::advance(Duration::from_secs(40)).await;
    h.edit("w", &json!({ "spec": { "size": 2 } }));
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        secs(60),
        "a change starts the wait over"
    );
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(1));
    assert_eq!(h.events_of("Ticked"), 0);
    tokio::time::advance(Duration::from_secs(1)).await;
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("Ticked"), 1, "left alone for its idle time");
}

const DAEMON: &str = r#"
[[daemon]]
for = "Widget"
script = "d.rhai"
tick = "watch"
stop = "unwatch"
interval = "10s"
labels = { run = "yes" }
"#;

/// Counts its ticks in its state; `stop` leaves the count in a ConfigMap `<name>-stopped`.
const DAEMON_SCRIPT: &str = r#"
fn watch(obj, ctx, state) {
    let n = if state == () { 1 } else { state + 1 };
    #{ state: n }
}

fn unwatch(obj, ctx, state) {
    k8s::apply(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: obj.metadata.name + "-stopped", namespace: obj.metadata.namespace },
        data: #{ ticks: `${state}` },
    });
}
"#;

fn running() -> serde_json::Value {
    json!({ "metadata": { "labels": { "run": "yes" } } })
}

#[tokio::test(start_paused = true)]
async fn a_daemon_ticks_at_its_interval_and_stops_when_its_object_stops_matching() {
    let h = Harness::new(
        &format!("{CONTROLLER}{DAEMON}"),
        &[("w.rhai", NOTHING), ("d.rhai", DAEMON_SCRIPT)],
    );
    h.create("w", json!({}), running());
    let ctx = h.ctx().await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(10));
    for _ in 0..2 {
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(10));
    }
    assert!(h.configmaps().is_empty(), "stopped while it matches");
    h.edit("w", &json!({ "metadata": { "labels": { "run": "no" } } }));
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        Action::await_change()
    );
    let stopped = &h.configmaps()["w-stopped"];
    assert_eq!(
        stopped["data"]["ticks"], "3",
        "stop gets the state of three ticks"
    );
}

#[tokio::test(start_paused = true)]
async fn a_daemon_is_stopped_when_its_object_goes() {
    // `finalize` makes khai hold the object, so its deletion comes through a reconcile.
    let reconcile = format!("{NOTHING}\nfn finalize(obj, ctx) {{ true }}");
    let h = Harness::new(
        &format!("{CONTROLLER}{DAEMON}"),
        &[("w.rhai", &reconcile), ("d.rhai", DAEMON_SCRIPT)],
    );
    h.create("w", json!({}), running());
    let ctx = h.ctx().await;
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        Action::await_change(),
        "the finalizer"
    );
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(10));
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(h.reconcile(&ctx, "w").await.unwrap(), secs(10));
    h.delete("w");
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        Action::await_change()
    );
    assert_eq!(h.configmaps()["w-stopped"]["data"]["ticks"], "2");
    assert!(h.widget("w").is_none(), "let go");
}

#[tokio::test(start_paused = true)]
async fn a_failed_daemon_tick_is_retried_after_its_backoff() {
    let config = format!("{CONTROLLER}{DAEMON}")
        .replace("interval = \"10s\"", "interval = \"10s\"\nbackoff = \"3s\"");
    // Fails its first tick, then ticks as `watch`.
    let flaky = r#"
fn flaky(obj, ctx, state) {
    if ctx.retry == 0 { throw "down"; }
    watch(obj, ctx, state)
}
"#;
    let script = format!("{DAEMON_SCRIPT}{flaky}");
    let config = config.replace("tick = \"watch\"", "tick = \"flaky\"");
    let h = Harness::new(&config, &[("w.rhai", NOTHING), ("d.rhai", &script)]);
    h.create("w", json!({}), running());
    let ctx = h.ctx().await;
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        secs(3),
        "its backoff"
    );
    assert_eq!(h.events_of("DaemonRetrying"), 1);
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(
        h.reconcile(&ctx, "w").await.unwrap(),
        secs(10),
        "its interval"
    );
    assert_eq!(h.events_of("DaemonRetrying"), 1);
    h.edit("w", &json!({ "metadata": { "labels": { "run": "no" } } }));
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(
        h.configmaps()["w-stopped"]["data"]["ticks"],
        "1",
        "one tick succeeded"
    );
}
