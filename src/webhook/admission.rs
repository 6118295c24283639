//! Admission: one AdmissionReview in, one AdmissionReview out, through a script.
//!
//! `validate(req)` answers allow or deny; `mutate(req)` returns the object it wants and khai
//! sends the RFC 6902 JSON Patch from the original to it, so authors never write patches. A
//! script error denies the request with the error's text (file:line:col and message); whether
//! the API server then rejects the write is not khai's choice: a *denial* always rejects, and
//! `failure_policy` only decides what happens when khai cannot be reached or times out.

use crate::script::ScriptError;
use crate::script::type_name;
use crate::script::webhook::{Handler, VERDICT_KEY};
use base64::Engine as _;
use serde_json::{Value, json};
use std::sync::Arc;

/// Which admission function a path calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Validate,
    Mutate,
}

/// An AdmissionReview that cannot be answered: answered with HTTP 400 and this message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct BadReview(pub String);

/// What the script decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Allow {
        warnings: Vec<String>,
        patch: Option<json_patch::Patch>,
    },
    Deny {
        message: String,
        reason: String,
        code: i64,
    },
}

/// The parts of an AdmissionReview khai needs; the whole `request` goes to the script.
pub struct Review {
    api_version: String,
    uid: Value,
    request: Value,
}

/// Parses and checks an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<Review, BadReview> {
    let mut doc: Value = serde_json::from_slice(body)
        .map_err(|e| BadReview(format!("malformed AdmissionReview: {e}")))?;
    let field = |doc: &Value, k: &str| {
        doc.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let kind = field(&doc, "kind");
    if kind != "AdmissionReview" {
        return Err(BadReview(format!(
            "malformed AdmissionReview: kind must be \"AdmissionReview\", got {kind:?}"
        )));
    }
    let api_version = field(&doc, "apiVersion");
    if !api_version.starts_with("admission.k8s.io/") {
        return Err(BadReview(format!(
            "malformed AdmissionReview: unsupported apiVersion {api_version:?}"
        )));
    }
    // Taken, not copied: the request holds the objects, the bulk of the body.
    let request = doc
        .get_mut("request")
        .map(Value::take)
        .filter(Value::is_object)
        .ok_or_else(|| BadReview("malformed AdmissionReview: no request".into()))?;
    let uid = request.get("uid").filter(|u| u.is_string()).cloned();
    let uid =
        uid.ok_or_else(|| BadReview("malformed AdmissionReview: request.uid is missing".into()))?;
    Ok(Review {
        api_version,
        uid,
        request,
    })
}

/// Runs the script for `review` and renders the AdmissionReview response.
pub async fn review(handler: &Handler, kind: Kind, review: Review) -> Value {
    let verdict = match prepare(handler, kind, review.request) {
        Prepared::Done(verdict) => verdict,
        Prepared::Call { function, request } => {
            let answer = handler
                .script
                .call_one_async(function, request.clone())
                .await;
            conclude(kind, &request, answer)
        }
    };
    if let Verdict::Deny { message, .. } = &verdict {
        tracing::info!(webhook = %handler.name, uid = %review.uid, %message, "denied");
    }
    respond(&review.api_version, review.uid, verdict)
}

/// [`review`]'s decision with the script called on this thread: what `khai test` runs.
pub(crate) fn decide_blocking(handler: &Handler, kind: Kind, request: Value) -> Verdict {
    match prepare(handler, kind, request) {
        Prepared::Done(verdict) => verdict,
        Prepared::Call { function, request } => {
            let answer = handler
                .script
                .call(function, std::slice::from_ref(&*request));
            conclude(kind, &request, answer)
        }
    }
}

/// What to do with a request before any script runs.
enum Prepared<'h> {
    /// Decided without a script.
    Done(Verdict),
    /// Call `function(request)`; a mutate's answer is compared with the request's object. The
    /// request is shared with the call rather than the object copied for the comparison, which
    /// would be a deep copy of the whole object per review.
    Call {
        function: &'h str,
        request: Arc<Value>,
    },
}

fn prepare(handler: &Handler, kind: Kind, request: Value) -> Prepared<'_> {
    let request = strip_managed_fields(request);
    let function = match kind {
        Kind::Validate => handler.hook.validate.as_deref(),
        Kind::Mutate => handler.hook.mutate.as_deref(),
    };
    let Some(function) = function else {
        return Prepared::Done(allow());
    };
    // Nothing to mutate on DELETE: there is no new object.
    if kind == Kind::Mutate && request.get("object").is_none_or(Value::is_null) {
        return Prepared::Done(allow());
    }
    Prepared::Call {
        function,
        request: Arc::new(request),
    }
}

fn conclude(kind: Kind, request: &Value, answer: Result<Value, ScriptError>) -> Verdict {
    match answer {
        Err(e) => script_failed(&e),
        Ok(value) => {
            let original = (kind == Kind::Mutate)
                .then(|| request.get("object"))
                .flatten();
            interpret(kind, original, value)
        }
    }
}

fn allow() -> Verdict {
    Verdict::Allow {
        warnings: Vec::new(),
        patch: None,
    }
}

