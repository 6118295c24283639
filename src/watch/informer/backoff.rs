//! How long a failed watch waits before it tries again.

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

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
