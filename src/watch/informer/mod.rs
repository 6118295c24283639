//! One watch and one cache per resource type, shared by every controller and lookup that needs it.
//!
//! An [`Informer`] lists and watches one kind (in one namespace or all), keeps a reflector
//! [`Store`], and fans every change out to its subscribers: applied and deleted objects as they
//! come, and the whole cache once the initial list is complete. Subscribers that join later are
//! seeded with the current cache, so nobody misses the initial state. This is what lets a
//! controller's owned children, its lookups and its change-only writes cost no API calls.
//!
//! An informer also remembers the writes khai made to its objects that its cache has not shown
//! yet ([`Informer::remember_write`]): a watch lags behind the writes that cause it, and a
//! reconcile in between would otherwise see the old object and write the same thing again. An
//! entry holds while the object is seen at the version khai wrote from; seeing any other version
//! forgets it, and so do the object's deletion and a relist, so an object deleted (or pruned)
//! after khai wrote it is written again when it is wanted again.
//!
//! A failed watch is retried after [`WatchBackoff`]: 800 ms doubling to at most 5 s, so a watch
//! resumes within about 5 s of the API server coming back (kube-runtime's default, client-go's
//! reflector backoff, grows to 30 s plus up to 100 % jitter: after a 10 s API server restart
//! khai's watches came back 10 s after the server did).

use super::Kind;
use super::subscription::{self, Changed, Publisher, Subscription};
use crate::sync::{lock, read, write};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use tokio::task::JoinHandle;

type Subscribers = Arc<Mutex<Vec<Publisher>>>;

/// Which part of an object a remembered write went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The object as a whole (a child khai applies).
    Object,
    /// Its status subresource.
    Status,
}

/// A write khai made that the cache may not show yet: the resourceVersion the cache showed when
/// khai wrote, and a hash of what khai wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    from: String,
    hash: String,
}

type Memo = Arc<Mutex<HashMap<(Name, Slot), Written>>>;

/// A running watch of one kind with its cache.
pub struct Informer {
    pub kind: Kind,
    pub namespace: Option<String>,
    store: Store<DynamicObject>,
    subscribers: Subscribers,
    controlled: Arc<RwLock<Controlled>>,
    written: Memo,
    /// `true` once the first full list is in the store.
    synced: tokio::sync::watch::Receiver<bool>,
}

/// Namespace and name of a cached object.
type Name = (Option<String>, String);

/// The cached objects by the uid of their controller owner, so that "the children of X"
/// (pruning, `ctx.owned`) is a lookup rather than a scan of the whole cache, which would make
/// each reconcile cost O(objects) and a full pass O(objects²).
#[derive(Default)]
struct Controlled {
    children: HashMap<String, HashSet<Name>>,
    owner: HashMap<Name, String>,
}

impl Controlled {
    /// Records that `obj` is (now) controlled by the owner its ownerReferences name, if any.
    fn update(&mut self, obj: &DynamicObject, deleted: bool) {
        let name = (obj.metadata.namespace.clone(), obj.name_any());
        let owner = obj
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
            .filter(|_| !deleted);
        if self.owner.get(&name) == owner.as_ref() {
            return;
        }
        if let Some(old) = self.owner.remove(&name)
            && let Some(set) = self.children.get_mut(&old)
        {
            set.remove(&name);
            if set.is_empty() {
                self.children.remove(&old);
            }
        }
        if let Some(uid) = owner {
            self.children
                .entry(uid.clone())
                .or_default()
                .insert(name.clone());
            self.owner.insert(name, uid);
        }
    }

    fn rebuild(&mut self, objects: &[Arc<DynamicObject>]) {
        *self = Self::default();
        for o in objects {
            self.update(o, false);
        }
    }
}

impl Informer {
    /// The cache; `wait_until_ready` resolves after the first full list.
    pub fn store(&self) -> Store<DynamicObject> {
        self.store.clone()
    }

    /// Every object that changes (or is deleted) from now on, seeded with the current cache
    /// when the initial list has already completed; see [`Subscription`].
    pub fn subscribe(&self) -> Subscription {
        let (publisher, subscription) = subscription::channel();
        let mut subs = lock(&self.subscribers);
        // Seeding under the lock orders it before any event fanned out after this point.
        for object in self.store.state() {
            publisher.send(Changed {
                object,
                deleted: false,
            });
        }
        subs.push(publisher);
        subscription
    }

