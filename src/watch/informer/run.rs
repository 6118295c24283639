//! The task behind an informer: one watch at a time, started over after a panic, that updates
//! the cache and its owner index, then tells subscribers what changed.

use super::backoff::{Failing, WatchBackoff, paced};
use super::controlled::{Controlled, Name};
use super::{Key, Subscribers};
use crate::metrics::WatchRestart;
use crate::sync::{lock, write};
use crate::watch::decode::Watched;
use crate::watch::subscription::Changed;
use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;
use std::sync::{Arc, RwLock};

/// What a watch keeps up to date besides the store.
pub(super) struct Shared {
    pub(super) subscribers: Subscribers,
    pub(super) controlled: Arc<RwLock<Controlled>>,
    pub(super) synced: tokio::sync::watch::Sender<bool>,
}

/// Drives one watch: updates the cache, then tells subscribers.
///
/// A panic while handling an event (a bug) must not stop the watch for good, leaving a cache
/// that never changes again: it is logged and the watch starts over with a fresh list.
pub(super) async fn run(
    api: kube::Api<Watched>,
    config: watcher::Config,
    mut writer: Writer<DynamicObject>,
    shared: Shared,
    key: Key,
) {
    use futures::FutureExt;
    let _live = crate::metrics::LiveWatch::new(&key.kind);
    loop {
        let once = watch(api.clone(), config.clone(), &mut writer, &shared, &key);
        if std::panic::AssertUnwindSafe(once)
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!(kind = %key.kind, namespace = ?key.namespace, "watch panicked; starting it over with a new list");
            crate::metrics::watch_restarted(&key.kind, WatchRestart::Panic);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// One watch, until its stream ends.
async fn watch(
    api: kube::Api<Watched>,
    config: watcher::Config,
    writer: &mut Writer<DynamicObject>,
    shared: &Shared,
    key: &Key,
) {
    let Shared {
        subscribers: subs,
        controlled,
        synced,
    } = shared;
    // Objects are decoded by `Watched` in one pass and without `metadata.managedFields`, often
    // the larger half of an object, which nothing in khai reads (scripts never see it, change
    // detection compares fields): not decoding or caching it is the biggest saving in CPU and
    // memory a cache of many objects can have.
    //
    // Objects in a list response carry no `apiVersion` and `kind` (watch events do), so after a
    // (re)list every cached child would look different from what khai applies and be written
    // again: every restart re-applied every child. The informer's kind fills them in.
    let types = kube::api::TypeMeta {
        api_version: key.api_version.clone(),
        kind: key.kind.clone(),
    };
    let mut events = paced(watcher(api, config), WatchBackoff::default())
        .map_ok(unwrap)
        .modify(move |o| {
            if o.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
                o.types = Some(types.clone());
            }
        })
        .boxed();
    // What the cache held when a relist began: objects missing from the new list were deleted
    // while the watch was down, and subscribers must hear of that too.
    let mut before_relist: Vec<Arc<DynamicObject>> = Vec::new();
    // A failing watch logs its first error and each new one; the same error again (every few
    // seconds while the API server is away) only at debug level.
    let mut failing = Failing::default();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(ev) => {
                if let Some(f) = failing.seen(&ev) {
                    tracing::info!(kind = %key.kind, namespace = ?key.namespace, failures = f.count, after = ?f.since.elapsed(), "watch resumed");
                }
                ev
            }
            Err(e) => {
                let error = crate::client::watch_error(&e);
                if failing.failed(error.clone()) {
                    tracing::warn!(kind = %key.kind, namespace = ?key.namespace, %error, "watch failed; retrying");
                } else {
                    tracing::debug!(kind = %key.kind, namespace = ?key.namespace, %error, failures = failing.count(), "watch failed again; retrying");
                }
                crate::metrics::watch_restarted(&key.kind, restart_reason(&e));
                continue;
            }
        };
        if matches!(event, watcher::Event::Init) {
            before_relist = writer.as_reader().state();
        }
        writer.apply_watcher_event(&event);
        // The index follows the store before anyone hears of the change.
        let index = |f: &dyn Fn(&mut Controlled)| {
            f(&mut write(controlled));
        };
        let applied = |object| Changed {
            object,
            deleted: false,
        };
        let changed: Vec<Changed> = match event {
            watcher::Event::Apply(o) => {
                index(&|c| c.update(&o, false));
                vec![applied(Arc::new(o))]
            }
            watcher::Event::Delete(o) => {
                index(&|c| c.update(&o, true));
                vec![Changed {
                    object: Arc::new(o),
                    deleted: true,
                }]
            }
            watcher::Event::InitDone => {
                let all = writer.as_reader().state();
                index(&|c| c.rebuild(&all));
                synced.send_replace(true);
                let listed: HashSet<Name> = all
                    .iter()
                    .map(|o| (o.metadata.namespace.clone(), o.name_any()))
                    .collect();
                let gone = std::mem::take(&mut before_relist)
                    .into_iter()
                    .filter(|o| !listed.contains(&(o.metadata.namespace.clone(), o.name_any())))
                    .map(|object| Changed {
                        object,
                        deleted: true,
                    });
                all.into_iter().map(applied).chain(gone).collect()
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => continue,
        };
        lock(subs).retain(|p| changed.iter().all(|c| p.send(c.clone())));
    }
}

/// The event with the object [`Watched`] decoded.
fn unwrap(event: watcher::Event<Watched>) -> watcher::Event<DynamicObject> {
    use watcher::Event as E;
    match event {
        E::Apply(Watched(o)) => E::Apply(o),
        E::Delete(Watched(o)) => E::Delete(o),
        E::Init => E::Init,
        E::InitApply(Watched(o)) => E::InitApply(o),
        E::InitDone => E::InitDone,
    }
}

/// Why the watcher's error `e` restarts the watch: the API server answering 410 Gone (the
/// version it watched from was compacted away) is the one a relist is for.
fn restart_reason(e: &kube::runtime::watcher::Error) -> WatchRestart {
    use kube::runtime::watcher::Error as W;
    let gone = match e {
        W::WatchError(status) => status.code == 410,
        W::WatchFailed(kube::Error::Api(status))
        | W::InitialListFailed(kube::Error::Api(status))
        | W::WatchStartFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    };
    if gone {
        WatchRestart::Gone
    } else {
        WatchRestart::Error
    }
}
