//! What the reconciles of one controller share: what the config says about it ([`Spec`]), the
//! caches it reads ([`Caches`]), the services it writes through ([`Services`]), the records of its
//! objects ([`Objects`]) and the requests waiting in its queue.

use crate::apply::Applier;
use crate::events::Recorder;
use crate::handler::Handlers;
use crate::handler::clock::Clock;
use crate::handler::index::IndexSet;
use crate::object::{ObjectKey, Objects};
use crate::queue;
use crate::reconcile::lookup::CacheLookup;
use crate::script::Script;
use crate::script::{Indexes, Reads, ScriptCtx};
use crate::watch::{Informer, Kind};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::sync::Arc;

/// Everything the reconciles of one controller in one namespace share.
pub(crate) struct Ctx {
    pub spec: Spec,
    pub caches: Caches,
    pub services: Services,
    /// How long a failed object waits before its next attempt.
    pub backoff: queue::Backoff,
    /// One record per object: what the controller remembers about it between reconciles.
    pub objects: Arc<Objects>,
    /// Requests waiting for a reconcile, for the workqueue metrics.
    pub pending: queue::Pending,
    /// What runs beside (or instead of) `reconcile` for this kind.
    pub beside: Beside,
    /// The candidate revision run beside this controller, when one is loaded.
    pub revisions: super::shadow::Hooks,
}

/// The handlers, timers and daemons of the controller's kind, and the config's indexes.
#[derive(Default)]
pub(crate) struct Beside {
    pub handlers: Option<Arc<Handlers>>,
    pub clock: Option<Arc<Clock>>,
    pub indexes: Option<Arc<IndexSet>>,
}

/// What the config says about one controller, resolved against the cluster.
pub(crate) struct Spec {
    /// Name in logs and metrics.
    pub controller: String,
    pub operator: String,
    /// The script's reconcile function; `None` for a kind that has only handlers, timers or
    /// daemons.
    pub function: Option<String>,
    /// The script's `finalize(obj, ctx)`, when it defines one; only then is a finalizer added.
    pub finalize: Option<String>,
    /// The finalizer this controller adds while it needs one.
    pub finalizer_name: String,
    /// The finalizers of every controller of its kind, and whether this one removes stale ones.
    pub finalizers: super::finalizer_names::Names,
    pub script: Script,
    pub kind: Kind,
    /// Script predicate `when(obj)`; objects for which it is not true are left alone.
    pub when: Option<String>,
    /// Annotations an object must carry to be reconciled.
    pub annotations: Vec<String>,
    /// The filters the API server applies to the controller's watch (`selector`,
    /// `field_selector`).
    pub filter: crate::watch::Filter,
    /// Whether khai owns `.status` of this kind (a CRD of this config with a status schema) and
    /// so maintains `observedGeneration` and the `Ready` condition.
    pub manage_status: bool,
    /// `[params]` of the config.
    pub params: Value,
    /// How its children are owned and deleted (`unowned_children`, `delete_children`).
    pub children: crate::apply::Policy,
    /// What calls of its scripts about its objects may do beyond computing (`k8s::…`,
    /// `http::…`), and how much.
    pub effects: Arc<crate::effects::Effects>,
    /// The shard this replica is (`khai run --shards`): objects carrying its drain label are
    /// let go of ([`super::drain`]).
    pub shard: Option<Arc<crate::shard::Settings>>,
}

/// The informer caches a controller reads.
pub(crate) struct Caches {
    /// The controller's own kind.
    pub primary: Arc<Informer>,
    /// The owned kinds: change detection and pruning of children. A cluster-scoped parent has
    /// one informer per owned kind and watched namespace.
    pub owned: Vec<Arc<Informer>>,
    /// The namespaces khai watches; empty means all.
    pub namespaces: Vec<String>,
    /// What scripts may look up through `ctx`: the primary, owned and watched kinds.
    pub visible: Vec<Arc<Informer>>,
}

/// The services a controller writes through, shared by every controller of a config.
pub(crate) struct Services {
    pub applier: Arc<Applier>,
    pub client: kube::Client,
    pub recorder: Recorder,
}

impl Caches {
    /// The caches a plan is applied against.
    pub(crate) fn for_apply(&self) -> crate::apply::Caches<'_> {
        crate::apply::Caches {
            primary: &self.primary,
            owned: &self.owned,
            namespaces: &self.namespaces,
        }
    }
}

