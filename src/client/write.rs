//! Writes whose answer khai does not read: the request is sent and its status checked, but the
//! object the API server sends back is not decoded.
//!
//! A patch answers with the whole object. kube's `Api::patch` decodes it into a
//! `DynamicObject`, a tree of JSON maps, which the applier would drop unread: the watch event
//! brings the same object to the cache a moment later anyway. Two such answers come back per
//! reconciled parent (the child's apply and the status patch), so decoding and freeing them is
//! a cost on every reconcile that buys nothing.

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

/// Sends `patch` to `target` and checks the answer's status; the object it returns is read off
/// the connection and dropped, not decoded. Errors are kube's, as `Api::patch` gives them.
pub(crate) async fn patch<P: serde::Serialize>(
    client: &kube::Client,
    target: Target<'_>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> Result<(), kube::Error> {
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
    client.request_text(request).await.map(drop)
}
