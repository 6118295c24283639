//! Deleting a parent's children when the parent goes, where the garbage collector will not do it
//! (children khai tracks by label alone) or should not (the controller deletes in order).
//!
//! One call makes one step and says how far deletion has got ([`Progress`]); the caller calls
//! again when a child is gone (its watch event re-triggers the parent) and lets the parent go at
//! [`Progress::Done`]. In order, a step is the children with the highest place in the plan
//! (their order annotation), and the next step waits until they are gone from the API server,
//! not merely marked for deletion; children applied before the controller deleted in order have
//! no place and go last, together. Without order, every unowned child is deleted in one step and
//! the parent may go as soon as the API server accepted the deletes, as with the garbage
//! collector's background deletion.

use super::owner::{applied_by, is_unowned, order_of};
use super::{Applier, Error, Ledger, Policy};
use crate::client::ApiError;
use crate::object::ChildId;
use crate::watch::{self, Informer};
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject, Preconditions};
use kube::runtime::reflector::ObjectRef;
use std::collections::HashSet;
use std::sync::Arc;

/// How far deleting a parent's children has got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Nothing is left for khai to delete: the parent may go.
    Done,
    /// Deleting in order: `kind` `name` (one of the last step's children) is not gone yet, and
    /// `left` children remain in all.
    Waiting {
        kind: String,
        name: String,
        left: usize,
    },
    /// khai created `kind` `name` and its cache does not show it yet: it may be a child of the
    /// parent, which deleting now would leave behind.
    Unseen { kind: String, name: String },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::Done => write!(f, "every child is deleted"),
            Progress::Waiting { kind, name, left } => write!(
                f,
                "deleting children in reverse order: waiting for {kind} {name} to be gone \
                 ({left} left)"
            ),
            Progress::Unseen { kind, name } => write!(
                f,
                "waiting for khai's cache to show {kind} {name}, which it just created, before \
                 deleting children"
            ),
        }
    }
}

/// The indexes of the children of the next step: those with the highest place.
fn next_step(places: &[usize]) -> Vec<usize> {
    let highest = places.iter().copied().max().unwrap_or(0);
    (0..places.len())
        .filter(|&i| places[i] == highest)
        .collect()
}

/// The child khai created that `owned` caches do not show yet, if it is not cached.
fn unseen(child: &ChildId, owned: &[Arc<Informer>]) -> Option<Progress> {
    let inf = owned.iter().find(|i| {
        child.is_of(&i.kind)
            && (i.namespace.is_none() || i.namespace.as_deref() == child.namespace())
    })?;
    let r = ObjectRef::new_with(&child.name, inf.kind.resource.clone());
    let r = match child.namespace() {
        Some(ns) => r.within(ns),
        None => r,
    };
    inf.store().get(&r).is_none().then(|| Progress::Unseen {
        kind: inf.kind.resource.kind.clone(),
        name: child.name.clone(),
    })
}

