//! The operator model: what `operator.toml` (or `operator.yaml`) declares.
//!
//! These types mirror the file one to one and are deserialized with `deny_unknown_fields`, so a
//! misspelled key is an error rather than a silently ignored setting. Checks that need more than
//! one field (a controller naming a kind no CRD declares, two storage versions) live in
//! [`super::validate`], which runs once after parsing; nothing downstream validates again.

use super::duration::Duration;
use super::kind::KindRef;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole operator, as written by its author.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Settings of the daemon as a whole.
    #[serde(default)]
    pub operator: OperatorSettings,
    /// Custom resource definitions khai generates and installs.
    #[serde(default, rename = "crd")]
    pub crds: Vec<Crd>,
    /// Reconcile loops.
    #[serde(default, rename = "controller")]
    pub controllers: Vec<Controller>,
    /// Free-form settings handed to every script as `ctx.params`.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Admission and conversion webhooks, served over TLS by `khai run`.
    #[serde(default, rename = "webhook")]
    pub webhooks: Vec<super::webhook::Webhook>,
    /// The webhook server: TLS mode, certificate files, the Service it is reached through.
    #[serde(default)]
    pub webhook_server: super::webhook::WebhookServer,
    /// Functions run on changes to objects: create, update, delete, resume, field, event.
    #[serde(default, rename = "handler")]
    pub handlers: Vec<super::handlers::Handler>,
    /// Functions run every interval for each object.
    #[serde(default, rename = "timer")]
    pub timers: Vec<super::handlers::Timer>,
    /// Per-object loops with state.
    #[serde(default, rename = "daemon")]
    pub daemons: Vec<super::handlers::Daemon>,
    /// Lookup tables over a kind, read by every script as `ctx.index(name, key)`.
    #[serde(default, rename = "index")]
    pub indexes: Vec<super::handlers::Index>,
}

/// `[operator]`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OperatorSettings {
    /// Name of the operator; used in labels and as the default field manager suffix.
    #[serde(default = "default_operator_name")]
    pub name: String,
    /// Install or update the declared CRDs at start (server-side apply) and wait until Established.
    #[serde(default = "yes")]
    pub install_crds: bool,
    /// Field manager of every server-side apply; defaults to `name`.
    pub field_manager: Option<String>,
    /// Take over fields another manager owns when applying children (server-side apply
    /// `force`). Off, a conflict fails the reconcile and names the other manager.
    #[serde(default = "yes")]
    pub force_apply: bool,
    /// Namespaces to watch; empty means the whole cluster.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// `[[operator.extra_rbac]]`: rules `khai generate rbac` adds to the derived ones, for what
    /// the scripts reach that the config cannot show.
    #[serde(default)]
    pub extra_rbac: Vec<RbacRule>,
    /// `fn name(ctx)` run once when khai starts, before anything is reconciled (to fill
    /// `ctx.memo`, which every object's memo starts from).
    pub startup: Option<super::handlers::Hook>,
    /// `fn name(ctx)` run once when khai stops.
    pub cleanup: Option<super::handlers::Hook>,
    /// Requests a second khai may send to the API server on average (client-side rate limit,
    /// controller-runtime's default 20); `0` turns the limit off. `khai run --kube-api-qps`
    /// overrides it.
    #[serde(default = "default_qps", deserialize_with = "non_negative")]
    pub qps: f64,
    /// Requests that may leave at once after a quiet spell (controller-runtime's default 30).
    /// `khai run --kube-api-burst` overrides it.
    #[serde(default = "default_burst", deserialize_with = "at_least_one")]
    pub burst: u32,
}

/// One `[[operator.extra_rbac]]` rule, as in a Kubernetes PolicyRule.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RbacRule {
    /// API groups; `""` is the core group.
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    /// Restrict the rule to these object names.
    #[serde(default)]
    pub resource_names: Vec<String>,
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
            startup: None,
            cleanup: None,
            qps: default_qps(),
            burst: default_burst(),
        }
    }
}

fn default_qps() -> f64 {
    crate::client::rate_limit::DEFAULT_QPS
}

fn default_burst() -> u32 {
    crate::client::rate_limit::DEFAULT_BURST
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
    /// The client-side rate limit the config asks for.
    pub fn limits(&self) -> crate::client::Limits {
        crate::client::Limits {
            qps: self.qps,
            burst: self.burst,
        }
    }

    /// The field manager of every server-side apply: `field_manager`, else the operator's name,
    /// so `kubectl get -o yaml --show-managed-fields` says which operator owns a field.
    pub fn field_manager(&self) -> &str {
        self.field_manager.as_deref().unwrap_or(&self.name)
    }
}
fn yes() -> bool {
    true
}