impl Ctx {
    /// Forgets everything the controller keeps about `obj`, which is gone: its record, its
    /// memo, and its timers and daemons; returns the daemons that ran for it, to be
    /// stopped.
    pub(crate) fn forget(&self, obj: &DynamicObject) -> Vec<crate::handler::clock::Stopping> {
        let key = ObjectKey::of(obj);
        self.objects.forget(&key);
        crate::handler::memos().forget(key.as_str());
        if let Some(s) = self.revisions.shadow() {
            s.forget(obj);
        }
        self.beside
            .clock
            .as_ref()
            .map(|c| c.forget(key.as_str()))
            .unwrap_or_default()
    }

    /// Counts a failure of `key` and returns how long it waits before its next attempt.
    pub(crate) fn failed(&self, key: &ObjectKey) -> std::time::Duration {
        self.objects.update(key, |s| {
            s.failures = s.failures.saturating_add(1);
            self.backoff.delay(s.failures)
        })
    }

    /// Where the writes for `key` are remembered, with (`echoes`) or without the watch events of
    /// its child writes expected back.
    pub(crate) fn ledger<'a>(
        &'a self,
        key: &'a ObjectKey,
        echoes: bool,
    ) -> crate::apply::Ledger<'a> {
        crate::apply::Ledger {
            objects: &self.objects,
            parent: key,
            echoes,
            primary: Some(&self.caches.primary),
        }
    }

    /// `key` succeeded: its next failure waits the shortest time again.
    pub(crate) fn succeeded(&self, key: &ObjectKey) {
        self.objects.update_existing(key, |s| s.failures = 0);
    }

    /// Whether `reconcile` alone decides what the controller does for an object, so that a
    /// reconcile whose script read nothing but the object does not depend on its children
    /// ([`crate::apply::Echoes`]): no handlers, timers or daemons, which read through calls of
    /// their own, and no `when(obj, ctx)`, which may look at the children.
    pub(crate) fn plan_alone_decides(&self) -> bool {
        self.beside.handlers.is_none()
            && self.beside.clock.is_none()
            && self
                .spec
                .when
                .as_ref()
                .is_none_or(|w| !self.spec.script.has_function(w, 2))
    }

    /// The `ctx` a script called about `obj` sees.
    pub(crate) fn script_ctx(&self, obj: &DynamicObject) -> ScriptCtx {
        self.ctx_for(obj, true, Reads::default())
    }

    /// [`Self::script_ctx`], and what tells whether the call read anything through it besides
    /// `obj` ([`Reads`]).
    pub(crate) fn tracked_ctx(&self, obj: &DynamicObject) -> (ScriptCtx, Reads) {
        let reads = Reads::tracked();
        (self.ctx_for(obj, true, reads.clone()), reads)
    }

    /// The `ctx` of a call about `obj` that is not one of the controller's objects (a watch's
    /// `map`): the same lookups, and no memo (memos are kept per object of the controller).
    pub(crate) fn related_ctx(&self, obj: &DynamicObject) -> ScriptCtx {
        self.ctx_for(obj, false, Reads::default())
    }

    fn ctx_for(&self, obj: &DynamicObject, memo: bool, reads: Reads) -> ScriptCtx {
        let uid = obj.uid().unwrap_or_default();
        ScriptCtx {
            operator: self.spec.operator.clone(),
            controller: self.spec.controller.clone(),
            namespace: obj.namespace(),
            params: self.spec.params.clone(),
            memo: memo.then(|| crate::handler::memos().of(&uid)),
            lookup: Arc::new(CacheLookup {
                uid,
                namespace: obj.namespace(),
                informers: self.caches.visible.clone(),
                reads: reads.clone(),
            }),
            attempt: None,
            indexes: self
                .beside
                .indexes
                .clone()
                .map(|i| match reads.is_tracked() {
                    true => Arc::new(TrackedIndexes {
                        inner: i,
                        reads: reads.clone(),
                    }) as Arc<dyn Indexes>,
                    false => i as Arc<dyn Indexes>,
                }),
            // A watch's `map` (no memo) computes; it makes no calls.
            effects: memo.then(|| match reads.is_tracked() {
                true => self.spec.effects.tracked(reads.clone()),
                false => self.spec.effects.clone(),
            }),
        }
    }
}

/// The config's indexes, telling a call's [`Reads`] of each read.
struct TrackedIndexes {
    inner: Arc<dyn Indexes>,
    reads: Reads,
}

impl Indexes for TrackedIndexes {
    fn get(&self, index: &str, key: &str) -> Result<Vec<Value>, crate::script::NoIndex> {
        self.reads.mark();
        self.inner.get(index, key)
    }

    fn all(&self, index: &str) -> Result<serde_json::Map<String, Value>, crate::script::NoIndex> {
        self.reads.mark();
        self.inner.all(index)
    }
}
