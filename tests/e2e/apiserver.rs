//! End to end against the test kube-apiserver itself: it behaves like a real 1.20 server where
//! khai depends on it. Built from Debian's source with a newer Go than 1.20 was released with,
//! it once validated an empty string `""` in a custom resource as `null` and rejected the write
//! with 422 `must be of type string: "null"` (the fix is in `scripts/cluster build`).

use crate::support::{Khai, TestNamespace, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[operator]
name = "blank"

[[crd]]
group = "apiserver.khai.dev"
kind = "Blank"
versions = ["v1"]
spec.note = { type = "string" }
spec.tags = { type = "array", items = { type = "string" } }
spec.labels = { type = "map", values = { type = "string" } }
status.note = { type = "string" }

[[controller]]
for = "Blank"
owns = ["v1/ConfigMap"]
script = "blank.rhai"
"#;

/// Copies `spec.note` (`""` in these tests) into a ConfigMap and the status.
const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    #{
        children: [#{ apiVersion: "v1", kind: "ConfigMap",
                      metadata: #{ name: obj.metadata.name }, data: #{ note: obj.spec.note } }],
        status: #{ note: obj.spec.note },
    }
}
"#;

fn blanks() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiserver.khai.dev", "v1", "Blank"),
        "blanks",
    )
}

/// Loads [`CONFIG`] from a temp dir (kept alive by the returned guard) and installs its CRD.
async fn install(client: &kube::Client) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("operator.toml"), CONFIG).unwrap();
    std::fs::write(dir.path().join("blank.rhai"), SCRIPT).unwrap();
    let config = khai::config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    khai::schema::install(
        client,
        &config.model.crds,
        "khai-test",
        crate::support::DEADLINE,
    )
    .await
    .unwrap();
    dir
}

fn blank(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apiserver.khai.dev/v1", "kind": "Blank", "metadata": { "name": name },
        "spec": { "note": "", "tags": ["", "x"], "labels": { "a": "" } },
    }))
    .unwrap()
}

#[tokio::test]
async fn empty_strings_in_a_custom_resource_are_stored_as_empty_strings() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "apiserver-empty").await;
    let _dir = install(&client).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &blanks());

    // Create: `""` in a string field, an array item and a map value.
    let created = api.create(&PostParams::default(), &blank("a")).await;
    let created = created.unwrap_or_else(|e| panic!("create with \"\" refused: {e}"));
    assert_eq!(
        created.data["spec"],
        json!({ "note": "", "tags": ["", "x"], "labels": { "a": "" } })
    );

    // Status by merge patch, as khai writes it, with a condition whose message is `""`.
    let status = json!({ "status": { "note": "", "conditions": [
        { "type": "Ready", "status": "True", "reason": "Reconciled", "message": "" },
    ] } });
    let patched = api
        .patch_status("a", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status merge patch with \"\" refused: {e}"));
    assert_eq!(patched.data["status"]["note"], "");
    assert_eq!(patched.data["status"]["conditions"][0]["message"], "");

    // Server-side apply, as khai writes children.
    let mut applied = blank("b");
    applied.data["spec"]["note"] = json!("");
    let params = PatchParams::apply("khai-test").force();
    let applied = api
        .patch("b", &params, &Patch::Apply(&applied))
        .await
        .unwrap_or_else(|e| panic!("server-side apply with \"\" refused: {e}"));
    assert_eq!(applied.data["spec"]["note"], "");

    // And it reads back as written.
    let read = api.get("a").await.unwrap();
    assert_eq!(read.data["spec"]["note"], "");
    assert_eq!(read.data["status"]["conditions"][0]["message"], "");
}

#[tokio::test]
async fn khai_writes_empty_strings_and_an_empty_ready_message_as_they_are() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "apiserver-khai").await;
    let dir = install(&client).await;
    let khai = Khai::start(dir.path(), &ns.name, &[]);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &blanks());
    api.create(&PostParams::default(), &blank("c"))
        .await
        .unwrap();

    let ready = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    let done = wait_for(&api, "c", "Ready=True", ready).await;
    let status = &done.data["status"];
    assert_eq!(status["note"], "", "status: {status}");
    let conditions = status["conditions"].as_array().unwrap();
    let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["message"], Value::from(""), "Ready: {ready}");

    let cms: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        ),
    );
    let cm = cms.get("c").await.unwrap();
    assert_eq!(cm.data["data"]["note"], "");
    drop(khai);
}
