//! Applies the ValidatingAdmissionPolicy and binding of every `[[policy]]` at start, beside the
//! CRDs, with server-side apply; an object the cluster already holds as khai would apply it is
//! left alone, so a restart over a steady cluster writes nothing.

use crate::config::model::Model;
use crate::schema::current::is_current;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

/// Why a policy or binding could not be applied.
#[derive(Debug, thiserror::Error)]
#[error("failed to apply {kind} {name}: {cause}")]
pub(crate) struct Error {
    kind: String,
    name: String,
    cause: crate::client::ApiError,
}

/// Applies each policy, then its binding, unless it is current.
pub(super) async fn install(
    client: &kube::Client,
    model: &Model,
    field_manager: &str,
) -> Result<(), Error> {
    let params = PatchParams::apply(field_manager).force();
    for manifest in crate::manifest::policies::manifests(model) {
        let kind = manifest["kind"].as_str().unwrap_or_default().to_string();
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        // A failed read just means applying.
        if let Ok(Some(live)) = api.get_opt(&name).await
            && serde_json::to_value(&live).is_ok_and(|l| is_current(&l, &manifest))
        {
            tracing::info!(%kind, %name, "admission policy is up to date");
            continue;
        }
        api.patch(&name, &params, &Patch::Apply(&manifest))
            .await
            .map_err(|e| Error {
                kind: kind.clone(),
                name: name.clone(),
                cause: e.into(),
            })?;
        tracing::info!(%kind, %name, "applied admission policy");
    }
    Ok(())
}
