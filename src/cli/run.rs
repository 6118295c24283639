//! `khai run`: load, connect, reconcile until a signal arrives; with `--watch`, reload the config
//! when it changes. The config comes from disk or, with `--config configmap:NS/NAME`, from a
//! ConfigMap through the API.

use crate::daemon::{self, RunOptions};
use crate::operator::Operator;
use crate::reload::{self, Source};
use crate::tasks::Tasks;
use anyhow::Context;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The operator config: a file, a directory holding operator.toml or operator.yaml, or
    /// `configmap:NAMESPACE/NAME`, a ConfigMap whose keys are those files (`scripts__x.rhai`
    /// for `scripts/x.rhai`), read and watched through the API.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE|DIR|configmap:NS/NAME",
        env = "KHAI_CONFIG"
    )]
    pub config: Source,
    /// Watch only this namespace (repeatable); overrides `[operator] namespaces`.
    #[arg(long = "namespace", short = 'n', value_name = "NS", value_parser = namespace_name)]
    pub namespaces: Vec<String>,
    /// Reload the config and scripts when they change: a file in the config directory (a mounted
    /// ConfigMap's `..data` swap included), or the ConfigMap. On by default inside a cluster and
    /// for a ConfigMap; `--watch=false` turns it off.
    #[arg(long, env = "KHAI_WATCH", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub watch: Option<bool>,
    /// A candidate revision of the config (a file or a directory, as `--config`), run in the
    /// shadow of the active one: for every object the active revision reconciles, the
    /// candidate's plan is made too and compared, and never written. Divergences are served
    /// on the metrics port at /candidate/divergent (`khai diff --running`).
    #[arg(long, value_name = "FILE|DIR", env = "KHAI_CANDIDATE")]
    pub candidate: Option<std::path::PathBuf>,
    /// Roll the candidate out as a canary instead of only shadowing it: it reconciles, and
    /// writes for, this percent of the objects (by a stable hash of each object's uid), and is
    /// promoted to all of them after `--promote-after`, or rolled back as soon as it fails too
    /// often (docs/rollouts.md). Its state is kept in the Lease `khai-<operator>-rollout`.
    #[arg(long, value_name = "PERCENT", env = "KHAI_CANDIDATE_PERCENT", requires = "candidate",
          conflicts_with = "shards", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub candidate_percent: Option<u8>,
    /// How long the canary runs before the candidate can be promoted.
    #[arg(long, value_name = "DURATION", env = "KHAI_PROMOTE_AFTER", default_value = "10m",
          value_parser = super::operations::duration)]
    pub promote_after: std::time::Duration,
    /// The candidate's error rate may be at most this many times the active revision's (and
    /// always 5%) before it is rolled back.
    #[arg(long, value_name = "RATIO", env = "KHAI_MAX_ERROR_RATIO", default_value = "1.5",
          value_parser = ratio)]
    pub max_error_ratio: f64,
    #[command(flatten)]
    pub ops: super::operations::Operations,
    #[command(flatten)]
    pub webhooks: super::webhook_flags::WebhookFlags,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Everything that can be wrong with a config on disk is found before touching the cluster.
    let disk = match &args.config {
        Source::Path(path) => Some(load_disk(path)?),
        Source::ConfigMap(_) => None,
    };
    // A candidate that does not load is said (once logging is up) and left out: the active
    // revision runs as it would without one, so a broken candidate never takes the operator down.
    let (candidate, candidate_problem) = match &args.candidate {
        Some(path) => match Operator::load(path) {
            Ok(op) => (Some(std::sync::Arc::new(op)), None),
            Err(e) => (
                None,
                Some(format!(
                    "the candidate {} does not load, so nothing runs in its shadow: {e:#}",
                    path.display()
                )),
            ),
        },
        None => (None, None),
    };
    crate::pace::set_wake_interval(args.ops.wake_interval());
    let rt = crate::pace::paced(&mut tokio::runtime::Builder::new_multi_thread())
        .enable_all()
        .worker_threads(usize::from(args.ops.worker_threads))
        // Script calls run on these threads, inline or on the blocking pool.
        .thread_stack_size(crate::script::stack::THREAD_STACK)
        .build()
        .context("failed to start the async runtime")?;
    crate::script::set_shared_limit((args.ops.scripts_memory as usize) << 20);
    crate::queue::set_batch_window(args.ops.batch_window());
    let ran = rt.block_on(async move {
        // A config on disk sets the rate limit before the first request; one from a ConfigMap
        // is read with the flags' (or the default) limit, which then changes to the config's.
        let first = disk.as_ref().map(|(op, _)| crate::client::Limits::from(&op.config.model.operator));
        let (client, bucket) =
            crate::client::connect(args.ops.limits(first.unwrap_or_default())).await?;
        let (op, current, regarding) = match (&args.config, disk) {
            (Source::Path(_), Some((op, current))) => (op, current, None),
            (Source::Path(path), None) => {
                let (op, current) = load_disk(path)?;
                (op, current, None)
            }
            (Source::ConfigMap(target), _) => {
                let loaded = reload::configmap::load(&client, target).await?;
                (loaded.operator, loaded.fingerprint, Some(loaded.object))
            }
        };
        bucket.set(args.ops.limits(crate::client::Limits::from(&op.config.model.operator)));
        let shutdown = CancellationToken::new();
        let tasks = Tasks::new();
        tasks.spawn("signals", cancel_on_signal(shutdown.clone()));
        let limits = bucket.limits();
        tracing::info!(config = %op.config.file.display(), version = env!("CARGO_PKG_VERSION"), qps = limits.qps, burst = limits.burst, "khai starting");
        for w in &op.config.warnings {
            tracing::warn!("{w}");
        }
        if let Some(problem) = &candidate_problem {
            tracing::error!("{problem}");
        }
        if !crate::script::is_counting() {
            // An embedder installed another allocator: scripts still run, but unbounded in memory.
            tracing::warn!("script memory budgets are off: the process's global allocator is not khai::script::Counting");
        }
        let leader = args.ops.leader(&client, &op.config.model.operator.name)?;
        let shards = args.ops.shards(&client, &op.config.model.operator.name)?.map(std::sync::Arc::new);
        let metrics = crate::metrics::server::bind(args.ops.metrics_bind)
            .await
            .with_context(|| format!("failed to bind --metrics-bind {}", args.ops.metrics_bind))?;
        // Probes and scrapes are answered until the daemon has stopped, shutdown included.
        let stopped = CancellationToken::new();
        let serving = stopped.clone();
        tasks.spawn("metrics server", async move {
            serving.run_until_cancelled(crate::metrics::server::serve(metrics)).await;
        });
        if let Some(addr) = args.ops.console {
            let (listener, console) = crate::console::bind(addr, client.clone()).await?;
            let serving = stopped.clone();
            tasks.spawn("console server", async move {
                serving.run_until_cancelled(crate::console::serve(listener, console)).await;
            });
        }
        let rollout = args.candidate_percent.filter(|_| candidate.is_some()).map(|percent| {
            crate::revisions::rollout::Settings {
                percent,
                promote_after: args.promote_after,
                max_error_ratio: args.max_error_ratio,
                namespace: args.ops.own_namespace(&client),
                regarding: regarding.clone().or_else(crate::events::own_pod),
            }
        });
        let opts = RunOptions {
            namespaces: args.namespaces,
            leader,
            shutdown_grace: args.ops.shutdown_grace,
            candidate,
            rollout,
            shards,
        };
        let from_api = matches!(args.config, Source::ConfigMap(_));
        let updates = args.watch.unwrap_or_else(|| from_api || in_cluster()).then(|| {
            let operator = &op.config.model.operator.name;
            let failures = match regarding {
                Some(configmap) => reload::Failures::regarding(&client, operator, Some(configmap)),
                None => reload::Failures::from_env(&client, operator),
            };
            let (tx, versions) = reload::versions();
            let (f, stop) = (failures.clone(), shutdown.clone());
            match &args.config {
                Source::Path(path) => {
                    tasks.spawn("config reload", reload::dir::watch(path.clone(), current, tx, f, stop));
                }
                Source::ConfigMap(target) => {
                    let watch = reload::configmap::watch(client.clone(), target.clone(), current, tx, f, stop);
                    tasks.spawn("config reload", watch);
                }
            }
            reload::Updates { versions, failures }
        });
        let reloads = updates.as_ref().map(|u| u.versions.clone());
        let webhooks =
            args.webhooks.start(&op, &client, args.ops.own_namespace(&client), reloads, opts.shards.as_ref(), &shutdown, &tasks).await?;
        let grace = opts.shutdown_grace;
        let ran = daemon::run(op, client, opts, updates, shutdown.clone()).await;
        // However the daemon ended, the signal task must not keep the tasks waiting.
        shutdown.cancel();
        stopped.cancel();
        ran?;
        if let Some(server) = webhooks {
            // A failed webhook server has already cancelled `shutdown`; exit non-zero.
            server.await.context("the webhook server task failed")??;
        }
        tasks.stop(grace).await;
        tracing::info!("khai stopped");
        Ok(ExitCode::SUCCESS)
    });
    // Dropping the runtime would wait for every blocking task: one stuck in a read (a network
    // mount that hangs) must not keep khai from exiting once it has stopped.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    ran
}

