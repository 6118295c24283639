//! End to end: `khai run --console` on a copy of examples/cache, one healthy Cache and one whose
//! reconcile throws (the copy's script refuses objects with an annotation, at a known line, as docs/console.md
//! shows). The
//! JSON API, the event stream, `khai status` and `khai_console_history_bytes` are read as a user
//! would; then, where Chromium and playwright-core are installed (scripts/test installs them and
//! sets `KHAI_TEST_REQUIRE_BROWSER`), a real headless browser opens the page, follows the
//! controller to the failing object and finds its error with its file:line. Screenshots go to
//! `target/console-screenshots/`.

use crate::support::{
    DEADLINE, Khai, TestNamespace, custom_api, example_copy, khai_bin, repo_root,
};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;
use tokio::io::AsyncBufReadExt;

/// The throw the test adds to the copy's `reconcile`, as its first statement.
const REFUSAL: &str = r#"    if "example.khai.dev/refuse" in (obj.metadata.annotations ?? #{}) { throw "refused: the object has the example.khai.dev/refuse annotation"; }"#;

/// Sends `req` to `addr`; the status and the body.
pub(crate) async fn send<B>(addr: &str, req: hyper::Request<B>) -> (u16, String)
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let res = send.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// GETs `path` from `addr`; the status and the body.
async fn get(addr: &str, path: &str) -> (u16, String) {
    let req = hyper::Request::get(path)
        .header("host", addr)
        .body(Empty::<Bytes>::new())
        .unwrap();
    send(addr, req).await
}

pub(crate) async fn get_json(addr: &str, path: &str) -> Value {
    let (status, body) = get(addr, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Reads the event stream until a change satisfies `pred`.
async fn wait_for_change(
    body: &mut hyper::body::Incoming,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let found = async {
        let mut pending = String::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.unwrap().into_data() else {
                continue;
            };
            pending.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        let change: Value = serde_json::from_str(data).unwrap();
                        if pred(&change) {
                            return change;
                        }
                    }
                }
            }
        }
        panic!("the event stream ended while waiting for {what}");
    };
    tokio::time::timeout(DEADLINE, found)
        .await
        .unwrap_or_else(|_| panic!("no change on the event stream within {DEADLINE:?}: {what}"))
}

fn khai_status(args: &[&str]) -> String {
    let out = std::process::Command::new(khai_bin())
        .arg("status")
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "khai status {args:?} failed: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[tokio::test]
async fn console_shows_each_reconcile_and_a_failing_objects_error_with_its_line() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "console").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "console.khai.dev";
    let config = example_copy("cache", dir.path(), "consolecache", group);
    let script = config.join("scripts/cache.rhai");
    let text = std::fs::read_to_string(&script).unwrap();
    let at = text.find("fn reconcile(obj, ctx) {\n").unwrap() + "fn reconcile(obj, ctx) {\n".len();
    let line = text[..at].lines().count() + 1;
    std::fs::write(
        &script,
        format!("{}{REFUSAL}\n{}", &text[..at], &text[at..]),
    )
    .unwrap();
    let expected = format!("cache.rhai:{line}:");

    let khai = Khai::start(
        &config,
        &ns.name,
        &["--webhook-bind", "127.0.0.1:0", "--console", "127.0.0.1:0"],
    );
    let addr = khai.listening("console").await;
    let (status, body) = get(&addr, "/api/nope").await;
    assert_eq!(
        (status, body.contains("no such page")),
        (404, true),
        "{body}"
    );

    // The stream is open before any object exists, so it sees their first turns.
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/api/stream")
        .header("host", &addr)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let res = send.send_request(req).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut events = res.into_body();
    wait_for_change(&mut events, "the stream's hello", |c| c["type"] == "hello").await;

    crate::support::wait_for_crd(&client, &format!("caches.{group}")).await;
    let caches = custom_api(&client, &ns.name, group, "Cache", "caches");
    let sample = std::fs::read_to_string(repo_root().join("examples/cache/cache.yaml")).unwrap();
    let mut healthy: DynamicObject =
        serde_saphyr::from_str(&sample.replace("examples.khai.dev", group)).unwrap();
    healthy.metadata.namespace = None;
    caches
        .create(&PostParams::default(), &healthy)
        .await
        .unwrap();
    let mut broken = healthy.clone();
    broken.metadata.name = Some("broken".into());
    broken
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("example.khai.dev/refuse".into(), "yes".into());
    caches
        .create(&PostParams::default(), &broken)
        .await
        .unwrap();

    // Either may come first; broken fails twice, the second time on its backoff retry.
    let seen = std::sync::Mutex::new((0, false));
    wait_for_change(
        &mut events,
        "two failed turns of broken and a successful one of sessions",
        |c| {
            let mut seen = seen.lock().unwrap();
            if c["type"] == "turn" {
                seen.0 += usize::from(c["name"] == "broken" && c["result"] == "error");
                seen.1 |= c["name"] == "sessions" && c["result"] == "success";
            }
            seen.0 >= 2 && seen.1
        },
    )
    .await;

    let overview = get_json(&addr, "/api/overview").await;
    assert_eq!(overview["operator"], "consolecache");
    assert_eq!(overview["reloads"][0]["result"], "loaded");
    assert!(
        !overview["revision"]["hash"].as_str().unwrap().is_empty(),
        "{overview}"
    );
    let cache = &overview["controllers"][0];
    assert_eq!(
        (&cache["name"], &cache["kind"]),
        (&json!("cache"), &json!("Cache"))
    );
    assert!(cache["backoff"].as_u64().unwrap() >= 1, "{cache}");
    assert!(
        cache["rates"]["reconciles_last_minute"].as_u64().unwrap() >= 2,
        "{cache}"
    );
    assert!(cache["rates"]["p50_ms"].is_number(), "{cache}");
    assert_eq!(
        overview["webhooks"][0]["function"],
        "validate, mutate, convert"
    );

    let controller = get_json(&addr, "/api/controllers/cache").await;
    let objects = controller["objects"].as_array().unwrap();
    let find = |name: &str| {
        objects
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {controller}"))
    };
    assert_eq!(find("broken")["state"], "backoff");
    assert_eq!(find("sessions")["state"], "ok");

    let detail = get_json(&addr, &format!("/api/objects/cache/{}/broken", ns.name)).await;
    let error = detail["history"][0]["error"].as_str().unwrap();
    assert!(
        error.contains(&expected)
            && error.contains("refused: the object has the example.khai.dev/refuse annotation"),
        "the turn's error should point at {expected}: {error}"
    );
    assert!(detail["events_error"].is_null(), "{detail}");
    assert!(
        detail["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "Warning"
                && e["message"].as_str().is_some_and(|m| m.contains(&expected))),
        "no Warning Event with the error: {detail}"
    );
    let turns = detail["history"].as_array().unwrap();
    let triggers: Vec<&Value> = turns.iter().rev().map(|t| &t["triggers"]).collect();
    // Created before or after the controller's first list, then retried after its failure.
    assert!(
        [json!(["parent"]), json!(["start"])].contains(triggers[0]),
        "{detail}"
    );
    assert_eq!(triggers[1], &json!(["backoff"]), "{detail}");
    let sessions = get_json(&addr, &format!("/api/objects/cache/{}/sessions", ns.name)).await;
    let first = sessions["history"].as_array().unwrap().last().unwrap();
    assert!(
        [json!(["parent"]), json!(["start"])].contains(&first["triggers"]),
        "{sessions}"
    );
    assert_eq!(
        (&first["applied"], &first["status_written"]),
        (&json!(2), &json!(true)),
        "{sessions}"
    );

    let text = khai_status(&["--console", &addr]);
    assert!(text.contains("operator  consolecache"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("cache ") && l.contains("Cache")),
        "{text}"
    );
    let text = khai_status(&["--console", &addr, "--object", "Cache/broken"]);
    assert!(
        text.contains("last error:") && text.contains(&expected),
        "{text}"
    );

    let metrics_addr = khai.metrics_addr().await;
    let (_, metrics) = get(&metrics_addr, "/metrics").await;
    let held = metrics
        .lines()
        .find_map(|l| l.strip_prefix("khai_console_history_bytes "))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no khai_console_history_bytes in\n{metrics}"));
    assert!(held > 0);

    crate::console_playground::check(&addr, &client, &ns.name).await;
    let mut live = healthy.clone();
    live.metadata.name = Some("live".into());
    browse(&addr, &ns.name, &expected, async || {
        caches.create(&PostParams::default(), &live).await.unwrap();
    })
    .await;
}

