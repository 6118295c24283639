//! Reading a watched object off the wire, in one pass, into the `DynamicObject` the caches hold.
//!
//! kube's `DynamicObject` derives its decoding with two `#[serde(flatten)]` fields (the type and
//! the body), and serde decodes a struct with flattened fields by first copying the whole object
//! into an intermediate tree of its own, then decoding each field from that copy. The metadata's
//! `managedFields`, which khai never reads, would be decoded into nested maps on the way, only to
//! be dropped: for a watch event, that copy and those maps cost more than the rest of decoding.
//!
//! [`Watched`] decodes the same JSON straight into a `DynamicObject`: `apiVersion` and `kind` into
//! its type (both strings, or no type, as serde's `Option<TypeMeta>` gives), `metadata` field by
//! field with `managedFields` skipped unread, and every other field into its body, in document
//! order. The result is what serde gives with `managedFields` left out; the unit tests and the
//! `rhai_json` fuzz target check exactly that.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, TypeMeta};
use kube::core::{DynamicResourceScope, Resource};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

/// Decodes one object as the informers do: what `serde_json` gives for a `DynamicObject`, less
/// `metadata.managedFields`. (Also what the fuzz target and `cargo bench` call.)
pub fn decode_object(json: &[u8]) -> serde_json::Result<DynamicObject> {
    serde_json::from_slice::<Watched>(json).map(|w| w.0)
}

/// A `DynamicObject` as a watch delivers it, decoded by [`Watched`]'s own `Deserialize`.
#[derive(Debug, Clone)]
pub(crate) struct Watched(pub(crate) DynamicObject);

impl Resource for Watched {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::api_version(dt)
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

impl<'de> serde::Deserialize<'de> for Watched {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor).map(Watched)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = DynamicObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DynamicObject, A::Error> {
        let mut type_fields = Vec::with_capacity(2);
        let mut metadata = None;
        let mut data = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" | "kind" => type_fields.push((key, map.next_value::<Value>()?)),
                "metadata" if metadata.is_some() => {
                    return Err(de::Error::duplicate_field("metadata"));
                }
                "metadata" => metadata = Some(map.next_value::<Metadata>()?.0),
                _ => {
                    let value = map.next_value::<Value>()?;
                    data.insert(key, value);
                }
            }
        }
        Ok(DynamicObject {
            types: type_meta(type_fields, &mut data),
            metadata: metadata.unwrap_or_default(),
            data: Value::Object(data),
        })
    }
}

