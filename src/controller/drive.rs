//! Drives one prepared controller with kube-runtime's `Controller`: the primary kind's changes,
//! owned children mapped to their owner, related objects mapped by label or script, and the
//! periodic resync all feed its queue, which never runs one object twice at once.

use super::prepare::Prepared;
use super::reconcile::reconcile_one;
use super::report::error_policy;
use crate::config::model::Parents;
use crate::queue;
use futures::StreamExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use tokio_util::sync::CancellationToken;

/// Records each reconcile request a trigger stream yields.
fn requested<T: queue::Request>(pending: &queue::Pending) -> impl FnMut(&T) + Send + use<T> {
    let pending = pending.clone();
    move |r| {
        let (namespace, name) = r.key();
        pending.added(namespace, name);
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
    tokio::select! {
        _ = synced => {}
        () = shutdown.cancelled() => return,
    }
    tracing::debug!(caches = caches.len(), "caches synced; starting controller");
    run(p, shutdown).await;
}

fn run(p: Prepared, shutdown: CancellationToken) -> impl std::future::Future<Output = ()> {
    let ctx = p.ctx;
    let name = ctx.spec.controller.clone();
    let parent = ctx.spec.kind.clone();
    let pending = ctx.pending.clone();
    crate::metrics::controller_started(&name, p.concurrency);
    let forget = {
        let ctx = ctx.clone();
        move |o: &kube::api::DynamicObject| ctx.forget(o)
    };
    let trigger = queue::primary(p.primary.subscribe(), p.reconcile_on_status, forget)
        .inspect(requested(&pending));
    let mut c =
        Controller::for_shared_stream_with(trigger, p.primary.store(), parent.resource.clone())
            .with_config(ControllerConfig::default().concurrency(p.concurrency));
    for inf in &ctx.caches.owned {
        c = c.reconcile_on(
            queue::owners(inf.subscribe(), parent.clone()).inspect(requested(&pending)),
        );
    }
    for (inf, w) in &p.related {
        let (rx, parent) = (inf.subscribe(), parent.clone());
        c = match &w.parents {
            Parents::Label(label) => c.reconcile_on(
                queue::by_label(rx, label.clone(), parent).inspect(requested(&pending)),
            ),
            Parents::Map(f) => c.reconcile_on(
                queue::by_script(rx, ctx.spec.script.clone(), f.clone(), parent)
                    .inspect(requested(&pending)),
            ),
        };
    }
    if let Some(period) = p.resync {
        let (store, pending) = (p.primary.store(), pending.clone());
        let all = queue::resync(period).inspect(move |_| {
            for o in store.state() {
                let (namespace, name) = queue::Request::key(&o);
                pending.added(namespace, name);
            }
        });
        c = c.reconcile_all_on(all);
    }
    tracing::info!(controller = %name, kind = %parent.resource.kind, namespace = p.primary.namespace.as_deref().unwrap_or("*"), "starting controller");
    c.graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile_one, error_policy, ctx)
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
        })
}
