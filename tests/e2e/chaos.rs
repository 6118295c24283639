//! Chaos: khai loses nothing when it is killed, when the API server or etcd restarts,
//! when watches expire, when the API server freezes, or when the leader of two replicas dies.
//!
//! Every scenario runs on a cluster of its own ([`support::dedicated`]), one at a time, over N
//! Caches (an isolated copy of `examples/cache`, webhooks left out) that a driver keeps updating
//! while the faults land. After the last fault the driver stops and the scenario checks:
//! - every Cache reaches its desired children and status: a Deployment with the Cache's
//!   `desired_size`, a Service, `Ready=True` at the Cache's generation;
//! - the last spec wins: each Cache holds the size the driver last wrote, and so does its
//!   Deployment (0 lost updates);
//! - 0 duplicate children, 0 orphans (every child khai manages is controlled by a live Cache);
//! - no write storm: from the end of the faults to the steady state, at most 2 writes per object
//!   (its Deployment and status) for each of its updates khai had not written yet (its status
//!   write, the last of a reconcile, not yet received), and at most 2 for an object with none
//!   (the audit log), even when the watch delivers khai's own writes late;
//! - no hot loop: once steady, a quiet window sees no reconcile and no write (a window in which
//!   a watch of khai's restarted and listed again is watched again, up to three);
//! - `khai_reconcile_overlaps_total` is 0 in every khai process, read before each kill.
//!
//! The size comes from the environment, so CI runs a small one and `scripts/chaos` the full
//! one: `KHAI_CHAOS_OBJECTS` (CI 24), `KHAI_CHAOS_KILLS` (3), `KHAI_CHAOS_LEADER_KILLS` (3),
//! `KHAI_CHAOS_PAUSE` seconds (5), `KHAI_CHAOS_UPDATES` per second (4), `KHAI_CHAOS_SEED`. Each
//! scenario prints one `chaos:` line with its figures (objects, faults, recovery p50/p99, writes).

use crate::support::audit;
use crate::support::chaos::{
    Driver, GROUP, LEASE, Scene, assert_no_overlap, recover_and_report, steady,
};
use crate::support::dedicated::dedicated;
use crate::support::metrics::{wait_for_leadership, wait_for_metric};
use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test]
async fn khai_killed_at_random_points_loses_nothing() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("kill").await;
    let mut khai = scene.start(&[]);
    let expected = steady(&scene, &khai).await;
    let driver = Driver::start(&scene, &expected);
    for k in 0..scene.size.kills {
        let wait = scene.rng.millis(300, 3000);
        tokio::time::sleep(wait).await;
        assert_no_overlap(&khai, &format!("before kill {k}")).await;
        khai.kill();
        // Down for a moment, as a Pod being restarted, while the driver goes on.
        tokio::time::sleep(scene.rng.millis(200, 2000)).await;
        khai = scene.start(&[]);
    }
    let stopped = driver.stop().await;
    let faults = format!("{} SIGKILLs", scene.size.kills);
    recover_and_report(&scene, &khai, &expected, stopped, &faults).await;
}

#[tokio::test]
async fn apiserver_restart_loses_nothing() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("apiserver").await;
    let khai = scene.start(&[]);
    let expected = steady(&scene, &khai).await;
    let driver = Driver::start(&scene, &expected);
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let away = scene.cluster.restart_apiserver(&[]).await;
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let stopped = driver.stop().await;
    let faults = format!("kube-apiserver restart ({:.1}s)", away.as_secs_f64());
    recover_and_report(&scene, &khai, &expected, stopped, &faults).await;
}

#[tokio::test]
async fn etcd_restart_loses_nothing() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("etcd").await;
    let khai = scene.start(&[]);
    let expected = steady(&scene, &khai).await;
    let driver = Driver::start(&scene, &expected);
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let away = scene.cluster.restart_etcd().await;
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let stopped = driver.stop().await;
    let faults = format!("etcd restart ({:.1}s)", away.as_secs_f64());
    recover_and_report(&scene, &khai, &expected, stopped, &faults).await;
}