    /// Remembers that khai wrote `hash` to `slot` of the object `namespace/name` while the cache
    /// showed it at resourceVersion `from` (`""`: absent).
    pub fn remember_write(
        &self,
        namespace: Option<&str>,
        name: &str,
        slot: Slot,
        from: &str,
        hash: &str,
    ) {
        let key = ((namespace.map(str::to_string), name.to_string()), slot);
        let w = Written {
            from: from.to_string(),
            hash: hash.to_string(),
        };
        lock(&self.written).insert(key, w);
    }

    /// Whether khai already wrote `hash` to `slot` of `namespace/name` from the version the cache
    /// still shows (`seen`, `""` when absent): the write is on its way and need not be repeated.
    pub fn already_written(
        &self,
        namespace: Option<&str>,
        name: &str,
        slot: Slot,
        seen: &str,
        hash: &str,
    ) -> bool {
        let key = ((namespace.map(str::to_string), name.to_string()), slot);
        let mut memo = lock(&self.written);
        match memo.get(&key) {
            Some(w) if w.from == seen => w.hash == hash,
            Some(_) => {
                memo.remove(&key);
                false
            }
            None => false,
        }
    }

    /// How many writes are remembered, for tests of the memo's bounds.
    pub fn remembered_writes(&self) -> usize {
        lock(&self.written).len()
    }

    /// Waits until the first full list is in the cache.
    ///
    /// Any number of tasks may wait. (kube-runtime's `Store::wait_until_ready` wakes only the
    /// last task that polled it: its `DelayedInit` holds a oneshot receiver, which keeps one
    /// waker. With the controller and khai's readiness report both waiting, one of them slept
    /// for ever on some starts, which left `/readyz` at 503 while reconciles ran.)
    pub async fn synced(&self) {
        let mut rx = self.synced.clone();
        // The sender lives as long as the watch task; if that ends, so does waiting.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Whether the first full list is in the cache.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// An informer holding `objects`, with no watch behind it, for unit tests.
    #[cfg(test)]
    pub(crate) fn with_objects(
        kind: Kind,
        namespace: Option<&str>,
        objects: Vec<DynamicObject>,
    ) -> Arc<Self> {
        let mut writer = Writer::new(kind.resource.clone());
        let mut controlled = Controlled::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            controlled.update(&o, false);
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        Arc::new(Self {
            kind,
            namespace: namespace.map(str::to_string),
            store: writer.as_reader(),
            subscribers: Arc::default(),
            controlled: Arc::new(RwLock::new(controlled)),
            written: Arc::default(),
            synced: tokio::sync::watch::channel(true).1,
        })
    }

    /// The cached objects whose controller owner has `uid`.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        let names: Vec<Name> = read(&self.controlled)
            .children
            .get(uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        names
            .into_iter()
            .filter_map(|(ns, name)| {
                let r = ObjectRef::new_with(&name, self.kind.resource.clone());
                self.store.get(&match ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                })
            })
            .collect()
    }
}

/// Server-side filters of a watch: objects outside them are never sent to khai.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Label selector, as `kubectl -l` takes it.
    pub labels: Option<String>,
    /// Field selector, as `kubectl --field-selector` takes it.
    pub fields: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    filter: Filter,
}

/// All informers of one run, started on first use and stopped together.
pub struct Informers {
    client: kube::Client,
    running: Mutex<HashMap<Key, Arc<Informer>>>,
    tasks: Mutex<HashMap<Key, JoinHandle<()>>>,
}

