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

/// [`serve`] on a thread and runtime of its own, so answering a review never waits behind the
/// reconciles on khai's worker threads: the API server holds every create and update it sends
/// for review until the answer, so a review queued behind a batch of reconciles slows every
/// write to the operator's kinds. Resolves when the listener stops accepting (on `shutdown`);
/// the thread answers what is still in flight for up to the request timeout, then ends.
pub(crate) async fn serve_on_own_thread(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: Arc<Routes>,
    options: Options,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let accepting = spawn_thread(listener, acceptor, routes, options, shutdown)?;
    accepting
        .await
        .map_err(|_| "the webhook thread ended before it stopped accepting".to_string())
}

/// Starts the webhook thread serving `listener`; the receiver hears when it stops accepting.
fn spawn_thread(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: Arc<Routes>,
    options: Options,
    shutdown: CancellationToken,
) -> Result<tokio::sync::oneshot::Receiver<()>, String> {
    let listener = listener
        .into_std()
        .map_err(|e| format!("could not hand the listener to the webhook thread: {e}"))?;
    let runtime = crate::pace::paced(&mut tokio::runtime::Builder::new_current_thread())
        .enable_all()
        // Webhook scripts run on this thread or its blocking pool, as on the worker threads.
        .thread_stack_size(crate::script::stack::THREAD_STACK)
        .build()
        .map_err(|e| format!("could not start the webhook thread's runtime: {e}"))?;
    let (stopped, accepting_ended) = tokio::sync::oneshot::channel::<()>();
    let thread = move || {
        runtime.block_on(async move {
            let listener = match TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    return tracing::error!(error = %e, "webhook: could not listen on the webhook thread");
                }
            };
            serve(listener, acceptor, routes, options, shutdown).await;
            let _ = stopped.send(());
            tokio::time::sleep(options.timeout).await;
        });
    };
    std::thread::Builder::new()
        .name("khai-webhook".into())
        .stack_size(crate::script::stack::THREAD_STACK)
        .spawn(thread)
        .map_err(|e| format!("could not start the webhook thread: {e}"))?;
    Ok(accepting_ended)
}

/// Serves `listener` until `shutdown`.
async fn serve(
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

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};

    /// A review is answered while the runtime that started the server does nothing at all, as
    /// when reconciles hold khai's one worker thread: the webhook has a thread of its own.
    #[test]
    fn the_webhook_answers_while_the_runtime_that_started_it_is_held() {
        let (pair, ca) = crate::webhook::ca::self_signed(&["webhook.test".into()]).unwrap();
        let files = (std::path::Path::new("c"), std::path::Path::new("k"));
        let key = crate::webhook::tls::certified_key(&pair, files).unwrap();
        let resolver = crate::webhook::tls::Resolver::new(key);
        let config = crate::webhook::tls::server_config(resolver).unwrap();
        let timeout = Duration::from_secs(5);
        let limits = routes::Limits {
            max_body: 1 << 20,
            admissions: 4,
            conversions: 4,
            queued: 4,
            timeout,
        };
        let routes = Arc::new(Routes::new(Vec::new(), limits, None));
        let options = Options {
            timeout,
            max_connections: 4,
        };
        let shutdown = CancellationToken::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (addr, accepting) = rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let acceptor = TlsAcceptor::from(Arc::new(config));
            let accepting = spawn_thread(listener, acceptor, routes, options, shutdown.clone());
            (addr, accepting.unwrap())
        });

        // `rt` is not driven from here on: only the webhook thread can answer.
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(rustls::pki_types::CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("webhook.test").unwrap();
        let tls = rustls::ClientConnection::new(Arc::new(client), name).unwrap();
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(timeout)).unwrap();
        let mut stream = rustls::StreamOwned::new(tls, tcp);
        stream
            .write_all(b"GET /nowhere HTTP/1.1\r\nhost: webhook.test\r\nconnection: close\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 404"),
            "no answer while the starting runtime was held ({read:?}): {answer:?}"
        );

        shutdown.cancel();
        rt.block_on(accepting).unwrap();
    }
}
