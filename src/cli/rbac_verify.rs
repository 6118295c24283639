//! `khai rbac verify`: checks that every permission the config needs — the rules
//! `khai generate rbac` derives ([`crate::manifest::rbac`]) — is granted, and prints what is
//! missing. Exit status 1 if anything is.
//!
//! Each rule is checked verb by verb (and resource name by resource name) where it applies:
//! ClusterRole rules cluster-wide, the Role rules of a namespaced operator in every watched
//! namespace, and the leader election rules in khai's own namespace. Live, the API server answers
//! a SelfSubjectAccessReview for each, for the current credentials. With `--file`, the check is
//! offline, against the ClusterRoles and Roles in a YAML file (as Kopf's `rbac verify -f`): a
//! ClusterRole's rules count everywhere, a Role's only in its namespace, and rules match as the
//! API server's RBAC authorizer matches them (`*` verbs, groups and resources, `resource/*` and
//! `*/subresource`, resourceNames, nonResourceURLs ending in `*`). Bindings are not followed.

use crate::manifest::rbac;
use anyhow::Context;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::PolicyRule;
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
    /// Check offline against the ClusterRoles and Roles in this YAML file (multi-document, a
    /// `kind: List`, or a bare list of rules counted cluster-wide) instead of asking the API
    /// server about the current credentials.
    #[arg(long, short = 'f', value_name = "RULES.yaml")]
    pub file: Option<std::path::PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Verify(args) => match &args.file {
            Some(file) => verify_file(&args, file),
            None => verify(&args),
        },
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

/// Rules granted in one place: everywhere (a ClusterRole) or in one namespace (a Role).
#[derive(Debug, Clone, PartialEq)]
struct Grant {
    /// `None` for a ClusterRole.
    namespace: Option<String>,
    rules: Vec<PolicyRule>,
}

/// Why a rules file cannot be used.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error("failed to read {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not YAML: {message}")]
    Yaml { file: String, message: String },
    #[error("{file}: document {doc}: {kind} {name}: {message}")]
    Object {
        file: String,
        doc: usize,
        kind: String,
        name: String,
        message: String,
    },
}

/// The grants in a rules file's text; `file` names it in errors. Kinds other than ClusterRole,
/// Role and List are skipped (bindings, ServiceAccounts: `khai generate rbac` prints them too).
fn grants(file: &str, text: &str) -> Result<Vec<Grant>, FileError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| FileError::Yaml {
        file: file.into(),
        message: e.to_string().lines().next().unwrap_or_default().to_string(),
    })?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        collect_grants(file, i + 1, doc, &mut out)?;
    }
    Ok(out)
}

