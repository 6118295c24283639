//! What khai measures about itself, and the HTTP endpoints that expose it.
//!
//! One process-wide Prometheus registry. Other modules record into it through the small
//! functions here (a reconcile finished, a child was applied, a watch restarted, leadership
//! changed) and never touch the registry themselves. Where controller-runtime has an equivalent
//! metric, khai uses its name and labels, so dashboards and alerts written for Go operators work
//! unchanged; khai's own metrics start with `khai_`. [`server`] serves `/metrics`, `/healthz` and
//! `/readyz` on their own port; [`Health`] is what `/readyz` answers from.

mod record;
mod rollout;
pub(crate) mod server;
mod shard;
mod tally;

pub(crate) use record::{
    LiveWatch, WatchRestart, clock_wake, console_history_bytes, leases, queue_now,
};
pub(crate) use record::{
    applied, candidate_divergent, candidate_error, config_loaded, config_reloaded,
    controller_failed, controller_started, echo_skipped, events_dropped, hot_loop, http_request,
    leader, queue_add, queue_retry, queue_state, rate_limited, reconcile_finished,
    reconcile_overlap, reconcile_started, request_sent, schedule_run, script_api_call, script_call,
    script_limit_abort, status_written, watch_restarted, watch_started, webhook_request,
};
pub(crate) use rollout::{rollout, rollout_reconciled};
pub(crate) use shard::{cached_objects, ring_shards, shard_drained, shard_moved, shard_objects};
pub(crate) use tally::{Tally, tallied};

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Values of `controller_runtime_reconcile_total`'s `result` label, as controller-runtime uses them.
pub(crate) const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// Every metric khai exports.
struct Metrics {
    registry: Registry,
    reconcile_total: IntCounterVec,
    reconcile_errors: IntCounterVec,
    reconcile_time: HistogramVec,
    active_workers: IntGaugeVec,
    max_concurrent: IntGaugeVec,
    queue_adds: IntCounterVec,
    queue_retries: IntCounterVec,
    queue_depth: IntGaugeVec,
    queue_duration: HistogramVec,
    work_duration: HistogramVec,
    script_duration: HistogramVec,
    script_errors: IntCounterVec,
    script_limit_aborts: IntCounterVec,
    children_applied: IntCounterVec,
    children_unchanged: IntCounterVec,
    children_pruned: IntCounterVec,
    status_writes: IntCounterVec,
    watch_restarts: IntCounterVec,
    watches: IntGaugeVec,
    controller_failures: IntCounterVec,
    reconcile_overlaps: IntCounterVec,
    hot_loops: IntCounterVec,
    candidate_divergent: IntGaugeVec,
    candidate_errors: IntCounterVec,
    events_dropped: IntCounterVec,
    echo_skips: IntCounterVec,
    schedule_runs: IntCounterVec,
    leader: IntGaugeVec,
    config_reloads: IntCounterVec,
    config_hash: Gauge,
    config_info: IntGaugeVec,
    requests: IntCounterVec,
    rate_limiter_wait: HistogramVec,
    script_api_calls: IntCounterVec,
    script_api_duration: HistogramVec,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    webhook_requests: IntCounterVec,
    webhook_duration: HistogramVec,
    console_bytes: prometheus::IntGauge,
    shard: shard::ShardMetrics,
    rollout: rollout::RolloutMetrics,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Registers `c` and hands it back. Names and labels are constants, so a failure is a bug in
/// this file, caught by the unit test below.
#[allow(clippy::expect_used)]
fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry
        .register(Box::new(c.clone()))
        .expect("metric names are unique and valid");
    c
}

#[allow(clippy::expect_used)]
fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    register(r, c)
}

#[allow(clippy::expect_used)]
fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    register(r, g)
}

/// controller-runtime's reconcile_time_seconds buckets: 5 ms up to 60 s.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// client-go's rate limiter latency buckets, 1 ms to about a minute.
const RATE_LIMITER_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384, 32.768, 65.536,
];

/// controller-runtime's workqueue buckets: `ExponentialBuckets(10e-9, 10, 10)`, 10 ns to 10 s.
const WORKQUEUE_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    histogram_with(r, name, help, labels, RECONCILE_BUCKETS)
}

#[allow(clippy::expect_used)]
fn histogram_with(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    let h = HistogramVec::new(opts, labels).expect("valid metric");
    register(r, h)
}

