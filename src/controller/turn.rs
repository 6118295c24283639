//! The normal path of a reconcile: the object's handlers, timers and daemons, then the script's
//! `reconcile` and its plan carried out.

use super::context::Ctx;
use super::report::{FORBIDDEN, ReconcileError, capped_events, publish};
use crate::apply::Manager;
use crate::events::EventType;
use crate::handler::{Handled, Turn};
use crate::object::ObjectKey;
use crate::object::spin::{self, Recorded, Verdict};
use crate::reconcile::conditions::{self, Health};
use crate::script::object_view;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use std::sync::Arc;

/// The normal path: the object's handlers, timers and daemons, then `reconcile` and its plan
/// carried out. Asks to be woken for the earliest of: a handler's retry, the next timer or
/// daemon tick, the script's `requeue_after`.
pub(super) async fn turn(obj: &Arc<DynamicObject>, ctx: &Ctx) -> Result<Action, ReconcileError> {
    let key = ObjectKey::of(obj);
    let now = tokio::time::Instant::now;
    if let Verdict::CoolDown(left) = ctx
        .objects
        .read(&key, |s| s.map_or(Verdict::Go, |s| s.spin.check(now())))
    {
        tracing::debug!(retry_in = ?left, "cooling down after a hot loop; not reconciling yet");
        return Ok(Action::requeue(left));
    }
    let mut wake = Vec::new();
    let mut clock_wake = None;
    let mut wrote = false;
    if ctx.beside.handlers.is_some() || ctx.beside.clock.is_some() {
        let (handlers_ctx, reads) = ctx.tracked_ctx(obj);
        let mut t = beside_turn(obj, ctx)?;
        t.ctx = handlers_ctx;
        let mut handled = match &ctx.beside.handlers {
            Some(h) => h.on_change(&t).await?,
            None => Handled::default(),
        };
        // Handlers run on changes, so a `k8s::` write of theirs that changes the object runs
        // them again. Timers and daemons are paced by their intervals, not by changes: their
        // writes are no loop, and do not count.
        wrote = reads.wrote();
        if let Some(c) = &ctx.beside.clock {
            t.ctx = ctx.script_ctx(obj);
            clock_wake = c.run(&t, &mut handled).await;
            wake.push(clock_wake);
        }
        wake.push(handled.retry_in);
        carry_out(obj, ctx, handled).await?;
    }
    if let Some(function) = &ctx.spec.function {
        let (requeue, applied) = apply(obj, ctx, function, &key).await?;
        wake.push(requeue);
        wrote |= applied;
    }
    let recorded = match wrote {
        true => ctx.objects.update(&key, |s| s.spin.record(now(), true)),
        false => ctx
            .objects
            .update_existing(&key, |s| s.spin.record(now(), false))
            .unwrap_or(Recorded::Fine),
    };
    if let Recorded::Hot { writes, cooldown } = recorded {
        let message = format!(
            "{writes} reconciles wrote within {}s: something this object's reconcile writes \
             triggers it again (a child or label it changes every time?); pausing it for {}s",
            spin::WINDOW.as_secs(),
            cooldown.as_secs()
        );
        tracing::warn!(writes, cooldown = ?cooldown, "hot loop: {message}");
        crate::metrics::hot_loop(&ctx.spec.controller);
        publish(ctx, obj, EventType::Warning, "HotLoop", &message).await;
    }
    let wake = wake.into_iter().flatten().min();
    if wake.is_some() && wake == clock_wake {
        crate::metrics::clock_wake();
    }
    Ok(wake.map_or_else(Action::await_change, Action::requeue))
}

/// What handlers, timers and daemons see of `obj`.
pub(super) fn beside_turn<'a>(
    obj: &'a DynamicObject,
    ctx: &Ctx,
) -> Result<Turn<'a>, ReconcileError> {
    Ok(Turn {
        obj,
        view: object_view(obj)?,
        ctx: ctx.script_ctx(obj),
        applier: ctx.services.applier.clone(),
        kind: ctx.spec.kind.clone(),
        objects: ctx.objects.clone(),
        key: ObjectKey::of(obj),
    })
}

/// Writes the status handlers, timers and daemons returned (a merge patch of the status, only
/// when it changes something) and records their events.
pub(super) async fn carry_out(
    obj: &DynamicObject,
    ctx: &Ctx,
    handled: Handled,
) -> Result<(), ReconcileError> {
    if let Some(status) = handled.status {
        let key = ObjectKey::of(obj);
        let ledger = ctx.ledger(&key, false);
        let applier = &ctx.services.applier;
        if applier
            .status(obj, &ctx.spec.kind, &status, ledger, Manager::Handlers)
            .await?
        {
            crate::metrics::status_written(&ctx.spec.controller);
        }
    }
    capped_events(ctx, obj, &handled.events, |e| async move {
        let kind = event_type(e);
        if e.warning && crate::effects::k8s::error::is_forbidden(&e.message) {
            // A call khai's RBAC does not allow fails the same way at every retry until someone
            // changes the RBAC or the config: one `Forbidden` Event per object and message, as
            // for `reconcile` (`report`), not a series.
            if first_refusal(ctx, obj, &e.message) {
                publish(ctx, obj, kind, FORBIDDEN, &e.message).await;
            }
            return;
        }
        publish(ctx, obj, kind, &e.reason, &e.message).await;
    })
    .await;
    Ok(())
}

