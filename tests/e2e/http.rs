//! The `http` module and `ctx.secret` against a real API server.
//!
//! Each test starts its own REST service on loopback (a small hyper server that records every
//! request), allow-lists exactly it, and asserts the requests it saw: `examples/bucket` goes
//! through create → (khai killed after the create was sent, restarted) → update → delete with no
//! duplicate create; a probe operator shows what the allow-list refuses (unlisted host,
//! loopback, the metadata address, a redirect out of the list), the response cap, the redirect
//! limit, and a request that never gets an answer ending at its timeout while other objects keep
//! reconciling.

use crate::support::metrics::wait_for_reloads;
use crate::support::{Khai, TestNamespace, custom_api, wait_for, wait_until_gone};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Every request the service saw, as `METHOD /path?query body`, in order.
pub(crate) type Seen = watch::Receiver<Vec<String>>;

/// What the service answers: `(status, content-type, body)`, or `None` to never answer.
pub(crate) type Answer = Option<(u16, &'static str, String)>;

/// Starts a service on loopback answering with `handler(method, path_and_query, body)`.
pub(crate) async fn serve<H>(handler: H) -> (SocketAddr, Seen)
where
    H: Fn(&str, &str, &Value, Option<&str>) -> Answer + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = watch::channel(Vec::new());
    let tx = Arc::new(tx);
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (tx, handler) = (tx.clone(), handler.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (tx, handler) = (tx.clone(), handler.clone());
                        async move {
                            let method = req.method().to_string();
                            let path = req.uri().path_and_query().unwrap().to_string();
                            let auth = req
                                .headers()
                                .get("authorization")
                                .map(|v| v.to_str().unwrap().to_string());
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let line = match &json {
                                Value::Null => format!("{method} {path}"),
                                j => format!("{method} {path} {j}"),
                            };
                            tx.send_modify(|seen| seen.push(line));
                            let Some((status, ctype, body)) =
                                handler(&method, &path, &json, auth.as_deref())
                            else {
                                std::future::pending::<()>().await;
                                unreachable!()
                            };
                            let mut res = hyper::Response::builder().status(status);
                            if status / 100 == 3 {
                                res = res.header("location", body.clone());
                            }
                            res.header("content-type", ctype)
                                .body(Full::new(Bytes::from(body)))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, rx)
}

/// Waits until the service has seen `n` requests.
async fn seen_at_least(seen: &mut Seen, n: usize, what: &str) -> Vec<String> {
    let got = tokio::time::timeout(crate::support::DEADLINE, seen.wait_for(|s| s.len() >= n))
        .await
        .map(|r| r.map(|s| s.clone()));
    match got {
        Ok(Ok(s)) => s,
        _ => panic!("{what}: the service saw {:?}", seen.borrow().clone()),
    }
}

/// `examples/bucket` in a temporary directory, pointed at the service at `addr`.
fn bucket_example(addr: SocketAddr) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = crate::support::repo_root().join("examples/bucket");
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    std::fs::copy(
        from.join("scripts/bucket.rhai"),
        dir.path().join("scripts/bucket.rhai"),
    )
    .unwrap();
    let config = std::fs::read_to_string(from.join("operator.toml"))
        .unwrap()
        .replace("\"storage.example.com\"", &format!("\"{addr}\""))
        .replace("https://storage.example.com", &format!("http://{addr}"));
    assert!(
        config.contains(&addr.to_string()),
        "the example changed: {config}"
    );
    std::fs::write(dir.path().join("operator.toml"), config).unwrap();
    dir
}

