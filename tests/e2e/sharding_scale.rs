//! `khai run --shards` scaled 3 → 4 → 2 while parents are created, changed and deleted: a
//! fourth shard joins (its share moves through the drain protocol), then one shard stops on
//! SIGTERM and another is killed. Afterwards the audit log shows no object written by two
//! shards in turn, every surviving parent and its ConfigMap hold its last spec, and the writes
//! are the minimum for the churn plus the label moves.

use crate::support::audit;
use crate::support::metrics::{metrics_until, sample, sum};
use crate::support::shards::{LEASE, Sharded, assert_no_shard_writes_in_turn, ready};
use crate::support::{self, Khai};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Parents before the churn starts.
const PARENTS: usize = 300;

/// What the churn did, and what every parent it left should hold.
#[derive(Default)]
struct Churn {
    /// Surviving parents and their last `spec.n`.
    live: BTreeMap<String, i64>,
    deleted: BTreeSet<String>,
    creates: u64,
    updates: u64,
}

/// Every 250 ms, one of: create a parent, change one's spec (twice in four), delete one; until
/// `stop`. Names are never reused, so each object passes through a shard at most once.
async fn churn(parts: Api<DynamicObject>, op: Arc<Sharded>, stop: Arc<AtomicBool>) -> Churn {
    let mut c = Churn {
        live: (0..PARENTS).map(|i| (format!("p{i}"), i as i64)).collect(),
        ..Churn::default()
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut k: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        k += 1;
        let n = 1_000_000 + k as i64;
        // A fixed stride through the survivors: every run picks the same parents.
        let pick = c
            .live
            .keys()
            .nth((k as usize * 7919) % c.live.len())
            .cloned();
        match (k % 4, pick) {
            (0, _) | (_, None) => {
                let name = format!("c{k}");
                let o = op.part(&name, n);
                parts.create(&PostParams::default(), &o).await.unwrap();
                c.live.insert(name, n);
                c.creates += 1;
            }
            (3, Some(name)) => {
                parts.delete(&name, &DeleteParams::default()).await.unwrap();
                c.live.remove(&name);
                c.deleted.insert(name);
            }
            (_, Some(name)) => {
                let patch = json!({ "spec": { "n": n } });
                let params = PatchParams::default();
                parts
                    .patch(&name, &params, &Patch::Merge(&patch))
                    .await
                    .unwrap();
                c.live.insert(name, n);
                c.updates += 1;
            }
        }
    }
    c
}

