//! Every replica's view of the ring: a watch on the operator's shard Leases, judged live by the
//! sharder's own rule ([`super::members::Members`]), published as a [`Ring`] each time the
//! membership changes. The assignment webhook reads it; it holds one Lease per shard.

use super::Settings;
use super::members::{self, Members};
use super::ring::Ring;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::Store;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The ring as this replica last judged it; empty until the Leases are first listed.
pub(crate) type RingView = watch::Receiver<Ring>;

/// Starts watching the shard Leases of `settings`' operator; the view follows them until
/// `shutdown`.
pub(crate) fn start(
    client: kube::Client,
    settings: &Settings,
    tasks: &crate::tasks::Tasks,
    shutdown: CancellationToken,
) -> RingView {
    let (tx, rx) = watch::channel(Ring::default());
    let changed = Arc::new(Notify::new());
    let members = Arc::new(Mutex::new(Members::default()));
    let (leases, watching) = members::watch(&client, settings, members.clone(), changed.clone());
    let duration = settings.lease_duration;
    tasks.spawn("shard ring view", async move {
        let following = async {
            tokio::join!(watching, follow((leases, members), changed, duration, tx));
        };
        shutdown.run_until_cancelled(following).await;
    });
    rx
}

/// Judges the Leases again on each change, and when the first live one would expire.
async fn follow(
    (leases, members): (Store<Lease>, Arc<Mutex<Members>>),
    changed: Arc<Notify>,
    duration: Duration,
    tx: watch::Sender<Ring>,
) {
    // Nothing is judged before the first list: an empty ring until then.
    if leases.wait_until_ready().await.is_err() {
        return;
    }
    loop {
        let (seen, next_expiry) = members::judge(&leases, &members, duration, Instant::now());
        tx.send_if_modified(|r| {
            let changed = r.set(seen.iter().filter(|m| m.live).map(|m| m.shard.as_str()));
            crate::metrics::ring_shards(r.shards().len());
            changed
        });
        let wake = next_expiry.map_or(Instant::now() + duration, |e| e + Duration::from_millis(10));
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
