//! No I/O: whether what khai would write is already in the cluster, for children (a subset of
//! the cached copy, as the server stores it) and for status (would a merge change it).

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
    let current = current.as_object().unwrap_or(&empty);
    desired
        .iter()
        .any(|(k, want)| match (current.get(k), want) {
            (None, Value::Null) => false,
            (None, _) => true,
            (Some(_), Value::Null) => true,
            (Some(Value::Object(have)), Value::Object(want)) => {
                status_differs(&Value::Object(have.clone()), want)
            }
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
