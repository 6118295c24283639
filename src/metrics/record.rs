//! The small functions every other module records through (a reconcile finished, a child was
//! applied, a watch restarted, leadership changed); none of them touches the registry itself.

use super::{HEALTH, METRICS, RESULTS};
use prometheus::IntCounterVec;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Declares a controller: its series start at 0, as controller-runtime's do, so rates work from
/// the first scrape.
pub(crate) fn controller_started(controller: &str, concurrency: u16) {
    let m = &*METRICS;
    for result in RESULTS {
        m.reconcile_total.with_label_values(&[controller, result]);
    }
    for c in [
        &m.reconcile_errors,
        &m.children_applied,
        &m.children_unchanged,
        &m.children_pruned,
        &m.status_writes,
        &m.controller_failures,
        &m.reconcile_overlaps,
        &m.hot_loops,
        &m.echo_skips,
    ] {
        c.with_label_values(&[controller]);
    }
    m.queue_adds.with_label_values(&[controller, controller]);
    m.queue_retries.with_label_values(&[controller, controller]);
    m.queue_depth.with_label_values(&[controller, controller]);
    m.queue_duration
        .with_label_values(&[controller, controller]);
    m.work_duration.with_label_values(&[controller, controller]);
    m.active_workers.with_label_values(&[controller]);
    m.max_concurrent
        .with_label_values(&[controller])
        .set(i64::from(concurrency));
}

/// Counts one busy worker of `controller` until dropped.
pub(crate) struct Worker(prometheus::IntGauge);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A reconcile of `controller` started; hold the guard until it ends.
pub(crate) fn reconcile_started(controller: &str) -> Worker {
    let g = METRICS.active_workers.with_label_values(&[controller]);
    g.inc();
    Worker(g)
}

/// A reconcile of `controller` ended with `result` (one of [`RESULTS`]) after `took`.
pub(crate) fn reconcile_finished(controller: &str, result: &str, took: Duration) {
    let m = &*METRICS;
    m.reconcile_total
        .with_label_values(&[controller, result])
        .inc();
    m.reconcile_time
        .with_label_values(&[controller])
        .observe(took.as_secs_f64());
    m.work_duration
        .with_label_values(&[controller, controller])
        .observe(took.as_secs_f64());
    if result == "error" {
        m.reconcile_errors.with_label_values(&[controller]).inc();
    }
}

/// Triggers asked `controller` to reconcile `n` objects.
pub(crate) fn queue_add(controller: &str, n: usize) {
    METRICS
        .queue_adds
        .with_label_values(&[controller, controller])
        .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
}

/// `depth` objects of `controller` wait for a reconcile; the one that just started (if any)
/// waited `waited`.
pub(crate) fn queue_state(controller: &str, depth: usize, waited: Option<Duration>) {
    let m = &*METRICS;
    m.queue_depth
        .with_label_values(&[controller, controller])
        .set(i64::try_from(depth).unwrap_or(i64::MAX));
    if let Some(w) = waited {
        m.queue_duration
            .with_label_values(&[controller, controller])
            .observe(w.as_secs_f64());
    }
}

/// A failed reconcile of `controller` was scheduled again.
pub(crate) fn queue_retry(controller: &str) {
    METRICS
        .queue_retries
        .with_label_values(&[controller, controller])
        .inc();
}

/// What applying one plan did.
pub(crate) fn applied(
    controller: &str,
    applied: usize,
    unchanged: usize,
    pruned: usize,
    status: bool,
) {
    let m = &*METRICS;
    let add = |c: &IntCounterVec, n: usize| {
        c.with_label_values(&[controller])
            .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
    };
    add(&m.children_applied, applied);
    add(&m.children_unchanged, unchanged);
    add(&m.children_pruned, pruned);
    add(&m.status_writes, usize::from(status));
    super::tally::add(|t| {
        t.applied += applied;
        t.unchanged += unchanged;
        t.pruned += pruned;
        t.status_written |= status;
    });
}

/// A status write outside a plan (the failure condition).
pub(crate) fn status_written(controller: &str) {
    METRICS.status_writes.with_label_values(&[controller]).inc();
    super::tally::add(|t| t.status_written = true);
}

