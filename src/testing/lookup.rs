//! `ctx.get`, `ctx.list` and `ctx.owned` answered from a test case's `cache:` list.
//!
//! It answers the way the daemon's informer-backed lookup does: only kinds the controller
//! watches (`for`, `owns`, `watches`) can be looked up, with the same error otherwise; `get` and
//! `list` default to the reconciled object's namespace; lists are sorted by name; `owned` returns
//! objects whose controller ownerReference points at the reconciled object. Kinds are resolved
//! offline: a CRD kind of the config, or what the spelling itself says (`apps/v1/Deployment`,
//! `Deployment.apps`, or a bare `Deployment`, which matches any group).

use crate::config::Model;
use crate::reconcile::lookup::selector_matches;
use crate::script::{Lookup, LookupError};
use serde_json::Value;
use std::collections::BTreeMap;

pub(crate) use crate::config::kind::KindRef;

/// The reconciled object's identity, which lookups are relative to.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub namespace: Option<String>,
}

/// Lookups over a fixed set of objects.
#[derive(Debug, Clone)]
pub(crate) struct MemoryLookup {
    /// Kinds the controller watches, as resolved from its config.
    pub visible: Vec<KindRef>,
    pub objects: Vec<Value>,
    pub owner: Owner,
    /// The config's CRDs, to resolve bare CRD kinds the script names.
    pub model: Model,
}

impl MemoryLookup {
    /// Whether the controller watches `kind`; the same words as the daemon's error otherwise.
    /// A lookup of a kind the controller does not watch is one `khai run` could never answer.
    pub(crate) fn check_visible(&self, kind: &KindRef, written: &str) -> Result<(), LookupError> {
        if self.visible.iter().any(|v| v.compatible(kind)) {
            Ok(())
        } else {
            Err(LookupError::NotWatched(written.to_string()))
        }
    }

    /// Objects of `written` kind, after checking the controller may see it.
    fn of_kind(&self, written: &str) -> Result<impl Iterator<Item = &Value>, LookupError> {
        let kind: KindRef = written.parse()?;
        let kind = self.model.complete_kind(&kind);
        self.check_visible(&kind, written)?;
        Ok(self
            .objects
            .iter()
            .filter(move |o| KindRef::of(o).compatible(&kind)))
    }

    fn in_namespace(&self, obj: &Value, ns: Option<&str>) -> bool {
        let own = obj["metadata"]["namespace"].as_str();
        own.is_none() || own == ns
    }

    fn owned_by_owner(&self, obj: &Value) -> bool {
        let refs = obj["metadata"]["ownerReferences"].as_array();
        refs.into_iter().flatten().any(|r| {
            let controller = r["controller"] == Value::Bool(true);
            let same = match r["uid"].as_str() {
                Some(uid) => uid == self.owner.uid,
                None => {
                    r["kind"] == self.owner.kind.as_str() && r["name"] == self.owner.name.as_str()
                }
            };
            controller && same
        })
    }
}

/// Sorted by name, as the daemon's cache lookups are.
fn sorted(mut items: Vec<Value>) -> Vec<Value> {
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    items
}

fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

impl Lookup for MemoryLookup {
    fn get(
        &self,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<Option<Value>, LookupError> {
        let ns = namespace.or(self.owner.namespace.as_deref());
        Ok(self
            .of_kind(kind)?
            .find(|o| o["metadata"]["name"] == name && self.in_namespace(o, ns))
            .cloned())
    }

    fn list(
        &self,
        kind: &str,
        selector: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, LookupError> {
        let all = namespace == Some(crate::script::ALL_NAMESPACES);
        let ns = namespace.or(self.owner.namespace.as_deref());
        let mut out = Vec::new();
        for o in self
            .of_kind(kind)?
            .filter(|o| all || self.in_namespace(o, ns))
        {
            if selector.map_or(Ok(true), |s| selector_matches(s, &labels(o)))? {
                out.push(o.clone());
            }
        }
        Ok(sorted(out))
    }

    fn owned(&self, kind: &str) -> Result<Vec<Value>, LookupError> {
        let items = self.of_kind(kind)?.filter(|o| self.owned_by_owner(o));
        Ok(sorted(items.cloned().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup(objects: Vec<Value>) -> MemoryLookup {
        let model = Model::default();
        MemoryLookup {
            visible: ["apps/v1/Deployment", "Pod"]
                .iter()
                .map(|k| model.complete_kind(&k.parse::<KindRef>().unwrap()))
                .collect(),
            objects,
            owner: Owner {
                kind: "Web".into(),
                name: "web".into(),
                uid: "u1".into(),
                namespace: Some("ns".into()),
            },
            model,
        }
    }

    fn obj(api_version: &str, kind: &str, name: &str, extra: Value) -> Value {
        let mut o = json!({ "apiVersion": api_version, "kind": kind, "metadata": { "name": name, "namespace": "ns" } });
        if let (Some(m), Some(e)) = (o["metadata"].as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        o
    }

    #[test]
    fn get_matches_every_spelling_of_a_watched_kind() {
        let l = lookup(vec![obj("apps/v1", "Deployment", "web", json!({}))]);
        for k in ["Deployment", "apps/v1/Deployment", "Deployment.apps"] {
            assert!(l.get(k, "web", None).unwrap().is_some(), "{k}");
        }
        assert!(l.get("Deployment", "other", None).unwrap().is_none());
        assert!(
            l.get("Deployment", "web", Some("elsewhere"))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn unwatched_kind_is_the_same_error_as_in_the_daemon() {
        let err = lookup(Vec::new()).get("Secret", "x", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kind \"Secret\" is not watched by this controller; add it to `owns` to look it up"
        );
    }

    #[test]
    fn list_filters_by_selector_and_sorts_by_name() {
        let l = lookup(vec![
            obj("v1", "Pod", "b", json!({ "labels": { "app": "web" } })),
            obj("v1", "Pod", "a", json!({ "labels": { "app": "web" } })),
            obj("v1", "Pod", "c", json!({ "labels": { "app": "db" } })),
        ]);
        let names: Vec<Value> = l
            .list("Pod", Some("app=web"), None)
            .unwrap()
            .into_iter()
            .map(|p| p["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("a"), json!("b")]);
    }

    #[test]
    fn owned_follows_controller_owner_references_by_uid_or_name() {
        let by_uid = json!({ "ownerReferences": [{ "kind": "Web", "name": "x", "uid": "u1", "controller": true }] });
        let by_name =
            json!({ "ownerReferences": [{ "kind": "Web", "name": "web", "controller": true }] });
        let other = json!({ "ownerReferences": [{ "kind": "Web", "name": "web", "uid": "u2", "controller": true }] });
        let l = lookup(vec![
            obj("apps/v1", "Deployment", "a", by_uid),
            obj("apps/v1", "Deployment", "b", by_name),
            obj("apps/v1", "Deployment", "c", other),
        ]);
        assert_eq!(l.owned("Deployment").unwrap().len(), 2);
    }
}
