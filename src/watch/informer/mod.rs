//! One watch and one cache per resource type, shared by every controller and lookup that needs it.
//!
//! An [`Informer`] lists and watches one kind (in one namespace or all), keeps a reflector
//! [`Store`], and fans every change out to its subscribers: applied and deleted objects as they
//! come, and the whole cache once the initial list is complete. Subscribers that join later are
//! seeded with the current cache, so nobody misses the initial state. This is what lets a
//! controller's owned children, its lookups and its change-only writes cost no API calls.
//!
//! An informer only applies watch events. What khai wrote that the cache does not show yet is
//! kept in the writing object's record (`crate::object::sent`), not here.
//!
//! A failed watch is retried after [`WatchBackoff`](backoff::WatchBackoff): 800 ms doubling to at most 5 s, so a watch
//! resumes within about 5 s of the API server coming back (kube-runtime's default, client-go's
//! reflector backoff, grows to 30 s plus up to 100 % jitter: after a 10 s API server restart
//! khai's watches came back 10 s after the server did).

mod backoff;
mod controlled;
mod run;

use super::Kind;
use super::subscription::{self, Changed, Publisher, Subscription};
use crate::sync::{lock, read};
use controlled::{Controlled, Name};

use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use run::{Shared, run};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use tokio::task::JoinHandle;

type Subscribers = Arc<Mutex<Vec<Publisher>>>;

/// A running watch of one kind with its cache.
pub struct Informer {
    pub kind: Kind,
    pub namespace: Option<String>,
    store: Store<DynamicObject>,
    subscribers: Subscribers,
    controlled: Arc<RwLock<Controlled>>,
    /// `true` once the first full list is in the store.
    synced: tokio::sync::watch::Receiver<bool>,
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

    /// An informer holding `objects`, with no watch behind it: for unit tests, and for `khai
    /// test`, whose cases list the objects.
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
            synced: tokio::sync::watch::channel(true).1,
        })
    }

    /// The cached objects whose parent has `uid`: its controlled children, and the unowned
    /// children khai marked with its owner label ([`super::ownership`]).
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
            synced: synced_rx,
        });
        let api = match namespace.as_deref() {
            Some(ns) => kube::Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            None => kube::Api::all_with(self.client.clone(), &kind.resource),
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn child(name: &str, owner: Option<&str>) -> Arc<DynamicObject> {
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
            synced: tokio::sync::watch::channel(false).1,
        }
    }

    /// kube-runtime's readiness wakes only the last of several waiters (`/readyz` would stay at
    /// 503 on some starts); khai's own signal wakes every one.
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
