//! `khai run --shards` with the assignment webhook: two shards on loopback, one reachable by
//! the API server. A parent comes back from its create already labelled for its shard and is
//! reconciled; a Secret naming its parent by label comes back labelled for the parent's shard
//! and is cached there only (one labelled for no live shard is moved there), while a
//! `shared = true` kind is cached in full on both; the `[[schedule]]` runs on the shard holding
//! the sharder Lease only. When the other shard stops, its parents' Secrets follow them to the
//! sharder's shard.

use crate::support::metrics::{http_get, sum, wait_for_metric};
use crate::support::shards::{self, LEASE};
use crate::support::{self, Khai, TestNamespace, custom_api};
use crate::webhooks::Registered;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Parents created; each has one Secret and one ServiceAccount naming it.
const PARENTS: usize = 12;

fn operator(dir: &std::path::Path, name: &str, group: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("operator.toml"),
        crate::support::shards::part_operator(name, group)
            + format!(
                r#"
[[controller]]
for = "Part"
script = "part.rhai"
watches = [
  {{ kind = "v1/Secret", label = "{group}/part" }},
  {{ kind = "v1/ServiceAccount", label = "{group}/part", shared = true }},
]

[[schedule]]
name = "tick"
script = "part.rhai"
function = "tick"
interval = "1s"
"#
            )
            .as_str(),
    )
    .unwrap();
    std::fs::write(
        dir.join("part.rhai"),
        "fn reconcile(obj, ctx) { #{ status: #{ n: obj.spec.n } } }\nfn tick(ctx) {}\n",
    )
    .unwrap();
    dir.to_path_buf()
}

