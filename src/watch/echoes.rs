//! The writes khai made whose watch events are on their way back ("expectations", as
//! controller-runtime calls them): a child khai applied comes back through its kind's watch at
//! the resourceVersion the API server answered with, and the parent's reconcile produced that
//! very state, so that event need not queue the parent again.
//!
//! A record is (namespace, name) → the resourceVersion khai's write returned, with the uid of
//! the parent that wrote it. An event at exactly that version consumes the record and is
//! skipped; any other event (someone else's edit, a later version, a deletion) triggers as
//! before. A resourceVersion names one write of one object, so a record can never hide a
//! change khai did not make. A record whose event was seen before it was made (the watch beat
//! the write's response) stays until it is evicted: the map holds two generations of at most
//! [`CAPACITY`] records each and drops the older one whole when the newer fills up. A record
//! evicted early only costs the old behaviour, one reconcile that finds nothing to do.

use crate::sync::lock;
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Records per generation; at most twice as many are held.
pub const CAPACITY: usize = 2048;

type Name = (Option<String>, String);

/// The resourceVersion khai's write returned, and the uid of the parent that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Echo {
    rv: String,
    parent: String,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<Name, Echo>,
    older: HashMap<Name, Echo>,
}

/// The expected echoes of khai's writes to one kind's objects, shared by the writer and the
/// trigger streams of that kind's informer.
#[derive(Debug, Clone)]
pub struct Echoes {
    inner: Arc<Mutex<Generations>>,
    capacity: usize,
}

impl Default for Echoes {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl Echoes {
    /// Holds at most `2 * capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// khai (reconciling the parent with uid `parent`) wrote `namespace/name` and the API server
    /// answered with resourceVersion `rv`.
    pub fn expect(&self, namespace: Option<&str>, name: &str, rv: &str, parent: &str) {
        if rv.is_empty() {
            return;
        }
        let key = (namespace.map(str::to_string), name.to_string());
        let echo = Echo {
            rv: rv.to_string(),
            parent: parent.to_string(),
        };
        let mut g = lock(&self.inner);
        g.older.remove(&key);
        g.newer.insert(key, echo);
        if g.newer.len() >= self.capacity {
            g.older = std::mem::take(&mut g.newer);
        }
    }

    /// Whether the watch event for `obj` (`deleted` when it is gone) is the echo of khai's own
    /// write, which needs no reconcile. A match is consumed; a deletion forgets the record.
    pub fn is_echo(&self, obj: &DynamicObject, deleted: bool) -> bool {
        let key = (obj.namespace(), obj.name_any());
        let mut g = lock(&self.inner);
        if deleted {
            g.newer.remove(&key);
            g.older.remove(&key);
            return false;
        }
        let Some(rv) = obj.resource_version() else {
            return false;
        };
        let g = &mut *g;
        for map in [&mut g.newer, &mut g.older] {
            if map.get(&key).is_some_and(|e| e.rv == rv) {
                map.remove(&key);
                return true;
            }
        }
        false
    }

    /// Forgets the records of the parent with uid `parent`, which is gone.
    pub fn forget_parent(&self, parent: &str) {
        let mut g = lock(&self.inner);
        g.newer.retain(|_, e| e.parent != parent);
        g.older.retain(|_, e| e.parent != parent);
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        let g = lock(&self.inner);
        g.newer.len() + g.older.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(name: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns", "resourceVersion": rv },
        }))
        .unwrap()
    }

    #[test]
    fn the_version_khai_wrote_is_skipped_once() {
        let e = Echoes::default();
        e.expect(Some("ns"), "c", "7", "p");
        assert!(e.is_echo(&child("c", "7"), false));
        assert!(!e.is_echo(&child("c", "7"), false), "consumed by the match");
        assert!(e.is_empty());
    }

    #[test]
    fn another_version_another_object_or_namespace_triggers() {
        let e = Echoes::default();
        e.expect(Some("ns"), "c", "7", "p");
        assert!(
            !e.is_echo(&child("c", "8"), false),
            "someone else's later edit"
        );
        assert!(
            !e.is_echo(&child("c", "6"), false),
            "an older event arriving late"
        );
        assert!(!e.is_echo(&child("d", "7"), false));
        let mut elsewhere = child("c", "7");
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!e.is_echo(&elsewhere, false));
        assert!(
            e.is_echo(&child("c", "7"), false),
            "a mismatch leaves the record: only the exact version is khai's"
        );
    }

    #[test]
    fn a_deletion_triggers_and_forgets_the_record() {
        let e = Echoes::default();
        e.expect(Some("ns"), "c", "7", "p");
        assert!(!e.is_echo(&child("c", "7"), true));
        assert!(e.is_empty());
        assert!(!e.is_echo(&child("c", "7"), false));
    }

    #[test]
    fn a_newer_write_replaces_the_record() {
        let e = Echoes::default();
        e.expect(Some("ns"), "c", "7", "p");
        e.expect(Some("ns"), "c", "9", "p");
        assert!(!e.is_echo(&child("c", "7"), false));
        assert!(e.is_echo(&child("c", "9"), false));
        assert_eq!(e.len(), 0);
    }

    #[test]
    fn records_are_bounded_and_an_evicted_one_falls_back_to_triggering() {
        let e = Echoes::with_capacity(4);
        for i in 0..100 {
            e.expect(Some("ns"), &format!("c{i}"), "1", "p");
            assert!(e.len() <= 8, "{} records", e.len());
        }
        assert!(!e.is_echo(&child("c0", "1"), false), "evicted: triggers");
        assert!(e.is_echo(&child("c99", "1"), false), "recent: skipped");
    }

    #[test]
    fn a_parent_that_goes_takes_its_records_with_it() {
        let e = Echoes::with_capacity(2);
        e.expect(Some("ns"), "a", "1", "gone");
        e.expect(Some("ns"), "b", "1", "kept");
        e.expect(Some("ns"), "c", "1", "gone");
        e.forget_parent("gone");
        assert_eq!(e.len(), 1);
        assert!(e.is_echo(&child("b", "1"), false));
    }

    #[test]
    fn a_write_without_a_version_is_not_recorded() {
        let e = Echoes::default();
        e.expect(Some("ns"), "c", "", "p");
        assert!(e.is_empty());
        assert!(!e.is_echo(&child("c", ""), false));
    }
}