/// playwright-core's directory and Chromium, or `None` (said) when they are not installed and
/// not required.
pub(crate) fn browser() -> Option<(PathBuf, PathBuf)> {
    let tools = std::env::var_os("KHAI_TEST_TOOLS").map_or_else(
        || PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/khai/test-tools"),
        PathBuf::from,
    );
    let playwright = tools.join("node_modules/playwright-core");
    let chromium = PathBuf::from("/usr/bin/chromium");
    if !playwright.is_dir() || !chromium.exists() {
        assert!(
            std::env::var_os("KHAI_TEST_REQUIRE_BROWSER").is_none(),
            "the browser check is required (KHAI_TEST_REQUIRE_BROWSER) but {} or {} is missing",
            playwright.display(),
            chromium.display()
        );
        eprintln!(
            "skipping the browser check: no Chromium or playwright-core (scripts/test installs both)"
        );
        return None;
    }
    Some((playwright, chromium))
}

/// The page in a real headless Chromium (tests/e2e/console_page.js). Once the page shows the
/// overview it says `ready`, and `change` makes a new object, which the overview must show
/// without a reload.
async fn browse(addr: &str, namespace: &str, expected: &str, change: impl AsyncFnOnce()) {
    let Some((playwright, chromium)) = browser() else {
        return;
    };
    let shots = repo_root().join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut page = tokio::process::Command::new("node")
        .arg(repo_root().join("tests/e2e/console_page.js"))
        .env("PLAYWRIGHT", &playwright)
        .env("CHROMIUM", &chromium)
        .env("URL", format!("http://{addr}/"))
        .env("CONTROLLER", "cache")
        .env("NAMESPACE", namespace)
        .env("OBJECT", format!("{namespace}/broken"))
        .env("EXPECT", expected)
        .env("SHOTS", &shots)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(page.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(DEADLINE, lines.next_line()).await;
    assert!(
        matches!(&ready, Ok(Ok(Some(l))) if l == "ready"),
        "the page did not show the overview: {ready:?}"
    );
    change().await;
    let out = tokio::time::timeout(DEADLINE * 2, page.wait_with_output())
        .await
        .expect("the browser check did not finish")
        .unwrap();
    let mut stdout = String::new();
    while let Ok(Some(l)) = lines.next_line().await {
        stdout.push_str(&l);
    }
    assert!(
        out.status.success(),
        "the browser check failed: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(seen["error"].as_str().unwrap().contains(expected), "{seen}");
    assert_eq!(seen["problems"], json!([]), "the page logged errors");
    for shot in ["overview", "controller", "object", "webhooks", "playground"] {
        assert!(
            shots.join(format!("{shot}.png")).exists(),
            "no screenshot {shot}"
        );
    }
}
