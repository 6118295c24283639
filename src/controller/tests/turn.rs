//! A turn: `reconcile`, its plan, the children applied and the status written, and nothing
//! written again while nothing changed.

use super::harness::{CONFIGMAPS, Harness, WIDGETS};
use kube::runtime::controller::Action;
use serde_json::json;

const CONFIG: &str = r#"
[[controller]]
for = "Widget"
owns = ["v1/ConfigMap"]
script = "w.rhai"
"#;

const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    #{
        children: [#{
            apiVersion: "v1", kind: "ConfigMap",
            metadata: #{ name: obj.metadata.name + "-cm" },
            data: #{ size: `${obj.spec.size}` },
        }],
        status: #{ phase: "Ready" },
    }
}
"#;

fn widgets() -> Harness {
    let h = Harness::new(CONFIG, &[("w.rhai", SCRIPT)]);
    h.create("w", json!({ "size": 3 }), json!({}));
    h
}

#[tokio::test(start_paused = true)]
async fn a_turn_applies_the_children_and_writes_the_status() {
    let h = widgets();
    let ctx = h.ctx().await;
    let action = h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        h.writes(),
        [
            format!("PATCH {CONFIGMAPS}/w-cm"),
            format!("PATCH {WIDGETS}/w/status")
        ]
    );
    let cm = &h.configmaps()["w-cm"];
    assert_eq!(cm["data"], json!({ "size": "3" }));
    let widget = h.widget("w").unwrap();
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], widget["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    let status = &widget["status"];
    assert_eq!(status["phase"], "Ready");
    assert_eq!(status["observedGeneration"], 1);
    let ready = &status["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"]),
        (&json!("Ready"), &json!("True"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_turn_over_the_same_cache_writes_nothing() {
    let h = widgets();
    let ctx = h.ctx().await;
    h.reconcile(&ctx, "w").await.unwrap();
    let after_first = h.writes();
    // The cache has not shown the writes yet: what khai wrote is remembered.
    let action = h.reconcile(&ctx, "w").await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(h.writes(), after_first, "the second turn wrote again");
}

#[tokio::test(start_paused = true)]
async fn a_turn_over_a_cache_that_caught_up_writes_only_what_changed() {
    let h = widgets();
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    let after_first = h.writes().len();
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(
        h.writes().len(),
        after_first,
        "nothing changed, yet khai wrote"
    );
    h.edit("w", &json!({ "spec": { "size": 4 } }));
    h.reconcile(&h.ctx().await, "w").await.unwrap();
    assert_eq!(
        h.writes()[after_first..],
        [format!("PATCH {CONFIGMAPS}/w-cm")],
        "only the child depends on the size"
    );
    assert_eq!(h.configmaps()["w-cm"]["data"]["size"], "4");
}

/// kube-runtime keeps each reconcile in flight (up to the controller's concurrency) in an
/// allocation of its future's size, so the future must not carry its rare branches and the
/// console's wrapper inline: together they made it four times the size of the turn itself.
#[tokio::test(start_paused = true)]
async fn a_reconcile_in_flight_holds_the_turn_boxed_not_inline() {
    let h = widgets();
    let ctx = h.ctx().await;
    let obj = std::sync::Arc::new(serde_json::from_value(h.widget("w").unwrap()).unwrap());
    let reconcile = crate::controller::reconcile::reconcile_one(obj, ctx.clone());
    let size = std::mem::size_of_val(&reconcile);
    assert!(size <= 1024, "a reconcile in flight is {size} bytes inline");
}
