//! The one key of an object's record: its uid.

use kube::ResourceExt;
use kube::api::DynamicObject;
use std::fmt;
use std::sync::Arc;

/// Which object a record is about: its uid, which the API server gives every object and never
/// reuses, so an object deleted and created again under the same name starts afresh. An object
/// without one (built by hand, in tests) is keyed by `namespace/name`, which no uid can equal.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<str>);

impl ObjectKey {
    /// The key of `obj`.
    pub fn of(obj: &DynamicObject) -> Self {
        match obj.metadata.uid.as_deref() {
            Some(uid) if !uid.is_empty() => Self::uid(uid),
            _ => Self(Arc::from(format!(
                "{}/{}",
                obj.namespace().unwrap_or_default(),
                obj.name_any()
            ))),
        }
    }

    /// The key of the object whose uid is `uid` (an owner named by its children).
    pub fn uid(uid: &str) -> Self {
        Self(Arc::from(uid))
    }

    /// The key as text: the uid, or `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_object_is_keyed_by_its_uid_and_one_without_by_namespace_and_name() {
        let with = obj(json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u1"}}));
        assert_eq!(ObjectKey::of(&with), ObjectKey::uid("u1"));
        let without = obj(json!({"metadata": {"name": "a", "namespace": "ns"}}));
        assert_eq!(ObjectKey::of(&without).as_str(), "ns/a");
        let cluster = obj(json!({"metadata": {"name": "a"}}));
        assert_eq!(ObjectKey::of(&cluster).as_str(), "/a");
    }
}
