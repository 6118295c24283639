//! The status khai maintains on every CRD it owns: `observedGeneration` and standard conditions.
//!
//! `Ready` is `True` after a reconcile whose plan was carried out, `False` while failing; a
//! `Failed` condition (`True`) joins it while failing, carrying the same reason and message, so
//! `kubectl wait --for=condition=Failed` works. A condition's `lastTransitionTime` changes only
//! when its status does, so an unchanged outcome yields an identical status and no write. Every
//! condition carries a `message`, `""` when there is nothing to say (`Ready` after a success),
//! as Kubernetes' own conditions do.

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

/// The outcome a status reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health<'a> {
    Ready,
    Failing { reason: &'a str, message: &'a str },
}

/// Sets `observedGeneration` and the conditions for `health` in a desired status.
pub fn set(status: &mut Map<String, Value>, obj: &DynamicObject, health: Health<'_>) {
    if let Some(generation) = obj.metadata.generation {
        status.insert("observedGeneration".into(), json!(generation));
    }
    let conditions = match health {
        Health::Ready => vec![condition(obj, "Ready", "True", "Reconciled", "")],
        Health::Failing { reason, message } => vec![
            condition(obj, "Ready", "False", reason, message),
            condition(obj, "Failed", "True", reason, message),
        ],
    };
    status.insert("conditions".into(), Value::Array(conditions));
}

fn condition(obj: &DynamicObject, type_: &str, state: &str, reason: &str, message: &str) -> Value {
    let since = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .filter(|c| c["status"] == state)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        });
    json!({
        "type": type_, "status": state, "reason": reason, "message": message,
        "lastTransitionTime": since,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "X",
            "metadata": { "name": "a", "generation": 3 }, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn ready_keeps_its_transition_time_while_it_stays_true() {
        let o = obj(
            json!({ "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z" }] }),
        );
        let mut s = Map::new();
        set(&mut s, &o, Health::Ready);
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(
            s["conditions"],
            json!([{ "type": "Ready", "status": "True", "reason": "Reconciled", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z" }])
        );
    }

    #[test]
    fn failing_sets_ready_false_and_failed_true_with_a_new_transition_time() {
        let o = obj(
            json!({ "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z" }] }),
        );
        let mut s = Map::new();
        set(
            &mut s,
            &o,
            Health::Failing {
                reason: "Failed",
                message: "bad spec",
            },
        );
        let c = s["conditions"].as_array().unwrap();
        assert_eq!(
            (c[0]["type"].as_str(), c[0]["status"].as_str()),
            (Some("Ready"), Some("False"))
        );
        assert_eq!(
            (c[1]["type"].as_str(), c[1]["status"].as_str()),
            (Some("Failed"), Some("True"))
        );
        assert_eq!(c[1]["message"], "bad spec");
        assert_ne!(c[0]["lastTransitionTime"], "2020-01-01T00:00:00Z");
    }
}
