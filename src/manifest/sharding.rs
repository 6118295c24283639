//! The MutatingWebhookConfiguration of the shard assignment webhook (`khai run --shards`): the
//! API server sends every parent kind and every sharded `watches` kind there at CREATE and
//! UPDATE while the object has no shard label (an `objectSelector` on the label missing), and
//! goes on without the label should khai not answer (`failurePolicy: Ignore`): the sharder
//! labels it then. Objects being moved (the drain label) are the sharder's alone.

use super::webhooks::{Target, resource};
use crate::config::model::Model;
use serde_json::{Value, json};

/// The path the assignment webhook is served at, by every shard.
pub(crate) const ASSIGN_PATH: &str = "/shard/assign";

/// `khai-<operator>-shard`.
pub(crate) fn configuration_name(model: &Model) -> String {
    format!("khai-{}-shard", model.operator.name)
}

/// The configuration for shard label `label` (and drain label `drain`: an object being moved
/// is the sharder's to assign), reached at `target`.
pub(crate) fn configuration(
    model: &Model,
    label: &str,
    drain: &str,
    target: &Target,
    ca_bundle: Option<&str>,
) -> Value {
    let mut rules: Vec<Value> = Vec::new();
    for c in &model.controllers {
        let kinds = std::iter::once(&c.for_kind)
            .chain(c.watches.iter().filter(|w| w.sharded()).map(|w| &w.kind));
        for k in kinds {
            let (group, version, plural) = resource(model, k);
            let rule = json!({
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [plural],
                "scope": "*",
            });
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": configuration_name(model),
            "labels": { "app.kubernetes.io/managed-by": "khai" },
        },
        "webhooks": [{
            "name": format!("assign.{}.shard.khai.dev", model.operator.name),
            "admissionReviewVersions": ["v1"],
            "clientConfig": target.client_config(ASSIGN_PATH, ca_bundle),
            "rules": rules,
            // Never refuses: unreachable, an object is labelled by the sharder, about 200 ms later.
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "matchPolicy": "Equivalent",
            "reinvocationPolicy": "Never",
            "objectSelector": { "matchExpressions": [
                { "key": label, "operator": "DoesNotExist" },
                { "key": drain, "operator": "DoesNotExist" },
            ] },
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_and_sharded_watched_kinds_go_to_the_webhook_while_unlabelled() {
        let src = r#"
[operator]
name = "cache"

[[crd]]
group = "examples.khai.dev"
kind = "Cache"
versions = [{ name = "v1" }]

[[controller]]
for = "Cache"
script = "c.rhai"
watches = [
  { kind = "v1/Secret", label = "cache" },
  { kind = "v1/ConfigMap", label = "cache", shared = true },
  { kind = "v1/Service", map = "services" },
]
"#;
        let model = crate::config::parse(std::path::Path::new("operator.toml"), src).unwrap();
        let c = configuration(
            &model,
            "shard.khai.dev/cache",
            "drain.shard.khai.dev/cache",
            &Target::Url("https://127.0.0.1:9443".into()),
            None,
        );
        assert_eq!(c["metadata"]["name"], "khai-cache-shard");
        let hook = &c["webhooks"][0];
        assert_eq!(
            hook["clientConfig"]["url"],
            "https://127.0.0.1:9443/shard/assign"
        );
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(
            hook["objectSelector"]["matchExpressions"][0],
            json!({ "key": "shard.khai.dev/cache", "operator": "DoesNotExist" })
        );
        assert_eq!(
            hook["objectSelector"]["matchExpressions"][1],
            json!({ "key": "drain.shard.khai.dev/cache", "operator": "DoesNotExist" })
        );
        let resources: Vec<&Value> = hook["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["resources"][0])
            .collect();
        assert_eq!(resources, [&json!("caches"), &json!("secrets")]);
    }
}
