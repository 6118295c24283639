//! The decision rule of a canary rollout, without I/O: each revision's reconciles and failures
//! of the objects it owns since the rollout started, and when they promote the candidate or
//! roll it back.
//!
//! A revision's error rate is its failed reconciles (a retry that fails again counts again)
//! over its reconciles. The candidate's limit is `max_error_ratio` times the active revision's
//! rate, and never less than [`FLOOR`], so that an active revision that never fails (rate 0)
//! does not make a single failure of the candidate decide. The candidate is rolled back as soon
//! as it has made [`MIN_SAMPLE`] reconciles and its rate is above the limit; it is promoted
//! once `promote_after` has passed with its rate within the limit. A candidate above the limit
//! with fewer reconciles than the sample at the end of the window stays in the canary until
//! either happens.

use std::time::Duration;
use tokio::time::Instant;

/// The lowest error rate the candidate is held to: 5% of its reconciles.
pub(crate) const FLOOR: f64 = 0.05;

/// Reconciles the candidate makes before its rate can roll it back.
pub(crate) const MIN_SAMPLE: u64 = 20;

/// What the rollout does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The candidate reconciles every object from now on.
    Promote,
    /// The active revision takes back the candidate's share.
    RollBack,
}

/// Reconciles and failures of one revision.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub reconciles: u64,
    pub failed: u64,
}

impl Counts {
    /// Failed reconciles over reconciles; 0 without any.
    pub(crate) fn rate(self) -> f64 {
        if self.reconciles == 0 {
            return 0.0;
        }
        self.failed as f64 / self.reconciles as f64
    }
}

/// The counts of both revisions since the rollout started.
#[derive(Debug)]
pub(crate) struct Window {
    started: Instant,
    promote_after: Duration,
    max_error_ratio: f64,
    pub active: Counts,
    pub candidate: Counts,
}

impl Window {
    pub(crate) fn new(started: Instant, promote_after: Duration, max_error_ratio: f64) -> Self {
        Self {
            started,
            promote_after,
            max_error_ratio,
            active: Counts::default(),
            candidate: Counts::default(),
        }
    }

    /// The candidate's highest acceptable error rate now.
    pub(crate) fn limit(&self) -> f64 {
        (self.max_error_ratio * self.active.rate()).max(FLOOR)
    }

    /// Counts one reconcile; returns [`Decision::RollBack`] when it puts the candidate over
    /// its limit.
    pub(crate) fn record(&mut self, candidate: bool, failed: bool) -> Option<Decision> {
        let c = if candidate {
            &mut self.candidate
        } else {
            &mut self.active
        };
        c.reconciles += 1;
        c.failed += u64::from(failed);
        self.over_limit().then_some(Decision::RollBack)
    }

    fn over_limit(&self) -> bool {
        self.candidate.reconciles >= MIN_SAMPLE && self.candidate.rate() > self.limit()
    }

    /// What to do at `now`, if anything.
    pub(crate) fn decide(&self, now: Instant) -> Option<Decision> {
        if self.over_limit() {
            return Some(Decision::RollBack);
        }
        let ended = now.saturating_duration_since(self.started) >= self.promote_after;
        (ended && self.candidate.rate() <= self.limit()).then_some(Decision::Promote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(600);

    fn window() -> Window {
        Window::new(Instant::now(), WINDOW, 1.5)
    }

    fn run(w: &mut Window, candidate: bool, n: u64, failed: u64) -> Option<Decision> {
        let mut last = None;
        for i in 0..n {
            last = last.or(w.record(candidate, i < failed));
        }
        last
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_candidate_is_promoted_when_the_window_ends_and_not_before() {
        let mut w = window();
        assert_eq!(run(&mut w, false, 100, 0), None);
        assert_eq!(run(&mut w, true, 20, 0), None);
        tokio::time::advance(WINDOW - Duration::from_secs(1)).await;
        assert_eq!(w.decide(Instant::now()), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(w.decide(Instant::now()), Some(Decision::Promote));
    }

    #[tokio::test(start_paused = true)]
    async fn a_candidate_failing_30_percent_is_rolled_back_at_once_within_the_window() {
        let mut w = window();
        run(&mut w, false, 100, 0);
        // 3 failures in every 10 reconciles: the sample is reached on the twentieth.
        let mut decided = None;
        for i in 0..MIN_SAMPLE {
            decided = decided.or(w.record(true, i % 10 < 3));
            if i + 1 < MIN_SAMPLE {
                assert_eq!(decided, None, "not before the minimum sample ({i})");
            }
        }
        assert_eq!(decided, Some(Decision::RollBack));
        assert_eq!(w.decide(Instant::now()), Some(Decision::RollBack));
    }

    #[tokio::test(start_paused = true)]
    async fn one_early_failure_decides_nothing() {
        let mut w = window();
        assert_eq!(w.record(true, true), None);
        tokio::time::advance(WINDOW).await;
        assert_eq!(
            w.decide(Instant::now()),
            None,
            "over the limit but under the sample: the canary goes on"
        );
        assert_eq!(run(&mut w, true, 30, 0), None);
        assert_eq!(w.decide(Instant::now()), Some(Decision::Promote));
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_is_the_ratio_of_the_active_rate_with_a_floor() {
        let mut w = window();
        assert_eq!(w.limit(), FLOOR, "an active revision that never failed");
        run(&mut w, false, 10, 2);
        assert!((w.limit() - 0.3).abs() < 1e-9, "1.5 × 20%: {}", w.limit());
        // 25% is within 1.5 × the active's 20%.
        assert_eq!(run(&mut w, true, 20, 5), None);
        tokio::time::advance(WINDOW).await;
        assert_eq!(w.decide(Instant::now()), Some(Decision::Promote));
        // 40% is not.
        assert_eq!(run(&mut w, true, 20, 11), Some(Decision::RollBack));
    }
}