impl Applier {
    /// Deletes the next step of `parent`'s children found in the `owned` caches: with
    /// `policy.ordered` every child it applied, in reverse order of the plan; otherwise only the
    /// unowned children (the garbage collector deletes the others), all at once. Only children
    /// carrying the parent's owner label (and its ownerReference or khai's parent annotation) are
    /// deleted, each with a uid precondition.
    pub async fn delete_children(
        &self,
        parent: &DynamicObject,
        owned: &[Arc<Informer>],
        policy: Policy,
        ledger: Ledger<'_>,
    ) -> Result<Progress, Error> {
        let Some(uid) = parent.uid() else {
            return Ok(Progress::Done);
        };
        // A child applied just before the parent was deleted may not be cached yet; deleting
        // the others and letting the parent go would leave it behind for good.
        if let Some(unseen) = ledger.objects.read(ledger.parent, |s| {
            s.and_then(|s| s.sent.created().find_map(|c| unseen(c, owned)))
        }) {
            return Ok(unseen);
        }
        let mut seen = HashSet::new();
        let mut left: Vec<(&Arc<Informer>, Arc<DynamicObject>)> = Vec::new();
        for inf in owned {
            for child in inf.controlled_by(&uid) {
                if !applied_by(&child, &uid) || !(policy.ordered || is_unowned(&child)) {
                    continue;
                }
                // One informer can be listed more than once (a cluster-scoped kind cached once
                // for every namespace); a child is deleted once.
                if seen.insert(child.uid()) {
                    left.push((inf, child));
                }
            }
        }
        if left.is_empty() {
            return Ok(Progress::Done);
        }
        let places: Vec<usize> = left
            .iter()
            .map(|(_, c)| if policy.ordered { order_of(c) } else { 0 })
            .collect();
        let step = next_step(&places);
        for &i in &step {
            let (inf, child) = &left[i];
            if child.metadata.deletion_timestamp.is_none() && self.delete_child(inf, child).await? {
                tracing::info!(child.kind = %inf.kind.resource.kind, child.name = %child.name_any(), "deleted child of a parent on its way out");
            }
        }
        if !policy.ordered {
            return Ok(Progress::Done);
        }
        let (inf, child) = &left[step[0]];
        Ok(Progress::Waiting {
            kind: inf.kind.resource.kind.clone(),
            name: child.name_any(),
            left: left.len(),
        })
    }

