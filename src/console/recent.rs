//! A controller's numbers in the console, kept up to date as each turn is recorded so that
//! reading them costs the same for ten objects as for a hundred thousand: its turns and errors
//! per second over the last minute, the latencies of its last [`LATENCIES`] turns, and how many
//! of its objects are held, failing and paused for a hot loop.
//!
//! Lives as long as the controller is named by the running config; [`super::history`] owns it.

use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

/// Latencies kept per controller for its percentiles.
pub(crate) const LATENCIES: usize = 256;
/// How long after a hot-loop pause an object is shown as damped: khai's longest cooldown.
pub(super) const DAMPED_FOR_MS: u64 = 5 * 60 * 1000;
/// The window the rates are counted over, in seconds.
const WINDOW_SECS: u64 = 60;

/// A controller's numbers over its recent turns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Rates {
    pub(crate) reconciles_last_minute: u32,
    pub(crate) errors_last_minute: u32,
    /// Latency percentiles of the last [`LATENCIES`] turns, in milliseconds.
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p90_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
}

/// How many objects of a controller are held, and in which state (as
/// [`super::history::ObjectSummary::state`] names them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) objects: usize,
    /// Last turn failed, and not damped.
    pub(crate) backoff: usize,
    /// Paused for a hot loop within the last [`DAMPED_FOR_MS`].
    pub(crate) damped: usize,
}

/// One controller's recent turns and the states of its objects, each named by a `K`.
#[derive(Debug)]
pub(super) struct Recent<K> {
    /// `(second, turns, errors)`, one slot per second of the window.
    seconds: Vec<(u64, u32, u32)>,
    latencies: VecDeque<f64>,
    /// Objects held.
    objects: usize,
    /// Objects held whose last turn failed.
    failing: usize,
    /// Objects paused for a hot loop: when, and whether their last turn failed. At most one
    /// entry per object held; entries past [`DAMPED_FOR_MS`] go when the counts are read.
    hot: HashMap<Arc<K>, (u64, bool)>,
}

impl<K> Default for Recent<K> {
    fn default() -> Self {
        Self {
            seconds: Vec::new(),
            latencies: VecDeque::new(),
            objects: 0,
            failing: 0,
            hot: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> Recent<K> {
    /// A turn of `key` ended at `at_ms` after `took_ms`, failed or not, pausing it for a hot
    /// loop or not. `was` is whether the previous turn held of the object failed, `None` for an
    /// object not held until now.
    pub(super) fn add(
        &mut self,
        key: &Arc<K>,
        (at_ms, took_ms): (u64, f64),
        failed: bool,
        hot_loop: bool,
        was: Option<bool>,
    ) {
        if self.seconds.is_empty() {
            self.seconds = vec![(0, 0, 0); WINDOW_SECS as usize];
        }
        let second = at_ms / 1000;
        let slot = &mut self.seconds[(second % WINDOW_SECS) as usize];
        if slot.0 != second {
            *slot = (second, 0, 0);
        }
        slot.1 += 1;
        slot.2 += u32::from(failed);
        if self.latencies.len() == LATENCIES {
            self.latencies.pop_front();
        }
        self.latencies.push_back(took_ms);
        match was {
            None => self.objects += 1,
            Some(true) => self.failing -= 1,
            Some(false) => {}
        }
        self.failing += usize::from(failed);
        if hot_loop {
            self.hot.insert(Arc::clone(key), (at_ms, failed));
        } else if let Some(entry) = self.hot.get_mut(&**key) {
            entry.1 = failed;
        }
    }

    /// An object held is forgotten; its last turn failed or not.
    pub(super) fn forget(&mut self, key: &K, failed: bool) {
        self.objects -= 1;
        self.failing -= usize::from(failed);
        self.hot.remove(key);
    }

    /// How many objects are held, in backoff and damped at `now_ms`.
    pub(super) fn counts(&mut self, now_ms: u64) -> Counts {
        self.hot
            .retain(|_, (at, _)| now_ms.saturating_sub(*at) < DAMPED_FOR_MS);
        let damped_failing = self.hot.values().filter(|(_, failed)| *failed).count();
        Counts {
            objects: self.objects,
            backoff: self.failing - damped_failing,
            damped: self.hot.len(),
        }
    }

    /// Turns and errors within the minute before `now_ms`, and the latency percentiles.
    pub(super) fn rates(&self, now_ms: u64) -> Rates {
        let now = now_ms / 1000;
        let (turns, errors) = self
            .seconds
            .iter()
            .filter(|(s, _, _)| *s + WINDOW_SECS > now && *s <= now)
            .fold((0, 0), |(t, e), (_, st, se)| (t + st, e + se));
        let mut sorted: Vec<f64> = self.latencies.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        Rates {
            reconciles_last_minute: turns,
            errors_last_minute: errors,
            p50_ms: quantile(&sorted, 0.5),
            p90_ms: quantile(&sorted, 0.9),
            p99_ms: quantile(&sorted, 0.99),
        }
    }
}

/// The `q` quantile (0..=1) of `sorted`, by nearest rank.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((last as f64) * q).round() as usize;
    sorted.get(rank.min(last)).copied()
}

/// The rates of a controller with no turn held.
pub(super) fn none() -> Rates {
    Rates {
        reconciles_last_minute: 0,
        errors_last_minute: 0,
        p50_ms: None,
        p90_ms: None,
        p99_ms: None,
    }
}
