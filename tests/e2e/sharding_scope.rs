//! `khai run --shards` over every kind of scope and a parent that stops being the controller's
//! while sharded: two shards on loopback share one operator with a cluster-scoped `Zone`, whose
//! child is a ConfigMap in the namespace its spec names, and a namespaced `Part` whose
//! controller selects `keep=yes`.
//!
//! - **Cluster-scoped parents with children in another namespace** are split over both shards
//!   as namespaced ones are: each shard caches only its Zones, each Zone's ConfigMap carries its
//!   Zone's shard label, and each Zone's child and status are written once. When a shard stops
//!   (SIGTERM), its Zones move to the other shard and stay Ready with one label patch per Zone
//!   and per ConfigMap, and nothing re-applied.
//! - **Filtered out while sharded**: a Part on the shard that stops is relabelled `keep=no`.
//!   The right behaviour is what khai does unsharded (`release.rs`,
//!   `every_way_an_object_stops_being_khais_cleans_up_once_and_releases_the_finalizer`): its
//!   shard cleans it up once (`finalize`), removes khai's finalizer and never deletes it. Being
//!   no longer the controller's, it is no longer sharded either: the sharder neither moves nor
//!   drains it when its shard stops, and no shard reconciles or writes it; it keeps the shard
//!   label it had.

use crate::support::metrics::{metrics_until, sum, wait_for_metric};
use crate::support::shards::{Sharded, part_operator, ready, shard_of, writes_per_object};
use crate::support::{self, Khai, audit, configmaps, wait_for};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Cluster-scoped parents: enough that both shards own some (all 12 on one shard: 1 in 2,048).
const ZONES: usize = 12;

fn operator(dir: &Path, name: &str, group: &str) -> PathBuf {
    let rest = format!(
        r#"
[[crd]]
group = "{group}"
kind = "Zone"
scope = "Cluster"
versions = ["v1"]
spec.target = {{ type = "string" }}
status.n = {{ type = "integer" }}

[[controller]]
for = "Zone"
owns = ["v1/ConfigMap"]
script = "zone.rhai"

[[controller]]
for = "Part"
owns = ["v1/ConfigMap"]
selector = "keep=yes"
script = "part.rhai"
"#
    );
    std::fs::write(
        dir.join("operator.toml"),
        part_operator(name, group) + rest.as_str(),
    )
    .unwrap();
    std::fs::write(
        dir.join("zone.rhai"),
        r#"fn reconcile(obj, ctx) {
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap",
                     metadata: #{ name: `zone-${obj.metadata.name}`, namespace: obj.spec.target },
                     data: #{ zone: obj.metadata.name } }],
       status: #{ n: 1 } }
}
"#,
    )
    .unwrap();
    // `finalize` records each call: `fin-<name>`, then `fin-<name>-again` for any further one.
    std::fs::write(
        dir.join("part.rhai"),
        r#"fn fin(obj, suffix) {
    #{ apiVersion: "v1", kind: "ConfigMap",
       metadata: #{ name: `fin-${obj.metadata.name}${suffix}`, namespace: obj.metadata.namespace } }
}
fn reconcile(obj, ctx) {
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: obj.metadata.name },
                     data: #{ n: `${obj.spec.n}` } }],
       status: #{ n: obj.spec.n } }
}
fn finalize(obj, ctx) {
    try { k8s::create(fin(obj, "")); } catch (e) { k8s::create(fin(obj, "-again")); }
    true
}
"#,
    )
    .unwrap();
    dir.to_path_buf()
}

fn zones_api(client: &Client, group: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", "Zone");
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "zones"),
    )
}

