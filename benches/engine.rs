//! Micro-benchmarks of khai's per-reconcile work, each next to a hand-written Rust reference in
//! the same group so criterion's report reads as a ratio:
//!
//! - `reconcile`: examples/bench-cache's `reconcile(obj, ctx)` through [`khai::reconcile::plan`]
//!   (the daemon's path: the object straight into Rhai, the call inline, plan validation), the same without
//!   the thread hop, and the same result built by a Rust closure.
//! - `convert`: a Cache as `serde_json::Value` into a Rhai `Dynamic` and back, against cloning
//!   the `Value`; and the cached object straight into Rhai (`object_dynamic`) against its JSON
//!   view first (the copy it avoids).
//! - `status`: the change-only checks of `khai::apply` (`status_differs` for status,
//!   `is_subset` for children) on an unchanged object, against `Value` equality; and a child
//!   compared with its cached copy in place (`object_difference`) against serialising the
//!   cached copy to JSON first (the copy it avoids).
//! - `decode`: reading a watched object (a ConfigMap as the API server sends it) the way khai's
//!   informers do (`khai::watch::decode_object`), against kube's derived decoding of a
//!   `DynamicObject` (the decoding it replaces) and k8s-openapi's typed `ConfigMap` (what a
//!   hand-written kube-rs controller decodes).
//! - `write`: what the answer to one of khai's writes costs: decoded into a `DynamicObject` (as
//!   kube's `Api::patch` does) against read as text and dropped (`client::write`).
//! - `echo`: recognising the watch event of a child khai just applied (`khai::apply::is_echo`),
//!   against the script call of the reconcile that event would otherwise cost.
//!
//! `cargo bench --bench engine` (add `-- --quick` for a fast pass).

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
use khai::reconcile::{self, Plan};
use khai::script::{ScriptCtx, convert, object_view};
use kube::api::DynamicObject;
use serde_json::{Map, Value, json};
use std::hint::black_box;
use std::path::Path;

/// A Cache as the API server returns it, managedFields included (object_view drops them).
fn cache_object() -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "bench.khai.dev/v1",
        "kind": "Cache",
        "metadata": {
            "name": "example", "namespace": "default", "uid": "6d7c1b6e-0f0e-4c52-9d2f-1a1c7c4a2b10",
            "generation": 3, "resourceVersion": "41521", "creationTimestamp": "2026-11-23T10:00:00Z",
            "labels": { "app": "bench" },
            "managedFields": [{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "bench.khai.dev/v1",
                "time": "2026-11-23T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": { "f:spec": { "f:size": {}, "f:image": {} } }
            }]
        },
        "spec": { "size": 3, "image": "redis:7" },
        "status": { "phase": "Ready", "configMap": "example-config", "observedGeneration": 3 }
    }))
    .expect("cache fixture")
}

fn operator() -> Operator {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bench-cache");
    Operator::load(&dir).expect("examples/bench-cache loads")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// What examples/bench-cache's script computes, written in Rust: the reference for `reconcile`.
fn reconcile_by_hand(obj: &DynamicObject) -> Plan {
    let name = format!(
        "{}-config",
        obj.metadata.name.as_deref().unwrap_or_default()
    );
    let spec = &obj.data["spec"];
    let size = match &spec["size"] {
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    };
    let child = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name },
        "data": { "size": size, "image": spec["image"] },
    });
    let mut status = Map::new();
    status.insert("phase".into(), json!("Ready"));
    status.insert("configMap".into(), json!(name));
    status.insert("observedGeneration".into(), json!(obj.metadata.generation));
    Plan {
        children: vec![child],
        status: Some(status),
        ..Plan::default()
    }
}

fn bench_reconcile(c: &mut Criterion) {
    let op = operator();
    let script = op.scripts[0].clone();
    let function = op.config.model.controllers[0].reconcile.clone();
    let obj = cache_object();
    let ctx = || ScriptCtx::detached("bench-cache", "Cache", Some("default"));
    let rt = runtime();

    // The three must agree, or the ratio compares different work.
    let shared = std::sync::Arc::new(obj.clone());
    let by_script = rt
        .block_on(reconcile::plan(&script, &function, shared.clone(), ctx()))
        .unwrap();
    assert_eq!(by_script, reconcile_by_hand(&obj));

    let mut g = c.benchmark_group("reconcile");
    g.bench_function("khai_plan_async", |b| {
        b.iter(|| {
            rt.block_on(reconcile::plan(
                &script,
                &function,
                black_box(&shared).clone(),
                ctx(),
            ))
            .unwrap()
        })
    });
    g.bench_function("khai_script_sync", |b| {
        b.iter(|| {
            let view = object_view(black_box(&obj)).unwrap();
            let out = script.call_with_ctx(&function, &view, ctx()).unwrap();
            reconcile::parse_plan(out).unwrap()
        })
    });
    g.bench_function("rust_reference", |b| {
        b.iter(|| reconcile_by_hand(black_box(&obj)))
    });
    g.finish();
}

