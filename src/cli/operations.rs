//! The production flags of `khai run`: the metrics and probe port, leader election, the
//! client-side rate limit and the shutdown grace period, and turning them into what the daemon takes.

use crate::leader::{self, Settings};
use std::net::SocketAddr;
use std::time::Duration;

/// Flags for running khai in production; `khai run` flattens them into its own.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Operations")]
pub(crate) struct Operations {
    /// Where /metrics, /healthz and /readyz are served; port 0 picks a free port, logged as
    /// `listening="metrics"` and `address`.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:8080",
        env = "KHAI_METRICS_BIND"
    )]
    pub(crate) metrics_bind: SocketAddr,
    /// Serve the console (a read-only JSON API, event stream and web page; docs/console.md)
    /// here; off unless given. Off loopback, every request needs a bearer token the API server
    /// authorizes (docs/console.md). Port 0 picks a free port, logged as `listening="console"`
    /// and `address`.
    #[arg(long, value_name = "ADDR", env = "KHAI_CONSOLE")]
    pub(crate) console: Option<SocketAddr>,
    /// Run the controllers only while this replica holds a Lease (for more than one replica).
    #[arg(long, env = "KHAI_LEADER_ELECT")]
    pub(crate) leader_elect: bool,
    /// Reconcile only this replica's share of the objects, as one shard among the replicas
    /// started with `--shards` (docs/scaling.md). Uses the `--leader-elect-*` Lease settings.
    #[arg(long, env = "KHAI_SHARDS", conflicts_with = "leader_elect")]
    pub(crate) shards: bool,
    /// This shard's id, unique among the replicas [default: the pod's name].
    #[arg(long, value_name = "ID", env = "KHAI_SHARD_ID")]
    pub(crate) shard_id: Option<String>,
    /// Name of the Lease [default: khai-<operator name>].
    #[arg(long, value_name = "NAME")]
    pub(crate) leader_elect_lease_name: Option<String>,
    /// Namespace of the Lease [default: the pod's namespace, or the kubeconfig context's].
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub(crate) leader_elect_namespace: Option<String>,
    /// How long a Lease is valid without renewal; a standby takes over this long after the
    /// leader's last renewal.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    pub(crate) leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops reconciling; shorter than the
    /// lease duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub(crate) leader_elect_renew_deadline: Duration,
    /// How often every replica tries to acquire or renew the Lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = duration)]
    pub(crate) leader_elect_retry_period: Duration,
    /// Requests a second khai may send to the API server on average (0: no limit); overrides
    /// `[operator] qps` [default: 0, no limit].
    #[arg(long, value_name = "QPS", value_parser = qps)]
    pub(crate) kube_api_qps: Option<f64>,
    /// Requests that may leave at once after a quiet spell; overrides `[operator] burst`
    /// [default: 30].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kube_api_burst: Option<u32>,
    /// How long in-flight reconciles may take to finish after SIGTERM.
    #[arg(long, value_name = "DURATION", default_value = "25s", value_parser = duration)]
    pub(crate) shutdown_grace: Duration,
    /// Hold each controller's reconcile requests for up to this long after the first one and
    /// start them together; 0s starts each at once. Fewer wake-ups per object, for up to this
    /// much more latency: worth it where events arrive slowly, as on each of several shards
    /// (docs/scaling.md, "Batching"). At most 10s [default: 100ms with --shards, else 0s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "KHAI_RECONCILE_BATCH",
        value_parser = batch_window
    )]
    pub(crate) reconcile_batch: Option<Duration>,
    /// Let each of khai's threads start work at most once per this interval: one that wakes
    /// sooner after its last wake-up sleeps out the rest first, and handles whatever arrived
    /// meanwhile together. 0s starts work whenever a thread wakes. Fewer wake-ups per event, for
    /// up to this much more latency per round trip to the API server: worth it where events
    /// arrive slowly, as on each of several shards (docs/scaling.md, "Wake-ups"). At most 1s
    /// [default: 10ms with --shards, else 0s].
    #[arg(
        long,
        value_name = "DURATION",
        env = "KHAI_WAKE_INTERVAL",
        value_parser = wake_interval
    )]
    pub(crate) wake_interval: Option<Duration>,
    /// Memory all script calls running at once may build together, in MiB; past it the calls
    /// holding most stop and are retried. Keep it well below the pod's memory limit.
    #[arg(
        long,
        value_name = "MIB",
        env = "KHAI_SCRIPTS_MEMORY",
        default_value_t = 512,
        value_parser = clap::value_parser!(u32).range(16..)
    )]
    pub(crate) scripts_memory: u32,
    /// Threads running khai's async work: watches, reconciles, writes and the metrics server
    /// (the webhook server has a thread of its own). Script calls past a short budget run on
    /// the blocking pool beside them. One
    /// thread spends the least CPU on an operator's I/O-bound work (docs/benchmarks.md); more
    /// help only when one replica's reconciles keep a core busy.
    #[arg(
        long,
        value_name = "N",
        env = "KHAI_WORKER_THREADS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub(crate) worker_threads: u16,
}

