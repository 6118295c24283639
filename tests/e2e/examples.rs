//! End to end against a real kube-apiserver: every example operator in `examples/`, run by the
//! real `khai` binary against its own sample object.
//!
//! No kubelet or controller-manager runs here, so Deployments never get a status of their own;
//! where an example reads one, the test writes it through the status subresource the way the
//! Deployment controller would.

use crate::support::{Khai, TestNamespace, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn example(name: &str) -> std::path::PathBuf {
    crate::support::repo_root().join("examples").join(name)
}

/// The example's sample object, read from its YAML file.
fn sample(example_name: &str, file: &str) -> DynamicObject {
    let text = std::fs::read_to_string(example(example_name).join(file)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

fn api(client: &kube::Client, ns: &str, ar: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, ar)
}

/// One example operator running in its own namespace, with its sample object created.
struct Example {
    client: kube::Client,
    ns: TestNamespace,
    _khai: Khai,
    /// The example's own kind.
    objects: Api<DynamicObject>,
}

impl Example {
    /// Starts khai on `examples/<name>` and creates `<name>.yaml` once the CRD is Established.
    async fn start(name: &str, kind: &str, plural: &str) -> Self {
        let client = crate::support::client().await;
        let ns = TestNamespace::new(&client, &format!("ex-{name}")).await;
        let ar = resource("examples.khai.dev", kind, plural);
        // Examples with webhooks serve them on a free port; nothing registers them here
        // (tests/e2e/webhooks.rs does).
        let khai = Khai::start(&example(name), &ns.name, &["--webhook-bind", "127.0.0.1:0"]);
        crate::support::wait_for_crd(&client, &format!("{plural}.examples.khai.dev")).await;
        let objects = api(&client, &ns.name, &ar);
        objects
            .create(
                &PostParams::default(),
                &sample(name, &format!("{name}.yaml")),
            )
            .await
            .unwrap();
        Self {
            client,
            ns,
            _khai: khai,
            objects,
        }
    }

    fn api(&self, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        api(&self.client, &self.ns.name, &resource(group, kind, plural))
    }

    fn deployments(&self) -> Api<DynamicObject> {
        self.api("apps", "Deployment", "deployments")
    }
}

impl Example {
    /// Writes a Deployment's status as the Deployment controller would.
    async fn set_deployment_status(&self, name: &str, status: serde_json::Value) {
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.client.clone(), &self.ns.name);
        deployments
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .unwrap();
    }

    /// The column headers `kubectl get` shows for a kind, read through the Table API it uses.
    async fn printer_columns(&self, plural: &str) -> Vec<String> {
        let (client, ns) = (&self.client, &self.ns.name);
        let req = http::Request::get(format!(
            "/apis/examples.khai.dev/v1/namespaces/{ns}/{plural}"
        ))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
        let table: serde_json::Value =
            serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
        table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }
}

fn deployment_replicas(o: &DynamicObject) -> Option<i64> {
    o.data["spec"]["replicas"].as_i64()
}

#[tokio::test]
async fn cache_example_runs_a_deployment_and_service_and_reports_health() {
    let ex = Example::start("cache", "Cache", "caches").await;
    let caches = ex.objects.clone();
    let deployments = ex.deployments();
    let d = crate::support::wait_exists(&deployments, "sessions", "the cache Deployment").await;
    assert_eq!(deployment_replicas(&d), Some(2));
    let container = &d.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "valkey/valkey:8.0");
    assert_eq!(container["resources"]["limits"]["memory"], "128Mi");
    let services = ex.api("", "Service", "services");
    let svc = crate::support::wait_exists(&services, "sessions", "the cache Service").await;
    assert_eq!(svc.data["spec"]["ports"][0]["port"], 6379);
    let c = wait_for(
        &caches,
        "sessions",
        "phase Progressing",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Progressing"),
    )
    .await;
    assert_eq!(c.data["status"]["current_size"], 0);

    ex.set_deployment_status("sessions", json!({ "replicas": 2, "readyReplicas": 2 }))
        .await;
    let c = wait_for(
        &caches,
        "sessions",
        "phase Healthy",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Healthy"),
    )
    .await;
    assert_eq!(c.data["status"]["current_size"], 2);

    caches
        .patch(
            "sessions",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "desired_size": 4 } })),
        )
        .await
        .unwrap();
    wait_for(
        &deployments,
        "sessions",
        "the Deployment to scale to 4",
        |o: Option<&DynamicObject>| o.is_some_and(|o| deployment_replicas(o) == Some(4)),
    )
    .await;
    wait_for(
        &caches,
        "sessions",
        "phase back to Progressing",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Progressing"),
    )
    .await;

    let cols = ex.printer_columns("caches").await;
    assert_eq!(
        cols,
        ["Name", "Image", "Desired", "Current", "Phase", "Age"]
    );

    // The schema's bounds and enum are enforced by the API server.
    for (bad, field) in [
        (json!({ "desired_size": 50 }), "spec.desired_size"),
        (json!({ "image": "memcached" }), "spec.image"),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "examples.khai.dev/v1", "kind": "Cache", "metadata": { "name": "bad" }, "spec": bad,
        }))
        .unwrap();
        match caches.create(&PostParams::default(), &obj).await {
            Err(kube::Error::Api(e)) => {
                assert!(e.code == 422 && e.message.contains(field), "{e:?}")
            }
            other => panic!("invalid Cache accepted: {other:?}"),
        }
    }
}

