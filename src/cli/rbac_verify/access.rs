//! What the config needs, one access at a time: a verb on a resource (or a non-resource URL)
//! in a namespace or cluster-wide, read from the rules `khai generate rbac` derives, and the
//! SelfSubjectAccessReview that asks the API server about one.

use crate::manifest::rbac;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use serde_json::Value;
use std::fmt;

/// One access the config needs: a verb on a resource (or a non-resource URL) in a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Access {
    pub(super) verb: String,
    pub(super) target: Target,
    pub(super) namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Resource {
        group: String,
        resource: String,
        subresource: Option<String>,
        name: Option<String>,
    },
    Url(String),
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Url(path) => write!(f, "{} {path}", self.verb)?,
            Target::Resource {
                group,
                resource,
                subresource,
                name,
            } => {
                write!(f, "{} {resource}", self.verb)?;
                if let Some(sub) = subresource {
                    write!(f, "/{sub}")?;
                }
                if !group.is_empty() {
                    write!(f, ".{group}")?;
                }
                if let Some(name) = name {
                    write!(f, " named {name}")?;
                }
            }
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

/// The accesses of PolicyRules (as [`rbac::Rules::policy_rules`] writes them) in `namespace`.
pub(super) fn accesses(rules: &[Value], namespace: Option<&str>) -> Vec<Access> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for rule in rules {
        let verbs = strings(&rule["verbs"]);
        for url in strings(&rule["nonResourceURLs"]) {
            for verb in &verbs {
                out.push(Access {
                    verb: verb.clone(),
                    target: Target::Url(url.clone()),
                    namespace: None,
                });
            }
        }
        let names = strings(&rule["resourceNames"]);
        let names: Vec<Option<String>> = if names.is_empty() {
            vec![None]
        } else {
            names.into_iter().map(Some).collect()
        };
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let (resource, subresource) = match resource.split_once('/') {
                    Some((r, s)) => (r.to_string(), Some(s.to_string())),
                    None => (resource, None),
                };
                for name in &names {
                    for verb in &verbs {
                        out.push(Access {
                            verb: verb.clone(),
                            target: Target::Resource {
                                group: group.clone(),
                                resource: resource.clone(),
                                subresource: subresource.clone(),
                                name: name.clone(),
                            },
                            namespace: namespace.map(str::to_string),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Every access the plan grants, where it grants it: each Role of `khai generate rbac` in its
/// namespace (the config's ConfigMap Role in khai's own, a `namespace/name` Secret's Role in
/// that namespace).
pub(super) fn needed(plan: &rbac::Plan, own_namespace: &str) -> Vec<Access> {
    let mut out = accesses(&plan.cluster.policy_rules(), None);
    for ns in &plan.namespaces {
        out.extend(accesses(&plan.namespaced.policy_rules(), Some(ns)));
    }
    out.extend(accesses(&plan.own.policy_rules(), Some(own_namespace)));
    out.extend(accesses(&plan.config.policy_rules(), Some(own_namespace)));
    for (ns, rules) in &plan.secrets {
        out.extend(accesses(&rules.policy_rules(), Some(ns)));
    }
    out
}

/// The review asking whether the current credentials may make `access`.
pub(super) fn review(access: &Access) -> SelfSubjectAccessReview {
    let spec = match &access.target {
        Target::Url(path) => SelfSubjectAccessReviewSpec {
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.clone()),
                verb: Some(access.verb.clone()),
            }),
            ..Default::default()
        },
        Target::Resource {
            group,
            resource,
            subresource,
            name,
        } => SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.clone()),
                resource: Some(resource.clone()),
                subresource: subresource.clone(),
                name: name.clone(),
                namespace: access.namespace.clone(),
                verb: Some(access.verb.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    SelfSubjectAccessReview {
        spec,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_become_one_access_per_verb_name_and_url() {
        let rules = [
            json!({ "apiGroups": ["examples.khai.dev"], "resources": ["hellos/status"], "verbs": ["patch"] }),
            json!({ "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                    "verbs": ["get", "patch"], "resourceNames": ["a", "b"] }),
            json!({ "nonResourceURLs": ["/api", "/apis"], "verbs": ["get"] }),
        ];
        let got: Vec<String> = accesses(&rules, Some("ns"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "patch hellos/status.examples.khai.dev in namespace ns",
                "get customresourcedefinitions.apiextensions.k8s.io named a in namespace ns",
                "patch customresourcedefinitions.apiextensions.k8s.io named a in namespace ns",
                "get customresourcedefinitions.apiextensions.k8s.io named b in namespace ns",
                "patch customresourcedefinitions.apiextensions.k8s.io named b in namespace ns",
                "get /api cluster-wide",
                "get /apis cluster-wide",
            ]
        );
        let r = review(&accesses(&rules[..1], Some("ns"))[0]);
        let attrs = r.spec.resource_attributes.unwrap();
        assert_eq!(attrs.resource.as_deref(), Some("hellos"));
        assert_eq!(attrs.subresource.as_deref(), Some("status"));
        assert_eq!(attrs.namespace.as_deref(), Some("ns"));
    }
}
