//! AdmissionReview round trips through examples/cache's webhook script: JSON body in, JSON
//! response bytes out, along the path the HTTPS server takes after reading the body
//! (`admission::parse`, `admission::review` with its spawn_blocking script call, then
//! serialising the answer) but without TLS, HTTP or routing. Each group also runs:
//!
//! - `noop_script`: the same path with a webhook script whose functions do nothing, so the
//!   example script's own cost is the difference;
//! - `example_script_inline`: the example script called on the benchmark's thread instead of
//!   through spawn_blocking, then judged and answered by the same `admission` functions: the
//!   difference to `example_script` is the thread hop every review pays;
//! - `rust_reference`: a hand-written Rust webhook (parse, allow, serialise) with no script.
//!
//! `cargo bench --bench webhook` (add `-- --quick` for a fast pass).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "benchmark setup: a broken fixture must abort the run"
)]

/// Measured with the allocator the `khai` binary installs, which counts what script calls hold.
#[global_allocator]
static ALLOCATOR: khai::script::Counting = khai::script::Counting;

use criterion::{Criterion, criterion_group, criterion_main};
use khai::operator::Operator;
use khai::script::Script;
use khai::webhook::Handler;
use khai::webhook::admission::{self, Kind};
use serde_json::{Value, json};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

const NOOP_SCRIPT: &str =
    "fn validate(req) { } fn mutate(req) { } fn convert(obj, to_version) { obj }";

/// A CREATE of a v1 Cache with an allowed version: validate allows, mutate adds annotations.
fn review_body() -> Vec<u8> {
    let object = json!({
        "apiVersion": "examples.khai.dev/v1", "kind": "Cache",
        "metadata": {
            "name": "example", "namespace": "default", "uid": "2b1e5c1a-8d9b-4d8e-a7b0-6a4c7c2f3d11",
            "creationTimestamp": "2026-11-23T10:00:00Z", "generation": 1,
            "managedFields": [{ "manager": "kubectl", "operation": "Apply", "apiVersion": "examples.khai.dev/v1",
                "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:image": {}, "f:version": {} } } }]
        },
        "spec": { "image": "redis", "version": "7.2", "desired_size": 3 }
    });
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": { "group": "examples.khai.dev", "version": "v1", "kind": "Cache" },
            "resource": { "group": "examples.khai.dev", "version": "v1", "resource": "caches" },
            "requestKind": { "group": "examples.khai.dev", "version": "v1", "kind": "Cache" },
            "requestResource": { "group": "examples.khai.dev", "version": "v1", "resource": "caches" },
            "name": "example", "namespace": "default", "operation": "CREATE",
            "userInfo": { "username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated"] },
            "object": object, "oldObject": null, "dryRun": false,
            "options": { "apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions" }
        }
    });
    serde_json::to_vec(&review).expect("review fixture")
}

fn example_handler() -> Handler {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cache");
    let op = Operator::load(&dir).expect("examples/cache loads");
    op.webhooks
        .into_iter()
        .next()
        .expect("examples/cache has a webhook")
}

/// The example's webhook with its script swapped for one whose functions do nothing.
fn noop_handler(example: &Handler) -> Handler {
    let limits = khai::script::Limits::default();
    let engine = Arc::new(khai::script::webhook::engine(&limits));
    let script = Script::compile(engine, &limits, Path::new("noop.rhai"), NOOP_SCRIPT)
        .expect("no-op script compiles");
    Handler {
        script,
        ..example.clone()
    }
}

/// Body to response bytes, as `routes::Routes::handle` does once it has the body.
async fn round_trip(handler: &Handler, kind: Kind, body: &[u8]) -> Vec<u8> {
    let review = admission::parse(body).unwrap();
    let answer = admission::review(handler, kind, review).await;
    serde_json::to_vec(&answer).unwrap()
}

/// [`round_trip`] with the script called on this thread: `admission::review`'s steps by hand
/// (`parse` keeps `Review` private, so the body is read here the same way).
fn round_trip_inline(handler: &Handler, kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(body).unwrap();
    let mut request = doc["request"].take();
    for key in ["object", "oldObject"] {
        if let Some(meta) = request[key]["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
    }
    let function = match kind {
        Kind::Validate => handler.hook.validate.as_deref(),
        Kind::Mutate => handler.hook.mutate.as_deref(),
    };
    let uid = request["uid"].clone();
    let out = handler
        .script
        .call(function.unwrap(), std::slice::from_ref(&request))
        .unwrap();
    let original = (kind == Kind::Mutate).then(|| &request["object"]);
    let verdict = admission::interpret(kind, original, out);
    let answer = admission::respond(doc["apiVersion"].as_str().unwrap(), uid, verdict);
    serde_json::to_vec(&answer).unwrap()
}

/// A webhook written directly in Rust: parse the review, allow it, serialise the answer.
fn rust_reference(body: &[u8]) -> Vec<u8> {
    let doc: Value = serde_json::from_slice(body).unwrap();
    let answer = json!({
        "apiVersion": doc["apiVersion"], "kind": "AdmissionReview",
        "response": { "uid": doc["request"]["uid"], "allowed": true },
    });
    serde_json::to_vec(&answer).unwrap()
}

fn response(bytes: &[u8]) -> Value {
    serde_json::from_slice::<Value>(bytes).unwrap()["response"].clone()
}

fn bench_admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let example = example_handler();
    let noop = noop_handler(&example);
    let body = review_body();

    // Check each contender answers as expected before timing it.
    let v = response(&rt.block_on(round_trip(&example, Kind::Validate, &body)));
    assert_eq!(v["allowed"], json!(true), "{v}");
    let m = response(&rt.block_on(round_trip(&example, Kind::Mutate, &body)));
    assert_eq!(m["patchType"], json!("JSONPatch"), "{m}");
    let n = response(&rt.block_on(round_trip(&noop, Kind::Mutate, &body)));
    assert!(n.get("patch").is_none(), "{n}");
    for kind in [Kind::Validate, Kind::Mutate] {
        assert_eq!(
            round_trip_inline(&example, kind, &body),
            rt.block_on(round_trip(&example, kind, &body)),
            "the inline variant must answer exactly like the server path"
        );
    }

    for (group, kind) in [("validate", Kind::Validate), ("mutate", Kind::Mutate)] {
        let mut g = c.benchmark_group(group);
        g.bench_function("example_script", |b| {
            b.iter(|| rt.block_on(round_trip(&example, kind, black_box(&body))))
        });
        g.bench_function("example_script_inline", |b| {
            b.iter(|| round_trip_inline(&example, kind, black_box(&body)))
        });
        g.bench_function("noop_script", |b| {
            b.iter(|| rt.block_on(round_trip(&noop, kind, black_box(&body))))
        });
        g.bench_function("rust_reference", |b| {
            b.iter(|| rust_reference(black_box(&body)))
        });
        g.finish();
    }
}

criterion_group!(benches, bench_admission);
criterion_main!(benches);
