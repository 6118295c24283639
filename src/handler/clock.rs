//! Timers and daemons: functions run for each object on a clock.
//!
//! Both run in the object's turn, like its handlers and `reconcile`, so nothing else runs for
//! the object at the same time; the turn asks to be woken when the next one is due. A timer
//! (Kopf's `@kopf.timer`) calls `fn name(obj, ctx)` every `interval` (after the previous run
//! ended, or on a fixed schedule with `sharp`), optionally only once the object has been left
//! unchanged for `idle`. A daemon (Kopf's `@kopf.daemon`) is a per-object loop with state:
//! `fn tick(obj, ctx, state)` is called every `interval` and returns the next state, and
//! `fn stop(obj, ctx, state)` is called when the object goes, stops matching the daemon's
//! filters, or khai stops. Both may return `status` and `events`. A failed tick is retried
//! after the daemon's `backoff` with `ctx.retry` counting the failures in a row; `retries` in a
//! row, or `fail()`, end the daemon for the object.
//!
//! What the clock keeps (when each entry is due next, each daemon's state) is in memory, one
//! record per live object, forgotten when the object goes: a restart starts every timer and
//! daemon afresh, as in Kopf.

use super::{Handled, Turn, change, filter, progress, selects, take_result, warning};
use crate::config::handlers::{Daemon, Timer};
use crate::script::{Attempt, CallArg, Script, ScriptCtx, ScriptError};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// One `[[timer]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct TimerEntry {
    pub spec: Timer,
    pub script: Script,
}

/// One `[[daemon]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct DaemonEntry {
    pub spec: Daemon,
    pub script: Script,
}

/// The timers and daemons of one kind, and when each is due for each object.
pub(crate) struct Clock {
    timers: Vec<TimerEntry>,
    daemons: Vec<DaemonEntry>,
    /// Prefix of khai's own annotations, left out of the change an `idle` timer waits on.
    bookkeeping: String,
    objects: Mutex<HashMap<String, Times>>,
}

/// What the clock keeps for one object.
struct Times {
    /// The object's essence when last seen, and when it last changed.
    essence: String,
    changed_at: Instant,
    /// When each timer is due next; `None` until the object first matches it.
    timers: Vec<Option<Instant>>,
    daemons: Vec<Option<Running>>,
}

/// A daemon running for one object.
#[derive(Clone)]
struct Running {
    next: Instant,
    state: Value,
    /// The object as the daemon last saw it (what `stop` is called with).
    obj: Arc<DynamicObject>,
    /// When it started (`ctx.started` of its ticks).
    started: jiff::Timestamp,
    /// Failed ticks in a row (`ctx.retry` of the next tick).
    failures: u32,
    /// Given up on (out of retries, or `fail()`): not ticked again while it matches.
    ended: bool,
}

/// A daemon to stop: its entry, the object it ran for and its last state.
pub(crate) struct Stopping {
    daemon: usize,
    state: Value,
    pub obj: Arc<DynamicObject>,
}

/// What to run in one turn.
enum Due {
    Timer(usize),
    Tick(usize),
    Stop(usize),
}

