//! Canary rollouts (`khai run --candidate DIR --candidate-percent N`, docs/rollouts.md) of
//! examples/bench-cache: the candidate writes only for the objects of its hash share, keeps its
//! rollout's state across a restart, and is promoted once its window has passed; a candidate
//! that fails on 30% of its objects is rolled back within the window and every object ends
//! Ready under the old revision, none lost and none reconciled twice at once.

use crate::diff::{DATA, all_reconciled, bench_cache, create_caches, size};
use crate::support::metrics::{http_get, sum, wait_for_metric};
use crate::support::{Khai, TestNamespace, audit, custom_api, wait_for_crd};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Caches created: 500 by default; `KHAI_TEST_CANARY_OBJECTS` overrides.
fn objects() -> usize {
    std::env::var("KHAI_TEST_CANARY_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500)
}

/// The candidate's line for [`DATA`]: the same data, marked as the candidate's.
const NEXT: &str =
    "data: #{ size: `${obj.spec.size}`, image: obj.spec.image, revision: \"next\" },";

/// The candidate that fails on the Caches of size 1 to 3, 30% of them.
const FAILING: &str = "data: #{ size: `${obj.spec.size}`, image: obj.spec.image,
                      revision: if obj.spec.size <= 3 { throw \"candidate bug\" } else { \"next\" } },";

/// The test's namespace, its Caches' API and the two revisions' directories.
struct Setup {
    client: kube::Client,
    ns: TestNamespace,
    group: String,
    caches: Api<DynamicObject>,
    active: PathBuf,
    candidate: PathBuf,
    _dirs: Vec<tempfile::TempDir>,
}

async fn setup(name: &str, candidate_line: &str) -> Setup {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, name).await;
    let group = format!(
        "c{:x}.canary.khai.dev",
        crate::support::nanos_u64() % 0xffff_ffff
    );
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let active = bench_cache(dirs[0].path(), &group, &[]);
    let candidate = bench_cache(dirs[1].path(), &group, &[(DATA, candidate_line)]);
    let caches = custom_api(&client, &ns.name, &group, "Cache", "caches");
    Setup {
        client,
        ns,
        group,
        caches,
        active,
        candidate,
        _dirs: dirs,
    }
}

impl Setup {
    /// khai with the candidate rolled out to `percent` of the objects.
    fn canary(&self, percent: &str, promote_after: &str) -> Khai {
        let candidate = self.candidate.to_str().unwrap();
        let ns = self.ns.name.as_str();
        Khai::start(
            &self.active,
            ns,
            &[
                "--candidate",
                candidate,
                "--candidate-percent",
                percent,
                "--promote-after",
                promote_after,
                "--leader-elect-namespace",
                ns,
            ],
        )
    }

    /// The rollout's Lease's annotations `started` and `share`.
    async fn kept(&self) -> (String, String) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.ns.name);
        let lease = leases.get("khai-diff-cache-rollout").await.unwrap();
        let a = lease.metadata.annotations.unwrap_or_default();
        (
            a["khai.dev/rollout-started"].clone(),
            a["khai.dev/rollout-share"].clone(),
        )
    }

    /// Names of the ConfigMaps whose data says `revision: next`, and of all of them.
    async fn marked(&self) -> (BTreeSet<String>, usize) {
        let cms = crate::support::configmaps(&self.client, &self.ns.name)
            .list(&ListParams::default())
            .await
            .unwrap();
        let marked = cms
            .items
            .iter()
            .filter(|c| c.data["data"]["revision"] == "next")
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        (marked, cms.items.len())
    }
}

/// Whether the object with `uid` is in the candidate's `percent` share, as khai hashes it.
fn in_share(uid: &str, percent: u64) -> bool {
    xxhash_rust::xxh3::xxh3_64(uid.as_bytes()) % 100 < percent
}

