//! The webhook flags of `khai run`: where the HTTPS server listens and the URL the API server
//! reaches it at, and starting the server when the config declares webhooks or khai is sharded.

use crate::operator::Operator;
use crate::reload::Versions;
use crate::webhook::{self, Settings};
use anyhow::Context;
use std::net::SocketAddr;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Flags for the admission and conversion webhook server; `khai run` flattens them.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Webhooks")]
pub(crate) struct WebhookFlags {
    /// Where the HTTPS webhook server listens when the config declares `[[webhook]]`s; port 0
    /// picks a free port, logged as `listening="webhook"` and `address`.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:9443",
        env = "KHAI_WEBHOOK_BIND"
    )]
    pub(crate) webhook_bind: SocketAddr,
    /// Base URL the API server calls (`https://127.0.0.1:9443` for local development); with a
    /// self-signed certificate khai installs its configurations pointing here. Overrides
    /// `[webhook_server] service`. Port 0 (`https://127.0.0.1:0`) stands for the port
    /// `--webhook-bind` bound.
    #[arg(long, value_name = "URL", env = "KHAI_WEBHOOK_URL")]
    pub(crate) webhook_url: Option<String>,
}

impl WebhookFlags {
    /// Starts the webhook server if the operator has webhooks, or is sharded and the API
    /// server can reach khai (the shard assignment webhook); `None` otherwise. With `reloads`,
    /// the server follows each new version of the config. A self-signed CA is shared through
    /// a Secret in `namespace`, khai's own. The task ends with an error if the server failed
    /// (khai is then shutting down).
    // Each argument is one thing `khai run` already holds; a struct bundling them for this one
    // call would only move the list.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        op: &Operator,
        client: &kube::Client,
        namespace: String,
        reloads: Option<Versions>,
        shards: Option<&std::sync::Arc<crate::shard::Settings>>,
        shutdown: &CancellationToken,
        tasks: &crate::tasks::Tasks,
    ) -> anyhow::Result<Option<JoinHandle<Result<(), webhook::Error>>>> {
        let server = &op.config.model.webhook_server;
        // Only a URL, a Service or certificate files let the API server call khai; without one,
        // the sharder's sync assigns every object.
        let reachable = self.webhook_url.is_some()
            || server.service.is_some()
            || server.tls == crate::config::webhook::TlsMode::Files;
        let assign = shards
            .filter(|_| reachable)
            .map(|s| webhook::routes::Assign {
                rules: crate::shard::assign::Rules::of(&op.config.model, s.label()),
                ring: crate::shard::view::start(client.clone(), s, tasks, shutdown.clone()),
            });
        if op.webhooks.is_empty() && assign.is_none() {
            return Ok(None);
        }
        let settings = Settings {
            bind: self.webhook_bind,
            url: self.webhook_url.clone(),
            namespace: Some(namespace),
        };
        let task = webhook::start(
            op,
            client.clone(),
            settings,
            reloads,
            assign,
            shutdown.clone(),
            tasks,
        )
        .await
        .context("failed to start the webhook server")?;
        Ok(Some(task))
    }
}
