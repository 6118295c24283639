//! The `cache-bench` workload as a Rust expert writes it by hand with kube-rs: the reference
//! `scripts/bench` compares khai (and Kopf) with. Behaviour matches examples/bench-cache: every
//! Cache gets a ConfigMap `<name>-config` holding its size and image, controlled by the Cache,
//! and a status `{phase: Ready, configMap, observedGeneration}`. Reads come from informer caches;
//! writes happen only when something differs.
//!
//! Environment: `KUBECONFIG` (or in-cluster config), `RUST_LOG` (default `warn`; scripts/bench
//! sets `warn,kube_rs_baseline=info` for one `reconciled` line per finished reconcile), and
//! `BASELINE_RESYNC_SECS` to reconcile every Cache again at that interval (off by default, like
//! khai's `resync`).

mod cache;
mod memo;
mod ready;
mod reconcile;

use std::{sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    runtime::{Controller, WatchStreamExt, reflector, watcher},
};
use tracing_subscriber::EnvFilter;

use crate::{
    cache::Cache,
    reconcile::{Ctx, error_policy, reconcile},
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        // Colours only on a terminal, as khai does: scripts/bench reads the log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let client = Client::try_default().await?;
    let resync = resync_interval()?;
    run(client, resync).await;
    Ok(())
}

async fn run(client: Client, resync: Option<Duration>) {
    // `.owns()` in kube-runtime 5 watches children metadata-only, which cannot tell whether a
    // ConfigMap's data drifted. One full ConfigMap watch feeding both a reflector store (for the
    // change-only apply) and the owner trigger does both jobs with a single watch, where
    // `.owns()` plus a separate reflector would open two.
    let (config_maps, writer) = reflector::store::<ConfigMap>();
    let cm_events = watcher(
        Api::<ConfigMap>::all(client.clone()),
        watcher::Config::default(),
    )
    .reflect(writer)
    .touched_objects();

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config_maps: ready::ReadyStore::new(config_maps),
        written: memo::Written::default(),
    });
    let mut controller = Controller::new(Api::<Cache>::all(client), watcher::Config::default())
        .owns_stream(cm_events)
        .shutdown_on_signal();
    if let Some(every) = resync {
        controller = controller.reconcile_all_on(ticks(every));
    }
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            if let Err(err) = res {
                tracing::debug!(%err, "controller event");
            }
            std::future::ready(())
        })
        .await;
}

fn resync_interval() -> Result<Option<Duration>, String> {
    match std::env::var("BASELINE_RESYNC_SECS") {
        Err(_) => Ok(None),
        Ok(s) => s
            .parse::<u64>()
            .map(|n| (n > 0).then(|| Duration::from_secs(n)))
            .map_err(|e| format!("BASELINE_RESYNC_SECS={s:?}: {e}")),
    }
}

/// A tick every `every`, first one after a full period (startup already reconciles everything).
fn ticks(every: Duration) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(every).await;
        Some(((), ()))
    })
}
