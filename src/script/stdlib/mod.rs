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

/// Every function of the standard library and its number of parameters, as scripts call it.
/// Rhai resolves a call only when it runs, so `khai check` compares a script's calls with this
/// ([`unknown_calls`]); a test keeps it equal to the modules' `pub fn`s.
const FUNCTIONS: &[(&str, &str, usize)] = &[
    ("re", "is_match", 2),
    ("re", "find", 2),
    ("re", "find_all", 2),
    ("re", "captures", 2),
    ("re", "named_captures", 2),
    ("re", "replace", 3),
    ("re", "replace_all", 3),
    ("re", "split", 2),
    ("re", "escape", 1),
    ("time", "now", 0),
    ("time", "parse", 1),
    ("time", "is_valid", 1),
    ("time", "unix", 1),
    ("time", "from_unix", 1),
    ("time", "format", 2),
    ("time", "add", 2),
    ("time", "sub", 2),
    ("time", "diff", 2),
    ("time", "since", 1),
    ("time", "compare", 2),
    ("time", "before", 2),
    ("time", "after", 2),
    ("time", "duration", 1),
    ("time", "format_duration", 1),
    ("crypto", "sha256", 1),
    ("base64", "encode", 1),
    ("base64", "decode", 1),
    ("base64", "encode_url", 1),
    ("base64", "decode_url", 1),
    ("quantity", "canonical", 1),
    ("quantity", "is_valid", 1),
    ("quantity", "compare", 2),
    ("quantity", "add", 2),
    ("quantity", "sub", 2),
    ("quantity", "mul", 2),
    ("quantity", "value", 1),
    ("quantity", "milli_value", 1),
    ("quantity", "as_float", 1),
    ("semver", "parse", 1),
    ("semver", "is_valid", 1),
    ("semver", "compare", 2),
    ("semver", "matches", 2),
    ("labels", "matches", 2),
    ("labels", "is_valid", 1),
    ("labels", "stringify", 1),
    ("labels", "parse", 1),
    ("json", "parse", 1),
    ("json", "stringify", 1),
    ("json", "pretty", 1),
    ("yaml", "parse", 1),
    ("yaml", "parse_all", 1),
    ("yaml", "stringify", 1),
];

/// A call into a module of the standard library that names no function of it, or gives one the
/// wrong number of arguments, and where it is in the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownCall {
    pub(crate) message: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// The calls of `ast` into the standard library that would fail as "function not found" when
/// they run: a misspelled function (`time::nwo()`) or a wrong number of arguments.
pub(crate) fn unknown_calls(ast: &rhai::AST) -> Vec<UnknownCall> {
    use rhai::{ASTNode, Expr, FnCallExpr, Position, Stmt};
    let mut out = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        let call: Option<(&FnCallExpr, &Position)> = match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(f, pos))) => Some((f, pos)),
            Some(ASTNode::Stmt(Stmt::FnCall(f, pos))) => Some((f, pos)),
            _ => None,
        };
        if let Some((f, pos)) = call {
            let module = f.namespace.to_string();
            let name = f.name.as_str();
            let arities: Vec<usize> = FUNCTIONS
                .iter()
                .filter(|(m, n, _)| *m == module && *n == name)
                .map(|(_, _, a)| *a)
                .collect();
            let message = if !FUNCTIONS.iter().any(|(m, _, _)| *m == module) {
                None
            } else if arities.is_empty() {
                let known: Vec<&str> = FUNCTIONS
                    .iter()
                    .filter(|(m, _, _)| *m == module)
                    .map(|(_, n, _)| *n)
                    .collect();
                Some(format!(
                    "unknown function {module}::{name}; the {module} module has {}",
                    known.join(", ")
                ))
            } else if !arities.contains(&f.args.len()) {
                let n = arities[0];
                Some(format!(
                    "{module}::{name} takes {n} argument{}, not {}",
                    if n == 1 { "" } else { "s" },
                    f.args.len()
                ))
            } else {
                None
            };
            if let Some(message) = message {
                out.push(UnknownCall {
                    message,
                    line: pos.line().unwrap_or(0),
                    column: pos.position().unwrap_or(0),
                });
            }
        }
        true
    });
    out
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
    match super::stop::must_stop() {
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

    use crate::script::eval_dynamic as eval;

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

    /// The parameters scripts pass to each `pub fn` of `source`'s `api` module (a
    /// `NativeCallContext` is Rhai's, not the script's).
    fn api_functions(module: &str, source: &str) -> Vec<(String, String, usize)> {
        let api = source.split("pub mod api {").nth(1).unwrap();
        let api = api.split("#[cfg(test)]").next().unwrap();
        api.split("pub fn ")
            .skip(1)
            .map(|f| {
                let (name, rest) = f.split_once('(').unwrap();
                let params = rest.split_once(')').unwrap().0;
                let n = params
                    .split(',')
                    .filter(|p| !p.trim().is_empty() && !p.contains("NativeCallContext"))
                    .count();
                (module.to_string(), name.to_string(), n)
            })
            .collect()
    }

    #[test]
    fn the_list_check_reads_is_every_function_the_modules_define() {
        let sources = [
            ("re", include_str!("re.rs")),
            ("time", include_str!("time.rs")),
            ("crypto", include_str!("crypto.rs")),
            ("base64", include_str!("base64.rs")),
            ("quantity", include_str!("quantity.rs")),
            ("semver", include_str!("semver.rs")),
            ("labels", include_str!("labels/mod.rs")),
            ("json", include_str!("json.rs")),
            ("yaml", include_str!("yaml.rs")),
        ];
        let mut defined: Vec<_> = sources
            .iter()
            .flat_map(|(m, s)| api_functions(m, s))
            .collect();
        let mut listed: Vec<_> = FUNCTIONS
            .iter()
            .map(|(m, n, a)| (m.to_string(), n.to_string(), *a))
            .collect();
        defined.sort();
        listed.sort();
        assert_eq!(listed, defined);
        let registered: Vec<&str> = modules().iter().map(|(m, _)| *m).collect();
        let named: Vec<&str> = sources.iter().map(|(m, _)| *m).collect();
        assert_eq!(registered, named);
    }

    #[test]
    fn check_finds_misspelled_functions_and_wrong_arities_where_they_are() {
        let e = engine(&Limits::default());
        let ast = e
            .compile(
                "fn reconcile(obj, ctx) {\n    let t = time::nwo();\n    re::is_match(\"x\");\n    \
                 time::now() + re::split(\",\", \"a,b\").len() + k8s::whatever(1)\n}\n",
            )
            .unwrap();
        let found = unknown_calls(&ast);
        assert_eq!(
            found,
            [
                UnknownCall {
                    message: "unknown function time::nwo; the time module has now, parse, \
                              is_valid, unix, from_unix, format, add, sub, diff, since, compare, \
                              before, after, duration, format_duration"
                        .into(),
                    // At the function's name, where Rhai places a call and its runtime errors.
                    line: 2,
                    column: 19,
                },
                UnknownCall {
                    message: "re::is_match takes 2 arguments, not 1".into(),
                    line: 3,
                    column: 9,
                },
            ]
        );
    }

    #[test]
    fn long_inputs_are_quoted_short() {
        assert_eq!(quoted("ab"), "\"ab\"");
        let long = "x".repeat(500);
        assert_eq!(quoted(&long).chars().count(), 103);
    }
}
