//! Slows down objects whose reconciles keep writing.
//!
//! A script that changes something its own write re-triggers (a label it bumps on its own child,
//! a timestamp in a child's data) makes a loop: write → watch event → reconcile → write. Left
//! alone it runs as fast as the API server answers, hundreds of reconciles and writes a second
//! from one object. [`History`] counts the reconciles of one object that wrote; past [`LIMIT`]
//! within [`WINDOW`] the object cools down: its reconciles skip the script and every write
//! until the cooldown ends, the cooldown doubling (up to [`MAX_COOLDOWN`]) while the loop goes
//! on. A Warning Event and `khai_hot_loops_total` say so once per cooldown.
//!
//! Memory: a few instants per object that wrote within the window or is cooling down, in its
//! record ([`super::State`]).

use std::collections::VecDeque;
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

/// The recent writing reconciles of one object, and its cooldown.
#[derive(Default, Debug)]
pub(crate) struct History {
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

impl History {
    /// Whether the object's reconcile may run at `now`.
    pub(crate) fn check(&self, now: Instant) -> Verdict {
        match self.cooling_until {
            Some(until) if until > now => Verdict::CoolDown(until - now),
            _ => Verdict::Go,
        }
    }

    /// Records that a reconcile finished at `now`, having written (`wrote`) or not.
    pub(crate) fn record(&mut self, now: Instant, wrote: bool) -> Recorded {
        while self.writes.front().is_some_and(|t| now - *t > WINDOW) {
            self.writes.pop_front();
        }
        if !wrote {
            return Recorded::Fine;
        }
        self.writes.push_back(now);
        if self.writes.len() <= LIMIT {
            return Recorded::Fine;
        }
        // Calm since the last cooldown ended: start over from the first length.
        if self.cooling_until.is_some_and(|u| now - u > MAX_COOLDOWN) {
            self.strikes = 0;
        }
        let cooldown = FIRST_COOLDOWN
            .saturating_mul(2u32.saturating_pow(self.strikes.min(16)))
            .min(MAX_COOLDOWN);
        self.strikes = self.strikes.saturating_add(1);
        self.cooling_until = Some(now + cooldown);
        let writes = self.writes.len();
        self.writes.clear();
        Recorded::Hot { writes, cooldown }
    }

    /// Whether there is nothing left to remember at `now`: no write within the window, and no
    /// cooldown that a loop going on would double.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        let cooled = self.cooling_until.is_none_or(|u| now - u > MAX_COOLDOWN);
        cooled && self.writes.back().is_none_or(|t| now - *t > WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_object_that_keeps_writing_cools_down_longer_each_time_and_others_do_not() {
        let (mut hot, mut calm) = (History::default(), History::default());
        let now = Instant::now;
        for _ in 0..LIMIT {
            assert_eq!(hot.record(now(), true), Recorded::Fine);
            assert_eq!(calm.record(now(), false), Recorded::Fine);
        }
        assert_eq!(
            hot.record(now(), true),
            Recorded::Hot {
                writes: LIMIT + 1,
                cooldown: FIRST_COOLDOWN
            }
        );
        assert_eq!(hot.check(now()), Verdict::CoolDown(FIRST_COOLDOWN));
        assert_eq!(calm.check(now()), Verdict::Go);
        assert!(calm.is_idle(now()), "a calm object keeps nothing");
        tokio::time::advance(FIRST_COOLDOWN).await;
        assert_eq!(hot.check(now()), Verdict::Go);
        // Still looping: twice as long.
        for _ in 0..LIMIT {
            hot.record(now(), true);
        }
        assert_eq!(
            hot.record(now(), true),
            Recorded::Hot {
                writes: LIMIT + 1,
                cooldown: FIRST_COOLDOWN * 2
            }
        );
        assert!(!hot.is_idle(now()));
        tokio::time::advance(FIRST_COOLDOWN * 2 + MAX_COOLDOWN + WINDOW).await;
        assert!(hot.is_idle(now()), "long calm: nothing left to remember");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_spread_over_more_than_the_window_are_not_a_loop() {
        let mut steady = History::default();
        for _ in 0..LIMIT * 5 {
            assert_eq!(steady.record(Instant::now(), true), Recorded::Fine);
            tokio::time::advance(WINDOW / LIMIT as u32 + Duration::from_millis(10)).await;
        }
    }
}
