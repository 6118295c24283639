//! The wake interval of `khai run --wake-interval`: a runtime thread that wakes within the
//! interval of its last wake-up sleeps out the rest of it first, so whatever arrives meanwhile
//! (watch events, responses, admission reviews) is handled in one wake-up rather than one each.
//!
//! A process fed slowly, as each of several shards is, otherwise pays a wake-up, its system
//! calls and cold caches for nearly every event (docs/scaling.md, "Wake-ups"). The first event
//! after a quiet spell is handled at once; a thread that always has work never parks and never
//! waits. The wait is tokio's `on_thread_unpark` hook: the thread has already left its parked
//! state, so tasks other threads wake meanwhile are queued for it and run right after.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The wake interval of every runtime this process builds (`khai run --wake-interval`); unset
/// or zero lets a thread start work whenever it wakes. Set once, at startup.
static WAKE_INTERVAL: OnceLock<Duration> = OnceLock::new();

thread_local! {
    /// When this thread last started work after waking.
    static LAST_WAKE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Sets the wake interval of every runtime built after it (see [`paced`]).
pub(crate) fn set_wake_interval(interval: Duration) {
    // A second call (an embedder's) keeps the first interval: runtimes already run with it.
    let _ = WAKE_INTERVAL.set(interval);
}

/// `builder`, with its threads paced by the wake interval, if one is set.
pub(crate) fn paced(builder: &mut tokio::runtime::Builder) -> &mut tokio::runtime::Builder {
    paced_by(builder, WAKE_INTERVAL.get().copied())
}

/// [`paced`] with the interval given.
fn paced_by(
    builder: &mut tokio::runtime::Builder,
    interval: Option<Duration>,
) -> &mut tokio::runtime::Builder {
    match interval {
        Some(interval) if !interval.is_zero() => builder.on_thread_unpark(move || {
            LAST_WAKE.with(|last| last.set(Some(woken(last.get(), interval))))
        }),
        _ => builder,
    }
}

/// Called as a thread wakes: sleeps until `interval` after the `last` wake-up, if that is still
/// to come, and returns when this wake-up starts work.
fn woken(last: Option<Instant>, interval: Duration) -> Instant {
    let now = Instant::now();
    match last.map(|last| last + interval) {
        Some(due) if due > now => {
            std::thread::sleep(due - now);
            Instant::now()
        }
        _ => now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_wake_up_and_one_after_the_interval_start_at_once() {
        let interval = Duration::from_secs(3600);
        let started = Instant::now();
        woken(None, interval);
        woken(Instant::now().checked_sub(interval * 2), interval);
        assert!(started.elapsed() < interval);
    }

    #[test]
    fn a_wake_up_within_the_interval_waits_out_the_rest_of_it() {
        let interval = Duration::from_millis(50);
        let last = Instant::now();
        let started = woken(Some(last), interval);
        assert!(
            started >= last + interval,
            "started {:?} after the last",
            started - last
        );
    }

    #[test]
    fn a_paced_runtime_runs_what_another_thread_wakes_during_the_wait_at_once() {
        let interval = Duration::from_millis(20);
        let rt = paced_by(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all(),
            Some(interval),
        )
        .build()
        .unwrap();
        // Each round trip through another thread parks the worker and wakes it within the
        // interval of its last wake-up. A wake-up lost during the wait would leave the task
        // until the worker's next timer, the 10 s deadline below.
        let started = Instant::now();
        let trips = rt.block_on(async {
            let trips = tokio::spawn(async move {
                for _ in 0..20 {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(2));
                        tx.send(()).unwrap();
                    });
                    rx.await.unwrap();
                }
            });
            tokio::time::timeout(Duration::from_secs(10), trips).await
        });
        trips.expect("every round trip done within 10 s").unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "20 round trips took {:?}",
            started.elapsed()
        );
    }
}
