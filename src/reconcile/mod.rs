//! Runs a controller's script for one object and turns its answer into a [`Plan`]. No I/O.
//!
//! The script's contract: `reconcile(obj, ctx)` returns a map with optional `children` (an array
//! of desired objects), `status` (the desired `.status`), `events` (Kubernetes Events to record on
//! the object: `#{ type: "Normal", reason: "Scaled", message: "..." }`) and `requeue_after` (`"30s"`, `"5m"`,
//! `"1h"` or a number of seconds). Returning nothing means no children and no status change.
//! The answer is validated here, once, so `apply` only ever sees well-formed plans.

pub(crate) mod children;
pub mod conditions;
mod list_keys;
pub(crate) mod lookup;

use crate::script::type_name;
use crate::script::{Script, ScriptCtx, ScriptError};
use kube::api::DynamicObject;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// The shortest `requeue_after` khai honours: a shorter one (`"1ms"` ran about 430 reconciles
/// a second of one object) waits this long instead. `retry(msg, delay)` from `reconcile` has the
/// same floor.
pub(crate) const MIN_REQUEUE_AFTER: Duration = Duration::from_secs(1);

/// What the script wants to be true for one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Desired child objects, each with apiVersion, kind and metadata.name.
    pub children: Vec<Value>,
    /// Desired `.status`; `None` leaves the status alone.
    pub status: Option<Map<String, Value>>,
    /// Reconcile again after this long even if nothing changes; at least [`MIN_REQUEUE_AFTER`].
    pub requeue_after: Option<Duration>,
    /// Events to record on the reconciled object.
    pub events: Vec<PlannedEvent>,
}

/// An Event a script asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    /// `true` for `Warning`, `false` for `Normal`.
    pub(crate) warning: bool,
    /// PascalCase, at most 128 characters.
    pub reason: String,
    pub message: String,
}

/// Why a reconcile produced no plan.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    /// The script failed to run; retried with backoff, since it may depend on changing state.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The script asked for a child khai must not apply.
    #[error(transparent)]
    InvalidChild(#[from] children::Invalid),
    /// The script ran but returned something khai cannot carry out.
    #[error("{file}: {function} returned an invalid result: {answer}")]
    InvalidResult {
        file: String,
        function: String,
        answer: Box<InvalidAnswer>,
    },
}

impl Error {
    /// The reason of the Warning Event and of the `Ready=False` condition a reconcile that
    /// failed this way gets.
    pub(crate) fn failure_reason(&self) -> &'static str {
        match self {
            Error::Script(ScriptError::Retry { .. }) => "RetryRequested",
            Error::Script(ScriptError::Fail { .. }) => "Failed",
            Error::Script(ScriptError::Api { reason, .. }) if reason == "forbidden" => FORBIDDEN,
            _ => "ReconcileFailed",
        }
    }
}

/// The Event and condition reason of a script's API call the API server refused (403).
pub(crate) const FORBIDDEN: &str = "Forbidden";

/// What is wrong with a script's answer, and where in it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidAnswer {
    /// The path in the answer: `children[0].metadata.name`, `requeue_after`, `"odd key"`.
    pub field: String,
    pub problem: Problem,
}

/// The ways an answer (or one of its fields) can be wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("expected {expected}, got {got}")]
    WrongType {
        expected: &'static str,
        got: &'static str,
    },
    #[error("must be a non-empty string")]
    Empty,
    #[error("must be \"Normal\" or \"Warning\", got {0:?}")]
    EventType(String),
    #[error("must be 1 to 128 letters and digits, like \"Scaled\"")]
    EventReason,
    #[error("unknown key; expected children, status, events or requeue_after")]
    UnknownKey,
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error("has no `{key}`, which the API server needs to tell the entries of `{list}` apart")]
    MissingListKey {
        key: &'static str,
        list: &'static str,
    },
    #[error("repeats {keys} of {first}; each entry of the list needs its own")]
    RepeatedListKeys { keys: String, first: String },
    /// A handler's answer, as `handler::answer` reads it, is invalid (`khai test`).
    #[error("{0}")]
    Handler(String),
}

impl Problem {
    fn at(self, field: impl Into<String>) -> InvalidAnswer {
        InvalidAnswer {
            field: field.into(),
            problem: self,
        }
    }

    fn wrong_type(expected: &'static str, got: &Value) -> Self {
        Self::WrongType {
            expected,
            got: type_name(got),
        }
    }
}

