//! A second revision of the config run beside the active one (`khai run --candidate DIR`).
//!
//! The candidate's controllers are prepared as the active ones are, over the same informers,
//! but never started: each active controller that has a candidate of the same name, kind and
//! namespace hands every plan it carries out to a [`shadow::Shadowing`], which runs the
//! candidate's filters and `reconcile` for the same object with its side effects held back (as
//! `khai diff` holds them, [`crate::effects::dry`]) and compares the two plans
//! ([`crate::diff::between`]). The candidate writes nothing. What diverges is kept in the
//! [`book::Book`]: counted in `khai_candidate_divergent_objects`, the latest objects listed with
//! their diffs on the metrics port (`/candidate/divergent`), which `khai diff --running` reads.
//! In a canary rollout ([`rollout`]) the candidate also reconciles, and writes for, a share of
//! the objects.

mod book;
pub(crate) mod rollout;
mod shadow;

pub(crate) use book::Book;
pub(crate) use rollout::Rollout;

use crate::controller::Prepared;
use std::sync::Arc;

/// Sets the candidate of every controller of `active` that `candidate` has too (same name,
/// namespace and informer of its kind); returns how many are shadowed.
pub(crate) fn attach(active: &[Prepared], candidate: &[Prepared], book: &Arc<Book>) -> usize {
    let mut shadowed = 0;
    for (a, c) in twins(active, candidate) {
        a.ctx.revisions.shadow_with(Arc::new(shadow::Shadowing::new(
            c.ctx.clone(),
            book.clone(),
        )));
        shadowed += 1;
    }
    shadowed
}

/// Each controller of `active` with the controller of `candidate` of the same name, namespace
/// and informer of its kind, where the candidate has one.
fn twins<'a>(
    active: &'a [Prepared],
    candidate: &'a [Prepared],
) -> impl Iterator<Item = (&'a Prepared, &'a Prepared)> {
    active.iter().filter_map(|a| {
        candidate
            .iter()
            .find(|c| {
                c.ctx.spec.controller == a.ctx.spec.controller
                    && Arc::ptr_eq(&c.primary, &a.primary)
            })
            .map(|c| (a, c))
    })
}
