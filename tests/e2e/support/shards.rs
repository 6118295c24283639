//! Several khai processes on loopback sharing one operator's parents (`khai run --shards`): the
//! operator (a `Part` becomes a ConfigMap holding its `spec.n`, and `status.n`), starting
//! shards and waiting for their Leases, who owns what, and the audit-log check that no object
//! is written by two shards in turn.

use super::metrics::wait_for_metric;
use super::{Khai, TestNamespace, audit, custom_api};
use futures::StreamExt;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Short, so a killed shard's parents move soon; long enough that a shard renewing on a busy
/// machine (two cores, several test processes) is not taken for dead.
pub const LEASE: Duration = Duration::from_secs(10);

/// The flags of a shard whose Leases are in `ns`, last `lease` and are renewed within `renew`
/// (every second), logging JSON.
pub fn flags(ns: &str, lease: Duration, renew: Duration) -> Vec<String> {
    let secs = |d: Duration| format!("{}s", d.as_secs());
    [
        "--shards",
        "--leader-elect-namespace",
        ns,
        "--leader-elect-lease-duration",
        &secs(lease),
        "--leader-elect-renew-deadline",
        &secs(renew),
        "--leader-elect-retry-period",
        "1s",
        "--log-format",
        "json",
    ]
    .map(String::from)
    .to_vec()
}

/// One sharded operator in a test namespace of its own.
pub struct Sharded {
    pub ns: TestNamespace,
    pub name: String,
    pub group: String,
    /// The shard label, `shard.khai.dev/<name>`.
    pub label: String,
    pub config: PathBuf,
    flags: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Sharded {
    /// Writes the `Part` operator into a temporary directory; nothing runs yet.
    pub async fn new(client: &kube::Client, prefix: &str) -> Self {
        Self::with_operator(client, prefix, operator).await
    }

    /// Like [`Sharded::new`], with the operator `write(dir, name, group)` writes into `dir`
    /// (returning the config's path).
    pub async fn with_operator(
        client: &kube::Client,
        prefix: &str,
        write: impl FnOnce(&Path, &str, &str) -> PathBuf,
    ) -> Self {
        let ns = TestNamespace::new(client, prefix).await;
        let dir = tempfile::tempdir().unwrap();
        let id = super::nanos_u64() % 0xffff_ffff;
        let name = format!("{prefix}{id:x}");
        let group = format!("{prefix}{id:x}.khai.dev");
        let config = write(dir.path(), &name, &group);
        let flags = flags(&ns.name, LEASE, Duration::from_secs(7));
        Self {
            label: format!("shard.khai.dev/{name}"),
            ns,
            name,
            group,
            config,
            flags,
            _dir: dir,
        }
    }

    /// The `Part`s of the test namespace.
    pub fn parts(&self, client: &kube::Client) -> Api<DynamicObject> {
        custom_api(client, &self.ns.name, &self.group, "Part", "parts")
    }

    /// Starts one khai per shard id and waits until each holds its shard Lease; their metrics
    /// addresses, in the same order.
    pub async fn start(&self, ids: &[&str]) -> (Vec<Khai>, Vec<String>) {
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let shards: Vec<Khai> = ids
            .iter()
            .map(|s| Khai::start_with_env(&self.config, &self.ns.name, &flags, &[("POD_NAME", s)]))
            .collect();
        let mut addrs = Vec::new();
        for (k, s) in shards.iter().zip(ids) {
            let addr = k.metrics_addr().await;
            let lease = format!("khai-{}-shard-{s}", self.name);
            let labels = [("name", lease.as_str())];
            let holding = "the shard holding its Lease";
            wait_for_metric(
                &addr,
                holding,
                "leader_election_master_status",
                &labels,
                |v| v == 1.0,
            )
            .await;
            addrs.push(addr);
        }
        (shards, addrs)
    }

    /// The shard holding the sharder Lease.
    pub async fn sharder(&self, client: &kube::Client) -> String {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &self.ns.name);
        let lease = leases
            .get(&format!("khai-{}-sharder", self.name))
            .await
            .unwrap();
        lease.spec.and_then(|s| s.holder_identity).unwrap()
    }