fn bench_convert(c: &mut Criterion) {
    let obj = cache_object();
    let view = object_view(&obj).unwrap();
    let dynamic = convert::to_dynamic(&view);
    assert_eq!(
        convert::to_json(&dynamic).unwrap(),
        view,
        "the round trip must be lossless"
    );

    // khai's conversion (`script::convert`) beside Rhai's serde support: the same values,
    // converted both ways, in one run.
    let mut g = c.benchmark_group("convert");
    g.bench_function("object_view", |b| {
        b.iter(|| object_view(black_box(&obj)).unwrap())
    });
    g.bench_function("object_dynamic", |b| {
        b.iter(|| khai::script::object_dynamic(black_box(&obj)).unwrap())
    });
    g.bench_function("object_view_then_to_dynamic", |b| {
        b.iter(|| convert::to_dynamic(&object_view(black_box(&obj)).unwrap()))
    });
    g.bench_function("to_dynamic", |b| {
        b.iter(|| convert::to_dynamic(black_box(&view)))
    });
    g.bench_function("to_dynamic_rhai_serde", |b| {
        b.iter(|| rhai::serde::to_dynamic(black_box(&view)).unwrap())
    });
    g.bench_function("to_json", |b| {
        b.iter(|| convert::to_json(black_box(&dynamic)).unwrap())
    });
    g.bench_function("from_dynamic_rhai_serde", |b| {
        b.iter(|| rhai::serde::from_dynamic::<Value>(black_box(&dynamic)).unwrap())
    });
    g.bench_function("round_trip", |b| {
        b.iter(|| convert::to_json(&convert::to_dynamic(black_box(&view))).unwrap())
    });
    g.bench_function("round_trip_rhai_serde", |b| {
        b.iter(|| {
            let d = rhai::serde::to_dynamic(black_box(&view)).unwrap();
            rhai::serde::from_dynamic::<Value>(&d).unwrap()
        })
    });
    g.bench_function("value_clone_reference", |b| {
        b.iter(|| black_box(&view).clone())
    });
    g.finish();
}

fn bench_status(c: &mut Criterion) {
    let obj = cache_object();
    let view = object_view(&obj).unwrap();
    let plan = reconcile_by_hand(&obj);
    let current = view["status"].clone();
    let desired = plan.status.clone().unwrap();
    let desired_value = Value::Object(desired.clone());
    // What the informer cache holds for the child once applied: the server adds metadata.
    let mut cached_child = plan.children[0].clone();
    cached_child["metadata"]["namespace"] = json!("default");
    cached_child["metadata"]["resourceVersion"] = json!("41522");
    cached_child["metadata"]["uid"] = json!("0b0c6c1e-3e57-4a36-9b37-51b3d4f0a7aa");
    assert!(!khai::apply::status_differs(&current, &desired));
    assert!(khai::apply::is_subset(&plan.children[0], &cached_child));
    // As the informer caches it: without managedFields.
    let cached_object = khai::watch::decode_object(CONFIG_MAP_RESPONSE.as_bytes()).unwrap();
    let applied = json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "c-00001-config", "namespace": "bench",
            "labels": { "app.kubernetes.io/managed-by": "khai",
                        "khai.dev/owner": "4f315ac2-d30c-489a-a2c3-68bdee8fb08f" },
            "annotations": { "khai.dev/applied-hash": "80f47ab0b0581ce0" },
            "ownerReferences": [{ "apiVersion": "bench.khai.dev/v1", "kind": "Cache",
                "name": "c-00001", "uid": "4f315ac2-d30c-489a-a2c3-68bdee8fb08f",
                "controller": true, "blockOwnerDeletion": true }] },
        "data": { "image": "redis:7", "size": "1" } });
    assert_eq!(
        khai::apply::object_difference(&applied, &cached_object),
        None
    );

    let mut g = c.benchmark_group("status");
    g.bench_function("status_differs_unchanged", |b| {
        b.iter(|| khai::apply::status_differs(black_box(&current), black_box(&desired)))
    });
    g.bench_function("value_eq_reference", |b| {
        b.iter(|| black_box(&current) == black_box(&desired_value))
    });
    g.bench_function("child_is_subset_unchanged", |b| {
        b.iter(|| khai::apply::is_subset(black_box(&plan.children[0]), black_box(&cached_child)))
    });
    g.bench_function("child_vs_cached_object_in_place", |b| {
        b.iter(|| khai::apply::object_difference(black_box(&applied), black_box(&cached_object)))
    });
    g.bench_function("child_vs_cached_object_as_json", |b| {
        b.iter(|| {
            let have = serde_json::to_value(black_box(&cached_object)).unwrap();
            khai::apply::is_subset(black_box(&applied), &have)
        })
    });
    g.finish();
}

