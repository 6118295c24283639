//! `GET /api/stream`: Server-Sent Events, one `data:` line of JSON per change (a turn ended, a
//! config loaded or failed), so a page or `curl -N` sees the operator work without polling.
//!
//! Each client reads from a bounded broadcast channel: one that falls more than its capacity
//! behind is sent `{"type":"lagged","missed":N}` and carries on from the newest change, so a
//! slow client never holds memory. A comment line every [`KEEP_ALIVE`] keeps proxies from
//! closing a quiet stream.

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Bytes;
use hyper::body::Frame;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};

/// How often a quiet stream gets a comment line.
pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The body of one event stream, fed by `feed`.
pub(super) fn stream(feed: broadcast::Receiver<Arc<str>>) -> UnsyncBoxBody<Bytes, Infallible> {
    let hello = Frame::data(Bytes::from_static(
        b"retry: 2000\ndata: {\"type\":\"hello\"}\n\n",
    ));
    let first = futures::stream::once(async { Ok(hello) });
    let mut tick = tokio::time::interval(KEEP_ALIVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rest = futures::stream::unfold((feed, tick), |(mut feed, mut tick)| async move {
        let text = tokio::select! {
            change = feed.recv() => match change {
                Ok(change) => format!("data: {change}\n\n"),
                Err(RecvError::Lagged(missed)) => {
                    format!("data: {{\"type\":\"lagged\",\"missed\":{missed}}}\n\n")
                }
                Err(RecvError::Closed) => return None,
            },
            _ = tick.tick() => ": keep-alive\n\n".to_string(),
        };
        Some((Ok(Frame::data(Bytes::from(text))), (feed, tick)))
    });
    StreamBody::new(futures::StreamExt::chain(first, rest)).boxed_unsync()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn next_text(body: &mut UnsyncBoxBody<Bytes, Infallible>) -> String {
        let frame = body.frame().await.unwrap().unwrap();
        String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn changes_arrive_as_data_lines_and_a_slow_client_is_told_what_it_missed() {
        let (tx, rx) = broadcast::channel(2);
        let mut body = stream(rx);
        assert!(next_text(&mut body).await.contains("\"hello\""));
        // The first tick of an interval is immediate.
        assert_eq!(next_text(&mut body).await, ": keep-alive\n\n");
        tx.send(Arc::from("{\"type\":\"turn\"}")).unwrap();
        assert_eq!(next_text(&mut body).await, "data: {\"type\":\"turn\"}\n\n");
        for _ in 0..5 {
            tx.send(Arc::from("{}")).unwrap();
        }
        assert_eq!(
            next_text(&mut body).await,
            "data: {\"type\":\"lagged\",\"missed\":3}\n\n"
        );
    }
}
