//! The kubelet's part, played by the tests: there is no kubelet in the test cluster, so a test
//! that installs khai as a user does (the chart, or `khai generate manifests`) reads the
//! Deployment it made and runs the `khai` binary with the container's args and env (fieldRefs
//! resolved as the kubelet would) and a ServiceAccount token from a TokenRequest for the pod's
//! ServiceAccount, as the kubelet projects one into the pod.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The test cluster's API server URL and CA file, from its kubeconfig.
pub fn cluster_endpoint() -> (String, String) {
    let kc: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(super::kubeconfig()).unwrap()).unwrap();
    let cluster = &kc["clusters"][0]["cluster"];
    (
        cluster["server"].as_str().unwrap().to_string(),
        cluster["certificate-authority"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// A kubeconfig holding a token from a TokenRequest for `namespace/service_account`, as the
/// kubelet projects one into the pod.
pub async fn service_account_kubeconfig(
    client: &kube::Client,
    namespace: &str,
    service_account: &str,
    into: &Path,
) -> PathBuf {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = sas
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{service_account}: {e}"));
    let token = answer.status.expect("a TokenRequest status").token;
    let (server, ca) = cluster_endpoint();
    let kc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "c", "cluster": { "server": server, "certificate-authority": ca } }],
        "users": [{ "name": service_account, "user": { "token": token } }],
        "contexts": [{ "name": "c", "context": { "cluster": "c", "user": service_account, "namespace": namespace } }],
        "current-context": "c",
    });
    let path = into.join("sa-kubeconfig");
    std::fs::write(&path, kc.to_string()).unwrap();
    path
}

/// What the kubelet would run for the Deployment's one container.
pub struct Container {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub service_account: String,
}

/// The container of `deploy` with its env resolved for a pod named `pod` in `namespace`.
pub fn container_of(deploy: &Deployment, pod: &str, namespace: &str) -> Container {
    let spec = deploy
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(spec.containers.len(), 1, "one container");
    let c = &spec.containers[0];
    assert!(
        c.command.is_none(),
        "the chart runs the image's entrypoint (khai)"
    );
    let env = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let value = match (&e.value, &e.value_from) {
                (Some(v), None) => v.clone(),
                (None, Some(from)) => {
                    match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                        Some("metadata.name") => pod.to_string(),
                        Some("metadata.namespace") => namespace.to_string(),
                        other => panic!("env {}: unsupported valueFrom {other:?}", e.name),
                    }
                }
                other => panic!("env {}: unsupported {other:?}", e.name),
            };
            (e.name.clone(), value)
        })
        .collect();
    Container {
        args: c.args.clone().unwrap_or_default(),
        env,
        service_account: spec.service_account_name.clone().unwrap(),
    }
}
