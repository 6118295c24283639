//! Hashes khai writes into the cluster (a child's applied hash) or keeps to skip writes (a
//! status's): stable across builds of khai.

use serde_json::{Map, Value};

/// Hash of a desired status without the conditions' `lastTransitionTime`, which a reconcile
/// working from a stale copy would stamp afresh although nothing changed.
pub(super) fn status_hash(desired: &Map<String, Value>) -> u64 {
    hash_of(&WithoutTransitionTimes(desired))
}

/// A short hash of a JSON value (key order as produced by the script). It is written into the
/// cluster, so it must not change between builds of khai: XXH3-64 of the compact JSON text, a
/// specified algorithm, not std's `DefaultHasher`, whose output Rust may change in any release.
pub(super) fn content_hash(v: &Value) -> String {
    format!("{:016x}", content_digest(v))
}

/// [`content_hash`] as a number, for what khai keeps in memory.
pub(super) fn content_digest(v: &Value) -> u64 {
    hash_of(v)
}

/// XXH3-64 of `v`'s compact JSON text, streamed into the hasher rather than built as a string
/// first (the same digest as hashing the text in one go).
fn hash_of(v: &impl serde::Serialize) -> u64 {
    let mut hasher = Streamed(xxhash_rust::xxh3::Xxh3::new());
    // Writing into the hasher cannot fail, and a `Value` (or a map of them) always serialises.
    let _ = serde_json::to_writer(&mut hasher, v);
    hasher.0.digest()
}

struct Streamed(xxhash_rust::xxh3::Xxh3);

impl std::io::Write for Streamed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A status as it serialises, minus each condition's `lastTransitionTime`: hashed without
/// copying the status first.
struct WithoutTransitionTimes<'a>(&'a Map<String, Value>);

impl serde::Serialize for WithoutTransitionTimes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Conditions<'a>(&'a [Value]);
        struct Condition<'a>(&'a Map<String, Value>);
        impl serde::Serialize for Conditions<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for c in self.0 {
                    match c {
                        Value::Object(c) => seq.serialize_element(&Condition(c))?,
                        other => seq.serialize_element(other)?,
                    }
                }
                seq.end()
            }
        }
        impl serde::Serialize for Condition<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let kept = self.0.iter().filter(|(k, _)| *k != "lastTransitionTime");
                let mut map = s.serialize_map(None)?;
                for (k, v) in kept {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            match (k.as_str(), v) {
                ("conditions", Value::Array(c)) => map.serialize_entry(k, &Conditions(c))?,
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
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
        // The same as hashing the status with the times taken out.
        let without =
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "True" }] });
        assert_eq!(status_hash(&a), content_digest(&without));
    }

    /// The hash khai writes into the cluster must not come from std's `DefaultHasher`, which
    /// Rust may change in any release (every child would then look changed and be rewritten).
    #[test]
    fn the_applied_hash_is_a_specified_function_of_the_child() {
        let child = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" }, "data": { "k": "v" } });
        // XXH3-64 of the compact JSON text, as any XXH3 implementation computes it (Python's
        // `xxhash.xxh3_64_hexdigest` gives the same).
        assert_eq!(content_hash(&child), "80f47ab0b0581ce0");
    }
}
