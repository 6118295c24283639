//! `khai rbac verify --file`: reads the ClusterRoles and Roles of a YAML file and decides, as
//! the API server's RBAC authorizer does, whether they grant an access. Bindings are not
//! followed.

use super::access::{Access, Target};
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

/// Rules granted in one place: everywhere (a ClusterRole) or in one namespace (a Role).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Grant {
    /// `None` for a ClusterRole.
    namespace: Option<String>,
    rules: Vec<PolicyRule>,
}

/// Why a rules file cannot be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum FileError {
    #[error("failed to read {file}: {cause}")]
    Read { file: String, cause: std::io::Error },
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
pub(super) fn grants(file: &str, text: &str) -> Result<Vec<Grant>, FileError> {
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
pub(super) fn granted(grants: &[Grant], access: &Access) -> bool {
    grants
        .iter()
        .filter(|g| g.namespace.is_none() || g.namespace == access.namespace)
        .flat_map(|g| &g.rules)
        .any(|r| rule_grants(r, access))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
