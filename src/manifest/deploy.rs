//! Everything needed to run khai in a cluster: Namespace, CRDs, ServiceAccount and RBAC,
//! a ConfigMap holding the config and its scripts, a Service for metrics and webhooks, the
//! Deployment, and (with `tls = "files"`) the webhook configurations.
//!
//! khai reads the ConfigMap through the API (`--config configmap:NS/NAME`) and reloads every
//! change within a second or two, without a restart and without waiting for the kubelet; a Role
//! lets it get, list and watch that one ConfigMap by name. Leader election is always on, so no
//! two replicas reconcile at once, not even during a rolling update.
//!
//! No I/O: the caller reads the config's files and hands them in. With `tls = "self-signed"`
//! the webhook configurations are left out, since khai applies them itself with the caBundle of
//! the CA it makes at start; with `tls = "files"` their caBundle is for the certificate tooling
//! (cert-manager's CA injector, for instance) to fill in. Ports name their protocol: server-side
//! apply (`kubectl apply --server-side`) needs it on Kubernetes before 1.24.

use super::rbac;
use super::webhooks::{self as manifests, Target};
use crate::config::files::key_of;
use crate::config::model::Model;
use crate::config::webhook::{ServiceRef, TlsMode};
use serde_json::{Value, json};

/// The port of /metrics, /healthz and /readyz.
pub(crate) const METRICS_PORT: u16 = 8080;
/// The port of the webhook server.
pub(crate) const WEBHOOK_PORT: u16 = 9443;

/// What to deploy, besides the config.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// khai's own namespace.
    pub namespace: String,
    /// The container image.
    pub image: String,
    /// Replicas: one reconciles, the others stand by with warm caches.
    pub replicas: u32,
    /// Per controller, in config order: whether its script defines `finalize`.
    pub finalizes: Vec<bool>,
    /// Namespaces watched; overrides `[operator] namespaces` when non-empty.
    pub watch_namespaces: Vec<String>,
    /// Every replica a shard (`--shards`) instead of one leading (`--leader-elect`).
    pub shards: bool,
}

/// The default image: the one built from this version's Dockerfile.
pub(crate) fn default_image() -> String {
    format!("ghcr.io/khai-dev/khai:{}", env!("CARGO_PKG_VERSION"))
}

/// One file of the operator, by its path relative to the config file's directory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct File {
    pub path: String,
    pub content: String,
}

/// The ConfigMap holding the config's files: `khai-<operator>-config`.
pub(crate) fn config_map_name(model: &Model) -> String {
    format!("{}-config", rbac::name(model))
}

/// The Service khai is reached through: `[webhook_server] service`, else `khai-<operator>` in
/// khai's namespace.
pub(crate) fn service(model: &Model, namespace: &str) -> ServiceRef {
    model
        .webhook_server
        .service
        .clone()
        .unwrap_or_else(|| ServiceRef {
            name: rbac::name(model),
            namespace: namespace.into(),
            port: 443,
        })
}

/// Every manifest, in the order to apply them. `crds` are the CRD manifests of the config.
pub(crate) fn manifests(
    model: &Model,
    settings: &Settings,
    files: &[File],
    crds: Vec<Value>,
) -> Vec<Value> {
    let ns = settings.namespace.as_str();
    let labels = json!({
        "app.kubernetes.io/name": model.operator.name,
        "app.kubernetes.io/managed-by": "khai",
    });
    let mut out = vec![json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": ns, "labels": labels },
    })];
    out.extend(crds);
    out.extend(super::policies::manifests(model));
    let plan = rbac::plan(&rbac::Input {
        model,
        finalizes: settings.finalizes.clone(),
        watch_namespaces: settings.watch_namespaces.clone(),
        config_map: Some(config_map_name(model)),
        // The Deployment serves webhooks, the assignment webhook among them, when the config
        // declares some: the Service then has the webhook port.
        shards: settings.shards.then_some(rbac::shards::Sharding {
            assign_webhook: !model.webhooks.is_empty(),
        }),
    });
    out.extend(rbac::manifests(model, ns, &plan));
    out.push(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": config_map_name(model), "namespace": ns, "labels": labels },
        "data": files.iter().map(|f| (key_of(&f.path), json!(f.content))).collect::<serde_json::Map<_, _>>(),
    }));
    let webhooks = !model.webhooks.is_empty();
    let svc = service(model, ns);
    let mut ports = vec![
        json!({ "name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP" }),
    ];
    if webhooks {
        ports.push(json!({ "name": "webhook", "port": svc.port, "targetPort": "webhook", "protocol": "TCP" }));
    }
    out.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": svc.name, "namespace": svc.namespace, "labels": labels },
        "spec": { "selector": { "app.kubernetes.io/name": model.operator.name }, "ports": ports },
    }));
    out.push(deployment(model, settings, &svc, &labels));
    if webhooks && model.webhook_server.tls == TlsMode::Files {
        out.extend(manifests::configurations(
            model,
            &Target::Service(svc),
            None,
        ));
    }
    out
}

