//! Drives one prepared controller with kube-runtime's `Controller`: the primary kind's changes,
//! owned children mapped to their owner, related objects mapped by label or script, and the
//! periodic resync all feed its queue, which never runs one object twice at once.

use super::context::Ctx;
use super::prepare::Prepared;
use super::reconcile::reconcile_one;
use super::report::error_policy;
use crate::config::model::Parents;
use crate::console::Trigger;
use crate::queue;
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use tokio_util::sync::CancellationToken;

/// Records each reconcile request a trigger stream yields, as caused by `trigger`.
fn requested<T: queue::Request>(
    pending: &queue::Pending,
    trigger: Trigger,
) -> impl FnMut(&T) + Send + use<T> {
    let pending = pending.clone();
    move |r| {
        let (namespace, name) = r.key();
        pending.added(namespace, name, trigger);
    }
}

/// Builds the kube-runtime `Controller` of one prepared controller and drives it until
/// `shutdown` is cancelled and its in-flight reconciles have finished.
///
/// Nothing is reconciled before every cache the controller reads has its first full list: a
/// reconcile against an owned cache still loading would re-apply children that exist (and
/// prune none that should go), and one against a watched cache would see lookups come back
/// empty. kube-runtime itself waits only for the primary kind's store.
pub(crate) async fn start(p: Prepared, shutdown: CancellationToken) {
    let caches = &p.ctx.caches.visible;
    let synced = futures::future::join_all(caches.iter().map(|i| i.synced()));
    let indexes = async {
        if let Some(ix) = &p.ctx.beside.indexes {
            ix.ready().await;
        }
    };
    tokio::select! {
        _ = futures::future::join(synced, indexes) => {}
        () = shutdown.cancelled() => return,
    }
    tracing::debug!(caches = caches.len(), "caches synced; starting controller");
    run(p, shutdown).await;
}

async fn run(p: Prepared, shutdown: CancellationToken) {
    let ctx = p.ctx;
    let name = ctx.spec.controller.clone();
    let parent = ctx.spec.kind.clone();
    let pending = ctx.pending.clone();
    crate::metrics::controller_started(&name, p.concurrency);
    let (stops, stopping) = tokio::sync::mpsc::channel(STOPS);
    let (leaves, leaving) = tokio::sync::mpsc::channel(STOPS);
    let seen = {
        let ctx = ctx.clone();
        move |c: &crate::watch::Changed| {
            let o = &*c.object;
            if !c.deleted {
                // A write of the object's status sent from another version has arrived.
                let rv = o.resource_version().unwrap_or_default();
                ctx.objects
                    .update_existing(&crate::object::ObjectKey::of(o), |s| {
                        s.sent.shown_object(&rv)
                    });
                return;
            }
            // A real deletion comes with no finalizer left: one that still carries this
            // controller's left the server-side filters, and is let go (`release::left`).
            if super::release::filtered_by_server(&ctx)
                && o.finalizers().contains(&ctx.spec.finalizer_name)
                && leaves.try_send(std::sync::Arc::new(o.clone())).is_err()
            {
                tracing::warn!(object = %o.name_any(), "too many objects leaving the controller's filters at once; one keeps khai's finalizer until `khai release`");
            }
            for s in ctx.forget(o) {
                if stops.try_send(s).is_err() {
                    tracing::warn!(
                        "too many daemons stopping at once; one is dropped without its stop"
                    );
                }
            }
        }
    };
    let spies = ctx
        .beside
        .handlers
        .as_ref()
        .is_some_and(|h| h.spies().next().is_some() || h.optional_deletes().next().is_some())
        .then(|| {
            // Subscribing seeds the subscription with the cache, which holds the first list.
            let listed = p
                .primary
                .store()
                .state()
                .iter()
                .filter_map(|o| o.metadata.uid.clone())
                .collect::<Vec<_>>();
            (
                p.primary.subscribe(),
                crate::handler::spy::EventTypes::new(listed),
            )
        });
    let trigger = queue::batched(queue::primary(
        p.primary.subscribe(),
        p.reconcile_on_status,
        pending.clone(),
        seen,
    ));
    let mut c =
        Controller::for_shared_stream_with(trigger, p.primary.store(), parent.resource.clone())
            .with_config(ControllerConfig::default().concurrency(p.concurrency));
    for inf in &ctx.caches.owned {
        let echo = echo_of(&ctx, &inf.kind);
        c = c.reconcile_on(queue::batched(
            queue::owners(inf.subscribe(), parent.clone(), echo)
                .inspect(requested(&pending, Trigger::Child)),
        ));
    }
    for (inf, w) in &p.related {
        let (rx, parent) = (inf.subscribe(), parent.clone());
        c = match &w.parents {
            Parents::Label(label) => c.reconcile_on(queue::batched(
                queue::by_label(rx, label.clone(), parent)
                    .inspect(requested(&pending, Trigger::Watched)),
            )),
            Parents::Map(f) => c.reconcile_on(queue::batched(
                queue::by_script(rx, ctx.spec.script.clone(), f.clone(), parent, {
                    let ctx = ctx.clone();
                    move |o: &kube::api::DynamicObject| ctx.related_ctx(o)
                })
                .inspect(requested(&pending, Trigger::Watched)),
            )),
        };
    }
    if let Some(period) = p.resync {
        let (store, pending) = (p.primary.store(), pending.clone());
        let all = queue::resync(period).inspect(move |_| {
            for o in store.state() {
                let (namespace, name) = queue::Request::key(&o);
                pending.added(namespace, name, Trigger::Resync);
            }
        });
        c = c.reconcile_all_on(all);
    }
    if let Some(route) = ctx.revisions.route() {
        // A promotion or rollback hands objects to the other revision: each is reconciled by
        // the revision that owns it now.
        let (store, pending) = (p.primary.store(), pending.clone());
        let moved = route.moves().inspect(move |()| {
            for o in store.state() {
                let (namespace, name) = queue::Request::key(&o);
                pending.added(namespace, name, Trigger::Resync);
            }
        });
        c = c.reconcile_all_on(moved);
    }
    tracing::info!(controller = %name, kind = %parent.resource.kind, namespace = p.primary.namespace.as_deref().unwrap_or("*"), "starting controller");
    let controller = c
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile_one, error_policy, ctx.clone())
        .for_each(move |res| {
            match res {
                // The object went away while its request waited.
                Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                    pending.dropped(r.namespace.as_deref(), &r.name);
                }
                Err(e) => {
                    tracing::debug!(controller = %name, error = %e, "reconcile did not complete")
                }
                Ok(_) => {}
            }
            futures::future::ready(())
        });
    let leaving =
        futures::stream::unfold(
            leaving,
            |mut rx| async move { rx.recv().await.map(|o| (o, rx)) },
        );
    let left =
        leaving.for_each_concurrent(LEAVING_AT_ONCE, |o| super::release::left(o, ctx.clone()));
    tokio::select! {
        () = controller => {}
        () = beside(&ctx, spies, stopping) => {}
        () = left => {}
    }
    // khai is stopping (or this controller is replaced): the daemons still running stop too.
    if let Some(clock) = &ctx.beside.clock {
        let stops = clock.drain().into_iter().map(|s| {
            let c = ctx.script_ctx(&s.obj);
            clock.stop(s, c)
        });
        futures::future::join_all(stops).await;
    }
}

