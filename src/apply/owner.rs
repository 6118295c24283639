//! How khai marks a child as its own: the controller ownerReference (or, for a child that cannot
//! carry one, the parent annotation), the managed-by and owner labels, the child's place in the
//! plan when khai deletes children in order, and the hash of what it applied; and how pruning
//! recognises a child it applied.

use super::hash::content_hash;
use crate::schema::MANAGED_BY;
use crate::watch::Kind;
use crate::watch::ownership::{PARENT_ANNOTATION, ParentName, unowned_parent};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

pub use crate::watch::ownership::OWNER_LABEL;
/// Annotation holding a hash of the child as khai last applied it.
pub const APPLIED_HASH: &str = "khai.dev/applied-hash";
/// Annotation holding a child's place in its parent's plan (1 for the first child), written when
/// the controller deletes children in order: the highest goes first.
pub const ORDER_ANNOTATION: &str = "khai.dev/order";

/// How one child is marked besides the labels every child gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Mark {
    /// The child cannot carry an ownerReference to its parent: it names the parent in an
    /// annotation instead.
    pub unowned: bool,
    /// Its place in the plan (1-based), when children are deleted in order.
    pub order: Option<usize>,
}

/// Sets the controller ownerReference (or the parent annotation), the managed-by and owner
/// labels, the order annotation and the applied hash on a child.
pub(super) fn own(child: &mut Value, parent: &DynamicObject, parent_kind: &Kind, mark: Mark) {
    // The order of the keys written here is part of the applied hash (JSON objects keep their
    // order): an owned child is marked exactly as before unowned children existed, so that no
    // child khai applied then looks changed now.
    let meta = &mut child["metadata"];
    if !mark.unowned {
        meta["ownerReferences"] = json!([{
            "apiVersion": parent_kind.resource.api_version,
            "kind": parent_kind.resource.kind,
            "name": parent.name_any(),
            "uid": parent.uid().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
    }
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][MANAGED_BY.0] = json!(MANAGED_BY.1);
    meta["labels"][OWNER_LABEL] = json!(parent.uid().unwrap_or_default());
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    if mark.unowned {
        let named = ParentName {
            group: parent_kind.resource.group.clone(),
            kind: parent_kind.resource.kind.clone(),
            namespace: parent.namespace().filter(|_| parent_kind.namespaced),
            name: parent.name_any(),
        };
        meta["annotations"][PARENT_ANNOTATION] = json!(named.annotation());
    }
    if let Some(order) = mark.order {
        meta["annotations"][ORDER_ANNOTATION] = json!(order.to_string());
    }
    // Hashing the child with the annotation still empty makes the hash a function of the
    // desired object alone, so it is stable from one reconcile to the next.
    meta["annotations"][APPLIED_HASH] = json!("");
    let hash = content_hash(child);
    child["metadata"]["annotations"][APPLIED_HASH] = json!(hash);
    // A sharded parent's children are labelled for its shard, so they are cached with it. The
    // label is left out of the hash: the sharder relabels a child when its parent moves, and
    // the new shard then finds it as it would write it, hash included, and writes nothing.
    for (k, v) in parent.labels() {
        if crate::shard::is_shard_label(k) {
            child["metadata"]["labels"][k.as_str()] = json!(v);
        }
    }
}

/// Whether `child` was applied by the parent with `uid`: its owner label must name that parent,
/// and so must its controller ownerReference, or, for an unowned child, it must have none and
/// carry khai's parent annotation.
pub(super) fn applied_by(child: &DynamicObject, uid: &str) -> bool {
    let owned = child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    (owned || unowned_parent(child).is_some())
        && child.labels().get(OWNER_LABEL).is_some_and(|l| l == uid)
}

/// Whether `child` is one khai marked as unowned (tracked by its owner label alone).
pub(super) fn is_unowned(child: &DynamicObject) -> bool {
    unowned_parent(child).is_some()
}

/// A child's place in its parent's plan as its order annotation says; 0 when it has none (a
/// child applied before the controller deleted in order), so such children go last.
pub(super) fn order_of(child: &DynamicObject) -> usize {
    child
        .annotations()
        .get(ORDER_ANNOTATION)
        .and_then(|o| o.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ApiResource, GroupVersionKind};

    fn parent() -> (DynamicObject, Kind) {
        let obj = serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "App",
            "metadata": { "name": "p", "namespace": "team", "uid": "p1" },
        }))
        .unwrap();
        let kind = Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("x.dev", "v1", "App"),
                "apps",
            ),
            namespaced: true,
        };
        (obj, kind)
    }

    fn marked(mark: Mark) -> DynamicObject {
        let (p, k) = parent();
        let mut child = json!({ "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole", "metadata": { "name": "r" } });
        own(&mut child, &p, &k, mark);
        serde_json::from_value(child).unwrap()
    }

    #[test]
    fn an_unowned_child_names_its_parent_instead_of_an_owner_reference() {
        let c = marked(Mark {
            unowned: true,
            order: Some(2),
        });
        assert!(c.owner_references().is_empty());
        assert_eq!(c.annotations()[PARENT_ANNOTATION], "x.dev/App/team/p");
        assert_eq!(c.labels()[OWNER_LABEL], "p1");
        assert_eq!(order_of(&c), 2);
        assert!(applied_by(&c, "p1") && is_unowned(&c));
        assert!(!applied_by(&c, "someone-else"));
    }

    #[test]
    fn an_owned_child_gets_no_parent_annotation_and_is_not_taken_for_unowned() {
        let c = marked(Mark::default());
        assert_eq!(c.owner_references()[0].uid, "p1");
        assert!(!c.annotations().contains_key(PARENT_ANNOTATION));
        assert!(!c.annotations().contains_key(ORDER_ANNOTATION));
        assert!(applied_by(&c, "p1") && !is_unowned(&c));
        assert_eq!(order_of(&c), 0);
    }

    /// Marking unowned children must not change how owned children are marked, or every child
    /// khai had applied would look changed and be written again.
    #[test]
    fn an_owned_child_is_marked_as_before_unowned_children_existed() {
        let (p, k) = parent();
        let mut child = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c" }, "data": { "k": "v" } });
        own(&mut child, &p, &k, Mark::default());
        let keys: Vec<&String> = child["metadata"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["name", "ownerReferences", "labels", "annotations"]);
        let annotations: Vec<&String> = child["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(annotations, [APPLIED_HASH]);
    }

    /// The sharder relabels a moved parent's children; the new shard must find them as it
    /// would write them, hash included.
    #[test]
    fn a_childs_applied_hash_does_not_depend_on_its_parents_shard() {
        let (mut p, k) = parent();
        let mut hashes = Vec::new();
        for shard in ["s0", "s1"] {
            p.labels_mut()
                .insert("shard.khai.dev/op".into(), shard.into());
            let mut child = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "c" }, "data": { "k": "v" } });
            own(&mut child, &p, &k, Mark::default());
            assert_eq!(child["metadata"]["labels"]["shard.khai.dev/op"], shard);
            hashes.push(child["metadata"]["annotations"][APPLIED_HASH].clone());
        }
        assert_eq!(hashes[0], hashes[1]);
    }

    /// Pruning must never take an object someone labelled like khai's child for one.
    #[test]
    fn an_object_with_the_owner_label_alone_is_not_khais() {
        let c: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": "n", "labels": { OWNER_LABEL: "p1" } },
        }))
        .unwrap();
        assert!(!applied_by(&c, "p1"));
    }
}