/// etcd's history is compacted while khai watches, then the API server restarts with its watch
/// cache off: every watch resumes from a version that no longer exists, gets 410 Gone and must
/// list again.
#[tokio::test]
async fn expired_watches_relist_and_lose_nothing() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("expired").await;
    let khai = scene.start(&[]);
    let expected = steady(&scene, &khai).await;
    // A steady cluster writes nothing, so the second compaction asks for the revision the first
    // compacted at: history already compacted (as the API server's own compactor leaves it) is
    // what was asked for, not a failure of the scenario.
    scene.cluster.compact().await;
    scene.cluster.compact().await;
    let driver = Driver::start(&scene, &expected);
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    scene.cluster.compact().await;
    let away = scene
        .cluster
        .restart_apiserver(&["--default-watch-cache-size=0"])
        .await;
    scene.cluster.compact().await;
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let stopped = driver.stop().await;
    let faults = format!(
        "etcd compaction + kube-apiserver restart without watch cache ({:.1}s)",
        away.as_secs_f64()
    );
    recover_and_report(&scene, &khai, &expected, stopped, &faults).await;
    // The scenario did what it says: some watch was told its version is gone. (The API server
    // stays without watch cache for the scenarios after this one; they hold either way.)
    wait_for_metric(
        &khai.metrics_addr().await,
        "a watch ending with 410 Gone",
        "khai_watch_restarts_total",
        &[("reason", "gone")],
        |n| n >= 1.0,
    )
    .await;
}

#[tokio::test]
async fn frozen_apiserver_loses_nothing() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("pause").await;
    let khai = scene.start(&[]);
    let expected = steady(&scene, &khai).await;
    let driver = Driver::start(&scene, &expected);
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let pause = scene.size.pause;
    scene.cluster.pause_apiserver(pause).await;
    tokio::time::sleep(scene.rng.millis(500, 2000)).await;
    let stopped = driver.stop().await;
    let faults = format!("kube-apiserver SIGSTOP {pause}s");
    recover_and_report(&scene, &khai, &expected, stopped, &faults).await;
}

/// The replica identity in a user agent `khai/<version> (<identity>)`.
fn identity(agent: &str) -> Option<&str> {
    agent
        .strip_prefix("khai/")?
        .split_once(" (")?
        .1
        .strip_suffix(')')
}

#[tokio::test]
async fn leader_killed_repeatedly_never_leaves_two_writers() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("leader").await;
    let from = audit::mark_in(scene.cluster.audit_log());
    let ns = scene.ns.clone();
    let flags = [
        "--leader-elect",
        "--leader-elect-namespace",
        &ns,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "1s",
    ];
    let mut leader = scene.start(&flags);
    wait_for_leadership(&leader.metrics_addr().await, "leadership", true).await;
    let mut standby = scene.start(&flags);
    let mut standby_addr = standby.metrics_addr().await;
    wait_for_leadership(&standby_addr, "a standby", false).await;
    let expected = steady(&scene, &leader).await;
    let driver = Driver::start(&scene, &expected);
    let mut takeovers = Vec::new();
    for k in 0..scene.size.leader_kills {
        tokio::time::sleep(scene.rng.millis(1000, 3000)).await;
        assert_no_overlap(&leader, &format!("before leader kill {k}")).await;
        leader.kill();
        let killed = Instant::now();
        wait_for_leadership(&standby_addr, "the standby taking over", true).await;
        takeovers.push(killed.elapsed());
        leader = standby;
        standby = scene.start(&flags);
        standby_addr = standby.metrics_addr().await;
        wait_for_leadership(&standby_addr, "a new standby", false).await;
    }
    let stopped = driver.stop().await;
    let faults = format!("{} leader SIGKILLs", scene.size.leader_kills);
    recover_and_report(&scene, &leader, &expected, stopped, &faults).await;

    // Never two writers at once: ordered by when the API server received them, each replica's
    // writes form one unbroken run (the Lease itself aside, which standbys write to take it).
    let writes = audit::entries(from, |e| {
        e["objectRef"]["namespace"] == ns.as_str()
            && e["objectRef"]["resource"] != "leases"
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
    });
    let mut order: Vec<(jiff::Timestamp, String)> = writes
        .iter()
        .map(|e| {
            let agent = e["userAgent"].as_str().unwrap();
            let who = identity(agent).unwrap_or_else(|| panic!("no identity in {agent:?}"));
            (
                audit::timestamp(e, "requestReceivedTimestamp"),
                who.to_string(),
            )
        })
        .collect();
    order.sort();
    let mut runs: Vec<(String, jiff::Timestamp, jiff::Timestamp, usize)> = Vec::new();
    for (at, who) in order {
        match runs.last_mut() {
            Some(run) if run.0 == who => {
                run.2 = at;
                run.3 += 1;
            }
            _ => {
                assert!(
                    runs.iter().all(|r| r.0 != who),
                    "{who} wrote at {at} after another replica had written since its last write: \
                     two writers at once; runs so far: {runs:?}"
                );
                runs.push((who, at, at, 1));
            }
        }
    }
    let limit = LEASE + Duration::from_secs(2);
    let worst = takeovers.iter().max().copied().unwrap_or_default();
    eprintln!(
        "chaos: scenario=leader take-overs {:?} (lease {LEASE:?}); writers in turn: {:?}",
        takeovers,
        runs.iter().map(|r| (&r.0, r.3)).collect::<Vec<_>>()
    );
    assert!(
        worst <= limit,
        "a take-over took {worst:?}, more than the lease duration + 2 s ({limit:?})"
    );
}

