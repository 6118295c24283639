//! CRD conversion: a ConversionReview's objects, each through `convert(obj, to_version)`.
//!
//! The script returns the object as it should read at `to_version`; khai sets `apiVersion`
//! itself, so scripts only move fields. Objects already at the desired version pass through
//! untouched. One failing object fails the whole review with the script's message, which the
//! API server returns to the client.
//!
//! A review may carry a whole list of objects (a `kubectl get` at another version), so it is
//! handled with bounded memory and off the async workers: the body is parsed once, keeping each
//! object as its raw JSON text (no tree of the whole review is ever built); objects are
//! converted one at a time and written straight into the answer, each one's trees freed before
//! the next; and the whole review runs on the blocking pool, so parsing and converting megabytes
//! never delays admission reviews or probes. How many reviews run at once is bounded by the
//! caller ([`super::gate`]).

use super::admission::BadReview;
use crate::script::webhook::Handler;
use crate::script::{Script, ScriptError};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::time::Instant;

/// The parts of a ConversionReview khai reads; objects stay raw JSON borrowed from the body.
#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "apiVersion")]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "desiredAPIVersion")]
    desired: Option<Cow<'a, str>>,
    #[serde(borrow)]
    objects: Option<Vec<&'a RawValue>>,
}

/// Only an object's `apiVersion`, to pass objects already at the desired version untouched.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, rename = "apiVersion")]
    api_version: Option<Cow<'a, str>>,
}

/// A checked ConversionReview, borrowing from its body.
pub struct Review<'a> {
    api_version: Cow<'a, str>,
    uid: Cow<'a, str>,
    desired: Cow<'a, str>,
    objects: Vec<&'a RawValue>,
}

/// Why a review's objects could not all be converted: the message of its `Failure` result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConvertError {
    #[error("webhook {0} has no convert function")]
    NoFunction(String),
    #[error("conversion did not finish in time ({done} of {total} objects converted)")]
    TooSlow { done: usize, total: usize },
    #[error("objects[{index}]: not an object: {cause}")]
    NotAnObject {
        index: usize,
        cause: serde_json::Error,
    },
    #[error("cannot write the answer: {0}")]
    Write(serde_json::Error),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error("{function} must return the converted object, got {got}")]
    NotConverted { function: String, got: &'static str },
    #[error("desiredAPIVersion {desired:?} is not a version of {kind} (its versions: {})", versions.join(", "))]
    UnknownVersion {
        desired: String,
        kind: String,
        versions: Vec<String>,
    },
}

/// Parses and checks a ConversionReview body.
pub fn parse(body: &[u8]) -> Result<Review<'_>, BadReview> {
    let bad = |m: &str| BadReview(format!("malformed ConversionReview: {m}"));
    let doc: Doc<'_> = serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?;
    if doc.kind.as_deref() != Some("ConversionReview") {
        return Err(bad("kind must be \"ConversionReview\""));
    }
    let request = doc.request.ok_or_else(|| bad("no request"))?;
    Ok(Review {
        api_version: doc
            .api_version
            .unwrap_or(Cow::Borrowed("apiextensions.k8s.io/v1")),
        uid: request.uid.ok_or_else(|| bad("request.uid is missing"))?,
        desired: request
            .desired
            .ok_or_else(|| bad("request.desiredAPIVersion is missing"))?,
        objects: request
            .objects
            .ok_or_else(|| bad("request.objects is missing"))?,
    })
}

/// Answers a ConversionReview `body` with the response body. Runs on the calling thread (it
/// blocks for as long as the scripts run): call it from the blocking pool. Conversion stops
/// with a failure once `deadline` has passed.
pub fn answer(handler: &Handler, body: &[u8], deadline: Instant) -> Result<Vec<u8>, BadReview> {
    let review = parse(body)?;
    let mut out = Vec::with_capacity(body.len() + 256);
    let converted = match handler.hook.convert.as_deref() {
        // A version the CRD does not have would be answered with objects no API serves.
        _ if !handler.versions.is_empty()
            && !handler.versions.iter().any(|v| *v == review.desired) =>
        {
            Err(ConvertError::UnknownVersion {
                desired: shorten(&review.desired),
                kind: handler.hook.for_kind.kind.clone(),
                versions: handler.versions.clone(),
            })
        }
        Some(function) => write_success(&mut out, &handler.script, function, &review, deadline),
        None => Err(ConvertError::NoFunction(handler.name.clone())),
    };
    if let Err(e) = converted {
        let message = e.to_string();
        tracing::warn!(webhook = %handler.name, %message, "conversion failed");
        let doc = json!({
            "apiVersion": review.api_version, "kind": "ConversionReview",
            "response": {
                "uid": review.uid, "convertedObjects": [],
                "result": { "status": "Failure", "message": message },
            },
        });
        out = serde_json::to_vec(&doc).unwrap_or_default();
    }
    Ok(out)
}

