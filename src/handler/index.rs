//! `[[index]]`: lookup tables over every object of a kind (Kopf's `@kopf.index`), read by every
//! script as `ctx.index(name, key)` (the values under `key`) or `ctx.index(name)` (every key).
//!
//! An index's function `fn name(obj)` returns a key, an array of keys (the value under each is
//! the object), a map of keys to values, or `()` to leave the object out. khai calls it for each
//! object of the kind its caches hold and again whenever one changes; a deleted object's
//! entries go with it. Controllers start only once every index has taken in the objects of its
//! first list, so a reconcile never reads a half-built index. An index holds one entry set per
//! object in the cache: it grows with the cluster, not with time.

use crate::config::handlers::Index;
use crate::script::{CallArg, NoIndex, Script};
use crate::watch::{Changed, Informer};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

/// One `[[index]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct IndexEntry {
    pub spec: Index,
    pub script: Script,
}

/// The indexes of one config version, kept up to date by tasks it owns: they stop when it is
/// dropped (with the last controller of that version).
pub(crate) struct IndexSet {
    tables: Arc<HashMap<String, RwLock<Table>>>,
    ready: tokio::sync::watch::Receiver<usize>,
    count: usize,
    _tasks: std::sync::Mutex<tokio::task::JoinSet<()>>,
}

/// One index: what each object contributed, and the same by key.
#[derive(Default)]
struct Table {
    by_object: HashMap<String, Vec<(String, Value)>>,
    by_key: BTreeMap<String, BTreeMap<String, Vec<Value>>>,
}

impl Table {
    fn set(&mut self, uid: &str, entries: Vec<(String, Value)>) {
        self.remove(uid);
        for (key, value) in &entries {
            self.by_key
                .entry(key.clone())
                .or_default()
                .entry(uid.to_string())
                .or_default()
                .push(value.clone());
        }
        if !entries.is_empty() {
            self.by_object.insert(uid.to_string(), entries);
        }
    }