/// Tells whether a change of a child of kind `kind` is the echo of khai's own write, which
/// needs no reconcile ([`crate::apply::is_echo`]); counts and logs the skipped ones.
fn echo_of(
    ctx: &Ctx,
    kind: &crate::watch::Kind,
) -> impl Fn(&crate::watch::Changed) -> bool + Send + 'static {
    let (objects, kind, controller) = (
        ctx.objects.clone(),
        kind.clone(),
        ctx.spec.controller.clone(),
    );
    move |c| {
        let echo = crate::apply::is_echo(&objects, &kind, &c.object, c.deleted);
        if echo {
            tracing::debug!(controller = %controller, child.kind = %kind.resource.kind, child.name = %c.object.metadata.name.as_deref().unwrap_or_default(), "the watch event of khai's own child write; no reconcile needed");
            crate::metrics::echo_skipped(&controller);
        }
        echo
    }
}

fn forget_memo(obj: &kube::api::DynamicObject) {
    use kube::ResourceExt;
    crate::handler::memos().forget(&obj.uid().unwrap_or_default());
}

/// Daemons of deleted objects waiting for their `stop`; objects that left the controller's
/// server-side filters waiting to be let go.
const STOPS: usize = 1024;

/// Objects that left the controller's server-side filters let go at once.
const LEAVING_AT_ONCE: usize = 8;

/// Runs what the watch events of the controller's kind call for apart from its turns: the raw
/// event handlers and the optional delete handlers (`spies`, when there are any) and the
/// `stop` of the daemons of objects that are gone. Never ends.
async fn beside(
    ctx: &Ctx,
    mut spies: Option<(crate::watch::Subscription, crate::handler::spy::EventTypes)>,
    mut stopping: tokio::sync::mpsc::Receiver<crate::handler::clock::Stopping>,
) {
    let next_change = async |s: &Option<(crate::watch::Subscription, _)>| match s {
        Some((s, _)) => s.next().await,
        None => futures::future::pending().await,
    };
    loop {
        tokio::select! {
            change = next_change(&spies) => {
                let Some(h) = &ctx.beside.handlers else { continue };
                let Some((_, types)) = &mut spies else { continue };
                let uid = change.object.metadata.uid.clone().unwrap_or_default();
                let kind = types.next(&uid, change.deleted);
                let Ok(view) = crate::script::object_view(&change.object) else { continue };
                let script_ctx = ctx.script_ctx(&change.object);
                h.on_event(view.clone(), kind, script_ctx.clone()).await;
                if change.deleted {
                    h.on_gone(&change.object, view, script_ctx).await;
                    // Calls about a gone object may have brought its memo back.
                    forget_memo(&change.object);
                }
            }
            Some(s) = stopping.recv() => {
                if let Some(clock) = &ctx.beside.clock {
                    let (c, obj) = (ctx.script_ctx(&s.obj), s.obj.clone());
                    clock.stop(s, c).await;
                    forget_memo(&obj);
                }
            }
        }
    }
}
