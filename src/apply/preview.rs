//! What carrying out a plan would write, without writing (`khai diff`).
//!
//! Each child is placed, marked and compared with the cached copy of its kind's informer as
//! [`Applier::apply`] does it, with the same functions ([`own`], [`as_stored`],
//! [`object_difference`]); a child that would be written goes to the API server as a server-side
//! apply dry run (`dryRun=All`: admitted, validated and defaulted, stored nowhere), so a child
//! the server would refuse shows as refused. The children pruning would delete are those
//! [`Applier::apply`] would delete ([`applied_by`], not desired), and the status fields named
//! are those a merge would change ([`status_differs`], field by field).

use super::compare::{as_stored, object_difference, status_differs};
use super::owner::{Mark, applied_by, own};
use super::{Applier, Caches, Error, PlanKinds, Policy, group_of};
use crate::client::{ApiError, write};
use crate::reconcile::Plan;
use crate::reconcile::children::{self, ChildKey, Parent};
use crate::watch::Kind;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// What carrying out one plan would write.
#[derive(Debug, Default)]
pub struct Preview {
    /// The children that would be written (created or changed), in plan order.
    pub children: Vec<ChildWrite>,
    /// Children already as desired.
    pub unchanged: usize,
    /// Children that would be deleted because the plan no longer lists them.
    pub pruned: Vec<ChildRef>,
    /// The status fields a write would change, in the plan's order.
    pub status: Vec<StatusChange>,
}

/// Which object a child is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChildRef {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

/// One child write khai would make.
#[derive(Debug)]
pub struct ChildWrite {
    pub id: ChildRef,
    /// The live child cut down to the fields khai would write; `None` when it does not exist.
    pub before: Option<Value>,
    /// The child as khai would write it (as the server stores it: a Secret's `stringData` in
    /// `data`).
    pub after: Value,
    /// Why the API server's dry run refused the write, in its own words.
    pub refused: Option<ApiError>,
}

/// One status field a write would change.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StatusChange {
    pub field: String,
    /// Its live value; `None` when the status has no such field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// What khai would write (`null` removes it).
    pub after: Value,
}

impl Applier {
    /// What [`Applier::apply`] would write for `plan`, against the same `caches`, sending
    /// nothing but dry runs of the children that would be written.
    pub async fn preview(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        plan: &Plan,
        caches: Caches<'_>,
        policy: Policy,
    ) -> Result<Preview, Error> {
        let Placed {
            desired,
            keys: placed,
            kinds: resolved,
            parent_ns,
        } = self
            .placed(parent, parent_kind, plan, caches, policy)
            .await?;
        let mut preview = Preview::default();
        for (index, (mut child, key)) in desired.into_iter().zip(&placed).enumerate() {
            let kind = &resolved[&(key.0.clone(), key.1.clone())];
            let mark = Mark {
                unowned: children::unowned(parent_ns.as_deref(), key),
                order: policy.ordered.then_some(index + 1),
            };
            own(&mut child, parent, parent_kind, mark);
            let stored = as_stored(&child);
            let cached = caches
                .owned_informer(kind, key.2.as_deref())
                .and_then(|i| i.store().get(&object_ref(kind, key)));
            if let Some(current) = &cached
                && object_difference(&stored, current).is_none()
            {
                preview.unchanged += 1;
                continue;
            }
            let before = cached
                .and_then(|c| serde_json::to_value(&*c).ok())
                .map(|live| cut_to(&live, &stored));
            let refused = self.try_child(kind, key, &child).await.err();
            preview.children.push(ChildWrite {
                id: child_id(key),
                before,
                after: stored.into_owned(),
                refused,
            });
        }
        preview.pruned = pruned(parent, &placed, caches);
        if let Some(status) = &plan.status {
            preview.status = status_changes(parent, status);
        }
        Ok(preview)
    }

    /// The children of `plan` placed for `parent` as [`Applier::apply`] places them: their kinds
    /// resolved, namespaces decided, the ones khai must not apply refused.
    pub(super) async fn placed(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        plan: &Plan,
        caches: Caches<'_>,
        policy: Policy,
    ) -> Result<Placed, Error> {
        let mut kinds = HashMap::new();
        for child in &plan.children {
            let api_version = child["apiVersion"].as_str().unwrap_or_default();
            let kind = child["kind"].as_str().unwrap_or_default();
            let key = (api_version.to_string(), kind.to_string());
            if let std::collections::hash_map::Entry::Vacant(e) = kinds.entry(key) {
                e.insert(self.kind_of(api_version, kind).await?);
            }
        }
        let mut desired = plan.children.clone();
        let name = parent.name_any();
        let parent_ns = parent.namespace().filter(|_| parent_kind.namespaced);
        let keys = children::place(
            &mut desired,
            Parent {
                group: &parent_kind.resource.group,
                kind: &parent_kind.resource.kind,
                name: &name,
                namespace: parent_ns.as_deref(),
            },
            &PlanKinds {
                resolved: kinds.clone(),
                owned: caches.owned,
            },
            caches.namespaces,
            policy.unowned,
        )?;
        Ok(Placed {
            desired,
            keys,
            kinds,
            parent_ns,
        })
    }

