//! The Kubernetes objects of an RBAC [`Plan`]: khai's ServiceAccount, and a ClusterRole or Role
//! with its binding for each set of rules, in the order to apply them.

use super::{Plan, Rules};
use crate::config::model::Model;
use serde_json::{Value, json};

fn labels(model: &Model) -> Value {
    json!({
        "app.kubernetes.io/name": model.operator.name,
        "app.kubernetes.io/managed-by": "khai",
    })
}

/// Name of the ServiceAccount, roles and bindings: `khai-<operator>`.
pub(crate) fn name(model: &Model) -> String {
    format!("khai-{}", model.operator.name)
}

/// The ServiceAccount, ClusterRole, Roles and their bindings, in the order to apply them.
pub(crate) fn manifests(model: &Model, namespace: &str, plan: &Plan) -> Vec<Value> {
    let name = name(model);
    let labels = labels(model);
    let subject = json!([{ "kind": "ServiceAccount", "name": name, "namespace": namespace }]);
    let mut out = vec![json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
    })];
    let rbac = "rbac.authorization.k8s.io/v1";
    let mut role = |kind: &str, role_name: &str, ns: Option<&str>, rules: &Rules| {
        let mut meta = json!({ "name": role_name, "labels": labels });
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        out.push(json!({
            "apiVersion": rbac, "kind": kind, "metadata": meta, "rules": rules.policy_rules(),
        }));
        out.push(json!({
            "apiVersion": rbac,
            "kind": format!("{kind}Binding"),
            "metadata": meta,
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name },
            "subjects": subject,
        }));
    };
    if !plan.cluster.is_empty() {
        role("ClusterRole", &name, None, &plan.cluster);
    }
    if !plan.namespaced.is_empty() {
        for ns in &plan.namespaces {
            role("Role", &name, Some(ns), &plan.namespaced);
        }
    }
    if !plan.own.is_empty() {
        role(
            "Role",
            &format!("{name}-leader-election"),
            Some(namespace),
            &plan.own,
        );
    }
    if !plan.config.is_empty() {
        role(
            "Role",
            &format!("{name}-config"),
            Some(namespace),
            &plan.config,
        );
    }
    for (ns, rules) in &plan.secrets {
        role("Role", &format!("{name}-secrets"), Some(ns), rules);
    }
    out
}
