//! The status khai maintains on every CRD it owns: `observedGeneration` and standard conditions.
//!
//! `Ready` is `True` after a reconcile whose plan was carried out, `False` while failing; a
//! `Failed` condition (`True`) joins it while failing, carrying the same reason and message, so
//! `kubectl wait --for=condition=Failed` works. Conditions of other types are the script's: the
//! ones it returns are kept beside khai's two (merged by `type`). While a reconcile fails, the
//! conditions its failing answer restates (`fail(msg, #{ status })`) are written as given and
//! every other one of the script's becomes `Unknown` ([`failing`]): a condition judged by an
//! earlier success never stays `True` beside `Ready=False`. A condition's `lastTransitionTime` changes only when its status
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

/// The status a failing reconcile writes: the object's own, with the fields of the failing
/// answer's `status` (`fail(msg, #{ status })`, `retry(msg, delay, #{ status })`) in place of
/// its own. Where khai manages the status (`managed`), it also gets `Ready=False`, `Failed=True`
/// and `observedGeneration`; the script's conditions the answer restates are merged by `type`,
/// and the others turn `Unknown` with the failure's reason and message.
pub fn failing(
    obj: &DynamicObject,
    answer: Option<&Map<String, Value>>,
    reason: &str,
    message: &str,
    managed: bool,
) -> Map<String, Value> {
    let mut status = obj.data["status"].as_object().cloned().unwrap_or_default();
    let mut restated: Vec<Value> = Vec::new();
    for (k, v) in answer.into_iter().flatten() {
        match (k.as_str(), v) {
            ("conditions", Value::Array(c)) if managed => restated.clone_from(c),
            _ => {
                status.insert(k.clone(), v.clone());
            }
        }
    }
    if !managed {
        return status;
    }
    let type_of = |c: &Value| c["type"].as_str().unwrap_or_default().to_string();
    let mut conditions: Vec<Value> = Vec::new();
    for c in status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let t = type_of(c);
        if KHAI_TYPES.contains(&t.as_str()) || restated.iter().any(|r| type_of(r) == t) {
            continue;
        }
        let mut c = c.clone();
        if c["status"] != "Unknown"
            && let Some(map) = c.as_object_mut()
        {
            map.insert("status".into(), json!("Unknown"));
            map.insert("reason".into(), json!(reason));
            map.insert("message".into(), json!(message));
            map.insert(
                "lastTransitionTime".into(),
                json!(since(obj, &t, "Unknown")),
            );
        }
        conditions.push(c);
    }
    conditions.extend(restated);
    status.insert("conditions".into(), Value::Array(conditions));
    set(&mut status, obj, Health::Failing { reason, message });
    status
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

    /// khai's Ready/Failed handling keeps the conditions a script returned.
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

    #[test]
    fn a_failing_answer_restates_conditions_and_the_others_turn_unknown() {
        let o = obj(json!({ "phase": "Running", "size": 3, "conditions": [
            { "type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z" },
            { "type": "Synced", "status": "True", "reason": "UpToDate", "lastTransitionTime": "2021-01-01T00:00:00Z" },
            { "type": "Valid", "status": "True", "lastTransitionTime": "2021-01-01T00:00:00Z" },
            { "type": "Probed", "status": "Unknown", "reason": "Old", "lastTransitionTime": "2019-01-01T00:00:00Z" },
        ] }));
        let answer = json!({ "phase": "Invalid", "conditions": [
            { "type": "Valid", "status": "False", "reason": "BadSize", "message": "odd" },
        ] });
        let s = failing(&o, answer.as_object(), "Failed", "size must be even", true);
        assert_eq!(
            s["phase"], "Invalid",
            "the answer's fields replace the object's"
        );
        assert_eq!(s["size"], 3, "fields the answer leaves out stay");
        assert_eq!(s["observedGeneration"], 3);
        let by_type = |t: &str| {
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap()
        };
        assert_eq!(by_type("Ready")["status"], "False");
        assert_eq!(by_type("Failed")["status"], "True");
        let valid = by_type("Valid");
        assert_eq!(
            (&valid["status"], &valid["reason"]),
            (&json!("False"), &json!("BadSize"))
        );
        assert_ne!(valid["lastTransitionTime"], "2021-01-01T00:00:00Z");
        let synced = by_type("Synced");
        assert_eq!(
            (&synced["status"], &synced["reason"], &synced["message"]),
            (
                &json!("Unknown"),
                &json!("Failed"),
                &json!("size must be even")
            )
        );
        assert_ne!(synced["lastTransitionTime"], "2021-01-01T00:00:00Z");
        assert_eq!(
            by_type("Probed"),
            json!({ "type": "Probed", "status": "Unknown", "reason": "Old", "lastTransitionTime": "2019-01-01T00:00:00Z" }),
            "a condition already Unknown is left as it is"
        );
        assert_eq!(s["conditions"].as_array().unwrap().len(), 5);
    }

    #[test]
    fn a_failing_answer_of_a_status_khai_does_not_manage_is_written_as_given() {
        let o = obj(json!({ "conditions": [{ "type": "Synced", "status": "True" }] }));
        let answer = json!({ "phase": "Invalid" });
        let s = failing(&o, answer.as_object(), "Failed", "m", false);
        assert_eq!(
            Value::Object(s),
            json!({ "phase": "Invalid", "conditions": [{ "type": "Synced", "status": "True" }] })
        );
    }
}
