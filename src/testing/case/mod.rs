//! One `khai test` case: the YAML file authors write under `<operator>/tests/`.
//!
//! A case names what to call and with what, and what the answer should be: `object` (and the
//! `cache`) for a reconcile, or `validate`, `mutate` or `convert` with a request for a webhook.
//! Unknown keys are errors, so a misspelled `expect.stauts` cannot pass silently, and so is an
//! expectation that cannot apply to the case's call (`expect.children` of a `validate` case).
//!
//! This module holds what a case is; [`read`] finds, reads and parses case files, and [`check`]
//! holds the shape checks that the YAML types cannot express.

mod check;
mod read;

#[cfg(test)]
pub(crate) use read::parse;
pub(crate) use read::{find, load};

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::path::PathBuf;

/// A parsed case file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Case {
    /// The file, as found (relative to where `khai test` was pointed).
    pub file: PathBuf,
    pub description: Option<String>,
    /// Which controller reconciles `object`, by name; needed only when it is ambiguous.
    pub controller: Option<String>,
    /// Which `[[webhook]]` answers a webhook case, by name; needed only when it is ambiguous.
    pub webhook: Option<String>,
    /// The reconciled object, as a user would `kubectl apply` it; for a webhook case, the
    /// object of its request (`oldObject` for a DELETE), whose kind picks the webhook.
    pub object: Value,
    /// Other objects visible through `ctx.get`, `ctx.list` and `ctx.owned`, and (for handler,
    /// timer and daemon cases) what the config's indexes are built from.
    pub cache: Vec<Value>,
    /// The Secrets there are, for `ctx.secret` (which reads only those `[operator] secrets`
    /// lists, as at run time).
    pub secrets: Vec<Value>,
    /// What the case calls.
    pub call: Call,
    /// The side effects (`k8s::…`, `http::…`) the call must make, in order, with their
    /// answers; none when left out. Nothing leaves the process.
    pub calls: Vec<crate::effects::stub::Expected>,
    pub expect: Expect,
}

/// What a case calls.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    /// The controller's `reconcile(obj, ctx)` with `object`.
    Reconcile,
    /// A webhook's `validate(req)`.
    Validate(AdmissionInput),
    /// A webhook's `mutate(req)`.
    Mutate(AdmissionInput),
    /// A webhook's `convert(obj, to_version)`.
    Convert(ConvertInput),
    /// A `[[handler]]`, `[[timer]]` or `[[daemon]]` function with `object` (the object now).
    Handler(HandlerInput),
}

/// Which handler, timer or daemon function a case calls, and what it is called with besides
/// the object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HandlerInput {
    /// The function (or a handler's `id`).
    pub name: String,
    /// The object before the change, for update, field and delete handlers.
    pub old: Option<Value>,
    /// A daemon tick's `state`.
    pub state: Option<Value>,
    /// For a handler: the attempts before this one (`ctx.retry`; 0, the first, when absent).
    pub retry: Option<u32>,
}

impl Call {
    /// The key the case gives it under.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Call::Reconcile => "object",
            Call::Validate(_) => "validate",
            Call::Mutate(_) => "mutate",
            Call::Convert(_) => "convert",
            Call::Handler(_) => "handler",
        }
    }
}

/// The parts of an AdmissionReview request a case gives; khai fills in the rest (uid, kind,
/// resource, name, namespace) as the API server would.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AdmissionInput {
    /// `CREATE` (the default), `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default = "create")]
    pub operation: String,
    /// The object being written; absent on DELETE.
    pub object: Option<Value>,
    /// The object as it was, on UPDATE and DELETE.
    pub old_object: Option<Value>,
    /// Who asks: `username`, `uid`, `groups`, `extra`; defaults to a `khai-test` user in
    /// `system:authenticated`.
    pub user_info: Option<Value>,
    /// `status`, `scale`, ... when the request is for a subresource.
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

fn create() -> String {
    "CREATE".into()
}

/// The object a case converts and the version it converts to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConvertInput {
    pub object: Value,
    /// The desired version: `v1alpha1`, or `group/v1alpha1`.
    pub to: String,
}

/// What the reconcile should answer. Every part is optional; a part left out is not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expect {
    /// Desired children, in order, as the script returns them (before khai adds its
    /// ownerReference, labels and annotation).
    pub children: Option<Vec<Value>>,
    /// The desired status as the script returns it; `null` means no status at all.
    #[serde(default, deserialize_with = "present")]
    pub status: Option<Value>,
    /// `"30s"`, `"5m"` or seconds; `null` means no requeue.
    #[serde(default, deserialize_with = "present")]
    pub requeue_after: Option<Value>,
    /// Events, in order: maps of `type`, `reason`, `message`.
    pub events: Option<Vec<Value>>,
    /// A substring of the error the reconcile or conversion must fail with.
    pub error: Option<String>,
    /// A reconcile case whose object is being deleted (`metadata.deletionTimestamp`) calls
    /// `finalize`, as khai does: whether it answered `true` (done, the finalizer may go).
    pub finalized: Option<bool>,
    /// Admission: whether the request is allowed; defaults to true unless `message`, `reason`
    /// or `code` (which describe a denial) are given.
    pub allowed: Option<bool>,
    /// Admission: a substring of the denial's message.
    pub message: Option<String>,
    /// Admission: the denial's reason (`Forbidden`, `Invalid`, ...).
    pub reason: Option<String>,
    /// Admission: the denial's HTTP code.
    pub code: Option<i64>,
    /// Admission: the warnings an allowed request carries, in order.
    pub warnings: Option<Vec<String>>,
    /// Mutate: the object as the API server would store it after khai's patch; convert: the
    /// converted object.
    pub object: Option<Value>,
    /// Mutate: the JSON Patch khai sends, operation by operation (`[]` for none).
    pub patch: Option<Vec<Value>>,
    /// Handler: whether the entry runs for the object at all (its `labels`, `annotations` and
    /// `when` select it); `false` expects its filters to exclude it.
    pub runs: Option<bool>,
}

impl Expect {
    /// The keys given, by name, for checking them against the case's call.
    pub(super) fn given(&self) -> Vec<&'static str> {
        let present = [
            ("children", self.children.is_some()),
            ("status", self.status.is_some()),
            ("requeue_after", self.requeue_after.is_some()),
            ("events", self.events.is_some()),
            ("error", self.error.is_some()),
            ("finalized", self.finalized.is_some()),
            ("allowed", self.allowed.is_some()),
            ("message", self.message.is_some()),
            ("reason", self.reason.is_some()),
            ("code", self.code.is_some()),
            ("warnings", self.warnings.is_some()),
            ("object", self.object.is_some()),
            ("patch", self.patch.is_some()),
            ("runs", self.runs.is_some()),
        ];
        present
            .into_iter()
            .filter_map(|(k, p)| p.then_some(k))
            .collect()
    }
}

/// Keeps an explicit `null` apart from an absent key: `Some(Value::Null)` versus `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}
