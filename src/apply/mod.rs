//! Carries out a [`Plan`]: children by server-side apply, owned by the parent; pruning of children
//! no longer desired; status only when it would change.
//!
//! Children get a controller ownerReference to the parent, khai's managed-by label, an owner label
//! naming the parent's uid, and an annotation hashing what khai applied. They land in the parent's
//! namespace unless they name one. Before applying, each child is compared with the cached copy
//! from its kind's informer: if everything khai would write is already there (the hash included,
//! so a field dropped from the desired object still counts as a change) nothing is sent. Status is
//! compared the same way, so a steady-state reconcile makes no write at all.
//!
//! A child that cannot carry an ownerReference (a cluster-scoped child of a namespaced parent, a
//! child in another namespace), allowed by the controller's `unowned_children`, names its parent
//! in an annotation instead ([`crate::watch::ownership`]); khai prunes it like any other and
//! deletes it itself when the parent goes ([`Applier::delete_children`]).
//!
//! Pruning only ever deletes an object that carries this parent's owner label and either its
//! controller ownerReference or khai's unowned-child annotation, and only with a uid
//! precondition: nothing khai did not create is touched.

mod child;
mod compare;
mod delete;
mod echo;
mod hash;
mod owner;
mod preview;
mod status;

pub use compare::{is_subset, object_difference, status_differs};
pub use delete::Progress;
pub use echo::is_echo;
pub use owner::{APPLIED_HASH, ORDER_ANNOTATION, OWNER_LABEL};
use owner::{Mark, applied_by};
pub use preview::{ChildRef, ChildWrite, Preview, StatusChange};
pub use status::Manager;

use crate::client::ApiError;
use crate::object::{ChildId, ObjectKey, Objects};
use crate::reconcile::Plan;
use crate::reconcile::children::{self, ChildKey};
use crate::sync::lock;
use crate::watch::{self, Informer, Kind};
use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Errors applying a plan; all are retried with backoff. Each message says its cause, which is
/// kept typed (`cause`) and not linked again as the error's source, so a printer that walks the
/// chain says it once.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to resolve child kind {kind}: {cause}")]
    Resolve { kind: String, cause: watch::Error },
    /// The plan asks for a child khai must not apply.
    #[error(transparent)]
    Invalid(#[from] children::Invalid),
    #[error("failed to apply child {kind} {name}: {cause}")]
    ApplyChild {
        kind: String,
        name: String,
        cause: ApiError,
    },
    #[error("failed to write status: {0}")]
    Status(ApiError),
    #[error("failed to write the status handlers returned: {0}")]
    HandlerStatus(ApiError),
    #[error("failed to record handler progress: {0}")]
    Annotate(ApiError),
    #[error("failed to prune child {kind} {name}: {cause}")]
    Prune {
        kind: String,
        name: String,
        cause: ApiError,
    },
}

/// How a controller's children are owned and deleted (its `unowned_children` and
/// `delete_children`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Children that cannot carry an ownerReference are allowed, marked by label and annotation.
    pub unowned: bool,
    /// khai deletes the children when the parent goes, in reverse order of the plan.
    pub ordered: bool,
}

impl Policy {
    /// The policy a `[[controller]]` entry asks for.
    pub fn of(ctl: &crate::config::model::Controller) -> Self {
        Self {
            unowned: ctl.unowned_children,
            ordered: ctl.delete_children == crate::config::model::DeleteChildren::Ordered,
        }
    }

    /// Whether khai deletes children itself when the parent goes, and so needs its finalizer.
    pub fn deletes_children(&self) -> bool {
        self.unowned || self.ordered
    }
}

/// What applying a plan did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Children sent to the API server because they differed from the cache.
    pub children_applied: usize,
    /// Children already as desired; nothing sent.
    pub children_unchanged: usize,
    /// Children deleted because the plan no longer lists them.
    pub children_pruned: usize,
    pub status_written: bool,
}

/// The caches a plan is applied against: the parent's own kind (for its status) and the owned
/// kinds (for change detection and pruning of children).
#[derive(Clone, Copy)]
pub struct Caches<'a> {
    pub primary: &'a Informer,
    pub owned: &'a [Arc<Informer>],
    /// The namespaces khai watches; empty means all.
    pub namespaces: &'a [String],
}

impl Caches<'_> {
    /// The owned informer that caches objects of `kind` in `namespace`.
    fn owned_informer(&self, kind: &Kind, namespace: Option<&str>) -> Option<&Arc<Informer>> {
        self.owned.iter().find(|i| {
            same_kind(&i.kind, &kind.resource.api_version, &kind.resource.kind)
                && (i.namespace.is_none() || i.namespace.as_deref() == namespace)
        })
    }
}