/// Why a duration in a script's answer is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// The number of seconds, as written.
    #[error("{0} seconds is too long to wait for")]
    TooManySeconds(String),
    #[error("must not be negative, got {0}")]
    Negative(f64),
    #[error("expected a duration like \"30s\", got {0}")]
    WrongType(&'static str),
    #[error(transparent)]
    Text(#[from] crate::config::duration::ParseError),
}

/// Calls `function(obj, ctx)` in `script` and validates the result into a [`Plan`].
pub async fn plan(
    script: &Script,
    function: &str,
    obj: Arc<DynamicObject>,
    ctx: ScriptCtx,
) -> Result<Plan, Error> {
    let out = script.call_object_async(function, obj, ctx).await?;
    parse_plan(out).map_err(|answer| Error::InvalidResult {
        file: script.file().display().to_string(),
        function: function.into(),
        answer: Box::new(answer),
    })
}

/// Validates a script's return value.
pub fn parse_plan(out: Value) -> Result<Plan, InvalidAnswer> {
    let mut map = match out {
        Value::Null => return Ok(Plan::default()),
        Value::Object(m) => m,
        other => return Err(Problem::wrong_type("a map or nothing", &other).at("result")),
    };
    let mut plan = Plan::default();
    if let Some(children) = map.remove("children") {
        plan.children = parse_children(children)?;
    }
    match map.remove("status") {
        None | Some(Value::Null) => {}
        Some(Value::Object(s)) => plan.status = Some(s),
        Some(other) => return Err(Problem::wrong_type("a map", &other).at("status")),
    }
    if let Some(events) = map.remove("events") {
        plan.events = parse_events(events)?;
    }
    if let Some(r) = map.remove("requeue_after") {
        let after = parse_duration(&r).map_err(|e| Problem::from(e).at("requeue_after"))?;
        plan.requeue_after = Some(after.max(MIN_REQUEUE_AFTER));
    }
    if let Some(key) = map.keys().next() {
        // A key that is not a plain name is quoted, so that an empty or odd one still shows.
        let plain = !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_');
        let field = if plain {
            key.clone()
        } else {
            format!("{key:?}")
        };
        return Err(Problem::UnknownKey.at(field));
    }
    Ok(plan)
}

fn parse_children(v: Value) -> Result<Vec<Value>, InvalidAnswer> {
    let Value::Array(items) = v else {
        return Err(Problem::wrong_type("an array", &v).at("children"));
    };
    for (i, child) in items.iter().enumerate() {
        let field = |f: &str| format!("children[{i}].{f}");
        if !child.is_object() {
            return Err(Problem::wrong_type("a map", child).at(format!("children[{i}]")));
        }
        for key in ["apiVersion", "kind"] {
            if child[key].as_str().is_none_or(str::is_empty) {
                return Err(Problem::Empty.at(field(key)));
            }
        }
        if child["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err(Problem::Empty.at(field("metadata.name")));
        }
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let mut child = without_nulls(child);
            list_keys::fill(&mut child, &format!("children[{i}]"))?;
            Ok(child)
        })
        .collect()
}

/// `v` without the map entries whose value is null (`()` in a script): in a desired child,
/// null means "no such field", as it does in `khai test` cases. Sent as they are, such fields
/// would never appear in the stored object, so the child would look changed, and be applied
/// again, on every reconcile.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

fn parse_events(v: Value) -> Result<Vec<PlannedEvent>, InvalidAnswer> {
    let Value::Array(items) = v else {
        return Err(Problem::wrong_type("an array", &v).at("events"));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let at = |f: &str| format!("events[{i}].{f}");
            let warning = match e["type"].as_str().unwrap_or("Normal") {
                "Normal" => false,
                "Warning" => true,
                other => return Err(Problem::EventType(other.into()).at(at("type"))),
            };
            let reason = e["reason"].as_str().unwrap_or_default().to_string();
            if reason.is_empty()
                || reason.len() > 128
                || !reason.chars().all(|c| c.is_ascii_alphanumeric())
            {
                return Err(Problem::EventReason.at(at("reason")));
            }
            let message = e["message"].as_str().unwrap_or_default().to_string();
            Ok(PlannedEvent {
                warning,
                reason,
                message,
            })
        })
        .collect()
}

