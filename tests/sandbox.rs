//! What a script cannot do: reach files, the environment, the network or other
//! processes, or escape its limits; and what any input object gives it (unicode keys, nulls,
//! missing fields, deep nesting): a value or a clear error for that call, never a crash.
//!
//! The one way out, the `http` module, reaches only what `[operator.http] allow`
//! lists: an unlisted host, loopback, the metadata address, `file://`, a listed name that
//! resolves to loopback and a redirect to an unlisted host are all refused, and the servers
//! behind them see nothing.
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
    let limits = Limits::default();
    let err = Script::compile(
        Arc::new(engine(&limits)),
        &limits,
        Path::new("scripts/s.rhai"),
        &src,
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(!err.contains("leaked"), "{err}");
    assert!(
        err.starts_with("scripts/s.rhai:1:12: ") && err.contains("`import` is not available"),
        "refused where it is written: {err}"
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
    // Which limit comes first depends on how busy the machine is.
    assert!(
        err.contains("operation limit") || err.contains("time limit"),
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

mod http {
    use super::script;
    use khai::config::http::HttpSettings;
    use khai::effects::{Budget, Effects, http::Client};
    use khai::script::ScriptCtx;
    use serde_json::{Value, json};
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A loopback server that counts requests and answers each with `answer(path)`.
    fn serve(
        rt: &tokio::runtime::Runtime,
        answer: fn(&str) -> (u16, Option<String>),
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let count = count.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        count.fetch_add(1, Ordering::SeqCst);
                        let (status, location) = answer(req.uri().path());
                        let mut res = hyper::Response::builder().status(status);
                        if let Some(l) = location {
                            res = res.header("location", l);
                        }
                        async move {
                            res.body(http_body_util::Full::new(hyper::body::Bytes::from("ok")))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (addr, seen)
    }

    fn ctx(
        rt: &tokio::runtime::Runtime,
        allow: &[String],
        client: fn(Client) -> Client,
    ) -> ScriptCtx {
        let settings = HttpSettings {
            allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
            ..HttpSettings::default()
        };
        let http = client(Client::new(&settings, &|p| std::fs::read_to_string(p)).unwrap());
        let effects = Effects::new(rt.handle().clone(), Budget::default())
            .reaching(Arc::new(http), Arc::default());
        ScriptCtx {
            effects: Some(Arc::new(effects)),
            ..ScriptCtx::detached("op", "ctl", Some("default"))
        }
    }

    /// What `http::get(url)` gave: the status, or the caught error's reason and message.
    fn get(ctx: ScriptCtx, url: &str) -> Value {
        let s = script(
            r#"fn run(obj, ctx) {
                let out = ();
                try { out = #{ status: http::get(obj.url).status }; }
                catch (e) { out = #{ reason: e.reason, message: e.message }; }
                out
            }"#,
        );
        s.call_with_ctx("run", &json!({ "url": url }), ctx).unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_listed_address_is_reached() {
        let rt = runtime();
        let (addr, seen) = serve(&rt, |_| (204, None));
        let out = get(
            ctx(&rt, &[addr.to_string()], |c| c),
            &format!("http://{addr}/x"),
        );
        assert_eq!(out, json!({ "status": 204 }));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn unlisted_hosts_loopback_metadata_and_file_urls_are_refused() {
        let rt = runtime();
        let (addr, seen) = serve(&rt, |_| (200, None));
        let c = || ctx(&rt, &["api.example.com".to_string()], |c| c);
        for url in [
            "http://unlisted.example.org/".to_string(),
            format!("http://{addr}/"),
            format!("http://localhost:{}/", addr.port()),
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "http://[fd00:ec2::254]/".to_string(),
            "http://metadata.google.internal/".to_string(),
            "file:///etc/passwd".to_string(),
        ] {
            let out = get(c(), &url);
            assert_eq!(out["reason"], "not_allowed", "{url}: {out}");
        }
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "the loopback server saw a request"
        );
    }

    #[test]
    fn a_listed_name_that_resolves_to_loopback_is_refused() {
        let rt = runtime();
        let (addr, seen) = serve(&rt, |_| (200, None));
        let listed = format!("api.example.com:{}", addr.port());
        let c = ctx(&rt, &[listed], |c| {
            c.resolve_as("api.example.com", "127.0.0.1".parse().unwrap())
        });
        let out = get(c, &format!("http://api.example.com:{}/", addr.port()));
        assert_eq!(out["reason"], "address_refused", "{out}");
        assert_eq!(
            out["message"],
            "http::request GET api.example.com: address_refused: api.example.com resolves to \
             127.0.0.1, a loopback, link-local or metadata address; list the address itself in \
             [operator.http] allow to reach it"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_redirect_to_an_unlisted_host_is_refused() {
        let rt = runtime();
        let (other, other_seen) = serve(&rt, |_| (200, None));
        // The listed server sends every request to the other, unlisted, port or host.
        static OTHER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        OTHER.set(format!("http://{other}/stolen")).unwrap();
        let (addr, seen) = serve(&rt, |path| match path {
            "/away" => (302, Some("http://unlisted.example.org/".into())),
            _ => (307, OTHER.get().cloned()),
        });
        let c = || ctx(&rt, &[addr.to_string()], |c| c);
        for path in ["/away", "/other"] {
            let out = get(c(), &format!("http://{addr}{path}"));
            assert_eq!(out["reason"], "not_allowed", "{path}: {out}");
        }
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert_eq!(
            other_seen.load(Ordering::SeqCst),
            0,
            "the redirect was followed"
        );
    }

    /// Without effects (a webhook function, `when()`, `khai check`), `http` reaches nothing.
    #[test]
    fn a_call_without_effects_cannot_send_a_request() {
        let s = script(r#"fn run(obj, ctx) { http::get("http://api.example.com/") }"#);
        let err = s
            .call_with_ctx("run", &json!({}), ScriptCtx::detached("op", "ctl", None))
            .unwrap_err()
            .to_string();
        assert!(err.contains("http::request is not available here"), "{err}");
        assert!(err.starts_with("scripts/s.rhai:1:"), "{err}");
    }
}
