//! Binding a server's listener and saying where it listens: with port 0 the OS picks a free
//! port, and the log line is the only place that names it, so it carries the address as
//! structured fields (`listening` names the server, `address` is what it bound), which tests,
//! scripts and log pipelines read instead of the wording.

use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Binds `addr` (port 0: a free port the OS picks) for `server` (`metrics`, `webhook`,
/// `console`) and logs, at `info`, `listening = server` and `address` = the address bound,
/// with a message saying it serves `what`. Returns the listener and that address.
pub(crate) async fn listen(
    addr: SocketAddr,
    server: &'static str,
    what: &str,
) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(listening = server, address = %bound, "serving {what} on {bound}");
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn port_0_binds_a_free_port_and_returns_the_address_that_serves() {
        let (listener, bound) = listen("127.0.0.1:0".parse().unwrap(), "test", "nothing")
            .await
            .unwrap();
        assert_ne!(bound.port(), 0, "the OS picked a port");
        let connect = tokio::net::TcpStream::connect(bound);
        let (accepted, connected) = tokio::join!(listener.accept(), connect);
        let (_, peer) = accepted.unwrap();
        assert_eq!(peer, connected.unwrap().local_addr().unwrap());
    }
}
