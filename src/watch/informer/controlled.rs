//! The cached objects of one informer indexed by their parent's uid (their controller owner's, or
//! for an unowned child khai marked, its owner label: [`crate::watch::ownership`]), so that "the
//! children of X" is a lookup rather than a scan of the cache.

use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Namespace and name of a cached object.
pub(super) type Name = (Option<String>, String);

/// The cached objects by the uid of their controller owner, so that "the children of X"
/// (pruning, `ctx.owned`) is a lookup rather than a scan of the whole cache, which would make
/// each reconcile cost O(objects) and a full pass O(objects²).
#[derive(Default)]
pub(super) struct Controlled {
    pub(super) children: HashMap<String, HashSet<Name>>,
    pub(super) owner: HashMap<Name, String>,
}

impl Controlled {
    /// Records that `obj` is (now) the child of the parent it names, if any.
    pub(super) fn update(&mut self, obj: &DynamicObject, deleted: bool) {
        let name = (obj.metadata.namespace.clone(), obj.name_any());
        let owner = crate::watch::ownership::owner_uid(obj).filter(|_| !deleted);
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

    pub(super) fn rebuild(&mut self, objects: &[Arc<DynamicObject>]) {
        *self = Self::default();
        for o in objects {
            self.update(o, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::informer::tests::child;

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
