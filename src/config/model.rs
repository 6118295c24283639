//! The operator model: what `operator.toml` (or `operator.yaml`) declares.
//!
//! These types mirror the file one to one and are deserialized with `deny_unknown_fields`, so a
//! misspelled key is an error rather than a silently ignored setting. Checks that need more than
//! one field (a controller naming a kind no CRD declares, two storage versions) live in
//! [`super::validate`], which runs once after parsing; nothing downstream validates again.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole operator, as written by its author.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
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
    /// Field manager used for every server-side apply.
    #[serde(default = "default_field_manager")]
    pub field_manager: String,
    /// Namespaces to watch; empty means the whole cluster.
    #[serde(default)]
    pub namespaces: Vec<String>,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        Self {
            name: default_operator_name(),
            install_crds: true,
            field_manager: default_field_manager(),
            namespaces: Vec::new(),
        }
    }
}

fn default_operator_name() -> String {
    "khai".into()
}
fn default_field_manager() -> String {
    "khai".into()
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
    /// Schema of `.spec`, field by field.
    #[serde(default)]
    pub spec: IndexMap<String, Field>,
    /// Schema of `.status`; declaring it turns on the status subresource.
    pub status: Option<IndexMap<String, Field>>,
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

/// `[[controller]]`: one reconcile loop.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    /// Name used in logs and metrics; defaults to the lower-cased kind.
    pub name: Option<String>,
    /// The reconciled kind: a CRD kind of this file, `group/version/Kind`, `v1/Kind` or `Kind.group`.
    #[serde(rename = "for")]
    pub for_kind: String,
    /// Kinds of children this controller creates; their changes re-trigger the owner.
    #[serde(default)]
    pub owns: Vec<String>,
    /// The Rhai script, relative to the config file.
    pub script: PathBuf,
    /// Name of the reconcile function in the script.
    #[serde(default = "default_reconcile")]
    pub reconcile: String,
}

fn default_reconcile() -> String {
    "reconcile".into()
}

impl Controller {
    /// The name used in logs: the explicit one, or the lower-cased kind.
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            let kind = self.for_kind.rsplit('/').next().unwrap_or(&self.for_kind);
            kind.split('.').next().unwrap_or(kind).to_lowercase()
        })
    }
}
