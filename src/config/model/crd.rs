//! `[[crd]]`: the custom resource definitions khai generates and installs: versions, the
//! compact typed schema of their fields, printer columns, scale and scope.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[[crd]]`: one custom resource definition.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Crd {
    pub group: String,
    pub kind: String,
    /// Lower-case plural; derived from `kind` when omitted.
    pub plural: Option<String>,
    /// Lower-case singular; derived from `kind` when omitted.
    pub(crate) singular: Option<String>,
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
    pub(crate) raw_schema: Option<serde_json::Value>,
    /// Schema of `.spec`, field by field.
    #[serde(default)]
    pub spec: IndexMap<String, Field>,
    /// Schema of `.status`; declaring it turns on the status subresource.
    pub status: Option<IndexMap<String, Field>>,
    /// CEL validation rules on the whole object (`self` is the object).
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Fields (`.spec.color`) that field selectors may name, in every version.
    #[serde(default)]
    pub selectable_fields: Vec<String>,
}

/// One CEL validation rule of a schema node, emitted in `x-kubernetes-validations`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The CEL expression that must be true; `self` is the node's value, `oldSelf` its value
    /// before an update (a transition rule).
    pub rule: String,
    /// What the API server answers when the rule is false.
    pub message: Option<String>,
    /// A CEL expression that builds the message instead.
    pub message_expression: Option<String>,
    /// The reason of the refusal.
    pub reason: Option<RuleReason>,
    /// The field the refusal names, relative to the node (`.spec.max`).
    pub field_path: Option<String>,
    /// Evaluate a transition rule on creates too, with `oldSelf` an optional.
    pub(crate) optional_old_self: Option<bool>,
}

/// The reasons a validation rule's refusal may carry.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[allow(
    clippy::enum_variant_names,
    reason = "Kubernetes' own reason names, which the CRD carries as written"
)]
pub enum RuleReason {
    FieldValueInvalid,
    FieldValueForbidden,
    FieldValueRequired,
    FieldValueDuplicate,
}

/// One `[[crd.printer_columns]]` entry: an `additionalPrinterColumns` column of `kubectl get`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    #[serde(rename = "type")]
    pub(crate) ty: ColumnType,
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
pub(crate) enum ColumnType {
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
    #[serde(default = "super::yes")]
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
    pub(crate) fn storage_flag(&self) -> bool {
        matches!(self, CrdVersion::Full(v) if v.storage)
    }
}

/// The compact typed schema of one field; turned into structural OpenAPI v3 by `schema`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Field {
    #[serde(rename = "type")]
    pub(crate) ty: FieldType,
    pub description: Option<String>,
    #[serde(default)]
    pub required: bool,
    pub default: Option<serde_json::Value>,
    #[serde(rename = "enum")]
    pub(crate) enum_values: Option<Vec<serde_json::Value>>,
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
    /// CEL validation rules on this node (`x-kubernetes-validations`).
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum FieldType {
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
    pub(crate) fn name(self) -> &'static str {
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

impl Crd {
    pub fn plural(&self) -> String {
        self.plural
            .clone()
            .unwrap_or_else(|| crate::config::kind::plural_of(&self.kind))
    }
    pub(crate) fn singular(&self) -> String {
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