/// Whether `kind` is `api_version`/`kind_name`, in any version of its group.
fn same_kind(kind: &Kind, api_version: &str, kind_name: &str) -> bool {
    kind.resource.kind == kind_name && kind.resource.group == group_of(api_version)
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Applies plans for one operator; caches child kinds it has resolved.
pub struct Applier {
    client: kube::Client,
    model: crate::config::Model,
    field_manager: String,
    kinds: Mutex<HashMap<String, Kind>>,
    /// Every write is sent as a server-side dry run: validated and answered, never stored.
    dry_run: bool,
}

/// The child kinds of one plan, resolved, and the controller's owned kinds.
struct PlanKinds<'a> {
    resolved: HashMap<(String, String), Kind>,
    owned: &'a [Arc<Informer>],
}

impl children::Kinds for PlanKinds<'_> {
    fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.resolved
            .get(&(api_version.to_string(), kind.to_string()))
            .map(|k| k.namespaced)
    }
    fn owned(&self, api_version: &str, kind: &str) -> bool {
        self.owned
            .iter()
            .any(|i| same_kind(&i.kind, api_version, kind))
    }
}

/// Where the writes khai makes for one parent are remembered: the parent's record among its
/// controller's objects ([`crate::object::State::sent`]).
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    pub objects: &'a Objects,
    pub parent: &'a ObjectKey,
    /// Whether the watch events of its child writes are expected back as echoes that need no
    /// reconcile: the reconcile that made the plan read nothing but the parent.
    pub echoes: bool,
    /// The cache of the parent's kind, when there is one: a status write compares with the
    /// version it shows now, which may be newer than the one the reconcile read.
    pub primary: Option<&'a Informer>,
}

impl Ledger<'_> {
    /// Updates the parent's record, if it has one.
    fn update<R>(&self, f: impl FnOnce(&mut crate::object::State) -> R) -> Option<R> {
        self.objects.update_existing(self.parent, f)
    }

    /// `parent` as the cache shows it now, if that is a newer version than `parent`.
    fn newer(&self, parent: &DynamicObject) -> Option<Arc<DynamicObject>> {
        let cache = self.primary?;
        let r = kube::runtime::reflector::ObjectRef::new_with(
            &parent.name_any(),
            cache.kind.resource.clone(),
        );
        let r = match parent.namespace().filter(|_| cache.kind.namespaced) {
            Some(ns) => r.within(&ns),
            None => r,
        };
        cache.store().get(&r).filter(|o| {
            o.uid() == parent.uid() && o.resource_version() != parent.resource_version()
        })
    }
}

impl Applier {
    pub fn new(client: kube::Client, model: crate::config::Model) -> Self {
        let field_manager = model.operator.field_manager().to_string();
        Self {
            client,
            model,
            field_manager,
            kinds: Mutex::new(HashMap::new()),
            dry_run: false,
        }
    }

    /// The same applier, sending every write as a server-side dry run: the API server validates
    /// and answers it, and stores nothing. Every write khai makes about an object goes through
    /// an applier, so this one switch covers them all.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// The parameters of a patch from khai (reconcile's field manager unless set otherwise).
    fn params(&self) -> kube::api::PatchParams {
        kube::api::PatchParams {
            dry_run: self.dry_run,
            ..Default::default()
        }
    }

