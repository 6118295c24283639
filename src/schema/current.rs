//! Whether a CustomResourceDefinition in the cluster already is what khai would apply, so that
//! starting khai again (a restart, a rollout, a second replica) sends no write for it.
//!
//! Each manifest carries the hash of its own content in the annotation [`MANIFEST_HASH`]. A live
//! CRD is current when it carries the hash of the manifest khai would apply now *and* still holds
//! every value of that manifest. The hash notices what a comparison of values cannot: a field
//! the new manifest no longer has (server-side apply would remove it). The comparison notices
//! what the hash cannot: someone editing the CRD by hand. Anything else (defaults the server
//! added, other managers' fields) does not count as a difference, as server-side apply would
//! leave it alone too.

use serde_json::Value;

/// The annotation holding the hash of the manifest's own content.
pub(crate) const MANIFEST_HASH: &str = "khai.dev/manifest-hash";

/// Sets [`MANIFEST_HASH`] on `manifest`, computed over the manifest without it.
pub(crate) fn stamp(manifest: &mut Value) {
    let mut bare = manifest.clone();
    if let Some(meta) = bare.get_mut("metadata").and_then(Value::as_object_mut) {
        let empty = meta
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .is_some_and(|a| {
                a.remove(MANIFEST_HASH);
                a.is_empty()
            });
        if empty {
            meta.remove("annotations");
        }
    }
    let hash = format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(bare.to_string().as_bytes())
    );
    if let Some(meta) = manifest.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(MANIFEST_HASH.into(), Value::String(hash));
        }
    }
}

/// Whether `live` needs no apply of the stamped manifest `desired`.
pub(crate) fn is_current(live: &Value, desired: &Value) -> bool {
    let hash = |v: &Value| {
        v.pointer(&format!("/metadata/annotations/{}", escape(MANIFEST_HASH)))
            .cloned()
    };
    hash(desired).is_some() && hash(live) == hash(desired) && covers(live, desired)
}

/// A JSON Pointer segment for `key` (RFC 6901: `~` and `/` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether `live` holds every value of `want`: objects may have more keys, lists must have as
/// many items, each covered in order; numbers compare by value (`1` and `1.0` alike).
pub(crate) fn covers(live: &Value, want: &Value) -> bool {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| l.get(k).is_some_and(|lv| covers(lv, wv))),
        (Value::Array(l), Value::Array(w)) => {
            l.len() == w.len() && l.iter().zip(w).all(|(lv, wv)| covers(lv, wv))
        }
        (Value::Number(l), Value::Number(w)) => l.as_f64() == w.as_f64(),
        _ => live == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest() -> Value {
        let mut m = json!({
            "metadata": { "name": "caches.x", "labels": { "app.kubernetes.io/managed-by": "khai" } },
            "spec": { "group": "x", "versions": [{ "name": "v1", "schema": { "minimum": 0 } }] }
        });
        stamp(&mut m);
        m
    }

    #[test]
    fn a_crd_as_applied_plus_server_defaults_is_current() {
        let desired = manifest();
        let mut live = desired.clone();
        live["metadata"]["uid"] = json!("u1");
        live["spec"]["versions"][0]["schema"]["minimum"] = json!(0.0);
        live["spec"]["conversion"] = json!({ "strategy": "None" });
        live["status"] = json!({ "conditions": [] });
        assert!(is_current(&live, &desired));
    }

    #[test]
    fn a_hand_edit_an_older_manifest_or_no_stamp_is_not_current() {
        let desired = manifest();
        let mut edited = desired.clone();
        edited["spec"]["versions"][0]["schema"]["minimum"] = json!(1);
        assert!(!is_current(&edited, &desired), "a value edited by hand");

        // The new manifest dropped a field: same values, but a different hash.
        let mut older = desired.clone();
        older["spec"]["versions"][0]["schema"]["maximum"] = json!(9);
        stamp(&mut older);
        assert!(
            !is_current(&older, &desired),
            "a manifest from another khai"
        );

        let mut unstamped = desired.clone();
        unstamped["metadata"]["annotations"] = json!({});
        assert!(
            !is_current(&unstamped, &desired),
            "installed without the stamp"
        );

        let mut extra_version = desired.clone();
        extra_version["spec"]["versions"] = json!([{ "name": "v1" }, { "name": "v2" }]);
        assert!(
            !is_current(&extra_version, &desired),
            "a different number of versions"
        );
    }

    #[test]
    fn stamping_again_changes_nothing() {
        let a = manifest();
        let mut b = a.clone();
        stamp(&mut b);
        assert_eq!(a, b, "the hash is of the manifest without its own stamp");
    }
}
