//! End to end: khai's two HTTP servers (metrics and probes; webhooks over TLS) under hostile
//! load, on real sockets, with the real `khai` binary against a real API server.
//!
//! Running out of file descriptors must not make an accept loop spin; slow or silent clients
//! must not lock out `/healthz` or admission reviews; conversion reviews of long lists must take
//! bounded memory and leave admission fast. CPU and memory are read from `/proc/<pid>`.

use crate::support::metrics::http_get;
use crate::support::{DEADLINE, Khai, TestNamespace};
use crate::webhooks::{connect_tls, post, write_cert};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An operator with a two-version `Widget` CRD in `group` and a webhook that validates
/// (`spec.count` at most 10) and converts (v1 `count` ⇄ v2 `total`), serving certificate files
/// written to `dir` (returns the CA that signed them). `server` is appended to
/// `[webhook_server]`.
fn operator(dir: &Path, group: &str, server: &str) -> String {
    let ca = write_cert(dir);
    std::fs::write(
        dir.join("w.rhai"),
        r#"
fn validate(req) {
    if req.object.spec.count > 10 { deny("count above 10") }
}
fn convert(obj, to_version) {
    let spec = obj.spec;
    if to_version == "v2" { spec.total = spec.count; spec.remove("count"); }
    else { spec.count = spec.total; spec.remove("total"); }
    obj.spec = spec;
    obj
}
"#,
    )
    .unwrap();
    let toml = format!(
        r#"
[operator]
name = "servers"

[[crd]]
group = "{group}"
kind = "Widget"
versions = [{{ name = "v1", storage = true }}, {{ name = "v2" }}]
spec.count = {{ type = "integer" }}
spec.total = {{ type = "integer" }}
spec.items = {{ type = "map" }}

[[webhook]]
for = "Widget"
script = "w.rhai"
validate = "validate"
convert = "convert"

[webhook_server]
tls = "files"
cert_file = "tls.crt"
key_file = "tls.key"
{server}
"#
    );
    std::fs::write(dir.join("operator.toml"), toml).unwrap();
    ca
}

/// khai on `dir`'s operator with its webhook server on a port it picks, run through `wrapper`;
/// returns it with the metrics address and the webhook port once both serve and khai is ready
/// (its CRD installed and its caches synced, so it needs no new descriptors to start up).
async fn start(dir: &Path, ns: &str, wrapper: &[&str]) -> (Khai, String, u16) {
    let khai = Khai::start_wrapped(dir, ns, &["--webhook-bind", "127.0.0.1:0"], wrapper);
    let port = khai.listening_port("webhook").await;
    let addr = khai.metrics_addr().await;
    answers_within(&addr, "/readyz", DEADLINE).await;
    (khai, addr, port)
}

/// CPU time khai has used, from `/proc/<pid>/stat` (user + system, in clock ticks of 10 ms).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces: state is the
    // first, utime the 12th and stime the 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Waits until `/healthz` answers 200, each try bounded to a second; panics after `within`.
async fn healthz_within(addr: &str, within: Duration) -> Duration {
    answers_within(addr, "/healthz", within).await
}

