//! Which changes to a primary object warrant a reconcile.
//!
//! A controller's own status write changes the object, and reconciling again for it would be
//! wasted work (and, with a careless script, a loop). Like controller-runtime's
//! `GenerationChangedPredicate`, khai lets through changes to the spec (`generation`), labels,
//! annotations, finalizers and deletion, and drops status-only changes. Objects without a
//! generation (most built-in kinds before 1.x) always pass.

use kube::api::DynamicObject;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Remembers the last fingerprint seen per object.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    seen: HashMap<String, u64>,
}

impl Changes {
    /// Forgets `obj`, which is gone: the set holds the objects that exist, not every object
    /// ever seen.
    pub(crate) fn forget(&mut self, obj: &DynamicObject) {
        self.seen.remove(&key(obj));
    }

    /// Whether `obj` differs from the last version seen in a way that matters to reconcile.
    pub(crate) fn matters(&mut self, obj: &DynamicObject) -> bool {
        let meta = &obj.metadata;
        let Some(generation) = meta.generation else {
            return true;
        };
        let key = key(obj);
        let mut h = DefaultHasher::new();
        generation.hash(&mut h);
        meta.labels.hash(&mut h);
        meta.annotations.hash(&mut h);
        meta.finalizers.hash(&mut h);
        meta.deletion_timestamp.is_some().hash(&mut h);
        let print = h.finish();
        self.seen.insert(key, print) != Some(print)
    }
}

fn key(obj: &DynamicObject) -> String {
    let meta = &obj.metadata;
    meta.uid
        .clone()
        .unwrap_or_else(|| format!("{:?}/{:?}", meta.namespace, meta.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(generation: i64, status: &str, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "X",
            "metadata": { "name": "a", "uid": "u1", "generation": generation, "labels": labels },
            "status": { "phase": status },
        }))
        .unwrap()
    }

    #[test]
    fn status_only_change_is_dropped_but_spec_and_label_changes_pass() {
        let mut c = Changes::default();
        assert!(c.matters(&obj(1, "", json!({}))), "first sight passes");
        assert!(
            !c.matters(&obj(1, "Ready", json!({}))),
            "status-only change"
        );
        assert!(c.matters(&obj(2, "Ready", json!({}))), "spec change");
        assert!(
            c.matters(&obj(2, "Ready", json!({ "a": "b" }))),
            "label change"
        );
        assert!(
            !c.matters(&obj(2, "Ready", json!({ "a": "b" }))),
            "no change"
        );
    }

    /// The set must not keep every object ever seen, or it grows under create/delete churn.
    #[test]
    fn a_deleted_object_is_forgotten() {
        let mut c = Changes::default();
        for i in 0..100 {
            let mut o = obj(1, "", json!({}));
            o.metadata.uid = Some(format!("u{i}"));
            assert!(c.matters(&o));
            c.forget(&o);
        }
        assert!(c.seen.is_empty());
    }
}
