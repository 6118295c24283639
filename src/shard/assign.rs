//! Which shard an object being admitted belongs to, for the assignment webhook: a parent by its
//! own key, an object with a controller ownerReference to a parent by its owner's key (so it
//! lands on its parent's shard, as the children khai applies do), and an object of a sharded
//! `watches` kind by the key of the parent its label names. No I/O: the webhook asks, with the
//! ring it sees.
//!
//! The API server sends the whole object, managed fields included, with every create of a
//! sharded kind; [`Review`] reads only the fields the answer depends on and skips the rest of the
//! body unparsed, so a review allocates a few names rather than the object.

use super::ring::Ring;
use crate::config::kind::KindRef;
use crate::config::model::{Model, Parents};
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The parts of an AdmissionReview the assignment webhook reads, borrowed from its body.
#[derive(Debug, Deserialize)]
pub(crate) struct Review<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    request: Request<'a>,
}

/// An AdmissionReview's `request`, as far as assignment reads it.
#[derive(Debug, Deserialize)]
pub(crate) struct Request<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(borrow)]
    kind: ReviewKind<'a>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    object: Option<Object<'a>>,
}

#[derive(Debug, Deserialize)]
struct ReviewKind<'a> {
    #[serde(borrow, default)]
    group: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
struct Object<'a> {
    #[serde(borrow, default)]
    metadata: Meta<'a>,
}

#[derive(Debug, Default, Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    /// `None` when absent or `null`: the patch then adds the whole map.
    #[serde(borrow, default)]
    labels: Option<BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
    #[serde(rename = "ownerReferences", borrow, default)]
    owner_references: Option<Vec<OwnerRef<'a>>>,
}

#[derive(Debug, Deserialize)]
struct OwnerRef<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(default)]
    controller: Option<bool>,
}

/// A body the assignment webhook cannot answer: answered with HTTP 400 and this message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("malformed AdmissionReview: {0}")]
pub(crate) struct BadReview(String);

impl<'a> Review<'a> {
    /// Parses an AdmissionReview body, reading only what assignment needs.
    pub(crate) fn parse(body: &'a [u8]) -> Result<Self, BadReview> {
        let review: Self = serde_json::from_slice(body).map_err(|e| BadReview(e.to_string()))?;
        if review.kind != "AdmissionReview" {
            return Err(BadReview(format!(
                "kind must be \"AdmissionReview\", got {:?}",
                review.kind
            )));
        }
        if !review.api_version.starts_with("admission.k8s.io/") {
            return Err(BadReview(format!(
                "unsupported apiVersion {:?}",
                review.api_version
            )));
        }
        Ok(review)
    }

    pub(crate) fn api_version(&self) -> &str {
        &self.api_version
    }

    pub(crate) fn uid(&self) -> &str {
        &self.request.uid
    }

    pub(crate) fn request(&self) -> &Request<'a> {
        &self.request
    }
}

/// A kind as the API server names it in a review: group (`""` for core) and kind.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupKind {
    group: String,
    kind: String,
}

/// A parent kind of some controller.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parent {
    kind: GroupKind,
    namespaced: bool,
}

/// A `watches` kind whose objects name their parent by `label`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Related {
    kind: GroupKind,
    label: String,
    parent: Parent,
}

/// What the webhook assigns, from the config: the parent kinds and the sharded watched kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rules {
    /// The shard label, `shard.khai.dev/<operator>`.
    label: String,
    /// The drain label: an object being moved between shards is the sharder's to assign.
    drain: String,
    parents: Vec<Parent>,
    related: Vec<Related>,
}

impl Rules {
    /// The rules of `model`'s controllers, labelling with `label`.
    pub(crate) fn of(model: &Model, label: String) -> Self {
        let resolve = |k: &KindRef| {
            let offline = model.resolve_kind(k);
            Parent {
                kind: GroupKind {
                    group: offline.kind.group.unwrap_or_default(),
                    kind: offline.kind.kind,
                },
                namespaced: offline.namespaced,
            }
        };
        let mut parents: Vec<Parent> = Vec::new();
        let mut related = Vec::new();
        for c in &model.controllers {
            let parent = resolve(&c.for_kind);
            if !parents.contains(&parent) {
                parents.push(parent.clone());
            }
            for w in c.watches.iter().filter(|w| w.sharded()) {
                if let Parents::Label(l) = &w.parents {
                    related.push(Related {
                        kind: resolve(&w.kind).kind,
                        label: l.clone(),
                        parent: parent.clone(),
                    });
                }
            }
        }
        Self {
            label,
            drain: super::drain_label_of(&model.operator.name),
            parents,
            related,
        }
    }

