//! JSON values into Rhai values and back.
//!
//! Every script call converts its inputs (a whole Kubernetes object, a change record) into Rhai
//! values and its result back into JSON. The mapping is Rhai's own, value for value: `null` is
//! `()`, integers that fit in an `i64` are integers and other numbers floats, objects are maps.
//! Back, a float that is not finite becomes `null` (JSON has no such number), a character a
//! one-character string.
//!
//! Into Rhai, khai walks the tree itself: as fast as Rhai's serializer and it cannot fail. Back,
//! Rhai's deserializer dispatches on the value's tag at once and measured faster than a walk
//! through Rhai's public accessors (`cargo bench --bench engine -- convert`), so it does the
//! work; only when it fails does khai walk the result to say *where* a value JSON cannot hold
//! (a function pointer, a timestamp, a blob, a `ctx`) is.
//!
//! A result nested deeper than [`crate::nesting::MAX_DEPTH`] is refused before any recursive
//! walk of it (see [`crate::nesting`]).

use rhai::{Array, Dynamic, ImmutableString, Map};
use serde_json::{Number, Value};

/// A JSON value as the Rhai value scripts see.
pub fn to_dynamic(v: &Value) -> Dynamic {
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from_bool(*b),
        Value::Number(n) => number(n),
        Value::String(s) => Dynamic::from(ImmutableString::from(s.as_str())),
        Value::Array(items) => Dynamic::from_array(items.iter().map(to_dynamic).collect()),
        Value::Object(fields) => Dynamic::from_map(
            fields
                .iter()
                .map(|(k, v)| (k.as_str().into(), to_dynamic(v)))
                .collect::<Map>(),
        ),
    }
}

