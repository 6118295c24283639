//! `yaml::`: YAML text to script values and back. Parsing is bounded as khai's own config
//! reading is (serde-saphyr's budget: depth, node count, aliases), so an alias bomb is an
//! error, not an allocation; values go through the same conversion as a script's results.

use super::{RhaiResult, error, quoted};
use rhai::NativeCallContext;

/// A parse failure in the words `khai check` uses for YAML, with the line when there is one.
fn failed(
    ctx: &NativeCallContext,
    function: &str,
    text: &str,
    e: &serde_saphyr::Error,
) -> Box<rhai::EvalAltResult> {
    let at = e
        .location()
        .map(|l| format!(" at line {}, column {}", l.line(), l.column()))
        .unwrap_or_default();
    error(
        ctx,
        format!(
            "{function}: {} is not YAML{at}: {}",
            quoted(text),
            crate::config::yaml_message(e)
        ),
    )
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::super::json::to_json;
    use super::{RhaiResult, error, failed};
    use rhai::{Array, Dynamic, NativeCallContext};

    /// The value one YAML document holds.
    #[rhai_fn(return_raw)]
    pub fn parse(ctx: NativeCallContext, text: &str) -> RhaiResult<Dynamic> {
        let v: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| failed(&ctx, "yaml::parse", text, &e))?;
        Ok(crate::script::convert::to_dynamic(&v))
    }

    /// The values of every document in a `---`-separated stream.
    #[rhai_fn(return_raw)]
    pub fn parse_all(ctx: NativeCallContext, text: &str) -> RhaiResult<Array> {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| failed(&ctx, "yaml::parse_all", text, &e))?;
        Ok(docs
            .iter()
            .map(crate::script::convert::to_dynamic)
            .collect())
    }

    /// `value` as a YAML document (block style).
    #[rhai_fn(return_raw)]
    pub fn stringify(ctx: NativeCallContext, value: Dynamic) -> RhaiResult<String> {
        let v = to_json(&ctx, "yaml::stringify", &value)?;
        serde_saphyr::to_string(&v).map_err(|e| error(&ctx, format!("yaml::stringify: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::eval_json as eval;

    #[test]
    fn yaml_reads_documents_and_writes_values_back() {
        assert_eq!(
            eval(r#"yaml::parse("a: 1\nb: [x, {c: true}]\nd: ~\n")"#).unwrap(),
            serde_json::json!({ "a": 1, "b": ["x", { "c": true }], "d": null })
        );
        assert_eq!(
            eval(r#"yaml::parse_all("a: 1\n---\nb: 2\n")"#).unwrap(),
            serde_json::json!([{ "a": 1 }, { "b": 2 }])
        );
        let text = eval(r#"yaml::stringify(#{ a: [1, "two"], b: #{ c: () } })"#).unwrap();
        assert_eq!(
            eval(&format!("yaml::parse({:?})", text.as_str().unwrap())).unwrap(),
            serde_json::json!({ "a": [1, "two"], "b": { "c": null } })
        );
    }

    #[test]
    fn bad_yaml_and_alias_bombs_are_errors() {
        let err = eval(r#"yaml::parse("a: [1")"#).unwrap_err();
        assert!(
            err.starts_with("yaml::parse: \"a: [1\" is not YAML"),
            "{err}"
        );
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            let refs = vec![format!("*{prev}"); 10].join(", ");
            bomb.push_str(&format!("{i}: &{i} [{refs}]\n"));
        }
        let err = eval(&format!("yaml::parse({bomb:?})")).unwrap_err();
        assert!(
            err.contains("too large") || err.contains("aliases"),
            "{err}"
        );
        let err = eval(r#"yaml::stringify(#{ f: Fn("x") })"#).unwrap_err();
        assert!(err.starts_with("yaml::stringify: Fn at .f"), "{err}");
    }
}
