//! The HTTPS listener: TLS handshakes, HTTP/1.1 connections, timeouts, a cap on connections,
//! and stopping on shutdown.
//!
//! Each connection runs on its own task. A handshake, the wait for a request's headers (also
//! the longest a kept-alive connection stays idle) and answering one request each get
//! `timeout`, so a slow or silent client holds nothing for long; at most `max_connections` are
//! open, the oldest idle one closed to make room for a new one; and accept failures (no file
//! descriptors left) back off and are logged (see [`crate::serve`]). A request whose handling
//! panics is answered 500 and logged, and the server keeps serving. The listener stops
//! accepting when `shutdown` is cancelled.

use super::routes::{self, Routes};
use crate::serve::{Accept, Guarded, Slot, Slots};
use futures::FutureExt;
use hyper::StatusCode;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How the server treats connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Handshake, header read, idle keep-alive and one request, each.
    pub timeout: Duration,
    /// Connections open at once.
    pub(crate) max_connections: usize,
}

/// Serves `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: Arc<Routes>,
    options: Options,
    shutdown: CancellationToken,
) {
    let mut accept = Accept::new(listener, "webhook");
    let slots = Slots::new("webhook", options.max_connections, options.timeout);
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            stream = accept.next() => stream,
        };
        let Some(slot) = slots.admit() else {
            continue;
        };
        let conn = connection(
            stream,
            acceptor.clone(),
            routes.clone(),
            options.timeout,
            &slot,
        );
        tokio::spawn(async move {
            tokio::select! {
                () = slot.closed() => {
                    tracing::debug!("webhook: closed an idle connection to make room for a new one");
                }
                () = conn => {}
            }
        });
    }
    tracing::debug!("webhook server stopped accepting");
}

fn connection(
    stream: TcpStream,
    acceptor: TlsAcceptor,
    routes: Arc<Routes>,
    t: Duration,
    slot: &Slot,
) -> impl Future<Output = ()> + Send + 'static {
    let tracker = slot.tracker();
    async move {
        let tls = match tokio::time::timeout(t, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return tracing::debug!(error = %e, "webhook: TLS handshake failed"),
            Err(_) => return tracing::debug!("webhook: TLS handshake timed out"),
        };
        let service = service_fn(move |req| {
            let routes = routes.clone();
            let busy = tracker.busy();
            async move {
                let res = answer(&routes, req, t).await;
                Ok::<_, Infallible>(res.map(|body| Guarded::new(body, busy)))
            }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(t)
            .serve_connection(TokioIo::new(tls), service)
            .await;
        if let Err(e) = conn {
            tracing::debug!(error = %e, "webhook: connection ended with an error");
        }
    }
}

/// One request's answer within `t`; a panic while answering becomes a 500.
async fn answer(
    routes: &Routes,
    req: hyper::Request<hyper::body::Incoming>,
    t: Duration,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    let handled = AssertUnwindSafe(tokio::time::timeout(t, routes.handle(req))).catch_unwind();
    match handled.await {
        Ok(Ok(res)) => res,
        Ok(Err(_)) => routes::error(
            StatusCode::GATEWAY_TIMEOUT,
            format!("no answer within {t:?}"),
        ),
        Err(panic) => {
            let why = crate::tasks::panic_message(panic.as_ref());
            tracing::error!(panic = %why, "webhook: answering a request panicked; answered 500");
            routes::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {why}"),
            )
        }
    }
}