/// The bucket service of the example: buckets by id, the token checked on every request. A
/// create is held unanswered while `hold_creates` is set (khai is killed meanwhile).
fn bucket_service(
    hold_creates: Arc<Mutex<bool>>,
) -> impl Fn(&str, &str, &Value, Option<&str>) -> Answer + Send + Sync + 'static {
    let buckets: Arc<Mutex<BTreeMap<String, Value>>> = Arc::default();
    move |method, path, body, auth| {
        if auth != Some("Bearer s3cr3t") {
            return Some((401, "text/plain", "no".into()));
        }
        let mut buckets = buckets.lock().unwrap();
        let ok = |status, v: Value| Some((status, "application/json", v.to_string()));
        match (method, path.split_once('?').map_or(path, |(p, _)| p)) {
            ("GET", "/buckets") => {
                let name = path.split_once("?name=").map(|(_, n)| n).unwrap_or("");
                let items: Vec<Value> = buckets
                    .values()
                    .filter(|b| b["name"] == name)
                    .cloned()
                    .collect();
                ok(200, json!({ "items": items }))
            }
            ("POST", "/buckets") => {
                let id = format!("bkt-{}", buckets.len() + 1);
                let mut b = body.clone();
                b["id"] = json!(id);
                buckets.insert(id, b.clone());
                if *hold_creates.lock().unwrap() {
                    return None;
                }
                ok(201, b)
            }
            ("PUT", p) | ("DELETE", p) => {
                let id = p.trim_start_matches("/buckets/").to_string();
                if !buckets.contains_key(&id) {
                    return ok(404, json!({}));
                }
                if method == "DELETE" {
                    buckets.remove(&id);
                    return Some((204, "text/plain", String::new()));
                }
                let mut b = body.clone();
                b["id"] = json!(id);
                buckets.insert(id, b.clone());
                ok(200, b)
            }
            _ => Some((400, "text/plain", "unexpected".into())),
        }
    }
}

#[tokio::test]
async fn bucket_example_sends_exactly_create_update_delete_with_no_duplicate_after_a_restart() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "http-bucket").await;
    let secrets = crate::support::custom_api(&client, &ns.name, "", "Secret", "secrets");
    let secret: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": "bucket-credentials" },
        "stringData": { "token": "s3cr3t" },
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let hold = Arc::new(Mutex::new(true));
    let (addr, mut seen) = serve(bucket_service(hold.clone())).await;
    let dir = bucket_example(addr);
    let args = ["--webhook-bind", "127.0.0.1:0"];
    let mut khai = Khai::start(dir.path(), &ns.name, &args);
    crate::support::wait_for_crd(&client, "buckets.examples.khai.dev").await;
    let buckets = custom_api(&client, &ns.name, "examples.khai.dev", "Bucket", "buckets");
    let text =
        std::fs::read_to_string(crate::support::repo_root().join("examples/bucket/bucket.yaml"))
            .unwrap();
    let bucket: DynamicObject = serde_saphyr::from_str(&text).unwrap();
    buckets
        .create(&PostParams::default(), &bucket)
        .await
        .unwrap();

    // The create reaches the service, which keeps the bucket but never answers: khai dies
    // before it learns the id.
    let name = format!("{}-photos", ns.name);
    let lookup = format!("GET /buckets?name={name}");
    let create = format!(
        "POST /buckets {}",
        json!({ "name": name, "region": "eu-west", "versioning": false })
    );
    let log = seen_at_least(&mut seen, 2, "a lookup then a create").await;
    assert_eq!(log, [lookup.clone(), create.clone()]);
    khai.kill();
    *hold.lock().unwrap() = false;

    // The restarted khai finds the bucket by its name and records it: no second create.
    let khai = Khai::start(dir.path(), &ns.name, &args);
    wait_for(
        &buckets,
        "photos",
        "status.id recorded after the restart",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["id"] == "bkt-1"),
    )
    .await;
    assert_eq!(
        *seen.borrow(),
        [lookup.clone(), create.clone(), lookup.clone()]
    );

    // A spec change is one PUT of the recorded id.
    buckets
        .patch(
            "photos",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "region": "us-east" } })),
        )
        .await
        .unwrap();
    wait_for(
        &buckets,
        "photos",
        "generation 2 observed",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["observedGeneration"] == 2),
    )
    .await;
    let update = format!(
        "PUT /buckets/bkt-1 {}",
        json!({ "name": name, "region": "us-east", "versioning": false })
    );
    assert_eq!(
        *seen.borrow(),
        [
            lookup.clone(),
            create.clone(),
            lookup.clone(),
            update.clone()
        ]
    );

    // Deleting the Bucket deletes the bucket before the finalizer is removed.
    buckets.delete("photos", &Default::default()).await.unwrap();
    wait_until_gone(&buckets, "photos", "the Bucket to be finalized and deleted").await;
    assert_eq!(
        *seen.borrow(),
        [
            lookup.clone(),
            create,
            lookup,
            update,
            "DELETE /buckets/bkt-1".to_string()
        ]
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

const PROBE: &str = r#"
[operator]
name = "httpprobe"

[operator.http]
allow = ["ADDR"]
max_response_bytes = 1024
max_redirects = 2
timeout = "1s"

[[crd]]
group = "e2e.khai.dev"
kind = "HttpProbe"
versions = ["v1"]
spec.url = { type = "string", required = true }
spec.raise = { type = "boolean", default = false }
status.status = { type = "integer" }
status.reason = { type = "string" }

[[controller]]
for = "HttpProbe"
script = "probe.rhai"
"#;

const PROBE_SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    if obj.status?.status != () || obj.status?.reason != () {
        return #{ status: obj.status };
    }
    if obj.spec.raise {
        return #{ status: #{ status: http::get(obj.spec.url).status } };
    }
    let out = ();
    try {
        out = #{ status: http::get(obj.spec.url).status };
    } catch (e) {
        out = #{ reason: e.reason };
    }
    #{ status: out }
}
"#;

