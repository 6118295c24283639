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

/// The samples of `family` whose labels include every `labels` pair, summed; `None` when no
/// sample matches (the series does not exist yet). Label values are compared as written in the
/// text format, so they must need no escaping.
pub fn sample(body: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!(",{k}=\"{v}\","))
        .collect();
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(family)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(r) => r.rsplit_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let set = format!(",{set},");
            wanted
                .iter()
                .all(|w| set.contains(w.as_str()))
                .then(|| value.parse::<f64>().ok())?
        })
        .reduce(|a, b| a + b)
}

/// Polls `addr`'s `/metrics` (as [`metrics_until`]) until the [`sample`] of `family` with
/// `labels` exists and satisfies `pred`; returns its value.
pub async fn wait_for_metric(
    addr: &str,
    what: &str,
    family: &str,
    labels: &[(&str, &str)],
    pred: impl Fn(f64) -> bool,
) -> f64 {
    let body = metrics_until(addr, what, |b| sample(b, family, labels).is_some_and(&pred)).await;
    sample(&body, family, labels).unwrap_or_default()
}

/// Waits until khai at `addr` has counted at least `n` config reloads with `result` (`success`
/// or `failure`, `khai_config_reloads_total`); returns the count.
pub async fn wait_for_reloads(addr: &str, result: &str, n: f64) -> f64 {
    let what = format!("{n} config reload(s) with result {result}");
    let labels = [("result", result)];
    wait_for_metric(addr, &what, "khai_config_reloads_total", &labels, |v| {
        v >= n
    })
    .await
}

/// Waits until khai at `addr` holds its lease (`leading`: its `leader_election_master_status`
/// is one) or waits for it as a standby (the series exists and is zero, as khai sets it before it
/// first tries to acquire the lease).
pub async fn wait_for_leadership(addr: &str, what: &str, leading: bool) {
    let want = if leading { 1.0 } else { 0.0 };
    wait_for_metric(addr, what, "leader_election_master_status", &[], |v| {
        v == want
    })
    .await;
}
