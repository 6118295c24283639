//! How long a failed watch waits before it tries again, and what it logs meanwhile.
//!
//! kube-runtime's watcher emits `Event::Init` before every list, including the lists that then
//! fail, and its `StreamBackoff` starts over on any `Ok` item: a list that kept failing (a 400
//! for a bad selector, a 403) was retried every 0.8-0.96 s and, since the `Init` looked like the
//! watch resuming, warned every time. [`paced`] starts the backoff over only on an event that
//! shows the API server answered, and [`Failing`] keeps a streak of failures across `Init`.

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::Event;

/// How long a failed watch waits before it tries again: 800 ms (client-go's first step), doubling
/// up to [`WatchBackoff::CAP`], each step plus up to 20 % jitter so replicas do not retry in
/// step; back to 800 ms after any event.
///
/// The cap bounds how long khai stays blind after the API server is back: a watch retries at
/// most [`WatchBackoff::CAP`] (+20 %) after the server returns. client-go's reflectors (and
/// kube-runtime's default) cap at 30 s with up to 100 % jitter, to spare an API server that
/// thousands of kubelets and controllers hammer; an operator has a handful of informers, so
/// retrying each every 5 s while the server is away costs it a few requests a second at most,
/// which buys resuming within seconds instead of up to a minute.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff {
    next: std::time::Duration,
}

impl WatchBackoff {
    /// The first wait.
    pub(crate) const FIRST: std::time::Duration = std::time::Duration::from_millis(800);
    /// The longest wait, before jitter.
    pub(crate) const CAP: std::time::Duration = std::time::Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        use std::hash::BuildHasher;
        let step = self.next;
        self.next = (step * 2).min(Self::CAP);
        // Up to 20 % more, from std's randomly keyed hasher (no RNG crate for one number).
        let random = std::collections::hash_map::RandomState::new().hash_one(step);
        #[allow(clippy::cast_precision_loss)]
        let jitter = (random % 1000) as f64 / 5000.0;
        Some(step.mul_f64(1.0 + jitter))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// `events` (a watcher's stream) with a wait of the next step of `backoff` after each error,
/// before the stream is polled again (which retries the list or watch). The backoff starts over
/// on any event but `Init`: the watcher emits `Init` before it lists, so it says nothing about
/// whether the API server answers.
pub(crate) fn paced<K, E>(
    events: impl Stream<Item = Result<Event<K>, E>> + Send + 'static,
    backoff: WatchBackoff,
) -> impl Stream<Item = Result<Event<K>, E>> + Send
where
    K: Send + 'static,
    E: Send + 'static,
{
    let start = (events.boxed(), backoff, None);
    futures::stream::unfold(start, |(mut events, mut backoff, wait)| async move {
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
        let item = events.next().await?;
        let wait = match &item {
            Err(_) => backoff.next(),
            Ok(Event::Init) => None,
            Ok(_) => {
                backoff.reset();
                None
            }
        };
        Some((item, (events, backoff, wait)))
    })
}

/// A streak of failures of one watch: from the first failure until an event other than `Init`
/// (which the watcher emits before every list, failing or not) shows the watch is back.
#[derive(Debug, Default)]
pub(crate) struct Failing(Option<Streak>);

/// An ongoing streak of failures.
#[derive(Debug)]
pub(crate) struct Streak {
    /// When the first failure came.
    pub(crate) since: tokio::time::Instant,
    /// Failures so far.
    pub(crate) count: u32,
    /// The latest error, as logged.
    error: String,
}

impl Failing {
    /// Records a failure with `error`; true when it should be logged at `warn` (the first of
    /// the streak, or another error than the one before), false when it repeats (`debug`).
    pub(crate) fn failed(&mut self, error: String) -> bool {
        match &mut self.0 {
            Some(s) if s.error == error => {
                s.count = s.count.saturating_add(1);
                false
            }
            Some(s) => {
                s.count = s.count.saturating_add(1);
                s.error = error;
                true
            }
            None => {
                self.0 = Some(Streak {
                    since: tokio::time::Instant::now(),
                    count: 1,
                    error,
                });
                true
            }
        }
    }

