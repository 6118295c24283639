//! `khai run --shards`: three khai processes on loopback share the parents of one operator.
//! Each owns about a third, caches only its share (parents and their children), and when one is
//! killed during churn the sharder moves its parents and their children to the live shards
//! within the lease + 5 s, one label patch per object, and the live shards reconcile them
//! without writing.

mod setup;

use crate::support::audit;
use crate::support::metrics::{http_get, metrics_until, sample, sum, wait_for_metric};
use crate::support::shards::{LEASE, Sharded, ready, shard_of, writes_per_object};
use crate::support::{self, Khai};
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use setup::{churn, up_to_date};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Parents created; `KHAI_TEST_SHARD_OBJECTS` overrides. 3,000 takes minutes on two busy
/// cores with debug builds. The move is CPU-bound on those cores: beside the rest of the suite,
/// a dead shard's 200 parents (of 600) took 15.2–15.6 s to move and reconcile, past the
/// Lease + 5 s, so the suite moves about 150 (docs/scaling.md has the figures at 600 to 3,000).
fn objects() -> usize {
    std::env::var("KHAI_TEST_SHARD_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(450)
}

#[tokio::test]
async fn three_shards_split_the_parents_and_a_killed_shards_parents_move_to_the_live_ones() {
    let _heavy = crate::support::heavy().await;
    let client = support::client().await;
    let op = Sharded::new(&client, "shard").await;
    let (ns, name, group, label) = (&op.ns, &op.name, &op.group, &op.label);
    let ids = ["s0", "s1", "s2"];
    let (mut shards, mut addrs) = op.start(&ids).await;
    // Every shard is live before the first parent exists: each sync sees all three.
    support::wait_for_crd(&client, &format!("parts.{group}")).await;
    let parts = op.parts(&client);
    let n = objects();
    let started = Instant::now();
    op.create_parts(&client, n).await;
    let created = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 10);
    loop {
        let listed = parts.list(&ListParams::default()).await.unwrap().items;
        let done = listed.iter().filter(|o| ready(o)).count();
        if done == n {
            break;
        }
        if Instant::now() >= deadline {
            let tails: Vec<String> = shards.iter().map(|k| k.tail(30)).collect();
            panic!(
                "{done} of {n} parents Ready; the shards' last lines:\n{}",
                tails.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_ready = started.elapsed();

    // Each shard owns a third ± 20%, and its caches hold exactly its parents and their children.
    let owners = shard_of(&parts, label).await;
    let cms = shard_of(&support::configmaps(&client, &ns.name), label).await;
    let mut owned: BTreeMap<String, usize> = BTreeMap::new();
    for (part, shard) in &owners {
        let shard = shard
            .clone()
            .unwrap_or_else(|| panic!("{part} has no shard"));
        assert_eq!(
            cms.get(part),
            Some(&Some(shard.clone())),
            "{part}'s ConfigMap is not on its shard"
        );
        *owned.entry(shard).or_default() += 1;
    }
    // A third ± 20%, as asked at 3,000; below that, each shard's count is a sample of its
    // share of the ring (binomial, one standard deviation √(n·⅓·⅔): 10 at 450), so the bound
    // is at least four of them. The ring itself is held to ± 20% over 3,000 keys by
    // `shard::ring`'s unit test.
    let third = n as f64 / 3.0;
    let spread = (third * 0.2).max(4.0 * (n as f64 * 2.0 / 9.0).sqrt());
    let (low, high) = ((third - spread).ceil() as usize, (third + spread) as usize);
    for (s, addr) in ids.iter().zip(&addrs) {
        let mine = owned.get(*s).copied().unwrap_or_default();
        assert!(
            (low..=high).contains(&mine),
            "{s} owns {mine} of {n}: {owned:?}"
        );
        for kind in ["Part", "ConfigMap"] {
            wait_for_metric(
                addr,
                &format!("{s} caching its {mine} {kind}s"),
                "khai_cached_objects",
                &[("kind", kind)],
                |v| v == mine as f64,
            )
            .await;
        }
    }

    // Restarting every shard over the steady cluster writes nothing: labels already match the
    // ring, children their parents' shard, status its answer.
    // Every shard stops at once, the sharder first, as when every pod is deleted: a shard
    // stopping while the sharder runs releases its Lease, and its objects move at once.
    let holder = op.sharder(&client).await;
    let first = ids.iter().position(|s| *s == holder).unwrap();
    let mut stopping: Vec<Khai> = std::mem::take(&mut shards);
    let sharder_first = stopping.remove(first);
    let stopped = std::iter::once(sharder_first)
        .chain(stopping)
        .map(Khai::terminate);
    for (code, _) in futures::future::join_all(stopped).await {
        assert_eq!(code, Some(0));
    }
    let mark = audit::mark();
    let restarted = Instant::now();
    (shards, addrs) = op.start(&ids).await;
    // The replica holding the sharder Lease says when its first sync that may move objects is
    // done; nothing may have been written by then, nor once every shard is idle.
    let holder = op.sharder(&client).await;
    let sharder = ids.iter().position(|s| *s == holder).unwrap();
    let settled = json!({ "settled": true });
    shards[sharder]
        .wait_for_json_log(0, "the sharder settling", settled)
        .await;
    let mut reconciled = 0.0;
    for addr in &addrs {
        let body = metrics_until(addr, "every parent reconciled and the queue idle", |b| {
            sum(b, "controller_runtime_reconcile_total") > 0.0
                && sum(b, "workqueue_depth") == 0.0
                && sum(b, "controller_runtime_active_workers") == 0.0
        })
        .await;
        reconciled += sum(&body, "controller_runtime_reconcile_total");
    }
    let writes = audit::writes(mark, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str() && e["objectRef"]["resource"] != "leases"
    });
    eprintln!(
        "sharding: restart of 3 shards over {n} steady parents: {reconciled} reconciles, writes {writes:?}, settled and idle after {:?}",
        restarted.elapsed()
    );
    assert!(
        reconciled >= n as f64,
        "{reconciled} reconciles after the restart, fewer than {n} parents"
    );
    if !writes.is_empty() {
        let what: Vec<String> = audit::entries(mark, |e| {
            e["objectRef"]["namespace"] == ns.name.as_str()
                && e["objectRef"]["resource"] != "leases"
        })
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                e["userAgent"], e["requestURI"], e["requestReceivedTimestamp"]
            )
        })
        .collect();
        let tails: Vec<String> = shards.iter().map(|k| k.tail(40)).collect();
        panic!(
            "restarting the shards over a steady cluster wrote {writes:?}: {what:#?}\n{}",
            tails.join("\n---\n")
        );
    }

    // kill -9 a shard that is not the sharder, during churn: new parents keep coming and some
    // parents, a few of the dead shard's among them, keep changing. The dead shard's parents
    // must be moved, children with them, and reconciled within the lease + 5 s.
    let sharder = op.sharder(&client).await;
    let victim = ids.iter().position(|s| *s != sharder).unwrap();
    let dead = ids[victim];
    let theirs: Vec<String> = owners
        .iter()
        .filter(|(_, s)| s.as_deref() == Some(dead))
        .map(|(p, _)| p.clone())
        .collect();
    // Changed while their shard is dead: these must be reconciled by a live one.
    let touched: Vec<String> = theirs.iter().take(5).cloned().collect();
    let others: Vec<String> = owners
        .keys()
        .filter(|p| !theirs.contains(p))
        .take(20)
        .cloned()
        .collect();
    // Resident memory of each shard now, the sharder's included, for the figures in
    // docs/scaling.md.
    let rss: Vec<String> = ids
        .iter()
        .zip(&shards)
        .map(|(s, k)| {
            let status = std::fs::read_to_string(format!("/proc/{}/status", k.pid()));
            let rss = status.ok().and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .map(|l| l.trim_start_matches("VmRSS:").trim().to_string())
            });
            let role = if *s == sharder { " (sharder)" } else { "" };
            format!("{s}{role}: {}", rss.unwrap_or_default())
        })
        .collect();
    eprintln!("sharding: {n} parents; resident memory {rss:?}");
    let at_sharder = ids.iter().position(|s| *s == sharder).unwrap();
    let logged = shards[at_sharder].log_len();
    let mark = audit::mark();
    shards[victim].kill();
    let killed = Instant::now();
    let killed_at = jiff::Timestamp::now();
    let churning = tokio_util::sync::CancellationToken::new();
    let churn = tokio::spawn(churn(
        parts.clone(),
        group.clone(),
        touched.clone(),
        others,
        churning.clone(),
    ));
    let cm_api = support::configmaps(&client, &ns.name);
    // Done when no Part or ConfigMap is labelled for the dead shard any more and the parents
    // changed meanwhile are reconciled: label-selected lists and five reads, every 200 ms, so
    // that watching does not slow the API server whose writes are being timed.
    let on_dead = ListParams::default().labels(&format!("{label}={dead}"));
    loop {
        let parts_left = parts.list(&on_dead).await.unwrap().items.len();
        let cms_left = cm_api.list(&on_dead).await.unwrap().items.len();
        let mut current = true;
        for p in &touched {
            current &= up_to_date(&parts.get(p).await.unwrap());
        }
        if parts_left == 0 && cms_left == 0 && current {
            break;
        }
        assert!(
            killed.elapsed() < LEASE + Duration::from_secs(60),
            "{dead}'s parents not relabelled and reconciled by live shards a minute past its lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let moved = killed.elapsed();
    let parts_now = shard_of(&parts, label).await;
    let cms_now = shard_of(&cm_api, label).await;
    for p in &theirs {
        let s = parts_now.get(p).cloned().flatten();
        assert!(s.is_some(), "{p} has no shard after the move");
        assert_eq!(
            cms_now.get(p),
            Some(&s),
            "{p}'s ConfigMap is not on its shard"
        );
    }
    // When the sharder took the dead shard's Lease over and had relabelled its objects.
    let since_kill = |line: serde_json::Value| {
        let at: jiff::Timestamp = line["timestamp"].as_str().unwrap().parse().unwrap();
        Duration::try_from(at - killed_at).unwrap_or_default()
    };
    let s = &shards[at_sharder];
    let taken = json!({ "shard": dead, "lease": format!("khai-{name}-shard-{dead}") });
    let taken = since_kill(
        s.wait_for_json_log(logged, "the Lease taken over", taken)
            .await,
    );
    let relabelled = json!({ "shard": dead, "left": 0 });
    let relabelled = since_kill(
        s.wait_for_json_log(logged, "the objects moved", relabelled)
            .await,
    );
    churning.cancel();
    let churned = churn.await.unwrap();
    // Every parent, those made during the churn too, ends Ready at its latest generation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = parts.list(&ListParams::default()).await.unwrap().items;
        let behind: Vec<String> = listed
            .iter()
            .filter(|o| !up_to_date(o))
            .map(|o| o.name_any())
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} parents not Ready at their latest generation a minute after the churn: {behind:?}",
            behind.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let live: Vec<&String> = addrs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, a)| a)
        .collect();
    let mut moves = 0.0;
    for addr in &live {
        let (_, body) = http_get(addr, "/metrics").await;
        moves += sample(&body, "khai_shard_moves_total", &[("sort", "move")]).unwrap_or_default();
    }
    // The move's writes to each of the dead shard's untouched parents and their ConfigMaps: one
    // label patch each, from the sharder; the new shard finds them as it would write them.
    let still: Vec<&String> = theirs.iter().filter(|p| !touched.contains(p)).collect();
    let of_still = |e: &serde_json::Value| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
            && still.iter().any(|p| e["objectRef"]["name"] == p.as_str())
    };
    let per_object = writes_per_object(mark, of_still);
    eprintln!(
        "sharding: {n} parents created in {created:?}, all Ready after {all_ready:?}; owned {owned:?}; \
         {} parents of {dead} moved and reconciled {moved:?} after kill -9 (lease {LEASE:?}) \
         during churn ({churned} writes): Lease taken over after {taken:?}, objects relabelled \
         after {relabelled:?}; moves counted {moves}",
        theirs.len()
    );
    for p in &still {
        for resource in ["parts", "configmaps"] {
            let key = (resource.to_string(), p.to_string());
            assert_eq!(
                per_object.get(&key).map(Vec::as_slice),
                Some(&["patch merge".to_string()][..]),
                "moving {resource} {p} took other writes than one label patch"
            );
        }
        let status = ("parts/status".to_string(), p.to_string());
        assert_eq!(
            per_object.get(&status),
            None,
            "moving {p} rewrote its status"
        );
    }
    assert!(
        moved < LEASE + Duration::from_secs(5),
        "{dead}'s parents moved and reconciled {moved:?} after kill -9, past the lease {LEASE:?} + 5 s"
    );
    assert!(
        moves >= theirs.len() as f64,
        "the sharder counted {moves} moves for {} parents",
        theirs.len()
    );

    // The killed shard comes back: the live shards let go of its share (drain, acknowledged)
    // before it takes the parents over; no child is written by two shards in turn twice.
    let mark = audit::mark();
    let rejoined = Instant::now();
    let (mut back, mut back_addr) = op.start(&[dead]).await;
    shards[victim] = back.remove(0);
    let addr = back_addr.remove(0);
    let back = loop {
        let parts_now = shard_of(&parts, label).await;
        let cms_now = shard_of(&cm_api, label).await;
        let back = parts_now
            .values()
            .filter(|s| s.as_deref() == Some(dead))
            .count();
        let settled = parts_now
            .iter()
            .all(|(p, s)| s.is_some() && cms_now.get(p) == Some(s));
        if settled && back >= low {
            break back;
        }
        assert!(
            rejoined.elapsed() < LEASE * 2 + Duration::from_secs(60),
            "{dead} rejoined but holds {back} parents, or some parent's ConfigMap is not on its shard"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let rejoin = rejoined.elapsed();
    let what = format!("{dead} caching the {back} Parts it owns");
    let labels = [("kind", "Part")];
    let cached = wait_for_metric(&addr, &what, "khai_cached_objects", &labels, |v| {
        v == back as f64
    })
    .await;
    let mut drained = 0.0;
    for (_, a) in addrs.iter().enumerate().filter(|(i, _)| *i != victim) {
        let (_, body) = http_get(a, "/metrics").await;
        drained += sum(&body, "khai_shard_drains_total");
    }
    let writers = audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["resource"] == "configmaps"
    });
    let mut by_object: BTreeMap<String, Vec<(jiff::Timestamp, String)>> = BTreeMap::new();
    for e in &writers {
        let agent = e["userAgent"].as_str().unwrap_or_default();
        let who = agent
            .split_once(" (")
            .map_or(agent, |(_, w)| w.trim_end_matches(')'));
        by_object
            .entry(
                e["objectRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
            .or_default()
            .push((
                audit::timestamp(e, "requestReceivedTimestamp"),
                who.to_string(),
            ));
    }
    for (object, mut w) in by_object {
        w.sort();
        let mut turns: Vec<&str> = Vec::new();
        for (_, who) in &w {
            if turns.last() != Some(&who.as_str()) {
                assert!(
                    !turns.contains(&who.as_str()),
                    "ConfigMap {object} written by {w:?}: two shards in turn"
                );
                turns.push(who);
            }
        }
    }
    eprintln!(
        "sharding: {dead} rejoined and holds {back} parents (caching {cached}) after {rejoin:?}; drains acknowledged by the others: {drained}; ConfigMap writes since: {}",
        writers.len()
    );
    assert_eq!(
        cached, back as f64,
        "{dead} caches {cached} Parts, owns {back}"
    );
    assert!(
        drained >= back as f64,
        "{drained} drains acknowledged for {back} parents moved back"
    );
    drop(shards);
}
