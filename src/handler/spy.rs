//! The type of watch event a spy (`on = "event"`) is told of, as Kopf's raw events give it.
//!
//! kube-runtime's watcher says only "applied" or "deleted", so the type is worked out from what
//! the spy has seen: an object of the list the spy started with is `()` (Kopf's `None` for its
//! initial listing), an object first seen after that `ADDED`, one seen before `MODIFIED`, and a
//! deletion `DELETED`. Memory is bounded by the objects that exist: a deleted object is forgotten.

use std::collections::HashSet;

/// What one spy subscription has seen, by uid.
#[derive(Debug, Default)]
pub(crate) struct EventTypes {
    /// Objects of the initial list not yet told of.
    listed: HashSet<String>,
    /// Objects told of at least once, still there.
    seen: HashSet<String>,
}

impl EventTypes {
    /// Types for a subscription whose initial list holds `listed` (uids).
    pub(crate) fn new(listed: impl IntoIterator<Item = String>) -> Self {
        Self {
            listed: listed.into_iter().collect(),
            seen: HashSet::new(),
        }
    }

    /// The type of the next event of `uid`: `None` for an object of the initial list told of
    /// for the first time, else `ADDED`, `MODIFIED` or `DELETED`.
    pub(crate) fn next(&mut self, uid: &str, deleted: bool) -> Option<&'static str> {
        if deleted {
            self.listed.remove(uid);
            self.seen.remove(uid);
            return Some("DELETED");
        }
        if self.seen.contains(uid) {
            return Some("MODIFIED");
        }
        self.seen.insert(uid.to_string());
        if self.listed.remove(uid) {
            None
        } else {
            Some("ADDED")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_objects_come_untyped_then_modified_new_ones_added_and_deletions_forgotten() {
        let mut t = EventTypes::new(["a".to_string()]);
        assert_eq!(t.next("a", false), None, "the initial list, as Kopf's None");
        assert_eq!(t.next("a", false), Some("MODIFIED"));
        assert_eq!(t.next("b", false), Some("ADDED"));
        assert_eq!(t.next("b", false), Some("MODIFIED"));
        assert_eq!(t.next("b", true), Some("DELETED"));
        assert_eq!(t.next("a", true), Some("DELETED"));
        assert!(
            t.seen.is_empty() && t.listed.is_empty(),
            "nothing kept of gone objects"
        );
        // Deleted before the spy was told of it at all: no listing entry left behind.
        let mut t = EventTypes::new(["c".to_string()]);
        assert_eq!(t.next("c", true), Some("DELETED"));
        assert!(t.listed.is_empty());
    }
}
