//! The console's bounded record of reconciles ("turns"): the last [`TURNS_PER_OBJECT`] of each
//! object, and per controller its [`Recent`] numbers, kept as turns are recorded so the overview
//! reads them without going through the objects.
//!
//! Nothing here grows with the cluster beyond a cap: when the turns held reach `max_bytes` (an
//! estimate of what they hold in memory, exported as `khai_console_history_bytes`), the object
//! whose last turn is oldest is forgotten first. Controllers are only kept while the running
//! config names them. The record lives as long as the process; it is not persisted.

use super::recent::{self, Counts, DAMPED_FOR_MS, Rates, Recent};
use super::trigger::{Named, Trigger, Triggers};
use crate::metrics::Tally;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Turns kept per object; older ones are dropped first.
pub(crate) const TURNS_PER_OBJECT: usize = 20;
/// The default cap on the bytes the whole record holds.
pub(crate) const MAX_BYTES: usize = 8 << 20;
/// The longest error text kept for one turn, in characters.
const MAX_ERROR_CHARS: usize = 2048;

/// One reconcile of one object, as it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Turn {
    /// When it ended, in milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
    pub(crate) took_ms: f64,
    /// What caused it: `start`/`reload`, `parent`, `child`, `watched`, `resync`, `requeue`,
    /// `timer`, `backoff`.
    pub(crate) triggers: Named,
    /// `success`, `requeue` (asked to run again later) or `error`.
    pub(crate) result: &'static str,
    /// The error as khai reported it on the object (script errors start with file:line).
    pub(crate) error: Option<String>,
    #[serde(flatten)]
    pub(crate) writes: Tally,
}

/// Which object of which controller.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub(crate) struct ObjectKey {
    pub(crate) controller: String,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

#[derive(Debug)]
struct Object {
    /// The key it is held under, shared with [`Inner::order`].
    key: Arc<ObjectKey>,
    uid: String,
    phase: Option<String>,
    turns: VecDeque<Turn>,
    bytes: usize,
    /// Position in [`Inner::order`].
    touched: u64,
    hot_loop_at: Option<u64>,
}

#[derive(Debug, Default)]
struct Inner {
    objects: HashMap<Arc<ObjectKey>, Object>,
    /// Objects by when their last turn was recorded, oldest first: the eviction order.
    order: BTreeMap<u64, Arc<ObjectKey>>,
    clock: u64,
    bytes: usize,
    controllers: BTreeMap<String, Recent<ObjectKey>>,
}

/// The record; one per console.
#[derive(Debug)]
pub(crate) struct History {
    inner: Mutex<Inner>,
    max_bytes: usize,
}

/// What the console shows of one object in its controller's list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ObjectSummary {
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
    pub(crate) uid: String,
    /// `status.phase` as the last turn found it.
    pub(crate) phase: Option<String>,
    /// `ok`, `backoff` (the last turn failed; retried with backoff) or `damped` (paused for a
    /// hot loop within the last five minutes).
    pub(crate) state: &'static str,
    pub(crate) last: Turn,
    pub(crate) turns: usize,
}

/// One object with every turn held, newest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ObjectTurns {
    #[serde(flatten)]
    pub(crate) summary: ObjectSummary,
    pub(crate) history: Vec<Turn>,
}

