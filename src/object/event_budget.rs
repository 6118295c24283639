//! How many of the Events scripts ask for khai records, per answer and per object per minute.
//!
//! Every Event is a write (a create, or a patch of its series). A script that returns thousands
//! in one answer (one per item of a list), or ten in every answer of an object that is
//! reconciled every second, would otherwise take the API server's attention from every other
//! object. Past either cap the rest are dropped and counted (`khai_events_dropped_total`); one
//! `EventsDropped` Warning per object per minute says so.
//!
//! Memory: one small window per object that recorded an Event within the last minute, in its
//! record ([`super::State`]).

use std::time::Duration;
use tokio::time::Instant;

/// Events khai records from one answer.
pub(crate) const PER_ANSWER: usize = 10;
/// Events khai records about one object within [`WINDOW`], over all its answers.
pub(crate) const PER_WINDOW: usize = 30;
/// The window [`PER_WINDOW`] counts over.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The Events one object recorded in the current window.
#[derive(Debug)]
pub(crate) struct Window {
    started: Instant,
    recorded: usize,
    /// Whether this window's `EventsDropped` Warning was granted already.
    said: bool,
}

/// What one answer may record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// How many of the answer's Events, from the first.
    pub kept: usize,
    /// How many are dropped.
    pub dropped: usize,
    /// Whether to say so with an `EventsDropped` Warning (the first drop of the window).
    pub say: bool,
}

impl Window {
    /// Takes what an answer asking for `asked` Events at `now` may record, from the object's
    /// window (`None` when it has none yet).
    pub(crate) fn take(window: &mut Option<Window>, now: Instant, asked: usize) -> Grant {
        if asked == 0 {
            return Grant {
                kept: 0,
                dropped: 0,
                say: false,
            };
        }
        let w = match window {
            Some(w) if now - w.started < WINDOW => w,
            _ => window.insert(Window {
                started: now,
                recorded: 0,
                said: false,
            }),
        };
        let kept = asked.min(PER_ANSWER).min(PER_WINDOW - w.recorded);
        w.recorded += kept;
        let dropped = asked - kept;
        let say = dropped > 0 && !w.said;
        w.said |= say;
        Grant { kept, dropped, say }
    }

    /// Whether the window is over at `now`, and so need not be kept.
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        now - self.started >= WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(kept: usize, dropped: usize, say: bool) -> Grant {
        Grant { kept, dropped, say }
    }

    #[tokio::test(start_paused = true)]
    async fn one_answer_records_at_most_its_share_and_says_so_once() {
        let (mut a, mut b) = (None, None);
        let now = Instant::now();
        assert_eq!(Window::take(&mut a, now, 3), grant(3, 0, false));
        assert_eq!(Window::take(&mut a, now, 1000), grant(10, 990, true));
        assert_eq!(
            Window::take(&mut a, now, 12),
            grant(10, 2, false),
            "said once per window"
        );
        assert_eq!(
            Window::take(&mut b, now, 12),
            grant(10, 2, true),
            "objects count apart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_records_at_most_its_share_per_minute_then_again_in_the_next() {
        let mut a = None;
        let kept: usize = (0..10)
            .map(|_| Window::take(&mut a, Instant::now(), 5).kept)
            .sum();
        assert_eq!(
            kept, PER_WINDOW,
            "ten answers of five Events within a minute"
        );
        assert_eq!(
            Window::take(&mut a, Instant::now(), 1),
            grant(0, 1, false),
            "the first drop already said"
        );
        tokio::time::advance(WINDOW).await;
        assert!(a.as_ref().is_some_and(|w| w.is_over(Instant::now())));
        assert_eq!(
            Window::take(&mut a, Instant::now(), 5),
            grant(5, 0, false),
            "a new window"
        );
    }

    #[test]
    fn an_answer_without_events_keeps_nothing() {
        let mut quiet = None;
        let now = Instant::now();
        assert_eq!(Window::take(&mut quiet, now, 0), grant(0, 0, false));
        assert!(quiet.is_none());
    }
}