/// One script call of `function` in `script` took `took`; `error` names the kind of error it
/// ended in, if any.
pub(crate) fn script_call(script: &str, function: &str, took: Duration, error: Option<&str>) {
    let m = &*METRICS;
    m.script_duration
        .with_label_values(&[script, function])
        .observe(took.as_secs_f64());
    if let Some(kind) = error {
        m.script_errors
            .with_label_values(&[script, function, kind])
            .inc();
    }
}

/// A script's `k8s::<verb>` call on `kind` answered `code` (0: no answer) after `took`.
pub(crate) fn script_api_call(verb: &str, kind: &str, code: u16, took: Duration) {
    let m = &*METRICS;
    m.script_api_calls
        .with_label_values(&[verb, kind, &code.to_string()])
        .inc();
    m.script_api_duration
        .with_label_values(&[verb])
        .observe(took.as_secs_f64());
}

/// A script call was stopped by `limit`.
pub(crate) fn script_limit_abort(script: &str, function: &str, limit: &str) {
    METRICS
        .script_limit_aborts
        .with_label_values(&[script, function, limit])
        .inc();
}

/// A watch of `kind` is running; its restart counters start at 0.
pub(crate) fn watch_started(kind: &str) {
    for reason in WatchRestart::ALL {
        METRICS
            .watch_restarts
            .with_label_values(&[kind, reason.label()]);
    }
}

/// Why a watch started over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchRestart {
    /// The API server no longer has the version it watched from (410 Gone): it lists again.
    Gone,
    /// Any other failure: listing, starting the watch, or the stream.
    Error,
    /// Handling an event panicked (a bug); it starts over with a new list.
    Panic,
}

impl WatchRestart {
    const ALL: [WatchRestart; 3] = [WatchRestart::Gone, WatchRestart::Error, WatchRestart::Panic];

    fn label(self) -> &'static str {
        match self {
            WatchRestart::Gone => "gone",
            WatchRestart::Error => "error",
            WatchRestart::Panic => "panic",
        }
    }
}

/// One running watch of a kind, counted in `khai_watches` for as long as it lives: the watch's
/// task holds it, so a watch that stops (reload, shutdown, abort) is counted out however it ends.
pub(crate) struct LiveWatch(String);

impl LiveWatch {
    pub(crate) fn new(kind: &str) -> Self {
        METRICS.watches.with_label_values(&[kind]).inc();
        Self(kind.to_string())
    }
}

impl Drop for LiveWatch {
    fn drop(&mut self) {
        METRICS.watches.with_label_values(&[&self.0]).dec();
    }
}

/// A controller ended on its own, not because it was asked to stop.
pub(crate) fn controller_failed(controller: &str) {
    METRICS
        .controller_failures
        .with_label_values(&[controller])
        .inc();
}

/// A reconcile started while another of the same object ran.
pub(crate) fn reconcile_overlap(controller: &str) {
    METRICS
        .reconcile_overlaps
        .with_label_values(&[controller])
        .inc();
}

/// An object of `controller` was paused for a hot loop.
pub(crate) fn hot_loop(controller: &str) {
    METRICS.hot_loops.with_label_values(&[controller]).inc();
    super::tally::add(|t| t.hot_loop = true);
}

/// `n` objects of `controller` are divergent under the candidate revision.
pub(crate) fn candidate_divergent(controller: &str, n: usize) {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    METRICS
        .candidate_divergent
        .with_label_values(&[controller])
        .set(n);
}

/// A shadow run of the candidate revision of `controller` failed.
pub(crate) fn candidate_error(controller: &str) {
    METRICS
        .candidate_errors
        .with_label_values(&[controller])
        .inc();
}

/// The reconcile running in this task asks to be woken first for a timer or daemon.
pub(crate) fn clock_wake() {
    super::tally::add(|t| t.clock_wake = true);
}

/// An answer of `controller` asked for `n` Events more than khai records per answer.
pub(crate) fn events_dropped(controller: &str, n: usize) {
    METRICS
        .events_dropped
        .with_label_values(&[controller])
        .inc_by(u64::try_from(n).unwrap_or(u64::MAX));
}

