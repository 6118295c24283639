//! Whether a call of a script looked at anything besides its arguments: a cache lookup
//! (`ctx.get`, `ctx.list`, `ctx.owned`), an index (`ctx.index`), a Secret (`ctx.secret`) or a
//! side effect (`k8s::…`, `http::…`).
//!
//! A reconcile that looked at nothing but its object computes the same plan from the same
//! object, whatever its children look like. That is what lets the controller skip the watch
//! event of a child khai just applied (`crate::apply::Echoes`): it could not change the plan.
//! The answer is conservative: any lookup counts, whichever kind it reads. `ctx.memo` does not
//! count: it is the object's own state, which the script keeps, not the cluster's.
//!
//! The same tracker records whether the call wrote through the `k8s` module: such a write (a
//! label the script bumps on its own object every time) can trigger the object again as surely
//! as a child khai applies, so the controller's hot-loop damping counts it (`controller::spin`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What one call read, shared by the places it can read through. The default tracks nothing:
/// [`Reads::mark`] does nothing and [`Reads::any`] is `true`, the safe answer for a call whose
/// reads nobody watched.
#[derive(Debug, Clone, Default)]
pub struct Reads(Option<Arc<Seen>>);

#[derive(Debug, Default)]
struct Seen {
    read: AtomicBool,
    wrote: AtomicBool,
}

impl Reads {
    /// A tracker for one call; nothing read yet.
    pub(crate) fn tracked() -> Self {
        Self(Some(Arc::default()))
    }

    /// Whether this tracker sees what a call reads (not the default, which sees nothing).
    pub(crate) fn is_tracked(&self) -> bool {
        self.0.is_some()
    }

    /// The call read something.
    pub fn mark(&self) {
        if let Some(seen) = &self.0 {
            seen.read.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the call may have read something: `true` unless this tracker saw the whole call
    /// and nothing was read.
    pub fn any(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(|seen| seen.read.load(Ordering::Relaxed))
    }

    /// The call wrote to the API server through the `k8s` module.
    pub(crate) fn mark_write(&self) {
        if let Some(seen) = &self.0 {
            seen.wrote.store(true, Ordering::Relaxed);
        }
    }

    /// Whether this tracker saw the call write through the `k8s` module.
    pub fn wrote(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|seen| seen.wrote.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracked_call_reads_nothing_until_marked_and_an_untracked_one_may_have_read_anything() {
        let r = Reads::tracked();
        assert!(r.is_tracked() && !r.any());
        r.clone().mark();
        assert!(r.any(), "clones share the tracker");
        let untracked = Reads::default();
        untracked.mark();
        assert!(!untracked.is_tracked() && untracked.any());
        assert!(!r.wrote(), "a read is no write");
        r.clone().mark_write();
        assert!(r.wrote(), "clones share the tracker");
    }
}