    /// Deletes one child in `inf`'s cache, on the condition that it is still the object seen
    /// there (its uid). Returns false when it was already gone or replaced by another object of
    /// the same name, which is not khai's.
    pub(super) async fn delete_child(
        &self,
        inf: &Informer,
        child: &DynamicObject,
    ) -> Result<bool, Error> {
        let ns = child.namespace().filter(|_| inf.kind.namespaced);
        let name = child.name_any();
        let api = watch::api(&self.client, &inf.kind, ns.as_deref());
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: child.uid(),
                resource_version: None,
            }),
            dry_run: self.dry_run,
            ..DeleteParams::background()
        };
        match api.delete(&name, &dp).await.map_err(ApiError::from) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.code(), Some(404 | 409)) => {
                tracing::debug!(child.kind = %inf.kind.resource.kind, child.name = %name, reason = %e, "child to delete was already gone or replaced");
                Ok(false)
            }
            Err(cause) => Err(Error::Prune {
                kind: inf.kind.resource.kind.clone(),
                name,
                cause,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;
    use crate::object::{ObjectKey, Objects, Target};
    use crate::watch::Kind;
    use crate::watch::ownership::PARENT_ANNOTATION;
    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::{Value, json};

    fn roles() -> Kind {
        Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
                "clusterroles",
            ),
            namespaced: false,
        }
    }

    fn parent() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "App",
            "metadata": { "name": "p", "namespace": "ns", "uid": "p1" },
        }))
        .unwrap()
    }

    /// A ClusterRole khai applied for the parent `p1` as its child number `order`.
    fn role(name: &str, order: Option<usize>) -> Value {
        let mut annotations = json!({ PARENT_ANNOTATION: "x.dev/App/ns/p" });
        if let Some(o) = order {
            annotations[super::super::ORDER_ANNOTATION] = json!(o.to_string());
        }
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": name, "uid": format!("u-{name}"),
                "labels": { super::super::OWNER_LABEL: "p1" }, "annotations": annotations } })
    }

    /// The record of a parent khai sent nothing for.
    fn nothing_sent() -> Ledger<'static> {
        static OBJECTS: std::sync::LazyLock<Objects> = std::sync::LazyLock::new(Objects::default);
        static KEY: std::sync::LazyLock<ObjectKey> =
            std::sync::LazyLock::new(|| ObjectKey::uid("p1"));
        Ledger {
            objects: &OBJECTS,
            parent: &KEY,
            echoes: false,
            primary: None,
        }
    }

    fn path(name: &str) -> String {
        format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
    }

    /// The fake API holding `objects`, and an informer whose cache shows the same.
    fn cluster(objects: &[Value]) -> (FakeApi, Arc<Informer>) {
        let api = FakeApi::default();
        for o in objects {
            api.put(&path(o["metadata"]["name"].as_str().unwrap()), o.clone());
        }
        let cached = objects
            .iter()
            .map(|o| serde_json::from_value(o.clone()).unwrap())
            .collect();
        (api, Informer::with_objects(roles(), None, cached))
    }

    #[tokio::test]
    async fn in_order_the_last_child_of_the_plan_goes_first_and_the_next_waits_for_it() {
        // Someone else's object with khai's owner label alone is never touched, even placed
        // highest.
        let mut forged = role("forged", Some(9));
        forged["metadata"]["annotations"] = json!({ super::super::ORDER_ANNOTATION: "9" });
        let (api, inf) = cluster(&[role("first", Some(1)), role("last", Some(2)), forged]);
        let applier = Applier::new(api.client(), crate::config::Model::default());
        let ordered = Policy {
            unowned: true,
            ordered: true,
        };
        let progress = applier
            .delete_children(
                &parent(),
                std::slice::from_ref(&inf),
                ordered,
                nothing_sent(),
            )
            .await
            .unwrap();
        assert_eq!(
            progress,
            Progress::Waiting {
                kind: "ClusterRole".into(),
                name: "last".into(),
                left: 2
            }
        );
        assert!(
            api.get(&path("last")).is_none(),
            "the last child is deleted"
        );
        assert!(api.get(&path("first")).is_some(), "the first waits for it");
        assert!(api.get(&path("forged")).is_some(), "not khai's");
    }

    #[tokio::test]
    async fn without_order_every_unowned_child_goes_at_once_and_the_parent_may_go() {
        let (api, inf) = cluster(&[role("a", None), role("b", None)]);
        let applier = Applier::new(api.client(), crate::config::Model::default());
        let unowned = Policy {
            unowned: true,
            ordered: false,
        };
        let progress = applier
            .delete_children(&parent(), &[inf.clone(), inf], unowned, nothing_sent())
            .await
            .unwrap();
        assert_eq!(progress, Progress::Done);
        assert!(api.get(&path("a")).is_none() && api.get(&path("b")).is_none());
    }

    /// A child khai applied whose creation its cache has not shown yet holds the deletion: it
    /// would otherwise be left behind.
    #[tokio::test]
    async fn a_child_created_but_not_cached_yet_holds_the_deletion() {
        let (api, inf) = cluster(&[role("a", None)]);
        let (objects, p1) = (Objects::default(), ObjectKey::uid("p1"));
        let ledger = Ledger {
            objects: &objects,
            parent: &p1,
            echoes: false,
            primary: None,
        };
        let child = |name: &str| Target::Child(ChildId::new(&roles(), None, name));
        objects.update(&p1, |s| {
            s.sent.written(child("a"), "", 1);
            s.sent.written(child("new"), "", 1);
            s.sent.written(child("updated"), "1", 1);
        });
        let applier = Applier::new(api.client(), crate::config::Model::default());
        let unowned = Policy {
            unowned: true,
            ordered: false,
        };
        let progress = applier
            .delete_children(&parent(), std::slice::from_ref(&inf), unowned, ledger)
            .await
            .unwrap();
        assert_eq!(
            progress.to_string(),
            "waiting for khai's cache to show ClusterRole new, which it just created, before \
             deleting children"
        );
        assert!(api.get(&path("a")).is_some(), "nothing deleted yet");
        // Cached: no longer unseen.
        objects.update(&p1, |s| {
            s.sent.deleted(&ChildId::new(&roles(), None, "new"))
        });
        let progress = applier
            .delete_children(&parent(), std::slice::from_ref(&inf), unowned, ledger)
            .await
            .unwrap();
        assert_eq!(progress, Progress::Done);
        assert!(api.get(&path("a")).is_none());
    }

    #[test]
    fn each_step_is_the_children_with_the_highest_place_and_unplaced_ones_go_last() {
        assert_eq!(next_step(&[1, 3, 2]), [1]);
        assert_eq!(next_step(&[0, 2, 2, 1]), [1, 2]);
        assert_eq!(next_step(&[0, 0]), [0, 1]);
    }
}
