//! khai's finalizers: one for each controller of a kind that needs one, so that two controllers
//! of one kind (a filtered `[[controller]]` and the controller that runs the kind's handlers, or
//! two `[[controller]]`s) never take each other's finalizer away. Each adds its own while it
//! needs it (`finalize`, a delete handler) and removes only its own, and an object goes once
//! every one of them has let go.
//!
//! Which finalizer each controller uses is decided in [`super::finalizer_names`].

use super::context::Ctx;
use super::finalizer_names::{is_khai, key};
use crate::watch::{self, Kind};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};
use std::sync::Arc;

/// Removes the finalizers `names` from `obj`. The JSON patch tests that each is still where it
/// was seen, so a concurrent change of the list makes it fail (and retry) rather than remove
/// someone else's finalizer.
pub(crate) async fn remove(
    client: &kube::Client,
    kind: &Kind,
    obj: &DynamicObject,
    names: &[String],
) -> Result<(), crate::client::ApiError> {
    let finalizers = obj.finalizers();
    // From the end, so that each index still points at its finalizer when it is removed.
    let mut ops = Vec::new();
    for (i, f) in finalizers.iter().enumerate().rev() {
        if names.contains(f) {
            let path = format!("/metadata/finalizers/{i}");
            ops.push(json!({ "op": "test", "path": path, "value": f }));
            ops.push(json!({ "op": "remove", "path": path }));
        }
    }
    if ops.is_empty() {
        return Ok(());
    }
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
        .map_err(|e| crate::client::ApiError::from(kube::Error::SerdeError(e)))?;
    watch::api(client, kind, obj.namespace().as_deref())
        .patch(
            &obj.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::<()>::Json(patch),
        )
        .await
        .map_err(crate::client::ApiError::from)?;
    tracing::info!(object = %obj.name_any(), finalizers = ?names, "removed khai's finalizer: nothing needs it any more");
    Ok(())
}

/// What `khai release` strips from one object: every finalizer of `operator`'s and every
/// annotation under `<operator>.khai.dev/` (the handlers' records), as a JSON patch that tests
/// each value is still where it was seen. `None` when the object carries none.
pub(crate) fn release_patch(
    obj: &DynamicObject,
    operator: &str,
) -> Option<(Vec<String>, Vec<String>, json_patch::Patch)> {
    let prefix = crate::handler::progress::Keys::new(operator).prefix;
    let mut ops = Vec::new();
    let mut finalizers = Vec::new();
    for (i, f) in obj.finalizers().iter().enumerate().rev() {
        if is_khai(f, operator) {
            let path = format!("/metadata/finalizers/{i}");
            ops.push(json!({ "op": "test", "path": path, "value": f }));
            ops.push(json!({ "op": "remove", "path": path }));
            finalizers.insert(0, f.clone());
        }
    }
    let annotations: Vec<String> = obj
        .annotations()
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .cloned()
        .collect();
    for k in &annotations {
        // JSON pointer escaping: `~` and `/` in a key.
        let path = format!(
            "/metadata/annotations/{}",
            k.replace('~', "~0").replace('/', "~1")
        );
        ops.push(json!({ "op": "remove", "path": path }));
    }
    if ops.is_empty() {
        return None;
    }
    let patch = serde_json::from_value(Value::Array(ops)).ok()?;
    Some((finalizers, annotations, patch))
}

/// After a reload: removes the operator's finalizers from the objects of the kinds that no
/// controller of the new version runs for (`old` are the controllers of the version before,
/// `next` those of the new one). With no controller left for a kind, no reconcile would ever
/// remove them, and the objects would hang on deletion for ever. Failures are logged.
pub(crate) async fn release_abandoned(old: &[Arc<Ctx>], next: &[Arc<Ctx>]) {
    for ctx in old {
        if next
            .iter()
            .any(|n| key(&n.spec.kind) == key(&ctx.spec.kind))
        {
            continue;
        }
        for obj in ctx.caches.primary.store().state() {
            let ours: Vec<String> = obj
                .finalizers()
                .iter()
                .filter(|f| is_khai(f, &ctx.spec.operator))
                .cloned()
                .collect();
            if ours.is_empty() {
                continue;
            }
            if let Err(e) = remove(&ctx.services.client, &ctx.spec.kind, &obj, &ours).await {
                tracing::warn!(
                    object = %obj.name_any(),
                    kind = %ctx.spec.kind.resource.kind,
                    error = %e,
                    "cannot remove khai's finalizer, which nothing needs any more; remove it by hand"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_strips_the_operators_finalizers_and_annotations_only() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "x",
                "finalizers": ["other.io/keep", "khai.dev/op", "big.khai.dev/op", "khai.dev/other"],
                "annotations": { "op.khai.dev/last-handled": "{}", "op.khai.dev/progress": "{}",
                                 "other.khai.dev/last-handled": "{}", "note": "n" } },
        }))
        .unwrap();
        let (finalizers, annotations, patch) = release_patch(&obj, "op").unwrap();
        assert_eq!(finalizers, ["khai.dev/op", "big.khai.dev/op"]);
        assert_eq!(
            annotations,
            ["op.khai.dev/last-handled", "op.khai.dev/progress"]
        );
        let mut doc = serde_json::to_value(&obj).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(
            doc["metadata"]["finalizers"],
            json!(["other.io/keep", "khai.dev/other"])
        );
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({ "other.khai.dev/last-handled": "{}", "note": "n" })
        );
        let clean: DynamicObject = serde_json::from_value(doc).unwrap();
        assert!(release_patch(&clean, "op").is_none(), "idempotent");
    }
}