    /// The shard label the rules set.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The hash key of the object of `request`, if it is sharded.
    fn key(&self, request: &Request<'_>) -> Option<String> {
        let meta = &request.object.as_ref()?.metadata;
        let namespace = meta
            .namespace
            .as_deref()
            .or(request.namespace.as_deref())
            .filter(|n| !n.is_empty());
        let parent_key = |p: &Parent, name: &str| {
            let ns = if p.namespaced { namespace } else { None };
            (!name.is_empty()).then(|| super::key(&p.kind.group, &p.kind.kind, ns, name))
        };
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        if let Some(owner) = controller {
            if owner.api_version.is_empty() || owner.kind.is_empty() {
                return None;
            }
            let group = KindRef::from_api_version(&owner.api_version, &owner.kind)
                .group
                .unwrap_or_default();
            if let Some(p) = self
                .parents
                .iter()
                .find(|p| p.kind.group == group && p.kind.kind == owner.kind)
            {
                return parent_key(p, &owner.name);
            }
        }
        let (group, kind) = (&*request.kind.group, &*request.kind.kind);
        let is = |k: &GroupKind| k.group == group && k.kind == kind;
        if let Some(p) = self.parents.iter().find(|p| is(&p.kind)) {
            return parent_key(p, meta.name.as_deref().unwrap_or_default());
        }
        let labels = meta.labels.as_ref();
        self.related.iter().filter(|r| is(&r.kind)).find_map(|r| {
            let name = labels?.get(r.label.as_str())?;
            parent_key(&r.parent, name)
        })
    }

