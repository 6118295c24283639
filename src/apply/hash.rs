//! Hashes khai writes into the cluster (a child's applied hash) or keeps to skip writes (a
//! status's): stable across builds of khai.

use serde_json::{Map, Value};

/// Hash of a desired status without the conditions' `lastTransitionTime`, which a reconcile
/// working from a stale copy would stamp afresh although nothing changed.
pub(super) fn status_hash(desired: &Map<String, Value>) -> String {
    let mut s = desired.clone();
    if let Some(Value::Array(conds)) = s.get_mut("conditions") {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastTransitionTime");
        }
    }
    content_hash(&Value::Object(s))
}

/// A short hash of a JSON value (key order as produced by the script). It is written into the
/// cluster, so it must not change between builds of khai: XXH3-64, a specified algorithm, not
/// std's `DefaultHasher`, whose output Rust may change in any release.
pub(super) fn content_hash(v: &Value) -> String {
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(v.to_string().as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn status_hash_ignores_transition_times_only() {
        let a = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "t1" }] }),
        );
        let b = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "t2" }] }),
        );
        let c = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": "t2" }] }),
        );
        assert_eq!(status_hash(&a), status_hash(&b));
        assert_ne!(status_hash(&a), status_hash(&c));
    }

    /// Issue 11: the hash khai writes into the cluster came from std's `DefaultHasher`, which
    /// Rust may change in any release (every child would then look changed and be rewritten).
    #[test]
    fn the_applied_hash_is_a_specified_function_of_the_child() {
        let child = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" }, "data": { "k": "v" } });
        // XXH3-64 of the compact JSON text, as any XXH3 implementation computes it (Python's
        // `xxhash.xxh3_64_hexdigest` gives the same).
        assert_eq!(content_hash(&child), "80f47ab0b0581ce0");
    }
}
