//! The write requests an operator makes, counted from the API server's audit log, and the
//! requests the API server refused a ServiceAccount.
//!
//! `scripts/cluster` starts the API server with an audit policy that logs every write request
//! (create, update, patch, delete, deletecollection) with its user agent and object, and every
//! request of a ServiceAccount (reads too) with its answer's code. khai sends the user agent
//! `khai/<version>`, so the writes khai made in a test's namespace can be counted exactly even
//! while other tests write to the same server at the same time.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Writes by `verb resource[/subresource]`, e.g. `patch configmaps` or `patch items/status`.
pub type Writes = BTreeMap<String, u64>;

/// A point in an audit log; writes are counted from here on. The API server logs a request
/// once it has answered, so a request received before the mark can still be logged after the
/// end of the log the mark saw: a mark keeps the time too, and such a request is not counted.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    log: &'static Path,
    at: u64,
    since: jiff::Timestamp,
}

static SHARED_LOG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn log_path() -> &'static Path {
    SHARED_LOG.get_or_init(shared_log_path)
}

fn shared_log_path() -> PathBuf {
    let dir = super::kubeconfig()
        .parent()
        .expect("the kubeconfig lies in the cluster's directory")
        .to_path_buf();
    let path = dir.join("logs/audit.log");
    assert!(
        path.exists() || std::env::var_os("KHAI_TEST_KUBECONFIG").is_none(),
        "counting writes needs the audit log of a cluster started by scripts/cluster; \
         KHAI_TEST_KUBECONFIG points at another cluster"
    );
    path
}

/// The end of the shared cluster's audit log now.
pub fn mark() -> Mark {
    mark_in(log_path())
}

/// The end of the audit log `log` (another cluster's) now.
pub fn mark_in(log: &'static Path) -> Mark {
    Mark {
        log,
        since: jiff::Timestamp::now(),
        at: std::fs::metadata(log).map_or(0, |m| m.len()),
    }
}

/// The verbs of write requests.
const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// Whether audit event `e` is a write (reads are logged for ServiceAccounts only).
fn is_write(e: &serde_json::Value) -> bool {
    e["verb"].as_str().is_some_and(|v| WRITE_VERBS.contains(&v))
}

/// Whether audit event `e` is a completed request the API server received after `mark`.
fn after(mark: &Mark, e: &serde_json::Value) -> bool {
    e["stage"] == "ResponseComplete"
        && e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_none_or(|t| t >= mark.since)
}

/// The writes khai made in `namespace` since `from` (cluster-scoped objects are not counted).
pub fn khai_writes(from: Mark, namespace: &str) -> Writes {
    writes(from, |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["namespace"] == namespace
    })
}

/// Writes since `from` of the audit events `keep` accepts.
pub fn writes(from: Mark, keep: impl Fn(&serde_json::Value) -> bool) -> Writes {
    let mut file = std::fs::File::open(from.log).expect("open the audit log");
    file.seek(SeekFrom::Start(from.at)).unwrap();
    let mut out = Writes::new();
    for line in BufReader::new(file).lines().map_while(Result::ok) {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if !after(&from, &e) || !is_write(&e) || !keep(&e) {
            continue;
        }
        let resource = resource(&e).unwrap_or_default();
        let verb = e["verb"].as_str().unwrap_or_default();
        *out.entry(format!("{verb} {resource}")).or_default() += 1;
    }
    out
}

/// What an audit event was about, as `resource[/subresource]`; `None` for a request on no
/// resource (discovery, `/healthz`).
pub fn resource(e: &serde_json::Value) -> Option<String> {
    let r = &e["objectRef"];
    let resource = r["resource"].as_str()?;
    Some(match r["subresource"].as_str() {
        Some(sub) => format!("{resource}/{sub}"),
        None => resource.to_string(),
    })
}

/// The audit events (one JSON object per completed write) since `from` that `keep` accepts, in
/// the order the API server logged them. Each has `verb`, `userAgent`, `objectRef`,
/// `requestReceivedTimestamp` and `stageTimestamp` (the API server's clock, in microseconds).
pub fn entries(from: Mark, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
    requests(from, |e| is_write(e) && keep(e))
}

/// Every audit event since `from` that `keep` accepts, reads included (logged for
/// ServiceAccounts only), in the order the API server logged them.
pub fn requests(from: Mark, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
    let mut file = std::fs::File::open(from.log).expect("open the audit log");
    file.seek(SeekFrom::Start(from.at)).unwrap();
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(&line).ok())
        .filter(|e| after(&from, e) && keep(e))
        .collect()
}

/// The requests since `from` the API server refused with 403 to the user `user` (as
/// `system:serviceaccount:NS:NAME`), each as `verb resource[/subresource] in NS (name)`.
pub fn forbidden(from: Mark, user: &str) -> Vec<String> {
    requests(from, |e| {
        e["user"]["username"] == user && e["responseStatus"]["code"] == 403
    })
    .iter()
    .map(|e| {
        let r = &e["objectRef"];
        let what =
            resource(e).unwrap_or_else(|| e["requestURI"].as_str().unwrap_or_default().to_string());
        format!(
            "{} {what} in {} ({}): {}",
            e["verb"].as_str().unwrap_or_default(),
            r["namespace"].as_str().unwrap_or("the cluster"),
            r["name"].as_str().unwrap_or("-"),
            e["requestURI"].as_str().unwrap_or_default(),
        )
    })
    .collect()
}

/// Waits (polling the log, until the deadline) for an audit event since `from` that `find`
/// accepts, and returns it. The API server logs a request's `ResponseComplete` stage after it
/// has answered, so a watcher may see the change before the log has the line.
pub async fn wait_for_entry(
    from: Mark,
    what: &str,
    find: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + super::DEADLINE;
    loop {
        if let Some(e) = entries(from, &find).into_iter().next() {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {:?} waiting for the audit log to show {what}",
            super::DEADLINE
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An audit event's timestamp field (`requestReceivedTimestamp`, `stageTimestamp`).
pub fn timestamp(entry: &serde_json::Value, field: &str) -> jiff::Timestamp {
    entry[field]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("audit event without {field}: {entry}"))
}

/// The total of `writes`.
pub fn total(writes: &Writes) -> u64 {
    writes.values().sum()
}