/// `s` cut to 100 characters, for a message quoting what a client sent.
fn shorten(s: &str) -> String {
    s.chars().take(100).collect()
}

/// Writes the successful response into `out`, converting objects one at a time.
fn write_success(
    out: &mut Vec<u8>,
    script: &Script,
    function: &str,
    review: &Review<'_>,
    deadline: Instant,
) -> Result<(), ConvertError> {
    let json = |out: &mut Vec<u8>, v: &str| {
        serde_json::to_writer(&mut *out, v).map_err(ConvertError::Write)
    };
    out.extend_from_slice(b"{\"apiVersion\":");
    json(out, &review.api_version)?;
    out.extend_from_slice(b",\"kind\":\"ConversionReview\",\"response\":{\"uid\":");
    json(out, &review.uid)?;
    out.extend_from_slice(b",\"convertedObjects\":[");
    for (i, raw) in review.objects.iter().enumerate() {
        if Instant::now() >= deadline {
            return Err(ConvertError::TooSlow {
                done: i,
                total: review.objects.len(),
            });
        }
        if i > 0 {
            out.push(b',');
        }
        let not_an_object = |cause| ConvertError::NotAnObject { index: i, cause };
        let head: Head<'_> = serde_json::from_str(raw.get()).map_err(not_an_object)?;
        if head.api_version.as_deref() == Some(&*review.desired) {
            out.extend_from_slice(raw.get().as_bytes());
            continue;
        }
        let obj: Value = serde_json::from_str(raw.get()).map_err(not_an_object)?;
        let converted = convert_object(script, function, obj, &review.desired)?;
        serde_json::to_writer(&mut *out, &converted).map_err(ConvertError::Write)?;
    }
    out.extend_from_slice(b"],\"result\":{\"status\":\"Success\"}}}");
    Ok(())
}

/// One object at `desired` (`group/version`): unchanged when it is already there, else through
/// `function(obj, to_version)` with `apiVersion` stamped on the answer. `khai run` and
/// `khai test` both convert through this.
pub(crate) fn convert_object(
    script: &Script,
    function: &str,
    obj: Value,
    desired: &str,
) -> Result<Value, ConvertError> {
    if obj.get("apiVersion").and_then(Value::as_str) == Some(desired) {
        return Ok(obj);
    }
    let to_version = desired.rsplit('/').next().unwrap_or(desired);
    let out = script.call(function, &[obj, json!(to_version)])?;
    finish(out, desired, function)
}