pub(super) fn duration(s: &str) -> Result<Duration, crate::config::duration::ParseError> {
    crate::config::duration::parse(s)
}

/// The batch window of a shard when `--reconcile-batch` is not given: each shard is fed a
/// fraction of the events, slowly enough that batching them saves more CPU than the window
/// costs in latency (docs/scaling.md, "Batching").
const SHARD_BATCH: Duration = Duration::from_millis(100);

/// The wake interval of a shard when `--wake-interval` is not given (docs/scaling.md,
/// "Wake-ups").
const SHARD_WAKE_INTERVAL: Duration = Duration::from_millis(10);

/// The longest `--wake-interval`: a thread that waits longer would miss its Lease renewals.
const MAX_WAKE_INTERVAL: Duration = Duration::from_secs(1);

/// The longest `--reconcile-batch`: a longer window would hold every reconcile for longer
/// than anyone waits for an operator to act.
const MAX_BATCH_WINDOW: Duration = Duration::from_secs(10);

/// A duration flag that is not one khai keeps: unreadable, or longer than its longest.
#[derive(Debug, thiserror::Error)]
enum CappedError {
    #[error(transparent)]
    Duration(#[from] crate::config::duration::ParseError),
    #[error("{given} is longer than the longest {what}, {longest:?}")]
    TooLong {
        given: String,
        what: &'static str,
        longest: Duration,
    },
}

/// `s` as a duration of at most `longest`, the longest `what`.
fn capped(s: &str, longest: Duration, what: &'static str) -> Result<Duration, CappedError> {
    let d = duration(s)?;
    if d > longest {
        return Err(CappedError::TooLong {
            given: s.to_string(),
            what,
            longest,
        });
    }
    Ok(d)
}

fn wake_interval(s: &str) -> Result<Duration, CappedError> {
    capped(s, MAX_WAKE_INTERVAL, "wake interval")
}

fn batch_window(s: &str) -> Result<Duration, CappedError> {
    capped(s, MAX_BATCH_WINDOW, "batch window")
}

/// A `--kube-api-qps` that is not a rate.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a number of requests a second, 0 or more (0: no limit)")]
struct QpsError(String);

fn qps(s: &str) -> Result<f64, QpsError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(QpsError(s.to_string())),
    }
}

impl Operations {
    /// The client-side rate limit: the flags where given, else `config`'s.
    pub(crate) fn limits(&self, config: crate::client::Limits) -> crate::client::Limits {
        crate::client::Limits {
            qps: self.kube_api_qps.unwrap_or(config.qps),
            burst: self.kube_api_burst.unwrap_or(config.burst),
        }
    }

    /// How long each controller holds reconcile requests: `--reconcile-batch`, else
    /// [`SHARD_BATCH`] on a shard and nothing otherwise.
    pub(crate) fn batch_window(&self) -> Duration {
        self.reconcile_batch.unwrap_or(if self.shards {
            SHARD_BATCH
        } else {
            Duration::ZERO
        })
    }

