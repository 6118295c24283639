//! The batch window of `khai run --reconcile-batch`: each trigger stream holds the requests it
//! yields and passes them on together, so a process fed slowly wakes once per batch rather than
//! once per object.

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use std::sync::OnceLock;
use std::time::Duration;

/// How long a controller holds reconcile requests before starting them together
/// (`khai run --reconcile-batch`); unset or zero starts each at once. Set once, at startup.
static BATCH_WINDOW: OnceLock<Duration> = OnceLock::new();

/// The most requests held in one batch: a longer burst is started as it arrives.
const MAX_BATCH: usize = 1024;

/// Sets the batch window of every controller this process runs (see [`batched`]).
pub(crate) fn set_batch_window(window: Duration) {
    // A second call (an embedder's) keeps the first window: controllers already run with it.
    let _ = BATCH_WINDOW.set(window);
}

/// `requests`, batched: with a batch window, each request is held until the window since the
/// first request of its batch has passed (or [`MAX_BATCH`] are held), then the batch is yielded
/// at once. The reconciles of a batch then start, write and hear their own watch events
/// together, so a process fed slowly wakes once per batch rather than once per object, for at
/// most the window of added latency.
pub(crate) fn batched<S>(requests: S) -> BoxStream<'static, S::Item>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    batched_by(requests, BATCH_WINDOW.get().copied())
}

/// [`batched`] with the window given.
fn batched_by<S>(requests: S, window: Option<Duration>) -> BoxStream<'static, S::Item>
where
    S: Stream + Send + 'static,
    S::Item: Send + 'static,
{
    match window.filter(|w| !w.is_zero()) {
        Some(window) => tokio_stream::StreamExt::chunks_timeout(requests, MAX_BATCH, window)
            .flat_map(futures::stream::iter)
            .boxed(),
        None => requests.boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When each of three requests sent 0, 10 and 20 ms apart comes out of [`batched_by`].
    async fn arrivals(window: Option<Duration>) -> Vec<Duration> {
        let (tx, rx) = futures::channel::mpsc::unbounded::<u32>();
        let sender = tokio::spawn(async move {
            for i in 0..3 {
                tx.unbounded_send(i).unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // The stream stays open past the window: a batch is not cut short by its end.
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(tx);
        });
        let start = tokio::time::Instant::now();
        let out: Vec<_> = batched_by(rx, window)
            .map(|i| (i, start.elapsed()))
            .collect()
            .await;
        sender.await.unwrap();
        assert_eq!(out.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1, 2]);
        out.into_iter().map(|(_, at)| at).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_window_holds_requests_until_the_window_since_the_first_has_passed() {
        let ms = Duration::from_millis;
        assert_eq!(arrivals(Some(ms(50))).await, [ms(50), ms(50), ms(50)]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_batch_window_each_request_comes_out_as_it_arrives() {
        let ms = Duration::from_millis;
        assert_eq!(arrivals(None).await, [ms(0), ms(10), ms(20)]);
        assert_eq!(arrivals(Some(ms(0))).await, [ms(0), ms(10), ms(20)]);
    }
}