#[tokio::test]
async fn the_allow_list_the_response_cap_redirects_and_timeouts_hold_in_a_running_khai() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "http-probe").await;
    let (addr, seen) = serve(move |_, path, _, _| match path {
        "/ok" => Some((200, "text/plain", "fine".into())),
        "/big" => Some((200, "text/plain", "x".repeat(4096))),
        "/away" => Some((
            302,
            "text/plain",
            "http://169.254.169.254/latest/meta-data/".into(),
        )),
        "/loop" => Some((302, "text/plain", "/loop".into())),
        "/hang" => None,
        _ => Some((404, "text/plain", String::new())),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.toml"),
        PROBE.replace("ADDR", &addr.to_string()),
    )
    .unwrap();
    std::fs::write(dir.path().join("probe.rhai"), PROBE_SCRIPT).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--webhook-bind", "127.0.0.1:0"]);
    crate::support::wait_for_crd(&client, "httpprobes.e2e.khai.dev").await;
    let probes = custom_api(&client, &ns.name, "e2e.khai.dev", "HttpProbe", "httpprobes");
    let create = |name: &str, url: String, raise: bool| {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "e2e.khai.dev/v1", "kind": "HttpProbe",
            "metadata": { "name": name },
            "spec": { "url": url, "raise": raise },
        }))
        .unwrap();
        let probes = probes.clone();
        async move { probes.create(&PostParams::default(), &o).await.unwrap() }
    };

    // A request that never gets an answer fails its call at its timeout, again and again with
    // backoff; the other objects are reconciled meanwhile.
    create("hang", format!("http://{addr}/hang"), true).await;
    let mut seen2 = seen.clone();
    seen_at_least(&mut seen2, 1, "the hanging request").await;
    let cases = [
        ("ok", format!("http://{addr}/ok"), json!({ "status": 200 })),
        (
            "unlisted",
            "http://unlisted.example.org/".into(),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "loopback",
            format!("http://localhost:{}/ok", addr.port()),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "other-port",
            "http://127.0.0.1:1/".into(),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "metadata",
            "http://169.254.169.254/latest/meta-data/".into(),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "file",
            "file:///etc/passwd".into(),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "big",
            format!("http://{addr}/big"),
            json!({ "reason": "too_large" }),
        ),
        (
            "away",
            format!("http://{addr}/away"),
            json!({ "reason": "not_allowed" }),
        ),
        (
            "loop",
            format!("http://{addr}/loop"),
            json!({ "reason": "too_many_redirects" }),
        ),
    ];
    for (name, url, _) in &cases {
        create(name, url.clone(), false).await;
    }
    for (name, _, want) in &cases {
        let got = wait_for(
            &probes,
            name,
            "the probe's outcome in status",
            |o: Option<&DynamicObject>| {
                o.is_some_and(|o| {
                    !o.data["status"]["status"].is_null() || !o.data["status"]["reason"].is_null()
                })
            },
        )
        .await;
        let outcome: serde_json::Map<String, Value> = ["status", "reason"]
            .iter()
            .filter_map(|k| Some((k.to_string(), got.data["status"].get(*k)?.clone())))
            .collect();
        assert_eq!(Value::Object(outcome), *want, "{name}");
    }
    let timeout = "http::request GET 127.0.0.1: timeout: no answer within 1s";
    let line = khai
        .wait_for_log(
            0,
            "the hanging request's call failing at its timeout",
            move |l| l.contains(timeout),
        )
        .await;
    assert!(
        line.contains("probe.rhai:"),
        "names the script line: {line}"
    );
    let mut seen2 = seen.clone();
    let log = seen_at_least(&mut seen2, 1, "the hanging request retried").await;
    let hangs = |log: &[String]| log.iter().filter(|l| *l == "GET /hang").count();
    if hangs(&log) < 2 {
        let got =
            tokio::time::timeout(crate::support::DEADLINE, seen2.wait_for(|s| hangs(s) >= 2)).await;
        assert!(
            got.is_ok(),
            "the hanging probe was not retried: {:?}",
            seen.borrow()
        );
    }
    // The refused requests never reached the service; only the listed host's paths did.
    for l in seen.borrow().iter() {
        assert!(
            ["GET /ok", "GET /big", "GET /away", "GET /loop", "GET /hang"].contains(&l.as_str()),
            "unexpected request {l}"
        );
    }
    let addr_m = khai.metrics_addr().await;
    let metrics = crate::support::metrics::metrics_until(&addr_m, "http metrics", |b| {
        b.contains("khai_script_http_requests_total{code=\"timeout\"")
    })
    .await;
    assert!(metrics.contains("code=\"too_large\""), "{metrics}");
    assert!(metrics.contains("host=\"<refused>\""), "{metrics}");
    drop(khai);
}

