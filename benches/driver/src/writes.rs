//! Write requests, counted by the API server itself (`apiserver_request_total` on `/metrics`) and
//! by the bench client for its own requests. The cluster is dedicated to the bench, so the
//! server's count minus the client's is what the contender wrote.

use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Write requests by `"VERB resource[/subresource]"`.
pub type Writes = BTreeMap<String, u64>;

const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// Every write request the API server has served since it started.
pub async fn scrape(client: &kube::Client) -> Result<Writes> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client
        .request_text(req)
        .await
        .context("GET /metrics from the API server")?;
    Ok(parse(&text))
}

fn parse(text: &str) -> Writes {
    let mut out = Writes::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let verb = label(line, "verb");
        if !WRITE_VERBS.contains(&verb) {
            continue;
        }
        let Some(count) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *out.entry(key(
            verb,
            label(line, "resource"),
            label(line, "subresource"),
        ))
        .or_default() += count as u64;
    }
    out
}

fn label<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
}

/// The key a request is counted under, the same for both counts.
pub fn key(verb: &str, resource: &str, subresource: &str) -> String {
    if subresource.is_empty() {
        format!("{verb} {resource}")
    } else {
        format!("{verb} {resource}/{subresource}")
    }
}

/// What grew from `before` to `after`, less `minus`; zero entries are left out.
pub fn delta(before: &Writes, after: &Writes, minus: &Writes) -> Writes {
    after
        .iter()
        .filter_map(|(k, v)| {
            let base = before.get(k).copied().unwrap_or(0) + minus.get(k).copied().unwrap_or(0);
            let d = v.saturating_sub(base);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

pub fn total(w: &Writes) -> u64 {
    w.values().sum()
}

/// The bench client's own writes in the current phase, counted as they are sent (the server
/// counts failed requests too).
#[derive(Clone, Default)]
pub struct Own(Arc<Mutex<Writes>>);

impl Own {
    pub fn add(&self, verb: &str, resource: &str, subresource: &str) {
        let mut w = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *w.entry(key(verb, resource, subresource)).or_default() += 1;
    }

    /// The counts so far, and a fresh start for the next phase.
    pub fn take(&self) -> Writes {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// How long the server's write counts must stay unchanged before a phase's writes are closed.
const QUIET: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(250);
const MAX_SETTLE: Duration = Duration::from_secs(15);

/// Waits until no write has reached the server for [`QUIET`] (at most [`MAX_SETTLE`]) and returns
/// the counts then. Operators write some things after the object looks done (Kopf's annotations
/// and Events), and those belong to the phase that caused them, not to the next one. Nothing
/// signals "no more writes", so this polls the server's counter.
pub async fn settle(client: &kube::Client) -> Result<Writes> {
    let deadline = Instant::now() + MAX_SETTLE;
    let mut last = scrape(client).await?;
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(POLL).await;
        let now = scrape(client).await?;
        if now != last {
            last = now;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= QUIET || Instant::now() >= deadline {
            return Ok(last);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_writes_by_verb_and_resource() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="bench.khai.dev",resource="caches",scope="namespace",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="bench.khai.dev",resource="caches",scope="namespace",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="APPLY",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 99
"#;
        let w = parse(text);
        assert_eq!(w.get("POST caches"), Some(&10));
        assert_eq!(w.get("PATCH caches/status"), Some(&7));
        assert_eq!(w.get("APPLY configmaps"), Some(&4));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn delta_subtracts_the_start_and_the_clients_own_writes() {
        let before = Writes::from([("POST caches".into(), 5)]);
        let after = Writes::from([("POST caches".into(), 15), ("APPLY configmaps".into(), 10)]);
        let own = Writes::from([("POST caches".into(), 10)]);
        let d = delta(&before, &after, &own);
        assert_eq!(d, Writes::from([("APPLY configmaps".into(), 10)]));
        assert_eq!(total(&d), 10);
    }
}
