//! The watch events of khai's own child writes coming back ("expectations", as
//! controller-runtime calls them), recognised by content so they need not reconcile the parent
//! again.
//!
//! A child khai applies comes back through its kind's watch, and the owned-children trigger
//! would queue the parent once more for a reconcile that finds nothing to do. Before each apply
//! request goes out, khai records the body it sends, under the parent's uid and the child's
//! identity ([`Echoes::expect`]). A child's watch event is then an echo, and triggers nothing,
//! when all of these hold ([`Echoes::is_echo`]):
//!
//! - it is not a deletion (a deleted child always triggers, and is recreated);
//! - its parent's last reconcile recorded it: that reconcile read nothing but its object
//!   (`crate::effects::Reads`), so the child's state cannot change its plan;
//! - the child holds everything khai sent, as the applier's own "nothing to write" compare
//!   sees it ([`super::compare`]). Someone else's edit of a field khai manages fails this and
//!   triggers, so drift is repaired as before.
//!
//! Deciding on content, not on the resourceVersion the apply returns, is what makes the record
//! usable before the response is in: under load the watch event often arrives first.
//!
//! A record is consumed by its echo, dropped with its child's deletion, and all of a parent's go
//! when the parent's next reconcile starts and when the parent goes: what is held is bounded by
//! the children of the objects that exist, never by how many were ever created.

use super::compare::object_difference;
use crate::sync::lock;
use crate::watch::Kind;
use crate::watch::ownership::owner_uid;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A child: its kind's group and name, its namespace and its name.
type Child = (String, String, Option<String>, String);

/// What khai sent for one child, as the API server stores it.
type Sent = Arc<Value>;

/// The echoes one controller expects, per parent uid.
#[derive(Debug, Clone, Default)]
pub struct Echoes {
    parents: Arc<Mutex<HashMap<String, HashMap<Child, Sent>>>>,
}

fn child(kind: &Kind, namespace: Option<&str>, name: &str) -> Child {
    (
        kind.resource.group.clone(),
        kind.resource.kind.clone(),
        namespace.filter(|_| kind.namespaced).map(str::to_string),
        name.to_string(),
    )
}

impl Echoes {
    /// The parent with uid `parent` is about to send `sent` (as the server will store it) for
    /// its child `namespace/name` of kind `kind`.
    pub fn expect(
        &self,
        parent: &str,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        sent: Sent,
    ) {
        lock(&self.parents)
            .entry(parent.to_string())
            .or_default()
            .insert(child(kind, namespace, name), sent);
    }

    /// Forgets what the parent with uid `parent` expects: its reconcile starts again (what it
    /// will read is not known yet), or it is gone.
    pub fn forget(&self, parent: &str) {
        lock(&self.parents).remove(parent);
    }

    /// Whether the watch event of `obj`, of kind `kind` (`deleted` when it is gone), is the echo
    /// of a write khai expects, and so needs no reconcile. A match is consumed; a deletion
    /// forgets the record.
    pub fn is_echo(&self, kind: &Kind, obj: &DynamicObject, deleted: bool) -> bool {
        let Some(parent) = owner_uid(obj) else {
            return false;
        };
        let id = child(kind, obj.namespace().as_deref(), &obj.name_any());
        let sent = {
            let mut parents = lock(&self.parents);
            let Some(children) = parents.get_mut(&parent) else {
                return false;
            };
            if deleted {
                children.remove(&id);
                if children.is_empty() {
                    parents.remove(&parent);
                }
                return false;
            }
            match children.get(&id) {
                Some(sent) => sent.clone(),
                None => return false,
            }
        };
        // Compared outside the lock: the watch of every owned kind comes through here.
        if object_difference(&sent, obj).is_some() {
            return false;
        }
        let mut parents = lock(&self.parents);
        if let Some(children) = parents.get_mut(&parent) {
            // Only the record compared: a newer one (the parent reconciled meanwhile) stays.
            if children.get(&id).is_some_and(|s| Arc::ptr_eq(s, &sent)) {
                children.remove(&id);
            }
            if children.is_empty() {
                parents.remove(&parent);
            }
        }
        true
    }

