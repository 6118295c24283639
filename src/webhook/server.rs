//! The HTTPS listener: TLS handshakes, HTTP/1.1 connections, timeouts, and stopping on
//! shutdown.
//!
//! Each connection runs on its own task; a handshake, reading request headers and answering one
//! request each get `timeout`, so a slow or silent client holds nothing for long. The listener
//! stops accepting when `shutdown` is cancelled.

use super::routes::{self, Routes};
use hyper::StatusCode;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// Serves `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: Arc<Routes>,
    timeout: Duration,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "webhook: accept failed");
                    continue;
                }
            },
        };
        tokio::spawn(connection(
            stream,
            acceptor.clone(),
            routes.clone(),
            timeout,
        ));
    }
    tracing::debug!("webhook server stopped accepting");
}

async fn connection(stream: TcpStream, acceptor: TlsAcceptor, routes: Arc<Routes>, t: Duration) {
    let tls = match tokio::time::timeout(t, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return tracing::debug!(error = %e, "webhook: TLS handshake failed"),
        Err(_) => return tracing::debug!("webhook: TLS handshake timed out"),
    };
    let service = service_fn(move |req| {
        let routes = routes.clone();
        async move {
            let res = match tokio::time::timeout(t, routes.handle(req)).await {
                Ok(res) => res,
                Err(_) => routes::error(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("no answer within {t:?}"),
                ),
            };
            Ok::<_, Infallible>(res)
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
