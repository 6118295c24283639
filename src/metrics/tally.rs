//! What one reconcile wrote, counted while it runs: children applied, unchanged and pruned, the
//! status written, whether it paused the object for a hot loop, and whether the wake it asked
//! for is a timer's. The record functions add to
//! the tally of the reconcile whose task they run in; outside [`tallied`] they add to nothing.
//! The console's per-object history reads it; the state lives as long as one reconcile.

use serde::Serialize;
use std::cell::RefCell;

/// The writes of one reconcile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tally {
    pub(crate) applied: usize,
    pub(crate) unchanged: usize,
    pub(crate) pruned: usize,
    pub(crate) status_written: bool,
    /// The object was paused because its reconciles kept writing.
    pub(crate) hot_loop: bool,
    /// The wake it asked for is a timer's or daemon's, so the turn it brings is the clock's.
    #[serde(skip)]
    pub(crate) clock_wake: bool,
}

tokio::task_local! {
    static TALLY: RefCell<Tally>;
}

/// Runs `fut` with a tally of its own, and hands it back with the output.
pub(crate) async fn tallied<F: Future>(fut: F) -> (F::Output, Tally) {
    TALLY
        .scope(RefCell::new(Tally::default()), async move {
            let out = fut.await;
            (out, TALLY.with(|t| *t.borrow()))
        })
        .await
}

/// Adds to the tally of the reconcile running in this task, if there is one.
pub(super) fn add(f: impl FnOnce(&mut Tally)) {
    // Outside a tallied reconcile (handlers, timers, unit tests) there is nothing to add to.
    let _ = TALLY.try_with(|t| f(&mut t.borrow_mut()));
}

/// Whether this task runs inside [`tallied`]: what a test checks to see a reconcile was not
/// wrapped.
#[cfg(test)]
pub(crate) fn in_tally() -> bool {
    TALLY.try_with(|_| ()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_inside_a_tallied_future_are_counted_and_outside_are_not() {
        add(|t| t.applied += 5);
        let ((), tally) = tallied(async {
            add(|t| t.applied += 2);
            tokio::task::yield_now().await;
            add(|t| t.status_written = true);
        })
        .await;
        assert_eq!(
            tally,
            Tally {
                applied: 2,
                status_written: true,
                ..Tally::default()
            }
        );
    }
}