impl Metrics {
    #[allow(clippy::expect_used)]
    fn new() -> Self {
        let r = Registry::new();
        let ctl = &["controller"];
        let queue = &["name", "controller"];
        let script = &["script", "function"];
        let config_hash = register(
            &r,
            Gauge::new(
                "khai_config_hash",
                "Hash of the loaded config and scripts (lower 52 bits of a 64-bit hash)",
            )
            .expect("valid metric"),
        );
        let build_info = register(
            &r,
            GaugeVec::new(
                Opts::new("khai_build_info", "Always 1; labels carry the build"),
                &["version"],
            )
            .expect("valid metric"),
        );
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1.0);
        let m = Self {
            reconcile_total: counter(
                &r,
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            ),
            reconcile_errors: counter(
                &r,
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                ctl,
            ),
            reconcile_time: histogram(
                &r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                ctl,
            ),
            active_workers: gauge(
                &r,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                ctl,
            ),
            max_concurrent: gauge(
                &r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller (0: unbounded)",
                ctl,
            ),
            queue_adds: counter(
                &r,
                "workqueue_adds_total",
                "Total number of reconcile requests (triggers) handled by the workqueue",
                queue,
            ),
            queue_retries: counter(
                &r,
                "workqueue_retries_total",
                "Total number of retries handled by the workqueue",
                queue,
            ),
            queue_depth: gauge(
                &r,
                "workqueue_depth",
                "Current depth of workqueue: objects with a reconcile request that has not started",
                queue,
            ),
            queue_duration: histogram_with(
                &r,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                queue,
                WORKQUEUE_BUCKETS,
            ),
            work_duration: histogram_with(
                &r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                queue,
                WORKQUEUE_BUCKETS,
            ),
            script_duration: histogram(
                &r,
                "khai_script_duration_seconds",
                "Wall-clock time of one script call",
                script,
            ),
            script_errors: counter(
                &r,
                "khai_script_errors_total",
                "Script calls that ended in an error, by kind (runtime, retry, fail, convert)",
                &["script", "function", "kind"],
            ),
            script_limit_aborts: counter(
                &r,
                "khai_script_limit_aborts_total",
                "Script calls stopped by a limit (operations, time, memory, call_depth, data_size, ...)",
                &["script", "function", "limit"],
            ),
            children_applied: counter(
                &r,
                "khai_children_applied_total",
                "Children sent to the API server with server-side apply",
                ctl,
            ),
            children_unchanged: counter(
                &r,
                "khai_children_unchanged_total",
                "Children already as desired; nothing sent",
                ctl,
            ),
            children_pruned: counter(
                &r,
                "khai_children_pruned_total",
                "Children deleted because the plan no longer lists them",
                ctl,
            ),
            status_writes: counter(
                &r,
                "khai_status_writes_total",
                "Status subresource writes",
                ctl,
            ),
            watch_restarts: counter(
                &r,
                "khai_watch_restarts_total",
                "Watches that failed and were restarted, by kind and reason: gone (410: the version \
                 it watched from was compacted, so it lists again), error, panic",
                &["kind", "reason"],
            ),
            watches: gauge(
                &r,
                "khai_watches",
                "Watches running, by kind (one per namespace when khai watches some namespaces)",
                &["kind"],
            ),
            controller_failures: counter(
                &r,
                "khai_controller_failures_total",
                "Controllers that stopped on their own (a panic included) instead of on shutdown or reload",
                ctl,
            ),
            reconcile_overlaps: counter(
                &r,
                "khai_reconcile_overlaps_total",
                "Reconciles that started while another reconcile of the same object by the same controller ran (always 0 unless khai has a bug)",
                ctl,
            ),
            hot_loops: counter(
                &r,
                "khai_hot_loops_total",
                "Objects paused because their reconciles kept writing (each pause counts once)",
                ctl,
            ),
            candidate_divergent: gauge(
                &r,
                "khai_candidate_divergent_objects",
                "Objects whose last reconcile the candidate revision planned differently from the active one (or failed, or would not reconcile)",
                ctl,
            ),
            candidate_errors: counter(
                &r,
                "khai_candidate_errors_total",
                "Shadow runs of the candidate revision that failed where the active revision made a plan",
                ctl,
            ),
            events_dropped: counter(
                &r,
                "khai_events_dropped_total",
                "Events an answer asked for beyond the most khai records per answer",
                ctl,
            ),
            echo_skips: counter(
                &r,
                "khai_echo_skips_total",
                "Watch events of a child khai had just applied that reconciled nothing: the child held what khai sent and its parent's reconcile read nothing else",
                ctl,
            ),
            schedule_runs: counter(
                &r,
                "khai_schedule_runs_total",
                "Runs of a [[schedule]] function, by schedule and result (success or error)",
                &["schedule", "result"],
            ),
            leader: gauge(
                &r,
                "leader_election_master_status",
                "1 while this replica holds the lease, 0 otherwise",
                &["name"],
            ),
            config_reloads: counter(
                &r,
                "khai_config_reloads_total",
                "Config reloads by result: success (swapped in) or failure (the last good config kept running)",
                &["result"],
            ),
            config_hash,
            config_info: gauge(
                &r,
                "khai_config_info",
                "1 for the config running now: its source (config file, or configmap:NS/NAME/<file>), the source's version (a ConfigMap's resourceVersion; empty for files) and hash (as khai_config_hash, in hex)",
                &["source", "version", "hash"],
            ),
            requests: counter(
                &r,
                "rest_client_requests_total",
                "Number of HTTP requests to the API server, partitioned by status code (<error>: no answer) and method",
                &["code", "method"],
            ),
            rate_limiter_wait: histogram_with(
                &r,
                "rest_client_rate_limiter_duration_seconds",
                "Time requests waited for the client-side rate limiter (--kube-api-qps, --kube-api-burst), by verb",
                &["verb"],
                RATE_LIMITER_BUCKETS,
            ),
            script_api_calls: counter(
                &r,
                "khai_script_api_calls_total",
                "Kubernetes API calls scripts made through the k8s module, by verb, kind and status code (0: no answer)",
                &["verb", "kind", "code"],
            ),
            script_api_duration: histogram_with(
                &r,
                "khai_script_api_call_duration_seconds",
                "Time one k8s module call took, rate limiter included, by verb",
                &["verb"],
                RATE_LIMITER_BUCKETS,
            ),
            http_requests: counter(
                &r,
                "khai_script_http_requests_total",
                "Requests scripts sent with the http module, by the [operator.http] allow entry that let them through (<refused>: none) and status code or failure reason",
                &["host", "code"],
            ),
            http_duration: histogram(
                &r,
                "khai_script_http_request_duration_seconds",
                "Time from a script's HTTP request to its whole answer (redirects included), by allow entry",
                &["host"],
            ),
            webhook_requests: counter(
                &r,
                "khai_webhook_requests_total",
                "Admission and conversion reviews answered, by webhook, sort (validate, mutate, convert) and HTTP status code",
                &["webhook", "sort", "code"],
            ),
            webhook_duration: histogram_with(
                &r,
                "khai_webhook_request_duration_seconds",
                "Time from a review's arrival to its answer, waiting for a turn included, by webhook and sort",
                &["webhook", "sort"],
                RATE_LIMITER_BUCKETS,
            ),
            console_bytes: register(
                &r,
                prometheus::IntGauge::new(
                    "khai_console_history_bytes",
                    "Bytes the console's turn history holds (khai run --console), at most its cap",
                )
                .expect("valid metric"),
            ),
            shard: shard::ShardMetrics::new(&r),
            rollout: rollout::RolloutMetrics::new(&r),
            registry: r,
        };
        for result in ["success", "failure"] {
            m.config_reloads.with_label_values(&[result]);
        }
        m
    }
}

