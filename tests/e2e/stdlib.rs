//! End to end against a real kube-apiserver: a reconcile that does its work with the scripts'
//! standard library: a child annotated with `crypto::sha256` of the parent's spec (as
//! `json::stringify` writes it), a memory size summed by `quantity::add`, and a status
//! timestamp from `time::now()` that moves only when the spec does.

use crate::support::{Khai, TestNamespace, configmaps, custom_api, wait_for, wait_for_crd};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use sha2::Digest;

const GROUP: &str = "stdlib.e2e.khai.dev";

const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let hash = crypto::sha256(json::stringify(obj.spec));
    // The time of the last spec change: kept while the spec stays, so status is written once.
    let changed = if obj.status?.specHash == hash { obj.status.changedAt } else { time::now() };
    #{
        children: [#{ apiVersion: "v1", kind: "ConfigMap",
                      metadata: #{ name: obj.metadata.name,
                                   annotations: #{ "stdlib.khai.dev/spec-hash": hash } },
                      data: #{ memory: quantity::add(obj.spec.memory, "512Mi"),
                               day: time::format(obj.metadata.creationTimestamp, "%Y-%m-%d") } }],
        status: #{ specHash: hash, changedAt: changed },
    }
}
"#;

fn operator() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"[operator]
name = "stdlib"

[[crd]]
group = "{GROUP}"
kind = "Widget"
versions = ["v1"]
spec.message = {{ type = "string", default = "ok" }}
spec.memory = {{ type = "string", default = "512Mi" }}
status.specHash = {{ type = "string" }}
status.changedAt = {{ type = "string" }}

[[controller]]
for = "Widget"
owns = ["v1/ConfigMap"]
script = "widget.rhai"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), SCRIPT).unwrap();
    dir
}

fn sha256(text: &str) -> String {
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// Whether a ConfigMap carries `hash` as its spec hash.
fn annotated(hash: &str) -> impl Fn(Option<&DynamicObject>) -> bool + Send + 'static {
    let hash = hash.to_string();
    move |o| o.and_then(annotation).as_deref() == Some(hash.as_str())
}

/// Whether a Widget's status has `hash` as its spec hash.
fn stamped(hash: &str) -> impl Fn(Option<&DynamicObject>) -> bool + Send + 'static {
    let hash = hash.to_string();
    move |o| o.is_some_and(|o| o.data["status"]["specHash"] == hash.as_str())
}

fn annotation(o: &DynamicObject) -> Option<String> {
    o.metadata
        .annotations
        .as_ref()?
        .get("stdlib.khai.dev/spec-hash")
        .cloned()
}

#[tokio::test]
async fn a_reconcile_hashes_the_spec_into_a_childs_annotation_and_stamps_its_status_with_the_time()
{
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "stdlib").await;
    let op = operator();
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let widgets = custom_api(&client, &ns.name, GROUP, "Widget", "widgets");
    wait_for_crd(&client, &format!("widgets.{GROUP}")).await;
    let before = jiff::Timestamp::now();
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "message": "hi", "memory": "1.5Gi" },
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &obj).await.unwrap();

    // Map keys are sorted in scripts, so the spec's JSON is this text.
    let hash = sha256(r#"{"memory":"1.5Gi","message":"hi"}"#);
    let cms = configmaps(&client, &ns.name);
    let cm = wait_for(
        &cms,
        "w",
        "the child with the spec's hash",
        annotated(&hash),
    )
    .await;
    assert_eq!(cm.data["data"]["memory"], "2Gi");
    let day = cm.data["data"]["day"].as_str().unwrap().to_string();
    assert_eq!(day.len(), 10, "{day}");

    let w = wait_for(
        &widgets,
        "w",
        "the status with the spec's hash",
        stamped(&hash),
    )
    .await;
    let changed: jiff::Timestamp = w.data["status"]["changedAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // `time::now()` is to the second; `before` is not.
    assert!(
        changed.as_second() >= before.as_second() && changed <= jiff::Timestamp::now(),
        "changedAt {changed} is not the time of the reconcile (after {before})"
    );

    // A new spec, a new hash on the child and in the status.
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "message": "bye" } })),
        )
        .await
        .unwrap();
    let hash = sha256(r#"{"memory":"1.5Gi","message":"bye"}"#);
    wait_for(&cms, "w", "the new spec's hash", annotated(&hash)).await;
    wait_for(
        &widgets,
        "w",
        "the new spec's hash in status",
        stamped(&hash),
    )
    .await;
}