    /// How many children have an echo expected, for tests of the bounds.
    pub fn len(&self) -> usize {
        lock(&self.parents).values().map(HashMap::len).sum()
    }

    /// Whether no echo is expected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::json;

    fn configmaps() -> Kind {
        Kind::configmaps()
    }

    /// What khai sends for child `name` of parent `p1`.
    fn sent(name: &str, message: &str) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns",
                "labels": { "khai.dev/owner": "p1" },
                "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "App", "name": "p",
                    "uid": "p1", "controller": true, "blockOwnerDeletion": true }] },
            "data": { "message": message } })
    }

    /// The child as the watch shows it: what khai sent, and what the server adds.
    fn seen(name: &str, message: &str) -> DynamicObject {
        let mut v = sent(name, message);
        v["metadata"]["uid"] = json!(format!("u-{name}"));
        v["metadata"]["resourceVersion"] = json!("7");
        v["metadata"]["labels"]["added-by"] = json!("someone");
        serde_json::from_value(v).unwrap()
    }

    fn expecting(names: &[&str]) -> Echoes {
        let e = Echoes::default();
        for n in names {
            e.expect("p1", &configmaps(), Some("ns"), n, Arc::new(sent(n, "ok")));
        }
        e
    }

    #[test]
    fn the_child_as_khai_sent_it_is_an_echo_once() {
        let e = expecting(&["c"]);
        assert!(e.is_echo(&configmaps(), &seen("c", "ok"), false));
        assert!(e.is_empty(), "consumed by its echo");
        assert!(
            !e.is_echo(&configmaps(), &seen("c", "ok"), false),
            "a second event of the child is not khai's write"
        );
    }

    #[test]
    fn a_child_edited_since_khais_write_is_not_an_echo() {
        let e = expecting(&["c"]);
        assert!(!e.is_echo(&configmaps(), &seen("c", "tampered"), false));
        let mut no_owner = seen("c", "ok");
        no_owner.metadata.owner_references = None;
        assert!(!e.is_echo(&configmaps(), &no_owner, false));
        assert_eq!(e.len(), 1, "the record waits for the echo");
        assert!(e.is_echo(&configmaps(), &seen("c", "ok"), false));
    }

    #[test]
    fn a_deleted_child_is_never_an_echo_and_takes_its_record() {
        let e = expecting(&["c"]);
        assert!(!e.is_echo(&configmaps(), &seen("c", "ok"), true));
        assert!(e.is_empty());
    }

    #[test]
    fn another_child_kind_or_namespace_is_not_an_echo() {
        let e = expecting(&["c"]);
        assert!(!e.is_echo(&configmaps(), &seen("d", "ok"), false));
        let mut elsewhere = seen("c", "ok");
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!e.is_echo(&configmaps(), &elsewhere, false));
        let secrets = Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Secret"),
                "secrets",
            ),
            namespaced: true,
        };
        assert!(!e.is_echo(&secrets, &seen("c", "ok"), false));
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn a_parent_that_reconciles_again_or_goes_expects_nothing_any_more() {
        let e = expecting(&["a", "b"]);
        e.forget("p1");
        assert!(e.is_empty());
        assert!(!e.is_echo(&configmaps(), &seen("a", "ok"), false));
    }

    #[test]
    fn records_are_bounded_by_the_children_that_exist() {
        let e = Echoes::default();
        for i in 0..1000 {
            let name = format!("c{i}");
            e.expect(
                "p1",
                &configmaps(),
                Some("ns"),
                &name,
                Arc::new(sent(&name, "ok")),
            );
            // The child created and deleted again before its echo, or echoed.
            let gone = i % 2 == 0;
            e.is_echo(&configmaps(), &seen(&name, "ok"), gone);
        }
        assert!(e.is_empty(), "{} records left", e.len());
    }
}