/// `examples/bucket` runs as a ServiceAccount with only what `khai generate rbac` grants: its
/// Secret is read (by name, through a watch with a `metadata.name` field selector), no other
/// Secret is readable, and khai meets no 403.
#[tokio::test]
async fn bucket_example_runs_with_only_its_generated_rbac_which_reads_one_secret_by_name() {
    use crate::rbac::{apply, denied, generate_rbac, service_account_kubeconfig};
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "http-rbac").await;
    let secrets = custom_api(&client, &ns.name, "", "Secret", "secrets");
    for (name, token) in [("bucket-credentials", "s3cr3t"), ("other", "not-yours")] {
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name },
            "stringData": { "token": token },
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let (addr, _seen) = serve(bucket_service(Arc::default())).await;
    let dir = bucket_example(addr);
    let docs = generate_rbac(dir.path(), &ns.name);
    apply(&client, &ns.name, &docs).await;
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, "khai-bucket").await;
    let khai = Khai::start_with_kubeconfig(dir.path(), &ns.name, &[], &kubeconfig);
    crate::support::wait_for_crd(&client, "buckets.examples.khai.dev").await;
    let buckets = custom_api(&client, &ns.name, "examples.khai.dev", "Bucket", "buckets");
    let bucket: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.khai.dev/v1", "kind": "Bucket",
        "metadata": { "name": "logs" },
        "spec": { "region": "eu-west" },
    }))
    .unwrap();
    buckets
        .create(&PostParams::default(), &bucket)
        .await
        .unwrap();
    wait_for(
        &buckets,
        "logs",
        "the bucket created with the Secret's token",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
    )
    .await;

    let as_khai = crate::support::client_of(&kubeconfig).await;
    let theirs = custom_api(&as_khai, &ns.name, "", "Secret", "secrets");
    assert!(theirs.get("bucket-credentials").await.is_ok());
    for refused in [
        theirs.get("other").await.map(|_| ()),
        theirs.list(&Default::default()).await.map(|_| ()),
    ] {
        match refused {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e}"),
            other => panic!("khai's ServiceAccount reads more Secrets than it names: {other:?}"),
        }
    }
    let (_, logs) = khai.terminate().await;
    let refused: Vec<&String> = logs.iter().filter(|l| denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");
}