    fn remove(&mut self, uid: &str) {
        let Some(old) = self.by_object.remove(uid) else {
            return;
        };
        for (key, _) in old {
            if let Some(objects) = self.by_key.get_mut(&key) {
                objects.remove(uid);
                if objects.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn get(&self, key: &str) -> Vec<Value> {
        self.by_key
            .get(key)
            .into_iter()
            .flat_map(|objects| objects.values().flatten().cloned())
            .collect()
    }
}

impl IndexSet {
    /// Starts one task per index and cache that fills the index and keeps it current;
    /// `caches[i]` are the informers of index `i`'s kind (one per watched namespace).
    pub(crate) fn start(entries: &[IndexEntry], caches: Vec<Vec<Arc<Informer>>>) -> Arc<Self> {
        let tables: Arc<HashMap<_, _>> = Arc::new(
            entries
                .iter()
                .map(|e| (e.spec.name.clone(), RwLock::new(Table::default())))
                .collect(),
        );
        let mut tasks = tokio::task::JoinSet::new();
        let count: usize = caches.iter().map(Vec::len).sum();
        let (ready_tx, ready) = tokio::sync::watch::channel(0usize);
        let ready_tx = Arc::new(ready_tx);
        for (entry, informers) in entries.iter().zip(caches) {
            for informer in informers {
                let follow = Follow {
                    entry: entry.clone(),
                    tables: tables.clone(),
                    informer,
                    ready: ready_tx.clone(),
                };
                let span = tracing::info_span!("index", name = %entry.spec.name);
                tasks.spawn(tracing::Instrument::instrument(follow.run(), span));
            }
        }
        Arc::new(Self {
            tables,
            ready,
            count,
            _tasks: std::sync::Mutex::new(tasks),
        })
    }

    /// Waits until every index has taken in its caches' first lists.
    pub(crate) async fn ready(&self) {
        let mut rx = self.ready.clone();
        let count = self.count;
        let _ = rx.wait_for(|n| *n >= count).await;
    }
}

impl crate::script::Indexes for IndexSet {
    fn get(&self, index: &str, key: &str) -> Result<Vec<Value>, NoIndex> {
        let table = self.tables.get(index).ok_or_else(|| unknown(index))?;
        Ok(crate::sync::read(table).get(key))
    }

    fn all(&self, index: &str) -> Result<Map<String, Value>, NoIndex> {
        let table = self.tables.get(index).ok_or_else(|| unknown(index))?;
        let table = crate::sync::read(table);
        Ok(table
            .by_key
            .keys()
            .map(|k| (k.clone(), Value::Array(table.get(k))))
            .collect())
    }
}

fn unknown(index: &str) -> NoIndex {
    NoIndex(index.into())
}

/// One index following one cache.
struct Follow {
    entry: IndexEntry,
    tables: Arc<HashMap<String, RwLock<Table>>>,
    informer: Arc<Informer>,
    ready: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Follow {
    async fn run(self) {
        self.informer.synced().await;
        for obj in self.informer.store().state() {
            self.update(&obj, false).await;
        }
        self.ready.send_modify(|n| *n += 1);
        let changes = self.informer.subscribe();
        loop {
            let Changed { object, deleted } = changes.next().await;
            self.update(&object, deleted).await;
        }
    }

    async fn update(&self, obj: &DynamicObject, deleted: bool) {
        let uid = obj.uid().unwrap_or_default();
        let entries = if deleted {
            Vec::new()
        } else {
            self.entries(obj).await
        };
        if let Some(table) = self.tables.get(&self.entry.spec.name) {
            crate::sync::write(table).set(&uid, entries);
        }
    }

    /// What the index function says about `obj`; a failure is logged and leaves it out.
    async fn entries(&self, obj: &DynamicObject) -> Vec<(String, Value)> {
        let Ok(view) = crate::script::object_view(obj) else {
            return Vec::new();
        };
        let function = &self.entry.spec.function;
        let out = match self
            .entry
            .script
            .call_args_async(function, vec![CallArg::Json(view.clone())])
            .await
        {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!(object = %obj.name_any(), error = %e, "index function failed; the object is left out");
                return Vec::new();
            }
        };
        match keys(out, &view) {
            Ok(entries) => entries,
            Err(message) => {
                tracing::warn!(object = %obj.name_any(), function = %function, "index function returned {message}; the object is left out");
                Vec::new()
            }
        }
    }
}

/// An index function's answer holds a key that is not a string, number or bool.
#[derive(Debug, thiserror::Error)]
#[error("a key of type {type_name}; keys are strings or numbers")]
pub(crate) struct KeyError {
    type_name: &'static str,
}

/// Why [`Fixed::build`] could not build an index.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    #[error("index {name}: {cause}")]
    Call {
        name: String,
        cause: Box<crate::script::ScriptError>,
    },
    #[error("index {name}: {function} returned {cause}")]
    Key {
        name: String,
        function: String,
        cause: KeyError,
    },
}

/// The entries an index function's answer stands for.
fn keys(out: Value, obj: &Value) -> Result<Vec<(String, Value)>, KeyError> {
    let key = |k: Value| match k {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(KeyError {
            type_name: crate::script::type_name(&other),
        }),
    };
    match out {
        Value::Null => Ok(Vec::new()),
        Value::Array(keys) => keys
            .into_iter()
            .map(|k| Ok((key(k)?, obj.clone())))
            .collect(),
        Value::Object(map) => Ok(map.into_iter().collect()),
        k => Ok(vec![(key(k)?, obj.clone())]),
    }
}

/// Indexes over a fixed set of objects, built at once: what `khai test` gives a case's
/// `ctx.index`, through the same functions and the same key rules as [`IndexSet`].
pub(crate) struct Fixed {
    tables: HashMap<String, Table>,
}

impl Fixed {
    /// Each index of `entries` over the objects `of_kind` says are of its kind. A failing index
    /// function is an error (`name: message`), not an object left out: a case should say so.
    pub(crate) fn build(
        entries: &[IndexEntry],
        objects: &[Value],
        of_kind: impl Fn(&Index, &Value) -> bool,
    ) -> Result<Self, BuildError> {
        let mut tables = HashMap::new();
        for e in entries {
            let mut table = Table::default();
            for (i, obj) in objects.iter().enumerate() {
                if !of_kind(&e.spec, obj) {
                    continue;
                }
                let name = &e.spec.name;
                let out = e
                    .script
                    .call_args(&e.spec.function, &[CallArg::Json(obj.clone())])
                    .map_err(|cause| BuildError::Call {
                        name: name.clone(),
                        cause: Box::new(cause),
                    })?;
                let entries = keys(out, obj).map_err(|cause| BuildError::Key {
                    name: name.clone(),
                    function: e.spec.function.clone(),
                    cause,
                })?;
                let uid = obj["metadata"]["uid"]
                    .as_str()
                    .map_or_else(|| i.to_string(), str::to_string);
                table.set(&uid, entries);
            }
            tables.insert(e.spec.name.clone(), table);
        }
        Ok(Self { tables })
    }
}

impl crate::script::Indexes for Fixed {
    fn get(&self, index: &str, key: &str) -> Result<Vec<Value>, NoIndex> {
        Ok(self
            .tables
            .get(index)
            .ok_or_else(|| unknown(index))?
            .get(key))
    }

    fn all(&self, index: &str) -> Result<Map<String, Value>, NoIndex> {
        let table = self.tables.get(index).ok_or_else(|| unknown(index))?;
        Ok(table
            .by_key
            .keys()
            .map(|k| (k.clone(), Value::Array(table.get(k))))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_a_key_keys_or_a_map_of_keys_to_values() {
        let obj = json!({ "metadata": { "name": "a" } });
        assert_eq!(
            keys(json!("x"), &obj).unwrap(),
            vec![("x".into(), obj.clone())]
        );
        assert_eq!(keys(json!(["x", 2]), &obj).unwrap().len(), 2);
        assert_eq!(
            keys(json!({ "x": 1 }), &obj).unwrap(),
            vec![("x".into(), json!(1))]
        );
        assert!(keys(Value::Null, &obj).unwrap().is_empty());
        assert!(keys(json!([{}]), &obj).is_err());
    }

    #[test]
    fn an_objects_entries_are_replaced_and_removed_whole() {
        let mut t = Table::default();
        t.set("u1", vec![("a".into(), json!(1)), ("b".into(), json!(2))]);
        t.set("u2", vec![("a".into(), json!(3))]);
        assert_eq!(t.get("a"), vec![json!(1), json!(3)]);
        t.set("u1", vec![("c".into(), json!(4))]);
        assert_eq!(t.get("a"), vec![json!(3)]);
        assert!(t.get("b").is_empty());
        t.remove("u2");
        assert!(!t.by_key.contains_key("a"));
        assert_eq!(t.by_object.len(), 1);
    }
}
