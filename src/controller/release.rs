//! Letting go of an object: the cleanup a deletion runs (delete handlers, `finalize`, the
//! children khai deletes itself) and the removal of khai's finalizer, both for an object on its
//! way out and for one that stops matching the controller's filters (`selector`,
//! `field_selector`, `annotations`, `when`): khai holds an object with its finalizer only while
//! the object is one of its own.

use super::context::Ctx;
use super::report::ReconcileError;
use super::turn::{beside_turn, carry_out};
use crate::apply::Progress;
use crate::handler::Handled;
use crate::object::ObjectKey;
use crate::script::object_view;
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::controller::Action;
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// Removes khai's finalizers `names` from `obj` ([`super::finalizers::remove`]).
pub(super) async fn release_finalizers(
    obj: &DynamicObject,
    ctx: &Ctx,
    names: &[String],
) -> Result<(), ReconcileError> {
    super::finalizers::remove(&ctx.services.client, &ctx.spec.kind, obj, names)
        .await
        .map_err(ReconcileError::RemoveFinalizer)
}

/// The deletion path: the delete handlers until all are done, the daemons stopped, then
/// `finalize` until it returns true, then the children khai deletes itself (its unowned
/// children, or all of them in reverse order of the plan) until they are gone; the finalizer is
/// then removed.
pub(super) async fn cleanup(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, ReconcileError> {
    if let Some(h) = &ctx.beside.handlers
        && h.hold_deletion()
    {
        let t = beside_turn(obj, ctx)?;
        let (done, handled) = h.on_delete(&t).await?;
        carry_out(obj, ctx, handled).await?;
        if !done {
            return Err(ReconcileError::DeleteHandlersPending);
        }
    }
    if let Some(c) = &ctx.beside.clock {
        let t = beside_turn(obj, ctx)?;
        let mut handled = Handled::default();
        c.run(&t, &mut handled).await;
    }
    let key = ObjectKey::of(obj);
    if let Some(function) = &ctx.spec.finalize
        && !ctx.objects.read(&key, |s| s.is_some_and(|s| s.finalized))
    {
        let done = ctx
            .spec
            .script
            .call_async(function, object_view(obj)?, ctx.script_ctx(obj))
            .await
            .map_err(|e| ReconcileError::Plan(e.into()))?;
        if done != Value::Bool(true) {
            return Err(ReconcileError::NotFinalized {
                function: function.clone(),
            });
        }
        tracing::info!("finalized");
        ctx.objects.update(&key, |s| s.finalized = true);
    }
    if !ctx.spec.children.deletes_children() {
        return Ok(Action::await_change());
    }
    match ctx
        .services
        .applier
        .delete_children(
            obj,
            &ctx.caches.owned,
            ctx.spec.children,
            ctx.ledger(&key, false),
        )
        .await?
    {
        Progress::Done => Ok(Action::await_change()),
        waiting => Err(ReconcileError::DeletingChildren(waiting)),
    }
}

/// An object carrying this controller's finalizer that its filters no longer select: cleaned
/// up as for a deletion (`finalize` once, the delete handlers, the children khai deletes
/// itself), then its finalizer removed. The object itself is never deleted. A reconcile from a
/// cache that still shows the finalizer after it went does nothing.
pub(super) async fn let_go(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, ReconcileError> {
    let key = ObjectKey::of(obj);
    if ctx.objects.read(&key, |s| s.is_some_and(|s| s.released)) {
        return Ok(Action::await_change());
    }
    cleanup(obj, ctx).await?;
    release_finalizers(obj, ctx, std::slice::from_ref(&ctx.spec.finalizer_name)).await?;
    tracing::info!("no longer selected by the controller's filters; cleaned up and let go");
    ctx.objects.update(&key, |s| {
        s.released = true;
        // Should it match again, a later deletion calls `finalize` again.
        s.finalized = false;
    });
    Ok(Action::await_change())
}

/// Whether the controller has server-side filters (`selector`, `field_selector`), through which
/// an object can leave its cache while it still exists.
pub(super) fn filtered_by_server(ctx: &Ctx) -> bool {
    ctx.spec.filter.labels.is_some() || ctx.spec.filter.fields.is_some()
}

/// How many times an object that left the controller's server-side filters is tried before
/// khai gives up on it (and says to run `khai release`).
const LEFT_ATTEMPTS: u32 = 8;

/// An object that left the controller's cache while carrying its finalizer (a label or field
/// change took it out of `selector` or `field_selector`; a real deletion comes with no
/// finalizer left): if it still exists and the server still filters it out, [`let_go`] it.
/// Failures are retried with the object's backoff, a bounded number of times.
pub(super) async fn left(seen: Arc<DynamicObject>, ctx: Arc<Ctx>) {
    let span = super::report::object_span(&seen, &ctx);
    async move {
        let key = ObjectKey::of(&seen);
        for attempt in 1..=LEFT_ATTEMPTS {
            let e = match left_once(&seen, &ctx).await {
                // Out of the controller's cache: nothing about it is kept.
                Ok(()) => return ctx.objects.forget(&key),
                Err(e) => e,
            };
            if attempt == LEFT_ATTEMPTS {
                tracing::warn!(error = %e, "cannot let go of an object that no longer matches the controller's filters; `khai release` removes khai's finalizers");
                // Out of the cache, and no deletion event will come for it: nothing is kept.
                return ctx.objects.forget(&key);
            }
            let delay = ctx.failed(&key);
            tracing::warn!(error = %e, retry_in = ?delay, "cannot let go of an object that no longer matches the controller's filters yet");
            tokio::time::sleep(delay).await;
        }
    }
    .instrument(span)
    .await;
}

async fn left_once(seen: &DynamicObject, ctx: &Ctx) -> Result<(), ReconcileError> {
    let name = seen.name_any();
    let api = crate::watch::api(
        &ctx.services.client,
        &ctx.spec.kind,
        seen.namespace().as_deref(),
    );
    // The server decides what its filters select: the object alone, listed through them.
    let mut fields = format!("metadata.name={name}");
    if let Some(f) = &ctx.spec.filter.fields {
        fields = format!("{fields},{f}");
    }
    let mut params = ListParams::default().fields(&fields);
    if let Some(l) = &ctx.spec.filter.labels {
        params = params.labels(l);
    }
    let read = |e: kube::Error| ReconcileError::Read(e.into());
    if !api.list(&params).await.map_err(read)?.items.is_empty() {
        return Ok(());
    }
    let Some(live) = api.get_opt(&name).await.map_err(read)? else {
        return Ok(());
    };
    let ours = live.finalizers().contains(&ctx.spec.finalizer_name);
    if !ours || live.uid() != seen.uid() {
        return Ok(());
    }
    let _only = super::exclusive::Exclusive::enter(&ctx.spec.controller, &live);
    ctx.objects
        .update_existing(&ObjectKey::of(&live), |s| s.released = false);
    let_go(&live, ctx).await.map(|_| ())
}
