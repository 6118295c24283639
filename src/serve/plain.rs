//! Serving plain HTTP/1.1 (the metrics port, the console) within the caps of this module: each
//! connection takes a [`Slot`](super::Slot), its requests mark it busy until their answer has
//! been handed to the socket, its headers must arrive within the header timeout, and it is
//! closed when the slot is taken back for a newer connection.

use super::{Accept, Guarded, Slots};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::time::Duration;
use tokio::net::TcpListener;

/// Serves connections from `listener` for ever: at most `cap` open at once, each with
/// `timeout` to send its headers (and to stay idle between requests). `server` names the server
/// in logs; `handle` answers one request.
pub(crate) async fn serve<H, F, B>(
    listener: TcpListener,
    server: &'static str,
    cap: usize,
    timeout: Duration,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut accept = Accept::new(listener, server);
    let slots = Slots::new(server, cap, timeout);
    loop {
        let stream = accept.next().await;
        let Some(slot) = slots.admit() else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let tracker = slot.tracker();
            let service = service_fn(move |req| {
                let busy = tracker.busy();
                let answer = handle(req);
                async move { Ok::<_, Infallible>(answer.await.map(|b| Guarded::new(b, busy))) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = slot.closed() => {
                    tracing::debug!(server, "closed an idle connection to make room for a new one");
                }
                done = conn => if let Err(e) = done {
                    tracing::debug!(server, error = %e, "connection ended with an error");
                }
            }
        });
    }
}
