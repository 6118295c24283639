//! End to end against a real kube-apiserver: the `examples/hello` operator run by the real
//! `khai` binary reconciles a Hello into a ConfigMap and a status, follows spec changes, and
//! exits cleanly on SIGTERM.

use crate::support::{Khai, TestNamespace, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn hello_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.khai.dev", "v1", "Hello"),
        "hellos",
    )
}

fn configmaps() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps")
}

fn data(o: &DynamicObject, key: &str) -> Option<String> {
    o.data["data"][key].as_str().map(str::to_string)
}

#[tokio::test]
async fn hello_is_reconciled_into_an_owned_configmap_and_status_and_follows_spec_changes() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "hello").await;
    let khai = Khai::start(
        &crate::support::repo_root().join("examples/hello"),
        &ns.name,
        &[],
    );

    // khai installs the CRD itself; wait for it before creating a Hello.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let established = kube::runtime::wait::await_condition(
        crds,
        "hellos.examples.khai.dev",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(crate::support::DEADLINE, established)
        .await
        .expect("khai did not install the Hello CRD in time")
        .unwrap();

    let hellos: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &hello_resource());
    let hello: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.khai.dev/v1",
        "kind": "Hello",
        "metadata": { "name": "world" },
        "spec": { "message": "hi", "replicas": 2 },
    }))
    .unwrap();
    let created = hellos.create(&PostParams::default(), &hello).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let cms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &configmaps());
    let cm = wait_for(
        &cms,
        "world-hello",
        "the child ConfigMap",
        |o: Option<&DynamicObject>| o.is_some_and(|o| data(o, "message").as_deref() == Some("hi")),
    )
    .await;
    assert_eq!(data(&cm, "replicas").as_deref(), Some("2"));
    assert_eq!(data(&cm, "greeting").as_deref(), Some("hi hi"));
    let owners = cm.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "exactly one owner: {owners:?}");
    assert_eq!(owners[0].uid, uid);
    assert_eq!(owners[0].kind, "Hello");
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(
        cm.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "khai"
    );
    let managers: Vec<_> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(
        managers,
        ["hello"],
        "child written by server-side apply with the operator's name as field manager"
    );

    let hello = wait_for(
        &hellos,
        "world",
        "the Hello's status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
    )
    .await;
    assert_eq!(hello.data["status"]["configMap"], "world-hello");
    assert_eq!(hello.data["status"]["observedGeneration"], 1);

    // A spec change flows through to the child and the status.
    let patch = json!({ "spec": { "message": "hello again" } });
    hellos
        .patch("world", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_for(
        &cms,
        "world-hello",
        "the ConfigMap to follow the spec",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| data(o, "message").as_deref() == Some("hello again"))
        },
    )
    .await;
    wait_for(
        &hellos,
        "world",
        "observedGeneration to follow",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["observedGeneration"] == 2),
    )
    .await;

    let (code, log) = khai.terminate().await;
    assert_eq!(
        code,
        Some(0),
        "khai should exit 0 on SIGTERM; log:\n{}",
        log.join("\n")
    );
    assert!(
        log.iter()
            .any(|l| l.contains("reconciled") && l.contains("name=world")),
        "{}",
        log.join("\n")
    );
    assert!(
        log.iter().any(|l| l.contains("signal=\"SIGTERM\"")),
        "{}",
        log.join("\n")
    );
    assert!(
        log.last().is_some_and(|l| l.contains("khai stopped")),
        "{}",
        log.join("\n")
    );
}

/// The API server must be built with reflect2 v1.0.2: with v1.0.1 under Go >= 1.18 it dies with
/// SIGSEGV on the first request that touches a custom resource, while namespaces and CRDs work.
#[tokio::test]
async fn api_server_creates_and_lists_custom_resources_by_label() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crs").await;
    let model = khai::config::parse(
        std::path::Path::new("probe.toml"),
        r#"
[[crd]]
group = "probe.khai.dev"
kind = "Probe"
versions = ["v1"]
spec.n = { type = "integer" }
"#,
    )
    .unwrap();
    khai::schema::install(&client, &model.crds, "khai-test", crate::support::DEADLINE)
        .await
        .unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &model.crds[0].api_resource());
    for (i, tier) in ["gold", "silver", "gold"].iter().enumerate() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "probe.khai.dev/v1",
            "kind": "Probe",
            "metadata": { "name": format!("p{i}"), "labels": { "tier": tier } },
            "spec": { "n": i },
        }))
        .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    }
    let gold = api
        .list(&kube::api::ListParams::default().labels("tier=gold"))
        .await
        .unwrap();
    let mut names: Vec<_> = gold
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["p0", "p2"]);
    assert_eq!(
        gold.items[0].data["spec"]["n"].as_i64().map(|n| n % 2),
        Some(0)
    );
}
