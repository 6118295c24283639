//! Every replica's view of the ring: a watch on the operator's shard Leases, judged live by the
//! sharder's own rule ([`super::sharder::Members`]), published as a [`Ring`] each time the
//! membership changes. The assignment webhook reads it; it holds one Lease per shard.

use super::Settings;
use super::ring::Ring;
use super::sharder::Members;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use std::time::Duration;
use tokio::sync::watch;
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
    let api: kube::Api<Lease> = kube::Api::namespaced(client, &settings.namespace);
    let config = watcher::Config::default().labels(&settings.lease_selector());
    let duration = settings.lease_duration;
    tasks.spawn("shard ring view", async move {
        shutdown
            .run_until_cancelled(follow(api, config, duration, tx))
            .await;
    });
    rx
}

/// Judges the Leases again on each change, and when the first live one would expire.
async fn follow(
    api: kube::Api<Lease>,
    config: watcher::Config,
    duration: Duration,
    tx: watch::Sender<Ring>,
) {
    let writer = Writer::default();
    let store = writer.as_reader();
    let mut events =
        std::pin::pin!(reflector::reflector(writer, watcher(api, config)).default_backoff());
    let mut members = Members::default();
    let mut listed = false;
    loop {
        let wake = members
            .next_expiry
            .map_or(Instant::now() + duration, |e| e + Duration::from_millis(10));
        tokio::select! {
            event = events.next() => match event {
                // The store holds the whole list from `InitDone` on.
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                Some(Ok(_)) => listed = true,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "shard Lease watch failed; retrying");
                    continue;
                }
                None => return,
            },
            () = tokio::time::sleep_until(wake) => {}
        }
        if !listed {
            // Nothing seen yet: no Lease, or the first list is still on its way.
            continue;
        }
        let leases: Vec<Lease> = store.state().iter().map(|l| (**l).clone()).collect();
        let seen = members.observe(&leases, duration, Instant::now());
        let ring = Ring::new(seen.iter().filter(|m| m.live).map(|m| m.shard.as_str()));
        tx.send_if_modified(|r| {
            let changed = *r != ring;
            if changed {
                *r = ring;
            }
            changed
        });
    }
}