fn script_failed(e: &ScriptError) -> Verdict {
    Verdict::Deny {
        message: e.to_string(),
        reason: "InternalError".into(),
        code: 500,
    }
}

/// Turns a script's return value into a verdict (pure, so it is unit-tested).
pub fn interpret(kind: Kind, original: Option<&Value>, value: Value) -> Verdict {
    if value.is_null() {
        return allow();
    }
    match value.get(VERDICT_KEY).and_then(Value::as_str) {
        Some("deny") => {
            let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
            Verdict::Deny {
                message: text("message").to_string(),
                reason: text("reason").to_string(),
                code: value.get("code").and_then(Value::as_i64).unwrap_or(403),
            }
        }
        Some(_) => Verdict::Allow {
            warnings: warnings(&value),
            patch: None,
        },
        None if kind == Kind::Mutate && value.is_object() => {
            let patch = json_patch::diff(original.unwrap_or(&Value::Null), &value);
            Verdict::Allow {
                warnings: Vec::new(),
                patch: (!patch.0.is_empty()).then_some(patch),
            }
        }
        None => Verdict::Deny {
            message: format!(
                "{} must return nothing, allow() or deny(message){}, got {}",
                if kind == Kind::Mutate {
                    "mutate"
                } else {
                    "validate"
                },
                if kind == Kind::Mutate {
                    " or the object"
                } else {
                    ""
                },
                type_name(&value)
            ),
            reason: "InternalError".into(),
            code: 500,
        },
    }
}

fn warnings(value: &Value) -> Vec<String> {
    value
        .get("warnings")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Scripts see objects without `metadata.managedFields`, as reconcile scripts do; the patch is
/// computed against the same view, so it never touches them.
fn strip_managed_fields(mut request: Value) -> Value {
    for key in ["object", "oldObject"] {
        if let Some(meta) = request
            .get_mut(key)
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut)
        {
            meta.remove("managedFields");
        }
    }
    request
}

/// The AdmissionReview response for `verdict`.
pub fn respond(api_version: &str, uid: Value, verdict: Verdict) -> Value {
    let response = match verdict {
        Verdict::Allow { warnings, patch } => {
            let mut r = json!({ "uid": uid, "allowed": true });
            if !warnings.is_empty() {
                r["warnings"] = json!(warnings);
            }
            if let Some(patch) = patch {
                let bytes = serde_json::to_vec(&patch).unwrap_or_default();
                r["patchType"] = json!("JSONPatch");
                r["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            r
        }
        Verdict::Deny {
            message,
            reason,
            code,
        } => json!({
            "uid": uid,
            "allowed": false,
            "status": { "code": code, "message": message, "reason": reason },
        }),
    };
    json!({ "apiVersion": api_version, "kind": "AdmissionReview", "response": response })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutate_answer_becomes_a_json_patch_against_the_original() {
        let original = json!({ "metadata": { "name": "a" }, "spec": { "x": 1 } });
        let wanted = json!({ "metadata": { "name": "a", "annotations": { "owner": "ann" } }, "spec": { "x": 1 } });
        let Verdict::Allow { patch: Some(p), .. } =
            interpret(Kind::Mutate, Some(&original), wanted)
        else {
            panic!("expected a patch");
        };
        assert_eq!(
            serde_json::to_value(p).unwrap(),
            json!([{ "op": "add", "path": "/metadata/annotations", "value": { "owner": "ann" } }])
        );
    }

    #[test]
    fn unchanged_object_and_nothing_allow_without_a_patch() {
        let o = json!({ "a": 1 });
        assert_eq!(interpret(Kind::Mutate, Some(&o), o.clone()), allow());
        assert_eq!(interpret(Kind::Validate, None, Value::Null), allow());
    }

    #[test]
    fn deny_carries_message_reason_and_code() {
        let v = json!({ VERDICT_KEY: "deny", "message": "no", "reason": "Invalid", "code": 422 });
        let r = respond(
            "admission.k8s.io/v1",
            json!("u1"),
            interpret(Kind::Validate, None, v),
        );
        assert_eq!(
            r,
            json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
                "uid": "u1", "allowed": false, "status": { "code": 422, "message": "no", "reason": "Invalid" } } })
        );
    }

    #[test]
    fn validate_returning_a_string_is_a_denial_naming_the_contract() {
        let Verdict::Deny { message, .. } = interpret(Kind::Validate, None, json!("ok")) else {
            panic!("expected a denial");
        };
        assert_eq!(
            message,
            "validate must return nothing, allow() or deny(message), got a string"
        );
    }

    #[test]
    fn malformed_reviews_are_named() {
        let err = |b: &str| parse(b.as_bytes()).err().map(|e| e.0);
        assert_eq!(
            err("{}").as_deref(),
            Some("malformed AdmissionReview: kind must be \"AdmissionReview\", got \"\"")
        );
        assert!(
            err("not json")
                .unwrap()
                .starts_with("malformed AdmissionReview: expected")
        );
        assert_eq!(
            err(r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{}}"#)
                .as_deref(),
            Some("malformed AdmissionReview: request.uid is missing")
        );
    }
}