/// Creates every metric now, so the first scrape already lists them all.
pub(crate) fn init() {
    LazyLock::force(&METRICS);
}

/// The whole registry in Prometheus text format.
pub(crate) fn encode() -> String {
    let families = METRICS.registry.gather();
    let mut out = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
        tracing::warn!(error = %e, "failed to encode metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

/// What `/readyz` answers from.
#[derive(Debug, Default)]
pub(crate) struct Health {
    config_loaded: AtomicBool,
    caches_synced: AtomicBool,
}

static HEALTH: LazyLock<Health> = LazyLock::new(Health::default);

/// Every informer's first list is in its cache (or, `false`, they are being rebuilt).
pub(crate) fn caches_synced(synced: bool) {
    HEALTH.caches_synced.store(synced, Ordering::SeqCst);
}

/// Why the process is not ready, or `None` when it is.
pub(crate) fn not_ready() -> Option<&'static str> {
    if !HEALTH.config_loaded.load(Ordering::SeqCst) {
        Some("config not loaded")
    } else if !HEALTH.caches_synced.load(Ordering::SeqCst) {
        Some("caches not synced")
    } else {
        None
    }
}

// Below the registry: tests/docs.rs reads this file up to its first test-only item.
#[cfg(test)]
pub(crate) use tally::in_tally;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_family_is_exported_with_controller_runtime_names() {
        init();
        controller_started("unit", 2);
        watch_started("Unit");
        leader("unit-lease", true);
        script_call("unit.rhai", "reconcile", Duration::from_millis(3), None);
        reconcile_finished("unit", "success", Duration::from_millis(5));
        request_sent("599", "PATCH");
        rate_limited("UNIT", Duration::from_millis(3));
        let text = encode();
        for family in [
            "controller_runtime_reconcile_total{controller=\"unit\",result=\"success\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"unit\"} 0",
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"unit\",le=\"0.005\"}",
            "controller_runtime_max_concurrent_reconciles{controller=\"unit\"} 2",
            "workqueue_adds_total{controller=\"unit\",name=\"unit\"} 0",
            "workqueue_depth{controller=\"unit\",name=\"unit\"} 0",
            "workqueue_queue_duration_seconds_count{controller=\"unit\",name=\"unit\"} 0",
            "workqueue_work_duration_seconds_count{controller=\"unit\",name=\"unit\"} 1",
            "leader_election_master_status{name=\"unit-lease\"} 1",
            "khai_config_reloads_total{result=\"success\"} 0",
            "khai_watch_restarts_total{kind=\"Unit\",reason=\"gone\"} 0",
            "khai_build_info{version=",
            "rest_client_requests_total{code=\"599\",method=\"PATCH\"} 1",
            "rest_client_rate_limiter_duration_seconds_bucket{verb=\"UNIT\",le=\"0.004\"} 1",
        ] {
            assert!(text.contains(family), "missing {family} in\n{text}");
        }
    }
}
