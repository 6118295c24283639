//! The seam through which a second revision of the config (a candidate) watches a controller's
//! reconciles: the controller hands each plan it is about to carry out to the [`Shadow`] set on
//! its context, which runs the candidate beside it without writing. In a canary rollout the
//! [`Route`] set on it also picks, per object and turn, which revision's `reconcile` makes the
//! plan that is carried out. Nothing is set, and nothing runs, without a candidate.

use crate::reconcile::Plan;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::api::DynamicObject;
use std::sync::{Arc, OnceLock};

/// What runs a candidate revision beside the active one for one controller.
pub(crate) trait Shadow: Send + Sync {
    /// Runs the candidate for `obj`, whose active plan is `active`, and records how the two
    /// differ. Never writes: the candidate's writes and HTTP calls are held back.
    fn compare<'a>(&'a self, obj: &'a Arc<DynamicObject>, active: &'a Plan) -> BoxFuture<'a, ()>;
    /// `obj` is gone: whatever is kept about it goes too.
    fn forget(&self, obj: &DynamicObject);
}

/// Which revision reconciles each object of one controller in a canary rollout.
pub(crate) trait Route: Send + Sync {
    /// The candidate's controller when the candidate reconciles `obj` now; `None` when the
    /// active revision does.
    fn candidate_for(&self, obj: &DynamicObject) -> Option<Arc<super::Ctx>>;
    /// Counts one reconcile by the candidate (`candidate`) or the active revision, and whether
    /// it failed.
    fn outcome(&self, candidate: bool, failed: bool);
    /// Yields each time objects change hands (a promotion, a rollback), so that every object is
    /// reconciled again by the revision that now owns it.
    fn moves(&self) -> BoxStream<'static, ()>;
}

/// The candidate set on a controller, once, after it is prepared; read with one atomic load
/// per reconcile.
#[derive(Default)]
pub(crate) struct Hooks {
    shadow: OnceLock<Arc<dyn Shadow>>,
    route: OnceLock<Arc<dyn Route>>,
}

impl Hooks {
    /// Sets the candidate; a controller already shadowed keeps its first one.
    pub(crate) fn shadow_with(&self, shadow: Arc<dyn Shadow>) {
        let _ = self.shadow.set(shadow);
    }

    pub(crate) fn shadow(&self) -> Option<&Arc<dyn Shadow>> {
        self.shadow.get()
    }

    /// Sets the canary router; a controller already routed keeps its first one.
    pub(crate) fn route_with(&self, route: Arc<dyn Route>) {
        let _ = self.route.set(route);
    }

    pub(crate) fn route(&self) -> Option<&Arc<dyn Route>> {
        self.route.get()
    }
}