    /// Sends `child` as a server-side apply with `dryRun=All`, as [`Applier::apply`] would send
    /// it; the server's refusal, if it refuses.
    async fn try_child(&self, kind: &Kind, key: &ChildKey, child: &Value) -> Result<(), ApiError> {
        let mut params = PatchParams::apply(&self.field_manager).dry_run();
        params.force = self.model.operator.force_apply;
        let target = write::Target {
            resource: &kind.resource,
            namespace: key.2.as_deref().filter(|_| kind.namespaced),
            name: &key.3,
            subresource: None,
        };
        write::patch(&self.client, target, &params, &Patch::Apply(child))
            .await
            .map(drop)
            .map_err(ApiError::from)
    }
}

/// The children of a plan, placed ([`Applier::placed`]).
pub(super) struct Placed {
    /// The children, each in its namespace.
    pub(super) desired: Vec<Value>,
    /// Their identities, in the same order.
    pub(super) keys: Vec<ChildKey>,
    /// Their kinds by apiVersion and kind.
    pub(super) kinds: HashMap<(String, String), Kind>,
    /// The parent's namespace, `None` when its kind is cluster-scoped.
    pub(super) parent_ns: Option<String>,
}

fn object_ref(kind: &Kind, key: &ChildKey) -> ObjectRef<DynamicObject> {
    let r = ObjectRef::new_with(&key.3, kind.resource.clone());
    match &key.2 {
        Some(ns) => r.within(ns),
        None => r,
    }
}

fn child_id(key: &ChildKey) -> ChildRef {
    ChildRef {
        api_version: key.0.clone(),
        kind: key.1.clone(),
        namespace: key.2.clone(),
        name: key.3.clone(),
    }
}

/// The children in the owned caches that pruning would delete: applied by `parent` and no
/// longer in `desired`.
fn pruned(parent: &DynamicObject, desired: &[ChildKey], caches: Caches<'_>) -> Vec<ChildRef> {
    let Some(uid) = parent.uid() else {
        return Vec::new();
    };
    let wanted: HashSet<(&str, &str, Option<&str>, &str)> = desired
        .iter()
        .map(|(av, k, ns, n)| (group_of(av), k.as_str(), ns.as_deref(), n.as_str()))
        .collect();
    let mut out = Vec::new();
    for inf in caches.owned {
        for child in inf.controlled_by(&uid) {
            let ns = child.namespace().filter(|_| inf.kind.namespaced);
            let name = child.name_any();
            let r = &inf.kind.resource;
            let id = (
                r.group.as_str(),
                r.kind.as_str(),
                ns.as_deref(),
                name.as_str(),
            );
            if applied_by(&child, &uid) && !wanted.contains(&id) {
                out.push(ChildRef {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                    namespace: ns,
                    name,
                });
            }
        }
    }
    out
}

/// The fields of `desired` whose merge into the live status would change it.
fn status_changes(parent: &DynamicObject, desired: &Map<String, Value>) -> Vec<StatusChange> {
    let current = parent.data.get("status").unwrap_or(&Value::Null);
    desired
        .iter()
        .filter(|(k, v)| status_differs(current, &Map::from_iter([((*k).clone(), (*v).clone())])))
        .map(|(k, v)| StatusChange {
            field: k.clone(),
            before: current.get(k).cloned(),
            after: v.clone(),
        })
        .collect()
}

/// `live` cut down to the fields `want` has: what those fields hold now. Lists are kept whole
/// unless both have the same length, when their items are cut one by one.
fn cut_to(live: &Value, want: &Value) -> Value {
    match (live, want) {
        (Value::Object(l), Value::Object(w)) => Value::Object(
            w.keys()
                .filter_map(|k| l.get(k).map(|lv| (k.clone(), cut_to(lv, &w[k]))))
                .collect(),
        ),
        (Value::Array(l), Value::Array(w)) if l.len() == w.len() => {
            Value::Array(l.iter().zip(w).map(|(a, b)| cut_to(a, b)).collect())
        }
        _ => live.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_live_child_is_cut_to_the_fields_khai_writes() {
        let live = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "uid": "u", "labels": { "k": "v", "other": "x" } },
            "data": { "size": "3", "image": "redis" }, "list": [{ "a": 1, "b": 2 }] });
        let want = json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "labels": { "k": "w" } },
            "data": { "size": "7", "tier": "large" }, "list": [{ "a": 2 }] });
        assert_eq!(
            cut_to(&live, &want),
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "a", "labels": { "k": "v" } },
                "data": { "size": "3" }, "list": [{ "a": 1 }] })
        );
    }

    #[test]
    fn only_the_status_fields_a_merge_would_change_are_named() {
        let parent: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "App", "metadata": { "name": "p" },
            "status": { "phase": "Ready", "replicas": 3 },
        }))
        .unwrap();
        let desired = json!({ "phase": "Ready", "replicas": 5.0, "gone": null, "new": "x" });
        let changes = status_changes(&parent, desired.as_object().unwrap());
        let named: Vec<(&str, Option<&Value>)> = changes
            .iter()
            .map(|c| (c.field.as_str(), c.before.as_ref()))
            .collect();
        assert_eq!(named, [("replicas", Some(&json!(3))), ("new", None)]);
    }
}