#[tokio::test]
async fn a_canary_writes_only_its_hash_share_keeps_its_state_over_a_restart_and_is_promoted() {
    let n = objects();
    let s = setup("canary", NEXT).await;
    let first = Khai::start(&s.active, &s.ns.name, &[]);
    wait_for_crd(&s.client, &format!("caches.{}", s.group)).await;
    create_caches(&s.caches, &s.group, n).await;
    all_reconciled(&s.caches, n).await;
    assert_eq!(first.terminate().await.0, Some(0));

    // The candidate at 10%: it rewrites exactly the ConfigMaps of its hash share.
    let share: BTreeSet<String> = s
        .caches
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| in_share(c.metadata.uid.as_deref().unwrap(), 10))
        .map(|c| format!("{}-config", c.metadata.name.as_deref().unwrap()))
        .collect();
    let expected = n as f64 / 10.0;
    assert!(
        (share.len() as f64 - expected).abs() <= 0.4 * expected,
        "a 10% hash share of {n} is {expected} ± 40%: {}",
        share.len()
    );
    // The window leaves room for the restart below, done 3 s after this start on two busy cores.
    let from = audit::mark();
    let khai = s.canary("10", "20s");
    let addr = khai.metrics_addr().await;
    let both = n as f64;
    crate::support::metrics::metrics_until(&addr, "every Cache reconciled once", |b| {
        sum(b, "khai_rollout_reconciles_total") >= both
    })
    .await;
    let writes = || {
        audit::entries(from, |e| {
            e["objectRef"]["namespace"] == s.ns.name.as_str()
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("khai/"))
        })
        .iter()
        .map(|e| {
            let r = &e["objectRef"];
            let (resource, name) = (r["resource"].as_str(), r["name"].as_str());
            format!("{} {}", resource.unwrap(), name.unwrap())
        })
        .collect::<Vec<_>>()
    };
    let mine = share.len();
    crate::support::poll_until("the audit log to hold the candidate's writes", || {
        let logged = writes()
            .iter()
            .filter(|w| w.starts_with("configmaps "))
            .count();
        async move { logged >= mine }
    })
    .await;
    let (cms, others): (Vec<String>, Vec<String>) = writes()
        .into_iter()
        .partition(|w| w.starts_with("configmaps "));
    let want: Vec<String> = share.iter().map(|c| format!("configmaps {c}")).collect();
    let mut cms = cms;
    cms.sort();
    assert_eq!(
        cms, want,
        "only the share's ConfigMaps are written, each once"
    );
    assert_eq!(
        others,
        ["leases khai-diff-cache-rollout"],
        "and the rollout's Lease, once"
    );
    assert_eq!(s.marked().await.0, share);

    // A restart resumes the same rollout: same start, same share.
    let kept = s.kept().await;
    assert_eq!(kept.1, "10");
    assert_eq!(khai.terminate().await.0, Some(0));
    let khai = s.canary("10", "20s");
    let addr = khai.metrics_addr().await;
    wait_for_metric(
        &addr,
        "the canary resumed",
        "khai_rollout_share",
        &[],
        |v| v == 10.0,
    )
    .await;
    assert_eq!(s.kept().await, kept, "the Lease keeps the rollout's start");

    // Healthy, it is promoted when the window ends, and reconciles every object.
    let promoted = [("phase", "promoted")];
    wait_for_metric(
        &addr,
        "the promotion",
        "khai_rollout_phase",
        &promoted,
        |v| v == 1.0,
    )
    .await;
    crate::support::poll_until("every ConfigMap written by the candidate", || async {
        s.marked().await.0.len() == n
    })
    .await;
    let (_, metrics) = http_get(&addr, "/metrics").await;
    assert_eq!(sum(&metrics, "khai_rollout_share"), 100.0);
    assert_eq!(khai.terminate().await.0, Some(0));
}

#[tokio::test]
async fn a_candidate_failing_on_30_percent_is_rolled_back_within_the_window_and_all_end_ready() {
    let n = objects();
    let s = setup("canary-back", FAILING).await;
    // A long window: the rollback comes from the failures, not its end.
    let khai = s.canary("30", "10m");
    let addr = khai.metrics_addr().await;
    wait_for_crd(&s.client, &format!("caches.{}", s.group)).await;
    create_caches(&s.caches, &s.group, n).await;
    let back = [("phase", "rolled-back")];
    wait_for_metric(&addr, "the rollback", "khai_rollout_phase", &back, |v| {
        v == 1.0
    })
    .await;
    let failed = [("revision", "candidate"), ("outcome", "failed")];
    let (_, metrics) = http_get(&addr, "/metrics").await;
    let failures =
        crate::support::metrics::sample(&metrics, "khai_rollout_reconciles_total", &failed);
    assert!(failures.is_some_and(|f| f >= 1.0), "{failures:?}");

    // Every Cache ends Ready under the active revision: all its ConfigMaps, none marked.
    all_reconciled(&s.caches, n).await;
    crate::support::poll_until("every ConfigMap back to the active revision's", || async {
        let (marked, all) = s.marked().await;
        marked.is_empty() && all == n
    })
    .await;
    crate::support::poll_until("every Cache Ready", || async {
        let list = s.caches.list(&ListParams::default()).await.unwrap();
        list.items.len() == n
            && list.items.iter().all(|c| {
                c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
    })
    .await;
    let small = (0..n).filter(|&i| size(i) <= 3).count();
    assert!(small > 0, "some Caches are ones the candidate fails on");
    let (_, metrics) = http_get(&addr, "/metrics").await;
    assert_eq!(sum(&metrics, "khai_reconcile_overlaps_total"), 0.0);
    assert_eq!(sum(&metrics, "khai_rollout_share"), 0.0);
    assert_eq!(khai.terminate().await.0, Some(0));
}