/// Checks a script's converted object and stamps the desired `apiVersion` on it.
fn finish(mut out: Value, desired: &str, function: &str) -> Result<Value, ConvertError> {
    let Some(map) = out.as_object_mut() else {
        return Err(ConvertError::NotConverted {
            function: function.into(),
            got: crate::script::type_name(&out),
        });
    };
    map.insert("apiVersion".into(), json!(desired));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::webhook::Webhook;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    fn handler(src: &str) -> Handler {
        let limits = crate::script::Limits::default();
        let engine = Arc::new(crate::script::webhook::engine(&limits));
        let script = Script::compile(engine, &limits, Path::new("c.rhai"), src).unwrap();
        let hook: Webhook =
            toml::from_str("for = \"Cache\"\nscript = \"c.rhai\"\nconvert = \"convert\"\n")
                .unwrap();
        Handler {
            name: "cache".into(),
            hook,
            script,
            versions: vec!["g/v1".into(), "g/v2".into()],
        }
    }

    const RENAME: &str =
        "fn convert(obj, to) { obj.spec.b = obj.spec.a; obj.spec.remove(\"a\"); obj }";

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    fn review(objects: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"u\"1","desiredAPIVersion":"g/v2","objects":[{objects}]}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn objects_are_converted_in_order_and_those_at_the_desired_version_pass_untouched() {
        let body =
            review(r#"{"apiVersion":"g/v1","spec":{"a":1}},{"apiVersion":"g/v2","spec":{"a": 2}}"#);
        let out = answer(&handler(RENAME), &body, later()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            doc,
            json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": { "uid": "u\"1", "result": { "status": "Success" },
                    "convertedObjects": [
                        { "apiVersion": "g/v2", "spec": { "b": 1 } },
                        { "apiVersion": "g/v2", "spec": { "a": 2 } },
                    ] } })
        );
        // Passed through byte for byte, spacing included.
        assert!(String::from_utf8(out).unwrap().contains(r#"{"a": 2}"#));
    }

    #[test]
    fn a_version_the_crd_does_not_have_fails_the_review() {
        let body = review(r#"{"apiVersion":"g/v1","spec":{"a":1}}"#);
        let body = String::from_utf8(body).unwrap().replace("g/v2", "nope/v9");
        let out = answer(&handler(RENAME), body.as_bytes(), later()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            doc["response"],
            json!({ "uid": "u\"1", "convertedObjects": [],
                "result": { "status": "Failure", "message":
                    "desiredAPIVersion \"nope/v9\" is not a version of Cache (its versions: g/v1, g/v2)" } })
        );
    }

    #[test]
    fn one_failing_object_fails_the_review_with_the_script_message() {
        let body = review(r#"{"apiVersion":"g/v1","spec":{"a":1}},{"apiVersion":"g/v1"}"#);
        let out = answer(&handler(RENAME), &body, later()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["response"]["convertedObjects"], json!([]));
        assert_eq!(doc["response"]["result"]["status"], "Failure");
        let message = doc["response"]["result"]["message"].as_str().unwrap();
        assert!(message.starts_with("c.rhai:1:"), "{message}");
    }

    /// Found by fuzzing: objects are kept raw until converted, so a review holding an escape
    /// that is no character (a lone surrogate, `\ud800`) parses; the object that must be
    /// converted then fails the review with a message, and one already at the desired version
    /// passes through as it came.
    #[test]
    fn an_object_holding_a_lone_surrogate_fails_the_review_with_a_message() {
        let body = review(r#"{"apiVersion":"g/v1","spec":{"a":"\ud800x"}}"#);
        let out = answer(&handler(RENAME), &body, later()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["response"]["result"]["status"], "Failure", "{doc}");
        let message = doc["response"]["result"]["message"].as_str().unwrap();
        assert!(!message.is_empty(), "{doc}");
        let body = review(r#"{"apiVersion":"g/v2","spec":{"a":"\ud800x"}}"#);
        let out = answer(&handler(RENAME), &body, later()).unwrap();
        assert!(String::from_utf8(out).unwrap().contains(r#"\ud800x"#));
    }

    #[test]
    fn an_object_as_large_as_the_api_server_stores_converts() {
        let obj = crate::script::tests::large_object();
        let body = review(&obj.to_string());
        let src = "fn convert(obj, to) { obj.spec.copy = obj.spec.text; obj.spec.remove(\"text\"); \
                   obj.spec.count = obj.spec.entries.keys().len(); obj }";
        let out = answer(&handler(src), &body, later()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["response"]["result"], json!({ "status": "Success" }));
        let spec = &doc["response"]["convertedObjects"][0]["spec"];
        assert_eq!(spec["copy"], obj["spec"]["text"]);
        assert_eq!(spec["entries"], obj["spec"]["entries"]);
        assert_eq!(spec["count"], 12_000);
    }

    #[test]
    fn a_review_past_its_deadline_fails_instead_of_converting_on() {
        let body = review(r#"{"apiVersion":"g/v1","spec":{"a":1}}"#);
        let out = answer(&handler(RENAME), &body, Instant::now()).unwrap();
        let doc: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            doc["response"]["result"]["message"],
            "conversion did not finish in time (0 of 1 objects converted)"
        );
    }

    #[test]
    fn converted_objects_get_the_desired_api_version() {
        let out = finish(
            json!({ "apiVersion": "g/v1", "spec": {} }),
            "g/v2",
            "convert",
        )
        .unwrap();
        assert_eq!(out["apiVersion"], "g/v2");
        assert_eq!(
            finish(Value::Null, "g/v2", "convert")
                .unwrap_err()
                .to_string(),
            "convert must return the converted object, got nothing"
        );
    }

    #[test]
    fn review_without_desired_version_is_malformed() {
        let body = br#"{"kind":"ConversionReview","request":{"uid":"u","objects":[]}}"#;
        assert_eq!(
            parse(body).err().map(|e| e.0).as_deref(),
            Some("malformed ConversionReview: request.desiredAPIVersion is missing")
        );
    }
}
