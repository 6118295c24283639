//! `[[policy]]`: a ValidatingAdmissionPolicy and its binding, applied by `khai run` beside its
//! CRDs under only the generated RBAC. The API server itself refuses what breaks a rule, with no
//! webhook; a restart over the installed policy writes nothing. On a server older than v1.30, `khai check
//! --kubernetes-version` and `khai run` name the `[[policy]]` and install nothing.

use crate::support::{JSON_LOG, Khai, TestNamespace, audit, k8s_version};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::time::{Duration, Instant};

const MESSAGE: &str = "at most 5 replicas";

/// A config with one policy on Deployments, bound to namespace `ns` only (so Deployments of
/// other tests on the shared server are not held to it).
fn operator(ns: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"[operator]
name = "vap"

[[policy]]
name = "replicas"
for = ["apps/v1/Deployment"]
rules = [{{ rule = "object.spec.replicas <= 5", message = "{MESSAGE}" }}]
namespace_selector = {{ matchLabels = {{ "kubernetes.io/metadata.name" = "{ns}" }} }}
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    dir
}

fn deployment(name: &str, replicas: u32) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "c", "image": "example.invalid/c" }] },
            },
        },
    }))
    .unwrap()
}

fn admission_api(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Waits until khai (logging JSON) has installed, or found current, the policy and then its
/// binding: the lines naming each, whichever it did.
async fn installed(khai: &Khai, skip: usize) {
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let fields = json!({ "kind": kind, "name": "khai-vap-replicas" });
        khai.wait_for_json_log(skip, &format!("the {kind} installed"), fields)
            .await;
    }
}

#[tokio::test]
async fn a_policy_refuses_what_breaks_its_rule_without_a_webhook_or_khai_names_the_server_too_old()
{
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "vap").await;
    let dir = operator(&ns.name);
    if k8s_version() == "v1.20.2" {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["check", "--kubernetes-version", "v1.20.2"])
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let want = "operator.toml:4:1: policy[0]: ValidatingAdmissionPolicies \
                    (admissionregistration.k8s.io/v1) need Kubernetes v1.30 or newer; on v1.20 it \
                    has no such API";
        assert!(err.contains(want), "{want:?} not in:\n{err}");
        let (code, log) = Khai::start(dir.path(), &ns.name, &[]).wait().await;
        let log = log.join("\n");
        assert_eq!(code, Some(1), "{log}");
        for want in [
            "the API server is Kubernetes v1.20.2, older than this config needs",
            want,
        ] {
            assert!(log.contains(want), "{want:?} not in:\n{log}");
        }
        return;
    }
    let policies = admission_api(&client, "ValidatingAdmissionPolicy");
    let bindings = admission_api(&client, "ValidatingAdmissionPolicyBinding");
    // The first start runs as a ServiceAccount holding only what `khai generate rbac` grants.
    let rbac = crate::rbac::generate_rbac(dir.path(), &ns.name);
    crate::rbac::apply(&client, &ns.name, &rbac).await;
    let kubeconfig = crate::rbac::service_account_kubeconfig(&client, &ns.name, "khai-vap").await;
    let first = audit::mark();
    let khai = Khai::start_with_kubeconfig(dir.path(), &ns.name, JSON_LOG, &kubeconfig);
    installed(&khai, 0).await;
    let wrote = |e: &serde_json::Value| {
        e["objectRef"]["apiGroup"] == "admissionregistration.k8s.io"
            && e["objectRef"]["name"] == "khai-vap-replicas"
    };
    let writes = audit::writes(first, wrote);
    assert_eq!(
        writes.get("patch validatingadmissionpolicies"),
        Some(&1),
        "{writes:?}"
    );
    assert_eq!(
        writes.get("patch validatingadmissionpolicybindings"),
        Some(&1),
        "{writes:?}"
    );
    let binding = bindings.get("khai-vap-replicas").await.unwrap();
    assert_eq!(binding.data["spec"]["policyName"], "khai-vap-replicas");

    // The API server picks a new policy up within moments; probe with dry runs until it does.
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match deployments.create(&dry, &deployment("probe", 7)).await {
            Err(kube::Error::Api(s)) if s.message.contains(MESSAGE) => break,
            other => assert!(
                Instant::now() < deadline,
                "the policy never refused a Deployment of 7 replicas: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pp = PostParams::default();
    match deployments.create(&pp, &deployment("big", 7)).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains(MESSAGE) && s.message.contains("khai-vap-replicas"),
            "{s:?}"
        ),
        other => panic!("a Deployment of 7 replicas was not refused: {other:?}"),
    }
    deployments
        .create(&pp, &deployment("small", 3))
        .await
        .expect("a Deployment of 3 replicas passes the policy");
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let refused: Vec<&String> = log.iter().filter(|l| crate::rbac::denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");

    // Started again over the installed policy, khai writes neither object.
    let mark = audit::mark();
    let again = Khai::start(dir.path(), &ns.name, JSON_LOG);
    installed(&again, 0).await;
    let (code, log) = again.terminate().await;
    assert_eq!(code, Some(0));
    let up_to_date = log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["message"] == "admission policy is up to date")
        .count();
    assert_eq!(up_to_date, 2, "{}", log.join("\n"));
    let writes = audit::writes(mark, wrote);
    assert!(writes.is_empty(), "a restart wrote {writes:?}");

    let dp = DeleteParams::default();
    policies.delete("khai-vap-replicas", &dp).await.unwrap();
    bindings.delete("khai-vap-replicas", &dp).await.unwrap();
}
