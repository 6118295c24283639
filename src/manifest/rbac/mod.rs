//! Least-privilege RBAC derived from the config: exactly the API calls `khai run` makes.
//!
//! No I/O. Kinds are resolved offline (a CRD of the config, `group/version/Kind`, `v1/Kind`,
//! `Kind.group` or a bare core `Kind`), so a kind is assumed namespaced unless it is a CRD of the
//! config with `scope = "Cluster"` or a well-known cluster-scoped built-in. What each rule is for:
//!
//! | Call | Verbs |
//! |---|---|
//! | list/watch of every `for`, `owns` and `watches` kind (informers) | get, list, watch |
//! | server-side apply of children, pruning | create, patch, delete on owned kinds |
//! | `.status` of a CRD kind with status | patch on `<plural>/status` |
//! | owner references with `blockOwnerDeletion` | update on `<plural>/finalizers` |
//! | the finalizer JSON patch, when the script defines `finalize` or khai deletes children itself (`unowned_children`, `delete_children = "ordered"`) | patch on the primary |
//! | `[[handler]]` progress (annotations), `[[handler]]`/`[[timer]]`/`[[daemon]]` watches and status | patch on the kind (handlers); get, list, watch; patch on `<plural>/status` |
//! | `[[index]]`es: list/watch of their kind | get, list, watch |
//! | Events (`events.k8s.io`), for controllers, handlers, timers and daemons | create, patch |
//! | leader election on a Lease in khai's own namespace | get, create, update |
//! | `install_crds` | CRDs: create, list, watch; get, patch by name; `[[policy]]` policies and bindings: create; get, patch by name |
//! | self-signed webhooks: configurations and CRD conversion | create; get, patch by name |
//! | self-signed webhooks: the Secret `khai-<operator>-webhook-tls` in khai's own namespace, the CA every replica shares | create; get, update by name |
//! | discovery, for kinds that are not CRDs of the config | get on `/api`, `/apis` |
//! | `[operator] uses`: scripts' `k8s::<verb>` calls | the verb (`apply`: create, patch; `patch_status`: patch on `<plural>/status`; `replace`: update) |
//! | sharded mode (`--shards`): the sharder's label patches, the shard Leases watched, the assignment webhook's configuration | [`shards`] |
//! | a console off loopback (`generate rbac --console-off-loopback`): TokenReview, SubjectAccessReview | create on `tokenreviews`, `subjectaccessreviews` |
//! | `ctx.secret`: `[operator] secrets`, each watched by name | get, list, watch on `secrets` by name (all of them for the opt-in `"*"`) |
//!
//! A Secret named `namespace/name` is granted by a Role in that namespace alone; an unqualified
//! name where the operator watches (a Role per watched namespace, or the ClusterRole).
//!
//! `khai diff` gets its own, read-only but for `create` and `patch` on the owned kinds, which
//! its server-side apply dry runs need ([`diff`]).
//!
//! A namespaced operator (`[operator] namespaces`, or `--watch-namespace`) gets a Role in each
//! namespace, and a ClusterRole only for what is cluster-scoped.

pub(crate) mod diff;
mod named;
mod objects;
mod own;
mod rules;
pub(crate) mod shards;
mod workloads;

pub(crate) use objects::{manifests, name};
pub(crate) use own::console_reviews;
pub(crate) use rules::Rules;

use crate::config::kind::KindRef;
use crate::config::model::Model;
use std::collections::BTreeMap;

/// What RBAC is generated for.
#[derive(Debug, Clone)]
pub(crate) struct Input<'a> {
    pub model: &'a Model,
    /// Per controller, in config order: whether its script defines `finalize`.
    pub finalizes: Vec<bool>,
    /// Namespaces watched; overrides `[operator] namespaces` when non-empty.
    pub watch_namespaces: Vec<String>,
    /// The ConfigMap in khai's namespace that khai reads its config from through the API
    /// (`khai run --config configmap:NS/NAME`), if it does.
    pub config_map: Option<String>,
    /// How khai runs sharded (`khai run --shards`), if it does: [`shards`] adds what that calls.
    pub shards: Option<shards::Sharding>,
}

