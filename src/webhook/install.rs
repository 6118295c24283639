//! Applying khai's own webhook configurations and CRD conversion settings, with the caBundle of
//! the CA it made at start, so a self-signed khai needs no certificate tooling.
//!
//! Everything is server-side applied with its own field manager (`khai-webhook`), so the CRD
//! install (manager `khai`) and this never take fields from each other. A failure is logged and
//! retried until it succeeds or khai shuts down: webhooks are served meanwhile.

use super::manifests::{self, Target};
use crate::config::model::Model;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const FIELD_MANAGER: &str = "khai-webhook";
const RETRY: Duration = Duration::from_secs(2);

/// Applies until success or `shutdown`.
pub async fn run(
    client: kube::Client,
    model: Model,
    target: Target,
    ca: String,
    shutdown: CancellationToken,
) {
    loop {
        let attempt = apply_all(&client, &model, &target, &ca);
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            r = attempt => r,
        };
        match result {
            Ok(()) => {
                tracing::info!(name = %manifests::configuration_name(&model), "webhook configurations installed");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "cannot install webhook configurations; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

async fn apply_all(
    client: &kube::Client,
    model: &Model,
    target: &Target,
    ca: &str,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for manifest in manifests::configurations(model, target, Some(ca)) {
        let kind = manifest["kind"].as_str().unwrap_or_default();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let ar = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let name = manifests::configuration_name(model);
        api.patch(&name, &params, &Patch::Apply(&manifest)).await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for hook in &model.webhooks {
        let Some(patch) = manifests::crd_conversion(model, hook, target, Some(ca)) else {
            continue;
        };
        let name = patch["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // The daemon installs the CRD concurrently; conversion is set once it exists.
        crds.get(&name).await?;
        crds.patch(&name, &params, &Patch::Apply(&patch)).await?;
    }
    Ok(())
}
