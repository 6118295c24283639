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

/// Reads a handler's answer: nothing, or a map with `status` and `events`.
pub fn take_result(out: Value, handled: &mut Handled) -> Result<(), String> {
    let mut map = match out {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "a handler returns nothing or a map of status and events, not {}",
                crate::script::type_name(&other)
            ));
        }
    };
    if let Some(status) = map.remove("status") {
        match status {
            Value::Object(s) => handled.status.get_or_insert_with(Map::new).extend(s),
            Value::Null => {}
            other => {
                return Err(format!(
                    "status: expected a map, got {}",
                    crate::script::type_name(&other)
                ));
            }
        }
    }
    if let Some(events) = map.remove("events") {
        let plan = crate::reconcile::parse_plan(json!({ "events": events }))
            .map_err(|(f, m)| format!("{f}: {m}"))?;
        handled.events.extend(plan.events);
    }
    if let Some(key) = map.keys().next() {
        return Err(format!(
            "{key}: unknown key; a handler returns status or events"
        ));
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
                .contains("children: unknown key")
        );
        assert!(take_result(json!(3), &mut h).is_err());
    }
}
