//! One watch and one cache per resource type, shared by every controller and lookup that needs it.
//!
//! An [`Informer`] lists and watches one kind (in one namespace or all), keeps a reflector
//! [`Store`], and fans every change out to its subscribers: applied and deleted objects as they
//! come, and the whole cache once the initial list is complete. Subscribers that join later are
//! seeded with the current cache, so nobody misses the initial state. This is what lets a
//! controller's owned children, its lookups and its change-only writes cost no API calls.

use super::Kind;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

type Subscribers = Arc<Mutex<Vec<UnboundedSender<Arc<DynamicObject>>>>>;

/// A running watch of one kind with its cache.
pub struct Informer {
    pub kind: Kind,
    pub namespace: Option<String>,
    store: Store<DynamicObject>,
    subscribers: Subscribers,
    controlled: Arc<RwLock<Controlled>>,
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

    /// The cached objects whose controller owner has `uid`.
    pub fn controlled_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        let names: Vec<Name> = match self.controlled.read() {
            Ok(c) => c.children.get(uid).into_iter().flatten().cloned().collect(),
            Err(_) => return Vec::new(),
        };
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
            controlled: Arc::default(),
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
            (informer.subscribers.clone(), informer.controlled.clone()),
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
    (subs, controlled): (Subscribers, Arc<RwLock<Controlled>>),
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
        // The index follows the store before anyone hears of the change.
        let index = |f: &dyn Fn(&mut Controlled)| {
            if let Ok(mut c) = controlled.write() {
                f(&mut c);
            }
        };
        let changed: Vec<Arc<DynamicObject>> = match event {
            watcher::Event::Apply(o) => {
                index(&|c| c.update(&o, false));
                vec![Arc::new(o)]
            }
            watcher::Event::Delete(o) => {
                index(&|c| c.update(&o, true));
                vec![Arc::new(o)]
            }
            watcher::Event::InitDone => {
                let all = writer.as_reader().state();
                index(&|c| c.rebuild(&all));
                all
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => continue,
        };
        if let Ok(mut subs) = subs.lock() {
            subs.retain(|tx| changed.iter().all(|o| tx.send(o.clone()).is_ok()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