impl Informers {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            running: Mutex::new(HashMap::new()),
            tasks: Mutex::new(HashMap::new()),
        }
    }

    /// The informer for `kind` in `namespace` (all namespaces when `None` or cluster-scoped),
    /// started if it is not running yet.
    pub fn informer(&self, kind: &Kind, namespace: Option<&str>) -> Arc<Informer> {
        self.filtered(kind, namespace, &Filter::default())
    }

    /// Like [`Self::informer`], narrowed by server-side selectors. Each distinct filter is its
    /// own watch.
    pub fn filtered(&self, kind: &Kind, namespace: Option<&str>, filter: &Filter) -> Arc<Informer> {
        let namespace = namespace.filter(|_| kind.namespaced).map(str::to_string);
        let key = Key {
            api_version: kind.resource.api_version.clone(),
            kind: kind.resource.kind.clone(),
            namespace: namespace.clone(),
            filter: filter.clone(),
        };
        let mut running = lock(&self.running);
        if let Some(inf) = running.get(&key) {
            return inf.clone();
        }
        let writer = Writer::new(kind.resource.clone());
        let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
        let informer = Arc::new(Informer {
            kind: kind.clone(),
            namespace: namespace.clone(),
            store: writer.as_reader(),
            subscribers: Arc::default(),
            controlled: Arc::default(),
            written: Arc::default(),
            synced: synced_rx,
        });
        let api = super::api(&self.client, kind, namespace.as_deref());
        let mut config = watcher::Config::default();
        if let Some(l) = &filter.labels {
            config = config.labels(l);
        }
        if let Some(f) = &filter.fields {
            config = config.fields(f);
        }
        let task = tokio::spawn(run(
            api,
            config,
            writer,
            Shared {
                subscribers: informer.subscribers.clone(),
                controlled: informer.controlled.clone(),
                written: informer.written.clone(),
                synced: synced_tx,
            },
            key.clone(),
        ));
        lock(&self.tasks).insert(key.clone(), task);
        running.insert(key, informer.clone());
        informer
    }

    /// Every running informer, for lookups by kind.
    pub fn all(&self) -> Vec<Arc<Informer>> {
        lock(&self.running).values().cloned().collect()
    }

    /// Stops every watch.
    pub fn shutdown(&self) {
        for (_, t) in lock(&self.tasks).drain() {
            t.abort();
        }
    }

    /// Stops the watches no one uses any more (`in_use` is false for them), such as those of
    /// kinds a reloaded config no longer names; returns how many stopped. Their caches go with
    /// them; asked for again, a kind gets a fresh watch.
    pub fn retain(&self, in_use: impl Fn(&Arc<Informer>) -> bool) -> usize {
        let mut running = lock(&self.running);
        let mut tasks = lock(&self.tasks);
        let unused: Vec<Key> = running
            .iter()
            .filter(|(_, i)| !in_use(i))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &unused {
            running.remove(key);
            if let Some(t) = tasks.remove(key) {
                t.abort();
            }
            tracing::info!(kind = %key.kind, namespace = ?key.namespace, "stopped watching: no controller uses this kind any more");
        }
        unused.len()
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What a watch keeps up to date besides the store.
struct Shared {
    subscribers: Subscribers,
    controlled: Arc<RwLock<Controlled>>,
    written: Memo,
    synced: tokio::sync::watch::Sender<bool>,
}

/// Forgets the writes remembered about `o`, which is gone.
fn forget(written: &Memo, o: &DynamicObject) {
    let name = (o.metadata.namespace.clone(), o.name_any());
    let mut memo = lock(written);
    memo.remove(&(name.clone(), Slot::Object));
    memo.remove(&(name, Slot::Status));
}

/// Drives one watch: updates the cache, then tells subscribers.
///
/// A panic while handling an event (a bug) must not stop the watch for good, leaving a cache
/// that never changes again: it is logged and the watch starts over with a fresh list.
async fn run(
    api: kube::Api<DynamicObject>,
    config: watcher::Config,
    mut writer: Writer<DynamicObject>,
    shared: Shared,
    key: Key,
) {
    use futures::FutureExt;
    loop {
        let once = watch(api.clone(), config.clone(), &mut writer, &shared, &key);
        if std::panic::AssertUnwindSafe(once)
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!(kind = %key.kind, namespace = ?key.namespace, "watch panicked; starting it over with a new list");
            crate::metrics::watch_restarted(&key.kind);
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// One watch, until its stream ends.
async fn watch(
    api: kube::Api<DynamicObject>,
    config: watcher::Config,
    writer: &mut Writer<DynamicObject>,
    shared: &Shared,
    key: &Key,
) {
    let Shared {
        subscribers: subs,
        controlled,
        written,
        synced,
    } = shared;
    let forget = |o: &DynamicObject| forget(written, o);
    // `metadata.managedFields` is often the larger half of an object and nothing in khai reads
    // it (scripts never see it, change detection compares fields): not caching it is the
    // biggest memory saving a cache of many objects can have.
    //
    // Objects in a list response carry no `apiVersion` and `kind` (watch events do), so after a
    // (re)list every cached child would look different from what khai applies and be written
    // again: every restart re-applied every child. The informer's kind fills them in.
    let types = kube::api::TypeMeta {
        api_version: key.api_version.clone(),
        kind: key.kind.clone(),
    };
    let mut events = watcher(api, config)
        .backoff(WatchBackoff::default())
        .modify(move |o| {
            o.managed_fields_mut().clear();
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
    let mut failing: Option<Failing> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(ev) => {
                if let Some(f) = failing.take() {
                    tracing::info!(kind = %key.kind, namespace = ?key.namespace, failures = f.count, after = ?f.since.elapsed(), "watch resumed");
                }
                ev
            }
            Err(e) => {
                let error = crate::client::watch_error(&e);
                match &mut failing {
                    Some(f) if f.error == error => {
                        f.count += 1;
                        tracing::debug!(kind = %key.kind, namespace = ?key.namespace, %error, failures = f.count, "watch failed again; retrying");
                    }
                    _ => {
                        tracing::warn!(kind = %key.kind, namespace = ?key.namespace, %error, "watch failed; retrying");
                        let (since, count) = failing
                            .as_ref()
                            .map_or((std::time::Instant::now(), 1), |f| (f.since, f.count + 1));
                        failing = Some(Failing {
                            since,
                            count,
                            error,
                        });
                    }
                }
                crate::metrics::watch_restarted(&key.kind);
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
                forget(&o);
                vec![Changed {
                    object: Arc::new(o),
                    deleted: true,
                }]
            }
            watcher::Event::InitDone => {
                let all = writer.as_reader().state();
                index(&|c| c.rebuild(&all));
                lock(written).clear();
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

/// A streak of watch failures.
struct Failing {
    since: std::time::Instant,
    count: u32,
    error: String,
}

/// How long a failed watch waits before it tries again: 800 ms (client-go's first step), doubling
/// up to [`WatchBackoff::CAP`], each step plus up to 20 % jitter so replicas do not retry in
/// step; back to 800 ms after any event.
///
/// The cap bounds how long khai stays blind after the API server is back: a watch retries at
/// most [`WatchBackoff::CAP`] (+20 %) after the server returns. client-go's reflectors (and
/// kube-runtime's default) cap at 30 s with up to 100 % jitter, to spare an API server that
/// thousands of kubelets and controllers hammer; an operator has a handful of informers, so
/// retrying each every 5 s while the server is away costs it a few requests a second at most,
/// which buys resuming within seconds instead of up to a minute.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: std::time::Duration,
}

impl WatchBackoff {
    /// The first wait.
    pub(crate) const FIRST: std::time::Duration = std::time::Duration::from_millis(800);
    /// The longest wait, before jitter.
    pub(crate) const CAP: std::time::Duration = std::time::Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        use std::hash::BuildHasher;
        let step = self.next;
        self.next = (step * 2).min(Self::CAP);
        // Up to 20 % more, from std's randomly keyed hasher (no RNG crate for one number).
        let random = std::collections::hash_map::RandomState::new().hash_one(step);
        #[allow(clippy::cast_precision_loss)]
        let jitter = (random % 1000) as f64 / 5000.0;
        Some(step.mul_f64(1.0 + jitter))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_failing_watch_waits_800ms_doubling_to_5s_with_at_most_20_percent_jitter() {
        use kube::runtime::utils::Backoff;
        use std::time::Duration;
        let mut b = WatchBackoff::default();
        let steps: Vec<Duration> = (0..8).map(|_| b.next().unwrap()).collect();
        let base = [800, 1600, 3200, 5000, 5000, 5000, 5000, 5000];
        for (got, ms) in steps.iter().zip(base) {
            let ms = Duration::from_millis(ms);
            assert!(
                *got >= ms && *got <= ms.mul_f64(1.2),
                "step {got:?} is not within 20 % above {ms:?}: {steps:?}"
            );
        }
        b.reset();
        assert!(
            b.next().unwrap() < Duration::from_millis(961),
            "reset starts over"
        );
    }

    fn child(name: &str, owner: Option<&str>) -> Arc<DynamicObject> {
        let refs: Vec<_> = owner
            .map(|uid| json!({ "apiVersion": "x.dev/v1", "kind": "App", "name": "p", "uid": uid, "controller": true }))
            .into_iter()
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": name, "namespace": "ns", "ownerReferences": refs },
            }))
            .unwrap(),
        )
    }

    fn children(c: &Controlled, uid: &str) -> Vec<String> {
        let mut v: Vec<_> = c
            .children
            .get(uid)
            .into_iter()
            .flatten()
            .map(|(_, n)| n.clone())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_owner_index_follows_adoption_release_deletion_and_relists() {
        let mut c = Controlled::default();
        c.update(&child("a", Some("u1")), false);
        c.update(&child("b", Some("u1")), false);
        c.update(&child("free", None), false);
        assert_eq!(children(&c, "u1"), ["a", "b"]);
        // Adopted by another owner, released, deleted.
        c.update(&child("a", Some("u2")), false);
        assert_eq!(children(&c, "u1"), ["b"]);
        assert_eq!(children(&c, "u2"), ["a"]);
        c.update(&child("a", None), false);
        c.update(&child("b", Some("u1")), true);
        assert!(
            c.children.is_empty() && c.owner.is_empty(),
            "nothing left behind"
        );
        // A relist replaces everything.
        c.update(&child("stale", Some("u3")), false);
        c.rebuild(&[child("x", Some("u1"))]);
        assert_eq!(children(&c, "u1"), ["x"]);
        assert!(children(&c, "u3").is_empty());
    }

    fn informer() -> Informer {
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        );
        Informer {
            kind: Kind {
                resource: ar.clone(),
                namespaced: true,
            },
            namespace: None,
            store: Writer::new(ar).as_reader(),
            subscribers: Arc::default(),
            controlled: Arc::default(),
            written: Arc::default(),
            synced: tokio::sync::watch::channel(false).1,
        }
    }

    /// Issue 11: a child pruned before a successful reconcile had seen it was never re-created,
    /// because the memo of its first write ("written while absent") outlived the prune.
    #[test]
    fn a_remembered_write_holds_while_the_cache_is_stale_and_goes_with_the_object() {
        let inf = informer();
        let ns = Some("ns");
        inf.remember_write(ns, "c", Slot::Object, "", "h1");
        assert!(
            inf.already_written(ns, "c", Slot::Object, "", "h1"),
            "the cache has not shown the create yet"
        );
        assert!(!inf.already_written(ns, "c", Slot::Object, "", "h2"));
        forget(&inf.written, &child("c", None));
        assert!(
            !inf.already_written(ns, "c", Slot::Object, "", "h1"),
            "deleted (or pruned) before a reconcile saw it: wanted again, it is written again"
        );
        inf.remember_write(ns, "c", Slot::Status, "5", "h");
        assert!(inf.already_written(ns, "c", Slot::Status, "5", "h"));
        assert!(!inf.already_written(ns, "c", Slot::Status, "6", "h"));
        assert!(
            !inf.already_written(ns, "c", Slot::Status, "5", "h"),
            "forgotten once a newer version was seen"
        );
        assert_eq!(inf.remembered_writes(), 0);
    }

    /// Issue 11: `/readyz` stayed at 503 on some starts. kube-runtime's readiness wakes only
    /// the last of several waiters; khai's own signal wakes every one.
    #[tokio::test(start_paused = true)]
    async fn every_task_waiting_for_the_first_list_wakes_up() {
        use std::time::Duration;
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        );
        // kube-runtime's Store: two waiters, one wake-up.
        let mut writer: Writer<DynamicObject> = Writer::new(ar);
        let store = writer.as_reader();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let s = store.clone();
                tokio::spawn(async move { s.wait_until_ready().await.is_ok() })
            })
            .collect();
        tokio::task::yield_now().await;
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut woken = 0;
        for w in waiters {
            if tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .is_ok()
            {
                woken += 1;
            }
        }
        assert_eq!(
            woken, 1,
            "kube-runtime's Store woke {woken} of 2 waiters; if both, khai could use it again"
        );

        // khai's informer signal: every waiter wakes.
        let (tx, rx) = tokio::sync::watch::channel(false);
        let inf = Arc::new(Informer {
            synced: rx,
            ..informer()
        });
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let i = inf.clone();
                tokio::spawn(async move { i.synced().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!inf.is_synced());
        tx.send_replace(true);
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("a task waiting for the first list was never woken")
                .unwrap();
        }
    }
}
