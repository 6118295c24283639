//! The webhook part of the operator model: `[[webhook]]` entries and `[webhook_server]`.
//!
//! Kept apart from [`super::model`] so the admission and conversion settings read as one unit;
//! like the rest of the model they are checked once, by [`super::validate`], and trusted after.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[[webhook]]`: admission (validate, mutate) and conversion for one resource.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// Names the webhook in URL paths and configurations; defaults to the lower-cased kind.
    pub name: Option<String>,
    /// The resource: a CRD kind of this file, `group/version/Kind` or `v1/Kind`.
    #[serde(rename = "for")]
    pub(crate) for_kind: super::kind::KindRef,
    /// The Rhai script, relative to the config file.
    pub script: PathBuf,
    /// Name of `validate(req)`: allow with nothing or `allow()`, deny by throwing or `deny(msg)`.
    pub validate: Option<String>,
    /// Name of `mutate(req)`: returns the desired object; khai sends the JSON Patch.
    pub mutate: Option<String>,
    /// Name of `convert(obj, to_version)`, for a CRD of this file with more than one version.
    pub convert: Option<String>,
    /// Subresources the admission rules cover instead of the object itself: `status`, `scale`,
    /// any other name, `"*"` for every subresource, and `""` for the object itself. Empty (the
    /// default) covers the object only.
    #[serde(default)]
    pub subresources: Vec<String>,
    /// Operations the admission webhooks see.
    #[serde(default = "default_operations")]
    pub operations: Vec<Operation>,
    /// What the API server does when khai cannot answer (down, timed out).
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    #[serde(default)]
    pub side_effects: SideEffects,
    /// How long the API server waits for an answer, 1 to 30 seconds.
    #[serde(default = "default_timeout_seconds")]
    pub(crate) timeout_seconds: u8,
    /// A Kubernetes label selector (`matchLabels`, `matchExpressions`) on the namespace.
    pub namespace_selector: Option<serde_json::Value>,
    /// A Kubernetes label selector on the object.
    pub(crate) object_selector: Option<serde_json::Value>,
    /// CEL conditions the API server evaluates before calling the webhook: it is called only
    /// when all are true (`matchConditions`).
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
}

/// One `match_conditions` entry.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MatchCondition {
    /// Names the condition in the API server's errors; unique within the webhook.
    pub name: String,
    /// A CEL expression over `object`, `oldObject`, `request` and `authorizer` that returns a
    /// boolean.
    pub expression: String,
}

fn default_operations() -> Vec<Operation> {
    vec![Operation::Create, Operation::Update]
}
fn default_timeout_seconds() -> u8 {
    10
}

impl Webhook {
    /// The name used in paths and configurations: the explicit one, or the lower-cased kind.
    pub(crate) fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.for_kind.kind.to_lowercase())
    }
}

/// An admission operation, spelled as Kubernetes spells it.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
    #[serde(rename = "*")]
    All,
}

/// `failure_policy`: `Fail` rejects the request when khai cannot answer; `Ignore` lets it through.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum FailurePolicy {
    #[default]
    Fail,
    Ignore,
}

/// `side_effects`: whether the scripts change anything besides their answer (khai's cannot).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
pub enum SideEffects {
    #[default]
    None,
    NoneOnDryRun,
}

/// `[webhook_server]`: how the webhook server gets its certificate and where it is reached.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookServer {
    #[serde(default)]
    pub tls: TlsMode,
    /// PEM certificate chain, for `tls = "files"`; relative to the config file.
    pub cert_file: Option<PathBuf>,
    /// PEM private key, for `tls = "files"`; relative to the config file.
    pub key_file: Option<PathBuf>,
    /// How often certificate files are checked for changes (`"10s"`).
    #[serde(default = "default_reload_interval")]
    pub reload_interval: String,
    /// The Service in front of khai: its DNS names go into the self-signed certificate, and
    /// configurations point at it unless `khai run --webhook-url` or `generate --url` says
    /// otherwise.
    pub service: Option<ServiceRef>,
    /// Largest request body accepted, in bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// How long one request may take, TLS handshake and script included (`"10s"`); also how
    /// long a client may take to send its headers and a kept-alive connection may stay idle.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: String,
    /// Connections open at once; beyond it the oldest idle connection is closed to make room.
    #[serde(default = "default_max_connections")]
    pub(crate) max_connections: usize,
    /// Admission reviews answered at once.
    #[serde(default = "default_max_concurrent_reviews")]
    pub(crate) max_concurrent_reviews: usize,
    /// Conversion reviews converted at once; each may hold a large list of objects.
    #[serde(default = "default_max_concurrent_conversions")]
    pub(crate) max_concurrent_conversions: usize,
    /// Reviews of each sort (admission, conversion) that may wait for their turn; more are
    /// answered 503 at once. A waiting review holds only its connection, so this may be as
    /// large as `max_connections`: the default is.
    #[serde(default = "default_max_queued_reviews")]
    pub(crate) max_queued_reviews: usize,
}

impl Default for WebhookServer {
    fn default() -> Self {
        Self {
            tls: TlsMode::default(),
            cert_file: None,
            key_file: None,
            reload_interval: default_reload_interval(),
            service: None,
            max_body_bytes: default_max_body_bytes(),
            request_timeout: default_request_timeout(),
            max_connections: default_max_connections(),
            max_concurrent_reviews: default_max_concurrent_reviews(),
            max_concurrent_conversions: default_max_concurrent_conversions(),
            max_queued_reviews: default_max_queued_reviews(),
        }
    }
}

fn default_reload_interval() -> String {
    "10s".into()
}
fn default_max_body_bytes() -> usize {
    3 << 20
}
fn default_request_timeout() -> String {
    "10s".into()
}
fn default_max_connections() -> usize {
    128
}
fn default_max_concurrent_reviews() -> usize {
    16
}
fn default_max_concurrent_conversions() -> usize {
    2
}
fn default_max_queued_reviews() -> usize {
    128
}

/// `tls = "self-signed"` (khai makes a CA and a serving certificate at start) or `"files"`.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    #[default]
    SelfSigned,
    Files,
}

/// `service = { name, namespace, port }`: the Service that routes to khai's webhook port.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceRef {
    pub name: String,
    pub namespace: String,
    #[serde(default = "default_service_port")]
    pub port: u16,
}

fn default_service_port() -> u16 {
    443
}