impl Clock {
    pub(crate) fn new(operator: &str, timers: Vec<TimerEntry>, daemons: Vec<DaemonEntry>) -> Self {
        Self {
            timers,
            daemons,
            bookkeeping: progress::Keys::new(operator).prefix,
            objects: Mutex::default(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.timers.is_empty() && self.daemons.is_empty()
    }

    /// Runs the timers and daemon ticks due for the turn's object, and the `stop` of daemons it
    /// no longer matches. Returns how long until the next one is due.
    pub(crate) async fn run(&self, turn: &Turn<'_>, handled: &mut Handled) -> Option<Duration> {
        if self.is_empty() {
            return None;
        }
        let uid = turn.obj.uid().unwrap_or_default();
        let leaving = turn.obj.metadata.deletion_timestamp.is_some();
        let mut matches = Vec::with_capacity(self.timers.len() + self.daemons.len());
        for t in &self.timers {
            matches.push(!leaving && self.matches(&t.script, &t.spec.filters(), turn).await);
        }
        for d in &self.daemons {
            matches.push(!leaving && self.matches(&d.script, &d.spec.filters(), turn).await);
        }
        let due = self.due(&uid, turn, &matches);
        for d in due {
            match d {
                Due::Timer(i) => self.timer(i, turn, handled).await,
                Due::Tick(i) => self.tick(i, &uid, turn, handled).await,
                Due::Stop(i) => {
                    let state = self.take_daemon(&uid, i);
                    if let Some(r) = state {
                        self.stop(
                            Stopping {
                                daemon: i,
                                state: r.state,
                                obj: r.obj,
                            },
                            turn.ctx.clone(),
                        )
                        .await;
                    }
                }
            }
        }
        self.next_due(&uid)
    }

    async fn matches(
        &self,
        script: &Script,
        filters: &crate::config::handlers::Filters<'_>,
        turn: &Turn<'_>,
    ) -> bool {
        filter::metadata_passes(filters, &turn.view)
            && selects(script, filters.when, turn, &turn.obj.name_any()).await
    }

    /// Updates what is kept for the object and says what is due now.
    fn due(&self, uid: &str, turn: &Turn<'_>, matches: &[bool]) -> Vec<Due> {
        let now = Instant::now();
        let essence = progress::digest(&change::essence(&turn.view, &self.bookkeeping));
        let mut objects = crate::sync::lock(&self.objects);
        let t = objects.entry(uid.to_string()).or_insert_with(|| Times {
            essence: essence.clone(),
            changed_at: now,
            timers: vec![None; self.timers.len()],
            daemons: vec![None; self.daemons.len()],
        });
        if t.essence != essence {
            t.essence = essence;
            t.changed_at = now;
        }
        let mut due = Vec::new();
        for (i, timer) in self.timers.iter().enumerate() {
            if !matches[i] {
                t.timers[i] = None;
                continue;
            }
            let spec = &timer.spec;
            let first = now + spec.initial_delay.map_or(Duration::ZERO, |d| d.get());
            let mut at = *t.timers[i].get_or_insert(first);
            if let Some(idle) = spec.idle {
                at = at.max(t.changed_at + idle.get());
            }
            if at <= now {
                due.push(Due::Timer(i));
                let interval = spec.interval.get();
                // Sharp timers keep their schedule (skipping the runs missed); the others count
                // from the end of this run, set when it ends.
                t.timers[i] = Some(if spec.sharp {
                    let mut next = at + interval;
                    while next <= now {
                        next += interval;
                    }
                    next
                } else {
                    now + interval
                });
            }
        }
        for (j, daemon) in self.daemons.iter().enumerate() {
            let i = self.timers.len() + j;
            match (&mut t.daemons[j], matches[i]) {
                (None, true) => {
                    let delay = daemon
                        .spec
                        .initial_delay
                        .map_or(Duration::ZERO, |d| d.get());
                    t.daemons[j] = Some(Running {
                        next: now + delay,
                        state: Value::Null,
                        obj: Arc::new(turn.obj.clone()),
                        started: jiff::Timestamp::now(),
                        failures: 0,
                        ended: false,
                    });
                    if delay.is_zero() {
                        due.push(Due::Tick(j));
                    }
                }
                (Some(r), true) => {
                    r.obj = Arc::new(turn.obj.clone());
                    if r.next <= now && !r.ended {
                        due.push(Due::Tick(j));
                    }
                }
                (Some(_), false) => due.push(Due::Stop(j)),
                (None, false) => {}
            }
        }
        due
    }

    /// When the next timer or daemon tick of the object is due, from now.
    fn next_due(&self, uid: &str) -> Option<Duration> {
        let objects = crate::sync::lock(&self.objects);
        let t = objects.get(uid)?;
        let mut next: Option<Instant> = None;
        for (i, at) in t.timers.iter().enumerate() {
            let Some(mut at) = *at else { continue };
            if let Some(idle) = self.timers[i].spec.idle {
                at = at.max(t.changed_at + idle.get());
            }
            next = Some(next.map_or(at, |n| n.min(at)));
        }
        for r in t.daemons.iter().flatten().filter(|r| !r.ended) {
            next = Some(next.map_or(r.next, |n| n.min(r.next)));
        }
        next.map(|n| n.saturating_duration_since(Instant::now()))
    }

    async fn timer(&self, i: usize, turn: &Turn<'_>, handled: &mut Handled) {
        let entry = &self.timers[i];
        let args = vec![
            CallArg::Json(turn.view.clone()),
            CallArg::Ctx(super::budgeted(&turn.ctx, entry.spec.budget)),
        ];
        let result = entry
            .script
            .call_args_async(&entry.spec.function, args)
            .await
            .map_err(|e| e.to_string())
            .and_then(|out| take_result(out, handled).map_err(|e| e.to_string()));
        if !entry.spec.sharp {
            let uid = turn.obj.uid().unwrap_or_default();
            if let Some(t) = crate::sync::lock(&self.objects).get_mut(&uid) {
                t.timers[i] = Some(Instant::now() + entry.spec.interval.get());
            }
        }
        match result {
            Ok(()) => tracing::debug!(timer = %entry.spec.function, "timer ran"),
            Err(e) => {
                tracing::warn!(timer = %entry.spec.function, error = %e, "timer failed; it runs again at its next interval");
                let message = format!("{}: {e}", entry.spec.function);
                handled.events.push(warning("TimerFailed", &message));
            }
        }
    }

    async fn tick(&self, j: usize, uid: &str, turn: &Turn<'_>, handled: &mut Handled) {
        let entry = &self.daemons[j];
        let Some((state, attempt)) = crate::sync::lock(&self.objects).get(uid).and_then(|t| {
            let r = t.daemons[j].as_ref()?;
            let runtime = jiff::Timestamp::now().duration_since(r.started);
            let attempt = Attempt {
                retry: r.failures,
                started: r.started.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                runtime: runtime.as_secs_f64(),
            };
            Some((r.state.clone(), attempt))
        }) else {
            return;
        };
        let mut ctx = turn.ctx.clone();
        ctx.attempt = Some(attempt);
        let args = vec![
            CallArg::Json(turn.view.clone()),
            CallArg::Ctx(super::budgeted(&ctx, entry.spec.budget)),
            CallArg::Json(state),
        ];
        let result = entry
            .script
            .call_args_async(&entry.spec.tick, args)
            .await
            .map_err(TickFailure::from)
            .and_then(|out| {
                daemon_result(out, handled).map_err(|e| TickFailure::Again(e.to_string()))
            });
        let mut objects = crate::sync::lock(&self.objects);
        let Some(r) = objects.get_mut(uid).and_then(|t| t.daemons[j].as_mut()) else {
            return;
        };
        let now = Instant::now();
        r.next = now + entry.spec.interval.get();
        let failure = match result {
            Ok(state) => {
                if let Some(state) = state {
                    r.state = state;
                }
                r.failures = 0;
                return;
            }
            Err(f) => f,
        };
        r.failures += 1;
        let spec = &entry.spec;
        let out_of_retries = spec.retries.is_some_and(|n| r.failures > n);
        let (message, delay) = match failure {
            TickFailure::Final(m) => (m, None),
            f if out_of_retries => (format!("{} (gave up: out of retries)", f.message()), None),
            TickFailure::After(m, d) => (m, Some(d)),
            TickFailure::Again(m) => (m, Some(spec.backoff.unwrap_or(spec.interval).get())),
        };
        let text = format!("{}: {message}", spec.tick);
        match delay {
            Some(d) => {
                r.next = now + d;
                tracing::warn!(daemon = %spec.tick, failures = r.failures, retry_in = ?d, error = %message, "daemon tick failed; backing off");
                handled.events.push(warning("DaemonRetrying", &text));
            }
            None => {
                r.ended = true;
                tracing::warn!(daemon = %spec.tick, failures = r.failures, error = %message, "daemon tick failed for good; the daemon ends for this object");
                handled.events.push(warning("DaemonFailed", &text));
            }
        }
    }

    fn take_daemon(&self, uid: &str, j: usize) -> Option<Running> {
        crate::sync::lock(&self.objects)
            .get_mut(uid)
            .and_then(|t| t.daemons[j].take())
    }

    /// Forgets the object with `uid`, which is gone; returns its daemons to stop.
    pub(crate) fn forget(&self, uid: &str) -> Vec<Stopping> {
        let Some(t) = crate::sync::lock(&self.objects).remove(uid) else {
            return Vec::new();
        };
        running(t)
    }

    /// Forgets every object (khai is stopping); returns every running daemon to stop.
    pub(crate) fn drain(&self) -> Vec<Stopping> {
        let all = std::mem::take(&mut *crate::sync::lock(&self.objects));
        all.into_values().flat_map(running).collect()
    }

    /// Calls a daemon's `stop(obj, ctx, state)`, if it has one, within its grace period.
    pub(crate) async fn stop(&self, s: Stopping, ctx: ScriptCtx) {
        let entry = &self.daemons[s.daemon];
        let Some(stop) = &entry.spec.stop else {
            return;
        };
        let Ok(view) = crate::script::object_view(&s.obj) else {
            return;
        };
        let args = vec![
            CallArg::Json(view),
            CallArg::Ctx(super::budgeted(&ctx, entry.spec.budget)),
            CallArg::Json(s.state),
        ];
        let call = entry.script.call_args_async(stop, args);
        match tokio::time::timeout(entry.spec.grace.get(), call).await {
            Ok(Ok(_)) => {
                tracing::info!(daemon = %entry.spec.tick, object = %s.obj.name_any(), "daemon stopped")
            }
            Ok(Err(e)) => {
                tracing::warn!(daemon = %entry.spec.tick, object = %s.obj.name_any(), error = %e, "daemon stop failed")
            }
            Err(_) => {
                tracing::warn!(daemon = %entry.spec.tick, object = %s.obj.name_any(), grace = ?entry.spec.grace.get(), "daemon stop did not finish within its grace period")
            }
        }
    }
}

/// Why a tick failed, as for handlers: tried again after the backoff, after the delay the
/// script gave `retry()`, or (`fail()`) not again.
enum TickFailure {
    Again(String),
    After(String, Duration),
    Final(String),
}

impl From<ScriptError> for TickFailure {
    fn from(e: ScriptError) -> Self {
        match e {
            ScriptError::Fail { message, .. } => TickFailure::Final(message),
            ScriptError::Retry { message, delay, .. } => TickFailure::After(message, delay.get()),
            e => TickFailure::Again(e.to_string()),
        }
    }
}

impl TickFailure {
    fn message(&self) -> &str {
        match self {
            TickFailure::Again(m) | TickFailure::After(m, _) | TickFailure::Final(m) => m,
        }
    }
}

fn running(t: Times) -> Vec<Stopping> {
    t.daemons
        .into_iter()
        .enumerate()
        .filter_map(|(daemon, r)| {
            r.map(|r| Stopping {
                daemon,
                state: r.state,
                obj: r.obj,
            })
        })
        .collect()
}

/// A tick's answer: nothing, or `#{ state, status, events }`; returns the new state if given.
pub(crate) fn daemon_result(
    out: Value,
    handled: &mut Handled,
) -> Result<Option<Value>, super::answer::AnswerError> {
    let Value::Object(mut map) = out else {
        return take_result(out, handled).map(|()| None);
    };
    let state = map.remove("state");
    take_result(Value::Object(map), handled)?;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tick_returns_its_next_state_beside_status_and_events() {
        let mut h = Handled::default();
        let state = daemon_result(json!({ "state": { "n": 2 }, "status": { "n": 2 } }), &mut h);
        assert_eq!(state, Ok(Some(json!({ "n": 2 }))));
        assert_eq!(h.status.unwrap()["n"], 2);
        assert_eq!(
            daemon_result(Value::Null, &mut Handled::default()),
            Ok(None)
        );
        assert!(daemon_result(json!({ "nope": 1 }), &mut Handled::default()).is_err());
    }
}
