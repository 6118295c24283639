//! The life of a run around the controllers: readiness once caches are synced, waiting for and
//! holding the leader lease, and draining in-flight reconciles on shutdown.

use super::Error;
use crate::leader::Elector;
use crate::operator::Operator;
use crate::watch::Informer;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Exports the running config's hash, source and version (`khai_config_hash`,
/// `khai_config_info`), and tells the console.
pub(super) fn config_loaded(op: &Operator) {
    let version = op.config.version.as_deref().unwrap_or_default();
    let source = op.config.file.display().to_string();
    let hash = config_hash(op);
    crate::metrics::config_loaded(hash, &source, version);
    crate::console::config_loaded(op, hash);
}

/// A hash of the model and every script's text.
fn config_hash(op: &Operator) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&op.config.model)
        .unwrap_or_default()
        .hash(&mut h);
    for s in &op.scripts {
        s.source_hash().hash(&mut h);
    }
    h.finish()
}

/// Marks the process ready once every informer has its first full list.
pub(super) async fn report_synced(informers: Vec<Arc<Informer>>) {
    let waiting = informers.iter().map(|i| async move {
        if tokio::time::timeout(SLOW_SYNC, i.synced()).await.is_err() {
            tracing::warn!(kind = %i.kind.resource.kind, namespace = ?i.namespace, after = ?SLOW_SYNC, "still waiting for the first full list of this kind; not ready yet");
            i.synced().await;
        }
    });
    futures::future::join_all(waiting).await;
    tracing::info!(informers = informers.len(), "caches synced; ready");
    crate::metrics::caches_synced(true);
}

/// How long a first list may take before khai says which kind it is still waiting for.
const SLOW_SYNC: Duration = Duration::from_secs(10);

/// Waits for this replica to lead, runs the controllers while it does, and releases the lease on
/// shutdown. Losing the lease stops the controllers at once (in-flight reconciles are dropped,
/// not finished: another replica may already be starting) and ends the run with an error.
pub(super) async fn lead(
    mut elector: Elector,
    controllers: impl std::future::Future<Output = ()>,
    shutdown: &CancellationToken,
    grace: Duration,
) -> Result<(), Error> {
    let lease = elector.settings().lease_name.clone();
    let identity = elector.settings().identity.clone();
    crate::metrics::leader(&lease, false);
    tracing::info!(%lease, %identity, "waiting to become leader");
    tokio::select! {
        () = elector.acquire() => {}
        () = shutdown.cancelled() => return Ok(()),
    }
    crate::metrics::leader(&lease, true);
    tracing::info!(%lease, %identity, "became leader; starting controllers");
    let lost = {
        let controllers = drain(controllers, shutdown, grace);
        tokio::select! {
            () = controllers => None,
            why = elector.hold() => Some(why),
        }
    };
    crate::metrics::leader(&lease, false);
    match lost {
        Some(why) => {
            tracing::error!(%lease, reason = %why, "lost the lease; stopped reconciling");
            Err(Error::LostLease { lease, reason: why })
        }
        None => {
            elector.release().await;
            Ok(())
        }
    }
}

/// Runs `controllers` to their end; once `shutdown` is cancelled they get `grace` to finish
/// their in-flight reconciles, after which they are dropped.
pub(super) async fn drain(
    controllers: impl std::future::Future<Output = ()>,
    shutdown: &CancellationToken,
    grace: Duration,
) {
    futures::pin_mut!(controllers);
    tokio::select! {
        () = &mut controllers => return,
        () = shutdown.cancelled() => {}
    }
    if tokio::time::timeout(grace, controllers).await.is_err() {
        tracing::warn!(
            ?grace,
            "in-flight reconciles did not finish within the shutdown grace period; abandoning them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::time::Instant;

    /// Controllers that, once `shutdown` is cancelled, need `work` to finish their in-flight
    /// reconciles; `finished` says whether they did.
    async fn controllers(shutdown: CancellationToken, work: Duration, finished: Arc<AtomicBool>) {
        shutdown.cancelled().await;
        tokio::time::sleep(work).await;
        finished.store(true, Ordering::SeqCst);
    }

    #[tokio::test(start_paused = true)]
    async fn in_flight_reconciles_finish_within_the_grace() {
        let shutdown = CancellationToken::new();
        let finished = Arc::new(AtomicBool::new(false));
        let running = controllers(shutdown.clone(), Duration::from_secs(3), finished.clone());
        shutdown.cancel();
        let started = Instant::now();
        drain(running, &shutdown, Duration::from_secs(10)).await;
        assert!(finished.load(Ordering::SeqCst));
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(3),
            "no waiting past their end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reconciles_past_the_grace_are_abandoned_at_the_grace() {
        let shutdown = CancellationToken::new();
        let finished = Arc::new(AtomicBool::new(false));
        let running = controllers(shutdown.clone(), Duration::from_secs(60), finished.clone());
        shutdown.cancel();
        let started = Instant::now();
        drain(running, &shutdown, Duration::from_secs(10)).await;
        assert!(!finished.load(Ordering::SeqCst));
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn controllers_that_end_on_their_own_end_the_drain_without_a_shutdown() {
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        drain(
            tokio::time::sleep(Duration::from_secs(5)),
            &shutdown,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(!shutdown.is_cancelled());
    }
}
