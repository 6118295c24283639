//! One controller's candidate run in the shadow of the active revision: same object, held side
//! effects, plans compared, outcome recorded in the [`Book`].

use super::Book;
use crate::controller::{Ctx, Shadow};
use crate::diff::{ObjectDiff, Verdict};
use crate::effects::dry::Held;
use crate::reconcile::Plan;
use futures::future::BoxFuture;
use kube::api::DynamicObject;
use std::sync::Arc;

/// The candidate of one controller.
pub(super) struct Shadowing {
    candidate: Arc<Ctx>,
    book: Arc<Book>,
}

impl Shadowing {
    pub(super) fn new(candidate: Arc<Ctx>, book: Arc<Book>) -> Self {
        Self { candidate, book }
    }

    /// What the candidate would do for `obj` where the active revision plans `active`.
    async fn run(&self, obj: &Arc<DynamicObject>, active: &Plan) -> ObjectDiff {
        let ctx = &self.candidate;
        let mut diff = ObjectDiff::of(&ctx.spec.controller, obj);
        let held = Arc::new(Held::default());
        diff.verdict = match crate::diff::selected(ctx, &ctx.spec.script, obj).await {
            Ok(true) => match crate::diff::held_plan(ctx, &ctx.spec.script, obj, &held).await {
                Ok(Some(plan)) => Verdict::Planned(crate::diff::between(obj, active, &plan)),
                Ok(None) => Verdict::Skipped("the candidate runs no reconcile".into()),
                Err(e) => Verdict::Failed(e),
            },
            Ok(false) => Verdict::Skipped("not selected by the candidate's filters".into()),
            Err(e) => Verdict::Failed(e),
        };
        if matches!(diff.verdict, Verdict::Failed(_)) {
            crate::metrics::candidate_error(&ctx.spec.controller);
        }
        (diff.calls, diff.more_calls) = held.calls();
        diff
    }
}

impl Shadow for Shadowing {
    fn compare<'a>(&'a self, obj: &'a Arc<DynamicObject>, active: &'a Plan) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let diff = self.run(obj, active).await;
            self.book.record(diff);
        })
    }

    fn forget(&self, obj: &DynamicObject) {
        self.book
            .forget(&ObjectDiff::of(&self.candidate.spec.controller, obj));
    }
}
