//! No I/O: whether what khai would write is already in the cluster, for children (a subset of
//! the cached copy, as the server stores it) and for status (would a merge change it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// `child` as the API server stores it, for comparing with the cache. A Secret's `stringData`
/// is write-only: the server merges it into `data`, base64-encoded, and never returns it, so a
/// Secret written with `stringData` would otherwise look changed on every reconcile.
pub(super) fn as_stored(child: &Value) -> std::borrow::Cow<'_, Value> {
    use base64::Engine as _;
    use std::borrow::Cow;
    let is_secret = child["apiVersion"] == "v1" && child["kind"] == "Secret";
    if !is_secret || !child.get("stringData").is_some_and(Value::is_object) {
        return Cow::Borrowed(child);
    }
    let mut stored = child.clone();
    let Some(obj) = stored.as_object_mut() else {
        return Cow::Borrowed(child);
    };
    let strings = obj.remove("stringData");
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if let (Some(data), Some(Value::Object(strings))) = (data.as_object_mut(), strings) {
        for (k, v) in strings {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, Value::String(encoded));
        }
    }
    Cow::Owned(stored)
}

/// The first path at which `want` is not a subset of `have` (see [`is_subset`]), if any.
pub(super) fn difference(want: &Value, have: &Value, at: String) -> Option<String> {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().find_map(|(k, v)| match h.get(k) {
            Some(hv) => difference(v, hv, format!("{at}.{k}")),
            None => Some(format!("{at}.{k}")),
        }),
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => w
            .iter()
            .zip(h)
            .enumerate()
            .find_map(|(i, (a, b))| difference(a, b, format!("{at}[{i}]"))),
        _ if is_subset(want, have) => None,
        _ => Some(if at.is_empty() { ".".into() } else { at }),
    }
}

/// The first path at which `want` is not a subset of the cached object `have` ([`is_subset`]),
/// if any, read in place: `apiVersion` and `kind` against its type, `metadata` against its
/// metadata, every other field against its body. Serialising the whole cached object first
/// copied every field of it for each compare, and a child's watch event is compared too
/// ([`super::Echoes`]).
pub fn object_difference(want: &Value, have: &DynamicObject) -> Option<String> {
    let Value::Object(want) = want else {
        return Some(".".into());
    };
    want.iter().find_map(|(k, w)| {
        let at = || format!(".{k}");
        let types = have.types.as_ref();
        match k.as_str() {
            "apiVersion" => (w.as_str() != types.map(|t| t.api_version.as_str())).then(at),
            "kind" => (w.as_str() != types.map(|t| t.kind.as_str())).then(at),
            "metadata" => metadata_difference(w, &have.metadata),
            _ => match have.data.get(k) {
                Some(h) => (!is_subset(w, h)).then(|| difference(w, h, at()).unwrap_or_else(at)),
                None => Some(at()),
            },
        }
    })
}

/// [`object_difference`] for the metadata: the fields khai sets on every child (name, namespace,
/// labels, annotations) read in place, any other through its JSON.
fn metadata_difference(want: &Value, have: &ObjectMeta) -> Option<String> {
    let Value::Object(want) = want else {
        return Some(".metadata".into());
    };
    let mut json: Option<Value> = None;
    want.iter().find_map(|(k, w)| {
        let at = || format!(".metadata.{k}");
        // As in the JSON: a field the object lacks differs from anything, `null` included.
        let text = |have: &Option<String>| match (w, have) {
            (Value::String(w), Some(h)) if w == h => None,
            _ => Some(at()),
        };
        let strings = |have: &Option<std::collections::BTreeMap<String, String>>| {
            let (Value::Object(w), Some(have)) = (w, have) else {
                return Some(at());
            };
            w.iter()
                .find(|(k, v)| {
                    v.as_str()
                        .is_none_or(|v| have.get(*k).is_none_or(|h| h != v))
                })
                .map(|(key, _)| format!("{}.{key}", at()))
        };
        let json_of = |have: Option<Value>| match have {
            Some(h) => (!is_subset(w, &h)).then(|| difference(w, &h, at()).unwrap_or_else(at)),
            None => Some(at()),
        };
        match k.as_str() {
            "name" => text(&have.name),
            "namespace" => text(&have.namespace),
            "labels" => strings(&have.labels),
            "annotations" => strings(&have.annotations),
            // The controller reference every owned child carries: only it goes through JSON.
            "ownerReferences" => json_of(
                have.owner_references
                    .as_ref()
                    .and_then(|r| serde_json::to_value(r).ok()),
            ),
            _ => {
                let json =
                    json.get_or_insert_with(|| serde_json::to_value(have).unwrap_or(Value::Null));
                match json.get(k) {
                    Some(h) => {
                        (!is_subset(w, h)).then(|| difference(w, h, at()).unwrap_or_else(at))
                    }
                    None => Some(at()),
                }
            }
        }
    })
}

/// Whether every field of `want` is present with the same value in `have`. Arrays must match
/// element by element; numbers compare by value (1 == 1.0).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| is_subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == have,
    }
}

/// Whether merging `desired` into `current` (JSON merge patch semantics) would change it.
pub fn status_differs(current: &Value, desired: &Map<String, Value>) -> bool {
    let empty = Map::new();
    merge_changes(current.as_object().unwrap_or(&empty), desired)
}

fn merge_changes(current: &Map<String, Value>, desired: &Map<String, Value>) -> bool {
    desired
        .iter()
        .any(|(k, want)| match (current.get(k), want) {
            (None, Value::Null) => false,
            (None, _) => true,
            (Some(_), Value::Null) => true,
            (Some(Value::Object(have)), Value::Object(want)) => merge_changes(have, want),
            (Some(have), want) => !same_value(have, want),
        })
}

