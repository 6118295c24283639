//! Candidate revisions (`khai run --candidate`, docs/rollouts.md): 200 Caches of
//! examples/bench-cache reconciled by the active revision while a candidate that adds a `tier`
//! to the ConfigMap of every Cache with `spec.size > 5` runs in its shadow. The candidate writes
//! nothing (the audit log holds exactly the active revision's writes, no dry run, and no
//! ConfigMap has a `tier`), and exactly the larger Caches are reported divergent (one of them
//! because the candidate fails on it, counted in `khai_candidate_errors_total`): in
//! `khai_candidate_divergent_objects`, on `/candidate/divergent` and by `khai diff --running`.

use crate::diff::{CACHES, DATA, all_reconciled, bench_cache, create_caches, size};
use crate::support::metrics::{http_get, wait_for_metric};
use crate::support::{Khai, TestNamespace, audit, custom_api, wait_for_crd};
use kube::api::ListParams;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The candidate's line for [`DATA`]: a `tier` for the Caches larger than 5, and a failure for
/// [`BROKEN`].
const TIER: &str = "data: #{ size: `${obj.spec.size}`, image: obj.spec.image,
                      tier: (if obj.metadata.name == \"cache-9\" { throw \"candidate bug\" }
                             else if obj.spec.size > 5 { \"large\" } else { () }) },";

/// The one (larger) Cache the candidate fails on.
const BROKEN: &str = "cache-9";

fn names(doc: &Value) -> BTreeSet<String> {
    doc["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

/// `khai diff --running addr -o output`: exit code and stdout.
fn diff_running(addr: &str, output: &str) -> (i32, String) {
    let out = std::process::Command::new(crate::support::khai_bin())
        .args(["diff", "--running", addr, "-o", output])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "khai diff --running: {stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

#[tokio::test]
async fn a_shadow_candidate_writes_nothing_and_reports_exactly_the_divergent_objects() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "shadow").await;
    let group = format!(
        "s{:x}.shadow.khai.dev",
        crate::support::nanos_u64() % 0xffff_ffff
    );
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let active = bench_cache(dirs[0].path(), &group, &[]);
    let candidate = bench_cache(dirs[1].path(), &group, &[(DATA, TIER)]);
    let from = audit::mark();
    let khai = Khai::start(
        &active,
        &ns.name,
        &["--candidate", candidate.to_str().unwrap()],
    );
    let addr = khai.metrics_addr().await;
    wait_for_crd(&client, &format!("caches.{group}")).await;
    let caches = custom_api(&client, &ns.name, &group, "Cache", "caches");
    create_caches(&caches, &group, CACHES).await;
    all_reconciled(&caches, CACHES).await;
    let large: BTreeSet<String> = (0..CACHES)
        .filter(|&i| size(i) > 5)
        .map(|i| format!("cache-{i}"))
        .collect();
    let n = large.len() as f64;
    wait_for_metric(
        &addr,
        "every larger Cache divergent",
        "khai_candidate_divergent_objects",
        &[],
        |v| v == n,
    )
    .await;

    // Exactly the larger Caches, each with the candidate's ConfigMap against the active one's.
    let (code, body) = http_get(&addr, "/candidate/divergent").await;
    assert_eq!(code, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(names(&page), large, "{page:#}");
    for o in page["objects"].as_array().unwrap() {
        if o["name"] == BROKEN {
            let error = o["error"].as_str().unwrap_or_default();
            assert!(error.contains("candidate bug"), "{o:#}");
            continue;
        }
        let child = &o["children"][0];
        assert_eq!(o["children"].as_array().unwrap().len(), 1, "{o:#}");
        assert_eq!(child["action"], "change", "{o:#}");
        assert_eq!(child["before"]["data"].get("tier"), None, "{o:#}");
        assert_eq!(child["after"]["data"]["tier"], "large", "{o:#}");
        assert_eq!(o["status"], json!([]), "the status is the same: {o:#}");
    }
    let (code, out) = diff_running(&addr, "json");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(names(&report), large);
    assert_eq!(
        code, 1,
        "divergent objects exit 1, as a diff that changes something"
    );
    let (code, text) = diff_running(&addr, "text");
    assert_eq!(
        text.matches("+  tier: large\n").count(),
        large.len() - 1,
        "{text}"
    );
    assert!(
        text.contains(&format!("{BROKEN} (controller cache): fails: ")),
        "{text}"
    );
    let (_, metrics) = http_get(&addr, "/metrics").await;
    let errors = crate::support::metrics::sum(&metrics, "khai_candidate_errors_total");
    assert!(
        errors >= 1.0,
        "the candidate's failure is counted: {errors}"
    );
    assert_eq!(code, 1);

    // The candidate wrote nothing: the writes are the active revision's, one ConfigMap and one
    // status per Cache, with no dry run among them, and no ConfigMap has a tier.
    let per_cache = CACHES as u64;
    // The audit log has a write's line once the server has answered it, after the watch saw it.
    crate::support::poll_until("the audit log to hold the active revision's writes", || {
        let logged = audit::total(&audit::khai_writes(from, &ns.name));
        async move { logged >= 2 * per_cache }
    })
    .await;
    let writes = audit::khai_writes(from, &ns.name);
    assert_eq!(
        writes,
        audit::Writes::from([
            ("patch caches/status".to_string(), per_cache),
            ("patch configmaps".to_string(), per_cache),
        ]),
        "only the active revision writes"
    );
    let dry = audit::entries(from, |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains("dryRun"))
    });
    assert!(dry.is_empty(), "no dry run either: {dry:#?}");
    let cms = crate::support::configmaps(&client, &ns.name)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        cms.items
            .iter()
            .all(|c| c.data["data"].get("tier").is_none())
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

/// A candidate that does not load (here a syntax error) is said, naming its file, and left out:
/// the active revision starts and reconciles as it would without one.
#[tokio::test]
async fn a_candidate_that_does_not_load_leaves_the_active_revision_running() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "shadow-broken").await;
    let group = format!(
        "b{:x}.shadow.khai.dev",
        crate::support::nanos_u64() % 0xffff_ffff
    );
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let active = bench_cache(dirs[0].path(), &group, &[]);
    let candidate = bench_cache(dirs[1].path(), &group, &[(DATA, "data: #{ size: ")]);
    let khai = Khai::start(
        &active,
        &ns.name,
        &["--candidate", candidate.to_str().unwrap()],
    );
    wait_for_crd(&client, &format!("caches.{group}")).await;
    let caches = custom_api(&client, &ns.name, &group, "Cache", "caches");
    create_caches(&caches, &group, 1).await;
    let ready = |o: Option<&kube::api::DynamicObject>| {
        o.is_some_and(|o| o.data["status"]["phase"] == "Ready")
    };
    crate::support::wait_for(
        &caches,
        "cache-0",
        "the active revision to reconcile",
        ready,
    )
    .await;
    let (code, log) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let said = log
        .iter()
        .any(|l| l.contains("does not load") && l.contains("cache.rhai"));
    assert!(
        said,
        "the candidate's problem is said, naming its script: {log:#?}"
    );
}
