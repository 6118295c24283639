//! `khai rbac verify`: asks the API server, with SelfSubjectAccessReviews, whether the current
//! credentials hold every permission the config needs — the rules `khai generate rbac` derives
//! ([`crate::manifest::rbac`]) — and prints what is missing. Exit status 1 if anything is.
//!
//! Each rule is checked verb by verb (and resource name by resource name) where it applies:
//! ClusterRole rules cluster-wide, the Role rules of a namespaced operator in every watched
//! namespace, and the leader election rules in khai's own namespace.

use crate::manifest::rbac;
use anyhow::Context;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::fmt;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Check that the current credentials (KUBECONFIG, or the in-cluster ServiceAccount) hold
    /// every permission `khai generate rbac` derives for the config; exit 1 naming what is
    /// missing.
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub scope: super::generate::RbacScope,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Verify(args) => verify(&args),
    }
}

/// One access the config needs: a verb on a resource (or a non-resource URL) in a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Access {
    verb: String,
    target: Target,
    namespace: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
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
fn accesses(rules: &[Value], namespace: Option<&str>) -> Vec<Access> {
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

/// Every access the plan grants, where it grants it.
fn needed(plan: &rbac::Plan, own_namespace: &str) -> Vec<Access> {
    let mut out = accesses(&plan.cluster.policy_rules(), None);
    for ns in &plan.namespaces {
        out.extend(accesses(&plan.namespaced.policy_rules(), Some(ns)));
    }
    out.extend(accesses(&plan.own.policy_rules(), Some(own_namespace)));
    out
}

fn review(access: &Access) -> SelfSubjectAccessReview {
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

fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let (op, own_namespace, plan) = args.scope.plan()?;
    let needed = needed(&plan, &own_namespace);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let missing = rt.block_on(async {
        let client = crate::client::connect().await?;
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
        let mut missing = Vec::new();
        for access in &needed {
            let answer = reviews
                .create(&PostParams::default(), &review(access))
                .await
                .with_context(|| format!("SelfSubjectAccessReview for {access} failed"))?;
            let status = answer.status.unwrap_or_default();
            if !status.allowed {
                let why = status.evaluation_error.filter(|e| !e.is_empty());
                missing.push((access.clone(), why));
            }
        }
        anyhow::Ok(missing)
    })?;
    if missing.is_empty() {
        println!(
            "ok: all {} permissions {} needs are granted",
            needed.len(),
            op.config.file.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (access, why) in &missing {
        match why {
            Some(why) => println!("missing: {access} ({why})"),
            None => println!("missing: {access}"),
        }
    }
    println!(
        "{} of {} permissions {} needs are missing; `khai generate rbac` prints the rules",
        missing.len(),
        needed.len(),
        op.config.file.display()
    );
    Ok(ExitCode::FAILURE)
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
