//! `json::`: JSON text to script values and back, through the same conversion as a script's
//! inputs and results ([`crate::script::convert`]), so `json::stringify` accepts exactly what
//! a reconcile may return.

use super::{RhaiResult, error, quoted};
use rhai::{Dynamic, NativeCallContext};

/// `v` as JSON, or an error naming where in it a value JSON cannot hold is.
pub(super) fn to_json(
    ctx: &NativeCallContext,
    function: &str,
    v: &Dynamic,
) -> RhaiResult<serde_json::Value> {
    crate::script::convert::to_json(v).map_err(|e| error(ctx, format!("{function}: {e}")))
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::{RhaiResult, error, quoted, to_json};
    use rhai::{Dynamic, NativeCallContext};

    /// The value JSON `text` holds: objects become maps, `null` is `()`.
    #[rhai_fn(return_raw)]
    pub fn parse(ctx: NativeCallContext, text: &str) -> RhaiResult<Dynamic> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            error(
                &ctx,
                format!("json::parse: {} is not JSON: {e}", quoted(text)),
            )
        })?;
        Ok(crate::script::convert::to_dynamic(&v))
    }

    /// `value` as compact JSON (map keys in order).
    #[rhai_fn(return_raw)]
    pub fn stringify(ctx: NativeCallContext, value: Dynamic) -> RhaiResult<String> {
        let v = to_json(&ctx, "json::stringify", &value)?;
        Ok(v.to_string())
    }

    /// `value` as indented JSON, for people to read.
    #[rhai_fn(return_raw)]
    pub fn pretty(ctx: NativeCallContext, value: Dynamic) -> RhaiResult<String> {
        let v = to_json(&ctx, "json::pretty", &value)?;
        serde_json::to_string_pretty(&v).map_err(|e| error(&ctx, format!("json::pretty: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::eval_json as eval;

    #[test]
    fn json_round_trips_every_kind_of_value() {
        let text = r#"{"a":[1,2.5,"x",null,true],"b":{"c":{}}}"#;
        assert_eq!(
            eval(&format!("json::stringify(json::parse({text:?}))")).unwrap(),
            text
        );
        assert_eq!(
            eval(r#"json::parse("{\"a\": null}").a"#).unwrap(),
            serde_json::Value::Null
        );
        assert_eq!(
            eval(r#"json::pretty(#{ a: [1] })"#).unwrap(),
            "{\n  \"a\": [\n    1\n  ]\n}"
        );
        assert_eq!(eval(r#"json::stringify("x")"#).unwrap(), "\"x\"");
    }

    #[test]
    fn bad_json_and_values_json_cannot_hold_are_errors() {
        let err = eval(r#"json::parse("{\"a\":")"#).unwrap_err();
        assert!(
            err.starts_with("json::parse: \"{\\\"a\\\":\" is not JSON: EOF while parsing"),
            "{err}"
        );
        let err = eval(r#"json::stringify(#{ f: Fn("x") })"#).unwrap_err();
        assert!(
            err.starts_with("json::stringify: Fn at .f cannot be converted to JSON"),
            "{err}"
        );
    }

    #[test]
    fn json_nested_deeper_than_the_parser_allows_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = eval(&format!("json::parse({deep:?})")).unwrap_err();
        assert!(err.contains("recursion limit exceeded"), "{err}");
    }
}
