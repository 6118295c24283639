//! What a handler answers (nothing, or a map of status and events), read into what the turn
//! hands the controller, and the Warning events of failed handlers.

use super::Handled;
use crate::reconcile::PlannedEvent;
use serde_json::{Map, Value, json};

pub(crate) fn warning(reason: &str, message: &str) -> PlannedEvent {
    PlannedEvent {
        warning: true,
        reason: reason.into(),
        message: message.chars().take(1024).collect(),
    }
}

/// What is wrong with a handler's, timer's or daemon's answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error("a handler returns nothing or a map of status and events, not {0}")]
    NotAMap(&'static str),
    #[error("status: expected a map, got {0}")]
    Status(&'static str),
    /// An event, as [`crate::reconcile::parse_plan`] reads it, is invalid.
    #[error(transparent)]
    Events(crate::reconcile::InvalidAnswer),
    #[error("{0}: unknown key; a handler returns status or events")]
    UnknownKey(String),
}

/// Reads a handler's answer: nothing, or a map with `status` and `events`.
pub(crate) fn take_result(out: Value, handled: &mut Handled) -> Result<(), AnswerError> {
    let mut map = match out {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => return Err(AnswerError::NotAMap(crate::script::type_name(&other))),
    };
    if let Some(status) = map.remove("status") {
        match status {
            Value::Object(s) => handled.status.get_or_insert_with(Map::new).extend(s),
            Value::Null => {}
            other => return Err(AnswerError::Status(crate::script::type_name(&other))),
        }
    }
    if let Some(events) = map.remove("events") {
        let plan = crate::reconcile::parse_plan(json!({ "events": events }))
            .map_err(AnswerError::Events)?;
        handled.events.extend(plan.events);
    }
    if let Some(key) = map.keys().next() {
        return Err(AnswerError::UnknownKey(key.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_answer_is_nothing_or_status_and_events() {
        let mut h = Handled::default();
        take_result(
            json!({ "status": { "a": 1 }, "events": [{ "reason": "Done", "message": "m" }] }),
            &mut h,
        )
        .unwrap();
        take_result(json!({ "status": { "b": 2 } }), &mut h).unwrap();
        assert_eq!(
            h.status,
            Some(json!({ "a": 1, "b": 2 }).as_object().cloned().unwrap())
        );
        assert_eq!(h.events.len(), 1);
        assert!(
            take_result(json!({ "children": [] }), &mut h)
                .unwrap_err()
                .to_string()
                .contains("children: unknown key")
        );
        assert!(take_result(json!(3), &mut h).is_err());
    }
}
