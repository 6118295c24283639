//! Writes whose answer khai reads only for its resourceVersion: the request is sent and its
//! status checked, but the object the API server sends back is not decoded.
//!
//! A patch answers with the whole object. kube's `Api::patch` decodes it into a
//! `DynamicObject`, a tree of JSON maps, which the applier would drop unread: the watch event
//! brings the same object to the cache a moment later anyway. Two such answers come back per
//! reconciled parent (the child's apply and the status patch), so decoding and freeing them is
//! a cost on every reconcile that buys nothing. What the applier does need is the version the
//! write made (`crate::object::sent`), and that is read by skipping over everything else.

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::Resource;

/// What to patch: an object of `resource` named `name`, in `namespace` (`None`: cluster-scoped,
/// or the kind is), or its `subresource` (`"status"`).
pub(crate) struct Target<'a> {
    pub resource: &'a ApiResource,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub subresource: Option<&'a str>,
}

/// Sends `patch` to `target` and checks the answer's status. Returns the resourceVersion the
/// write made, as the answer holds it (`None` if it holds none, and for a dry run, which stores
/// nothing); nothing else of the answer is decoded. Errors are kube's, as `Api::patch` gives
/// them.
pub(crate) async fn patch<P: serde::Serialize>(
    client: &kube::Client,
    target: Target<'_>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<Option<String>, kube::Error> {
    let request =
        kube::core::Request::new(DynamicObject::url_path(target.resource, target.namespace));
    let mut request = match target.subresource {
        Some(sub) => request.patch_subresource(sub, target.name, params, patch),
        None => request.patch(target.name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    // The name kube's own requests carry for its tracing layer.
    request.extensions_mut().insert(match target.subresource {
        Some("status") => "patch_status",
        Some(_) => "patch_subresource",
        None => "patch",
    });
    let answer = client.request_text(request).await?;
    Ok(if params.dry_run {
        None
    } else {
        resource_version(&answer)
    })
}

/// `metadata.resourceVersion` of the object `answer` holds; every other field is skipped unread.
fn resource_version(answer: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    serde_json::from_str::<Object>(answer)
        .ok()?
        .metadata?
        .resource_version
}

#[cfg(test)]
mod tests {
    use super::resource_version;

    #[test]
    fn the_answers_version_is_read_past_fields_that_name_it() {
        let answer = r#"{"apiVersion":"x.dev/v1","kind":"App","metadata":{
            "annotations":{"resourceVersion":"1"},"labels":{"resourceVersion":"2"},
            "managedFields":[{"fieldsV1":{"f:metadata":{"f:resourceVersion":{}}}}],
            "name":"p","resourceVersion":"42","uid":"u"},"status":{"resourceVersion":"3"}}"#;
        assert_eq!(resource_version(answer).as_deref(), Some("42"));
    }

    #[test]
    fn an_answer_without_one_gives_none() {
        for answer in [
            "",
            "{}",
            r#"{"metadata":{}}"#,
            "not json",
            r#"{"kind":"Status"}"#,
        ] {
            assert_eq!(resource_version(answer), None, "{answer}");
        }
    }
}
