//! The console's HTTP/1.1 server: plain HTTP on a loopback address, GET only.
//!
//! It survives hostile load the way the metrics server does ([`crate::serve`]): a client gets
//! [`HEADER_TIMEOUT`] to send its headers, at most [`MAX_CONNECTIONS`] are open at once with the
//! oldest idle one closed to make room (an event stream counts as idle once it has been open
//! longer than the header timeout, so streams cannot lock out requests), and failed accepts back
//! off instead of spinning.

use super::{Console, api, enable};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Connections open at once; beyond it the oldest idle one (or stream) is closed.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send its request headers, and how long a kept-alive
/// connection may stay idle.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the console cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The console has no authentication, so it only listens where only this machine (or a
    /// `kubectl port-forward`) reaches it.
    #[error(
        "--console {0}: not a loopback address; the console has no authentication, so it only \
         listens on 127.0.0.1 or [::1] (reach it from elsewhere with kubectl port-forward)"
    )]
    NotLoopback(SocketAddr),
    #[error("--console {addr}: failed to listen: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Binds `addr` and turns recording on, so a taken port or a non-loopback address fails
/// `khai run` at start, before any reconcile.
pub(crate) async fn bind(
    addr: SocketAddr,
    client: kube::Client,
) -> Result<(TcpListener, Arc<Console>), Error> {
    if !addr.ip().is_loopback() {
        return Err(Error::NotLoopback(addr));
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    Ok((listener, enable(client)))
}

/// Serves connections from `listener` for the life of the process.
pub(crate) async fn serve(listener: TcpListener, console: Arc<Console>) {
    let handle = move |req| {
        let console = Arc::clone(&console);
        async move { api::handle(&console, req).await }
    };
    crate::serve::serve_plain(listener, "console", MAX_CONNECTIONS, HEADER_TIMEOUT, handle).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_address_is_refused_with_the_reason() {
        let addr: SocketAddr = "0.0.0.0:8081".parse().unwrap_or_else(|_| unreachable!());
        let e = Error::NotLoopback(addr).to_string();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!(e.contains("kubectl port-forward"), "{e}");
    }
}