impl History {
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// Records a turn of `key`; returns the bytes the record holds now.
    pub(crate) fn record(
        &self,
        key: impl Into<Arc<ObjectKey>>,
        uid: &str,
        phase: Option<&str>,
        mut turn: Turn,
    ) -> usize {
        if let Some(e) = &mut turn.error
            && e.chars().count() > MAX_ERROR_CHARS
        {
            *e = e.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…";
        }
        let key = key.into();
        let failed = turn.result == "error";
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.clock += 1;
        let clock = inner.clock;
        let object = match inner.objects.get_mut(&*key) {
            Some(object) => object,
            None => inner
                .objects
                .entry(Arc::clone(&key))
                .or_insert_with(|| Object {
                    key: Arc::clone(&key),
                    uid: String::new(),
                    phase: None,
                    turns: VecDeque::with_capacity(TURNS_PER_OBJECT),
                    bytes: 0,
                    touched: 0,
                    hot_loop_at: None,
                }),
        };
        let was = object.turns.back().map(|t| t.result == "error");
        let recent = match inner.controllers.get_mut(&key.controller) {
            Some(recent) => recent,
            None => inner.controllers.entry(key.controller.clone()).or_default(),
        };
        recent.add(
            &object.key,
            (turn.at_ms, turn.took_ms),
            failed,
            turn.writes.hot_loop,
            was,
        );
        inner.order.remove(&object.touched);
        object.touched = clock;
        inner.order.insert(clock, Arc::clone(&object.key));
        if turn.writes.hot_loop {
            object.hot_loop_at = Some(turn.at_ms);
        }
        if object.uid != uid {
            uid.clone_into(&mut object.uid);
        }
        if object.phase.as_deref() != phase {
            object.phase = phase.map(str::to_string);
        }
        if object.turns.len() == TURNS_PER_OBJECT {
            object.turns.pop_front();
        }
        object.turns.push_back(turn);
        let bytes = object_bytes(&key, object);
        inner.bytes = inner.bytes - object.bytes + bytes;
        object.bytes = bytes;
        // The object just recorded is the newest, so it goes last, and only if it alone is
        // over the cap.
        while inner.bytes > self.max_bytes {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            if let Some(gone) = inner.objects.remove(&oldest) {
                inner.bytes -= gone.bytes;
                let failed = gone.turns.back().is_some_and(|t| t.result == "error");
                if let Some(recent) = inner.controllers.get_mut(&oldest.controller) {
                    recent.forget(&oldest, failed);
                }
            }
        }
        inner.bytes
    }

    /// What kube-runtime scheduled the next turn of `key` for, read from how its last turn
    /// ended: a failure is retried with backoff, a requeue is the wake it asked for.
    pub(crate) fn scheduled(&self, key: &ObjectKey) -> Triggers {
        let inner = self.lock();
        let Some(last) = inner.objects.get(key).and_then(|o| o.turns.back()) else {
            return Triggers::default();
        };
        match last.result {
            "error" => Trigger::Backoff.into(),
            "requeue" if last.writes.clock_wake => Trigger::Timer.into(),
            "requeue" => Trigger::Requeue.into(),
            _ => Triggers::default(),
        }
    }

    /// Forgets the controllers the running config no longer names, with their objects.
    pub(crate) fn keep_controllers(&self, names: &BTreeSet<String>) -> usize {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.controllers.retain(|name, _| names.contains(name));
        let gone: Vec<Arc<ObjectKey>> = inner
            .objects
            .keys()
            .filter(|k| !names.contains(&k.controller))
            .cloned()
            .collect();
        for key in gone {
            if let Some(object) = inner.objects.remove(&key) {
                inner.order.remove(&object.touched);
                inner.bytes -= object.bytes;
            }
        }
        inner.bytes
    }

