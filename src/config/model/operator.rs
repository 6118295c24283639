//! `[operator]`: settings of the daemon as a whole (name, leader election, client rate limits,
//! extra RBAC, start-up and clean-up hooks, what scripts may reach over HTTP and which Secrets
//! they may read).

use serde::{Deserialize, Serialize};

/// `[operator]`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OperatorSettings {
    /// Name of the operator; used in labels and as the default field manager suffix.
    #[serde(default = "default_operator_name")]
    pub name: String,
    /// Install or update the declared CRDs at start (server-side apply) and wait until Established.
    #[serde(default = "super::yes")]
    pub install_crds: bool,
    /// Field manager of every server-side apply; defaults to `name`.
    pub(crate) field_manager: Option<String>,
    /// Take over fields another manager owns when applying children (server-side apply
    /// `force`). Off, a conflict fails the reconcile and names the other manager.
    #[serde(default = "super::yes")]
    pub(crate) force_apply: bool,
    /// Namespaces to watch; empty means the whole cluster.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// `[[operator.extra_rbac]]`: rules `khai generate rbac` adds to the derived ones, for what
    /// the scripts reach that the config cannot show.
    #[serde(default)]
    pub extra_rbac: Vec<RbacRule>,
    /// `uses = [{ kind = "v1/Pod", verbs = ["get", "list", "patch"] }]`: the kinds scripts
    /// reach through the `k8s` module and the verbs they call on them. `khai generate rbac`
    /// grants exactly these, and `khai check` flags a `k8s::<verb>("<kind>", …)` call they do
    /// not declare.
    #[serde(default)]
    pub uses: Vec<Uses>,
    /// `fn name(ctx)` run once when khai starts, before anything is reconciled (to fill
    /// `ctx.memo`, which every object's memo starts from).
    pub startup: Option<crate::config::handlers::Hook>,
    /// `fn name(ctx)` run once when khai stops.
    pub cleanup: Option<crate::config::handlers::Hook>,
    /// Requests a second khai may send to the API server on average (client-side rate limit);
    /// `0`, the default, means no limit, as in controller-runtime and kube-rs. `khai run
    /// --kube-api-qps` overrides it.
    #[serde(default = "default_qps", deserialize_with = "non_negative")]
    pub qps: f64,
    /// Requests that may leave at once after a quiet spell, once `qps` is set (default 30).
    /// `khai run --kube-api-burst` overrides it.
    #[serde(default = "default_burst", deserialize_with = "at_least_one")]
    pub burst: u32,
    /// `[operator.http]`: the hosts scripts may reach with `http::request`, and its limits.
    #[serde(default)]
    pub http: crate::config::http::HttpSettings,
    /// Secrets scripts may read with `ctx.secret`: `"name"` (in the object's namespace) or
    /// `"namespace/name"`. RBAC grants reading exactly these.
    #[serde(default)]
    pub secrets: Vec<crate::config::http::SecretName>,
}

/// One entry of `[operator] uses`: a kind scripts call through the `k8s` module, and how.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Uses {
    /// Written as in `[[controller]] for`: `v1/Pod`, `apps/v1/Deployment`, a CRD's kind.
    pub kind: crate::config::kind::KindRef,
    /// The `k8s` verbs: `get`, `list`, `create`, `apply`, `patch`, `patch_status`, `replace`,
    /// `delete`
    /// (`label`, `annotate`, `patch_metadata` and `adopt` are `patch`).
    pub verbs: Vec<String>,
}

/// The verbs `[operator] uses` accepts.
pub(crate) const USES_VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "apply",
    "patch",
    "patch_status",
    "replace",
    "delete",
];

/// One `[[operator.extra_rbac]]` rule, as in a Kubernetes PolicyRule.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RbacRule {
    /// API groups; `""` is the core group.
    pub(crate) api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    /// Restrict the rule to these object names.
    #[serde(default)]
    pub(crate) resource_names: Vec<String>,
    /// Grant in the ClusterRole even when the operator watches only some namespaces (for
    /// cluster-scoped resources).
    #[serde(default)]
    pub cluster: bool,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        Self {
            name: default_operator_name(),
            install_crds: true,
            field_manager: None,
            force_apply: true,
            namespaces: Vec::new(),
            extra_rbac: Vec::new(),
            uses: Vec::new(),
            startup: None,
            cleanup: None,
            qps: default_qps(),
            burst: default_burst(),
            http: Default::default(),
            secrets: Vec::new(),
        }
    }
}

/// No client-side limit unless the operator sets one.
pub(crate) const DEFAULT_QPS: f64 = 0.0;
/// The burst once a `qps` is set (client-go's usual 30).
pub(crate) const DEFAULT_BURST: u32 = 30;

fn default_qps() -> f64 {
    DEFAULT_QPS
}

fn default_burst() -> u32 {
    DEFAULT_BURST
}

fn non_negative<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a number of requests a second, 0 or more (0: no limit), not {v}"
        )))
    }
}

fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v >= 1 {
        Ok(v)
    } else {
        Err(serde::de::Error::custom("must be 1 or more"))
    }
}

fn default_operator_name() -> String {
    "khai".into()
}
impl OperatorSettings {
    /// The field manager of every server-side apply: `field_manager`, else the operator's name,
    /// so `kubectl get -o yaml --show-managed-fields` says which operator owns a field.
    pub(crate) fn field_manager(&self) -> &str {
        self.field_manager.as_deref().unwrap_or(&self.name)
    }
}