/// `[[crd]]`: one custom resource definition.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Crd {
    pub group: String,
    pub kind: String,
    /// Lower-case plural; derived from `kind` when omitted.
    pub plural: Option<String>,
    /// Lower-case singular; derived from `kind` when omitted.
    pub singular: Option<String>,
    #[serde(default)]
    pub short_names: Vec<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    #[serde(default)]
    pub scope: Scope,
    /// Served versions; the one marked `storage` (or the only one) is stored.
    pub versions: Vec<CrdVersion>,
    /// Extra columns of `kubectl get`, the same in every version.
    #[serde(default)]
    pub printer_columns: Vec<PrinterColumn>,
    /// The scale subresource (`kubectl scale`, HorizontalPodAutoscaler).
    pub scale: Option<Scale>,
    /// A raw OpenAPI v3 schema (YAML or JSON) used as the whole `openAPIV3Schema`, for schemas
    /// the compact form cannot say; relative to the config file and exclusive with `spec` and
    /// `status`.
    pub schema_file: Option<PathBuf>,
    /// The content of `schema_file`, read by [`crate::config::load`] so that generating and
    /// installing CRDs needs no file access. Never written by authors.
    #[serde(skip)]
    pub raw_schema: Option<serde_json::Value>,
    /// Schema of `.spec`, field by field.
    #[serde(default)]
    pub spec: IndexMap<String, Field>,
    /// Schema of `.status`; declaring it turns on the status subresource.
    pub status: Option<IndexMap<String, Field>>,
}

/// One `[[crd.printer_columns]]` entry: an `additionalPrinterColumns` column of `kubectl get`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
    /// Simple JSON path into the object, such as `.spec.replicas`.
    pub json_path: String,
    pub description: Option<String>,
    /// 0 shows the column always; higher values only in `kubectl get -o wide`.
    pub priority: Option<u32>,
    pub format: Option<ColumnFormat>,
}

/// How `kubectl get` renders a printer column's value.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    Integer,
    Number,
    String,
    Boolean,
    /// Rendered as an age, e.g. `.metadata.creationTimestamp`.
    Date,
}

/// The OpenAPI formats Kubernetes accepts on a printer column.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ColumnFormat {
    Int32,
    Int64,
    Float,
    Double,
    Byte,
    Date,
    DateTime,
    Password,
}

/// `scale = { ... }`: where the scale subresource reads and writes replica counts.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scale {
    /// Desired replicas, a path under `.spec` such as `.spec.replicas`.
    pub spec_replicas_path: String,
    /// Observed replicas, a path under `.status` such as `.status.replicas`.
    pub status_replicas_path: String,
    /// A label selector in string form under `.spec` or `.status`; needed by the
    /// HorizontalPodAutoscaler.
    pub label_selector_path: Option<String>,
}

/// Whether the custom resource lives in a namespace.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum Scope {
    #[default]
    Namespaced,
    Cluster,
}

/// A CRD version: either `"v1"` or `{ name = "v1", served = true, storage = true }`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum CrdVersion {
    Name(String),
    Full(CrdVersionSpec),
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CrdVersionSpec {
    pub name: String,
    #[serde(default = "yes")]
    pub served: bool,
    #[serde(default)]
    pub storage: bool,
}

impl CrdVersion {
    pub fn name(&self) -> &str {
        match self {
            CrdVersion::Name(n) => n,
            CrdVersion::Full(v) => &v.name,
        }
    }
    pub fn served(&self) -> bool {
        match self {
            CrdVersion::Name(_) => true,
            CrdVersion::Full(v) => v.served,
        }
    }
    pub fn storage_flag(&self) -> bool {
        matches!(self, CrdVersion::Full(v) if v.storage)
    }
}

