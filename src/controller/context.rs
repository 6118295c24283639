//! What the reconciles of one controller share: what the config says about it ([`Spec`]), the
//! caches it reads ([`Caches`]), the services it writes through ([`Services`]) and its own
//! per-object state (backoff, the requests waiting in its queue).

use crate::apply::Applier;
use crate::queue;
use crate::script::Script;
use crate::watch::{Informer, Kind};
use kube::runtime::events::Recorder;
use serde_json::Value;
use std::sync::Arc;

/// Everything the reconciles of one controller in one namespace share.
pub(crate) struct Ctx {
    pub spec: Spec,
    pub caches: Caches,
    pub services: Services,
    pub backoff: queue::Backoff,
    /// Per-object write history, to slow down reconciles that keep writing.
    pub spin: super::spin::Spin,
    /// Requests waiting for a reconcile, for the workqueue metrics.
    pub pending: queue::Pending,
}

/// What the config says about one controller, resolved against the cluster.
pub(crate) struct Spec {
    /// Name in logs and metrics.
    pub controller: String,
    pub operator: String,
    /// The script's reconcile function.
    pub function: String,
    /// The script's `finalize(obj, ctx)`, when it defines one; only then is a finalizer added.
    pub finalize: Option<String>,
    pub finalizer_name: String,
    pub script: Script,
    pub kind: Kind,
    /// Script predicate `when(obj)`; objects for which it is not true are left alone.
    pub when: Option<String>,
    /// Annotations an object must carry to be reconciled.
    pub annotations: Vec<String>,
    /// Whether khai owns `.status` of this kind (a CRD of this config with a status schema) and
    /// so maintains `observedGeneration` and the `Ready` condition.
    pub manage_status: bool,
    /// `[params]` of the config.
    pub params: Value,
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
    pub fn for_apply(&self) -> crate::apply::Caches<'_> {
        crate::apply::Caches {
            primary: &self.primary,
            owned: &self.owned,
            namespaces: &self.namespaces,
        }
    }
}

impl Ctx {
    /// Forgets what the controller keeps per object (backoff, write history) for `obj`, which
    /// is gone.
    pub fn forget(&self, obj: &kube::api::DynamicObject) {
        use kube::ResourceExt;
        let key = obj.uid().unwrap_or_else(|| obj.name_any());
        self.backoff.succeed(&key);
        self.spin.forget(&key);
    }
}