fn deployment(model: &Model, settings: &Settings, svc: &ServiceRef, labels: &Value) -> Value {
    let name = rbac::name(model);
    let source = format!(
        "configmap:{}/{}",
        settings.namespace,
        config_map_name(model)
    );
    let mut args = vec![
        "run",
        "--config",
        source.as_str(),
        "--log-format",
        "json",
        // No two replicas reconcile one object at once: one leads, or each is a shard.
        if settings.shards {
            "--shards"
        } else {
            "--leader-elect"
        },
    ];
    // The generated Roles cover exactly these namespaces, so khai must watch only them.
    for ns in &settings.watch_namespaces {
        args.extend(["--namespace", ns.as_str()]);
    }
    let field = |name: &str, path: &str| json!({ "name": name, "valueFrom": { "fieldRef": { "fieldPath": path } } });
    let mut env = vec![
        field("POD_NAME", "metadata.name"),
        field("POD_NAMESPACE", "metadata.namespace"),
    ];
    let mut ports =
        vec![json!({ "name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP" })];
    if !model.webhooks.is_empty() {
        ports.push(json!({ "name": "webhook", "containerPort": WEBHOOK_PORT, "protocol": "TCP" }));
        if model.webhook_server.service.is_none() {
            // The self-signed certificate and the configurations name the Service through this.
            env.push(json!({
                "name": "KHAI_WEBHOOK_URL",
                "value": format!("https://{}.{}.svc:{}", svc.name, svc.namespace, svc.port),
            }));
        }
    }
    let probe = |path: &str| {
        json!({
            "httpGet": { "path": path, "port": "metrics" },
            "periodSeconds": 10,
            "failureThreshold": 3,
        })
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name, "namespace": settings.namespace, "labels": labels },
        "spec": {
            "replicas": settings.replicas,
            "selector": { "matchLabels": { "app.kubernetes.io/name": model.operator.name } },
            "template": {
                "metadata": { "labels": labels },
                "spec": {
                    "serviceAccountName": name,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "khai",
                        "image": settings.image,
                        "args": args,
                        "env": env,
                        "ports": ports,
                        "livenessProbe": probe("/healthz"),
                        "readinessProbe": probe("/readyz"),
                        "resources": {
                            "requests": { "cpu": "50m", "memory": "64Mi" },
                            "limits": { "memory": "256Mi" },
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "drop": ["ALL"] },
                        },
                    }],
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    const SRC: &str = r#"
[operator]
name = "shop"

[[crd]]
group = "shop.khai.dev"
kind = "Order"
versions = ["v1"]

[[controller]]
for = "Order"
script = "scripts/order.rhai"

[[webhook]]
for = "Order"
script = "scripts/order.rhai"
validate = "validate"
"#;

    fn build(replicas: u32) -> Vec<Value> {
        build_with(replicas, false)
    }

    fn build_with(replicas: u32, shards: bool) -> Vec<Value> {
        let model = parse(Path::new("operator.toml"), SRC).unwrap();
        let settings = Settings {
            namespace: "shop-system".into(),
            image: "khai:test".into(),
            replicas,
            finalizes: vec![false],
            watch_namespaces: Vec::new(),
            shards,
        };
        let files = [
            File {
                path: "operator.toml".into(),
                content: SRC.into(),
            },
            File {
                path: "scripts/order.rhai".into(),
                content: "fn reconcile(o, c) {}".into(),
            },
        ];
        manifests(&model, &settings, &files, Vec::new())
    }

    fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
        docs.iter().find(|d| d["kind"] == kind).unwrap()
    }

    /// `generate manifests --shards`: every replica a shard, with the RBAC sharded mode calls.
    #[test]
    fn sharded_manifests_run_shards_and_grant_the_sharders_patches_and_webhook() {
        let rules = |docs: &[Value], kind: &str| find(docs, kind)["rules"].clone();
        let plain = build_with(3, false);
        let docs = build_with(3, true);
        let args = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
        let args: Vec<&str> = args
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            args.contains(&"--shards") && !args.contains(&"--leader-elect"),
            "{args:?}"
        );
        let orders =
            json!({ "apiGroups": ["shop.khai.dev"], "resources": ["orders"], "verbs": ["patch"] });
        let patches = |docs: &[Value]| {
            rules(docs, "ClusterRole")
                .as_array()
                .unwrap()
                .iter()
                .any(|r| {
                    r["resources"] == orders["resources"]
                        && r["verbs"].as_array().unwrap().contains(&json!("patch"))
                })
        };
        assert!(patches(&docs) && !patches(&plain));
        let shard_hook = |docs: &[Value]| {
            rules(docs, "ClusterRole")
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["resourceNames"] == json!(["khai-shop-shard"]))
        };
        assert!(shard_hook(&docs) && !shard_hook(&plain));
        let leases = |docs: &[Value]| {
            docs.iter()
                .find(|d| {
                    d["kind"] == "Role" && d["metadata"]["name"] == "khai-shop-leader-election"
                })
                .unwrap()["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["resources"] == json!(["leases"]))
                .unwrap()["verbs"]
                .clone()
        };
        assert_eq!(leases(&plain), json!(["create", "get", "update"]));
        assert_eq!(
            leases(&docs),
            json!(["create", "get", "list", "update", "watch"])
        );
    }

    #[test]
    fn deployment_is_hardened_and_reads_the_config_from_its_configmap_through_the_api() {
        let docs = build(1);
        let d = find(&docs, "Deployment");
        let pod = &d["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
        assert_eq!(
            c["args"],
            json!([
                "run",
                "--config",
                "configmap:shop-system/khai-shop-config",
                "--log-format",
                "json",
                "--leader-elect"
            ])
        );
        assert!(pod.get("volumes").is_none(), "{pod}");
        assert_eq!(
            c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        assert_eq!(
            c["env"][2],
            json!({ "name": "KHAI_WEBHOOK_URL", "value": "https://khai-shop.shop-system.svc:443" })
        );
        let cm = find(&docs, "ConfigMap");
        assert_eq!(cm["metadata"]["name"], "khai-shop-config");
        assert!(cm["data"]["scripts__order.rhai"].is_string());
        let reader = docs
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "khai-shop-config")
            .unwrap();
        assert_eq!(
            reader["rules"],
            json!([
                { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["khai-shop-config"],
                  "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] },
            ])
        );
        assert_eq!(docs[0]["kind"], "Namespace");
        // Self-signed: khai installs its own webhook configurations.
        assert!(
            !docs
                .iter()
                .any(|d| d["kind"] == "ValidatingWebhookConfiguration")
        );
    }

    #[test]
    fn watch_namespaces_are_passed_to_khai_run() {
        let model = parse(Path::new("operator.toml"), SRC).unwrap();
        let settings = Settings {
            namespace: "shop-system".into(),
            image: "khai:test".into(),
            replicas: 1,
            finalizes: vec![false],
            watch_namespaces: vec!["a".into(), "b".into()],
            shards: false,
        };
        let docs = manifests(&model, &settings, &[], Vec::new());
        let c = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["args"],
            json!([
                "run",
                "--config",
                "configmap:shop-system/khai-shop-config",
                "--log-format",
                "json",
                "--leader-elect",
                "--namespace",
                "a",
                "--namespace",
                "b"
            ])
        );
    }

    #[test]
    fn leader_election_is_on_for_any_number_of_replicas() {
        for replicas in [1, 2] {
            let docs = build(replicas);
            let d = find(&docs, "Deployment");
            assert_eq!(d["spec"]["replicas"], replicas);
            assert_eq!(
                d["spec"]["template"]["spec"]["containers"][0]["args"][5],
                "--leader-elect"
            );
            assert!(docs.iter().any(
                |d| d["kind"] == "Role" && d["metadata"]["name"] == "khai-shop-leader-election"
            ));
        }
    }
}