/// The answer to khai's server-side apply of a Cache's ConfigMap, as kube-apiserver v1.20 sends
/// it (taken from the bench cluster; uids shortened to the bench's).
const CONFIG_MAP_RESPONSE: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c-00001-config","namespace":"bench","uid":"9fb6cbba-912b-476b-a5bd-884007f15fd5","resourceVersion":"41522","creationTimestamp":"2026-11-26T00:28:06Z","labels":{"app.kubernetes.io/managed-by":"khai","khai.dev/owner":"4f315ac2-d30c-489a-a2c3-68bdee8fb08f"},"annotations":{"khai.dev/applied-hash":"80f47ab0b0581ce0"},"ownerReferences":[{"apiVersion":"bench.khai.dev/v1","kind":"Cache","name":"c-00001","uid":"4f315ac2-d30c-489a-a2c3-68bdee8fb08f","controller":true,"blockOwnerDeletion":true}],"managedFields":[{"manager":"khai-bench-cache","operation":"Apply","apiVersion":"v1","time":"2026-11-26T00:28:06Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:image":{},"f:size":{}},"f:metadata":{"f:annotations":{"f:khai.dev/applied-hash":{}},"f:labels":{"f:app.kubernetes.io/managed-by":{},"f:khai.dev/owner":{}},"f:ownerReferences":{"k:{\"uid\":\"4f315ac2-d30c-489a-a2c3-68bdee8fb08f\"}":{}}}}}]},"data":{"image":"redis:7","size":"1"}}"#;

fn bench_decode(c: &mut Criterion) {
    let body = CONFIG_MAP_RESPONSE.as_bytes();
    let mut want: DynamicObject = serde_json::from_slice(body).unwrap();
    want.metadata.managed_fields = None;
    assert_eq!(khai::watch::decode_object(body).unwrap(), want);
    let mut g = c.benchmark_group("decode");
    g.bench_function("khai_informer", |b| {
        b.iter(|| khai::watch::decode_object(black_box(body)).unwrap())
    });
    g.bench_function("dynamic_object_serde", |b| {
        b.iter(|| serde_json::from_slice::<DynamicObject>(black_box(body)).unwrap())
    });
    g.bench_function("typed_config_map_reference", |b| {
        b.iter(|| {
            serde_json::from_slice::<k8s_openapi::api::core::v1::ConfigMap>(black_box(body))
                .unwrap()
        })
    });
    g.finish();
}

fn bench_write(c: &mut Criterion) {
    let body = CONFIG_MAP_RESPONSE.as_bytes().to_vec();
    let mut g = c.benchmark_group("write");
    g.bench_function("answer_decoded", |b| {
        b.iter(|| {
            let text = String::from_utf8(black_box(&body).clone()).unwrap();
            serde_json::from_str::<DynamicObject>(&text).unwrap()
        })
    });
    g.bench_function("answer_read_as_text", |b| {
        b.iter(|| String::from_utf8(black_box(&body).clone()).unwrap())
    });
    g.finish();
}

fn bench_echo(c: &mut Criterion) {
    let obj = cache_object();
    let op = operator();
    let script = op.scripts[0].clone();
    let function = op.config.model.controllers[0].reconcile.clone();
    let ctx = || ScriptCtx::detached("bench-cache", "Cache", Some("default"));
    // The child as khai sends it (marked as the Cache's), and as its watch event brings it back.
    let mut sent = reconcile_by_hand(&obj).children[0].clone();
    sent["metadata"]["namespace"] = json!("default");
    sent["metadata"]["labels"] = json!({ "khai.dev/owner": obj.metadata.uid });
    sent["metadata"]["ownerReferences"] = json!([{ "apiVersion": "bench.khai.dev/v1",
        "kind": "Cache", "name": "example", "uid": obj.metadata.uid, "controller": true,
        "blockOwnerDeletion": true }]);
    let mut seen = sent.clone();
    seen["metadata"]["resourceVersion"] = json!("41522");
    seen["metadata"]["uid"] = json!("0b0c6c1e-3e57-4a36-9b37-51b3d4f0a7aa");
    let seen: DynamicObject = serde_json::from_value(seen).unwrap();
    let configmaps = khai::watch::Kind {
        resource: kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
        namespaced: true,
    };
    let parent = khai::object::ObjectKey::uid(obj.metadata.uid.as_deref().unwrap());
    let sent = std::sync::Arc::new(sent);
    let objects = khai::object::Objects::default();
    let child = khai::object::ChildId::new(&configmaps, Some("default"), "example-config");
    let expect = || objects.update(&parent, |s| s.sent().expect(child.clone(), sent.clone()));
    expect();
    assert!(khai::apply::is_echo(&objects, &configmaps, &seen, false));

    let mut g = c.benchmark_group("echo");
    g.bench_function("expect_and_skip", |b| {
        b.iter(|| {
            expect();
            khai::apply::is_echo(&objects, &configmaps, black_box(&seen), false)
        })
    });
    g.bench_function("reconcile_script_it_saves", |b| {
        b.iter(|| {
            let view = object_view(black_box(&obj)).unwrap();
            let out = script.call_with_ctx(&function, &view, ctx()).unwrap();
            reconcile::parse_plan(out).unwrap()
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_reconcile,
    bench_convert,
    bench_status,
    bench_echo,
    bench_decode,
    bench_write
);
criterion_main!(benches);