const SECRET_PROBE: &str = r#"
[operator]
name = "secretprobe"
secrets = ["probe-token"]

[[crd]]
group = "e2e.khai.dev"
kind = "SecretProbe"
versions = ["v1"]
status.token = { type = "string" }

[[controller]]
for = "SecretProbe"
script = "probe.rhai"
"#;

/// A reload that restarts the controller keeps the watch of its Secret: a later change to the
/// Secret reaches the scripts (a reload stops the watches no running controller reads, and the
/// Secrets are read by `ctx.secret`, not by lookups).
#[tokio::test]
async fn a_reload_keeps_the_secrets_watched_and_fresh() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "http-secret-reload").await;
    let secrets = custom_api(&client, &ns.name, "", "Secret", "secrets");
    let secret = |token: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "probe-token" },
            "stringData": { "token": token },
        }))
        .unwrap()
    };
    secrets
        .create(&PostParams::default(), &secret("one"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), SECRET_PROBE).unwrap();
    let script = |version: &str| {
        format!(
            "// {version}\nfn reconcile(obj, ctx) {{ #{{ status: #{{ token: ctx.secret(\"probe-token\", \"token\") }} }} }}\n"
        )
    };
    std::fs::write(dir.path().join("probe.rhai"), script("v1")).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &["--watch"]);
    let addr = khai.metrics_addr().await;
    crate::support::wait_for_crd(&client, "secretprobes.e2e.khai.dev").await;
    let probes = custom_api(
        &client,
        &ns.name,
        "e2e.khai.dev",
        "SecretProbe",
        "secretprobes",
    );
    let probe = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "e2e.khai.dev/v1", "kind": "SecretProbe",
            "metadata": { "name": name },
        }))
        .unwrap()
    };
    probes
        .create(&PostParams::default(), &probe("a"))
        .await
        .unwrap();
    let token_is = |want: &'static str| {
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["token"] == want)
    };
    wait_for(&probes, "a", "the Secret's first token", token_is("one")).await;

    let tmp = dir.path().join("probe.rhai.tmp");
    std::fs::write(&tmp, script("v2")).unwrap();
    std::fs::rename(&tmp, dir.path().join("probe.rhai")).unwrap();
    wait_for_reloads(&addr, "success", 1.0).await;

    secrets
        .patch(
            "probe-token",
            &PatchParams::default(),
            &Patch::Merge(json!({ "stringData": { "token": "two" } })),
        )
        .await
        .unwrap();
    // A Secret change triggers no reconcile, and the Secret's watch and the probes' are two
    // streams: a probe created right after the change may be reconciled before the Secret's
    // event arrives and keep the first token. So probes are created one after another, each
    // once the last has its status, until one reads the second token; a watch the reload had
    // stopped would never deliver it.
    let deadline = tokio::time::Instant::now() + crate::support::DEADLINE;
    let mut seen = Vec::new();
    for n in 0.. {
        let name = format!("b{n}");
        probes
            .create(&PostParams::default(), &probe(&name))
            .await
            .unwrap();
        let has_token =
            |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["token"].is_string());
        let done = wait_for(&probes, &name, "a token in the status", has_token).await;
        let token = done.data["status"]["token"].clone();
        if token == "two" {
            break;
        }
        seen.push(token);
        assert!(
            tokio::time::Instant::now() < deadline,
            "no probe read the Secret's second token within {:?}: they read {seen:?}",
            crate::support::DEADLINE
        );
    }
    let stopped: Vec<String> = khai
        .tail(10_000)
        .lines()
        .filter(|l| l.contains("stopped watching") && l.contains("Secret"))
        .map(str::to_string)
        .collect();
    assert!(stopped.is_empty(), "{stopped:?}");
}
