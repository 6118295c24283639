//! Telling the watch event of a child khai just applied (its echo) from a change that needs the
//! parent reconciled: by content, against what khai sent ([`crate::object::sent`]).

use super::compare::object_difference;
use crate::object::{ChildId, ObjectKey, Objects, Target};
use crate::watch::Kind;
use crate::watch::ownership::owner_uid;
use kube::ResourceExt;
use kube::api::DynamicObject;

/// Whether the watch event of `obj`, of kind `kind` (`deleted` when it is gone), is the echo of
/// a write khai expects, and so needs no reconcile. A match is consumed; a deletion forgets what
/// khai sent for the child, and any other event the write records it answers for
/// ([`crate::object::sent::Sent::shown`]).
pub fn is_echo(objects: &Objects, kind: &Kind, obj: &DynamicObject, deleted: bool) -> bool {
    let Some(parent) = owner_uid(obj) else {
        return false;
    };
    let parent = ObjectKey::uid(&parent);
    let child = ChildId::new(kind, obj.namespace().as_deref(), &obj.name_any());
    if deleted {
        objects.update_existing(&parent, |s| s.sent.deleted(&child));
        return false;
    }
    // The cache shows the child at this version from now on: a write sent from another one is
    // done with.
    let rv = obj.resource_version().unwrap_or_default();
    let target = Target::Child(child.clone());
    let sent = objects.update_existing(&parent, |s| {
        s.sent.shown(&target, &rv);
        s.sent.echo(&child)
    });
    let Some(sent) = sent.flatten() else {
        return false;
    };
    // Compared outside the lock: the watch of every owned kind comes through here.
    if object_difference(&sent, obj).is_some() {
        return false;
    }
    objects.update_existing(&parent, |s| s.sent.echoed(&child, &sent));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::{Value, json};
    use std::sync::Arc;

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

    fn p1() -> ObjectKey {
        ObjectKey::uid("p1")
    }

    fn expect(objects: &Objects, name: &str) {
        let child = ChildId::new(&configmaps(), Some("ns"), name);
        objects.update(&p1(), |s| s.sent.expect(child, Arc::new(sent(name, "ok"))));
    }

    fn expecting(names: &[&str]) -> Objects {
        let objects = Objects::default();
        for n in names {
            expect(&objects, n);
        }
        objects
    }

    fn expected(objects: &Objects) -> usize {
        objects.read(&p1(), |s| s.map_or(0, |s| s.sent.echoes()))
    }

    #[test]
    fn the_child_as_khai_sent_it_is_an_echo_once() {
        let o = expecting(&["c"]);
        assert!(is_echo(&o, &configmaps(), &seen("c", "ok"), false));
        assert!(o.is_empty(), "consumed by its echo");
        assert!(
            !is_echo(&o, &configmaps(), &seen("c", "ok"), false),
            "a second event of the child is not khai's write"
        );
    }

    #[test]
    fn a_child_edited_since_khais_write_is_not_an_echo() {
        let o = expecting(&["c"]);
        assert!(!is_echo(&o, &configmaps(), &seen("c", "tampered"), false));
        let mut no_owner = seen("c", "ok");
        no_owner.metadata.owner_references = None;
        assert!(!is_echo(&o, &configmaps(), &no_owner, false));
        assert_eq!(expected(&o), 1, "the record waits for the echo");
        assert!(is_echo(&o, &configmaps(), &seen("c", "ok"), false));
    }

    #[test]
    fn a_deleted_child_is_never_an_echo_and_takes_its_record() {
        let o = expecting(&["c"]);
        assert!(!is_echo(&o, &configmaps(), &seen("c", "ok"), true));
        assert!(o.is_empty());
    }

    #[test]
    fn another_child_kind_or_namespace_is_not_an_echo() {
        let o = expecting(&["c"]);
        assert!(!is_echo(&o, &configmaps(), &seen("d", "ok"), false));
        let mut elsewhere = seen("c", "ok");
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!is_echo(&o, &configmaps(), &elsewhere, false));
        let secrets = Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Secret"),
                "secrets",
            ),
            namespaced: true,
        };
        assert!(!is_echo(&o, &secrets, &seen("c", "ok"), false));
        assert_eq!(expected(&o), 1);
    }

    #[test]
    fn a_parent_that_reconciles_again_or_goes_expects_nothing_any_more() {
        let o = expecting(&["a", "b"]);
        o.update(&p1(), |s| s.sent.forget_echoes());
        assert!(o.is_empty());
        let o = expecting(&["a", "b"]);
        o.forget(&p1());
        assert!(!is_echo(&o, &configmaps(), &seen("a", "ok"), false));
    }

    #[test]
    fn records_are_bounded_by_the_children_that_exist() {
        let o = Objects::default();
        for i in 0..1000 {
            let name = format!("c{i}");
            expect(&o, &name);
            // The child created and deleted again before its echo, or echoed.
            let gone = i % 2 == 0;
            is_echo(&o, &configmaps(), &seen(&name, "ok"), gone);
        }
        assert!(o.is_empty(), "{} records left", expected(&o));
    }
}
