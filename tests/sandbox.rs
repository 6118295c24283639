//! What a script cannot do (issue 17): reach files, the environment, the network or other
//! processes, or escape its limits; and what any input object gives it (unicode keys, nulls,
//! missing fields, deep nesting): a value or a clear error for that call, never a crash.
//!
//! The scripts run on the same engine and call path as `khai run` ([`khai::script::engine`],
//! [`Script::call`]); no cluster is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use khai::script::{Limits, Script, engine};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn script(src: &str) -> Script {
    let limits = Limits {
        timeout: Duration::from_secs(2),
        ..Limits::default()
    };
    Script::compile(
        Arc::new(engine(&limits)),
        &limits,
        Path::new("scripts/s.rhai"),
        src,
    )
    .unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn error_of(src: &str, function: &str, args: &[Value]) -> String {
    match script(src).call(function, args) {
        Ok(v) => panic!("{function} returned {v} where it should have failed"),
        Err(e) => e.to_string(),
    }
}

/// `import` is refused, even of a Rhai file that exists and is readable.
#[test]
fn a_script_cannot_import_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("secret.rhai");
    std::fs::write(&module, "fn secret() { \"leaked\" }").unwrap();
    let path = module.with_extension("");
    let src = format!(
        "fn run() {{ import \"{}\" as s; s::secret() }}",
        path.display()
    );
    let err = error_of(&src, "run", &[]);
    assert!(!err.contains("leaked"), "{err}");
    assert!(
        err.contains("scripts/s.rhai"),
        "the error names the script: {err}"
    );
}

/// No function reads a file, the environment, the network or starts a process: each name such
/// a script would reach for is unknown to the engine.
#[test]
fn a_script_has_no_function_for_files_environment_network_or_processes() {
    let tried = [
        ("open", "\"/etc/passwd\""),
        ("read_file", "\"/etc/passwd\""),
        ("read_to_string", "\"/etc/passwd\""),
        ("write_file", "\"/tmp/x\", \"y\""),
        ("env", "\"HOME\""),
        ("getenv", "\"HOME\""),
        ("system", "\"id\""),
        ("exec", "\"id\""),
        ("command", "\"id\""),
        ("http", "\"http://127.0.0.1/\""),
        ("fetch", "\"http://127.0.0.1/\""),
        ("connect", "\"127.0.0.1:80\""),
        ("socket", "\"127.0.0.1:80\""),
    ];
    for (name, args) in tried {
        let src = format!("fn run() {{ {name}({args}) }}");
        let err = error_of(&src, "run", &[]);
        assert!(
            err.contains("Function not found") && err.contains(name),
            "{name}: {err}"
        );
    }
}

/// `eval` runs under the same engine and limits: it reaches nothing more than the script could.
#[test]
fn eval_is_held_to_the_same_limits() {
    let err = error_of(
        "fn run() { eval(\"let x = 0; loop { x += 1; }\") }",
        "run",
        &[],
    );
    assert!(
        err.contains("operation limit"),
        "an endless loop inside eval stops at a limit: {err}"
    );
    let err = error_of("fn run() { eval(\"open(`/etc/passwd`)\") }", "run", &[]);
    assert!(err.contains("Function not found"), "{err}");
}

/// Unbounded recursion stops at the call depth limit with an error, not a stack overflow.
#[test]
fn deep_recursion_is_an_error_not_a_crash() {
    let err = error_of(
        "fn down(n) { down(n + 1) } fn run() { down(0) }",
        "run",
        &[],
    );
    assert!(err.contains("Stack overflow"), "{err}");
}

/// Unicode keys, nulls, empty strings and missing fields in an object are values like any other.
#[test]
fn unicode_keys_nulls_and_missing_fields_read_as_values() {
    let obj = json!({
        "metadata": { "name": "ünï-cødé", "labels": { "é/ç": "ß", "日本": "語" } },
        "spec": { "nothing_here": null, "empty": "", "emoji": "🦀" }
    });
    let s = script(
        r#"fn run(obj) {
            #{ name: obj.metadata.name,
               japanese: obj.metadata.labels["日本"],
               accented: obj.metadata.labels["é/ç"],
               null_is_unit: obj.spec.nothing_here == (),
               empty: obj.spec.empty,
               emoji: obj.spec.emoji,
               missing: obj.spec?.nothing?.deeper,
               keys: obj.metadata.labels.keys().len() }
        }"#,
    );
    let out = s.call("run", &[obj]).unwrap();
    assert_eq!(
        out,
        json!({ "name": "ünï-cødé", "japanese": "語", "accented": "ß", "null_is_unit": true,
                "empty": "", "emoji": "🦀", "missing": null, "keys": 2 })
    );
    // A field of a missing field is `()` as well, with or without `?.` (docs/scripts.md).
    let out = script("fn run(obj) { obj.spec.nothing.deeper }")
        .call("run", &[json!({ "spec": {} })])
        .unwrap();
    assert_eq!(out, Value::Null);
}

/// An input nested as deep as JSON parsers allow (100 levels) is read and returned whole.
#[test]
fn deeply_nested_input_is_read_and_returned() {
    let mut v = json!("bottom");
    for i in 0..100 {
        v = json!({ format!("level{i}"): v, "list": [i] });
    }
    let s = script("fn run(obj) { obj }");
    assert_eq!(s.call("run", std::slice::from_ref(&v)).unwrap(), v);
}
