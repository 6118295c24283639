//! What sharded mode (`khai run --shards`, docs/scaling.md) calls beyond an unsharded khai:
//!
//! | Call | Verbs |
//! |---|---|
//! | the sharder's label merge patches (assign, move, drain) on parents, children and the objects of sharded `watches` kinds; a shard's drain acknowledgement on a parent | patch |
//! | the shard Leases, watched by the sharder and by every replica's view of the ring | list, watch on `leases` in khai's own namespace |
//! | self-signed: the assignment webhook's configuration `khai-<operator>-shard`, server-side applied when it differs | create; get, patch by name |
//! | self-signed: the Secret `khai-<operator>-webhook-tls` in khai's own namespace holding the CA every replica shares | create; get, update by name |
//! | self-signed, a config without `[[webhook]]`: looking for a leftover `khai-<operator>` configuration to delete | get, delete by name |
//!
//! Reading those objects (paged metadata lists, the watch of unassigned parents, a related
//! object's parent by name) and holding and taking over Leases (get, create, update) are
//! granted to every khai already. Kept apart from the rest of the plan so the chart adds these
//! rules only when `sharding.enabled` is set, and the webhook's only with `webhook.enabled`.

use super::{Plan, Rules, resolve};
use crate::config::model::Model;
use crate::config::webhook::TlsMode;

/// How khai runs sharded, as far as RBAC is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sharding {
    /// khai serves the assignment webhook (the API server can reach it), so with a self-signed
    /// certificate it installs the webhook's configuration itself.
    pub assign_webhook: bool,
}

/// The grants sharded mode adds to a [`Plan`].
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Extra {
    /// ClusterRole rules on the kinds sharded (all of them for a cluster-wide operator).
    pub cluster: Rules,
    /// Rules of the Role in each watched namespace.
    pub namespaced: Rules,
    /// Rules of the Role in khai's own namespace: the shard Leases.
    pub own: Rules,
    /// ClusterRole rules on the assignment webhook's configuration.
    pub webhook: Rules,
}

/// What sharding adds for `model` watching `namespaces` (empty: the whole cluster).
pub(crate) fn extra(model: &Model, namespaces: &[String], sharding: Sharding) -> Extra {
    let mut p = Plan {
        namespaces: namespaces.to_vec(),
        ..Plan::default()
    };
    for c in &model.controllers {
        let sharded = c.watches.iter().filter(|w| w.sharded()).map(|w| &w.kind);
        for kind in std::iter::once(&c.for_kind).chain(&c.owns).chain(sharded) {
            let r = resolve(model, kind);
            p.grant(&r, &r.plural, &["patch"]);
        }
    }
    p.own
        .add("coordination.k8s.io", "leases", &["list", "watch"]);
    let mut webhook = Rules::default();
    if sharding.assign_webhook && model.webhook_server.tls == TlsMode::SelfSigned {
        let reg = "admissionregistration.k8s.io";
        let shard = vec![crate::manifest::sharding::configuration_name(model)];
        webhook.add_named(
            reg,
            "mutatingwebhookconfigurations",
            &shard,
            &["create", "get", "patch"],
        );
        super::own::shared_ca(model, &mut p.own);
        if model.webhooks.is_empty() {
            let own = vec![crate::manifest::webhooks::configuration_name(model)];
            for resource in [
                "validatingwebhookconfigurations",
                "mutatingwebhookconfigurations",
            ] {
                webhook.add_named(reg, resource, &own, &["get", "delete"]);
            }
        }
    }
    Extra {
        cluster: p.cluster,
        namespaced: p.namespaced,
        own: p.own,
        webhook,
    }
}

