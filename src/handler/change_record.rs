//! The change record a handler gets (`#{ type, old, new, diff }`), and whether a handler cares
//! about a change at all.

use super::{change, filter};
use crate::config::handlers::{Handler, On};
use serde_json::{Value, json};

/// Whether `spec` cares about a change from `old` to `new`: with a `field`, only when that
/// field changed and its conditions pass. Returns the field (or `""`).
pub(super) fn relevant<'a>(spec: &'a Handler, old: &Value, new: &Value) -> Option<&'a str> {
    let Some(field) = spec.field.as_deref() else {
        return Some("");
    };
    let (o, n) = (change::field(old, field), change::field(new, field));
    let conditions = filter::FieldConditions {
        value: spec.value.as_ref(),
        old: spec.old.as_ref(),
        new: spec.new.as_ref(),
    };
    (!change::diff(o, n).is_empty() && conditions.pass(o, n)).then_some(field)
}

/// The change record a handler gets: `#{ type, old, new, diff }`, relative to `field` when
/// given (and `field` itself).
/// The change record a handler of `spec` gets for a change from `old` to `new` (the
/// objects' essences; `old` is the object itself for a delete); what `khai test` calls
/// handlers with.
pub(crate) fn change_record(spec: &Handler, old: &Value, new: &Value) -> Value {
    match spec.on {
        On::Create => record("create", &Value::Null, new, None),
        On::Update => record("update", old, new, None),
        On::Field => record("field", old, new, spec.field.as_deref()),
        On::Delete => record("delete", old, &Value::Null, None),
        On::Resume => json!({ "type": "resume", "old": old, "new": new, "diff": [] }),
        // Spies are called with the whole object, not a change (see `Handlers::on_event`).
        On::Event => json!({ "type": "MODIFIED", "object": new }),
    }
}

pub(super) fn record(kind: &str, old: &Value, new: &Value, field: Option<&str>) -> Value {
    match field.filter(|f| !f.is_empty()) {
        Some(f) => {
            let (o, n) = (change::field(old, f), change::field(new, f));
            json!({ "type": kind, "field": f, "old": o, "new": n, "diff": diffs(o, n) })
        }
        None => json!({ "type": kind, "old": old, "new": new, "diff": diffs(old, new) }),
    }
}

pub(super) fn diffs(old: &Value, new: &Value) -> Value {
    Value::Array(
        change::diff(old, new)
            .iter()
            .map(change::Diff::to_json)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(on: &str, extra: &str) -> Handler {
        toml::from_str(&format!(
            "for = \"Widget\"\non = \"{on}\"\nscript = \"h.rhai\"\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn a_field_handler_cares_only_for_its_field_and_its_conditions() {
        let old = json!({ "spec": { "size": 1, "image": "a" } });
        let new = json!({ "spec": { "size": 2, "image": "a" } });
        assert_eq!(
            relevant(&handler("field", "field = \"spec.size\""), &old, &new),
            Some("spec.size")
        );
        assert_eq!(
            relevant(&handler("field", "field = \"spec.image\""), &old, &new),
            None
        );
        assert_eq!(
            relevant(
                &handler("field", "field = \"spec.size\"\nnew = 3"),
                &old,
                &new
            ),
            None
        );
        assert_eq!(
            relevant(
                &handler("field", "field = \"spec.size\"\nold = 1\nnew = 2"),
                &old,
                &new
            ),
            Some("spec.size")
        );
        assert_eq!(relevant(&handler("update", ""), &old, &new), Some(""));
    }

    #[test]
    fn a_field_change_record_is_relative_to_the_field() {
        let old = json!({ "spec": { "size": 1 } });
        let new = json!({ "spec": { "size": 2 } });
        assert_eq!(
            record("field", &old, &new, Some("spec.size")),
            json!({ "type": "field", "field": "spec.size", "old": 1, "new": 2,
                    "diff": [{ "op": "change", "path": [], "old": 1, "new": 2 }] })
        );
        let whole = record("update", &old, &new, None);
        assert_eq!(whole["diff"][0]["path"], json!(["spec", "size"]));
    }
}