/// After an API server restart khai's watches resumed 10 s after the server was
/// ready. Two causes: a starting API server answers 503 with `Retry-After: 10` for custom
/// resources, which kube's client followed, and kube-runtime's watch backoff grows to 30 s plus
/// up to 100 % jitter. khai now retries such answers after 0.5, 1 and 2 s and its watches at
/// most 5 s (+20 %) apart, so an object created the moment the server is back is reconciled
/// within seconds. The gap is measured after a restart and after a freeze.
#[tokio::test]
async fn watches_resume_within_seconds_of_an_apiserver_restart_or_freeze() {
    let _heavy = crate::support::heavy().await;
    let _turn = dedicated().exclusive().await;
    let mut scene = Scene::new("resume").await;
    let khai = scene.start(&[]);
    let cluster = scene.cluster;
    let probe = |i: usize| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1"), "kind": "Cache",
            "metadata": { "name": format!("probe-{i}") }, "spec": { "desired_size": 1 },
        }))
        .unwrap()
    };
    crate::support::wait_for_crd(&cluster.client().await, &format!("caches.{GROUP}")).await;
    scene
        .caches
        .create(&PostParams::default(), &probe(0))
        .await
        .unwrap();
    crate::support::wait_exists(
        &scene.deployments,
        "probe-0",
        "the first probe's Deployment",
    )
    .await;
    let mut gaps = Vec::new();
    for (i, fault) in ["restart", "freeze"].into_iter().enumerate() {
        let away = match fault {
            "restart" => cluster.restart_apiserver(&[]).await,
            _ => cluster.pause_apiserver(scene.size.pause).await,
        };
        let back = Instant::now();
        scene
            .caches
            .create(&PostParams::default(), &probe(i + 1))
            .await
            .unwrap();
        let name = format!("probe-{}", i + 1);
        crate::support::wait_exists(&scene.deployments, &name, "the probe's Deployment").await;
        let gap = back.elapsed();
        eprintln!(
            "chaos: scenario=resume after a kube-apiserver {fault} ({:.1}s away): a Cache created \
             when it was back had its Deployment {:.2}s later",
            away.as_secs_f64(),
            gap.as_secs_f64()
        );
        gaps.push((fault, gap));
    }
    drop(khai);
    // At worst the server is back just after a watch failed: the 5 s backoff cap + 20 %
    // jitter, plus a reconcile on a busy 2-core machine.
    let bound = Duration::from_secs(7);
    for (fault, gap) in gaps {
        assert!(
            gap <= bound,
            "after a kube-apiserver {fault}, khai reconciled a new object only {gap:?} later \
             (bound {bound:?}): its watches resumed late"
        );
    }
}