#[tokio::test]
async fn nginx_example_mirrors_available_replicas_and_scales() {
    let ex = Example::start("nginx", "NginxServer", "nginxservers").await;
    let (client, ns) = (&ex.client, &ex.ns);
    let deployments = ex.deployments();
    let d = crate::support::wait_exists(&deployments, "web", "the nginx Deployment").await;
    assert_eq!(deployment_replicas(&d), Some(2));
    ex.set_deployment_status(
        "web",
        json!({ "replicas": 2, "readyReplicas": 2, "availableReplicas": 2 }),
    )
    .await;
    let servers = ex.objects.clone();
    wait_for(
        &servers,
        "web",
        "availableReplicas 2",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["availableReplicas"] == 2),
    )
    .await;
    // The scale subresource, as `kubectl scale --replicas=5` uses it.
    let req = http::Request::patch(format!(
        "/apis/examples.khai.dev/v1/namespaces/{}/nginxservers/web/scale",
        ns.name
    ))
    .header("Content-Type", "application/merge-patch+json")
    .body(serde_json::to_vec(&json!({ "spec": { "replicas": 5 } })).unwrap())
    .unwrap();
    client.request_text(req).await.unwrap();
    wait_for(
        &deployments,
        "web",
        "the Deployment to follow kubectl scale",
        |o: Option<&DynamicObject>| o.is_some_and(|o| deployment_replicas(o) == Some(5)),
    )
    .await;
    assert_eq!(
        ex.printer_columns("nginxservers").await,
        ["Name", "Replicas", "Available"]
    );
}

#[tokio::test]
async fn memcached_example_lists_its_pods_in_status() {
    let ex = Example::start("memcached", "Memcached", "memcacheds").await;
    let deployments = ex.deployments();
    let d =
        crate::support::wait_exists(&deployments, "memcached-sample", "the memcached Deployment")
            .await;
    assert_eq!(deployment_replicas(&d), Some(3));
    // Pods never run here, but they exist as objects; create two as the ReplicaSet would.
    let pods = ex.api("", "Pod", "pods");
    for name in ["memcached-sample-b", "memcached-sample-a"] {
        let pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": { "app": "memcached", "memcached_cr": "memcached-sample" } },
            "spec": { "containers": [{ "name": "memcached", "image": "memcached:1.6-alpine" }] },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let mcs = ex.objects.clone();
    wait_for(
        &mcs,
        "memcached-sample",
        "status.nodes to list both Pods",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.data["status"]["nodes"] == json!(["memcached-sample-a", "memcached-sample-b"])
            })
        },
    )
    .await;
}

#[tokio::test]
async fn greeting_example_greets() {
    let ex = Example::start("greeting", "Greeting", "greetings").await;
    let cms = ex.api("", "ConfigMap", "configmaps");
    wait_for(
        &cms,
        "world",
        "the greeting ConfigMap",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["data"]["greeting"] == "Hello, World!")
        },
    )
    .await;
}
