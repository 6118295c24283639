//! Compares what a case expects with what the reconcile answered, field by field.
//!
//! Expectations are partial, so cases stay short and survive unrelated additions: every key an
//! expected map names must match, keys it leaves out are not checked, and `key: null` means the
//! key must be absent (or null). Lists must have the same length and match item by item, in
//! order. Numbers compare by value (`2` equals `2.0`). Each difference is reported with its
//! field path, such as `children[0].data.message: expected "hi", got "hello"`.

use serde_json::Value;
use std::fmt;

/// One difference between the expected and the actual answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// Where, e.g. `children[0].data.message` or `status.phase`.
    pub path: String,
    /// What the case expected, rendered for people.
    pub expected: String,
    /// What the reconcile produced, rendered for people.
    pub got: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.path, self.expected, self.got
        )
    }
}

impl Mismatch {
    pub(crate) fn new(
        path: impl Into<String>,
        expected: impl Into<String>,
        got: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            expected: expected.into(),
            got: got.into(),
        }
    }
}

/// Appends to `out` every way in which `got` fails to match `expected` at `path`.
pub(crate) fn compare(path: &str, expected: &Value, got: Option<&Value>, out: &mut Vec<Mismatch>) {
    match (expected, got) {
        (Value::Null, None | Some(Value::Null)) => {}
        (_, None) => out.push(Mismatch::new(path, render(expected), "nothing")),
        (Value::Object(want), Some(Value::Object(have))) => {
            for (key, w) in want {
                compare(&join(path, key), w, have.get(key), out);
            }
        }
        (Value::Array(want), Some(Value::Array(have))) => {
            if want.len() != have.len() {
                out.push(Mismatch::new(path, items(want.len()), items(have.len())));
            }
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                compare(&format!("{path}[{i}]"), w, Some(h), out);
            }
        }
        (Value::Number(a), Some(Value::Number(b))) if a.as_f64() == b.as_f64() => {}
        (want, Some(have)) if want == have => {}
        (want, Some(have)) => out.push(Mismatch::new(path, render(want), render(have))),
    }
}

fn items(n: usize) -> String {
    format!("{n} item{}", if n == 1 { "" } else { "s" })
}

/// `a.b`, or `a["app.kubernetes.io/name"]` for keys that are not plain words.
pub(crate) fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{}]", Value::from(key)),
    }
}

/// Compact JSON, shortened past 120 characters so one wrong child does not flood the terminal.
pub(crate) fn render(v: &Value) -> String {
    const MAX: usize = 120;
    let text = match v {
        Value::Null => "null".to_string(),
        other => other.to_string(),
    };
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(want: Value, have: Value) -> Vec<String> {
        let mut out = Vec::new();
        compare("children", &want, Some(&have), &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_wrong_leaf_names_its_path_expected_and_got() {
        assert_eq!(
            diff(
                json!([{ "data": { "message": "hi" } }]),
                json!([{ "kind": "ConfigMap", "data": { "message": "hello" } }])
            ),
            [r#"children[0].data.message: expected "hi", got "hello""#]
        );
    }

    #[test]
    fn keys_left_out_are_not_checked_and_null_means_absent() {
        assert!(diff(json!({ "a": 1, "b": null }), json!({ "a": 1.0, "c": 3 })).is_empty());
        assert_eq!(
            diff(json!({ "c": null }), json!({ "c": 3 })),
            ["children.c: expected null, got 3"]
        );
    }

    #[test]
    fn missing_key_and_list_lengths_are_reported() {
        assert_eq!(
            diff(json!({ "a": [1, 2], "b": "x" }), json!({ "a": [1] })),
            [
                "children.a: expected 2 items, got 1 item",
                "children.b: expected \"x\", got nothing"
            ]
        );
    }

    #[test]
    fn keys_that_are_not_words_are_quoted() {
        assert_eq!(
            join("metadata.labels", "app.kubernetes.io/name"),
            r#"metadata.labels["app.kubernetes.io/name"]"#
        );
        assert_eq!(join("", "status"), "status");
    }

    #[test]
    fn long_values_are_shortened() {
        let long = json!("x".repeat(500));
        assert_eq!(render(&long).chars().count(), 121);
    }
}