    /// Applies `plan` for `parent` (of kind `parent_kind`) against `caches`, which make change
    /// detection and pruning free of API reads. What is written is remembered in the parent's
    /// record (`ledger`), so a reconcile from a cache that does not show it yet does not send it
    /// again, and, when the reconcile that made `plan` read nothing but `parent`, so the watch
    /// events of its child writes need not reconcile the parent again.
    pub async fn apply(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        plan: &Plan,
        caches: Caches<'_>,
        policy: Policy,
        ledger: Ledger<'_>,
    ) -> Result<Outcome, Error> {
        let preview::Placed {
            desired,
            keys: placed,
            kinds: resolved,
            parent_ns,
        } = self
            .placed(parent, parent_kind, plan, caches, policy)
            .await?;
        let mut outcome = Outcome::default();
        // A child the API server refuses (a terminating namespace, an invalid name) fails the
        // reconcile, but only after its siblings have been applied: one bad child must not
        // hold back the others. Pruning and status wait for a plan carried out in full.
        let mut failed = None;
        for (index, (child, key)) in desired.into_iter().zip(&placed).enumerate() {
            let kind = &resolved[&(key.0.clone(), key.1.clone())];
            let cache = caches.owned_informer(kind, key.2.as_deref());
            let mark = Mark {
                unowned: children::unowned(parent_ns.as_deref(), key),
                order: policy.ordered.then_some(index + 1),
            };
            match self
                .apply_child(parent, parent_kind, child, key, kind, cache, mark, ledger)
                .await
            {
                Ok(true) => outcome.children_applied += 1,
                Ok(false) => outcome.children_unchanged += 1,
                Err(e) if failed.is_none() => failed = Some(e),
                Err(e) => tracing::warn!(error = %e, "another child failed too"),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let planned: HashSet<ChildId> = placed
            .iter()
            .map(|key| {
                let kind = &resolved[&(key.0.clone(), key.1.clone())];
                ChildId::new(kind, key.2.as_deref(), &key.3)
            })
            .collect();
        ledger.update(|s| s.sent.retain_children(|c| planned.contains(c)));
        outcome.children_pruned = self.prune(parent, &placed, caches.owned).await?;
        if let Some(status) = &plan.status {
            outcome.status_written = self
                .status(parent, parent_kind, status, ledger, Manager::Reconcile)
                .await?;
        }
        Ok(outcome)
    }

    /// Deletes children of `parent` in the owned caches that are not in `desired`.
    async fn prune(
        &self,
        parent: &DynamicObject,
        desired: &[ChildKey],
        owned: &[Arc<Informer>],
    ) -> Result<usize, Error> {
        let Some(uid) = parent.uid() else {
            return Ok(0);
        };
        let wanted: HashSet<(&str, &str, Option<&str>, &str)> = desired
            .iter()
            .map(|(av, k, ns, n)| (group_of(av), k.as_str(), ns.as_deref(), n.as_str()))
            .collect();
        let mut pruned = 0;
        for inf in owned {
            for child in inf.controlled_by(&uid) {
                let ns = child.namespace().filter(|_| inf.kind.namespaced);
                let name = child.name_any();
                let id = (
                    inf.kind.resource.group.as_str(),
                    inf.kind.resource.kind.as_str(),
                    ns.as_deref(),
                    name.as_str(),
                );
                if !applied_by(&child, &uid) || wanted.contains(&id) {
                    continue;
                }
                if self.delete_child(inf, &child).await? {
                    pruned += 1;
                    tracing::info!(child.kind = %inf.kind.resource.kind, child.name = %name, "pruned child no longer desired");
                }
            }
        }
        Ok(pruned)
    }

    async fn kind_of(&self, api_version: &str, kind: &str) -> Result<Kind, Error> {
        let key = format!("{api_version}/{kind}");
        if let Some(k) = lock(&self.kinds).get(&key).cloned() {
            return Ok(k);
        }
        let written = crate::config::kind::KindRef::from_api_version(api_version, kind);
        let resolved = watch::resolve(&self.client, &self.model, &written)
            .await
            .map_err(|cause| Error::Resolve {
                kind: key.clone(),
                cause,
            })?;
        lock(&self.kinds).insert(key, resolved.clone());
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    mod against_a_fake_api {
        use super::super::*;
        use crate::fake_api::FakeApi;
        use kube::core::{ApiResource, GroupVersionKind};
        use serde_json::json;

        fn configmaps() -> Kind {
            Kind::configmaps()
        }

        fn parent() -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "x.dev/v1", "kind": "App",
                "metadata": { "name": "p", "namespace": "ns", "uid": "p1" },
            }))
            .unwrap()
        }

