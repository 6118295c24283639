//! Applying khai's own webhook configurations and CRD conversion settings, with the caBundle of
//! the CA it made at start, so a self-signed khai needs no certificate tooling.
//!
//! Everything is server-side applied with its own field manager (`khai-webhook`), so the CRD
//! install (manager `khai`) and this never take fields from each other. A configuration the
//! config no longer needs (the last `mutate` removed, by an edit or a hot reload) is deleted, so
//! the API server stops calling a path khai no longer serves. A failure is logged and retried
//! until it succeeds or khai shuts down: webhooks are served meanwhile.
//!
//! An object already as wanted is not written: a restart, or another replica sharing the same
//! CA, costs no write. A configuration carries the hash of its manifest (as CRDs do, see
//! [`crate::schema::current`]), so a field the config dropped still counts as a change; a CRD's
//! `spec.conversion` is compared by value, as the CRD's hash is the CRD install's.

use crate::config::model::Model;
use crate::manifest::webhooks::{self as manifests, Target};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const FIELD_MANAGER: &str = "khai-webhook";
const RETRY: Duration = Duration::from_secs(2);

/// Applies until success or `shutdown`.
pub(crate) async fn run(
    client: kube::Client,
    model: Model,
    target: Target,
    ca: String,
    shard_label: Option<String>,
    shutdown: CancellationToken,
) {
    loop {
        let attempt = apply_all(&client, &model, &target, &ca, shard_label.as_deref());
        let result = tokio::select! {
            () = shutdown.cancelled() => return,
            r = attempt => r,
        };
        match result {
            Ok(written) => {
                tracing::info!(name = %manifests::configuration_name(&model), written, "webhook configurations installed");
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

/// Applies what differs; returns how many objects it wrote.
async fn apply_all(
    client: &kube::Client,
    model: &Model,
    target: &Target,
    ca: &str,
    shard_label: Option<&str>,
) -> Result<usize, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = 0;
    if let Some(label) = shard_label {
        let drain = crate::shard::drain_label_of(&model.operator.name);
        let manifest =
            crate::manifest::sharding::configuration(model, label, &drain, target, Some(ca));
        let name = crate::manifest::sharding::configuration_name(model);
        let gvk = GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        written += apply_changed(&api, &name, manifest, &params).await?;
    }
    let name = manifests::configuration_name(model);
    let wanted = manifests::configurations(model, target, Some(ca));
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        match wanted.iter().find(|m| m["kind"] == kind) {
            Some(manifest) => {
                written += apply_changed(&api, &name, manifest.clone(), &params).await?;
            }
            None => remove_stale(&api, kind, &name).await?,
        }
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
        let live = serde_json::to_value(crds.get(&name).await?).unwrap_or_default();
        if !crate::schema::current::covers(&live, &patch) {
            crds.patch(&name, &params, &Patch::Apply(&patch)).await?;
            written += 1;
        }
    }
    Ok(written)
}

/// Applies `manifest` as `name` unless the live object already is it (its hash and values);
/// returns 1 if it wrote. Without the right to read it, it applies.
async fn apply_changed(
    api: &Api<DynamicObject>,
    name: &str,
    mut manifest: serde_json::Value,
    params: &PatchParams,
) -> Result<usize, kube::Error> {
    crate::schema::current::stamp(&mut manifest);
    let live = match api.get_opt(name).await {
        Ok(live) => live,
        Err(kube::Error::Api(s)) if s.code == 403 => None,
        Err(e) => return Err(e),
    };
    let live = live.and_then(|l| serde_json::to_value(l).ok());
    if live.is_some_and(|l| crate::schema::current::is_current(&l, &manifest)) {
        return Ok(0);
    }
    api.patch(name, params, &Patch::Apply(&manifest)).await?;
    Ok(1)
}

/// Deletes khai's configuration `name` of `kind` if one is left from an earlier config; only
/// one khai labelled as its own. Without the right to read or delete it (RBAC made for a config
/// that never had that kind), there is nothing khai could have left: that is not an error.
async fn remove_stale(api: &Api<DynamicObject>, kind: &str, name: &str) -> Result<(), kube::Error> {
    let forbidden = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 403);
    let found = match api.get_opt(name).await {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(()),
        Err(e) if forbidden(&e) => {
            tracing::debug!(%kind, %name, "no right to read it; not checking for a stale configuration");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let ours = found
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == "khai");
    if !ours {
        tracing::warn!(%kind, %name, "not deleting a webhook configuration khai did not make");
        return Ok(());
    }
    match api.delete(name, &Default::default()).await {
        Ok(_) => {
            tracing::info!(%kind, %name, "deleted a webhook configuration the config no longer needs");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) if forbidden(&e) => {
            tracing::warn!(%kind, %name, "no right to delete a webhook configuration the config no longer needs");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    const SRC: &str = "[operator]\nname = \"x\"\n\n[[crd]]\ngroup = \"x.dev\"\nkind = \"Gadget\"\n\
        versions = [\"v1\"]\n\n[[webhook]]\nfor = \"Gadget\"\nscript = \"w.rhai\"\nvalidate = \"v\"\n";

    /// A restart, or another replica with the same CA and URL, finds the configuration and the
    /// CRD's conversion as it would apply them and writes nothing; another caBundle is a change.
    #[tokio::test]
    async fn an_install_over_the_same_configuration_writes_nothing() {
        let model = crate::config::parse(std::path::Path::new("operator.toml"), SRC).unwrap();
        let api = FakeApi::default();
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "gadgets.x.dev" },
            "spec": { "group": "x.dev", "scope": "Namespaced", "versions": [],
                "names": { "plural": "gadgets", "kind": "Gadget" } },
        });
        api.put(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.x.dev",
            crd,
        );
        let target = Target::Url("https://127.0.0.1:9443".into());
        let install = |ca: &'static str| {
            let (client, model, target) = (api.client(), model.clone(), target.clone());
            async move { apply_all(&client, &model, &target, ca, None).await.unwrap() }
        };
        assert_eq!(install("CA one").await, 2);
        assert_eq!(install("CA one").await, 0);
        assert_eq!(
            api.writes(),
            [
                "PATCH /apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/khai-x",
                "PATCH /apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.x.dev",
            ]
        );
        assert_eq!(install("CA two").await, 2, "a new caBundle is applied");
    }
}
