//! What changed in an object: its essence, and the difference between two essences in Kopf's
//! diff shape.
//!
//! The essence is what handlers react to: the object without its status and without the
//! metadata the API server and khai maintain (only labels and annotations stay, minus khai's
//! own bookkeeping annotations). Two versions with the same essence are the same to handlers, so
//! a status write or a resourceVersion bump never looks like an update.
//!
//! A diff is a list of `(op, path, old, new)`: `op` is `add`, `change` or `remove`, `path` the
//! list of keys down to the field. Maps are compared key by key; any other value (lists
//! included) is compared whole, as Kopf does.

use serde_json::{Map, Value, json};

/// One difference between two values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Diff {
    pub op: Op,
    /// Keys from the compared value down to the field.
    pub path: Vec<String>,
    pub old: Value,
    pub new: Value,
}

/// What happened to a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Change,
    Remove,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Change => "change",
            Op::Remove => "remove",
        }
    }
}

impl Diff {
    /// As scripts see it: `#{ op, path, old, new }`.
    pub(crate) fn to_json(&self) -> Value {
        json!({ "op": self.op.name(), "path": self.path, "old": self.old, "new": self.new })
    }
}

/// Metadata fields handlers react to; the rest is the API server's or khai's bookkeeping.
const KEPT_METADATA: [&str; 2] = ["labels", "annotations"];

/// The essence of `obj`: everything but `status`, `apiVersion`, `kind`, and the metadata other
/// than labels and annotations; annotations whose key starts with `bookkeeping` (khai's own)
/// are left out too.
pub(crate) fn essence(obj: &Value, bookkeeping: &str) -> Value {
    let Some(fields) = obj.as_object() else {
        return Value::Null;
    };
    let mut out = Map::new();
    for (k, v) in fields {
        match k.as_str() {
            "status" | "apiVersion" | "kind" => {}
            "metadata" => {
                let mut meta = Map::new();
                for key in KEPT_METADATA {
                    let Some(Value::Object(m)) = v.get(key) else {
                        continue;
                    };
                    let kept: Map<String, Value> = m
                        .iter()
                        .filter(|(k, _)| !k.starts_with(bookkeeping))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    if !kept.is_empty() {
                        meta.insert(key.into(), Value::Object(kept));
                    }
                }
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// Every difference from `old` to `new`, in the order of `old`'s keys then `new`'s new ones.
pub(crate) fn diff(old: &Value, new: &Value) -> Vec<Diff> {
    let mut out = Vec::new();
    walk(&mut Vec::new(), old, new, &mut out);
    out
}

fn walk(path: &mut Vec<String>, old: &Value, new: &Value, out: &mut Vec<Diff>) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, ov) in o {
                path.push(k.clone());
                match n.get(k) {
                    Some(nv) => walk(path, ov, nv, out),
                    None => out.push(Diff {
                        op: Op::Remove,
                        path: path.clone(),
                        old: ov.clone(),
                        new: Value::Null,
                    }),
                }
                path.pop();
            }
            for (k, nv) in n.iter().filter(|(k, _)| !o.contains_key(*k)) {
                path.push(k.clone());
                out.push(Diff {
                    op: Op::Add,
                    path: path.clone(),
                    old: Value::Null,
                    new: nv.clone(),
                });
                path.pop();
            }
        }
        (Value::Null, Value::Null) => {}
        (Value::Null, n) => out.push(Diff {
            op: Op::Add,
            path: path.clone(),
            old: Value::Null,
            new: n.clone(),
        }),
        (o, Value::Null) => out.push(Diff {
            op: Op::Remove,
            path: path.clone(),
            old: o.clone(),
            new: Value::Null,
        }),
        (o, n) if !same(o, n) => out.push(Diff {
            op: Op::Change,
            path: path.clone(),
            old: o.clone(),
            new: n.clone(),
        }),
        _ => {}
    }
}

/// Equal, with 1 and 1.0 the same number (the API server may turn one into the other).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The dotted `field` of `v` (`spec.size`), or null when any step is missing.
pub(crate) fn field<'a>(v: &'a Value, field: &str) -> &'a Value {
    const NULL: &Value = &Value::Null;
    field
        .split('.')
        .filter(|s| !s.is_empty())
        .try_fold(v, |v, key| v.get(key))
        .unwrap_or(NULL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(d: &[Diff]) -> Vec<(&'static str, String)> {
        d.iter().map(|d| (d.op.name(), d.path.join("."))).collect()
    }

    #[test]
    fn the_essence_leaves_out_status_and_bookkeeping() {
        let obj = json!({
            "apiVersion": "x/v1", "kind": "X",
            "metadata": { "name": "a", "uid": "u", "resourceVersion": "7", "generation": 2,
                "labels": { "app": "web" },
                "annotations": { "note": "n", "ops.khai.dev/last-handled": "{}" },
                "managedFields": [{}] },
            "spec": { "size": 1 }, "data": { "k": "v" }, "status": { "phase": "Ready" },
        });
        assert_eq!(
            essence(&obj, "ops.khai.dev/"),
            json!({
                "metadata": { "labels": { "app": "web" }, "annotations": { "note": "n" } },
                "spec": { "size": 1 }, "data": { "k": "v" },
            })
        );
    }

    #[test]
    fn a_diff_lists_added_changed_and_removed_fields_with_their_paths() {
        let old = json!({ "spec": { "size": 1, "image": "a", "ports": [1, 2], "gone": true } });
        let new = json!({ "spec": { "size": 2.0, "image": "a", "ports": [1, 3], "extra": { "k": 1 } },
                          "metadata": { "labels": { "x": "y" } } });
        let d = diff(&old, &new);
        assert_eq!(
            ops(&d),
            [
                ("change", "spec.size".to_string()),
                ("change", "spec.ports".into()),
                ("remove", "spec.gone".into()),
                ("add", "spec.extra".into()),
                ("add", "metadata".into()),
            ]
        );
        assert_eq!(
            d[1].to_json(),
            json!({ "op": "change", "path": ["spec", "ports"], "old": [1, 2], "new": [1, 3] })
        );
        assert!(
            diff(&json!({ "a": 1 }), &json!({ "a": 1.0 })).is_empty(),
            "1 and 1.0 are one number"
        );
        assert_eq!(
            ops(&diff(&Value::Null, &json!({ "a": 1 }))),
            [("add", String::new())]
        );
    }

    #[test]
    fn a_field_is_found_by_its_dotted_path_or_is_null() {
        let v = json!({ "spec": { "size": 3, "nested": { "k": "v" } } });
        assert_eq!(field(&v, "spec.size"), &json!(3));
        assert_eq!(field(&v, "spec.nested.k"), &json!("v"));
        assert_eq!(field(&v, "spec.missing.k"), &Value::Null);
    }
}