/// The compact typed schema of one field; turned into structural OpenAPI v3 by `schema`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Field {
    #[serde(rename = "type")]
    pub ty: FieldType,
    pub description: Option<String>,
    #[serde(default)]
    pub required: bool,
    pub default: Option<serde_json::Value>,
    #[serde(rename = "enum")]
    pub enum_values: Option<Vec<serde_json::Value>>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<String>,
    pub format: Option<String>,
    #[serde(default)]
    pub nullable: bool,
    /// For `type = "array"`: the schema of each item.
    pub items: Option<Box<Field>>,
    /// For `type = "object"`: named fields.
    pub properties: Option<IndexMap<String, Field>>,
    /// For `type = "map"`: the schema of each value.
    pub values: Option<Box<Field>>,
    /// Keep fields the schema does not name (`x-kubernetes-preserve-unknown-fields`).
    #[serde(default)]
    pub preserve_unknown_fields: bool,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FieldType {
    #[default]
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
    /// An object whose keys are free and whose values share one schema.
    Map,
    /// `x-kubernetes-int-or-string`.
    IntOrString,
}

impl FieldType {
    /// The name authors write in `type = "..."`.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Object => "object",
            FieldType::Array => "array",
            FieldType::Map => "map",
            FieldType::IntOrString => "int-or-string",
        }
    }
}

/// `[[controller]]`: one reconcile loop.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    /// Name used in logs and metrics; defaults to the lower-cased kind.
    pub name: Option<String>,
    /// The reconciled kind: a CRD kind of this file, `group/version/Kind`, `v1/Kind` or `Kind.group`.
    #[serde(rename = "for")]
    pub for_kind: KindRef,
    /// Kinds of children this controller creates; their changes re-trigger the owner.
    #[serde(default)]
    pub owns: Vec<KindRef>,
    /// The Rhai script, relative to the config file.
    pub script: PathBuf,
    /// Name of the reconcile function in the script.
    #[serde(default = "default_reconcile")]
    pub reconcile: String,
    /// Related kinds whose changes re-trigger parents, mapped by a label or a script function.
    #[serde(default)]
    pub watches: Vec<Watch>,
    /// Only reconcile objects matching this label selector (`app=web,tier!=db`); applied to the
    /// list/watch itself, so other objects are never sent to khai.
    pub selector: Option<String>,
    /// Only reconcile objects matching this field selector (`metadata.name=x`); also server-side.
    pub field_selector: Option<String>,
    /// Only reconcile objects carrying every one of these annotations.
    #[serde(default)]
    pub annotations: Vec<String>,
    /// Name of a script function `when(obj)` returning true for objects to reconcile.
    pub when: Option<String>,
    /// How many objects may reconcile at once (never the same object twice); 0 is unbounded.
    #[serde(default = "default_concurrency")]
    pub concurrency: u16,
    /// Reconcile every object again this often even without changes (`"10m"`); off by default.
    pub resync: Option<Duration>,
    /// Per-object retry backoff after failures.
    #[serde(default)]
    pub backoff: BackoffSettings,
    /// Also reconcile on changes to the object's status alone (off: spec, labels, annotations,
    /// finalizers and deletion trigger reconciles, the controller's own status writes do not).
    #[serde(default)]
    pub reconcile_on_status: bool,
}

fn default_reconcile() -> String {
    "reconcile".into()
}
/// Enough that a burst of new objects is limited by the API server, not by khai (at 4, khai
/// fell seconds behind 1,000 creates in `scripts/bench`); bounded, unlike kube-runtime's
/// default, so a resync or a reload of thousands of objects cannot open thousands of
/// connections to the API server at once.
fn default_concurrency() -> u16 {
    64
}

/// `[[controller.watches]]`: a related kind and how its objects name their parents.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(try_from = "WatchEntry", into = "WatchEntry")]
pub struct Watch {
    pub kind: KindRef,
    pub parents: Parents,
}

/// How a related object names the parents it re-triggers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parents {
    /// A label on the related object whose value is the parent's name (same namespace).
    Label(String),
    /// A script function `map(obj)` returning a parent name, an array of names, or maps
    /// `#{ name, namespace }`.
    Map(String),
}

/// A `watches` entry as written: exactly one of `label` and `map`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct WatchEntry {
    kind: KindRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<String>,
}

impl TryFrom<WatchEntry> for Watch {
    type Error = &'static str;
    fn try_from(w: WatchEntry) -> Result<Self, Self::Error> {
        let parents = match (w.label, w.map) {
            (Some(l), None) => Parents::Label(l),
            (None, Some(m)) => Parents::Map(m),
            _ => {
                return Err(
                    "set exactly one of `label` (names the parent) or `map` (a script function)",
                );
            }
        };
        Ok(Self {
            kind: w.kind,
            parents,
        })
    }
}

