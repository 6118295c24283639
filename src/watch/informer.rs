//! One watch and one cache per resource type, shared by every controller and lookup that needs it.
//!
//! An [`Informer`] lists and watches one kind (in one namespace or all), keeps a reflector
//! [`Store`], and fans every change out to its subscribers: applied and deleted objects as they
//! come, and the whole cache once the initial list is complete. Subscribers that join later are
//! seeded with the current cache, so nobody misses the initial state. This is what lets a
//! controller's owned children, its lookups and its change-only writes cost no API calls.

use super::Kind;
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{Store, store::Writer};
use kube::ResourceExt;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

type Subscribers = Arc<Mutex<Vec<UnboundedSender<Arc<DynamicObject>>>>>;

/// A running watch of one kind with its cache.
pub struct Informer {
    pub kind: Kind,
    pub namespace: Option<String>,
    store: Store<DynamicObject>,
    subscribers: Subscribers,
}

impl Informer {
    /// The cache; `wait_until_ready` resolves after the first full list.
    pub fn store(&self) -> Store<DynamicObject> {
        self.store.clone()
    }

    /// A stream of every object that changes (or is deleted) from now on, seeded with the current
    /// cache when the initial list has already completed.
    pub fn subscribe(&self) -> UnboundedReceiver<Arc<DynamicObject>> {
        let (tx, rx) = unbounded_channel();
        if let Ok(mut subs) = self.subscribers.lock() {
            // Seeding under the lock orders it before any event fanned out after this point;
            // an object in both the seed and a later event is merely seen twice.
            for obj in self.store.state() {
                let _ = tx.send(obj);
            }
            subs.push(tx);
        }
        rx
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
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Informers {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            running: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Vec::new()),
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
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(inf) = running.get(&key) {
            return inf.clone();
        }
        let writer = Writer::new(kind.resource.clone());
        let informer = Arc::new(Informer {
            kind: kind.clone(),
            namespace: namespace.clone(),
            store: writer.as_reader(),
            subscribers: Arc::default(),
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
            informer.subscribers.clone(),
            key.clone(),
        ));
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task);
        running.insert(key, informer.clone());
        informer
    }

    /// Every running informer, for lookups by kind.
    pub fn all(&self) -> Vec<Arc<Informer>> {
        self.running
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Stops every watch.
    pub fn shutdown(&self) {
        if let Ok(mut tasks) = self.tasks.lock() {
            for t in tasks.drain(..) {
                t.abort();
            }
        }
    }
}

impl Drop for Informers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Drives one watch: updates the cache, then tells subscribers.
async fn run(
    api: kube::Api<DynamicObject>,
    config: watcher::Config,
    mut writer: Writer<DynamicObject>,
    subs: Subscribers,
    key: Key,
) {
    // `metadata.managedFields` is often the larger half of an object and nothing in khai reads
    // it (scripts never see it, change detection compares fields): not caching it is the
    // biggest memory saving a cache of many objects can have.
    let mut events = watcher(api, config)
        .default_backoff()
        .modify(|o| o.managed_fields_mut().clear())
        .boxed();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(kind = %key.kind, namespace = ?key.namespace, error = %e, "watch failed; retrying");
                crate::metrics::watch_restarted(&key.kind);
                continue;
            }
        };
        writer.apply_watcher_event(&event);
        let changed: Vec<Arc<DynamicObject>> = match event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => vec![Arc::new(o)],
            watcher::Event::InitDone => writer.as_reader().state(),
            watcher::Event::Init | watcher::Event::InitApply(_) => continue,
        };
        if let Ok(mut subs) = subs.lock() {
            subs.retain(|tx| changed.iter().all(|o| tx.send(o.clone()).is_ok()));
        }
    }
}
