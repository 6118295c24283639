//! Which shard an object being admitted belongs to, for the assignment webhook: a parent by its
//! own key, an object with a controller ownerReference to a parent by its owner's key (so it
//! lands on its parent's shard, as the children khai applies do), and an object of a sharded
//! `watches` kind by the key of the parent its label names. No I/O: the webhook asks, with the
//! ring it sees.

use super::ring::Ring;
use crate::config::kind::KindRef;
use crate::config::model::{Model, Parents};
use serde_json::{Value, json};

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

    /// The hash key of the object of `request` (an AdmissionReview's), if it is sharded.
    fn key(&self, request: &Value) -> Option<String> {
        let object = request.get("object")?;
        let meta = object.get("metadata")?;
        let namespace = meta
            .get("namespace")
            .or_else(|| request.get("namespace"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let parent_key = |p: &Parent, name: &str| {
            let ns = if p.namespaced { namespace } else { None };
            (!name.is_empty()).then(|| super::key(&p.kind.group, &p.kind.kind, ns, name))
        };
        let controller = meta
            .get("ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
        if let Some(owner) = controller {
            let api_version = owner.get("apiVersion").and_then(Value::as_str)?;
            let kind = owner.get("kind").and_then(Value::as_str)?;
            let group = KindRef::from_api_version(api_version, kind)
                .group
                .unwrap_or_default();
            let name = owner.get("name").and_then(Value::as_str)?;
            if let Some(p) = self
                .parents
                .iter()
                .find(|p| p.kind.group == group && p.kind.kind == kind)
            {
                return parent_key(p, name);
            }
        }
        let own = GroupKind {
            group: str_at(request, "/kind/group").to_string(),
            kind: str_at(request, "/kind/kind").to_string(),
        };
        if let Some(p) = self.parents.iter().find(|p| p.kind == own) {
            let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
            return parent_key(p, name);
        }
        let labels = meta.get("labels");
        self.related.iter().filter(|r| r.kind == own).find_map(|r| {
            let name = labels?.get(&r.label)?.as_str()?;
            parent_key(&r.parent, name)
        })
    }

    /// The JSON Patch labelling the object of `request` for its shard on `ring`; `None` when it
    /// already has a shard label, is being moved (its drain label: the shard letting go of it
    /// removes its shard label, and the sharder relabels its children before assigning it), is
    /// not sharded, or no shard is live.
    pub(crate) fn patch(&self, request: &Value, ring: &Ring) -> Option<json_patch::Patch> {
        let labels = request.pointer("/object/metadata/labels");
        if labels.is_some_and(|l| l.get(&self.label).is_some() || l.get(&self.drain).is_some()) {
            return None;
        }
        let shard = ring.owner(&self.key(request)?)?;
        let op = match labels.filter(|l| l.is_object()) {
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

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn request(group: &str, kind: &str, metadata: Value) -> Value {
        json!({
            "namespace": "ns",
            "kind": { "group": group, "version": "v1", "kind": kind },
            "object": { "metadata": metadata },
        })
    }

    fn label_of(patch: &json_patch::Patch, obj: &Value) -> Option<String> {
        let mut obj = obj.clone();
        json_patch::patch(&mut obj, patch).unwrap();
        obj.pointer("/metadata/labels")?
            .get("shard.khai.dev/cache")?
            .as_str()
            .map(str::to_string)
    }

    #[test]
    fn a_parent_its_owned_objects_and_its_labelled_related_objects_share_its_shard() {
        let r = rules();
        let ring = Ring::new(["a", "b", "c"]);
        let want = ring
            .owner(&crate::shard::key(
                "examples.khai.dev",
                "Cache",
                Some("ns"),
                "web",
            ))
            .unwrap()
            .to_string();
        let parent = request("examples.khai.dev", "Cache", json!({ "name": "web" }));
        let p = r.patch(&parent, &ring).unwrap();
        assert_eq!(label_of(&p, &parent["object"]).as_deref(), Some(&*want));
        let owned = request(
            "",
            "Pod",
            json!({ "name": "web-x", "labels": { "app": "x" }, "ownerReferences": [
                { "apiVersion": "examples.khai.dev/v1", "kind": "Cache", "name": "web", "controller": true, "uid": "u" },
            ] }),
        );
        let p = r.patch(&owned, &ring).unwrap();
        assert_eq!(label_of(&p, &owned["object"]).as_deref(), Some(&*want));
        let related = request(
            "",
            "Secret",
            json!({ "name": "s", "labels": { "cache": "web" } }),
        );
        let p = r.patch(&related, &ring).unwrap();
        assert_eq!(label_of(&p, &related["object"]).as_deref(), Some(&*want));
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
        assert_eq!(r.patch(&labelled, &ring), None);
        // A shard letting go of a parent removes its shard label and keeps the drain label: the
        // sharder assigns it, after its children, not the webhook in the same write.
        let let_go = request(
            "examples.khai.dev",
            "Cache",
            json!({ "name": "web", "labels": { "drain.shard.khai.dev/cache": "true" } }),
        );
        assert_eq!(r.patch(&let_go, &ring), None, "being moved");
        let shared = request(
            "",
            "Service",
            json!({ "name": "s", "labels": { "cache": "web" } }),
        );
        assert_eq!(r.patch(&shared, &ring), None, "shared = true");
        let unmapped = request("", "Secret", json!({ "name": "s" }));
        assert_eq!(r.patch(&unmapped, &ring), None, "names no parent");
        let generated = request(
            "examples.khai.dev",
            "Cache",
            json!({ "generateName": "web-" }),
        );
        assert_eq!(r.patch(&generated, &ring), None, "no name to hash yet");
        let parent = request("examples.khai.dev", "Cache", json!({ "name": "web" }));
        assert_eq!(r.patch(&parent, &Ring::default()), None, "no live shard");
    }
}