/// Waits until `path` answers 200, each try bounded to a second; panics after `within`.
async fn answers_within(addr: &str, path: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(1), http_get(addr, path));
        if let Ok((200, _)) = attempt.await {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{path} did not answer 200 within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` TCP connections to `addr` that send nothing.
async fn idle_connections(addr: &str, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(TcpStream::connect(addr).await.unwrap());
    }
    out
}

fn admission_review(uid: &str, count: u32) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": { "uid": uid, "operation": "CREATE",
            "object": { "apiVersion": "x/v1", "kind": "Widget", "spec": { "count": count } } },
    }))
    .unwrap()
}

/// An admission review answered within `within`; returns how long it took.
async fn admitted_within(port: u16, ca: &str, within: Duration) -> Duration {
    let started = Instant::now();
    let post = post(port, ca, "/validate/widget", admission_review("a", 1));
    let answer = tokio::time::timeout(within, post)
        .await
        .unwrap_or_else(|_| panic!("no answer to an admission review within {within:?}"));
    let (status, body) = answer.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    started.elapsed()
}

/// With `ulimit -n 64` and 100 idle connections, the metrics server's accept loop
/// spun at ~117% CPU, logged nothing, and `/healthz` timed out; the webhook server had the same
/// loop. Here under `--nofile=128` with 220 idle connections. Seen failing against the build
/// before the fix: 2.3 to 3.1 s of CPU in 3 s (both loops spinning), and no log line.
#[tokio::test]
async fn accept_loops_back_off_and_say_why_when_file_descriptors_run_out() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "srv-fds").await;
    let dir = tempfile::tempdir().unwrap();
    operator(dir.path(), "fds.servers.khai.dev", "");
    // 128 rather than the 64 of the report: khai opens several connections to the API server at
    // once while it starts, and must get through that first.
    let (khai, addr, port) = start(dir.path(), &ns.name, &["prlimit", "--nofile=128:128"]).await;

    // Far more connections than khai has descriptors left; the rest wait in the backlog. The
    // webhook server's first, as it may hold all of them (its cap is 128); then none is left for
    // the metrics server, which would otherwise keep its own 64 by closing the oldest.
    let mut held = idle_connections(&format!("127.0.0.1:{port}"), 120).await;
    held.extend(idle_connections(&addr, 100).await);
    let window = Duration::from_secs(3);
    let before = cpu_time(khai.pid());
    tokio::time::sleep(window).await; // a measuring window, not a synchronisation
    let used = cpu_time(khai.pid()) - before;
    // A spinning loop takes a whole core, or its fair share of a busy machine: far above this.
    assert!(
        used < window / 20,
        "khai used {used:?} of CPU in {window:?} while out of file descriptors"
    );
    for server in ["metrics", "webhook"] {
        let line = khai
            .wait_for_log(
                0,
                &format!("the {server} server to say why it cannot accept"),
                move |l| l.contains("cannot accept connections") && l.contains(server),
            )
            .await;
        assert!(line.contains("Too many open files"), "{line}");
        assert!(line.contains("WARN"), "{line}");
    }

    drop(held);
    let took = healthz_within(&addr, Duration::from_secs(10)).await;
    eprintln!("CPU while out of descriptors: {used:?} in {window:?}; /healthz back after {took:?}");
}

/// The metrics server had no header-read timeout, so a client that connected and
/// sent nothing, or kept an idle connection after its answer, held it for ever. Seen failing
/// against the build before the fix (no EOF within the deadline).
#[tokio::test]
async fn silent_and_idle_clients_are_disconnected_after_the_header_timeout() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "srv-timeout").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = operator(
        dir.path(),
        "timeout.servers.khai.dev",
        "request_timeout = \"1s\"",
    );
    let (_khai, addr, port) = start(dir.path(), &ns.name, &[]).await;

    let silent = TcpStream::connect(&addr).await.unwrap();
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    kept.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let tls = connect_tls(port, &ca).await.unwrap();
    let started = Instant::now();
    let (silent, kept, tls) = tokio::join!(
        closed_by_server(silent),
        closed_by_server(kept),
        closed_by_server(tls)
    );
    assert!(kept.starts_with("HTTP/1.1 200 OK"), "{kept}");
    assert_eq!(silent, "");
    assert_eq!(tls, "");
    eprintln!("disconnected after {:?}", started.elapsed());
}

/// Reads until the server closes the connection (within the deadline); returns what it sent.
async fn closed_by_server<S: AsyncReadExt + Unpin>(mut stream: S) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the server kept the connection open for 15 s");
    String::from_utf8_lossy(&got).into_owned()
}

/// A few hundred slow connections must not stop `/healthz` or webhook reviews.
/// Neither server capped its connections, so under a realistic descriptor limit the slow
/// clients took every descriptor. Seen failing against the build before the fix (`/healthz`
/// did not answer).
#[tokio::test]
async fn hundreds_of_slow_clients_cannot_lock_out_healthz_or_admission_reviews() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "srv-slow").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = operator(dir.path(), "slow.servers.khai.dev", "");
    let (khai, addr, port) = start(dir.path(), &ns.name, &["prlimit", "--nofile=256:256"]).await;

    // Each sends the start of a request and then nothing: a slowloris.
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
        slow.push(s);
    }
    let mut slow_tls = Vec::new();
    for _ in 0..300 {
        // Some are closed to make room while still handshaking; that is the point.
        let handshake = tokio::time::timeout(Duration::from_secs(1), connect_tls(port, &ca));
        if let Ok(Ok(mut s)) = handshake.await {
            let _ = s
                .write_all(b"POST /validate/widget HTTP/1.1\r\nHost: x\r\n")
                .await;
            slow_tls.push(s);
        }
    }
    for _ in 0..3 {
        healthz_within(&addr, Duration::from_secs(2)).await;
        admitted_within(port, &ca, Duration::from_secs(2)).await;
    }
    let fds = std::fs::read_dir(format!("/proc/{}/fd", khai.pid()))
        .unwrap()
        .count();
    assert!(fds < 256, "khai holds {fds} descriptors");
    eprintln!(
        "with 600 slow clients: /healthz and reviews answered; khai holds {fds} descriptors \
         ({} TLS clients got through the handshake)",
        slow_tls.len()
    );
}

/// A ConversionReview of `objects` v1 Widgets, each with a map of 30 strings of 1 KB.
fn conversion_review(uid: &str, group: &str, objects: usize) -> Vec<u8> {
    let items: serde_json::Map<String, Value> = (0..30)
        .map(|i| {
            (
                format!("key-{i:04}"),
                json!(format!("value {i:04} {}", "x".repeat(1000))),
            )
        })
        .collect();
    let objects: Vec<Value> = (0..objects)
        .map(|i| {
            json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
                "metadata": { "name": format!("w{i}"), "namespace": "default" },
                "spec": { "count": i, "items": items } })
        })
        .collect();
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": { "uid": uid, "desiredAPIVersion": format!("{group}/v2"), "objects": objects },
    }))
    .unwrap()
}

/// One 2.9 MB ConversionReview took khai's RSS from 35 to 119 MiB, 16 at once to a
/// 573 MiB peak, and an admission review during 8 parallel conversions took 3.1 s instead of
/// 7 ms. Seen failing against the build before the fix: +67 MiB peak RSS for this shape (+208
/// MiB for 195 objects of 300 short strings each), and an admission review took 2.3 to 4.2 s.
#[tokio::test]
async fn conversion_reviews_take_bounded_memory_and_leave_admission_fast() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "srv-convert").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "convert.servers.khai.dev";
    // The debug build converts slowly; 16 reviews share two turns within the timeout.
    let ca = operator(
        dir.path(),
        group,
        "max_body_bytes = 4194304\nrequest_timeout = \"30s\"",
    );
    let (khai, _, port) = start(dir.path(), &ns.name, &[]).await;
    let body = conversion_review("c", group, 94);
    assert!(
        body.len() > 2_800_000 && body.len() < 3_000_000,
        "{}",
        body.len()
    );

    // Warm up with one review and check its answer.
    let one = Instant::now();
    let (status, answer) = post(port, &ca, "/convert/widget", body.clone())
        .await
        .unwrap();
    let one = one.elapsed();
    eprintln!("one conversion of {} bytes: {one:?}", body.len());
    assert_eq!(status, 200);
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{}",
        answer["response"]["result"]
    );
    let converted = answer["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(converted.len(), 94);
    assert_eq!(converted[7]["spec"]["total"], 7);
    assert_eq!(converted[7]["apiVersion"], format!("{group}/v2"));
    let rss = status_kib(khai.pid(), "VmRSS");

    let parallel = |n: usize| {
        (0..n)
            .map(|_| {
                let (body, ca) = (body.clone(), ca.clone());
                tokio::spawn(async move {
                    let (status, answer) = post(port, &ca, "/convert/widget", body).await.unwrap();
                    assert_eq!(status, 200);
                    assert_eq!(answer["response"]["result"]["status"], "Success");
                    Instant::now()
                })
            })
            .collect::<Vec<_>>()
    };
    for done in parallel(16) {
        done.await.unwrap();
    }
    let peak = status_kib(khai.pid(), "VmHWM");
    let grown = peak.saturating_sub(rss) / 1024;
    eprintln!(
        "peak RSS {} MiB (+{grown} MiB over {} MiB) after 16 parallel 2.9 MB conversions",
        peak / 1024,
        rss / 1024
    );
    assert!(
        grown < 40,
        "16 parallel conversions took khai's peak RSS from {} MiB to {} MiB",
        rss / 1024,
        peak / 1024
    );

    let conversions = parallel(8);
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        slowest = slowest.max(admitted_within(port, &ca, Duration::from_secs(10)).await);
    }
    let admitted = Instant::now();
    let mut last = admitted;
    for done in conversions {
        last = last.max(done.await.unwrap());
    }
    eprintln!("slowest admission review during 8 conversions: {slowest:?}");
    assert!(
        last > admitted,
        "the conversions finished before the admission reviews did; nothing was measured"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "an admission review took {slowest:?} while conversions ran"
    );
}
