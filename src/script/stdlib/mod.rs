//! The standard library of scripts: `re::`, `time::`, `crypto::`, `base64::`, `quantity::`,
//! `semver::`, `labels::`, `json::` and `yaml::`, each a Rhai static module registered on the
//! one engine.
//!
//! Every function works on values a script can store in a status and read back: strings,
//! integers, maps and arrays (timestamps are RFC 3339 strings, durations whole seconds,
//! quantities and versions the strings Kubernetes writes). A failure is a runtime error at the
//! script's call that names the function and quotes the input (`re::is_match: invalid pattern
//! "a(": unclosed group`), never a panic. Inputs are bounded by the engine's size limits;
//! functions whose work or output grows with their input (regular expressions over long text,
//! parsing) stop at the call's memory budget or deadline as the progress hook would
//! ([`interrupted`]).

mod base64;
mod crypto;
mod json;
mod labels;
mod quantity;
mod re;
mod semver;
mod time;
mod yaml;

use rhai::{Engine, EvalAltResult, Module, NativeCallContext};

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

/// The modules of the standard library, by the name scripts call them with.
fn modules() -> Vec<(&'static str, Module)> {
    use rhai::exported_module;
    vec![
        ("re", exported_module!(re::api)),
        ("time", exported_module!(time::api)),
        ("crypto", exported_module!(crypto::api)),
        ("base64", exported_module!(base64::api)),
        ("quantity", exported_module!(quantity::api)),
        ("semver", exported_module!(semver::api)),
        ("labels", exported_module!(labels::api)),
        ("json", exported_module!(json::api)),
        ("yaml", exported_module!(yaml::api)),
    ]
}

/// Registers every module of the standard library on `engine`.
pub(super) fn register(engine: &mut Engine) {
    for (name, module) in modules() {
        engine.register_static_module(name, module.into());
    }
}

/// A runtime error at the script's call, in the words of the function that raises it.
fn error(ctx: &NativeCallContext, message: impl Into<String>) -> Box<EvalAltResult> {
    let message: String = message.into();
    Box::new(EvalAltResult::ErrorRuntime(
        message.into(),
        ctx.call_position(),
    ))
}

/// Stops a function that loops over its input when the call has used up its memory budget or
/// passed its deadline, with the error the progress hook would raise, so the call fails (and
/// is counted) exactly as a script that ran over would.
fn interrupted(ctx: &NativeCallContext) -> RhaiResult<()> {
    match super::engine::must_stop() {
        Some(reason) => Err(Box::new(EvalAltResult::ErrorTerminated(
            reason.into(),
            ctx.call_position(),
        ))),
        None => Ok(()),
    }
}

/// `text` quoted for a message, cut to its first 100 characters so a huge input does not
/// become a huge error.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 100;
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// The sign of an ordering, as scripts compare: -1, 0 or 1.
fn sign(o: std::cmp::Ordering) -> rhai::INT {
    o as rhai::INT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{Limits, engine};
    use rhai::Dynamic;

    fn eval(src: &str) -> Result<Dynamic, String> {
        let e = engine(&Limits::default());
        e.eval::<Dynamic>(src)
            .map_err(|e| e.to_string().replacen("Runtime error: ", "", 1))
    }

    #[test]
    fn every_module_is_reachable_from_a_script_through_the_real_engine() {
        let src = r#"
            let m = re::captures("^(?<name>[a-z]+)-(\\d+)$", "web-12");
            let when = time::add("2024-01-01T00:00:00Z", "1h30m");
            let q = quantity::add("500m", "1.5");
            #{
                re: [re::is_match("^v\\d+$", "v12"), m[2], re::named_captures("(?<x>a)", "a").x,
                     re::replace_all("\\s+", "a  b   c", "-"), re::split(",\\s*", "a, b,c")],
                time: [when, time::diff(when, "2024-01-01T00:00:00Z"), time::duration("2d"),
                       time::before("2024-01-01T00:00:00Z", when)],
                crypto: crypto::sha256("abc"),
                base64: [base64::encode("hi?"), base64::decode_url(base64::encode_url("hi?")),
                         base64::encode_url("hi?")],
                quantity: [q, quantity::compare("1Gi", "1G"), quantity::canonical("1536Mi")],
                semver: [semver::compare("1.2.3", "v1.10.0"), semver::matches("1.4.0", ">=1.2, <2"),
                         semver::parse("1.2.3-rc.1").pre],
                labels: [labels::matches(#{ app: "x", tier: "a" }, "app=x,tier in (a,b),!legacy"),
                         labels::matches(#{ app: "x" }, #{ matchLabels: #{ app: "y" } })],
                json: [json::stringify(json::parse("{\"a\":[1,2]}")), json::parse("[1]")[0]],
                yaml: [yaml::parse("a: 1\nb: [x]\n").b[0], yaml::stringify(#{ a: 1 })],
                now: time::now().len(),
            }
        "#;
        let v = eval(src).unwrap();
        let json = crate::script::convert::to_json(&v).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "re": [true, "12", "a", "a-b-c", ["a", "b", "c"]],
                "time": ["2024-01-01T01:30:00Z", 5400, 172_800, true],
                "crypto": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                "base64": ["aGk/", "hi?", "aGk_"],
                "quantity": ["2", 1, "1536Mi"],
                "semver": [-1, true, "rc.1"],
                "labels": [true, false],
                "json": ["{\"a\":[1,2]}", 1],
                "yaml": ["x", "a: 1\n"],
                "now": 20,
            })
        );
    }

    #[test]
    fn errors_name_the_function_and_the_scripts_line() {
        let err = eval("let x = 1;\nre::is_match(\"a(\", \"a\")").unwrap_err();
        assert_eq!(
            err,
            "re::is_match: invalid pattern \"a(\": unclosed group (line 2, position 5)"
        );
        let err = eval("time::nope(1)").unwrap_err();
        assert!(err.contains("Function not found"), "{err}");
    }

    #[test]
    fn the_clock_stays_a_call_even_when_the_optimizer_folds_everything_it_can() {
        let mut e = engine(&Limits::default());
        e.set_optimization_level(rhai::OptimizationLevel::Full);
        let ast = e.compile("let t = time::now(); t").unwrap();
        let mut calls = 0;
        ast.walk(&mut |path: &[rhai::ASTNode]| {
            if let Some(rhai::ASTNode::Expr(rhai::Expr::FnCall(f, _))) = path.last() {
                calls += usize::from(f.name == "now");
            }
            true
        });
        assert_eq!(calls, 1, "time::now() was folded into a constant");
    }

    #[test]
    fn long_inputs_are_quoted_short() {
        assert_eq!(quoted("ab"), "\"ab\"");
        let long = "x".repeat(500);
        assert_eq!(quoted(&long).chars().count(), 103);
    }
}
