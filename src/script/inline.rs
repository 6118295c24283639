//! Running short script calls right on the async worker thread.
//!
//! Handing every call to tokio's blocking pool costs two thread hand-offs, measured at 30–60 µs
//! (`cargo bench --bench engine`: `reconcile::plan` through the pool against the same call made
//! directly), which is more than a typical reconcile or webhook script takes to run. So a call
//! first runs inline with a small operation budget ([`INLINE_OPS`], well under a millisecond)
//! and a time budget ([`INLINE_TIME`]), since a few operations on large values (upper-casing a
//! 1 MiB string) can take as long as thousands of small ones.
//! Scripts are pure functions of their inputs (no I/O; `ctx` lookups read caches), so a call
//! that runs out of that budget is abandoned and run again from the start on the blocking pool,
//! where only the configured limits apply. What it printed or logged meanwhile (`print`, `debug`,
//! `log_*`) is held back and dropped, so nothing is logged twice; a call that finishes inline has
//! its output logged in order.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Operations a call may run on the worker thread before it moves to the blocking pool.
pub(super) const INLINE_OPS: u64 = 10_000;

/// Time a call may run on the worker thread before it moves to the blocking pool.
pub(super) const INLINE_TIME: Duration = Duration::from_millis(1);

/// The clock is read every this many operations, or sooner once the call has allocated
/// [`CLOCK_AFTER_BYTES`] since the last reading (work on large values allocates): reading it on
/// every operation would cost more than most operations.
const CLOCK_EVERY: u64 = 16;
const CLOCK_AFTER_BYTES: usize = 64 << 10;

/// Output held back during an inline attempt.
enum Held {
    /// `log_debug`, `log_info`, `log_warn`, `log_error`.
    Log(tracing::Level, String),
    Print(String),
    Debug {
        text: String,
        source: Option<String>,
        line: Option<usize>,
    },
}

#[derive(Default)]
struct Attempt {
    over_budget: bool,
    held: Vec<Held>,
    started: Option<Instant>,
    /// [`super::memory::allocated`] when the clock was last read.
    allocated: usize,
}

thread_local! {
    static ATTEMPT: RefCell<Option<Attempt>> = const { RefCell::new(None) };
}

/// Runs `f` as an inline attempt. `None` when it ran out of budget (its result is meaningless
/// and its output dropped) or panicked: the caller runs it again on the blocking pool.
pub(super) fn attempt<T>(f: impl FnOnce() -> T) -> Option<T> {
    ATTEMPT.with(|a| *a.borrow_mut() = Some(Attempt::start()));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let done = ATTEMPT.with(|a| a.borrow_mut().take()).unwrap_or_default();
    match result {
        Ok(value) if !done.over_budget => {
            done.held.into_iter().for_each(emit);
            Some(value)
        }
        _ => None,
    }
}

/// Whether the running call is an inline attempt that just used up its operation or time
/// budget; the engine's progress hook stops the call when it is.
pub(super) fn over_budget(ops: u64) -> bool {
    ATTEMPT.with(|a| {
        a.borrow_mut().as_mut().is_some_and(|a| {
            a.over_budget = a.over_budget || ops > INLINE_OPS || a.out_of_time(ops);
            a.over_budget
        })
    })
}

impl Attempt {
    fn start() -> Self {
        Attempt {
            started: Some(Instant::now()),
            allocated: super::memory::allocated(),
            ..Attempt::default()
        }
    }

    fn out_of_time(&mut self, ops: u64) -> bool {
        let allocated = super::memory::allocated();
        if !ops.is_multiple_of(CLOCK_EVERY)
            && allocated.wrapping_sub(self.allocated) < CLOCK_AFTER_BYTES
        {
            return false;
        }
        self.allocated = allocated;
        self.started.is_some_and(|t| t.elapsed() > INLINE_TIME)
    }
}

/// Whether the call running on this thread is an inline attempt.
pub(super) fn active() -> bool {
    ATTEMPT.with(|a| a.borrow().is_some())
}

/// Ends the running inline attempt, if the call is one, because it was about to make a side
/// effect (see `crate::effects`): it must run again from the start on the blocking pool before
/// anything leaves the process. Returns whether it was an inline attempt.
pub(super) fn leave() -> bool {
    ATTEMPT.with(|a| {
        a.borrow_mut().as_mut().is_some_and(|a| {
            a.over_budget = true;
            true
        })
    })
}

/// Whether the call that just ended on this thread was stopped for its inline budget (so its
/// error is not the script's and must not be reported).
pub(super) fn stopped() -> bool {
    ATTEMPT.with(|a| a.borrow().as_ref().is_some_and(|a| a.over_budget))
}

/// `log_debug`/`log_info`/`log_warn`/`log_error` from a script: held during an inline attempt,
/// logged otherwise.
pub(super) fn log(level: tracing::Level, text: &str) {
    hold_or_emit(Held::Log(level, text.to_string()));
}

/// `print` from a script: held during an inline attempt, logged otherwise.
pub(super) fn print(text: &str) {
    hold_or_emit(Held::Print(text.to_string()));
}

/// `debug` from a script: held during an inline attempt, logged otherwise.
pub(super) fn debug(text: &str, source: Option<&str>, line: Option<usize>) {
    hold_or_emit(Held::Debug {
        text: text.to_string(),
        source: source.map(str::to_string),
        line,
    });
}

fn hold_or_emit(h: Held) {
    let h = ATTEMPT.with(|a| match a.borrow_mut().as_mut() {
        Some(attempt) => {
            attempt.held.push(h);
            None
        }
        None => Some(h),
    });
    if let Some(h) = h {
        emit(h);
    }
}

fn emit(h: Held) {
    use tracing::Level;
    match h {
        Held::Log(level, s) => match level {
            Level::ERROR => tracing::error!(target: "khai::script", "{s}"),
            Level::WARN => tracing::warn!(target: "khai::script", "{s}"),
            Level::INFO => tracing::info!(target: "khai::script", "{s}"),
            _ => tracing::debug!(target: "khai::script", "{s}"),
        },
        Held::Print(s) => tracing::info!(target: "khai::script", "{s}"),
        Held::Debug { text, source, line } => {
            tracing::debug!(target: "khai::script", source, line, "{text}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_within_budget_returns_and_over_budget_gives_up() {
        // (Not a multiple of the clock's period: a busy machine cannot make it run out of time.)
        assert_eq!(attempt(|| over_budget(INLINE_OPS - 1)), Some(false));
        assert_eq!(attempt(|| over_budget(INLINE_OPS + 1)), None);
        // Outside an attempt there is no budget.
        assert!(!over_budget(u64::MAX));
        assert!(!stopped());
    }

    #[test]
    fn a_panicking_attempt_is_handed_back_not_propagated() {
        assert_eq!(attempt(|| -> u8 { panic!("boom") }), None);
        assert!(!stopped(), "the attempt's state is cleared");
    }
}
