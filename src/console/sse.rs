//! `GET /api/stream`: Server-Sent Events, one `data:` line of JSON per change (a turn ended, a
//! config loaded or failed), so a page or `curl -N` sees the operator work without polling.
//!
//! A reconcile only hands the feed a [`Change`] (a shared key and a word); each client's stream
//! turns changes into JSON itself, so nothing is encoded while no one listens. A stream sends
//! a change as soon as it comes, then at most one frame per [`BATCH_EVERY`] holding every
//! change since: a burst of a thousand turns is a handful of writes, each event still its own
//! `data:` line. Each client reads from a bounded broadcast channel: one that falls more than
//! its capacity behind is sent `{"type":"lagged","missed":N}` and carries on from the newest
//! change, so a slow client never holds memory. A comment line every [`KEEP_ALIVE`] keeps
//! proxies from closing a quiet stream.

use super::history::ObjectKey;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Bytes;
use hyper::body::Frame;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};
use tokio::time::Instant;

/// How often a quiet stream gets a comment line.
pub(super) const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The shortest time between two frames of changes.
pub(super) const BATCH_EVERY: Duration = Duration::from_millis(250);
/// The most changes one frame holds; the rest go in the next.
const MAX_BATCH: usize = 4096;

/// One change the stream reports.
#[derive(Debug, Clone)]
pub(super) enum Change {
    /// A reconcile of `key` ended with `result` (`success`, `requeue` or `error`).
    Turn {
        key: Arc<ObjectKey>,
        result: &'static str,
    },
    /// A config version `loaded` or `failed` to load.
    Config { result: &'static str },
}

/// A change as the stream writes it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line<'a> {
    Turn {
        controller: &'a str,
        namespace: Option<&'a str>,
        name: &'a str,
        result: &'a str,
    },
    Config {
        result: &'a str,
    },
    Lagged {
        missed: u64,
    },
}

impl Line<'_> {
    /// Appends this as one event to `out`.
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        // Writing plain strings and numbers into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, self);
        out.extend_from_slice(b"\n\n");
    }
}

impl Change {
    fn line(&self) -> Line<'_> {
        match self {
            Change::Turn { key, result } => Line::Turn {
                controller: &key.controller,
                namespace: key.namespace.as_deref(),
                name: &key.name,
                result,
            },
            Change::Config { result } => Line::Config { result },
        }
    }
}

/// The body of one event stream, fed by `feed`.
pub(super) fn stream(feed: broadcast::Receiver<Change>) -> UnsyncBoxBody<Bytes, Infallible> {
    let hello = Frame::data(Bytes::from_static(
        b"retry: 2000\ndata: {\"type\":\"hello\"}\n\n",
    ));
    let first = futures::stream::once(async { Ok(hello) });
    let mut tick = tokio::time::interval(KEEP_ALIVE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rest = futures::stream::unfold(
        (feed, tick, None),
        |(mut feed, mut tick, not_before): (_, _, Option<Instant>)| async move {
            if let Some(at) = not_before {
                tokio::time::sleep_until(at).await;
            }
            let mut out = Vec::new();
            tokio::select! {
                change = feed.recv() => match change {
                    Ok(change) => {
                        change.line().write(&mut out);
                        drain(&mut feed, &mut out);
                    }
                    Err(RecvError::Lagged(missed)) => Line::Lagged { missed }.write(&mut out),
                    Err(RecvError::Closed) => return None,
                },
                _ = tick.tick() => {
                    let alive = Frame::data(Bytes::from_static(b": keep-alive\n\n"));
                    return Some((Ok(alive), (feed, tick, None)));
                }
            }
            let next = Some(Instant::now() + BATCH_EVERY);
            Some((Ok(Frame::data(Bytes::from(out))), (feed, tick, next)))
        },
    );
    StreamBody::new(futures::StreamExt::chain(first, rest)).boxed_unsync()
}

/// Appends the changes already waiting in `feed`, up to [`MAX_BATCH`], ending at a lag.
fn drain(feed: &mut broadcast::Receiver<Change>, out: &mut Vec<u8>) {
    for _ in 1..MAX_BATCH {
        match feed.try_recv() {
            Ok(change) => change.line().write(out),
            Err(TryRecvError::Lagged(missed)) => {
                Line::Lagged { missed }.write(out);
                return;
            }
            Err(TryRecvError::Empty | TryRecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    async fn next_text(body: &mut UnsyncBoxBody<Bytes, Infallible>) -> String {
        let frame = body.frame().await.unwrap().unwrap();
        String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap()
    }

    fn turn(name: &str) -> Change {
        Change::Turn {
            key: Arc::new(ObjectKey {
                controller: "cache".into(),
                namespace: Some("default".into()),
                name: name.into(),
            }),
            result: "success",
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_arrive_as_data_lines_and_a_slow_client_is_told_what_it_missed() {
        let (tx, rx) = broadcast::channel(2);
        let mut body = stream(rx);
        assert!(next_text(&mut body).await.contains("\"hello\""));
        // The first tick of an interval is immediate.
        assert_eq!(next_text(&mut body).await, ": keep-alive\n\n");
        tx.send(Change::Config { result: "loaded" }).unwrap();
        assert_eq!(
            next_text(&mut body).await,
            "data: {\"type\":\"config\",\"result\":\"loaded\"}\n\n"
        );
        for i in 0..5 {
            tx.send(turn(&format!("c{i}"))).unwrap();
        }
        assert_eq!(
            next_text(&mut body).await,
            "data: {\"type\":\"lagged\",\"missed\":3}\n\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_turns_after_the_first_comes_as_one_frame_of_one_event_each() {
        let (tx, rx) = broadcast::channel(1024);
        let mut body = stream(rx);
        next_text(&mut body).await;
        next_text(&mut body).await;
        let started = Instant::now();
        tx.send(turn("first")).unwrap();
        assert_eq!(
            next_text(&mut body).await,
            "data: {\"type\":\"turn\",\"controller\":\"cache\",\"namespace\":\"default\",\
             \"name\":\"first\",\"result\":\"success\"}\n\n"
        );
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the first change should go at once"
        );
        for i in 0..1000 {
            tx.send(turn(&format!("c{i}"))).unwrap();
        }
        let batch = next_text(&mut body).await;
        assert_eq!(started.elapsed(), BATCH_EVERY);
        assert_eq!(batch.matches("data: ").count(), 1000, "{batch}");
        assert!(batch.ends_with("\"name\":\"c999\",\"result\":\"success\"}\n\n"));
    }
}
