//! The ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding of each `[[policy]]`:
//! CEL rules the API server evaluates itself, with no webhook.
//!
//! No I/O: `khai generate manifests` and the chart's values print these, and `khai run` applies
//! them (`install_crds`). Each carries the hash of its own content
//! ([`crate::schema::current::MANIFEST_HASH`]), so a restart over a cluster that already holds them sends
//! no write. Rules for a CRD of this file name its storage version with `matchPolicy:
//! Equivalent`, so the rules see every version of the object as the storage version.

use crate::config::model::Model;
use crate::config::policy::Policy;
use serde_json::{Value, json};

/// The name of `policy`'s ValidatingAdmissionPolicy and of its binding: `khai-<operator>-<name>`.
pub(crate) fn object_name(model: &Model, policy: &Policy) -> String {
    format!("khai-{}-{}", model.operator.name, policy.name)
}

/// For every `[[policy]]`, in config order, its policy then its binding.
pub(crate) fn manifests(model: &Model) -> Vec<Value> {
    model
        .policies
        .iter()
        .flat_map(|p| [policy(model, p), binding(model, p)])
        .collect()
}

fn metadata(model: &Model, p: &Policy) -> Value {
    json!({
        "name": object_name(model, p),
        "labels": {
            "app.kubernetes.io/name": model.operator.name,
            "app.kubernetes.io/managed-by": "khai",
        },
    })
}

fn policy(model: &Model, p: &Policy) -> Value {
    let resource_rules: Vec<Value> = p
        .for_kinds
        .iter()
        .map(|kind| {
            let (group, version, plural) = super::webhooks::resource(model, kind);
            json!({
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [plural],
                "operations": p.operations,
                "scope": "*",
            })
        })
        .collect();
    let mut constraints = json!({
        "resourceRules": resource_rules,
        "matchPolicy": "Equivalent",
    });
    for (key, value) in [
        ("namespaceSelector", &p.namespace_selector),
        ("objectSelector", &p.object_selector),
    ] {
        if let Some(v) = value {
            constraints[key] = v.clone();
        }
    }
    let validations: Vec<Value> = p
        .rules
        .iter()
        .map(|r| {
            let mut v = json!({ "expression": r.rule });
            if let Some(m) = &r.message {
                v["message"] = json!(m);
            }
            if let Some(m) = &r.message_expression {
                v["messageExpression"] = json!(m);
            }
            v
        })
        .collect();
    let mut spec = json!({
        "failurePolicy": p.failure_policy,
        "matchConstraints": constraints,
        "validations": validations,
    });
    if !p.match_conditions.is_empty() {
        spec["matchConditions"] = json!(p.match_conditions);
    }
    let mut out = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(model, p),
        "spec": spec,
    });
    crate::schema::current::stamp(&mut out);
    out
}

fn binding(model: &Model, p: &Policy) -> Value {
    let mut out = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(model, p),
        "spec": {
            "policyName": object_name(model, p),
            "validationActions": p.validation_actions,
        },
    });
    crate::schema::current::stamp(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    #[test]
    fn a_policy_matches_its_kinds_and_its_binding_names_it() {
        let src = r#"
[operator]
name = "shop"

[[crd]]
group = "shop.khai.dev"
kind = "Order"
versions = [{ name = "v1alpha1" }, { name = "v1", storage = true }]

[[policy]]
name = "small"
for = ["Order", "apps/v1/Deployment"]
operations = ["CREATE"]
rules = [{ rule = "object.spec.replicas <= 5", message = "at most 5 replicas" }]
match_conditions = [{ name = "labelled", expression = "has(object.metadata.labels)" }]
namespace_selector = { matchLabels = { team = "a" } }
validation_actions = ["Warn", "Audit"]
"#;
        let model = parse(Path::new("operator.toml"), src).unwrap();
        let out = manifests(&model);
        assert_eq!(out.len(), 2);
        let (p, b) = (&out[0], &out[1]);
        assert_eq!(p["kind"], "ValidatingAdmissionPolicy");
        assert_eq!(p["metadata"]["name"], "khai-shop-small");
        assert_eq!(
            p["spec"]["matchConstraints"]["resourceRules"],
            json!([
                { "apiGroups": ["shop.khai.dev"], "apiVersions": ["v1"], "resources": ["orders"],
                  "operations": ["CREATE"], "scope": "*" },
                { "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                  "operations": ["CREATE"], "scope": "*" },
            ])
        );
        assert_eq!(
            p["spec"]["matchConstraints"]["namespaceSelector"],
            json!({ "matchLabels": { "team": "a" } })
        );
        assert_eq!(
            p["spec"]["validations"],
            json!([{ "expression": "object.spec.replicas <= 5", "message": "at most 5 replicas" }])
        );
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        assert_eq!(p["spec"]["matchConditions"][0]["name"], "labelled");
        assert_eq!(b["kind"], "ValidatingAdmissionPolicyBinding");
        assert_eq!(b["metadata"]["name"], "khai-shop-small");
        assert_eq!(b["spec"]["policyName"], "khai-shop-small");
        assert_eq!(b["spec"]["validationActions"], json!(["Warn", "Audit"]));
        for m in [p, b] {
            let hash = &m["metadata"]["annotations"][crate::schema::current::MANIFEST_HASH];
            assert!(hash.is_string(), "{m}");
        }
    }

    #[test]
    fn khai_may_install_its_policies_only_when_it_installs_them() {
        let src = "[operator]\nname = \"shop\"\n\n[[policy]]\nname = \"small\"\n\
                   for = [\"apps/v1/Deployment\"]\nrules = [{ rule = \"true\" }]\n";
        let rules = |src: &str| {
            let model = parse(Path::new("operator.toml"), src).unwrap();
            let plan = crate::manifest::rbac::plan(&crate::manifest::rbac::Input {
                model: &model,
                finalizes: vec![],
                watch_namespaces: vec![],
                config_map: None,
                shards: None,
            });
            plan.cluster.policy_rules()
        };
        let granted = rules(src);
        for resource in [
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
        ] {
            let rule = |verbs: Value, names: Option<Value>| {
                let mut r = json!({
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": [resource],
                    "verbs": verbs,
                });
                if let Some(n) = names {
                    r["resourceNames"] = n;
                }
                r
            };
            assert!(
                granted.contains(&rule(json!(["create"]), None)),
                "{granted:?}"
            );
            assert!(
                granted.contains(&rule(
                    json!(["get", "patch"]),
                    Some(json!(["khai-shop-small"]))
                )),
                "{granted:?}"
            );
        }
        let theirs = src.replace("name = \"shop\"", "name = \"shop\"\ninstall_crds = false");
        let granted = rules(&theirs);
        assert!(
            !granted
                .iter()
                .any(|r| r.to_string().contains("admissionpolicies")),
            "{granted:?}"
        );
    }
}
