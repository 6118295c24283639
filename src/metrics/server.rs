//! The operations port: `/metrics` (Prometheus text format), `/healthz` and `/readyz`, and with a
//! candidate revision `/candidate/divergent` (see [`serve_candidate`]).
//!
//! Plain HTTP/1.1 on its own listener, apart from any webhook server, so scraping and probing
//! never compete with admission traffic. `/healthz` is answered by a task on the same runtime as
//! the controllers, so a 200 proves the process is alive and the runtime is still scheduling
//! work. `/readyz` answers 503 until the config is loaded and every informer has its first full
//! list, then 200; it does not depend on leadership, so standby replicas are ready too.
//!
//! Hostile clients cannot lock probes out: a client gets [`HEADER_TIMEOUT`] to send its
//! headers (and a kept-alive connection as long to stay idle), at most [`MAX_CONNECTIONS`] are
//! open at once with the oldest idle one closed to make room, and running out of file
//! descriptors makes the accept loop back off and log instead of spinning (see [`crate::serve`]).

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// Connections open at once; beyond it the oldest idle one is closed (see [`crate::serve`]).
/// Probes and scrapes each need one, briefly.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request headers, and how long a kept-alive
/// connection may stay idle before it is closed.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` (port 0: a free port, logged as `listening = "metrics"` and `address`) and
/// creates every metric, so a taken port fails `khai run` at start and the first scrape lists
/// every family.
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    super::init();
    let (listener, _) =
        crate::serve::listen(addr, "metrics", "/metrics, /healthz and /readyz").await?;
    Ok(listener)
}

/// Serves connections from `listener` for the life of the process, so probes and scrapes are
/// answered during a graceful shutdown too.
pub(crate) async fn serve(listener: TcpListener) {
    // Answers are computed at once, so a request busy for longer than the header timeout is a
    // client that does not read its answer.
    crate::serve::serve_plain(listener, "metrics", MAX_CONNECTIONS, HEADER_TIMEOUT, handle).await;
}

async fn handle(req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    let (status, ctype, body) = route(req.uri().path());
    reply(status, ctype, body)
}

/// What renders the candidate revision's divergent objects: `true` for text, `false` for JSON.
pub(crate) type CandidatePage = Box<dyn Fn(bool) -> String + Send + Sync>;

static CANDIDATE: std::sync::OnceLock<CandidatePage> = std::sync::OnceLock::new();

/// Serves `page` at `/candidate/divergent` (JSON) and `/candidate/divergent.txt` (text) from
/// now on; set once, by the daemon that runs a candidate.
pub(crate) fn serve_candidate(page: CandidatePage) {
    let _ = CANDIDATE.set(page);
}

/// What each path answers: status, content type, body.
fn route(path: &str) -> (StatusCode, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match path {
        "/metrics" => (StatusCode::OK, "text/plain; version=0.0.4", super::encode()),
        "/healthz" | "/livez" => (StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match super::not_ready() {
            None => (StatusCode::OK, TEXT, "ok\n".into()),
            Some(why) => (StatusCode::SERVICE_UNAVAILABLE, TEXT, format!("{why}\n")),
        },
        "/candidate/divergent" | "/candidate/divergent.txt" => match CANDIDATE.get() {
            Some(page) if path.ends_with(".txt") => (StatusCode::OK, TEXT, page(true)),
            Some(page) => (StatusCode::OK, "application/json", page(false)),
            None => (
                StatusCode::NOT_FOUND,
                TEXT,
                "no candidate revision is loaded (khai run --candidate)\n".into(),
            ),
        },
        _ => (StatusCode::NOT_FOUND, TEXT, "not found\n".into()),
    }
}

fn reply(status: StatusCode, ctype: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_paths_are_not_found_and_healthz_is_ok() {
        assert_eq!(route("/nope").0, StatusCode::NOT_FOUND);
        assert_eq!(route("/healthz").0, StatusCode::OK);
        assert_eq!(route("/metrics").0, StatusCode::OK);
    }
}
