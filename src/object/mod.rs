//! What a controller keeps about each object it handles: one record per object ([`State`]),
//! keyed by its uid ([`ObjectKey`]), forgotten in one step when the object goes
//! ([`Objects::forget`]).
//!
//! The record holds what khai has to remember between two reconciles of the object: its failures
//! in a row (for the backoff), its recent writing reconciles (for hot-loop damping, [`spin`]),
//! its Events this minute ([`event_budget`]), what khai sent for it and its children that the
//! cache may not show yet ([`sent`]: children, status, handler annotations), where its finalizer
//! stands, and whether its handlers have seen it since khai started. What scripts keep with
//! `ctx.memo` lives apart (`crate::script::memo`), shared by every controller of the object, and
//! the timers and daemons running for it are tasks their clock owns (`crate::handler::clock`);
//! the controller's `Ctx::forget` ends all three together. The watch side keeps no
//! write bookkeeping; it only applies watch events to the caches.
//!
//! Memory: a record exists only while it holds something. Every update drops a record left
//! empty; records that went stale (a spin window or Event window over) are swept when the map
//! has doubled since the last sweep, so a burst of new objects costs amortised constant time.

pub mod event_budget;
mod key;
pub mod resource_version;
pub mod sent;
pub mod spin;

pub use key::ObjectKey;
pub use sent::{ChildId, Target};

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::time::Instant;

/// Everything khai remembers about one object between its reconciles.
#[derive(Debug, Default)]
pub struct State {
    /// Failed reconciles in a row, for the backoff; 0 after a success.
    pub(crate) failures: u32,
    /// Its recent writing reconciles, for hot-loop damping.
    pub(crate) spin: spin::History,
    /// Its Events in the current minute.
    pub(crate) events: Option<event_budget::Window>,
    /// What khai sent for it and its children that the cache may not show yet.
    pub(crate) sent: sent::Sent,
    /// On its way out, its finalizer let go already: a reconcile from a cache that does not show
    /// that yet must not clean it up again.
    pub(crate) released: bool,
    /// On its way out, `finalize` has returned true while khai still deletes its children, so it
    /// is not called again at each step.
    pub(crate) finalized: bool,
    /// Refused script calls of its handlers, timers and daemons already reported with a
    /// `Forbidden` Event: said once, not at every retry.
    pub(crate) refusals: Vec<String>,
    /// Its handlers have seen it since khai started (a resume runs once per start). Kept until
    /// the object goes.
    pub(crate) seen: bool,
}

impl State {
    /// What khai sent for the object and its children that the cache may not show yet.
    pub fn sent(&mut self) -> &mut sent::Sent {
        &mut self.sent
    }

    /// Whether nothing is left to remember at `now`.
    fn is_idle(&self, now: Instant) -> bool {
        self.failures == 0
            && self.spin.is_idle(now)
            && self.events.as_ref().is_none_or(|w| w.is_over(now))
            && self.sent.is_idle(now)
            && !self.released
            && !self.finalized
            && self.refusals.is_empty()
            && !self.seen
    }
}

/// The records of one controller's objects.
#[derive(Debug, Default)]
pub struct Objects {
    inner: Mutex<Records>,
}

#[derive(Debug, Default)]
struct Records {
    states: HashMap<ObjectKey, State>,
    /// Records there were after the last sweep; the next comes when there are twice as many.
    swept_at: usize,
}

/// Records at which the first sweep of stale ones comes.
const FIRST_SWEEP: usize = 1024;

impl Objects {
    /// Runs `f` on `key`'s record (a new, empty one when it has none), and drops the record if
    /// `f` leaves nothing in it.
    pub fn update<R>(&self, key: &ObjectKey, f: impl FnOnce(&mut State) -> R) -> R {
        let now = Instant::now();
        let mut records = crate::sync::lock(&self.inner);
        let records = &mut *records;
        if !records.states.contains_key(key)
            && records.states.len() >= records.swept_at.saturating_mul(2).max(FIRST_SWEEP)
        {
            records.states.retain(|_, s| !s.is_idle(now));
            records.swept_at = records.states.len();
        }
        let state = records.states.entry(key.clone()).or_default();
        let out = f(state);
        if state.is_idle(now) {
            records.states.remove(key);
        }
        out
    }

    /// Runs `f` on `key`'s record if it has one, and drops the record if `f` leaves nothing in
    /// it; `None` when there is no record.
    pub fn update_existing<R>(
        &self,
        key: &ObjectKey,
        f: impl FnOnce(&mut State) -> R,
    ) -> Option<R> {
        let mut records = crate::sync::lock(&self.inner);
        let state = records.states.get_mut(key)?;
        let out = f(state);
        if state.is_idle(Instant::now()) {
            records.states.remove(key);
        }
        Some(out)
    }

    /// Reads `key`'s record; `f` gets `None` when it has none.
    pub fn read<R>(&self, key: &ObjectKey, f: impl FnOnce(Option<&State>) -> R) -> R {
        f(crate::sync::lock(&self.inner).states.get(key))
    }

    /// Forgets `key`, which is gone.
    pub fn forget(&self, key: &ObjectKey) {
        crate::sync::lock(&self.inner).states.remove(key);
    }

    /// How many objects have a record, for tests of the bounds.
    pub fn len(&self) -> usize {
        crate::sync::lock(&self.inner).states.len()
    }

    /// Whether no object has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_record_lives_while_it_holds_something_and_goes_with_its_object() {
        let objects = Objects::default();
        let a = ObjectKey::uid("a");
        objects.update(&a, |s| s.failures += 1);
        assert_eq!(objects.len(), 1);
        objects.update_existing(&a, |s| s.failures = 0);
        assert!(
            objects.is_empty(),
            "nothing left to remember: the record goes"
        );
        assert_eq!(objects.update_existing(&a, |_| ()), None);
        objects.update(&a, |s| s.released = true);
        objects.forget(&a);
        assert!(objects.is_empty());
        objects.update(&a, |s| s.spin.check(Instant::now()));
        assert!(objects.is_empty(), "a look creates nothing");
    }

    /// Every object khai works on has a record while its writes are on their way and its spin
    /// window lasts, so a burst of new objects holds one per object: the record stays small,
    /// with what is rare (handler annotations, refusals) out of line.
    #[test]
    fn a_record_is_small() {
        assert!(
            std::mem::size_of::<State>() <= 176,
            "State is {} bytes",
            std::mem::size_of::<State>()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stale_records_are_swept_when_the_map_has_doubled() {
        let objects = Objects::default();
        objects.update(&ObjectKey::uid("held"), |s| s.finalized = true);
        for i in 1..FIRST_SWEEP {
            objects.update(&ObjectKey::uid(&i.to_string()), |s| {
                s.spin.record(Instant::now(), true)
            });
        }
        assert_eq!(objects.len(), FIRST_SWEEP);
        tokio::time::advance(spin::WINDOW * 2).await;
        objects.update(&ObjectKey::uid("new"), |s| {
            s.spin.record(Instant::now(), true)
        });
        assert_eq!(
            objects.len(),
            2,
            "the stale spin records swept; 'held' and 'new' kept"
        );
    }
}
