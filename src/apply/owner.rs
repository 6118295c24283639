//! How khai marks a child as its own: the controller ownerReference, the managed-by and owner
//! labels, and the hash of what it applied; and how pruning recognises a child it applied.

use super::hash::content_hash;
use crate::schema::MANAGED_BY;
use crate::watch::Kind;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

/// Label naming the uid of the parent that applied a child; half of what pruning requires.
pub const OWNER_LABEL: &str = "khai.dev/owner";
/// Annotation holding a hash of the child as khai last applied it.
pub const APPLIED_HASH: &str = "khai.dev/applied-hash";

/// Sets the controller ownerReference and managed-by label on a child.
pub(super) fn own(child: &mut Value, parent: &DynamicObject, parent_kind: &Kind) {
    let owner = json!({
        "apiVersion": parent_kind.resource.api_version,
        "kind": parent_kind.resource.kind,
        "name": parent.name_any(),
        "uid": parent.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let meta = &mut child["metadata"];
    meta["ownerReferences"] = json!([owner]);
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][MANAGED_BY.0] = json!(MANAGED_BY.1);
    meta["labels"][OWNER_LABEL] = json!(parent.uid().unwrap_or_default());
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    // Hashing the child with the annotation still empty makes the hash a function of the
    // desired object alone, so it is stable from one reconcile to the next.
    meta["annotations"][APPLIED_HASH] = json!("");
    let hash = content_hash(child);
    child["metadata"]["annotations"][APPLIED_HASH] = json!(hash);
}

/// Whether `child` was applied by the parent with `uid`: its controller ownerReference and owner
/// label must both name that parent.
pub(super) fn applied_by(child: &DynamicObject, uid: &str) -> bool {
    let owned = child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    owned && child.labels().get(OWNER_LABEL).is_some_and(|l| l == uid)
}