/// A kind as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resource {
    pub group: String,
    pub plural: String,
    pub namespaced: bool,
    /// A CRD of this config with a status schema: khai writes its status subresource.
    pub status: bool,
}

/// Resolves a kind as written in the config, without a cluster: a CRD of the config, a
/// built-in kind khai knows, or what the spelling says.
pub(crate) fn resolve(model: &Model, written: &KindRef) -> Resource {
    let offline = model.resolve_kind(written);
    let crd = model.crd_for(written);
    Resource {
        group: offline.kind.group.unwrap_or_default(),
        plural: offline.plural,
        namespaced: offline.namespaced,
        status: crd.is_some_and(|c| c.status.is_some()),
    }
}

/// Verbs per (api group, resource, resource names), kept sorted so output is stable.
/// what in khai's own namespace.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Rules of the ClusterRole.
    pub cluster: Rules,
    /// Rules of the Role in each watched namespace (empty for a cluster-wide operator).
    pub namespaced: Rules,
    /// Watched namespaces; empty means the whole cluster.
    pub namespaces: Vec<String>,
    /// Rules of the Role in khai's own namespace (the leader election Lease).
    pub own: Rules,
    /// Rules of the Role that lets khai read its config's ConfigMap (that one, by name) and
    /// record Events about it; empty unless the config comes from a ConfigMap.
    pub config: Rules,
    /// Rules of a Role per namespace for the `namespace/name` entries of `[operator] secrets`.
    pub secrets: BTreeMap<String, Rules>,
}

/// Derives the RBAC plan for `input`.
pub(crate) fn plan(input: &Input<'_>) -> Plan {
    let model = input.model;
    let namespaces = if input.watch_namespaces.is_empty() {
        model.operator.namespaces.clone()
    } else {
        input.watch_namespaces.clone()
    };
    let mut p = Plan {
        namespaces,
        ..Plan::default()
    };
    let needs_discovery = workloads::grant(model, &input.finalizes, &mut p);
    own::grant(model, input.config_map.as_ref(), needs_discovery, &mut p);
    named::grant(model, &mut p);
    if let Some(sharding) = input.shards {
        p.add_sharding(&shards::extra(model, &p.namespaces, sharding));
    }
    p
}

impl Plan {
    /// Whether the operator watches some namespaces only, rather than the whole cluster.
    fn scoped(&self) -> bool {
        !self.namespaces.is_empty()
    }