/// Loads the config at `path` and fingerprints what it reads. The files are hashed before
/// loading, so a change made while loading is still seen as a change.
fn load_disk(path: &std::path::Path) -> anyhow::Result<(Operator, u64)> {
    let current = reload::fingerprint(path);
    Ok((Operator::load(path)?, current))
}

/// A `--namespace` (of `khai run` and `khai diff`): a namespace name, as `[operator] namespaces` must hold (`""` would watch
/// every namespace).
pub(super) fn namespace_name(s: &str) -> Result<String, String> {
    if crate::config::selector::is_dns_label(s) {
        Ok(s.to_string())
    } else {
        Err(
            "not a namespace name: at most 63 lower-case letters, digits and `-`, starting and \
             ending with a letter or digit"
                .into(),
        )
    }
}

/// A `--max-error-ratio` that is not a positive number.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a ratio: a number greater than 0, such as 1.5")]
struct RatioError(String);

fn ratio(s: &str) -> Result<f64, RatioError> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(RatioError(s.to_string())),
    }
}

/// Whether khai runs in a Pod, where its config is a mounted ConfigMap that can change.
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Cancels `token` on the first SIGTERM or SIGINT; ends when `token` is cancelled otherwise.
async fn cancel_on_signal(token: CancellationToken) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                futures::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = term => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
        () = token.cancelled() => return,
    }
    token.cancel();
}
