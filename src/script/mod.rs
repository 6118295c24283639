//! Rhai scripts: one hardened engine, compiled scripts, and bounded calls into them.
//!
//! Every engine khai runs comes from [`engine`], which sets every limit explicitly (Rhai leaves
//! most of them off, and its depth defaults differ between debug and release builds). A call gets
//! a wall-clock deadline on top of the operation budget, checked from Rhai's progress hook.
//! Values cross the boundary as JSON through Rhai's serde support, so scripts see Kubernetes
//! objects as plain maps.

mod compiled;
pub mod convert;
pub(crate) mod ctx;
mod engine;
mod error;
mod inline;
pub(crate) mod memo;
mod memory;
pub(crate) mod stack;
pub(crate) mod stdlib;
mod stop;
pub mod webhook;

pub use crate::effects::Reads;
pub(crate) use compiled::CallArg;
pub use compiled::Script;
pub(crate) use ctx::{ALL_NAMESPACES, Attempt, Indexes, NoIndex};
pub use ctx::{Lookup, LookupError, ScriptCtx};
pub use engine::{Limits, engine};
pub use error::ScriptError;
pub(crate) use error::{Problem, param_list};
pub use memory::Counting;
pub(crate) use memory::is_counting;
pub(crate) use memory::set_shared_limit;

use std::path::Path;

/// A Kubernetes object as scripts see it: the whole object minus `metadata.managedFields`,
/// which is bookkeeping no script needs and the bulk of many objects.
pub fn object_view(obj: &kube::api::DynamicObject) -> Result<serde_json::Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(meta) = v
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    Ok(v)
}

/// `obj` as the Rhai value scripts see: exactly `convert::to_dynamic(&object_view(obj)?)`, but
/// built straight from the object, without the JSON copy of it in between (the body is walked
/// in place; only the small metadata goes through JSON). Fails as [`object_view`] does: for an
/// object whose body is not a map.
pub fn object_dynamic(obj: &kube::api::DynamicObject) -> Result<rhai::Dynamic, serde_json::Error> {
    use serde_json::Value;
    let body = match &obj.data {
        Value::Object(body) => Some(body),
        Value::Null => None,
        // Not a map: whatever `object_view` makes of it (serde's error).
        _ => return object_view(obj).map(|v| convert::to_dynamic(&v)),
    };
    let mut map = rhai::Map::new();
    if let Some(t) = &obj.types {
        map.insert("apiVersion".into(), t.api_version.as_str().into());
        map.insert("kind".into(), t.kind.as_str().into());
    }
    let mut metadata = serde_json::to_value(&obj.metadata)?;
    if let Some(meta) = metadata.as_object_mut() {
        meta.remove("managedFields");
    }
    map.insert("metadata".into(), convert::to_dynamic(&metadata));
    // The body's fields after the object's own, as they serialise (a body field of the same name
    // wins, as it does in the JSON).
    for (k, v) in body.into_iter().flatten() {
        map.insert(k.as_str().into(), convert::to_dynamic(v));
    }
    Ok(rhai::Dynamic::from_map(map))
}

/// Whether `obj` has a script view ([`object_view`]), checked without building it.
pub(crate) fn has_view(obj: &kube::api::DynamicObject) -> Result<(), serde_json::Error> {
    match &obj.data {
        serde_json::Value::Object(_) | serde_json::Value::Null => Ok(()),
        _ => object_view(obj).map(drop),
    }
}

/// How a script's value is named in messages to its author: "a map", "an array", "nothing".
pub(crate) fn type_name(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a map",
    }
}

/// The path (as shown in messages) and text of a script the config names; a file that cannot
/// be read is a [`ScriptError::Read`].
pub(crate) fn read_script(
    config: &crate::config::Config,
    rel: &Path,
) -> Result<(std::path::PathBuf, String), ScriptError> {
    let file = config.resolve(rel);
    match config.read(rel) {
        Ok(src) => Ok((file, src)),
        Err(e) => Err(ScriptError::Read {
            file,
            message: e.to_string(),
        }),
    }
}

/// Evaluates `src` in the one engine, as JSON, or the error's message as scripts see it.
#[cfg(test)]
pub(crate) fn eval_json(src: &str) -> Result<serde_json::Value, String> {
    eval_dynamic(src).map(|v| convert::to_json(&v).unwrap())
}

