//! A shard letting go of an object the sharder moves to another shard (`khai run --shards`):
//! it removes the object's shard label (keeping the drain label) in one write, which
//! acknowledges the drain;
//! the object then leaves this shard's label-selected watch and its record is forgotten as for
//! a deletion, daemons stopped, while the object itself and its finalizers are left alone.

use super::context::Ctx;
use super::report::ReconcileError;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

/// Acknowledges the drain of `obj`. Called from the object's reconcile, so no other reconcile
/// of it is in flight on this shard.
pub(super) async fn acknowledge(
    obj: &DynamicObject,
    ctx: &Ctx,
    shard: &crate::shard::Settings,
) -> Result<Action, ReconcileError> {
    let api = crate::watch::api(
        &ctx.services.client,
        &ctx.spec.kind,
        obj.namespace().as_deref(),
    );
    // The drain label stays: it tells the sharder the parent was let go of, so it relabels
    // the parent's children for the new shard before the parent itself. The patch is guarded
    // by the version this reconcile read: a reconcile of an older copy (the cache had not yet
    // seen this shard's own acknowledgement) writes nothing a second time.
    let patch = json!({ "metadata": {
        "resourceVersion": obj.resource_version(),
        "labels": { shard.label(): null },
    }});
    match api
        .patch_metadata(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        // Changed since read: the watch brings the newer copy, and its reconcile decides again
        // (it is gone from this shard's watch if the acknowledgement already landed).
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(
                "the object changed before its drain was acknowledged; deciding again on the newer copy"
            );
            return Ok(Action::await_change());
        }
        Err(e) => return Err(ReconcileError::Drain(e.into())),
    }
    crate::metrics::shard_drained(&ctx.spec.controller);
    tracing::info!(shard = %shard.id, "let go of the object for another shard");
    Ok(Action::await_change())
}