    /// The JSON Patch labelling the object of `request` for its shard on `ring`; `None` when it
    /// already has a shard label, is being moved (its drain label: the shard letting go of it
    /// removes its shard label, and the sharder relabels its children before assigning it), is
    /// not sharded, or no shard is live.
    pub(crate) fn patch(&self, request: &Request<'_>, ring: &Ring) -> Option<json_patch::Patch> {
        let labels = request
            .object
            .as_ref()
            .and_then(|o| o.metadata.labels.as_ref());
        if labels.is_some_and(|l| {
            l.contains_key(self.label.as_str()) || l.contains_key(self.drain.as_str())
        }) {
            return None;
        }
        let shard = ring.owner(&self.key(request)?)?;
        let op = match labels {
            Some(_) => json!({
                "op": "add",
                "path": format!("/metadata/labels/{}", self.label.replace('~', "~0").replace('/', "~1")),
                "value": shard,
            }),
            None => json!({
                "op": "add",
                "path": "/metadata/labels",
                "value": { self.label.as_str(): shard },
            }),
        };
        serde_json::from_value(json!([op])).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const SRC: &str = r#"
[operator]
name = "cache"

[[crd]]
group = "examples.khai.dev"
kind = "Cache"
versions = [{ name = "v1" }]

[[controller]]
for = "Cache"
owns = ["v1/ConfigMap"]
script = "c.rhai"
watches = [
  { kind = "v1/Secret", label = "cache" },
  { kind = "v1/Service", label = "cache", shared = true },
]
"#;

    fn rules() -> Rules {
        let model = crate::config::parse(std::path::Path::new("operator.toml"), SRC).unwrap();
        Rules::of(&model, "shard.khai.dev/cache".into())
    }

    /// An AdmissionReview body for a create of `kind` with `metadata`.
    fn request(group: &str, kind: &str, metadata: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "namespace": "ns",
                "kind": { "group": group, "version": "v1", "kind": kind },
                "object": { "metadata": metadata, "spec": { "managedFields": [{ "x": "y" }] } },
            },
        })
    }

    /// What `r` answers for the review `review`, parsed from its body as the webhook does.
    fn patch_of(r: &Rules, review: &Value, ring: &Ring) -> Option<json_patch::Patch> {
        let body = serde_json::to_vec(review).unwrap();
        let parsed = Review::parse(&body).unwrap();
        assert_eq!(parsed.uid(), "u-1");
        r.patch(parsed.request(), ring)
    }

    fn label_of(patch: &json_patch::Patch, obj: &Value) -> Option<String> {
        let mut obj = obj["request"]["object"].clone();
        json_patch::patch(&mut obj, patch).unwrap();
        obj.pointer("/metadata/labels")?
            .get("shard.khai.dev/cache")?
            .as_str()
            .map(str::to_string)
    }

    /// The shard `ring` gives the Cache `name` of namespace `ns`.
    fn cache_shard(ring: &Ring, name: &str) -> String {
        let key = crate::shard::key("examples.khai.dev", "Cache", Some("ns"), name);
        ring.owner(&key).unwrap().to_string()
    }

    #[test]
    fn a_parent_its_owned_objects_and_its_labelled_related_objects_share_its_shard() {
        let r = rules();
        let ring = Ring::new(["a", "b", "c"]);
        let want = cache_shard(&ring, "web");
        let parent = request("examples.khai.dev", "Cache", json!({ "name": "web" }));
        let p = patch_of(&r, &parent, &ring).unwrap();
        assert_eq!(label_of(&p, &parent).as_deref(), Some(&*want));
        let owned = request(
            "",
            "Pod",
            json!({ "name": "web-x", "labels": { "app": "x" }, "ownerReferences": [
                { "apiVersion": "examples.khai.dev/v1", "kind": "Cache", "name": "web", "controller": true, "uid": "u" },
            ] }),
        );
        let p = patch_of(&r, &owned, &ring).unwrap();
        assert_eq!(label_of(&p, &owned).as_deref(), Some(&*want));
        let related = request(
            "",
            "Secret",
            json!({ "name": "s", "labels": { "cache": "web" } }),
        );
        let p = patch_of(&r, &related, &ring).unwrap();
        assert_eq!(label_of(&p, &related).as_deref(), Some(&*want));
    }

    #[test]
    fn labelled_moving_shared_unrelated_and_unnamed_objects_are_left_alone() {
        let r = rules();
        let ring = Ring::new(["a", "b"]);
        let labelled = request(
            "examples.khai.dev",
            "Cache",
            json!({ "name": "web", "labels": { "shard.khai.dev/cache": "z" } }),
        );
        assert_eq!(patch_of(&r, &labelled, &ring), None);
        // A shard letting go of a parent removes its shard label and keeps the drain label: the
        // sharder assigns it, after its children, not the webhook in the same write.
        let let_go = request(
            "examples.khai.dev",
            "Cache",
            json!({ "name": "web", "labels": { "drain.shard.khai.dev/cache": "true" } }),
        );
        assert_eq!(patch_of(&r, &let_go, &ring), None, "being moved");
        let shared = request(
            "",
            "Service",
            json!({ "name": "s", "labels": { "cache": "web" } }),
        );
        assert_eq!(patch_of(&r, &shared, &ring), None, "shared = true");
        let unmapped = request("", "Secret", json!({ "name": "s" }));
        assert_eq!(patch_of(&r, &unmapped, &ring), None, "names no parent");
        let generated = request(
            "examples.khai.dev",
            "Cache",
            json!({ "generateName": "web-" }),
        );
        assert_eq!(patch_of(&r, &generated, &ring), None, "no name to hash yet");
        let parent = request("examples.khai.dev", "Cache", json!({ "name": "web" }));
        assert_eq!(
            patch_of(&r, &parent, &Ring::default()),
            None,
            "no live shard"
        );
    }

    #[test]
    fn a_review_is_read_with_escaped_names_and_a_body_that_is_not_one_is_named() {
        let r = rules();
        let ring = Ring::new(["a", "b", "c"]);
        let want = cache_shard(&ring, "w\"eb");
        let parent = request(
            "examples.khai.dev",
            "Cache",
            json!({ "name": "w\"eb", "labels": null }),
        );
        let p = patch_of(&r, &parent, &ring).unwrap();
        assert_eq!(label_of(&p, &parent).as_deref(), Some(&*want));
        let bad = |body: &str| Review::parse(body.as_bytes()).unwrap_err().to_string();
        assert!(
            bad("{").starts_with("malformed AdmissionReview: "),
            "{}",
            bad("{")
        );
        assert!(bad(r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"kind":{}}}"#)
            .contains("missing field `uid`"));
        assert_eq!(
            bad(r#"{"kind":"Pod","apiVersion":"v1","request":{"uid":"u","kind":{}}}"#),
            "malformed AdmissionReview: kind must be \"AdmissionReview\", got \"Pod\""
        );
    }
}