    /// Every object of `controller` held, by namespace and name.
    pub(crate) fn objects(&self, controller: &str, now_ms: u64) -> Vec<ObjectSummary> {
        let inner = self.lock();
        let mut out: Vec<ObjectSummary> = inner
            .objects
            .iter()
            .filter(|(k, _)| k.controller == controller)
            .filter_map(|(k, o)| summary(k, o, now_ms))
            .collect();
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// One object with its turns, newest first.
    pub(crate) fn object(&self, key: &ObjectKey, now_ms: u64) -> Option<ObjectTurns> {
        let inner = self.lock();
        let object = inner.objects.get(key)?;
        Some(ObjectTurns {
            summary: summary(key, object, now_ms)?,
            history: object.turns.iter().rev().cloned().collect(),
        })
    }

    /// `controller`'s rates and latencies over its recent turns.
    pub(crate) fn rates(&self, controller: &str, now_ms: u64) -> Rates {
        self.lock()
            .controllers
            .get(controller)
            .map_or_else(recent::none, |r| r.rates(now_ms))
    }

    /// How many objects of `controller` are held, and how many of them are in backoff or
    /// damped at `now_ms`, without going through them.
    pub(crate) fn counts(&self, controller: &str, now_ms: u64) -> Counts {
        self.lock()
            .controllers
            .get_mut(controller)
            .map_or_else(Counts::default, |r| r.counts(now_ms))
    }
}

fn summary(key: &ObjectKey, object: &Object, now_ms: u64) -> Option<ObjectSummary> {
    let last = object.turns.back()?.clone();
    let damped = object
        .hot_loop_at
        .is_some_and(|at| now_ms.saturating_sub(at) < DAMPED_FOR_MS);
    let state = if damped {
        "damped"
    } else if last.result == "error" {
        "backoff"
    } else {
        "ok"
    };
    Some(ObjectSummary {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: object.uid.clone(),
        phase: object.phase.clone(),
        state,
        last,
        turns: object.turns.len(),
    })
}

/// What an object's entry holds in memory, roughly: its fixed parts, its strings and its turns.
fn object_bytes(key: &ObjectKey, object: &Object) -> usize {
    let turns: usize = object
        .turns
        .iter()
        .map(|t| size_of::<Turn>() + t.error.as_ref().map_or(0, String::len))
        .sum();
    size_of::<Object>()
        + 2 * size_of::<ObjectKey>()
        + key.controller.len()
        + key.namespace.as_ref().map_or(0, String::len)
        + key.name.len()
        + object.uid.len()
        + object.phase.as_ref().map_or(0, String::len)
        + turns
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            controller: "cache".into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn turn(at_ms: u64, error: Option<&str>) -> Turn {
        Turn {
            at_ms,
            took_ms: 3.0,
            triggers: Named::default(),
            result: if error.is_some() { "error" } else { "success" },
            error: error.map(str::to_string),
            writes: Tally::default(),
        }
    }

    #[test]
    fn an_object_keeps_only_its_last_turns_newest_first() {
        let h = History::new(MAX_BYTES);
        for i in 0..(TURNS_PER_OBJECT as u64 + 5) {
            h.record(key("a"), "u1", None, turn(i, None));
        }
        let a = h.object(&key("a"), 100).unwrap();
        assert_eq!(a.history.len(), TURNS_PER_OBJECT);
        assert_eq!(a.history[0].at_ms, TURNS_PER_OBJECT as u64 + 4);
        assert_eq!(a.summary.turns, TURNS_PER_OBJECT);
    }

    #[test]
    fn past_the_byte_cap_the_object_touched_longest_ago_is_forgotten() {
        let one = {
            let h = History::new(MAX_BYTES);
            h.record(key("a"), "u", None, turn(1, Some("boom")))
        };
        let h = History::new(one * 2 + one / 2);
        h.record(key("a"), "u", None, turn(1, Some("boom")));
        h.record(key("b"), "u", None, turn(2, Some("boom")));
        // "a" is touched again, so "b" is now the oldest.
        h.record(key("a"), "u", None, turn(3, None));
        let held = h.record(key("c"), "u", None, turn(4, Some("boom")));
        assert!(held <= one * 2 + one / 2, "{held} bytes held");
        assert!(h.object(&key("b"), 5).is_none(), "b should be gone");
        assert!(h.object(&key("a"), 5).is_some());
        assert!(h.object(&key("c"), 5).is_some());
    }

    #[test]
    fn a_failed_turn_is_backoff_and_a_hot_loop_is_damped_for_five_minutes() {
        let h = History::new(MAX_BYTES);
        h.record(
            key("a"),
            "u",
            Some("Ready"),
            turn(1_000, Some("x.rhai:3: nope")),
        );
        let mut paused = turn(2_000, None);
        paused.writes.hot_loop = true;
        h.record(key("b"), "u", None, paused);
        let objects = h.objects("cache", 3_000);
        assert_eq!(objects[0].state, "backoff");
        assert_eq!(objects[0].last.error.as_deref(), Some("x.rhai:3: nope"));
        assert_eq!(objects[0].phase.as_deref(), Some("Ready"));
        assert_eq!(objects[1].state, "damped");
        assert_eq!(h.objects("cache", 2_000 + DAMPED_FOR_MS)[1].state, "ok");
    }

    #[test]
    fn rates_count_the_last_minute_and_percentiles_the_latencies_held() {
        let h = History::new(MAX_BYTES);
        for i in 0..10u64 {
            let mut t = turn(100_000 + i * 1000, (i % 5 == 0).then_some("e"));
            t.took_ms = (i + 1) as f64;
            h.record(key("a"), "u", None, t);
        }
        let r = h.rates("cache", 110_000);
        assert_eq!((r.reconciles_last_minute, r.errors_last_minute), (10, 2));
        assert_eq!(r.p50_ms, Some(6.0));
        assert_eq!(r.p99_ms, Some(10.0));
        assert_eq!(h.rates("cache", 200_000).reconciles_last_minute, 0);
    }

    #[test]
    fn a_turn_kube_runtime_scheduled_is_a_backoff_after_an_error_and_a_timer_or_requeue_after_a_wake()
     {
        let h = History::new(MAX_BYTES);
        assert!(h.scheduled(&key("a")).is_empty());
        h.record(key("a"), "u", None, turn(1, Some("boom")));
        assert_eq!(h.scheduled(&key("a")), Trigger::Backoff.into());
        let mut woke = turn(2, None);
        woke.result = "requeue";
        h.record(key("a"), "u", None, woke.clone());
        assert_eq!(h.scheduled(&key("a")), Trigger::Requeue.into());
        woke.writes.clock_wake = true;
        h.record(key("a"), "u", None, woke);
        assert_eq!(h.scheduled(&key("a")), Trigger::Timer.into());
        h.record(key("a"), "u", None, turn(3, None));
        assert!(h.scheduled(&key("a")).is_empty());
    }

    #[test]
    fn counts_kept_per_turn_match_the_objects_held_through_failures_hot_loops_and_eviction() {
        let scanned = |h: &History, now| {
            let objects = h.objects("cache", now);
            let count = |state| objects.iter().filter(|o| o.state == state).count();
            Counts {
                objects: objects.len(),
                backoff: count("backoff"),
                damped: count("damped"),
            }
        };
        let one = {
            let h = History::new(MAX_BYTES);
            h.record(key("x"), "u", None, turn(1, Some("boom")))
        };
        let h = History::new(one * 4);
        let mut hot = turn(1_000, Some("boom"));
        hot.writes.hot_loop = true;
        let steps = [
            ("a", turn(1_000, Some("boom"))),
            ("b", turn(1_000, None)),
            ("c", hot),
            ("a", turn(2_000, None)),
            ("c", turn(3_000, None)),
            ("b", turn(4_000, Some("boom"))),
            ("d", turn(5_000, Some("boom"))),
            ("e", turn(6_000, Some("boom"))),
            ("f", turn(7_000, None)),
        ];
        for (name, t) in steps {
            h.record(key(name), "u", None, t);
            assert_eq!(h.counts("cache", 8_000), scanned(&h, 8_000), "after {name}");
        }
        let later = 1_000 + DAMPED_FOR_MS;
        assert_eq!(h.counts("cache", later), scanned(&h, later));
        assert!(h.object(&key("a"), 9_000).is_none(), "a should be evicted");
        assert_eq!(h.counts("other", 9_000), Counts::default());
    }

    #[test]
    fn controllers_the_config_dropped_are_forgotten_with_their_objects() {
        let h = History::new(MAX_BYTES);
        h.record(key("a"), "u", None, turn(1, None));
        let held = h.keep_controllers(&BTreeSet::from(["other".to_string()]));
        assert_eq!(held, 0);
        assert!(h.objects("cache", 2).is_empty());
    }
}
