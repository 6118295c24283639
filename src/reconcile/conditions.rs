//! The status khai maintains on every CRD it owns: `observedGeneration` and standard conditions.
//!
//! `Ready` is `True` after a reconcile whose plan was carried out, `False` while failing; a
//! `Failed` condition (`True`) joins it while failing, carrying the same reason and message, so
//! `kubectl wait --for=condition=Failed` works. Conditions of other types are the script's: the
//! ones it returns are kept beside khai's two (merged by `type`), and while a reconcile fails the
//! object keeps the ones it had. A condition's `lastTransitionTime` changes only when its status
//! does (khai fills it in when a script leaves it out), so an unchanged outcome yields an
//! identical status and no write. Every condition khai sets carries a `message`, `""` when there
//! is nothing to say (`Ready` after a success), as Kubernetes' own conditions do.

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
    let mut conditions = match health {
        Health::Ready => vec![condition(obj, "Ready", "True", "Reconciled", "")],
        Health::Failing { reason, message } => vec![
            condition(obj, "Ready", "False", reason, message),
            condition(obj, "Failed", "True", reason, message),
        ],
    };
    let theirs = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| !KHAI_TYPES.contains(&c["type"].as_str().unwrap_or_default()));
    conditions.extend(theirs.map(|c| stamped(obj, c)));
    status.insert("conditions".into(), Value::Array(conditions));
}

/// The condition types khai sets itself; a script's conditions of these types are replaced.
const KHAI_TYPES: [&str; 2] = ["Ready", "Failed"];

/// A script's condition with its `lastTransitionTime` filled in when the script left it out.
fn stamped(obj: &DynamicObject, c: &Value) -> Value {
    let mut c = c.clone();
    if c.get("lastTransitionTime").is_none_or(Value::is_null)
        && let Some(map) = c.as_object_mut()
    {
        let type_ = map.get("type").and_then(Value::as_str).unwrap_or_default();
        let state = map
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default();
        map.insert("lastTransitionTime".into(), json!(since(obj, type_, state)));
    }
    c
}

/// When the object's condition `type_` last changed to `state`: the time it carries if it is
/// in that state already, else now.
fn since(obj: &DynamicObject, type_: &str, state: &str) -> String {
    obj.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .filter(|c| c["status"] == state)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        })
}

fn condition(obj: &DynamicObject, type_: &str, state: &str, reason: &str, message: &str) -> Value {
    let since = since(obj, type_, state);
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

    /// Issue 11: khai's Ready/Failed handling replaced the conditions a script returned.
    #[test]
    fn a_scripts_own_conditions_are_kept_beside_khais_and_keep_their_transition_time() {
        let o = obj(json!({ "conditions": [
            { "type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z" },
            { "type": "Synced", "status": "True", "lastTransitionTime": "2021-01-01T00:00:00Z" },
        ] }));
        let mut s = Map::new();
        s.insert(
            "conditions".into(),
            json!([
                { "type": "Synced", "status": "True", "reason": "UpToDate" },
                { "type": "Degraded", "status": "False", "lastTransitionTime": "2022-01-01T00:00:00Z" },
                { "type": "Ready", "status": "False", "reason": "ScriptsCannotSetThis" },
            ]),
        );
        set(&mut s, &o, Health::Ready);
        assert_eq!(
            s["conditions"],
            json!([
                { "type": "Ready", "status": "True", "reason": "Reconciled", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z" },
                { "type": "Synced", "status": "True", "reason": "UpToDate", "lastTransitionTime": "2021-01-01T00:00:00Z" },
                { "type": "Degraded", "status": "False", "lastTransitionTime": "2022-01-01T00:00:00Z" },
            ])
        );
        // Failing, the status is the object's own: its conditions stay, khai's two change.
        let mut current = o.data["status"].as_object().cloned().unwrap();
        set(
            &mut current,
            &o,
            Health::Failing {
                reason: "Failed",
                message: "m",
            },
        );
        let types: Vec<_> = current["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Ready", "Failed", "Synced"]);
    }
}