/// `controller` skipped the watch event of a child it had just applied: no reconcile needed.
pub(crate) fn echo_skipped(controller: &str) {
    METRICS.echo_skips.with_label_values(&[controller]).inc();
}

/// A run of the `[[schedule]]` `schedule` ended with `result` (`success` or `error`).
pub(crate) fn schedule_run(schedule: &str, result: &str) {
    METRICS
        .schedule_runs
        .with_label_values(&[schedule, result])
        .inc();
}

/// A watch of `kind` failed and is being restarted.
pub(crate) fn watch_restarted(kind: &str, why: WatchRestart) {
    METRICS
        .watch_restarts
        .with_label_values(&[kind, why.label()])
        .inc();
}

/// Whether this replica holds the lease `name`.
pub(crate) fn leader(name: &str, leading: bool) {
    METRICS
        .leader
        .with_label_values(&[name])
        .set(i64::from(leading));
}

/// The config that is running: its hash, where it came from and which version of that it is.
pub(crate) fn config_loaded(hash: u64, source: &str, version: &str) {
    let hash = hash & ((1u64 << 52) - 1);
    // A gauge is an f64: keep 52 bits so the value is exact.
    #[allow(clippy::cast_precision_loss)]
    METRICS.config_hash.set(hash as f64);
    // Only the running version is listed.
    METRICS.config_info.reset();
    METRICS
        .config_info
        .with_label_values(&[source, version, &format!("{hash:x}")])
        .set(1);
    HEALTH.config_loaded.store(true, Ordering::SeqCst);
}

/// One hot reload of the config: swapped in (`true`) or rejected.
pub(crate) fn config_reloaded(ok: bool) {
    let result = if ok { "success" } else { "failure" };
    METRICS.config_reloads.with_label_values(&[result]).inc();
}

/// A request to the API server got an answer with status `code` (`<error>`: none).
pub(crate) fn request_sent(code: &str, method: &str) {
    METRICS.requests.with_label_values(&[code, method]).inc();
}

/// A request of `verb` waited `waited` for the client-side rate limiter.
pub(crate) fn rate_limited(verb: &str, waited: Duration) {
    METRICS
        .rate_limiter_wait
        .with_label_values(&[verb])
        .observe(waited.as_secs_f64());
}

/// A script's HTTP request through the allow entry `host` ended with `code` (a status, or the
/// failure's reason) after `took`.
pub(crate) fn http_request(host: &str, code: &str, took: Duration) {
    METRICS.http_requests.with_label_values(&[host, code]).inc();
    METRICS
        .http_duration
        .with_label_values(&[host])
        .observe(took.as_secs_f64());
}

/// The webhook `webhook` answered a `sort` review (`validate`, `mutate`, `convert`) with the
/// HTTP status `code` after `took`.
pub(crate) fn webhook_request(webhook: &str, sort: &str, code: &str, took: Duration) {
    METRICS
        .webhook_requests
        .with_label_values(&[webhook, sort, code])
        .inc();
    METRICS
        .webhook_duration
        .with_label_values(&[webhook, sort])
        .observe(took.as_secs_f64());
}

/// The console's turn history now holds `bytes`.
pub(crate) fn console_history_bytes(bytes: usize) {
    METRICS
        .console_bytes
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// Objects of `controller` waiting for a reconcile to start, and reconciles running now.
pub(crate) fn queue_now(controller: &str) -> (i64, i64) {
    let m = &*METRICS;
    let depth = m
        .queue_depth
        .with_label_values(&[controller, controller])
        .get();
    let busy = m.active_workers.with_label_values(&[controller]).get();
    (depth, busy)
}

/// Each leader election Lease this replica has tried, and whether it holds it now.
pub(crate) fn leases() -> Vec<(String, bool)> {
    use prometheus::core::Collector;
    METRICS
        .leader
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .filter_map(|m| {
            let name = m.get_label().iter().find(|l| l.name() == "name")?;
            Some((name.value().to_string(), m.get_gauge().get_value() > 0.0))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_guard_counts_while_held() {
        let g = || METRICS.active_workers.with_label_values(&["guard"]).get();
        let w = reconcile_started("guard");
        assert_eq!(g(), 1);
        drop(w);
        assert_eq!(g(), 0);
    }
}
