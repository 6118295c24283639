//! Which objects a handler, timer or daemon is for: labels and annotations by value or presence,
//! a field's value or change, and a script predicate. The cheap checks run first, and an object
//! they reject is left alone without a word in the logs.

use crate::config::handlers::{Filters, Presence};
use serde_json::Value;
use std::collections::BTreeMap;

/// Whether `obj`'s labels and annotations pass `filters` (the script predicate is checked
/// apart, since it needs a script call).
pub(crate) fn metadata_passes(filters: &Filters<'_>, obj: &Value) -> bool {
    let meta = &obj["metadata"];
    passes(filters.labels, &meta["labels"]) && passes(filters.annotations, &meta["annotations"])
}

fn passes(wanted: &BTreeMap<String, Presence>, have: &Value) -> bool {
    wanted
        .iter()
        .all(|(k, cond)| cond.matches(have.get(k).and_then(Value::as_str)))
}

/// The conditions a field handler puts on a field's change.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FieldConditions<'a> {
    /// The new value must be this.
    pub value: Option<&'a Value>,
    /// The old value must have been this.
    pub old: Option<&'a Value>,
    /// The new value must be this (as `value`; Kopf has both).
    pub new: Option<&'a Value>,
}

impl FieldConditions<'_> {
    /// Whether a change from `old` to `new` passes.
    pub(crate) fn pass(&self, old: &Value, new: &Value) -> bool {
        self.value.is_none_or(|v| v == new)
            && self.new.is_none_or(|v| v == new)
            && self.old.is_none_or(|v| v == old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_and_annotations_match_by_value_presence_or_absence() {
        let labels = BTreeMap::from([
            ("app".to_string(), Presence::Value("web".into())),
            ("tier".to_string(), Presence::Present(true)),
            ("debug".to_string(), Presence::Present(false)),
        ]);
        let none = BTreeMap::new();
        let filters = Filters {
            labels: &labels,
            annotations: &none,
            when: None,
        };
        let obj = |l: Value| json!({ "metadata": { "labels": l } });
        assert!(metadata_passes(
            &filters,
            &obj(json!({ "app": "web", "tier": "x" }))
        ));
        assert!(!metadata_passes(
            &filters,
            &obj(json!({ "app": "db", "tier": "x" }))
        ));
        assert!(!metadata_passes(&filters, &obj(json!({ "app": "web" }))));
        assert!(!metadata_passes(
            &filters,
            &obj(json!({ "app": "web", "tier": "x", "debug": "1" }))
        ));
    }

    #[test]
    fn field_conditions_look_at_the_old_and_new_values() {
        let (one, two) = (json!(1), json!(2));
        let c = FieldConditions {
            old: Some(&one),
            new: Some(&two),
            value: None,
        };
        assert!(c.pass(&one, &two));
        assert!(!c.pass(&two, &two));
        assert!(FieldConditions::default().pass(&Value::Null, &one));
    }
}
