//! How a cached object names the parent khai created it for: its controller ownerReference, or,
//! for a child that cannot carry one (a cluster-scoped child of a namespaced parent, a child in
//! another namespace), khai's owner label and parent annotation.
//!
//! The owner index of every informer, the trigger that maps a child's changes to its parent and
//! pruning all read a child's parent here, so they agree on which children are whose.

use kube::ResourceExt;
use kube::api::DynamicObject;

/// Label naming the uid of the parent that applied a child; half of what pruning requires.
pub const OWNER_LABEL: &str = "khai.dev/owner";

/// Annotation naming the parent of a child that carries no ownerReference to it:
/// `<group>/<Kind>/<namespace>/<name>` (`<group>` empty for the core group, `<namespace>` empty
/// for a cluster-scoped parent).
pub(crate) const PARENT_ANNOTATION: &str = "khai.dev/parent";

/// The parent a child's [`PARENT_ANNOTATION`] names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParentName {
    pub group: String,
    pub kind: String,
    /// `None` for a cluster-scoped parent.
    pub namespace: Option<String>,
    pub name: String,
}

impl ParentName {
    /// The value of [`PARENT_ANNOTATION`] naming this parent.
    pub(crate) fn annotation(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.group,
            self.kind,
            self.namespace.as_deref().unwrap_or_default(),
            self.name
        )
    }

    /// Reads an annotation written by [`Self::annotation`]; `None` for anything else.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let mut parts = value.splitn(4, '/');
        let (group, kind, namespace, name) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if kind.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(Self {
            group: group.to_string(),
            kind: kind.to_string(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        })
    }
}

/// The uid of the parent `obj` belongs to: its controller owner's, or, for an object with no
/// controller ownerReference that khai marked as an unowned child, its [`OWNER_LABEL`].
pub(crate) fn owner_uid(obj: &DynamicObject) -> Option<String> {
    if let Some(o) = obj
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
    {
        return Some(o.uid.clone());
    }
    unowned_parent(obj)?;
    obj.labels().get(OWNER_LABEL).cloned()
}

/// The parent named by an object khai marked as an unowned child (no controller
/// ownerReference, both the owner label and the parent annotation); `None` for anything else.
pub(crate) fn unowned_parent(obj: &DynamicObject) -> Option<ParentName> {
    if obj
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true))
        || !obj.labels().contains_key(OWNER_LABEL)
    {
        return None;
    }
    ParentName::parse(obj.annotations().get(PARENT_ANNOTATION)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(meta: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": meta }))
            .unwrap()
    }

    #[test]
    fn a_parent_annotation_reads_back_what_was_written() {
        for (ns, group) in [(Some("team"), "x.dev"), (None, "")] {
            let p = ParentName {
                group: group.into(),
                kind: "App".into(),
                namespace: ns.map(str::to_string),
                name: "a".into(),
            };
            assert_eq!(ParentName::parse(&p.annotation()), Some(p));
        }
        assert_eq!(ParentName::parse("x.dev/App/ns"), None);
        assert_eq!(ParentName::parse("x.dev//ns/a"), None);
    }

    #[test]
    fn an_unowned_child_belongs_to_its_owner_label_only_when_khai_marked_it() {
        let marked = object(json!({ "name": "n", "labels": { OWNER_LABEL: "u1" },
            "annotations": { PARENT_ANNOTATION: "x.dev/App/team/a" } }));
        assert_eq!(owner_uid(&marked).as_deref(), Some("u1"));
        assert_eq!(unowned_parent(&marked).unwrap().name, "a");
        // A label alone (someone copied it) is not khai's mark.
        let label_only = object(json!({ "name": "n", "labels": { OWNER_LABEL: "u1" } }));
        assert_eq!(owner_uid(&label_only), None);
        // A controller ownerReference wins over the label.
        let owned = object(json!({ "name": "n", "labels": { OWNER_LABEL: "u1" },
            "annotations": { PARENT_ANNOTATION: "x.dev/App/team/a" },
            "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "App", "name": "b",
                "uid": "u2", "controller": true }] }));
        assert_eq!(owner_uid(&owned).as_deref(), Some("u2"));
        assert_eq!(unowned_parent(&owned), None);
    }
}