/// Compares JSON values treating 1 and 1.0 as equal, as the API server's round trip may change
/// one into the other.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
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
    fn subset_ignores_fields_the_server_adds_but_not_changed_ones() {
        let have = json!({ "metadata": { "name": "a", "uid": "x", "labels": { "k": "v" } }, "data": { "a": "1" } });
        assert!(is_subset(
            &json!({ "metadata": { "name": "a" }, "data": { "a": "1" } }),
            &have
        ));
        assert!(!is_subset(&json!({ "data": { "a": "2" } }), &have));
        assert!(!is_subset(&json!({ "data": { "b": "1" } }), &have));
        assert!(!is_subset(
            &json!({ "list": [1] }),
            &json!({ "list": [1, 2] })
        ));
    }

    /// Comparing with the cached object in place gives what serialising it first gave.
    #[test]
    fn a_child_compares_with_the_cached_object_in_place_as_with_its_json() {
        let cached: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                          "labels": { "k": "v", "other": "x" },
                          "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "P", "name": "p",
                                                "uid": "u1", "controller": true }] },
            "data": { "size": "1", "image": "redis" },
        }))
        .unwrap();
        let json = serde_json::to_value(&cached).unwrap();
        let same = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "labels": { "k": "v" } }, "data": { "size": "1" } });
        let cases = [
            (same, None),
            (json!({ "apiVersion": "v2" }), Some(".apiVersion")),
            (json!({ "kind": "Secret" }), Some(".kind")),
            (
                json!({ "metadata": { "labels": { "k": "w" } } }),
                Some(".metadata.labels.k"),
            ),
            (
                json!({ "metadata": { "annotations": { "a": "b" } } }),
                Some(".metadata.annotations"),
            ),
            (
                json!({ "metadata": { "labels": { "x": "y" } } }),
                Some(".metadata.labels.x"),
            ),
            (
                json!({ "metadata": { "labels": { "k": 1 } } }),
                Some(".metadata.labels.k"),
            ),
            (
                json!({ "metadata": { "labels": "k" } }),
                Some(".metadata.labels"),
            ),
            (
                json!({ "metadata": { "name": "b" } }),
                Some(".metadata.name"),
            ),
            (
                json!({ "metadata": { "namespace": null } }),
                Some(".metadata.namespace"),
            ),
            (
                json!({ "metadata": { "uid": "u", "resourceVersion": "7" } }),
                None,
            ),
            (json!({ "metadata": { "uid": "v" } }), Some(".metadata.uid")),
            (
                json!({ "metadata": { "finalizers": ["f"] } }),
                Some(".metadata.finalizers"),
            ),
            (json!({ "metadata": "m" }), Some(".metadata")),
            (
                json!({ "metadata": { "ownerReferences": [{ "uid": "u1", "controller": true }] } }),
                None,
            ),
            (
                json!({ "metadata": { "ownerReferences": [{ "uid": "u2" }] } }),
                Some(".metadata.ownerReferences[0].uid"),
            ),
            (
                json!({ "metadata": { "ownerReferences": [] } }),
                Some(".metadata.ownerReferences"),
            ),
            (
                json!({ "metadata": { "labels": { "k": null } } }),
                Some(".metadata.labels.k"),
            ),
            (
                json!({ "metadata": { "annotations": {} } }),
                Some(".metadata.annotations"),
            ),
            (json!({ "metadata": { "labels": {} } }), None),
            (
                json!({ "metadata": { "generateName": null } }),
                Some(".metadata.generateName"),
            ),
            (json!({ "data": { "size": "2" } }), Some(".data.size")),
            (json!({ "data": { "new": "1" } }), Some(".data.new")),
            (json!({ "binaryData": {} }), Some(".binaryData")),
            (json!("not a map"), Some(".")),
        ];
        for (want, at) in cases {
            let in_place = object_difference(&want, &cached);
            assert_eq!(in_place.as_deref(), at, "{want}");
            assert_eq!(in_place.is_none(), is_subset(&want, &json), "{want}");
        }
        let untyped = DynamicObject {
            types: None,
            ..cached
        };
        assert_eq!(
            object_difference(&json!({ "apiVersion": "v1" }), &untyped).as_deref(),
            Some(".apiVersion")
        );
    }

    #[test]
    fn a_secret_written_with_string_data_compares_with_its_stored_data() {
        let child = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "data": { "raw": "eA==" }, "stringData": { "password": "hunter2" } });
        let stored = json!({ "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "s", "uid": "u" }, "type": "Opaque",
            "data": { "raw": "eA==", "password": "aHVudGVyMg==" } });
        assert!(is_subset(&as_stored(&child), &stored));
        let changed = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "stringData": { "password": "hunter3" } });
        assert!(!is_subset(&as_stored(&changed), &stored));
        // Only Secrets are rewritten.
        let cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "stringData": { "a": "b" } });
        assert_eq!(*as_stored(&cm), cm);
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let current = json!({ "phase": "Ready", "replicas": 3, "extra": "kept" });
        assert!(!status_differs(
            &current,
            &map(json!({ "phase": "Ready", "replicas": 3.0 }))
        ));
    }

    #[test]
    fn changed_or_removed_status_field_is_written() {
        let current = json!({ "phase": "Ready", "nested": { "a": 1 } });
        assert!(status_differs(&current, &map(json!({ "phase": "Failed" }))));
        assert!(status_differs(
            &current,
            &map(json!({ "nested": { "a": 2 } }))
        ));
        assert!(status_differs(&current, &map(json!({ "phase": null }))));
        assert!(!status_differs(&current, &map(json!({ "gone": null }))));
        assert!(status_differs(
            &Value::Null,
            &map(json!({ "phase": "Ready" }))
        ));
    }
}
