//! How many of the Events scripts ask for khai records, per answer and per object per minute.
//!
//! Every Event is a write (a create, or a patch of its series). A script that returns thousands
//! in one answer (one per item of a list), or ten in every answer of an object that is
//! reconciled every second, would otherwise take the API server's attention from every other
//! object. Past either cap the rest are dropped and counted (`khai_events_dropped_total`); one
//! `EventsDropped` Warning per object per minute says so.
//!
//! Memory: one small entry per object that recorded an Event within the last minute; an
//! object's entry goes when the object does, and stale entries are swept as new ones come.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Events khai records from one answer.
pub(crate) const PER_ANSWER: usize = 10;
/// Events khai records about one object within [`WINDOW`], over all its answers.
pub(crate) const PER_WINDOW: usize = 30;
/// The window [`PER_WINDOW`] counts over.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Entries past which stale ones are swept before a new one is added.
const SWEEP_AT: usize = 1024;

/// Per-object Event counts of one controller.
#[derive(Default)]
pub(crate) struct EventBudget {
    objects: Mutex<HashMap<String, Window>>,
}

struct Window {
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

impl EventBudget {
    /// Takes what an answer of `key` asking for `asked` Events may record.
    pub(crate) fn take(&self, key: &str, asked: usize) -> Grant {
        if asked == 0 {
            return Grant {
                kept: 0,
                dropped: 0,
                say: false,
            };
        }
        let now = Instant::now();
        let mut objects = crate::sync::lock(&self.objects);
        if objects.len() >= SWEEP_AT && !objects.contains_key(key) {
            objects.retain(|_, w| now - w.started < WINDOW);
        }
        let w = objects.entry(key.to_string()).or_insert(Window {
            started: now,
            recorded: 0,
            said: false,
        });
        if now - w.started >= WINDOW {
            *w = Window {
                started: now,
                recorded: 0,
                said: false,
            };
        }
        let kept = asked.min(PER_ANSWER).min(PER_WINDOW - w.recorded);
        w.recorded += kept;
        let dropped = asked - kept;
        let say = dropped > 0 && !w.said;
        w.said |= say;
        Grant { kept, dropped, say }
    }

    /// Forgets `key`, which is gone.
    pub(crate) fn forget(&self, key: &str) {
        crate::sync::lock(&self.objects).remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        crate::sync::lock(&self.objects).len()
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
        let b = EventBudget::default();
        assert_eq!(b.take("a", 3), grant(3, 0, false));
        assert_eq!(b.take("a", 1000), grant(10, 990, true));
        assert_eq!(b.take("a", 12), grant(10, 2, false), "said once per window");
        assert_eq!(b.take("b", 12), grant(10, 2, true), "objects count apart");
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_records_at_most_its_share_per_minute_then_again_in_the_next() {
        let b = EventBudget::default();
        let kept: usize = (0..10).map(|_| b.take("a", 5).kept).sum();
        assert_eq!(
            kept, PER_WINDOW,
            "ten answers of five Events within a minute"
        );
        assert_eq!(
            b.take("a", 1),
            grant(0, 1, false),
            "the first drop already said"
        );
        tokio::time::advance(WINDOW).await;
        assert_eq!(b.take("a", 5), grant(5, 0, false), "a new window");
    }

    #[tokio::test(start_paused = true)]
    async fn entries_go_with_their_object_and_stale_ones_are_swept() {
        let b = EventBudget::default();
        assert_eq!(b.take("quiet", 0), grant(0, 0, false));
        assert_eq!(b.len(), 0, "an answer without Events keeps nothing");
        b.take("a", 1);
        b.forget("a");
        assert_eq!(b.len(), 0);
        for i in 0..SWEEP_AT {
            b.take(&i.to_string(), 1);
        }
        tokio::time::advance(WINDOW).await;
        b.take("new", 1);
        assert_eq!(b.len(), 1, "stale windows swept");
    }
}