/// Evaluates `src` in the one engine, or the error's message as scripts see it.
#[cfg(test)]
pub(crate) fn eval_dynamic(src: &str) -> Result<rhai::Dynamic, String> {
    engine(&Limits::default())
        .eval::<rhai::Dynamic>(src)
        .map_err(|e| e.to_string().replacen("Runtime error: ", "", 1))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;

    /// A script with the default limits, for calls that must not depend on how busy the machine
    /// is (the 200 ms of [`compile`] is short for a long call in a debug build under load).
    fn compile_default(src: &str) -> Script {
        let limits = Limits::default();
        Script::compile(Arc::new(engine(&limits)), &limits, Path::new("t.rhai"), src).unwrap()
    }

    pub(crate) fn compile(src: &str) -> Result<Script, ScriptError> {
        let limits = Limits {
            timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("scripts/t.rhai"),
            src,
        )
    }

    /// `import` is a compile error at its line and column, not a failure of the first call
    /// ("Too many modules imported").
    #[test]
    fn import_is_refused_at_compile_time_where_it_is_written() {
        let src = "fn reconcile(obj, ctx) {\n    #{}\n}\n\n  import \"helpers\" as h;\n";
        let Err(err) = compile(src) else {
            panic!("import compiled")
        };
        let shown = err.to_string();
        assert!(
            shown.starts_with("scripts/t.rhai:5:3: ")
                && shown.contains("`import` is not available"),
            "{shown}"
        );
        let inside = "fn reconcile(obj, ctx) {\n    import \"x\" as x;\n    #{}\n}\n";
        let Err(err) = compile(inside) else {
            panic!("import compiled")
        };
        let shown = err.to_string();
        assert!(shown.starts_with("scripts/t.rhai:2:5: "), "{shown}");
    }

    /// The object goes into Rhai without a JSON copy, and scripts see the same value.
    #[test]
    fn an_object_converts_straight_into_the_value_its_view_converts_into() {
        let objects = [
            json!({ "apiVersion": "bench.khai.dev/v1", "kind": "Cache",
                "metadata": { "name": "c", "namespace": "ns", "uid": "u", "generation": 3,
                    "creationTimestamp": "2026-11-26T00:28:06Z", "labels": { "a": "b" },
                    "managedFields": [{ "manager": "m", "fieldsType": "FieldsV1",
                                        "fieldsV1": { "f:spec": {} } }] },
                "spec": { "size": 3, "image": "redis:7", "big": 18446744073709551615u64,
                          "ratio": 0.5, "none": null, "list": [1, "two", { "three": [] }] },
                "status": { "phase": "Ready" } }),
            json!({ "metadata": { "name": "untyped" }, "data": { "k": "v" } }),
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": {} }),
        ];
        for o in objects {
            let obj: kube::api::DynamicObject = serde_json::from_value(o.clone()).unwrap();
            let direct = object_dynamic(&obj).unwrap();
            let via_json = convert::to_dynamic(&object_view(&obj).unwrap());
            assert_eq!(format!("{direct:?}"), format!("{via_json:?}"), "{o}");
        }
        let mut no_body: kube::api::DynamicObject =
            serde_json::from_value(json!({ "metadata": { "name": "a" } })).unwrap();
        no_body.data = serde_json::Value::Null;
        let via_json = convert::to_dynamic(&object_view(&no_body).unwrap());
        assert_eq!(
            format!("{:?}", object_dynamic(&no_body).unwrap()),
            format!("{via_json:?}")
        );
        assert!(has_view(&no_body).is_ok());
        no_body.data = json!("not a map");
        let (direct, view) = (object_dynamic(&no_body), object_view(&no_body));
        assert_eq!(
            direct.unwrap_err().to_string(),
            view.unwrap_err().to_string()
        );
        assert!(has_view(&no_body).is_err());
    }

    #[tokio::test]
    async fn short_calls_finish_inline_and_long_ones_start_over_on_the_pool_with_one_answer() {
        let s = compile_default("fn count(n) { let c = 0; for i in 0..n { c += 1; } c }");
        assert_eq!(
            s.call_one_async("count", json!(10)).await.unwrap(),
            json!(10)
        );
        // Far beyond the inline budget: abandoned inline, run again from the start.
        let n = inline::INLINE_OPS * 3;
        assert_eq!(s.call_one_async("count", json!(n)).await.unwrap(), json!(n));
        // Errors of a long call are the script's own, reported once from the pool.
        let err = s.call_one_async("count", json!("x")).await.unwrap_err();
        assert!(err.to_string().contains("count"), "{err}");
    }

    /// An object as large as the API server stores: a map of 12,000 entries and 1.1 MB of text.
    pub(crate) fn large_object() -> serde_json::Value {
        let entries: serde_json::Map<String, serde_json::Value> = (0..12_000)
            .map(|i| (format!("key-{i}"), json!(i)))
            .collect();
        json!({ "apiVersion": "g/v1", "kind": "Big", "metadata": { "name": "big" },
            "spec": { "entries": entries, "text": "x".repeat(1_100_000) } })
    }

    #[tokio::test]
    async fn an_input_as_large_as_the_api_server_stores_is_read_iterated_changed_and_returned() {
        let src = r#"fn reconcile(obj, ctx) {
            let sum = 0;
            for k in obj.spec.entries.keys() { sum += obj.spec.entries[k]; }
            obj.status = #{ sum: sum, length: obj.spec.text.len() };
            #{ status: obj.status, children: [#{ metadata: #{ name: "copy" },
                data: #{ text: obj.spec.text }, entries: obj.spec.entries }] }
        }"#;
        let s = compile_default(src);
        let obj = large_object();
        let ctx = ScriptCtx::detached("op", "c", None);
        let out = s.call_async("reconcile", obj.clone(), ctx).await.unwrap();
        let sum: i64 = (0..12_000).sum();
        assert_eq!(out["status"], json!({ "sum": sum, "length": 1_100_000 }));
        assert_eq!(out["children"][0]["data"]["text"], obj["spec"]["text"]);
        assert_eq!(out["children"][0]["entries"], obj["spec"]["entries"]);
    }

    #[test]
    fn a_map_of_huge_keys_stops_at_the_memory_limit() {
        let limits = Limits {
            max_memory: 16 << 20,
            ..Limits::default()
        };
        // 600 keys of 1 MiB: each within the string limit, and Rhai's map limit counts entries,
        // not the size of their keys.
        let src = r#"fn build() {
            let key = "k"; for i in 0..20 { key += key; }
            let m = #{}; for i in 0..600 { m[key + i] = i; } m.len()
        }"#;
        let s =
            Script::compile(Arc::new(engine(&limits)), &limits, Path::new("t.rhai"), src).unwrap();
        let (result, peak) = memory::peak_during(|| s.call("build", &[]));
        let err = result.unwrap_err().to_string();
        assert!(
            err.ends_with("in build: script exceeded its memory limit (16 MiB per call)"),
            "{err}"
        );
        assert!(peak < limits.max_memory + (4 << 20), "peak {peak}");
    }

    #[tokio::test]
    async fn a_call_of_few_but_slow_operations_leaves_the_worker_thread_within_its_time_budget() {
        // A few hundred operations, far under the inline operation budget, each upper-casing
        // 1 MiB: together far more than the inline time budget.
        let s = compile_default(
            "fn shout(s) { let n = 0; for i in 0..200 { n += s.to_upper().len(); } n }",
        );
        let text = json!("x".repeat(1 << 20));
        let inline = inline::attempt(|| s.call("shout", std::slice::from_ref(&text)));
        assert_eq!(inline, None, "given up inline, to run on the blocking pool");
        assert_eq!(
            s.call_one_async("shout", text).await.unwrap(),
            json!(200 << 20)
        );
    }

    use crate::test_logs::capture as logs;

    /// A call that runs out of its inline budget runs again on the blocking pool; its `log_*`,
    /// `print` and `debug` lines come out once, from the run that finished.
    #[tokio::test]
    async fn a_call_moved_to_the_pool_logs_each_line_once() {
        // The default time limit: the test is about logs, not a slow machine.
        let limits = Limits::default();
        let s = Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("scripts/t.rhai"),
            "fn count(n) {\n\
               log_debug(\"d-line\"); log_info(\"i-line\"); log_warn(\"w-line\");\n\
               log_error(\"e-line\"); print(\"p-line\"); debug(\"g-line\");\n\
               let c = 0; for i in 0..n { c += 1; } c\n\
             }",
        )
        .unwrap();
        let n = inline::INLINE_OPS * 3;
        let (out, log) = logs(s.call_one_async("count", json!(n))).await;
        assert_eq!(out.unwrap(), json!(n));
        for line in ["d-line", "i-line", "w-line", "e-line", "p-line", "g-line"] {
            assert_eq!(log.matches(line).count(), 1, "{line} in:\n{log}");
        }
        // A call that finishes inline logs its lines too, once.
        let (_, log) = logs(s.call_one_async("count", json!(1))).await;
        assert_eq!(log.matches("i-line").count(), 1, "{log}");
    }

    #[test]
    fn values_round_trip_through_json() {
        let s = compile("fn echo(x) { x }").unwrap();
        let v = json!({"a": [1, 2.5, "s", true, null], "b": {"c": {}}});
        assert_eq!(s.call("echo", std::slice::from_ref(&v)).unwrap(), v);
    }

    #[test]
    fn syntax_error_names_file_line_and_column() {
        let err = compile("fn reconcile(obj, ctx) {\n  let x = ;\n}").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("scripts/t.rhai:2:11: syntax error:"),
            "{text}"
        );
    }

    #[test]
    fn runtime_error_names_function_and_line() {
        let s = compile("fn reconcile(obj, ctx) {\n  throw \"boom\";\n}").unwrap();
        let err = s.call("reconcile", &[json!({}), json!({})]).unwrap_err();
        assert_eq!(err.to_string(), "scripts/t.rhai:2:3: in reconcile: boom");
    }

    #[test]
    fn endless_loop_stops_at_a_limit() {
        let s = compile("fn spin() { loop { } }").unwrap();
        let err = s.call("spin", &[]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("exceeded its"), "{text}");
    }

    #[test]
    fn deadline_stops_a_slow_script_that_stays_under_the_operation_budget() {
        let limits = Limits {
            timeout: Duration::from_millis(50),
            max_operations: 0,
            ..Limits::default()
        };
        let s = Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("t.rhai"),
            "fn spin() { loop {} }",
        )
        .unwrap();
        let err = s.call("spin", &[]).unwrap_err();
        assert!(err.to_string().contains("exceeded its time limit"), "{err}");
    }

    #[test]
    fn deep_recursion_fails_cleanly() {
        let s = compile("fn r(n) { r(n + 1) }").unwrap();
        assert!(matches!(
            s.call("r", &[json!(0)]),
            Err(ScriptError::Runtime { .. })
        ));
    }

    /// The deepest value a call can build within the default limits, and what Rhai does with
    /// deep values (measure, compare, print, clone, drop), neither overflows the call's stack
    /// nor aborts the process: the call stops at a limit.
    #[test]
    fn deepest_value_a_call_can_build_fits_its_stack() {
        let s = compile_default(
            "fn build() { let x = []; let n = 0; loop { x = [x]; n += 1; if n % 1000 == 0 { \
               let y = x; if y != x { throw \"unequal\"; } } } }",
        );
        let err = s.call("build", &[]).unwrap_err();
        assert!(err.to_string().contains("exceeded its"), "{err}");
    }

    /// A result nested deeper than JSON allows fails alone, naming where, on threads with the
    /// usual 2 MiB stack too (a tokio worker, a test thread).
    #[test]
    fn a_deep_result_fails_with_its_place_instead_of_aborting() {
        // Rhai measures a value after each change, so building one n deep costs about n²/2
        // steps: a debug build needs a while for n = 3,000.
        let limits = Limits {
            timeout: Duration::from_secs(120),
            ..Limits::default()
        };
        for n in [121, 3_000] {
            let s = Script::compile(
                Arc::new(engine(&limits)),
                &limits,
                Path::new("t.rhai"),
                &format!(
                    "fn reconcile(obj, ctx) {{ let x = []; for i in 0..{n} {{ x = [x]; }} \
                       #{{ status: #{{ deep: x }} }} }}"
                ),
            )
            .unwrap();
            let handle = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || s.call("reconcile", &[json!({}), json!({})]))
                .unwrap();
            let err = handle.join().unwrap().unwrap_err();
            assert_eq!(
                err.to_string(),
                "t.rhai: in reconcile: cannot convert the result to JSON: \
                 .status.deep[0][0][0][0]… nests more than 120 arrays and maps deep",
                "n = {n}"
            );
        }
    }

    #[test]
    fn a_deep_value_abandoned_at_a_limit_is_dropped_without_aborting() {
        let s = compile("fn build() { let x = []; loop { x = [x]; } }").unwrap();
        let err = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || s.call("build", &[]))
            .unwrap()
            .join()
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("exceeded its"), "{err}");
    }

    #[test]
    fn huge_string_fails_cleanly() {
        let s = compile("fn big() { let s = \"x\"; loop { s += s; } }").unwrap();
        assert!(matches!(
            s.call("big", &[]),
            Err(ScriptError::Runtime { .. })
        ));
    }

    #[test]
    fn ctx_exposes_run_facts_and_lookups() {
        let s = compile("fn reconcile(obj, ctx) { #{ op: ctx.operator, ns: ctx.namespace, none: ctx.get(\"ConfigMap\", \"x\"), n: ctx.list(\"ConfigMap\").len() } }").unwrap();
        let out = s
            .call_with_ctx(
                "reconcile",
                &json!({}),
                ScriptCtx::detached("op", "c", Some("ns1")),
            )
            .unwrap();
        assert_eq!(
            out,
            json!({ "op": "op", "ns": "ns1", "none": null, "n": 0 })
        );
    }

    /// `?[` followed by `?.` gives nothing for a missing list, not "Indexer unavailable: ()
    /// [i64]".
    #[test]
    fn optional_index_chains_give_nothing_for_a_missing_list_or_map() {
        let s = compile(
            "fn first(x) { x?.items?[0]?.field }\n\
             fn port(x) { x?.spec?.ports?[\"http\"]?.port }\n\
             fn short(x) { x?.items?[0] }",
        )
        .unwrap();
        for f in ["first", "port", "short"] {
            for x in [json!({}), json!(null), json!({ "items": null, "spec": {} })] {
                assert_eq!(
                    s.call(f, std::slice::from_ref(&x)).unwrap(),
                    json!(null),
                    "{f}({x})"
                );
            }
        }
        let x =
            json!({ "items": [{ "field": "a" }], "spec": { "ports": { "http": { "port": 80 } } } });
        assert_eq!(
            s.call("first", std::slice::from_ref(&x)).unwrap(),
            json!("a")
        );
        assert_eq!(s.call("port", std::slice::from_ref(&x)).unwrap(), json!(80));
        // An index past the end of a list that is there is still an error.
        let err = s.call("first", &[json!({ "items": [] })]).unwrap_err();
        assert!(err.to_string().contains("out of bounds"), "{err}");
    }

    #[test]
    fn retry_and_fail_become_their_own_errors() {
        let s = compile(
            "fn a(obj, ctx) { retry(\"not yet\", \"10s\") }\nfn b(obj, ctx) { fail(\"bad spec\") }",
        )
        .unwrap();
        let ctx = || ScriptCtx::detached("op", "c", None);
        assert_eq!(
            s.call_with_ctx("a", &json!({}), ctx()).unwrap_err(),
            ScriptError::Retry {
                file: "scripts/t.rhai".into(),
                function: "a".into(),
                message: "not yet".into(),
                delay: crate::config::duration::Duration::from_secs(10),
                status: None,
            }
        );
        assert_eq!(
            s.call_with_ctx("a", &json!({}), ctx())
                .unwrap_err()
                .to_string(),
            "scripts/t.rhai: in a: not yet (retry in 10s)"
        );
        assert!(
            matches!(s.call_with_ctx("b", &json!({}), ctx()), Err(ScriptError::Fail { message, .. }) if message == "bad spec")
        );
    }

    /// A delay `retry()` cannot read is an error, not a silent backoff.
    #[test]
    fn a_bad_retry_delay_is_an_error_at_its_line_naming_it() {
        let s = compile("fn a(obj, ctx) {\n  retry(\"not yet\", \"5 parsecs\")\n}").unwrap();
        let err = s
            .call_with_ctx("a", &json!({}), ScriptCtx::detached("op", "c", None))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "scripts/t.rhai:2:3: in a: retry: cannot read '5 parsecs' as a duration: \
             unknown unit \" parsecs\" in \"5 parsecs\"; use ms, s, m or h"
        );
        assert_eq!(err.kind(), "runtime");
    }

    #[test]
    fn missing_function_is_reported_with_arity() {
        let s = compile("fn reconcile(obj) { }").unwrap();
        assert!(!s.has_function("reconcile", 2) && s.has_function("reconcile", 1));
        let err = ScriptError::MissingFunction {
            file: s.file().to_path_buf(),
            name: "reconcile".into(),
            arity: 2,
        };
        assert_eq!(
            err.to_string(),
            "scripts/t.rhai: function reconcile(obj, ctx) is not defined"
        );
    }
}
