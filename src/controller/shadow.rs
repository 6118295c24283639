//! The seam through which a second revision of the config (a candidate) watches a controller's
//! reconciles: the controller hands each plan it is about to carry out to the [`Shadow`] set on
//! its context, which runs the candidate beside it without writing. Nothing is set, and nothing
//! runs, without a candidate.

use crate::reconcile::Plan;
use futures::future::BoxFuture;
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

/// The candidate set on a controller, once, after it is prepared; read with one atomic load
/// per reconcile.
#[derive(Default)]
pub(crate) struct Hooks {
    shadow: OnceLock<Arc<dyn Shadow>>,
}

impl Hooks {
    /// Sets the candidate; a controller already shadowed keeps its first one.
    pub(crate) fn shadow_with(&self, shadow: Arc<dyn Shadow>) {
        let _ = self.shadow.set(shadow);
    }

    pub(crate) fn shadow(&self) -> Option<&Arc<dyn Shadow>> {
        self.shadow.get()
    }
}
