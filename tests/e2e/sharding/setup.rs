//! What the sharding test sets up and reads: the operator, the shards, the shard label of
//! every object, whether a parent is up to date, and the churn that runs during the kill.

use crate::support::Khai;
use crate::support::metrics::wait_for_metric;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

pub fn operator(dir: &std::path::Path, name: &str, group: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("operator.toml"),
        format!(
            r#"[operator]
name = "{name}"

[[crd]]
group = "{group}"
kind = "Part"
versions = ["v1"]
spec.n = {{ type = "integer" }}
status.n = {{ type = "integer" }}

[[controller]]
for = "Part"
owns = ["v1/ConfigMap"]
script = "part.rhai"
"#
        ),
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

/// The shard label of every object `api` lists, by name.
pub async fn shard_of(api: &Api<DynamicObject>, label: &str) -> BTreeMap<String, Option<String>> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| (o.name_any(), o.labels().get(label).cloned()))
        .collect()
}

/// Starts one khai per shard id and waits until each holds its shard Lease; their metrics
/// addresses, in the same order.
pub async fn start_shards(
    config: &std::path::Path,
    ns: &str,
    flags: &[&str],
    ids: &[&str],
    operator: &str,
) -> (Vec<Khai>, Vec<String>) {
    let shards: Vec<Khai> = ids
        .iter()
        .map(|s| Khai::start_with_env(config, ns, flags, &[("POD_NAME", s)]))
        .collect();
    let mut addrs = Vec::new();
    for (k, s) in shards.iter().zip(ids) {
        let addr = k.metrics_addr().await;
        let lease = format!("khai-{operator}-shard-{s}");
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

/// The shard holding the sharder Lease of `operator`.
pub async fn sharder_of(client: &kube::Client, ns: &str, operator: &str) -> String {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    let lease = leases
        .get(&format!("khai-{operator}-sharder"))
        .await
        .unwrap();
    lease.spec.and_then(|s| s.holder_identity).unwrap()
}

/// Ready, at its latest generation, with the status its spec asks for.
pub fn up_to_date(o: &DynamicObject) -> bool {
    let status = &o.data["status"];
    ready(o)
        && status["observedGeneration"].as_i64() == o.metadata.generation
        && status["n"] == o.data["spec"]["n"]
}

/// Creates parents and changes `touched` and `others` (in turn), a few a second, until
/// `stop`; how many writes it made.
pub async fn churn(
    parts: Api<DynamicObject>,
    group: String,
    touched: Vec<String>,
    others: Vec<String>,
    stop: tokio_util::sync::CancellationToken,
) -> usize {
    let changed: Vec<String> = touched.into_iter().chain(others).collect();
    let mut writes = 0;
    let mut turn = 0;
    while !stop.is_cancelled() {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Part",
            "metadata": { "name": format!("churn{writes}") }, "spec": { "n": writes },
        }))
        .unwrap();
        parts.create(&PostParams::default(), &o).await.unwrap();
        let p = &changed[turn % changed.len()];
        turn += 1;
        let patch = json!({ "spec": { "n": 100_000 + writes } });
        let params = kube::api::PatchParams::default();
        parts
            .patch(p, &params, &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
        writes += 2;
        // Pacing, not synchronisation: about five writes a second.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    writes
}

pub fn ready(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}