    /// Waits until a shard of `shards` (started with `ids`) holds the sharder Lease and says it
    /// has settled (from then on it may move objects); its index.
    pub async fn settled_sharder(
        &self,
        client: &kube::Client,
        ids: &[&str],
        shards: &[Khai],
    ) -> usize {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client.clone(), &self.ns.name);
        let name = format!("khai-{}-sharder", self.name);
        super::poll_until("a shard holding the sharder Lease", || async {
            let lease = leases.get_opt(&name).await.ok().flatten();
            lease.and_then(|l| l.spec?.holder_identity).is_some()
        })
        .await;
        let holder = self.sharder(client).await;
        let at = ids.iter().position(|s| *s == holder).unwrap();
        let settled = json!({ "settled": true });
        shards[at]
            .wait_for_json_log(0, "the sharder settling", settled)
            .await;
        at
    }

    /// The `Part` named `name` with `spec.n = n`.
    pub fn part(&self, name: &str, n: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{}/v1", self.group), "kind": "Part",
            "metadata": { "name": name }, "spec": { "n": n },
        }))
        .unwrap()
    }

    /// Creates `p0`..`p<n-1>`, `spec.n = i`, 32 at a time.
    pub async fn create_parts(&self, client: &kube::Client, n: usize) {
        let parts = self.parts(client);
        futures::stream::iter(0..n)
            .map(|i| {
                let (parts, o) = (parts.clone(), self.part(&format!("p{i}"), i as i64));
                async move {
                    parts.create(&PostParams::default(), &o).await.unwrap();
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
    }
}

/// The head of a sharding test's operator.toml: operator `name` and its `Part` CRD in `group`
/// (`spec.n`, `status.n`); the controller follows it.
pub fn part_operator(name: &str, group: &str) -> String {
    format!(
        r#"[operator]
name = "{name}"

[[crd]]
group = "{group}"
kind = "Part"
versions = ["v1"]
spec.n = {{ type = "integer" }}
status.n = {{ type = "integer" }}
"#
    )
}

pub fn operator(dir: &Path, name: &str, group: &str) -> PathBuf {
    operator_with(dir, name, group, "")
}

/// The `Part` operator, its controller given `more` lines (`watches = [...]`).
pub fn operator_with(dir: &Path, name: &str, group: &str, more: &str) -> PathBuf {
    let controller = format!(
        "\n[[controller]]\nfor = \"Part\"\nowns = [\"v1/ConfigMap\"]\nscript = \"part.rhai\"\n{more}"
    );
    std::fs::write(
        dir.join("operator.toml"),
        part_operator(name, group) + controller.as_str(),
    )
    .unwrap();
    std::fs::write(
        dir.join("part.rhai"),
        r#"fn reconcile(obj, ctx) {
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: obj.metadata.name },
                     data: #{ n: `${obj.spec.n}` } }],
       status: #{ n: obj.spec.n } }
}
"#,
    )
    .unwrap();
    dir.to_path_buf()
}

/// The shard label `label` of every object `api` lists, by name.
pub async fn shard_of(api: &Api<DynamicObject>, label: &str) -> BTreeMap<String, Option<String>> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| (o.name_any(), o.labels().get(label).cloned()))
        .collect()
}

/// Whether `o` has the condition Ready=True.
pub fn ready(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The shard (the `POD_NAME` in khai's user agent `khai/<version> (<shard>)`) that sent audit
/// event `e`.
pub fn writer(e: &serde_json::Value) -> String {
    let agent = e["userAgent"].as_str().unwrap_or_default();
    agent
        .split_once(" (")
        .map_or(agent, |(_, w)| w.trim_end_matches(')'))
        .to_string()
}

/// The writers of each object among audit events `writes`, keyed by `resource[/sub] name`, in
/// the order the API server received them.
pub fn writers_by_object(writes: &[serde_json::Value]) -> BTreeMap<String, Vec<String>> {
    let mut by_object: BTreeMap<String, Vec<(jiff::Timestamp, String)>> = BTreeMap::new();
    for e in writes {
        let r = &e["objectRef"];
        let object = format!(
            "{}{} {}",
            r["resource"].as_str().unwrap_or_default(),
            r["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            r["name"].as_str().unwrap_or_default()
        );
        by_object
            .entry(object)
            .or_default()
            .push((audit::timestamp(e, "requestReceivedTimestamp"), writer(e)));
    }
    by_object
        .into_iter()
        .map(|(o, mut w)| {
            w.sort();
            (o, w.into_iter().map(|(_, who)| who).collect())
        })
        .collect()
}

/// The writes since `mark` that `keep` accepts, per `(resource[/sub], name)`, each as `verb
/// apply` (server-side apply, which names its field manager) or `verb merge` (the sharder's
/// label patches and other merge patches), in the order the API server logged them.
pub fn writes_per_object(
    mark: audit::Mark,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> BTreeMap<(String, String), Vec<String>> {
    let mut per_object: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for e in audit::entries(mark, keep) {
        let r = &e["objectRef"];
        let resource = match r["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", r["resource"].as_str().unwrap_or_default()),
            None => r["resource"].as_str().unwrap_or_default().to_string(),
        };
        let name = r["name"].as_str().unwrap_or_default().to_string();
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let how = if uri.contains("fieldManager") {
            "apply"
        } else {
            "merge"
        };
        let verb = e["verb"].as_str().unwrap_or_default();
        per_object
            .entry((resource, name))
            .or_default()
            .push(format!("{verb} {how}"));
    }
    per_object
}

/// Panics naming the object if some object's writers take turns back: once shard B has
/// written an object after shard A, A never writes it again. Each object passes through a
/// shard at most once in the moves the callers make, so a return is two shards acting on one
/// object within one move.
pub fn assert_no_shard_writes_in_turn(writes: &[serde_json::Value]) {
    for (object, w) in writers_by_object(writes) {
        let mut turns: Vec<&str> = Vec::new();
        for who in &w {
            if turns.last() != Some(&who.as_str()) {
                assert!(
                    !turns.contains(&who.as_str()),
                    "{object} written by {w:?}: two shards in turn"
                );
                turns.push(who);
            }
        }
    }
}