fn collect_grants(file: &str, doc: usize, v: Value, out: &mut Vec<Grant>) -> Result<(), FileError> {
    let kind = v["kind"].as_str().unwrap_or_default().to_string();
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let bad = |message: String| FileError::Object {
        file: file.into(),
        doc,
        kind: kind.clone(),
        name: name.clone(),
        message,
    };
    let rules = |v: &Value| -> Result<Vec<PolicyRule>, FileError> {
        serde_json::from_value(v.clone()).map_err(|e| bad(format!("rules: {e}")))
    };
    match (&v, kind.as_str()) {
        (Value::Array(_), _) => out.push(Grant {
            namespace: None,
            rules: rules(&v)?,
        }),
        (_, "ClusterRole") => out.push(Grant {
            namespace: None,
            rules: rules(&v["rules"])?,
        }),
        (_, "Role") => {
            let Some(ns) = v["metadata"]["namespace"].as_str() else {
                return Err(bad("has no metadata.namespace".into()));
            };
            out.push(Grant {
                namespace: Some(ns.into()),
                rules: rules(&v["rules"])?,
            });
        }
        (_, "List") => {
            for item in v["items"].as_array().cloned().unwrap_or_default() {
                collect_grants(file, doc, item, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn matches(patterns: &[String], value: &str) -> bool {
    patterns.iter().any(|p| p == "*" || p == value)
}

/// Whether `rule` grants `access`, as the API server's RBAC authorizer decides.
fn rule_grants(rule: &PolicyRule, access: &Access) -> bool {
    if !matches(&rule.verbs, &access.verb) {
        return false;
    }
    match &access.target {
        Target::Url(path) => rule.non_resource_urls.iter().flatten().any(|u| {
            u == "*"
                || u == path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix))
        }),
        Target::Resource {
            group,
            resource,
            subresource,
            name,
        } => {
            let groups = rule.api_groups.as_deref().unwrap_or_default();
            let resources = rule.resources.as_deref().unwrap_or_default();
            let resource_ok = resources.iter().any(|r| match subresource {
                None => r == "*" || r == resource,
                Some(sub) => {
                    r == "*"
                        || *r == format!("{resource}/{sub}")
                        || *r == format!("{resource}/*")
                        || *r == format!("*/{sub}")
                }
            });
            let names = rule.resource_names.as_deref().unwrap_or_default();
            let name_ok =
                names.is_empty() || name.as_ref().is_some_and(|n| names.iter().any(|x| x == n));
            matches(groups, group) && resource_ok && name_ok
        }
    }
}

/// Whether any grant in scope for `access` grants it.
fn granted(grants: &[Grant], access: &Access) -> bool {
    grants
        .iter()
        .filter(|g| g.namespace.is_none() || g.namespace == access.namespace)
        .flat_map(|g| &g.rules)
        .any(|r| rule_grants(r, access))
}

fn verify_file(args: &VerifyArgs, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let (op, own_namespace, plan) = args.scope.plan()?;
    let needed = needed(&plan, &own_namespace);
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|source| FileError::Read {
        file: shown.clone(),
        source,
    })?;
    let grants = grants(&shown, &text)?;
    let missing: Vec<(Access, Option<String>)> = needed
        .iter()
        .filter(|a| !granted(&grants, a))
        .map(|a| (a.clone(), None))
        .collect();
    Ok(report(&op, &needed, &missing, &format!("by {shown}")))
}

/// Prints what is missing (or that nothing is) and returns the exit status.
fn report(
    op: &crate::operator::Operator,
    needed: &[Access],
    missing: &[(Access, Option<String>)],
    by: &str,
) -> ExitCode {
    if missing.is_empty() {
        println!(
            "ok: all {} permissions {} needs are granted{}",
            needed.len(),
            op.config.file.display(),
            if by.is_empty() {
                String::new()
            } else {
                format!(" {by}")
            }
        );
        return ExitCode::SUCCESS;
    }
    for (access, why) in missing {
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
    ExitCode::FAILURE
}

fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let (op, own_namespace, plan) = args.scope.plan()?;
    let needed = needed(&plan, &own_namespace);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let missing = rt.block_on(async {
        let (client, _) = crate::client::connect(crate::client::Limits::default()).await?;
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
    Ok(report(&op, &needed, &missing, ""))
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

    fn access(
        verb: &str,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        name: Option<&str>,
        ns: Option<&str>,
    ) -> Access {
        Access {
            verb: verb.into(),
            target: Target::Resource {
                group: group.into(),
                resource: resource.into(),
                subresource: sub.map(Into::into),
                name: name.map(Into::into),
            },
            namespace: ns.map(Into::into),
        }
    }

    #[test]
    fn rules_match_as_the_rbac_authorizer_matches_them() {
        let rule = |v: Value| -> PolicyRule { serde_json::from_value(v).unwrap() };
        let cm = access("get", "", "configmaps", None, Some("cfg"), Some("ops"));
        assert!(rule_grants(
            &rule(json!({ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] })),
            &cm
        ));
        assert!(rule_grants(
            &rule(json!({ "apiGroups": ["*"], "resources": ["*"], "verbs": ["*"] })),
            &cm
        ));
        assert!(rule_grants(
            &rule(
                json!({ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["get"] })
            ),
            &cm
        ));
        assert!(!rule_grants(
            &rule(
                json!({ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["other"], "verbs": ["get"] })
            ),
            &cm
        ));
        assert!(!rule_grants(
            &rule(json!({ "apiGroups": ["apps"], "resources": ["configmaps"], "verbs": ["get"] })),
            &cm
        ));
        let list = access("list", "", "configmaps", None, None, Some("ops"));
        assert!(
            !rule_grants(
                &rule(
                    json!({ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cfg"], "verbs": ["list"] })
                ),
                &list
            ),
            "names cannot narrow an unnamed request"
        );
        let status = access("patch", "g", "caches", Some("status"), None, None);
        for r in ["caches/status", "caches/*", "*/status", "*"] {
            assert!(
                rule_grants(
                    &rule(json!({ "apiGroups": ["g"], "resources": [r], "verbs": ["patch"] })),
                    &status
                ),
                "{r}"
            );
        }
        assert!(!rule_grants(
            &rule(json!({ "apiGroups": ["g"], "resources": ["caches"], "verbs": ["patch"] })),
            &status
        ));
        let url = Access {
            verb: "get".into(),
            target: Target::Url("/apis/apps".into()),
            namespace: None,
        };
        assert!(rule_grants(
            &rule(json!({ "nonResourceURLs": ["/apis/*"], "verbs": ["get"] })),
            &url
        ));
        assert!(!rule_grants(
            &rule(json!({ "nonResourceURLs": ["/api/*"], "verbs": ["get"] })),
            &url
        ));
    }

    #[test]
    fn a_rules_file_grants_cluster_roles_everywhere_and_roles_in_their_namespace() {
        let text = "---\nkind: ClusterRole\nmetadata: { name: c }\nrules:\n- { apiGroups: [\"\"], resources: [secrets], verbs: [get] }\n---\nkind: Role\nmetadata: { name: r, namespace: ops }\nrules:\n- { apiGroups: [\"\"], resources: [configmaps], verbs: [get] }\n---\nkind: RoleBinding\nmetadata: { name: r, namespace: ops }\n";
        let g = grants("rules.yaml", text).unwrap();
        assert_eq!(g.len(), 2);
        assert!(granted(
            &g,
            &access("get", "", "secrets", None, None, Some("any"))
        ));
        assert!(granted(
            &g,
            &access("get", "", "configmaps", None, None, Some("ops"))
        ));
        assert!(!granted(
            &g,
            &access("get", "", "configmaps", None, None, Some("other"))
        ));
        assert!(!granted(
            &g,
            &access("get", "", "configmaps", None, None, None)
        ));
        let bare = grants(
            "rules.yaml",
            "- { apiGroups: [\"\"], resources: [pods], verbs: [list] }\n",
        )
        .unwrap();
        assert!(granted(
            &bare,
            &access("list", "", "pods", None, None, Some("x"))
        ));
        let err = grants(
            "rules.yaml",
            "kind: Role\nmetadata: { name: r }\nrules: []\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "rules.yaml: document 1: Role r: has no metadata.namespace"
        );
    }
}