/// Waits until every Zone is Ready and its ConfigMap carries the Zone's shard label; the
/// Zones' shards by name.
async fn zones_settled(
    zones: &Api<DynamicObject>,
    cms: &Api<DynamicObject>,
    label: &str,
    what: &str,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = zones.list(&ListParams::default()).await.unwrap().items;
        let children = shard_of(cms, label).await;
        let placed: BTreeMap<String, String> = listed
            .iter()
            .filter(|z| ready(z))
            .filter_map(|z| {
                let shard = z.labels().get(label)?;
                let child = children.get(&format!("zone-{}", z.name_any()))?;
                (child.as_ref() == Some(shard)).then(|| (z.name_any(), shard.clone()))
            })
            .collect();
        if placed.len() == ZONES {
            return placed;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {ZONES} Zones Ready with their ConfigMap on their shard",
            placed.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the shard at `addr` has nothing queued or running.
async fn idle(addr: &str) {
    metrics_until(addr, "an idle work queue", |b| {
        sum(b, "workqueue_depth") == 0.0 && sum(b, "controller_runtime_active_workers") == 0.0
    })
    .await;
}

#[tokio::test]
async fn cluster_scoped_parents_move_without_reapply_and_a_filtered_out_parent_is_let_go_and_left_alone()
 {
    let _heavy = crate::support::heavy().await;
    let started = Instant::now();
    let client = support::client().await;
    let op = Sharded::with_operator(&client, "scope", operator).await;
    let (ns, group, label) = (op.ns.name.as_str(), op.group.as_str(), op.label.as_str());
    let ids = ["s0", "s1"];
    let (mut shards, addrs) = op.start(&ids).await;
    support::wait_for_crd(&client, &format!("zones.{group}")).await;
    support::wait_for_crd(&client, &format!("parts.{group}")).await;
    let (zones, parts, cms) = (
        zones_api(&client, group),
        op.parts(&client),
        configmaps(&client, ns),
    );

    // Cluster-scoped parents, each with a ConfigMap in the test namespace.
    let created = audit::mark();
    for i in 0..ZONES {
        let z: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Zone",
            "metadata": { "name": format!("z{i}") }, "spec": { "target": ns },
        }))
        .unwrap();
        zones.create(&PostParams::default(), &z).await.unwrap();
    }
    let at_sharder = op.settled_sharder(&client, &ids, &shards).await;
    let victim = 1 - at_sharder;
    let (sharder, dead) = (ids[at_sharder], ids[victim]);

    // Parts selected by the controller until one lands on the shard that will stop.
    let mut kept = Vec::new();
    let out = loop {
        let name = format!("p{}", kept.len());
        let p: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Part",
            "metadata": { "name": name, "labels": { "keep": "yes" } }, "spec": { "n": 1 },
        }))
        .unwrap();
        parts.create(&PostParams::default(), &p).await.unwrap();
        let p = wait_for(
            &parts,
            &name,
            "the Part Ready",
            |o: Option<&DynamicObject>| o.is_some_and(ready),
        )
        .await;
        if p.labels().get(label).map(String::as_str) == Some(dead) {
            break name;
        }
        kept.push(name);
        assert!(kept.len() < 20, "20 Parts and none on {dead}");
    };

    let owners = zones_settled(&zones, &cms, label, "the Zones assigned").await;
    let theirs: Vec<&String> = owners
        .iter()
        .filter(|(_, s)| s.as_str() == dead)
        .map(|(z, _)| z)
        .collect();
    for (s, addr) in ids.iter().zip(&addrs) {
        let mine = owners.values().filter(|o| o == s).count();
        assert!(mine > 0, "{s} owns none of the {ZONES} Zones: {owners:?}");
        wait_for_metric(
            addr,
            &format!("{s} caching its {mine} Zones"),
            "khai_cached_objects",
            &[("kind", "Zone")],
            |v| v == mine as f64,
        )
        .await;
        idle(addr).await;
    }
    let is_zone = |e: &serde_json::Value| {
        e["objectRef"]["apiGroup"] == group || e["objectRef"]["namespace"] == ns
    };
    let writes = writes_per_object(created, is_zone);
    for z in owners.keys() {
        let count = |resource: &str, name: &str| {
            let key = (resource.to_string(), name.to_string());
            writes.get(&key).map_or(0, Vec::len)
        };
        assert_eq!(
            count("zones/status", z),
            1,
            "{z}'s status writes: {writes:?}"
        );
        assert_eq!(
            count("configmaps", &format!("zone-{z}")),
            1,
            "{z}'s ConfigMap writes: {writes:?}"
        );
    }

    // `out` is filtered out: let go as unsharded khai lets go, never deleted.
    parts
        .patch(
            &out,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "keep": "no" } } })),
        )
        .await
        .unwrap();
    let released = wait_for(
        &parts,
        &out,
        "khai's finalizer released",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.finalizers().is_empty()),
    )
    .await;
    assert!(
        released.metadata.deletion_timestamp.is_none(),
        "filtering {out} out deleted it"
    );
    support::wait_exists(
        &cms,
        &format!("fin-{out}"),
        "finalize run for the filtered-out Part",
    )
    .await;

    // The shard stops: its Zones move to the other shard, the filtered-out Part stays put.
    let logged = shards[at_sharder].log_len();
    let moving = audit::mark();
    let stopped: Khai = shards.remove(victim);
    let (code, _) = stopped.terminate().await;
    assert_eq!(code, Some(0), "{dead} did not stop cleanly");
    let moved = Instant::now();
    let sharder_khai = &shards[0];
    sharder_khai
        .wait_for_json_log(
            logged,
            "the stopped shard's objects moved",
            json!({ "shard": dead, "left": 0 }),
        )
        .await;
    let now = zones_settled(&zones, &cms, label, "the Zones moved").await;
    assert!(
        now.values().all(|s| s == sharder),
        "Zones not all on {sharder}: {now:?}"
    );
    let moved = moved.elapsed();
    // The sharder's pass over every assigned parent after the membership change counts each
    // shard's parents: every Zone and every selected Part, not the filtered-out one.
    let addr = &addrs[at_sharder];
    let selected = (ZONES + kept.len()) as f64;
    let counted = wait_for_metric(
        addr,
        "the sharder counting its parents after the move",
        "khai_shard_objects",
        &[("shard", sharder)],
        |v| v >= selected,
    )
    .await;
    idle(addr).await;
    let writes = writes_per_object(moving, |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && is_zone(e)
    });
    for z in &theirs {
        for (resource, name) in [
            ("zones", z.to_string()),
            ("configmaps", format!("zone-{z}")),
        ] {
            let key = (resource.to_string(), name.clone());
            assert_eq!(
                writes.get(&key).map(Vec::as_slice),
                Some(&["patch merge".to_string()][..]),
                "moving {resource} {name} took other writes than one label patch: {writes:?}"
            );
        }
        let status = ("zones/status".to_string(), z.to_string());
        assert_eq!(writes.get(&status), None, "moving {z} rewrote its status");
    }
    for resource in ["parts", "parts/status", "configmaps"] {
        let key = (resource.to_string(), out.clone());
        assert_eq!(
            writes.get(&key),
            None,
            "the filtered-out {out} was written ({resource}) when its shard stopped: {writes:?}"
        );
    }
    let left = parts.get(&out).await.unwrap();
    assert_eq!(
        left.labels().get(label).map(String::as_str),
        Some(dead),
        "the filtered-out {out} was relabelled"
    );
    assert!(left.finalizers().is_empty(), "{out}'s finalizer came back");
    assert!(
        cms.get_opt(&format!("fin-{out}-again"))
            .await
            .unwrap()
            .is_none(),
        "finalize ran more than once for {out}"
    );
    assert_eq!(
        counted, selected,
        "the sharder counts {counted} parents on {sharder}, the {selected} selected ones and the filtered-out {out}?"
    );
    wait_for_metric(
        addr,
        &format!("{sharder} caching the {} selected Parts only", kept.len()),
        "khai_cached_objects",
        &[("kind", "Part")],
        |v| v == kept.len() as f64,
    )
    .await;
    eprintln!(
        "sharding_scope: {} Zones of {dead} moved and Ready after {moved:?}; took {:?}",
        theirs.len(),
        started.elapsed()
    );
}