    /// Grants `verbs` on `resource` of `r`'s group: in the Roles of a namespaced operator
    /// when `r` is namespaced, else cluster-wide.
    fn grant(&mut self, r: &Resource, resource: &str, verbs: &[&str]) {
        let rules = if self.scoped() && r.namespaced {
            &mut self.namespaced
        } else {
            &mut self.cluster
        };
        rules.add(&r.group, resource, verbs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use serde_json::json;
    use std::path::Path;

    const HELLO: &str = r#"
[operator]
name = "hello"

[[crd]]
group = "examples.khai.dev"
kind = "Hello"
versions = ["v1"]
status.phase = { type = "string" }

[[controller]]
for = "Hello"
owns = ["v1/ConfigMap"]
watches = [{ kind = "apps/v1/Deployment", label = "hello" }]
script = "h.rhai"
"#;

    fn input(model: &Model, finalize: bool, ns: &[&str]) -> Plan {
        plan(&Input {
            model,
            finalizes: vec![finalize],
            watch_namespaces: ns.iter().map(|s| s.to_string()).collect(),
            config_map: None,
            shards: None,
        })
    }

    fn rule(rules: &Rules, group: &str, resource: &str) -> Vec<String> {
        rules.verbs(group, resource)
    }

    #[test]
    fn a_console_off_loopback_may_review_tokens_cluster_wide() {
        let model = parse(Path::new("operator.toml"), HELLO).unwrap();
        let mut p = input(&model, false, &["team"]);
        assert!(rule(&p.cluster, "authentication.k8s.io", "tokenreviews").is_empty());
        console_reviews(&mut p);
        assert_eq!(
            rule(&p.cluster, "authentication.k8s.io", "tokenreviews"),
            ["create"]
        );
        assert_eq!(
            rule(&p.cluster, "authorization.k8s.io", "subjectaccessreviews"),
            ["create"]
        );
    }

    #[test]
    fn uses_grants_exactly_the_verbs_scripts_call() {
        let src = HELLO.replace(
            "name = \"hello\"",
            "name = \"hello\"\nuses = [{ kind = \"v1/Pod\", verbs = [\"get\", \"list\", \"patch\"] }, \
             { kind = \"apps/v1/Deployment\", verbs = [\"apply\", \"patch_status\"] }, \
             { kind = \"v1/Secret\", verbs = [\"replace\"] }]",
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        assert_eq!(rule(&p.cluster, "", "pods"), ["get", "list", "patch"]);
        assert_eq!(
            rule(&p.cluster, "apps", "deployments"),
            ["create", "get", "list", "patch", "watch"]
        );
        assert_eq!(rule(&p.cluster, "apps", "deployments/status"), ["patch"]);
        assert_eq!(rule(&p.cluster, "", "secrets"), ["update"], "a PUT");
    }

    #[test]
    fn cluster_wide_operator_gets_one_cluster_role_with_every_call_it_makes() {
        let model = parse(Path::new("operator.toml"), HELLO).unwrap();
        let p = input(&model, false, &[]);
        let g = "examples.khai.dev";
        assert_eq!(rule(&p.cluster, g, "hellos"), ["get", "list", "watch"]);
        assert_eq!(rule(&p.cluster, g, "hellos/status"), ["patch"]);
        assert_eq!(rule(&p.cluster, g, "hellos/finalizers"), ["update"]);
        assert_eq!(
            rule(&p.cluster, "", "configmaps"),
            ["create", "delete", "get", "list", "patch", "watch"]
        );
        assert_eq!(
            rule(&p.cluster, "apps", "deployments"),
            ["get", "list", "watch"]
        );
        assert_eq!(
            rule(&p.cluster, "events.k8s.io", "events"),
            ["create", "patch"]
        );
        assert_eq!(
            rule(&p.own, "coordination.k8s.io", "leases"),
            ["create", "get", "update"]
        );
        assert_eq!(
            rule(
                &p.cluster,
                "apiextensions.k8s.io",
                "customresourcedefinitions"
            ),
            ["create", "list", "watch", "get", "patch"]
        );
        assert!(p.namespaced.is_empty());
        assert!(p.cluster.has_url("/apis"), "discovery for built-in kinds");
    }

    #[test]
    fn finalize_in_the_script_grants_patch_on_the_primary() {
        let model = parse(Path::new("operator.toml"), HELLO).unwrap();
        let p = input(&model, true, &[]);
        assert_eq!(
            rule(&p.cluster, "examples.khai.dev", "hellos"),
            ["get", "list", "patch", "watch"]
        );
    }

    /// khai deleting children itself holds the object with its finalizer, without `finalize` in
    /// the script, so it needs to patch the primary.
    #[test]
    fn deleting_children_itself_grants_patch_on_the_primary() {
        for option in ["unowned_children = true", "delete_children = \"ordered\""] {
            let src = HELLO.replace(
                "script = \"h.rhai\"",
                &format!("script = \"h.rhai\"\n{option}"),
            );
            let model = parse(Path::new("operator.toml"), &src).unwrap();
            let p = input(&model, false, &[]);
            assert_eq!(
                rule(&p.cluster, "examples.khai.dev", "hellos"),
                ["get", "list", "patch", "watch"],
                "{option}"
            );
        }
    }

    /// Handlers record their progress with a patch of the object; timers watch their kind.
    #[test]
    fn handlers_grant_patch_on_their_kind_and_timers_watch_theirs() {
        let src = format!(
            "{HELLO}\n[[handler]]\nfor = \"Hello\"\non = \"create\"\nscript = \"h.rhai\"\n\
             function = \"on_create\"\n\n[[timer]]\nfor = \"apps/v1/StatefulSet\"\nscript = \"h.rhai\"\n\
             function = \"tick\"\ninterval = \"1m\"\n"
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        let g = "examples.khai.dev";
        assert_eq!(
            rule(&p.cluster, g, "hellos"),
            ["get", "list", "patch", "watch"]
        );
        assert_eq!(rule(&p.cluster, g, "hellos/status"), ["patch"]);
        assert_eq!(
            rule(&p.cluster, "apps", "statefulsets"),
            ["get", "list", "watch"]
        );
    }

    /// A namespaced operator records Events about a cluster-scoped object in `default` (or
    /// `kube-system`), outside its Roles: the ClusterRole grants them.
    #[test]
    fn a_namespaced_operator_of_a_cluster_scoped_kind_records_events_cluster_wide() {
        let events = |p: &Plan| rule(&p.cluster, "events.k8s.io", "events");
        let model = parse(Path::new("operator.toml"), HELLO).unwrap();
        let p = input(&model, false, &["team-a"]);
        assert!(events(&p).is_empty(), "a namespaced kind: Roles only");
        assert_eq!(
            rule(&p.namespaced, "events.k8s.io", "events"),
            ["create", "patch"]
        );
        let cluster = HELLO.replace(
            "versions = [\"v1\"]",
            "versions = [\"v1\"]\nscope = \"Cluster\"",
        );
        let model = parse(Path::new("operator.toml"), &cluster).unwrap();
        let p = input(&model, false, &["team-a"]);
        assert_eq!(events(&p), ["create", "patch"]);
    }

    /// An index over Pods needs a rule on `pods`, and a config without a controller one on
    /// Events, since handlers, timers and daemons record them.
    #[test]
    fn indexes_watch_their_kind_and_handlers_timers_daemons_record_events() {
        let crd = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Thing\"\nversions = [\"v1\"]\n";
        let events = |p: &Plan| rule(&p.cluster, "events.k8s.io", "events");
        let index = format!(
            "{crd}[[index]]\nname = \"by_node\"\nfor = \"v1/Pod\"\nscript = \"i.rhai\"\nfunction = \"f\"\n"
        );
        let model = parse(Path::new("operator.toml"), &index).unwrap();
        let p = input(&model, false, &[]);
        assert_eq!(rule(&p.cluster, "", "pods"), ["get", "list", "watch"]);
        assert!(p.cluster.has_url("/api"), "discovery for the index's kind");
        assert!(events(&p).is_empty(), "an index alone records no Event");
        for entry in [
            "[[handler]]\nfor = \"Thing\"\non = \"create\"\nscript = \"h.rhai\"\nfunction = \"f\"\n",
            "[[timer]]\nfor = \"Thing\"\nscript = \"h.rhai\"\nfunction = \"f\"\ninterval = \"1m\"\n",
            "[[daemon]]\nfor = \"Thing\"\nscript = \"h.rhai\"\ntick = \"f\"\ninterval = \"1m\"\n",
        ] {
            let model = parse(Path::new("operator.toml"), &format!("{crd}{entry}")).unwrap();
            let p = input(&model, false, &[]);
            assert_eq!(events(&p), ["create", "patch"], "{entry}");
        }
    }

    /// A Role grants nothing on a cluster-scoped resource: `extra_rbac` on one (`bind` on
    /// `clusterroles`, as examples/access needs) goes to the ClusterRole of a namespaced
    /// operator, and so does a rule marked `cluster = true`; the rest stays in the Roles.
    #[test]
    fn namespaced_operator_grants_extra_rules_on_cluster_scoped_resources_cluster_wide() {
        let src = format!(
            "{HELLO}\n[[operator.extra_rbac]]\napi_groups = [\"rbac.authorization.k8s.io\"]\n\
             resources = [\"clusterroles\", \"roles\"]\nverbs = [\"bind\", \"escalate\"]\n\
             [[operator.extra_rbac]]\napi_groups = [\"\"]\nresources = [\"configmaps\"]\n\
             verbs = [\"deletecollection\"]\ncluster = true\n"
        )
        .replace("name = \"hello\"", "name = \"hello\"\nnamespaces = [\"a\"]");
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        let rbac = "rbac.authorization.k8s.io";
        assert_eq!(rule(&p.cluster, rbac, "clusterroles"), ["bind", "escalate"]);
        assert!(rule(&p.namespaced, rbac, "clusterroles").is_empty());
        assert_eq!(rule(&p.namespaced, rbac, "roles"), ["bind", "escalate"]);
        assert!(rule(&p.cluster, rbac, "roles").is_empty());
        assert_eq!(rule(&p.cluster, "", "configmaps"), ["deletecollection"]);
    }

    #[test]
    fn namespaced_operator_keeps_only_crds_in_the_cluster_role() {
        let src = format!(
            "{HELLO}\n[[operator.extra_rbac]]\napi_groups = [\"\"]\nresources = [\"secrets\"]\nverbs = [\"get\"]\n"
        )
        .replace("name = \"hello\"", "name = \"hello\"\nnamespaces = [\"a\", \"b\"]");
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        assert_eq!(p.namespaces, ["a", "b"]);
        assert!(rule(&p.cluster, "examples.khai.dev", "hellos").is_empty());
        assert_eq!(rule(&p.namespaced, "", "secrets"), ["get"]);
        assert!(
            !rule(
                &p.cluster,
                "apiextensions.k8s.io",
                "customresourcedefinitions"
            )
            .is_empty()
        );
        let docs = manifests(&model, "ops", &p);
        let kinds: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("ServiceAccount", "ops"),
                ("ClusterRole", ""),
                ("ClusterRoleBinding", ""),
                ("Role", "a"),
                ("RoleBinding", "a"),
                ("Role", "b"),
                ("RoleBinding", "b"),
                ("Role", "ops"),
                ("RoleBinding", "ops"),
            ]
        );
        assert_eq!(docs[4]["subjects"][0]["namespace"], "ops");
    }

    #[test]
    fn self_signed_webhooks_grant_their_configurations_and_crd_conversion_by_name() {
        let src = format!(
            "{HELLO}\n[[webhook]]\nfor = \"Hello\"\nscript = \"w.rhai\"\nvalidate = \"v\"\n"
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        let reg = "admissionregistration.k8s.io";
        assert_eq!(
            rule(&p.cluster, reg, "validatingwebhookconfigurations"),
            ["create", "delete", "get", "patch"]
        );
        // Not used: only what deleting a leftover from an earlier version needs.
        assert_eq!(
            rule(&p.cluster, reg, "mutatingwebhookconfigurations"),
            ["delete", "get"]
        );
        let named = p
            .cluster
            .policy_rules()
            .into_iter()
            .find(|r| {
                r["resources"][0] == "validatingwebhookconfigurations"
                    && r.get("resourceNames").is_some()
            })
            .unwrap();
        assert_eq!(named["resourceNames"], json!(["khai-hello"]));
    }

    /// The shared CA's Secret, in khai's own namespace: create for any name (RBAC cannot limit
    /// a create to one), get and update by name; not with certificate files or no webhook.
    #[test]
    fn self_signed_webhooks_grant_the_shared_cas_secret_in_khais_namespace_only() {
        let hook = "\n[[webhook]]\nfor = \"Hello\"\nscript = \"w.rhai\"\nvalidate = \"v\"\n";
        let model = parse(Path::new("operator.toml"), &format!("{HELLO}{hook}")).unwrap();
        let p = input(&model, false, &[]);
        let secrets: Vec<serde_json::Value> = p
            .own
            .policy_rules()
            .into_iter()
            .filter(|r| r["resources"] == json!(["secrets"]))
            .collect();
        assert_eq!(
            secrets,
            [
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["create"] }),
                json!({ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
                        "resourceNames": ["khai-hello-webhook-tls"] }),
            ]
        );
        assert!(rule(&p.cluster, "", "secrets").is_empty());
        let files = "\n[webhook_server]\ntls = \"files\"\ncert_file = \"c\"\nkey_file = \"k\"\n";
        for src in [HELLO.to_string(), format!("{HELLO}{hook}{files}")] {
            let model = parse(Path::new("operator.toml"), &src).unwrap();
            let p = input(&model, false, &[]);
            assert!(rule(&p.own, "", "secrets").is_empty(), "{src}");
        }
    }

    #[test]
    fn secrets_are_granted_by_name_only_where_they_are_read() {
        let src = HELLO.replace(
            "name = \"hello\"",
            "name = \"hello\"\nsecrets = [\"db-credentials\", \"billing/api-token\"]",
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &[]);
        let named = |rules: &Rules| {
            rules
                .policy_rules()
                .into_iter()
                .filter(|r| r["resources"] == json!(["secrets"]))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            named(&p.cluster),
            [json!({ "apiGroups": [""], "resources": ["secrets"],
                     "verbs": ["get", "list", "watch"], "resourceNames": ["db-credentials"] })]
        );
        assert_eq!(
            named(&p.secrets["billing"]),
            [json!({ "apiGroups": [""], "resources": ["secrets"],
                     "verbs": ["get", "list", "watch"], "resourceNames": ["api-token"] })]
        );
        let out = manifests(&model, "khai-system", &p);
        assert!(out.iter().any(|m| m["kind"] == "Role"
            && m["metadata"]["name"] == "khai-hello-secrets"
            && m["metadata"]["namespace"] == "billing"));
        // A namespaced operator reads unqualified Secrets in its namespaces only.
        let p = input(&model, false, &["a"]);
        assert!(named(&p.cluster).is_empty());
        assert_eq!(named(&p.namespaced).len(), 1);
    }

    #[test]
    fn the_opt_in_star_grants_every_secret_of_its_namespaces_without_resource_names() {
        let src = HELLO.replace(
            "name = \"hello\"",
            "name = \"hello\"\nsecrets = [\"db-credentials\", \"*\", \"billing/*\"]",
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let p = input(&model, false, &["a"]);
        let all = json!({ "apiGroups": [""], "resources": ["secrets"],
                          "verbs": ["get", "list", "watch"] });
        let secret_rules = |rules: &Rules| {
            rules
                .policy_rules()
                .into_iter()
                .filter(|r| r["resources"] == json!(["secrets"]))
                .collect::<Vec<_>>()
        };
        assert_eq!(secret_rules(&p.namespaced), std::slice::from_ref(&all));
        assert_eq!(secret_rules(&p.secrets["billing"]), [all]);
        assert!(secret_rules(&p.cluster).is_empty());
    }

    #[test]
    fn resolve_reads_every_spelling_offline() {
        let model = parse(Path::new("operator.toml"), HELLO).unwrap();
        assert_eq!(resolve(&model, &"Hello".parse().unwrap()).plural, "hellos");
        assert_eq!(
            resolve(&model, &"Hello.examples.khai.dev".parse().unwrap()).group,
            "examples.khai.dev"
        );
        let ns = resolve(&model, &"v1/Namespace".parse().unwrap());
        assert_eq!((ns.group.as_str(), ns.namespaced), ("", false));
        // A bare built-in kind is in its own group, not the core group.
        let bare = resolve(&model, &"Deployment".parse().unwrap());
        assert_eq!(bare.group, "apps");
        let d = resolve(&model, &"Deployment.apps".parse().unwrap());
        assert_eq!(
            (d.group.as_str(), d.plural.as_str()),
            ("apps", "deployments")
        );
    }
}
