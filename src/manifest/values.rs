//! The values for the Helm chart (`charts/khai`) that deploy one operator, as
//! `khai generate values` prints them: with these, `helm install NAME charts/khai -f values.yaml`
//! makes the same objects as `khai generate manifests` (named after the release).
//!
//! No I/O: the caller loads the config, reads its files and renders the YAML.

use super::deploy::File;
use super::rbac::Plan;
use super::rbac::shards::Extra;
use super::webhooks::{self as manifests, Target};
use crate::config::model::Model;
use crate::config::webhook::TlsMode;
use serde_json::{Map, Value, json};

/// What the values are made of.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    pub model: &'a Model,
    /// The config file and every file it names, by path relative to the config file.
    pub files: &'a [File],
    /// The RBAC plan of the config (`khai generate rbac`).
    pub plan: &'a Plan,
    /// What sharded mode adds to it (`khai generate rbac --shards`); the chart adds it only
    /// with `sharding.enabled`, and the webhook's rules only with `webhook.enabled` too.
    pub sharding: &'a Extra,
    /// The CRDs as YAML, when the release installs them (`install_crds = false`).
    pub crds: Option<String>,
    /// The `[[policy]]` admission policies and bindings as YAML, when the release installs them
    /// (`install_crds = false`).
    pub policies: Option<String>,
    /// The webhook configurations as YAML, when the release installs them (`tls = "files"`).
    pub webhook_configurations: Option<String>,
}

/// The chart's values for `input`.
pub(crate) fn values(input: &Input<'_>) -> Value {
    let model = input.model;
    let files: Map<String, Value> = input
        .files
        .iter()
        .map(|f| (f.path.clone(), json!(f.content)))
        .collect();
    let mut webhook = json!({
        "enabled": !model.webhooks.is_empty(),
        // With `[webhook_server] service`, khai takes its URL from the config.
        "setUrl": model.webhook_server.service.is_none(),
        // Self-signed: the chart grants the Secret of the CA every replica shares.
        "selfSigned": model.webhook_server.tls == TlsMode::SelfSigned,
    });
    if let Some(c) = &input.webhook_configurations {
        webhook["configurations"] = json!(c);
    }
    let mut values = json!({
        "operator": {
            "name": model.operator.name,
            "watchNamespaces": input.plan.namespaces,
        },
        "config": { "files": files },
        "rbac": {
            "clusterRules": input.plan.cluster.policy_rules(),
            "namespacedRules": input.plan.namespaced.policy_rules(),
            "secretRules": input
                .plan
                .secrets
                .iter()
                .map(|(ns, r)| (ns.clone(), json!(r.policy_rules())))
                .collect::<serde_json::Map<_, _>>(),
            "sharding": {
                "clusterRules": input.sharding.cluster.policy_rules(),
                "namespacedRules": input.sharding.namespaced.policy_rules(),
                "webhookRules": input.sharding.webhook.policy_rules(),
            },
        },
        "webhook": webhook,
    });
    if let Some(crds) = &input.crds {
        values["crds"] = json!(crds);
    }
    if let Some(policies) = &input.policies {
        values["policies"] = json!(policies);
    }
    values
}

/// The webhook configurations the release must install: those of `tls = "files"` with a
/// `[webhook_server] service` (with a self-signed certificate khai installs its own).
pub(crate) fn webhook_configurations(model: &Model) -> Vec<Value> {
    match (&model.webhook_server.tls, &model.webhook_server.service) {
        (TlsMode::Files, Some(svc)) if !model.webhooks.is_empty() => {
            manifests::configurations(model, &Target::Service(svc.clone()), None)
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::manifest::rbac;
    use std::path::Path;

    const SRC: &str = r#"
[operator]
name = "shop"
namespaces = ["a"]

[[crd]]
group = "shop.khai.dev"
kind = "Order"
versions = ["v1"]

[[controller]]
for = "Order"
script = "scripts/order.rhai"
"#;

    #[test]
    fn values_name_the_operator_and_carry_its_files_and_rules() {
        let model = parse(Path::new("operator.toml"), SRC).unwrap();
        let plan = rbac::plan(&rbac::Input {
            model: &model,
            finalizes: vec![false],
            watch_namespaces: Vec::new(),
            config_map: None,
            shards: None,
        });
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
        let v = values(&Input {
            model: &model,
            files: &files,
            plan: &plan,
            sharding: &rbac::shards::extra(
                &model,
                &plan.namespaces,
                rbac::shards::Sharding {
                    assign_webhook: true,
                },
            ),
            crds: None,
            policies: None,
            webhook_configurations: None,
        });
        assert_eq!(
            v["operator"],
            json!({ "name": "shop", "watchNamespaces": ["a"] })
        );
        assert_eq!(
            v["config"]["files"]["scripts/order.rhai"],
            "fn reconcile(o, c) {}"
        );
        assert_eq!(
            v["rbac"]["namespacedRules"],
            json!(plan.namespaced.policy_rules())
        );
        assert_eq!(
            v["rbac"]["clusterRules"],
            json!(plan.cluster.policy_rules())
        );
        assert_eq!(
            v["rbac"]["sharding"]["namespacedRules"],
            json!([{ "apiGroups": ["shop.khai.dev"], "resources": ["orders"], "verbs": ["patch"] }]),
            "the sharder's label patches, apart for the chart to add when sharding is on"
        );
        assert!(
            v["rbac"]["namespacedRules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["resources"][0] == "orders")
                .all(|r| !r["verbs"].as_array().unwrap().contains(&json!("patch"))),
            "no patch on the parents without sharding"
        );
        assert!(
            v["rbac"]["sharding"]["webhookRules"]
                .as_array()
                .unwrap()
                .contains(&json!({ "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": ["mutatingwebhookconfigurations"], "verbs": ["create", "get", "patch"],
                    "resourceNames": ["khai-shop-shard"] })),
            "{}",
            v["rbac"]["sharding"]
        );
        assert_eq!(
            v["webhook"],
            json!({ "enabled": false, "setUrl": true, "selfSigned": true })
        );
        assert!(v.get("crds").is_none(), "khai installs its CRDs itself");
        assert!(webhook_configurations(&model).is_empty());
    }
}