/// Parses a duration written in a script's answer; see [`crate::config::duration::parse`].
pub(crate) fn parse_duration(v: &Value) -> Result<Duration, DurationError> {
    if let Some(n) = v.as_f64() {
        return if n >= 0.0 {
            Duration::try_from_secs_f64(n).map_err(|_| DurationError::TooManySeconds(v.to_string()))
        } else {
            Err(DurationError::Negative(n))
        };
    }
    let s = v
        .as_str()
        .ok_or_else(|| DurationError::WrongType(type_name(v)))?;
    Ok(crate::config::duration::parse(s)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nothing_means_an_empty_plan() {
        assert_eq!(parse_plan(Value::Null).unwrap(), Plan::default());
    }

    #[test]
    fn a_requeue_after_below_one_second_waits_one_second() {
        for short in [json!("1ms"), json!("250ms"), json!(0), json!(0.001)] {
            let p = parse_plan(json!({ "requeue_after": short })).unwrap();
            assert_eq!(p.requeue_after, Some(MIN_REQUEUE_AFTER), "{short}");
        }
        let p = parse_plan(json!({ "requeue_after": "1500ms" })).unwrap();
        assert_eq!(p.requeue_after, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn full_answer_becomes_a_plan() {
        let p = parse_plan(json!({
            "children": [{ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" } }],
            "status": { "phase": "Ready" },
            "requeue_after": "2m",
        }))
        .unwrap();
        assert_eq!(p.children.len(), 1);
        assert_eq!(p.status.unwrap()["phase"], "Ready");
        assert_eq!(p.requeue_after, Some(Duration::from_secs(120)));
    }

    #[test]
    fn child_without_a_name_is_rejected_with_its_path() {
        let err = parse_plan(
            json!({ "children": [{ "apiVersion": "v1", "kind": "ConfigMap", "metadata": {} }] }),
        )
        .unwrap_err();
        assert_eq!(err.field, "children[0].metadata.name");
        assert_eq!(err.problem, Problem::Empty);
        assert_eq!(
            err.to_string(),
            "children[0].metadata.name: must be a non-empty string"
        );
    }

    #[test]
    fn events_are_validated() {
        let p = parse_plan(
            json!({ "events": [{ "type": "Warning", "reason": "Slow", "message": "m" }] }),
        )
        .unwrap();
        assert_eq!(
            p.events,
            [PlannedEvent {
                warning: true,
                reason: "Slow".into(),
                message: "m".into()
            }]
        );
        let err = parse_plan(json!({ "events": [{ "reason": "not pascal" }] })).unwrap_err();
        assert_eq!(err.field, "events[0].reason");
        let err = parse_plan(json!({ "events": [{ "type": "Info", "reason": "X" }] })).unwrap_err();
        assert_eq!(err.field, "events[0].type");
    }

    #[test]
    fn misspelled_key_is_rejected() {
        let err = parse_plan(json!({ "stauts": {} })).unwrap_err();
        assert_eq!(err.field, "stauts");
    }

    #[test]
    fn an_unknown_key_that_is_empty_or_not_a_name_is_shown_quoted() {
        // Found by fuzzing (`scripts/fuzz plan`): `#{ "": 1 }` was reported as ": unknown key".
        let err = parse_plan(json!({ "": 1 })).unwrap_err();
        assert_eq!(err.field, r#""""#);
        let err = parse_plan(json!({ "a b\n": 1 })).unwrap_err();
        assert_eq!(err.field, r#""a b\n""#);
    }

    #[test]
    fn durations_parse_in_the_units_authors_write() {
        assert_eq!(
            parse_duration(&json!("250ms")).unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(parse_duration(&json!(5)).unwrap(), Duration::from_secs(5));
        assert_eq!(
            parse_duration(&json!("1h")).unwrap(),
            Duration::from_secs(3600)
        );
        assert!(parse_duration(&json!("5 parsecs")).is_err());
        assert!(parse_duration(&json!(-1)).is_err());
    }

    /// A child field the script sets to `()` is absent, in `khai run` as in `khai test`: sent
    /// as null, the stored child would never have it, and it would be rewritten on every
    /// reconcile.
    #[test]
    fn null_fields_of_a_child_are_absent_fields() {
        let p = parse_plan(json!({ "children": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "labels": { "gone": null, "kept": "x" } },
            "data": { "k": "v", "unset": null },
            "list": [{ "a": null, "b": 1 }, null],
        }] }))
        .unwrap();
        assert_eq!(
            p.children[0],
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "a", "labels": { "kept": "x" } },
                "data": { "k": "v" }, "list": [{ "b": 1 }, null] })
        );
    }

    #[test]
    fn a_requeue_too_long_to_represent_is_rejected_not_a_panic() {
        // Found by fuzzing (`scripts/fuzz plan`): these panicked in Duration::from_secs_f64.
        let err = parse_plan(json!({ "requeue_after": 1e300 })).unwrap_err();
        assert_eq!(err.field, "requeue_after");
        assert_eq!(
            err.problem.to_string(),
            "1e+300 seconds is too long to wait for"
        );
        let err = parse_plan(json!({ "requeue_after": "377777777777777777777777730s" }));
        assert_eq!(err.unwrap_err().field, "requeue_after");
    }
}