impl Plan {
    /// Adds sharded mode's grants.
    pub(super) fn add_sharding(&mut self, extra: &Extra) {
        self.cluster.extend(&extra.cluster);
        self.cluster.extend(&extra.webhook);
        self.namespaced.extend(&extra.namespaced);
        self.own.extend(&extra.own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::rbac::{Input, plan};
    use serde_json::json;

    const SRC: &str = r#"
[operator]
name = "cache"

[[crd]]
group = "examples.khai.dev"
kind = "Cache"
versions = ["v1"]

[[controller]]
for = "Cache"
owns = ["v1/ConfigMap"]
script = "c.rhai"
watches = [
  { kind = "v1/Secret", label = "cache" },
  { kind = "v1/ServiceAccount", label = "cache", shared = true },
  { kind = "v1/Service", map = "services" },
]
"#;

    fn plans(src: &str, ns: &[&str], webhook: bool) -> (Plan, Plan) {
        let model = crate::config::parse(std::path::Path::new("operator.toml"), src).unwrap();
        let input = |shards| Input {
            model: &model,
            finalizes: vec![false],
            watch_namespaces: ns.iter().map(|s| s.to_string()).collect(),
            config_map: None,
            shards,
        };
        let on = Some(Sharding {
            assign_webhook: webhook,
        });
        (plan(&input(None)), plan(&input(on)))
    }

    /// Every rule of `sharded` that `plain` lacks, a verb at a time.
    fn added(plain: &Rules, sharded: &Rules) -> Vec<serde_json::Value> {
        let before = plain.policy_rules();
        let mut out = Vec::new();
        for r in sharded.policy_rules() {
            for v in r["verbs"].as_array().unwrap() {
                let had = before.iter().any(|b| {
                    b["apiGroups"] == r["apiGroups"]
                        && b["resources"] == r["resources"]
                        && b.get("resourceNames") == r.get("resourceNames")
                        && b["verbs"].as_array().unwrap().contains(v)
                });
                if !had {
                    let mut one = r.clone();
                    one["verbs"] = json!([v]);
                    out.push(one);
                }
            }
        }
        out
    }

    #[test]
    fn sharding_adds_label_patches_lease_watches_and_the_assignment_webhook_and_nothing_else() {
        let (plain, sharded) = plans(SRC, &[], true);
        let patch =
            |g: &str, r: &str| json!({ "apiGroups": [g], "resources": [r], "verbs": ["patch"] });
        // The parent and the sharded watched kind; the owned ConfigMaps were patched already.
        assert_eq!(
            added(&plain.cluster, &sharded.cluster),
            [
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["patch"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations"], "verbs": ["delete"],
                        "resourceNames": ["khai-cache"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations"], "verbs": ["get"],
                        "resourceNames": ["khai-cache"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations"], "verbs": ["create"],
                        "resourceNames": ["khai-cache-shard"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations"], "verbs": ["get"],
                        "resourceNames": ["khai-cache-shard"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["mutatingwebhookconfigurations"], "verbs": ["patch"],
                        "resourceNames": ["khai-cache-shard"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["validatingwebhookconfigurations"], "verbs": ["delete"],
                        "resourceNames": ["khai-cache"] }),
                json!({ "apiGroups": ["admissionregistration.k8s.io"],
                        "resources": ["validatingwebhookconfigurations"], "verbs": ["get"],
                        "resourceNames": ["khai-cache"] }),
                patch("examples.khai.dev", "caches"),
            ]
        );
        assert_eq!(
            added(&plain.own, &sharded.own),
            [
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] }),
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                        "resourceNames": ["khai-cache-webhook-tls"] }),
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["update"],
                        "resourceNames": ["khai-cache-webhook-tls"] }),
                json!({ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"] }),
                json!({ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["watch"] }),
            ]
        );
        assert!(sharded.namespaced.is_empty() && sharded.secrets.is_empty());
        // Nothing sharding-only without it.
        for (g, r) in [
            ("examples.khai.dev", "caches"),
            ("", "secrets"),
            ("", "services"),
        ] {
            assert!(!plain.cluster.verbs(g, r).contains(&"patch".into()), "{r}");
        }
        assert!(
            plain
                .cluster
                .verbs(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations"
                )
                .is_empty()
        );
        assert_eq!(
            plain.own.verbs("coordination.k8s.io", "leases"),
            ["create", "get", "update"]
        );
        // A shared or mapped watched kind is not relabelled.
        for r in ["serviceaccounts", "services"] {
            assert_eq!(
                sharded.cluster.verbs("", r),
                ["get", "list", "watch"],
                "{r}"
            );
        }
    }

    #[test]
    fn a_namespaced_operator_patches_in_its_roles_and_the_webhook_rules_follow_its_settings() {
        let (plain, sharded) = plans(SRC, &["team"], true);
        let secrets = sharded.namespaced.verbs("", "secrets");
        assert_eq!(secrets, ["get", "list", "patch", "watch"]);
        assert!(
            added(&plain.cluster, &sharded.cluster)
                .iter()
                .all(|r| r["apiGroups"][0] == "admissionregistration.k8s.io")
        );
        // Not served (unreachable): no configuration to install.
        let (_, unserved) = plans(SRC, &[], false);
        assert!(
            unserved
                .cluster
                .verbs(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations"
                )
                .is_empty()
        );
        // Certificate files: the release installs the configuration, not khai.
        let files = SRC.replace(
            "[[crd]]",
            "[webhook_server]\ntls = \"files\"\ncert_file = \"t.crt\"\nkey_file = \"t.key\"\n\n[[crd]]",
        );
        let (_, files) = plans(&files, &[], true);
        assert!(
            files
                .cluster
                .verbs(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations"
                )
                .is_empty()
        );
        // With [[webhook]]s, khai's own configurations are granted already; only the shard's is added.
        let hooks =
            format!("{SRC}\n[[webhook]]\nfor = \"Cache\"\nscript = \"w.rhai\"\nvalidate = \"v\"\n");
        let (plain, sharded) = plans(&hooks, &[], true);
        let webhooks: Vec<_> = added(&plain.cluster, &sharded.cluster)
            .into_iter()
            .filter(|r| r["apiGroups"][0] == "admissionregistration.k8s.io")
            .map(|r| (r["resources"][0].clone(), r["resourceNames"].clone()))
            .collect();
        assert_eq!(
            webhooks,
            [
                (
                    json!("mutatingwebhookconfigurations"),
                    json!(["khai-cache-shard"])
                ),
                (
                    json!("mutatingwebhookconfigurations"),
                    json!(["khai-cache-shard"])
                ),
                (
                    json!("mutatingwebhookconfigurations"),
                    json!(["khai-cache-shard"])
                ),
            ]
        );
    }
}
