//! `khai run`: load, connect, reconcile until a signal arrives; with `--watch`, reload the config
//! when it changes.

use crate::daemon::{self, RunOptions};
use crate::operator::Operator;
use crate::reload;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(long, short = 'c', value_name = "FILE|DIR", env = "KHAI_CONFIG")]
    pub config: PathBuf,
    /// Watch only this namespace (repeatable); overrides `[operator] namespaces`.
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    pub namespaces: Vec<String>,
    /// Reload the config and scripts when a file in the config directory changes (a mounted
    /// ConfigMap's `..data` swap included). On by default inside a cluster; `--watch=false`
    /// turns it off.
    #[arg(long, env = "KHAI_WATCH", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub watch: Option<bool>,
    #[command(flatten)]
    pub ops: super::operations::Operations,
    #[command(flatten)]
    pub webhooks: super::webhook_flags::WebhookFlags,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Hashed before loading, so a change made while loading is still seen as a change.
    let current = reload::fingerprint(&reload::watched_dir(&args.config));
    // Everything that can be wrong with the config is found before touching the cluster.
    let op = Operator::load(&args.config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    rt.block_on(async move {
        let client = super::connect().await?;
        let shutdown = CancellationToken::new();
        tokio::spawn(cancel_on_signal(shutdown.clone()));
        tracing::info!(config = %op.config.file.display(), version = env!("CARGO_PKG_VERSION"), "khai starting");
        let leader = args.ops.leader(&client, &op.config.model.operator.name)?;
        let metrics = crate::metrics::server::bind(args.ops.metrics_bind)
            .await
            .with_context(|| format!("failed to bind --metrics-bind {}", args.ops.metrics_bind))?;
        let addr = metrics.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        tokio::spawn(crate::metrics::server::serve(metrics));
        let opts = RunOptions {
            namespaces: args.namespaces,
            leader,
            shutdown_grace: args.ops.shutdown_grace,
        };
        let updates = args.watch.unwrap_or_else(in_cluster).then(|| {
            let failures = reload::Failures::from_env(&client, &op.config.model.operator.name);
            let (tx, versions) = reload::versions();
            let watch = reload::watch(args.config.clone(), current, tx, failures.clone(), shutdown.clone());
            tokio::spawn(watch);
            reload::Updates { versions, failures }
        });
        let reloads = updates.as_ref().map(|u| u.versions.clone());
        let webhooks = args.webhooks.start(&op, &client, reloads, &shutdown).await?;
        daemon::run(op, client, opts, updates, shutdown).await?;
        if let Some(server) = webhooks {
            // A failed webhook server has already cancelled `shutdown`; exit non-zero.
            server.await.context("the webhook server task failed")??;
        }
        tracing::info!("khai stopped");
        Ok(ExitCode::SUCCESS)
    })
}

/// Whether khai runs in a Pod, where its config is a mounted ConfigMap that can change.
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Cancels `token` on the first SIGTERM or SIGINT.
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
    }
    token.cancel();
}
