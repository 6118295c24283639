//! The Events an answer asks for: at most so many per answer and per object per window; the
//! rest dropped, which one Warning per window says.

use super::harness::{CONTROLLER, Harness};
use crate::object::event_budget::{PER_ANSWER, PER_WINDOW, WINDOW};
use serde_json::json;

/// Asks for more Events than one answer may record, each with its own message.
const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let events = [];
    for i in 0..15 { events.push(#{ type: "Normal", reason: "Made", message: `part ${i}` }); }
    #{ events: events }
}
"#;

#[tokio::test(start_paused = true)]
async fn events_past_the_budget_are_dropped_and_said_once_per_window() {
    let h = Harness::new(CONTROLLER, &[("w.rhai", SCRIPT)]);
    h.create("w", json!({}), json!({}));
    let ctx = h.ctx().await;
    let made = |n: usize| i64::try_from(n).unwrap();
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("Made"), made(PER_ANSWER));
    assert_eq!(h.events_of("EventsDropped"), 1);
    while h.events_of("Made") < made(PER_WINDOW) {
        h.reconcile(&ctx, "w").await.unwrap();
    }
    assert_eq!(h.events_of("Made"), made(PER_WINDOW));
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("Made"), made(PER_WINDOW), "the window is full");
    assert_eq!(h.events_of("EventsDropped"), 1, "said once per window");
    tokio::time::advance(WINDOW).await;
    h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(h.events_of("Made"), made(PER_WINDOW + PER_ANSWER));
    assert_eq!(h.events_of("EventsDropped"), 2);
}