#[tokio::test]
async fn admission_labels_parents_and_their_related_objects_and_one_shard_runs_the_schedule() {
    let _heavy = crate::support::heavy().await;
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "shardhook").await;
    let dir = tempfile::tempdir().unwrap();
    let id = support::nanos_u64() % 0xffff_ffff;
    let name = format!("hook{id:x}");
    let group = format!("hook{id:x}.khai.dev");
    let config = operator(dir.path(), &name, &group);
    let label = format!("shard.khai.dev/{name}");
    let _registered = Registered(Box::leak(format!("khai-{name}-shard").into_boxed_str()));
    let started = Instant::now();
    let common = shards::flags(&ns.name, LEASE, Duration::from_secs(7));
    // Only s0 is reachable: it installs the configuration pointing at the port it bound.
    let reachable = ["--webhook-url", "https://127.0.0.1:0"];
    let ids = ["s0", "s1"];
    let mut shards: Vec<Khai> = ids
        .iter()
        .map(|s| {
            let mut flags: Vec<&str> = common.iter().map(String::as_str).collect();
            if *s == "s0" {
                flags.extend(reachable);
            }
            Khai::start_with_env(&config, &ns.name, &flags, &[("POD_NAME", s)])
        })
        .collect();
    let mut addrs = Vec::new();
    for (k, s) in shards.iter().zip(ids) {
        let addr = k.metrics_addr().await;
        let lease = format!("khai-{name}-shard-{s}");
        wait_for_metric(
            &addr,
            "the shard holding its Lease",
            "leader_election_master_status",
            &[("name", lease.as_str())],
            |v| v == 1.0,
        )
        .await;
        addrs.push(addr);
    }
    shards[0]
        .wait_for_webhooks_installed(0, "the assignment webhook configuration")
        .await;
    support::wait_for_crd(&client, &format!("parts.{group}")).await;
    let parts = custom_api(&client, &ns.name, &group, "Part", "parts");
    let part = |i: usize| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Part",
            "metadata": { "name": format!("p{i}") }, "spec": { "n": i },
        }))
        .unwrap()
    };
    // The API server reads webhook configurations from a watch: the first creates may pass
    // before it calls khai, and are then labelled by the sharder.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut first = 0;
    loop {
        let made = parts
            .create(&PostParams::default(), &part(first))
            .await
            .unwrap();
        first += 1;
        if made.labels().contains_key(&label) {
            break;
        }
        assert!(Instant::now() < deadline, "no create came back labelled");
    }
    let mut shard_of: BTreeMap<String, String> = BTreeMap::new();
    for i in first..first + PARENTS {
        let made = parts
            .create(&PostParams::default(), &part(i))
            .await
            .unwrap();
        let shard = made.labels().get(&label).cloned();
        let shard = shard.unwrap_or_else(|| panic!("p{i} came back from its create unlabelled"));
        shard_of.insert(made.name_any(), shard);
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &ns.name);
    let mut secrets_on: BTreeMap<&str, usize> = BTreeMap::new();
    for (parent, shard) in &shard_of {
        let related = json!({ "metadata": {
            "name": format!("{parent}-rel"), "labels": { format!("{group}/part"): parent },
        } });
        let made = secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(related.clone()).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            made.labels().get(&label),
            Some(shard),
            "{parent}'s Secret is not labelled for its parent's shard"
        );
        *secrets_on.entry(shard.as_str()).or_default() += 1;
        let made = accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(related).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(
            made.labels().get(&label),
            None,
            "a shared kind is left alone"
        );
    }
    // Every labelled create above was a review s0 answered, counted with its time.
    let reviewed = (1 + 2 * PARENTS) as f64;
    let assign = [("webhook", "shard"), ("sort", "assign"), ("code", "200")];
    wait_for_metric(
        &addrs[0],
        "the assignment reviews s0 answered",
        "khai_webhook_requests_total",
        &assign,
        |v| v >= reviewed,
    )
    .await;
    wait_for_metric(
        &addrs[0],
        "the assignment reviews s0 timed",
        "khai_webhook_request_duration_seconds_count",
        &assign[..2],
        |v| v >= reviewed,
    )
    .await;
    // A related object labelled for no live shard is moved to its parent's by the sharder's
    // replica (the webhook leaves labelled objects alone).
    let (parent, shard) = shard_of.iter().next().unwrap();
    let stray = json!({ "metadata": {
        "name": "stray", "labels": { format!("{group}/part"): parent, label.as_str(): "nowhere" },
    } });
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(stray).unwrap(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while secrets.get("stray").await.unwrap().labels().get(&label) != Some(shard) {
        assert!(
            Instant::now() < deadline,
            "the stray Secret never followed {parent} to {shard}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    *secrets_on.entry(shard.as_str()).or_default() += 1;
    // Every parent is reconciled by its shard.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = parts.list(&ListParams::default()).await.unwrap().items;
        let done = listed
            .iter()
            .filter(|o| o.data["status"]["n"] == o.data["spec"]["n"])
            .count();
        if done == first + PARENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} parents reconciled",
            first + PARENTS
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Each shard caches the Secrets of its own parents, and every ServiceAccount.
    let all_accounts = accounts
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    for (s, addr) in ids.iter().zip(&addrs) {
        let mine = secrets_on.get(s).copied().unwrap_or_default();
        wait_for_metric(
            addr,
            &format!("{s} caching its {mine} Secrets"),
            "khai_cached_objects",
            &[("kind", "Secret")],
            |v| v == mine as f64,
        )
        .await;
        wait_for_metric(
            addr,
            &format!("{s} caching all {all_accounts} ServiceAccounts"),
            "khai_cached_objects",
            &[("kind", "ServiceAccount")],
            |v| v == all_accounts as f64,
        )
        .await;
    }
    assert!(
        secrets_on.len() == 2,
        "both shards own some of {PARENTS} parents: {secrets_on:?}"
    );
    // The schedule runs on the sharder's shard only.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns.name);
    let sharder = leases.get(&format!("khai-{name}-sharder")).await.unwrap();
    let holder = sharder.spec.and_then(|s| s.holder_identity).unwrap();
    let at = ids.iter().position(|s| *s == holder).unwrap();
    wait_for_metric(
        &addrs[at],
        "the sharder's shard running the schedule",
        "khai_schedule_runs_total",
        &[("schedule", "tick"), ("result", "success")],
        |v| v >= 3.0,
    )
    .await;
    let (_, other) = http_get(&addrs[1 - at], "/metrics").await;
    assert_eq!(
        sum(&other, "khai_schedule_runs_total"),
        0.0,
        "the schedule ran on the shard not holding the sharder Lease"
    );
    // The other shard stops: its parents move to the sharder's, and their Secrets with them.
    let mark = crate::support::audit::mark();
    let (code, _) = shards.remove(1 - at).terminate().await;
    assert_eq!(code, Some(0));
    let stopped = Instant::now();
    let named_by = format!("{group}/part");
    loop {
        let on = crate::support::shards::shard_of(&parts, &label).await;
        // The parts' Secrets only (khai keeps its shared webhook CA in this namespace too).
        let behind: Vec<String> = secrets
            .list(&ListParams::default().labels(&named_by))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|s| {
                let parent = on.get(&s.labels()[&named_by]).cloned().flatten();
                parent.as_deref() != Some(holder.as_str())
                    || s.labels().get(&label) != parent.as_ref()
            })
            .map(|s| s.name_any())
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(30),
            "Secrets not on their parent's shard {holder} 30 s after the other stopped: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each moved parent's Secret was relabelled before the parent, in the audit log's order.
    let patches = crate::support::audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["verb"] == "patch"
            && e["objectRef"]["subresource"].is_null()
    });
    let first = |resource: &str, name: &str| {
        let e = patches
            .iter()
            .find(|e| e["objectRef"]["resource"] == resource && e["objectRef"]["name"] == name);
        let e = e.unwrap_or_else(|| panic!("{resource} {name} not relabelled"));
        crate::support::audit::timestamp(e, "requestReceivedTimestamp")
    };
    let gone = ids[1 - at];
    for (parent, _) in shard_of.iter().filter(|(_, s)| *s == gone) {
        let secret = format!("{parent}-rel");
        assert!(
            first("secrets", &secret) < first("parts", parent),
            "{secret} relabelled after its parent"
        );
    }
    eprintln!(
        "sharding_admission: took {:?}; Secrets followed their parents off the stopped shard in {:?}",
        started.elapsed(),
        stopped.elapsed()
    );
}
