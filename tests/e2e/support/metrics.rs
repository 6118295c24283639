//! Reading khai's own `/metrics`, `/healthz` and `/readyz` over plain HTTP.

use super::DEADLINE;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` from `addr` over plain HTTP/1.1; returns status code and body.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// Polls `addr` (at most every 100 ms, until the deadline) until `pred` holds for the body of
/// `/metrics`; returns that body.
pub async fn metrics_until(addr: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (_, body) = http_get(addr, "/metrics").await;
        if pred(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what} on {addr}; last /metrics:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sum of every sample of `family` in a Prometheus text body.
pub fn sum(body: &str, family: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
