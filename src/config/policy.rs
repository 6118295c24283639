//! The `[[policy]]` part of the operator model: a ValidatingAdmissionPolicy and its binding,
//! CEL rules the API server evaluates itself, with no webhook and no khai in the request path.
//!
//! Kept apart from [`super::model`] like [`super::webhook`]; checked once by
//! [`super::validate`], turned into manifests by `crate::manifest::policies`.

use super::kind::KindRef;
use super::webhook::{FailurePolicy, MatchCondition, Operation};
use serde::{Deserialize, Serialize};

/// `[[policy]]`: CEL rules every matching request must pass.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Names the policy and its binding, `khai-<operator>-<name>`.
    pub name: String,
    /// The kinds it checks: CRD kinds of this file, `group/version/Kind`, `v1/Kind`,
    /// `Kind.group` or a built-in `Kind`.
    #[serde(rename = "for")]
    pub(crate) for_kinds: Vec<KindRef>,
    /// Operations it checks.
    #[serde(default = "default_operations")]
    pub operations: Vec<Operation>,
    /// The rules; a request is refused (or warned about, or audited) at the first one that is
    /// false.
    pub rules: Vec<PolicyRule>,
    /// CEL conditions that must all be true for the rules to be evaluated at all.
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
    /// What the API server does when a rule cannot be evaluated (an error, a missing field).
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// A Kubernetes label selector (`matchLabels`, `matchExpressions`) on the namespace.
    pub namespace_selector: Option<serde_json::Value>,
    /// A Kubernetes label selector on the object.
    pub(crate) object_selector: Option<serde_json::Value>,
    /// What a failed rule does: `Deny` the request, `Warn` the client, `Audit` in the audit log.
    #[serde(default = "default_actions")]
    pub(crate) validation_actions: Vec<ValidationAction>,
}

/// One `rules` entry: a CEL expression over `object`, `oldObject`, `request`, `params`-less.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// Must be true for the request to pass.
    pub rule: String,
    /// The client's error message when it is false.
    pub message: Option<String>,
    /// A CEL expression returning the message, in place of `message`.
    pub message_expression: Option<String>,
}

/// `validation_actions` entries, spelled as Kubernetes spells them.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) enum ValidationAction {
    Deny,
    Warn,
    Audit,
}

fn default_operations() -> Vec<Operation> {
    vec![Operation::Create, Operation::Update]
}

fn default_actions() -> Vec<ValidationAction> {
    vec![ValidationAction::Deny]
}