/// Polls (every half second, until `within`) until every parent is labelled for one of
/// `shards`, none is draining, and `joiner` (if any) owns at least a sixth of them; returns
/// each parent's shard.
async fn settled_on(
    op: &Sharded,
    parts: &Api<DynamicObject>,
    shards: &[&str],
    joiner: Option<&str>,
    within: Duration,
) -> BTreeMap<String, Option<String>> {
    let drain = format!("drain.shard.khai.dev/{}", op.name);
    let deadline = Instant::now() + within;
    loop {
        let listed = parts.list(&ListParams::default()).await.unwrap().items;
        let on = |o: &DynamicObject| o.labels().get(&op.label).cloned();
        let placed = listed.iter().all(|o| {
            on(o).is_some_and(|s| shards.contains(&s.as_str())) && !o.labels().contains_key(&drain)
        });
        let theirs = joiner.map_or(listed.len(), |j| {
            listed
                .iter()
                .filter(|o| on(o).as_deref() == Some(j))
                .count()
        });
        if placed && theirs * 6 >= listed.len() {
            return listed.iter().map(|o| (o.name_any(), on(o))).collect();
        }
        assert!(
            Instant::now() < deadline,
            "parents not all on {shards:?} (or {joiner:?} holding {theirs} of {}) within {within:?}",
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether every parent of `want` exists, is Ready with `status.n` its `spec.n`, and has its
/// ConfigMap on its shard holding it; and no other parent exists. `Err` says what is not so.
async fn holds(
    parts: &Api<DynamicObject>,
    cm_api: &Api<DynamicObject>,
    label: &str,
    want: &BTreeMap<String, i64>,
) -> Result<(), String> {
    let listed = parts.list(&ListParams::default()).await.unwrap().items;
    if listed.len() != want.len() {
        return Err(format!("{} parents, want {}", listed.len(), want.len()));
    }
    let cms: BTreeMap<String, DynamicObject> = cm_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    for p in &listed {
        let name = p.name_any();
        let n = want.get(&name).ok_or(format!("{name} should not exist"))?;
        let cm = cms.get(&name).ok_or(format!("{name} has no ConfigMap"))?;
        let shard = p.labels().get(label);
        if !ready(p)
            || p.data["status"]["n"] != *n
            || cm.data["data"]["n"].as_str() != Some(n.to_string().as_str())
            || cm.labels().get(label) != shard
        {
            return Err(format!(
                "{name} (n={n}, on {shard:?}) Ready {}, status.n {}, ConfigMap n {} on {:?}",
                ready(p),
                p.data["status"]["n"],
                cm.data["data"]["n"],
                cm.labels().get(label)
            ));
        }
    }
    Ok(())
}

/// Polls (every half second) until [`holds`], or panics with `what` after `within`; how long
/// it took.
async fn wait_until_held(
    parts: &Api<DynamicObject>,
    cm_api: &Api<DynamicObject>,
    label: &str,
    want: &BTreeMap<String, i64>,
    what: &str,
    within: Duration,
) -> Duration {
    let t = Instant::now();
    while let Err(why) = holds(parts, cm_api, label, want).await {
        assert!(t.elapsed() < within, "{what}: after {within:?}, {why}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    t.elapsed()
}

/// Starts shards `ids` into `shards`, by id, with their metrics addresses.
async fn start(op: &Sharded, ids: &[&str], shards: &mut BTreeMap<String, (Khai, String)>) {
    let (started, addrs) = op.start(ids).await;
    for ((id, k), a) in ids.iter().zip(started).zip(addrs) {
        shards.insert(id.to_string(), (k, a));
    }
}

#[tokio::test]
async fn scaling_three_to_four_to_two_during_churn_loses_no_update_and_never_writes_from_two_shards()
 {
    let _heavy = crate::support::heavy().await;
    let client = support::client().await;
    let op = Arc::new(Sharded::new(&client, "scale").await);
    let parts = op.parts(&client);
    let cm_api = support::configmaps(&client, &op.ns.name);
    let mut shards: BTreeMap<String, (Khai, String)> = BTreeMap::new();
    start(&op, &["s0", "s1", "s2"], &mut shards).await;
    support::wait_for_crd(&client, &format!("parts.{}", op.group)).await;
    op.create_parts(&client, PARENTS).await;
    let first: BTreeMap<String, i64> = (0..PARENTS).map(|i| (format!("p{i}"), i as i64)).collect();
    let what = "every parent Ready on one of three shards";
    let within = Duration::from_secs(60 + PARENTS as u64 / 10);
    let steady = wait_until_held(&parts, &cm_api, &op.label, &first, what, within).await;

    let mark = audit::mark();
    let stop = Arc::new(AtomicBool::new(false));
    let churning = tokio::spawn(churn(parts.clone(), op.clone(), stop.clone()));
    let t = Instant::now();
    start(&op, &["s3"], &mut shards).await;
    settled_on(
        &op,
        &parts,
        &["s0", "s1", "s2", "s3"],
        Some("s3"),
        LEASE * 6,
    )
    .await;
    let joined = t.elapsed();

    // 4 -> 2: SIGTERM one shard, kill -9 another, neither the sharder (whose Lease would move).
    let sharder = op.sharder(&client).await;
    let mut others = ["s0", "s1", "s2"].into_iter().filter(|s| *s != sharder);
    let (stopped, killed) = (others.next().unwrap(), others.next().unwrap());
    let t = Instant::now();
    let (code, _) = shards.remove(stopped).unwrap().0.terminate().await;
    assert_eq!(code, Some(0), "{stopped} did not stop cleanly on SIGTERM");
    shards.remove(killed).unwrap().0.kill();
    let live = [sharder.as_str(), "s3"];
    settled_on(&op, &parts, &live, None, LEASE + Duration::from_secs(60)).await;
    let left = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let c = churning.await.unwrap();

    let what = "lost update: the churn stopped";
    let within = Duration::from_secs(60);
    let caught_up = wait_until_held(&parts, &cm_api, &op.label, &c.live, what, within).await;
    let mut moves = (0.0, 0.0);
    for (id, (_, addr)) in &shards {
        let body = metrics_until(addr, "the shard's queue idle", |b| {
            sum(b, "workqueue_depth") == 0.0 && sum(b, "controller_runtime_active_workers") == 0.0
        })
        .await;
        if *id == sharder {
            let sort = |s| sample(&body, "khai_shard_moves_total", &[("sort", s)]);
            moves = (
                sort("drain").unwrap_or_default(),
                sort("move").unwrap_or_default(),
            );
        }
    }
    let (drains, relabels) = moves;

    // Deleted parents' ConfigMaps stay controlled by them, for the garbage collector (this
    // test cluster runs none) to delete; no ConfigMap lacks a parent.
    let uids: BTreeMap<String, String> = parts
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect();
    for cm in cm_api.list(&ListParams::default()).await.unwrap().items {
        let name = cm.name_any();
        if name == "kube-root-ca.crt" {
            continue;
        }
        let owner = cm
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true));
        let owner = owner.unwrap_or_else(|| panic!("ConfigMap {name} has no controlling owner"));
        assert!(
            uids.get(&owner.name) == Some(&owner.uid) || c.deleted.contains(&owner.name),
            "ConfigMap {name} is controlled by {owner:?}, neither a live parent nor a deleted one"
        );
    }

    // The audit log since the churn began. Writes that fail (the sharder's conditional label
    // patches meet a conflict under churn) change nothing and are counted apart.
    let ns = op.ns.name.clone();
    let all = audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == ns.as_str()
            && e["objectRef"]["resource"] != "leases"
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    });
    let (done, failed): (Vec<_>, Vec<_>) = all.into_iter().partition(|e| {
        e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| c < 400)
    });
    let of = |resource: &str, sub: Option<&str>| -> Vec<serde_json::Value> {
        done.iter()
            .filter(|e| {
                e["objectRef"]["resource"] == resource
                    && e["objectRef"]["subresource"].as_str() == sub
            })
            .cloned()
            .collect()
    };
    let applied = |e: &serde_json::Value| {
        e["requestURI"]
            .as_str()
            .is_some_and(|u| u.contains("fieldManager="))
    };
    let (statuses, labels) = (of("parts", Some("status")), of("parts", None));
    let (cm_applies, cm_relabels): (Vec<_>, Vec<_>) =
        of("configmaps", None).into_iter().partition(|e| applied(e));
    let other: Vec<&serde_json::Value> = done
        .iter()
        .filter(|e| {
            !["parts", "configmaps"]
                .contains(&e["objectRef"]["resource"].as_str().unwrap_or_default())
        })
        .collect();

    // A shard's own writes (status, applied ConfigMaps) never interleave with another's.
    let owned: Vec<serde_json::Value> = statuses.iter().chain(&cm_applies).cloned().collect();
    assert_no_shard_writes_in_turn(&owned);

    let (creates, updates) = (c.creates, c.updates);
    let moved = drains + relabels;
    eprintln!(
        "sharding_scale: {PARENTS} parents created and Ready on 3 shards in {steady:?}; s3 joined in {joined:?}, \
         4 -> 2 settled in {left:?}, all caught up {caught_up:?} after the churn stopped; \
         churn: {creates} creates, {updates} updates, {} deletes, {} survive; sharder: {drains} drains, \
         {relabels} moves off stopped shards; writes: {} status, {} ConfigMap applies, {} ConfigMap \
         relabels, {} parent label patches, {} other, {} failed",
        c.deleted.len(),
        c.live.len(),
        statuses.len(),
        cm_applies.len(),
        cm_relabels.len(),
        labels.len(),
        other.len(),
        failed.len()
    );
    // The minimum: one status write and one ConfigMap write per create and per spec change
    // (fewer when a change lands before the previous one was reconciled); one ConfigMap write
    // per moved parent, whether the sharder relabels it or the new shard re-applies it; the
    // sharder's label patches: one per create, per parent off a stopped shard, and three per
    // drained parent (drain, the old shard's acknowledgement, the new label).
    assert!(
        drains > 0.0 && relabels > 0.0,
        "the sharder counted {drains} drains and {relabels} moves"
    );
    // Each parent is drained at most once (the join), and relabelled at most twice: off the
    // stopped shard, possibly onto the killed one (live until its Lease expires), and off that.
    let ever = (PARENTS as u64 + creates) as f64;
    assert!(
        drains <= ever && relabels <= 2.0 * ever,
        "{drains} drains and {relabels} moves for {ever} parents"
    );
    assert!(
        other.is_empty(),
        "writes other than status, ConfigMaps and labels: {other:?}"
    );
    let churned = (creates + updates) as usize;
    assert!(
        statuses.len() <= churned,
        "{} status writes for {churned} specs",
        statuses.len()
    );
    // The test cluster has no garbage collector: a deleted parent's ConfigMap stays, labelled
    // for its shard, and moves off a stopped shard with the rest of that shard's children.
    let cm_writes = cm_applies.len() + cm_relabels.len();
    let orphans = c.deleted.len();
    assert!(
        cm_writes as f64 <= churned as f64 + moved + orphans as f64,
        "{cm_writes} ConfigMap writes for {churned} specs, {moved} moved parents and {orphans} \
         children of deleted parents"
    );
    let label_bound = creates as f64 + 3.0 * drains + relabels;
    assert!(
        labels.len() as f64 <= label_bound,
        "{} label patches, more than {label_bound} ({creates} creates, {drains} drains, {relabels} moves)",
        labels.len()
    );
    drop(shards);
}