fn number(n: &Number) -> Dynamic {
    match n.as_i64() {
        Some(i) => Dynamic::from_int(i),
        // A u64 beyond i64, or a float.
        None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// A value in a script's result that JSON cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{type_name} at {path} cannot be converted to JSON")]
pub struct NotJson {
    /// Where in the result: `.status.when`, `[2].name`, or `the result` itself.
    pub path: String,
    /// Rhai's name of the value's type.
    pub(crate) type_name: String,
}

/// Why a script's value cannot become JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToJsonError {
    /// A value of a type JSON has no place for.
    #[error(transparent)]
    NotJson(#[from] NotJson),
    /// Arrays and maps nested deeper than [`crate::nesting::MAX_DEPTH`].
    #[error(transparent)]
    TooDeep(#[from] crate::nesting::TooDeep),
}

/// A script's value as JSON.
pub fn to_json(v: &Dynamic) -> Result<Value, ToJsonError> {
    crate::nesting::check(v)?;
    Ok(rhai::serde::from_dynamic(v).or_else(|_| locate(v))?)
}

/// A path gathered innermost segment first, as written.
fn joined(mut path: Vec<String>) -> String {
    if path.is_empty() {
        return "the result".into();
    }
    path.reverse();
    path.concat()
}

/// Converts `v` by walking it, to find the value that cannot be converted.
fn locate(v: &Dynamic) -> Result<Value, NotJson> {
    json(v).map_err(|Failed { path, type_name }| NotJson {
        path: joined(path),
        type_name,
    })
}

/// A value JSON cannot hold: its type, and the way to it, innermost segment first (pushed as
/// the error returns, so nothing is built on the way down).
struct Failed {
    path: Vec<String>,
    type_name: String,
}

fn json(v: &Dynamic) -> Result<Value, Failed> {
    if let Some(fields) = v.read_lock::<Map>() {
        let mut out = serde_json::Map::with_capacity(fields.len());
        for (k, item) in fields.iter() {
            let item = json(item).map_err(|mut f| {
                f.path.push(format!(".{k}"));
                f
            })?;
            out.insert(k.to_string(), item);
        }
        return Ok(Value::Object(out));
    }
    if let Some(s) = v.read_lock::<ImmutableString>() {
        return Ok(Value::String(s.as_str().to_string()));
    }
    if let Ok(i) = v.as_int() {
        return Ok(Value::Number(i.into()));
    }
    if let Some(items) = v.read_lock::<Array>() {
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            out.push(json(item).map_err(|mut f| {
                f.path.push(format!("[{i}]"));
                f
            })?);
        }
        return Ok(Value::Array(out));
    }
    if v.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(f) = v.as_float() {
        return Ok(Number::from_f64(f).map_or(Value::Null, Value::Number));
    }
    if let Ok(c) = v.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    other_integer(v).ok_or_else(|| Failed {
        path: Vec::new(),
        type_name: v.type_name().to_string(),
    })
}

/// Integers of other widths, which functions registered in Rust may return.
fn other_integer(v: &Dynamic) -> Option<Value> {
    macro_rules! try_width {
        ($($t:ty),*) => {$(
            if let Some(n) = v.read_lock::<$t>() {
                return Some(Value::Number((*n).into()));
            }
        )*};
    }
    try_width!(i8, i16, i32, u8, u16, u32, u64, usize);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Objects of every shape scripts receive, with the numbers at JSON's edges.
    fn samples() -> Vec<Value> {
        vec![
            json!(null),
            json!(true),
            json!(0),
            json!(-7),
            json!(i64::MAX),
            json!(u64::MAX),
            json!(1.5),
            json!(""),
            json!("ünïcödé ✓"),
            json!([]),
            json!({}),
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "a", "labels": { "x": "1" }, "generation": 3 },
                "data": { "k": "v" }, "list": [1, "two", null, { "deep": [[]] }] }),
        ]
    }

    #[test]
    fn values_convert_as_rhai_serde_converts_them() {
        for v in samples() {
            let ours = to_dynamic(&v);
            let theirs: Dynamic = rhai::serde::to_dynamic(&v).unwrap();
            assert_eq!(ours.type_name(), theirs.type_name(), "{v}");
            assert_eq!(ours.to_string(), theirs.to_string(), "{v}");
            let back: Value = rhai::serde::from_dynamic(&ours).unwrap();
            assert_eq!(to_json(&ours).unwrap(), back, "{v}");
            assert_eq!(locate(&ours).unwrap(), back, "{v}");
            assert_eq!(locate(&theirs).unwrap(), back, "{v}");
        }
    }

    #[test]
    fn a_round_trip_keeps_every_json_value_but_u64_beyond_i64() {
        for v in samples().into_iter().filter(|v| *v != json!(u64::MAX)) {
            assert_eq!(to_json(&to_dynamic(&v)).unwrap(), v);
        }
        assert_eq!(
            to_json(&to_dynamic(&json!(u64::MAX))).unwrap(),
            json!(u64::MAX as f64)
        );
    }

    #[test]
    fn script_values_json_cannot_hold_are_named_with_their_place() {
        let engine = rhai::Engine::new();
        let v: Dynamic = engine
            .eval(r#"#{ status: #{ items: [1, #{ at: timestamp() }] }, c: 'x', n: 1.0 / 0.0 }"#)
            .unwrap();
        let Err(ToJsonError::NotJson(err)) = to_json(&v) else {
            panic!("a timestamp converted")
        };
        assert_eq!(err.path, ".status.items[1].at");
        assert_eq!(
            err.to_string(),
            "timestamp at .status.items[1].at cannot be converted to JSON"
        );
        let ok: Dynamic = engine.eval(r#"#{ c: 'x', n: 1.0 / 0.0 }"#).unwrap();
        assert_eq!(to_json(&ok).unwrap(), json!({ "c": "x", "n": null }));
        assert_eq!(locate(&ok).unwrap(), json!({ "c": "x", "n": null }));
        let f: Dynamic = engine.eval("Fn(\"x\")").unwrap();
        assert_eq!(locate(&f).unwrap_err().path, "the result");
    }

    #[test]
    fn shared_values_of_closures_are_read_through() {
        let engine = rhai::Engine::new();
        let v: Dynamic = engine.eval("let x = #{ a: 1 }; let f = || x.a; x").unwrap();
        assert_eq!(to_json(&v).unwrap(), json!({ "a": 1 }));
        assert_eq!(locate(&v).unwrap(), json!({ "a": 1 }));
    }

    /// A value as deep as `depth` arrays, built without recursion.
    fn nested(depth: usize) -> Dynamic {
        let mut v = Dynamic::UNIT;
        for _ in 0..depth {
            v = Dynamic::from_array(vec![v]);
        }
        v
    }

    #[test]
    fn a_result_nested_up_to_the_limit_converts() {
        let v = to_json(&nested(crate::nesting::MAX_DEPTH)).unwrap();
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(text.matches('[').count(), crate::nesting::MAX_DEPTH);
        // khai reads back what it writes: serde_json's reader stops at 128 levels.
        let _: Value = serde_json::from_str(&format!("{{\"a\":{{\"b\":{text}}}}}")).unwrap();
    }

    #[test]
    fn a_result_nested_deeper_is_refused_with_its_place_not_a_stack_overflow() {
        // Deep enough to overflow any thread's stack in a recursive walk or drop.
        let deep = nested(1_000_000);
        let mut status = Map::new();
        status.insert("a".into(), Dynamic::from_array(vec![Dynamic::UNIT, deep]));
        let mut result = Map::new();
        result.insert("status".into(), Dynamic::from_map(status));
        let result = Dynamic::from_map(result);
        let err = to_json(&result);
        // Taken apart before any assertion can fail: unwinding would drop it recursively.
        crate::nesting::dismantle(result);
        let err = err.unwrap_err();
        assert!(matches!(err, ToJsonError::TooDeep(_)), "{err}");
        assert_eq!(
            err.to_string(),
            ".status.a[1][0][0][0]… nests more than 120 arrays and maps deep"
        );
    }
}
