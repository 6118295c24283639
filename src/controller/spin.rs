//! Slows down objects whose reconciles keep writing.
//!
//! A script that changes something its own write re-triggers (a label it bumps on its own child,
//! a timestamp in a child's data) makes a loop: write → watch event → reconcile → write. Left
//! alone it runs as fast as the API server answers (issue 17 measured 200 reconciles and 200
//! writes a second from one object). [`Spin`] counts, per object, the reconciles that wrote;
//! past [`LIMIT`] within [`WINDOW`] the object cools down: its reconciles skip the script and
//! every write until the cooldown ends, the cooldown doubling (up to [`MAX_COOLDOWN`]) while the
//! loop goes on. A Warning Event and `khai_hot_loops_total` say so once per cooldown.
//!
//! Memory: one small entry per object that wrote within the window or is cooling down; an
//! object's entry goes when the object does, and stale entries are swept as new ones come.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Writing reconciles of one object allowed within [`WINDOW`].
pub(crate) const LIMIT: usize = 10;
/// The window [`LIMIT`] counts over.
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// The first cooldown; each further one while the loop goes on doubles it.
pub(crate) const FIRST_COOLDOWN: Duration = Duration::from_secs(5);
/// The longest cooldown.
pub(crate) const MAX_COOLDOWN: Duration = Duration::from_secs(300);

/// Per-object write history of one controller.
#[derive(Default)]
pub(crate) struct Spin {
    objects: Mutex<HashMap<String, History>>,
}

#[derive(Default)]
struct History {
    /// When the recent writing reconciles ended (at most [`LIMIT`]).
    writes: VecDeque<Instant>,
    cooling_until: Option<Instant>,
    /// Cooldowns in a row, for the doubling.
    strikes: u32,
}

/// What to do with a reconcile about to start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Go,
    /// Skip it; try again after this long.
    CoolDown(Duration),
}

/// What recording a finished reconcile found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    Fine,
    /// This reconcile tipped the object into a cooldown of this length.
    Hot {
        writes: usize,
        cooldown: Duration,
    },
}

impl Spin {
    /// Whether `key`'s reconcile may run now.
    pub(crate) fn check(&self, key: &str) -> Verdict {
        let now = Instant::now();
        let objects = crate::sync::lock(&self.objects);
        match objects.get(key).and_then(|h| h.cooling_until) {
            Some(until) if until > now => Verdict::CoolDown(until - now),
            _ => Verdict::Go,
        }
    }

    /// Records that a reconcile of `key` finished, having written (`wrote`) or not.
    pub(crate) fn record(&self, key: &str, wrote: bool) -> Recorded {
        let now = Instant::now();
        let mut objects = crate::sync::lock(&self.objects);
        if !wrote && !objects.contains_key(key) {
            return Recorded::Fine;
        }
        if objects.len() >= SWEEP_AT && !objects.contains_key(key) {
            objects.retain(|_, h| !h.is_stale(now));
        }
        let h = objects.entry(key.to_string()).or_default();
        while h.writes.front().is_some_and(|t| now - *t > WINDOW) {
            h.writes.pop_front();
        }
        if !wrote {
            if h.writes.is_empty() && h.cooling_until.is_none_or(|u| u <= now) {
                objects.remove(key);
            }
            return Recorded::Fine;
        }
        h.writes.push_back(now);
        if h.writes.len() <= LIMIT {
            return Recorded::Fine;
        }
        // Calm since the last cooldown ended: start over from the first length.
        if h.cooling_until.is_some_and(|u| now - u > MAX_COOLDOWN) {
            h.strikes = 0;
        }
        let cooldown = FIRST_COOLDOWN
            .saturating_mul(2u32.saturating_pow(h.strikes.min(16)))
            .min(MAX_COOLDOWN);
        h.strikes = h.strikes.saturating_add(1);
        h.cooling_until = Some(now + cooldown);
        let writes = h.writes.len();
        h.writes.clear();
        Recorded::Hot { writes, cooldown }
    }

    /// Forgets `key`, which is gone.
    pub(crate) fn forget(&self, key: &str) {
        crate::sync::lock(&self.objects).remove(key);
    }

    /// How many objects have an entry.
    #[cfg(test)]
    fn len(&self) -> usize {
        crate::sync::lock(&self.objects).len()
    }
}

/// Entries at which stale ones are swept before a new one is added.
const SWEEP_AT: usize = 1024;

impl History {
    fn is_stale(&self, now: Instant) -> bool {
        let cooled = self.cooling_until.is_none_or(|u| now - u > MAX_COOLDOWN);
        cooled && self.writes.back().is_none_or(|t| now - *t > WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_object_that_keeps_writing_cools_down_longer_each_time_and_others_do_not() {
        let spin = Spin::default();
        for _ in 0..LIMIT {
            assert_eq!(spin.record("hot", true), Recorded::Fine);
            assert_eq!(spin.record("calm", false), Recorded::Fine);
        }
        assert_eq!(
            spin.record("hot", true),
            Recorded::Hot {
                writes: LIMIT + 1,
                cooldown: FIRST_COOLDOWN
            }
        );
        assert_eq!(spin.check("hot"), Verdict::CoolDown(FIRST_COOLDOWN));
        assert_eq!(spin.check("calm"), Verdict::Go);
        tokio::time::advance(FIRST_COOLDOWN).await;
        assert_eq!(spin.check("hot"), Verdict::Go);
        // Still looping: twice as long.
        for _ in 0..LIMIT {
            spin.record("hot", true);
        }
        assert_eq!(
            spin.record("hot", true),
            Recorded::Hot {
                writes: LIMIT + 1,
                cooldown: FIRST_COOLDOWN * 2
            }
        );
        spin.forget("hot");
        assert_eq!(spin.check("hot"), Verdict::Go);
        assert_eq!(spin.len(), 0, "nothing kept for calm or forgotten objects");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_spread_over_more_than_the_window_are_not_a_loop() {
        let spin = Spin::default();
        for _ in 0..LIMIT * 5 {
            assert_eq!(spin.record("steady", true), Recorded::Fine);
            tokio::time::advance(WINDOW / LIMIT as u32 + Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stale_entries_are_swept_so_the_map_stays_bounded() {
        let spin = Spin::default();
        for i in 0..SWEEP_AT {
            spin.record(&format!("o{i}"), true);
        }
        tokio::time::advance(WINDOW * 2).await;
        spin.record("new", true);
        assert_eq!(spin.len(), 1);
    }
}