fn event_type(e: &crate::reconcile::PlannedEvent) -> EventType {
    if e.warning {
        EventType::Warning
    } else {
        EventType::Normal
    }
}

/// Whether the refusal `message` about `obj` is new, and so to be reported; remembered until
/// the object is forgotten.
fn first_refusal(ctx: &Ctx, obj: &DynamicObject, message: &str) -> bool {
    /// Distinct refusals remembered per object, so a script naming ever new objects cannot grow
    /// this without bound (past it, each is reported again).
    const MAX: usize = 64;
    ctx.objects.update(&ObjectKey::of(obj), |s| {
        if s.refusals.iter().any(|r| r == message) {
            return false;
        }
        if s.refusals.len() >= MAX {
            s.refusals.clear();
        }
        s.refusals.push(message.to_string());
        true
    })
}

/// `reconcile` and its plan carried out, by the revision that owns `obj` in a canary rollout
/// (the active one otherwise), whose outcome the rollout counts; returns when the script asked
/// to run again, and whether it wrote anything (a child, the status, or through `k8s::`).
async fn apply(
    obj: &Arc<DynamicObject>,
    ctx: &Ctx,
    function: &str,
    key: &ObjectKey,
) -> Result<(Option<std::time::Duration>, bool), ReconcileError> {
    let Some(route) = ctx.revisions.route() else {
        return apply_by(obj, ctx, ctx, function, key).await;
    };
    let candidate = route.candidate_for(obj);
    let done = match &candidate {
        Some(c) => {
            // The candidate owns the object: there is nothing of it to compare in the shadow.
            if let Some(shadow) = ctx.revisions.shadow() {
                shadow.forget(obj);
            }
            let function = c.spec.function.as_deref().unwrap_or(function);
            apply_by(obj, ctx, c, function, key).await
        }
        None => apply_by(obj, ctx, ctx, function, key).await,
    };
    route.outcome(candidate.is_some(), done.is_err());
    done
}

/// `function` of `by`'s script (the active revision's, `ctx`, or the candidate's) and its plan
/// carried out with `ctx`'s writer and records. Only the active revision's plan is shadowed.
async fn apply_by(
    obj: &Arc<DynamicObject>,
    ctx: &Ctx,
    by: &Ctx,
    function: &str,
    key: &ObjectKey,
) -> Result<(Option<std::time::Duration>, bool), ReconcileError> {
    let (script_ctx, reads) = by.tracked_ctx(obj);
    crate::script::has_view(obj)?;
    let mut plan =
        crate::reconcile::plan(&by.spec.script, function, obj.clone(), script_ctx).await?;
    // A plan made from the object alone is the same whatever its children look like: the watch
    // events of the children it writes need not reconcile it again.
    let echoes = !reads.any() && ctx.plan_alone_decides() && by.plan_alone_decides();
    if by.spec.manage_status {
        let mut status = plan.status.take().unwrap_or_default();
        conditions::set(&mut status, obj, Health::Ready);
        plan.status = Some(status);
    }
    let applying = ctx.services.applier.apply(
        obj,
        &ctx.spec.kind,
        &plan,
        ctx.caches.for_apply(),
        by.spec.children,
        ctx.ledger(key, echoes),
    );
    // A candidate runs while the plan is carried out, so the reconcile takes at most as much
    // longer as the candidate's own run.
    let shadow = ctx.revisions.shadow().filter(|_| std::ptr::eq(ctx, by));
    let outcome = match shadow {
        None => applying.await?,
        Some(shadow) => tokio::join!(applying, shadow.compare(obj, &plan)).0?,
    };
    crate::metrics::applied(
        &ctx.spec.controller,
        outcome.children_applied,
        outcome.children_unchanged,
        outcome.children_pruned,
        outcome.status_written,
    );
    ctx.succeeded(key);
    // Writes the script made itself through `k8s::` can trigger the object again too.
    let wrote = outcome.children_applied + outcome.children_pruned > 0
        || outcome.status_written
        || reads.wrote();
    capped_events(ctx, obj, &plan.events, |e| {
        publish(ctx, obj, event_type(e), &e.reason, &e.message)
    })
    .await;
    tracing::info!(
        applied = outcome.children_applied,
        unchanged = outcome.children_unchanged,
        pruned = outcome.children_pruned,
        status_written = outcome.status_written,
        "reconciled"
    );
    Ok((plan.requeue_after, wrote))
}
