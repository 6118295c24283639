//! Work that runs on one replica of all the shards: only while this replica holds the sharder
//! Lease, stopped the moment it loses it, and started again should it take the Lease back.
//! `[[schedule]]`s run this way, so a schedule runs once per time, not once per shard.

use std::future::Future;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Runs `work` each time `holding` turns true, until it turns false (the work is dropped then)
/// or `shutdown`. `work` is given a token cancelled when it must stop.
pub(crate) async fn while_holding<F, Fut>(
    mut holding: watch::Receiver<bool>,
    shutdown: &CancellationToken,
    mut work: F,
) where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        tokio::select! {
            held = holding.wait_for(|h| *h) => if held.is_err() { return },
            () = shutdown.cancelled() => return,
        }
        tracing::debug!("holding the sharder lease: the work of one replica runs here");
        let stop = shutdown.child_token();
        let mut lost = holding.clone();
        tokio::select! {
            () = work(stop.clone()) => {}
            _ = lost.wait_for(|h| !*h) => {
                tracing::debug!("lost the sharder lease: the work of one replica stops here");
            }
            () = shutdown.cancelled() => {}
        }
        stop.cancel();
        if shutdown.is_cancelled() {
            return;
        }
        // The work ended on its own (no schedule left) or the Lease was lost: wait for the next
        // time this replica holds it.
        if holding.wait_for(|h| !*h).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Counts the runs of a "schedule" that ticks every second while it may.
    #[tokio::test(start_paused = true)]
    async fn work_runs_only_while_the_lease_is_held_and_resumes_when_it_is_taken_back() {
        let (tx, rx) = watch::channel(false);
        let shutdown = CancellationToken::new();
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            while_holding(rx, &stop, |token| {
                let counted = counted.clone();
                async move {
                    while !token.is_cancelled() {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
            .await;
        });
        tokio::time::sleep(Duration::from_millis(5500)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 0, "not held: nothing runs");
        tx.send_replace(true);
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 3);
        tx.send_replace(false);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 3, "lost: stops at once");
        tx.send_replace(true);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 5, "taken back: runs again");
        shutdown.cancel();
        task.await.unwrap();
    }
}
