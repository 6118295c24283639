//! Grants the config names itself: the Secrets of `[operator] secrets`, granted by name, and
//! the rules of `[[operator.extra_rbac]]`.

use super::Plan;
use crate::config::http::ANY_SECRET;
use crate::config::model::Model;

/// Adds to `p` the grants on `[operator] secrets` and `[[operator.extra_rbac]]`.
pub(super) fn grant(model: &Model, p: &mut Plan) {
    let scoped = p.scoped();
    // Secrets are watched by name (a `metadata.name` field selector), which RBAC grants by
    // `resourceNames`; only the opt-in `"*"` is granted all Secrets (of its namespaces).
    let secret_verbs = &["get", "list", "watch"];
    let names_or_all = |names: Vec<String>| match names.iter().any(|n| n == ANY_SECRET) {
        true => Vec::new(),
        false => names,
    };
    let unqualified: Vec<String> = model
        .operator
        .secrets
        .iter()
        .filter(|s| s.namespace.is_none())
        .map(|s| s.name.clone())
        .collect();
    if !unqualified.is_empty() {
        let rules = if scoped {
            &mut p.namespaced
        } else {
            &mut p.cluster
        };
        rules.add_named("", "secrets", &names_or_all(unqualified), secret_verbs);
    }
    let mut qualified: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for s in &model.operator.secrets {
        if let Some(ns) = &s.namespace {
            qualified.entry(ns).or_default().push(s.name.clone());
        }
    }
    for (ns, names) in qualified {
        p.secrets.entry(ns.to_string()).or_default().add_named(
            "",
            "secrets",
            &names_or_all(names),
            secret_verbs,
        );
    }
    for r in &model.operator.extra_rbac {
        if !scoped || r.cluster {
            p.cluster.add_extra(r);
            continue;
        }
        // A Role grants nothing on a cluster-scoped resource: those go to the ClusterRole.
        for g in &r.api_groups {
            for res in &r.resources {
                let rules = if cluster_scoped(model, g, res) {
                    &mut p.cluster
                } else {
                    &mut p.namespaced
                };
                rules.add_rule_of(r, g, res);
            }
        }
    }
}

/// Whether `resource` (`clusterroles`, `nodes/status`) of `group` is cluster-scoped: a
/// well-known built-in or a CRD of the config with `scope = "Cluster"`. Anything else is taken
/// for namespaced, as kinds are.
fn cluster_scoped(model: &Model, group: &str, resource: &str) -> bool {
    let resource = resource.split('/').next().unwrap_or(resource);
    crate::config::kind::BUILTIN.iter().any(|b| {
        !b.namespaced && b.group == group && crate::config::kind::plural_of(b.kind) == resource
    }) || model.crds.iter().any(|c| {
        c.scope == crate::config::model::Scope::Cluster
            && c.group == group
            && c.plural() == resource
    })
}