/// The object's type from its `apiVersion` and `kind` fields (in document order), as serde's
/// flattened `Option<TypeMeta>` reads them: both, once each, as strings, or no type at all. Each
/// field is used up as it is read, so a field after a bad one stays in the body.
fn type_meta(
    fields: Vec<(String, Value)>,
    data: &mut serde_json::Map<String, Value>,
) -> Option<TypeMeta> {
    let (mut api_version, mut kind, mut failed) = (None, None, false);
    for (key, value) in fields {
        match (failed, key.as_str(), value) {
            (true, _, value) => {
                data.insert(key, value);
            }
            (false, "apiVersion", Value::String(v)) if api_version.is_none() => {
                api_version = Some(v);
            }
            (false, "kind", Value::String(v)) if kind.is_none() => kind = Some(v),
            _ => failed = true,
        }
    }
    match (failed, api_version, kind) {
        (false, Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
        _ => None,
    }
}

/// `ObjectMeta` decoded as k8s-openapi decodes it, but with `managedFields` skipped.
struct Metadata(ObjectMeta);

impl<'de> serde::Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MetadataVisitor).map(Metadata)
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = ObjectMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ObjectMeta")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectMeta, A::Error> {
        // Every field listed, none defaulted: a field k8s-openapi adds fails to compile here
        // instead of being dropped unnoticed.
        let mut m = ObjectMeta {
            annotations: None,
            creation_timestamp: None,
            deletion_grace_period_seconds: None,
            deletion_timestamp: None,
            finalizers: None,
            generate_name: None,
            generation: None,
            labels: None,
            managed_fields: None,
            name: None,
            namespace: None,
            owner_references: None,
            resource_version: None,
            self_link: None,
            uid: None,
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                "annotations" => m.annotations = map.next_value()?,
                "creationTimestamp" => m.creation_timestamp = map.next_value()?,
                "deletionGracePeriodSeconds" => {
                    m.deletion_grace_period_seconds = map.next_value()?
                }
                "deletionTimestamp" => m.deletion_timestamp = map.next_value()?,
                "finalizers" => m.finalizers = map.next_value()?,
                "generateName" => m.generate_name = map.next_value()?,
                "generation" => m.generation = map.next_value()?,
                "labels" => m.labels = map.next_value()?,
                "name" => m.name = map.next_value()?,
                "namespace" => m.namespace = map.next_value()?,
                "ownerReferences" => m.owner_references = map.next_value()?,
                "resourceVersion" => m.resource_version = map.next_value()?,
                "selfLink" => m.self_link = map.next_value()?,
                "uid" => m.uid = map.next_value()?,
                // `managedFields`, and fields this version of k8s-openapi does not know.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }
}

/// A map key, borrowed from the input when it can be (no allocation for metadata's keys).
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What serde's derived decoding gives, with `managedFields` dropped as the informer did.
    fn by_serde(v: &Value) -> Option<DynamicObject> {
        let mut o: DynamicObject = serde_json::from_value(v.clone()).ok()?;
        o.metadata.managed_fields = None;
        Some(o)
    }

    fn by_watched(v: &Value) -> Option<DynamicObject> {
        let text = v.to_string();
        serde_json::from_str::<Watched>(&text).ok().map(|w| w.0)
    }

    #[test]
    fn a_watched_object_decodes_as_serde_decodes_it_without_managed_fields() {
        let every_field = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c-config", "generateName": "c-", "namespace": "bench",
                "uid": "9fb6cbba-912b-476b-a5bd-884007f15fd5", "resourceVersion": "41522",
                "generation": 2, "selfLink": "/api/v1/namespaces/bench/configmaps/c-config",
                "creationTimestamp": "2026-11-26T00:28:06Z",
                "deletionTimestamp": "2026-11-26T00:29:06Z", "deletionGracePeriodSeconds": 0,
                "labels": { "app.kubernetes.io/managed-by": "khai" },
                "annotations": { "khai.dev/applied-hash": "80f47ab0b0581ce0" },
                "finalizers": ["khai.dev/x"],
                "ownerReferences": [{ "apiVersion": "bench.khai.dev/v1", "kind": "Cache",
                    "name": "c", "uid": "4f315ac2", "controller": true, "blockOwnerDeletion": true }],
                "managedFields": [{ "manager": "khai", "operation": "Apply", "apiVersion": "v1",
                    "time": "2026-11-26T00:28:06Z", "fieldsType": "FieldsV1",
                    "fieldsV1": { "f:data": { "f:size": {} } } }],
                "somethingNew": { "a": 1 }
            },
            "data": { "size": "1", "image": "redis:7" },
            "binaryData": {}, "immutable": false
        });
        let cases = [
            every_field,
            json!({ "apiVersion": "x.dev/v1", "kind": "Widget", "metadata": { "name": "w" },
                    "spec": { "n": 18446744073709551615u64, "f": 1.5, "z": null, "s": ["a", {}] },
                    "status": {} }),
            // No type, half a type, a type that is not text: serde gives no type at all.
            json!({ "metadata": { "name": "a" }, "data": {} }),
            json!({ "kind": "ConfigMap", "metadata": { "name": "a" } }),
            json!({ "apiVersion": 1, "kind": "ConfigMap" }),
            json!({ "kind": 1, "apiVersion": "v1", "data": {} }),
            // No metadata; nulls where options are.
            json!({ "apiVersion": "v1", "kind": "ConfigMap" }),
            json!({ "metadata": { "labels": null, "name": null, "generation": null } }),
            json!({}),
        ];
        for case in cases {
            let want = by_serde(&case).expect("serde decodes the case");
            assert_eq!(by_watched(&case), Some(want), "{case}");
        }
    }

    /// Repeated fields, which only text can hold.
    #[test]
    fn repeated_fields_decode_as_serde_decodes_them() {
        for text in [
            r#"{"kind":"A","kind":"B","apiVersion":"v1","data":{}}"#,
            r#"{"apiVersion":"v1","kind":"A","spec":{"a":1},"spec":{"b":2}}"#,
            r#"{"metadata":{"name":"a","name":"b"}}"#,
        ] {
            let mut want: DynamicObject = serde_json::from_str(text).unwrap();
            want.metadata.managed_fields = None;
            let got = serde_json::from_str::<Watched>(text).unwrap().0;
            assert_eq!(got, want, "{text}");
        }
        let twice = r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#;
        assert!(serde_json::from_str::<DynamicObject>(twice).is_err());
        assert!(serde_json::from_str::<Watched>(twice).is_err());
    }

    #[test]
    fn what_serde_refuses_is_refused() {
        for bad in [
            json!([1, 2]),
            json!({ "metadata": "x" }),
            json!({ "metadata": { "generation": "two" } }),
            json!({ "metadata": { "labels": { "a": 1 } } }),
            json!({ "metadata": { "creationTimestamp": "yesterday" } }),
        ] {
            assert!(by_serde(&bad).is_none(), "{bad}");
            assert!(by_watched(&bad).is_none(), "{bad}");
        }
    }
}
