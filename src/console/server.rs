//! The console's HTTP/1.1 server: plain HTTP; off loopback every API request is authorized by
//! the API server ([`super::auth`]).
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
    #[error("--console {addr}: failed to listen: {cause}")]
    Bind {
        addr: SocketAddr,
        cause: std::io::Error,
    },
}

/// Binds `addr` (port 0: a free port, logged as `listening = "console"` and `address`) and
/// turns recording on, so a taken port fails `khai run` at start, before any
/// reconcile. Off loopback, every API request must then carry a token the API server accepts
/// and authorizes ([`super::auth`]).
pub(crate) async fn bind(
    addr: SocketAddr,
    client: kube::Client,
) -> Result<(TcpListener, Arc<Console>), Error> {
    let (listener, _) = crate::serve::listen(addr, "console", "the console")
        .await
        .map_err(|cause| Error::Bind { addr, cause })?;
    Ok((listener, enable(client, !addr.ip().is_loopback())))
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

    #[tokio::test]
    async fn a_taken_port_is_named_with_its_cause_once() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let client = crate::fake_api::FakeApi::default().client();
        let Err(e) = bind(addr, client).await else {
            panic!("bound a taken port")
        };
        let chain = format!("{:#}", anyhow::Error::from(e));
        assert!(
            chain.starts_with(&format!("--console {addr}: failed to listen: ")),
            "{chain}"
        );
        assert_eq!(chain.matches("in use").count(), 1, "{chain}");
    }
}