    /// Records `event`; the streak it ended, if it shows the watch is back.
    pub(crate) fn seen<K>(&mut self, event: &Event<K>) -> Option<Streak> {
        if matches!(event, Event::Init) {
            return None;
        }
        self.0.take()
    }

    /// Failures in the current streak.
    pub(crate) fn count(&self) -> u32 {
        self.0.as_ref().map_or(0, |s| s.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a watcher yields while its list keeps failing: `Init`, then the error, forever.
    fn failing_list() -> impl Stream<Item = Result<Event<String>, String>> + Send + 'static {
        let mut n = 0_u32;
        futures::stream::repeat_with(move || {
            n += 1;
            if n % 2 == 1 {
                Ok(Event::Init)
            } else {
                Err("400 Bad Request: unable to parse requirement".to_string())
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_list_backs_off_to_5s_and_warns_once() {
        use std::time::Duration;
        let start = tokio::time::Instant::now();
        let mut events = std::pin::pin!(paced(failing_list(), WatchBackoff::default()));
        let mut failing = Failing::default();
        let (mut errors, mut warnings) = (Vec::new(), 0);
        while start.elapsed() < Duration::from_secs(60) {
            match events.next().await.unwrap() {
                Ok(event) => assert!(failing.seen(&event).is_none(), "Init is no resumption"),
                Err(e) => {
                    errors.push(start.elapsed());
                    warnings += usize::from(failing.failed(e));
                }
            }
        }
        assert_eq!(warnings, 1, "the same error again is logged at debug");
        assert_eq!(failing.count() as usize, errors.len());
        let gaps: Vec<Duration> = errors.windows(2).map(|w| w[1] - w[0]).collect();
        let base = [800, 1600, 3200, 5000, 5000];
        for (gap, ms) in gaps.iter().zip(base) {
            let ms = Duration::from_millis(ms);
            assert!(
                *gap >= ms && *gap <= ms.mul_f64(1.2),
                "retried after {gap:?}, not 20 % or less above {ms:?}: {gaps:?}"
            );
        }
        assert!(
            gaps[3..].iter().all(|g| *g >= Duration::from_secs(5)),
            "{gaps:?}"
        );
        // 0.8 + 1.6 + 3.2 s, then every 5-6 s: 12 to 14 lists in a minute, not 67.
        assert!((12..=14).contains(&errors.len()), "{errors:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_list_starts_the_backoff_over() {
        use std::time::Duration;
        let items: Vec<Result<Event<String>, String>> = vec![
            Err("a".into()),
            Err("a".into()),
            Err("a".into()),
            Ok(Event::Init),
            Ok(Event::InitDone),
            Err("b".into()),
            Err("b".into()),
        ];
        let mut events =
            std::pin::pin!(paced(futures::stream::iter(items), WatchBackoff::default()));
        let mut failing = Failing::default();
        let mut at = Vec::new();
        let mut resumed = Vec::new();
        while let Some(item) = events.next().await {
            at.push(tokio::time::Instant::now());
            match item {
                Ok(event) => resumed.extend(failing.seen(&event).map(|s| s.count)),
                Err(e) => {
                    failing.failed(e);
                }
            }
        }
        assert_eq!(resumed, [3], "InitDone ends the streak of three failures");
        let after_answer = at[6] - at[5];
        assert!(
            after_answer < Duration::from_millis(961),
            "the backoff started over after the list was answered: {after_answer:?}"
        );
    }

    #[test]
    fn a_failing_watch_waits_800ms_doubling_to_5s_with_at_most_20_percent_jitter() {
        use kube::runtime::utils::Backoff;
        use std::time::Duration;
        let mut b = WatchBackoff::default();
        let steps: Vec<Duration> = (0..8).map(|_| b.next().unwrap()).collect();
        let base = [800, 1600, 3200, 5000, 5000, 5000, 5000, 5000];
        for (got, ms) in steps.iter().zip(base) {
            let ms = Duration::from_millis(ms);
            assert!(
                *got >= ms && *got <= ms.mul_f64(1.2),
                "step {got:?} is not within 20 % above {ms:?}: {steps:?}"
            );
        }
        b.reset();
        assert!(
            b.next().unwrap() < Duration::from_millis(961),
            "reset starts over"
        );
    }
}