impl From<Watch> for WatchEntry {
    fn from(w: Watch) -> Self {
        let (label, map) = match w.parents {
            Parents::Label(l) => (Some(l), None),
            Parents::Map(m) => (None, Some(m)),
        };
        Self {
            kind: w.kind,
            label,
            map,
        }
    }
}

/// `backoff = { base = "1s", cap = "5m" }`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackoffSettings {
    #[serde(default = "default_backoff_base")]
    pub base: Duration,
    #[serde(default = "default_backoff_cap")]
    pub cap: Duration,
}

impl Default for BackoffSettings {
    fn default() -> Self {
        Self {
            base: default_backoff_base(),
            cap: default_backoff_cap(),
        }
    }
}
fn default_backoff_base() -> Duration {
    Duration::from_secs(1)
}
fn default_backoff_cap() -> Duration {
    Duration::from_secs(300)
}

impl Controller {
    /// The name used in logs: the explicit one, or the lower-cased kind.
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.for_kind.kind.to_lowercase())
    }
}

impl Crd {
    pub fn plural(&self) -> String {
        self.plural
            .clone()
            .unwrap_or_else(|| super::kind::plural_of(&self.kind))
    }
    pub fn singular(&self) -> String {
        self.singular
            .clone()
            .unwrap_or_else(|| self.kind.to_lowercase())
    }
    /// `<plural>.<group>`, the CRD's object name.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural(), self.group)
    }
    /// The stored version: the one flagged `storage`, else the only (first) one.
    pub fn storage_version(&self) -> &str {
        self.versions
            .iter()
            .find(|v| v.storage_flag())
            .or(self.versions.first())
            .map_or("v1", |v| v.name())
    }
    /// The API resource khai watches and writes: the storage version.
    pub fn api_resource(&self) -> kube::core::ApiResource {
        let version = self.storage_version().to_string();
        kube::core::ApiResource {
            api_version: format!("{}/{}", self.group, version),
            group: self.group.clone(),
            version,
            kind: self.kind.clone(),
            plural: self.plural(),
        }
    }
}

/// Kinds the config names, resolved without a cluster.
impl Model {
    /// The CRD of this config that `kind` names, if any.
    pub fn crd_for(&self, kind: &KindRef) -> Option<&Crd> {
        self.crds.iter().find(|c| {
            c.kind == kind.kind
                && kind.group.as_ref().is_none_or(|g| *g == c.group)
                && kind
                    .version
                    .as_ref()
                    .is_none_or(|v| c.versions.iter().any(|cv| cv.name() == v))
        })
    }

    /// The kind as objects of it may be matched: group and version from a CRD of `model`, the
    /// group alone from khai's table of built-in kinds (objects may be at any version of it),
    /// else as written.
    pub fn complete_kind(&self, kind: &KindRef) -> KindRef {
        if let Some(c) = self.crd_for(kind) {
            return KindRef {
                group: Some(c.group.clone()),
                version: Some(
                    kind.version
                        .clone()
                        .unwrap_or_else(|| c.storage_version().to_string()),
                ),
                kind: c.kind.clone(),
            };
        }
        match kind.builtin() {
            Some(b) => KindRef {
                group: Some(b.group.to_string()),
                ..kind.clone()
            },
            None => kind.clone(),
        }
    }

    /// The kind with what the config's CRDs, then khai's table of built-in kinds, say about
    /// the parts left unwritten. A kind neither knows stays as written.
    pub fn resolve_kind(&self, kind: &KindRef) -> super::kind::Offline {
        if let Some(c) = self.crd_for(kind) {
            return super::kind::Offline {
                kind: KindRef {
                    group: Some(c.group.clone()),
                    version: Some(
                        kind.version
                            .clone()
                            .unwrap_or_else(|| c.storage_version().to_string()),
                    ),
                    kind: c.kind.clone(),
                },
                plural: c.plural(),
                namespaced: c.scope == Scope::Namespaced,
                known: true,
            };
        }
        if let Some(b) = kind.builtin() {
            return super::kind::Offline {
                kind: KindRef {
                    group: Some(b.group.to_string()),
                    version: Some(
                        kind.version
                            .clone()
                            .unwrap_or_else(|| b.version.to_string()),
                    ),
                    kind: b.kind.to_string(),
                },
                plural: super::kind::plural_of(b.kind),
                namespaced: b.namespaced,
                known: true,
            };
        }
        super::kind::Offline {
            kind: kind.clone(),
            plural: super::kind::plural_of(&kind.kind),
            namespaced: true,
            known: false,
        }
    }
}