    /// How often each thread may start work: `--wake-interval`, else [`SHARD_WAKE_INTERVAL`]
    /// on a shard and no limit otherwise.
    pub(crate) fn wake_interval(&self) -> Duration {
        self.wake_interval.unwrap_or(if self.shards {
            SHARD_WAKE_INTERVAL
        } else {
            Duration::ZERO
        })
    }

    /// The leader election settings, when `--leader-elect` is on.
    pub(crate) fn leader(
        &self,
        client: &kube::Client,
        operator: &str,
    ) -> Result<Option<Settings>, leader::Error> {
        if !self.leader_elect {
            return Ok(None);
        }
        let settings = Settings {
            lease_name: self
                .leader_elect_lease_name
                .clone()
                .unwrap_or_else(|| format!("khai-{operator}")),
            namespace: self.own_namespace(client),
            identity: crate::client::identity(),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
            labels: Default::default(),
        };
        settings.validate()?;
        Ok(Some(settings))
    }

    /// khai's own namespace, where its Leases are: `--leader-elect-namespace`, or the
    /// kubeconfig context's.
    pub(crate) fn own_namespace(&self, client: &kube::Client) -> String {
        self.leader_elect_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| client.default_namespace().to_string())
    }

    /// The sharding settings, when `--shards` is on.
    pub(crate) fn shards(
        &self,
        client: &kube::Client,
        operator: &str,
    ) -> Result<Option<crate::shard::Settings>, crate::shard::Error> {
        if !self.shards {
            return Ok(None);
        }
        let settings = crate::shard::Settings {
            operator: operator.to_string(),
            id: self
                .shard_id
                .clone()
                .unwrap_or_else(|| crate::client::identity().replace('_', "-")),
            namespace: self.own_namespace(client),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        settings.validate()?;
        Ok(Some(settings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Run {
        #[command(flatten)]
        ops: Operations,
    }

    fn parse(args: &[&str]) -> Result<Run, clap::Error> {
        Run::try_parse_from(std::iter::once("khai").chain(args.iter().copied()))
    }

    #[test]
    fn one_worker_thread_unless_asked_for_more_and_never_none() {
        assert_eq!(parse(&[]).unwrap().ops.worker_threads, 1);
        assert_eq!(
            parse(&["--worker-threads", "4"])
                .unwrap()
                .ops
                .worker_threads,
            4
        );
        let refused = parse(&["--worker-threads", "0"]).unwrap_err().to_string();
        assert!(
            refused.contains("--worker-threads") && refused.contains("0 is not in 1.."),
            "{refused}"
        );
    }

    /// A duration flag that defaults to `on_shards` with `--shards` and to nothing without,
    /// is taken as given up to `longest`, and is refused past it, naming the flag and its longest.
    fn shard_default_up_to(
        flag: &str,
        read: fn(&Operations) -> Duration,
        on_shards: Duration,
        longest: &str,
        past_it: &str,
        refusal: &str,
    ) {
        let value = |args: &[&str]| read(&parse(args).unwrap().ops);
        assert_eq!(value(&[]), Duration::ZERO);
        assert_eq!(value(&["--shards"]), on_shards);
        assert_eq!(value(&["--shards", flag, "0s"]), Duration::ZERO);
        assert_eq!(value(&[flag, "5ms"]), Duration::from_millis(5));
        assert_eq!(value(&[flag, longest]), duration(longest).unwrap());
        let refused = parse(&[flag, past_it]).unwrap_err().to_string();
        assert!(
            refused.contains(flag) && refused.contains(refusal),
            "{refused}"
        );
    }

    #[test]
    fn shards_batch_by_default_and_the_flag_overrides_up_to_ten_seconds() {
        shard_default_up_to(
            "--reconcile-batch",
            Operations::batch_window,
            Duration::from_millis(100),
            "10s",
            "11s",
            "11s is longer than the longest batch window, 10s",
        );
    }

    #[test]
    fn shards_pace_their_wake_ups_by_default_and_the_flag_overrides_up_to_a_second() {
        shard_default_up_to(
            "--wake-interval",
            Operations::wake_interval,
            Duration::from_millis(10),
            "1s",
            "2s",
            "2s is longer than the longest wake interval, 1s",
        );
    }
}