        fn child(name: &str) -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": name, "namespace": "ns", "uid": format!("u-{name}"),
                    "labels": { OWNER_LABEL: "p1" },
                    "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "App", "name": "p",
                        "uid": "p1", "controller": true }] },
            }))
            .unwrap()
        }

        use crate::test_logs::capture as logs;

        /// A child the API server refuses (one in a terminating namespace) must not stop the
        /// plan there: the children after it are still applied.
        #[tokio::test]
        async fn a_refused_child_fails_the_plan_after_its_siblings_are_applied() {
            let api = FakeApi::default();
            api.fail("/api/v1/namespaces/doomed/configmaps/copy", 403, 1);
            let applier = Applier::new(api.client(), crate::config::Model::default());
            lock(&applier.kinds).insert("v1/ConfigMap".into(), configmaps());
            let plan = Plan {
                children: ["doomed", "ns"]
                    .iter()
                    .map(|ns| {
                        json!({ "apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": { "name": "copy", "namespace": ns } })
                    })
                    .collect(),
                status: Some(serde_json::Map::from_iter([(
                    "phase".into(),
                    json!("Ready"),
                )])),
                requeue_after: None,
                events: vec![],
            };
            // A cluster-scoped parent, whose children may live in any namespace.
            let app = Kind {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("x.dev", "v1", "App"),
                    "apps",
                ),
                namespaced: false,
            };
            let mut parent = parent();
            parent.metadata.namespace = None;
            let primary = Informer::with_objects(app.clone(), None, vec![]);
            let owned = [Informer::with_objects(configmaps(), None, vec![])];
            let caches = Caches {
                primary: &primary,
                owned: &owned,
                namespaces: &[],
            };
            let (objects, key) = (Objects::default(), ObjectKey::of(&parent));
            let ledger = Ledger {
                objects: &objects,
                parent: &key,
                echoes: false,
                primary: None,
            };
            let err = applier
                .apply(&parent, &app, &plan, caches, Policy::default(), ledger)
                .await
                .unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("failed to apply child ConfigMap copy: forced by the test"),
                "{err}"
            );
            assert!(
                api.get("/api/v1/namespaces/ns/configmaps/copy").is_some(),
                "the sibling after the refused child was not applied"
            );
        }

        /// A reconcile that read the parent before khai's last status write arrived compares
        /// with the version the cache shows now, and sends nothing when that holds its status;
        /// against the version it read alone, it would write the same status again.
        #[tokio::test]
        async fn a_status_the_cache_shows_in_a_newer_version_is_not_sent_again() {
            let api = FakeApi::default();
            let applier = Applier::new(api.client(), crate::config::Model::default());
            let app = Kind {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("x.dev", "v1", "App"),
                    "apps",
                ),
                namespaced: true,
            };
            let mut read = parent();
            read.metadata.resource_version = Some("1".into());
            let mut now = read.clone();
            now.metadata.resource_version = Some("2".into());
            now.data = json!({ "status": { "phase": "Ready" } });
            let status = serde_json::Map::from_iter([("phase".into(), json!("Ready"))]);
            let (objects, key) = (Objects::default(), ObjectKey::of(&read));
            let send = async |primary: Option<&Informer>| {
                let ledger = Ledger {
                    objects: &objects,
                    parent: &key,
                    echoes: false,
                    primary,
                };
                applier
                    .status(&read, &app, &status, ledger, Manager::Reconcile)
                    .await
                    .unwrap()
            };
            api.put(
                "/apis/x.dev/v1/namespaces/ns/apps/p",
                serde_json::to_value(&read).unwrap(),
            );
            let cache = Informer::with_objects(app.clone(), None, vec![now]);
            assert!(!send(Some(&cache)).await, "the newer version holds it");
            assert_eq!(api.writes().len(), 0, "{:?}", api.writes());
            assert!(send(None).await, "the version read alone does not");
            assert!(!objects.is_empty(), "the write is on its way");
            objects.update_existing(&key, |s| s.sent.shown_object("2"));
            assert!(objects.is_empty(), "its arrival ends the record");
        }

        /// After an outage the watch delivers a burst late. A reconcile running from the event
        /// of khai's previous status write, which arrived after khai sent the next one, does
        /// not send that next status again: the event is older than the write on its way.
        #[tokio::test]
        async fn a_late_event_of_khais_previous_status_write_does_not_repeat_the_next() {
            let api = FakeApi::default();
            let applier = Applier::new(api.client(), crate::config::Model::default());
            let app = Kind {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("x.dev", "v1", "App"),
                    "apps",
                ),
                namespaced: true,
            };
            let path = "/apis/x.dev/v1/namespaces/ns/apps/p";
            let (objects, key) = (Objects::default(), ObjectKey::of(&parent()));
            let ledger = Ledger {
                objects: &objects,
                parent: &key,
                echoes: false,
                primary: None,
            };
            let status = |phase: &str| serde_json::Map::from_iter([("phase".into(), json!(phase))]);
            let at = |version: &str, phase: Option<&str>| {
                let mut o = parent();
                o.metadata.resource_version = Some(version.into());
                if let Some(phase) = phase {
                    o.data = json!({ "status": { "phase": phase } });
                }
                o
            };
            api.put(path, serde_json::to_value(parent()).unwrap()); // 1
            api.put(path, serde_json::to_value(parent()).unwrap()); // 2: an update the cache lags
            let reconcile = |read: DynamicObject, phase: &'static str| {
                let applier = &applier;
                let app = &app;
                async move {
                    let want = status(phase);
                    applier
                        .status(&read, app, &want, ledger, Manager::Reconcile)
                        .await
                        .unwrap()
                }
            };
            assert!(reconcile(at("1", None), "Old").await, "written as 3");
            objects.update_existing(&key, |s| s.sent.shown_object("2"));
            assert!(reconcile(at("2", None), "New").await, "written as 4");
            objects.update_existing(&key, |s| s.sent.shown_object("3"));
            assert!(
                !reconcile(at("3", Some("Old")), "New").await,
                "3 is older than the write on its way"
            );
            assert_eq!(api.writes().len(), 2, "{:?}", api.writes());
            objects.update_existing(&key, |s| s.sent.shown_object("4"));
            assert!(objects.is_empty(), "its arrival ends the record");
        }

        /// The child khai sends is expected back before the request goes; a child already as
        /// desired sends nothing and expects nothing.
        #[tokio::test]
        async fn a_child_sent_is_expected_back_and_an_unchanged_one_is_not() {
            let api = FakeApi::default();
            let applier = Applier::new(api.client(), crate::config::Model::default());
            lock(&applier.kinds).insert("v1/ConfigMap".into(), configmaps());
            let plan = Plan {
                children: vec![json!({ "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": "c" }, "data": { "k": "v" } })],
                ..Plan::default()
            };
            let app = Kind {
                resource: ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("x.dev", "v1", "App"),
                    "apps",
                ),
                namespaced: true,
            };
            let primary = Informer::with_objects(app.clone(), None, vec![]);
            let (objects, parent) = (Objects::default(), parent());
            let key = ObjectKey::of(&parent);
            let ledger = Ledger {
                objects: &objects,
                parent: &key,
                echoes: true,
                primary: None,
            };
            let expected = || objects.read(&key, |s| s.map_or(0, |s| s.sent.echoes()));
            let apply = async |owned: &[Arc<Informer>]| {
                let caches = Caches {
                    primary: &primary,
                    owned,
                    namespaces: &[],
                };
                let p = Policy::default();
                let r = applier.apply(&parent, &app, &plan, caches, p, ledger);
                r.await.unwrap()
            };
            let sent = apply(&[Informer::with_objects(configmaps(), None, vec![])]).await;
            assert_eq!(sent.children_applied, 1);
            let stored = api.get("/api/v1/namespaces/ns/configmaps/c").unwrap();
            let stored: DynamicObject = serde_json::from_value(stored).unwrap();
            assert_eq!(expected(), 1);
            assert!(is_echo(&objects, &configmaps(), &stored, false));
            assert_eq!(expected(), 0);
            let cached = [Informer::with_objects(configmaps(), None, vec![stored])];
            assert_eq!(apply(&cached).await.children_unchanged, 1);
            assert_eq!(expected(), 0, "nothing sent, nothing to expect");
        }

        /// A delete that finds the child gone (404) or replaced (409) is not reported as
        /// "pruned child".
        #[tokio::test]
        async fn a_child_already_gone_or_replaced_is_not_reported_pruned() {
            let api = FakeApi::default();
            // "gone" is in khai's cache but no longer on the server; "replaced" was deleted and
            // made again by someone else (another uid).
            let mut replaced = serde_json::to_value(child("replaced")).unwrap();
            replaced["metadata"]["uid"] = json!("someone-elses");
            api.put("/api/v1/namespaces/ns/configmaps/replaced", replaced);
            api.put(
                "/api/v1/namespaces/ns/configmaps/stale",
                serde_json::to_value(child("stale")).unwrap(),
            );
            let owned = [Informer::with_objects(
                configmaps(),
                Some("ns"),
                vec![child("gone"), child("replaced"), child("stale")],
            )];
            let applier = Applier::new(api.client(), crate::config::Model::default());
            let (pruned, log) = logs(applier.prune(&parent(), &[], &owned)).await;
            assert_eq!(pruned.unwrap(), 1, "only the stale child was deleted");
            assert_eq!(
                log.matches("pruned child no longer desired").count(),
                1,
                "{log}"
            );
            assert!(
                log.contains("child to delete was already gone or replaced"),
                "{log}"
            );
            assert!(
                api.get("/api/v1/namespaces/ns/configmaps/replaced")
                    .is_some(),
                "not ours"
            );
        }
    }
}
