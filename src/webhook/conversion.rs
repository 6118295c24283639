//! CRD conversion: a ConversionReview's objects, each through `convert(obj, to_version)`.
//!
//! The script returns the object as it should read at `to_version`; khai sets `apiVersion`
//! itself, so scripts only move fields. Objects already at the desired version pass through
//! untouched. One failing object fails the whole review with the script's message, which the
//! API server returns to the client.

use super::admission::BadReview;
use super::script_api::Handler;
use serde_json::{Value, json};

/// The parts of a ConversionReview khai needs.
pub struct Review {
    api_version: String,
    uid: Value,
    desired: String,
    objects: Vec<Value>,
}

/// Parses and checks a ConversionReview body.
pub fn parse(body: &[u8]) -> Result<Review, BadReview> {
    let bad = |m: &str| BadReview(format!("malformed ConversionReview: {m}"));
    let doc: Value = serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?;
    if doc.get("kind").and_then(Value::as_str) != Some("ConversionReview") {
        return Err(bad("kind must be \"ConversionReview\""));
    }
    let request = doc.get("request").ok_or_else(|| bad("no request"))?;
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(Review {
        api_version: text(&doc, "apiVersion").unwrap_or_else(|| "apiextensions.k8s.io/v1".into()),
        uid: request
            .get("uid")
            .filter(|u| u.is_string())
            .cloned()
            .ok_or_else(|| bad("request.uid is missing"))?,
        desired: text(request, "desiredAPIVersion")
            .ok_or_else(|| bad("request.desiredAPIVersion is missing"))?,
        objects: request
            .get("objects")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| bad("request.objects is missing"))?,
    })
}

/// Converts every object of `review` and renders the ConversionReview response.
pub async fn review(handler: &Handler, review: Review) -> Value {
    let (api_version, uid) = (review.api_version.clone(), review.uid.clone());
    let result = convert_all(handler, review).await;
    let response = match result {
        Ok(objects) => json!({
            "uid": uid, "convertedObjects": objects, "result": { "status": "Success" },
        }),
        Err(message) => {
            tracing::warn!(webhook = %handler.name, %message, "conversion failed");
            json!({
                "uid": uid, "convertedObjects": [],
                "result": { "status": "Failure", "message": message },
            })
        }
    };
    json!({ "apiVersion": api_version, "kind": "ConversionReview", "response": response })
}

async fn convert_all(handler: &Handler, review: Review) -> Result<Vec<Value>, String> {
    let Some(function) = handler.hook.convert.clone() else {
        return Err(format!("webhook {} has no convert function", handler.name));
    };
    let script = handler.script.clone();
    let desired = review.desired;
    let to_version = desired.rsplit('/').next().unwrap_or(&desired).to_string();
    let job = move || {
        review
            .objects
            .into_iter()
            .map(|obj| {
                if obj.get("apiVersion").and_then(Value::as_str) == Some(desired.as_str()) {
                    return Ok(obj);
                }
                let out = script
                    .call(&function, &[obj, json!(to_version)])
                    .map_err(|e| e.to_string())?;
                finish(out, &desired, &function)
            })
            .collect::<Result<Vec<_>, String>>()
    };
    tokio::task::spawn_blocking(job)
        .await
        .unwrap_or_else(|e| Err(format!("conversion task failed: {e}")))
}

/// Checks a script's converted object and stamps the desired `apiVersion` on it.
fn finish(mut out: Value, desired: &str, function: &str) -> Result<Value, String> {
    let Some(map) = out.as_object_mut() else {
        return Err(format!(
            "{function} must return the converted object, got {out}"
        ));
    };
    map.insert("apiVersion".into(), json!(desired));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            finish(Value::Null, "g/v2", "convert").unwrap_err(),
            "convert must return the converted object, got null"
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
