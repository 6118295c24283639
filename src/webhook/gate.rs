//! How many reviews of one sort run at once, and how many may wait for their turn.
//!
//! A review takes its turn before its body is read, so a review that waits holds only its
//! connection, and the memory reviews take is bounded by the number running times the body
//! limit. Beyond the waiting limit a review is refused at once (HTTP 503) rather than queued
//! without end; the API server then applies the webhook's `failure_policy`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reviews of one sort: at most `running` at once, at most `waiting` in line.
#[derive(Debug)]
pub(crate) struct Gate {
    turns: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// A review's turn; the next review in line starts when it is dropped.
pub(crate) type Turn = OwnedSemaphorePermit;

/// The line is full: the review is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

impl Gate {
    pub(crate) fn new(running: usize, waiting: usize) -> Self {
        Self {
            turns: Arc::new(Semaphore::new(running.max(1))),
            waiting: AtomicUsize::new(0),
            max_waiting: waiting,
        }
    }

    /// Waits for a turn, or fails at once when `max_waiting` reviews already wait.
    pub(crate) async fn enter(&self) -> Result<Turn, Full> {
        if let Ok(turn) = self.turns.clone().try_acquire_owned() {
            return Ok(turn);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Full);
        }
        // Counted out again however the wait ends, including the request being dropped.
        let _in_line = InLine(&self.waiting);
        // The semaphore is never closed, so acquiring only fails if it were.
        self.turns.clone().acquire_owned().await.map_err(|_| Full)
    }
}

struct InLine<'a>(&'a AtomicUsize);

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn beyond_the_running_limit_reviews_wait_and_beyond_the_line_they_are_refused() {
        let gate = Arc::new(Gate::new(1, 1));
        let first = gate.enter().await.unwrap();
        let g = gate.clone();
        let second = tokio::spawn(async move { g.enter().await.map(drop) });
        // Wait until the second review stands in line.
        while gate.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(matches!(gate.enter().now_or_never(), Some(Err(Full))));
        drop(first);
        assert_eq!(second.await.unwrap(), Ok(()));
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_review_dropped_while_waiting_leaves_the_line() {
        let gate = Gate::new(1, 1);
        let _running = gate.enter().await.unwrap();
        assert!(gate.enter().now_or_never().is_none(), "it waits");
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
    }
}
