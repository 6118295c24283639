//! `khai diff`: 200 Caches of examples/bench-cache reconciled by `khai run`, then candidates
//! diffed against them with khai stopped: no change exits 0; a script change that touches only
//! the Caches with `spec.size > 5` lists exactly those, with their field diffs, and exits 1
//! (run under the generated `--for diff` RBAC: enough for the dry runs of a change and of a
//! create, and no other write); a
//! candidate whose child the API server refuses shows it refused and exits 2.

use crate::rbac::{apply, service_account_kubeconfig};
use crate::support::{Khai, TestNamespace, custom_api, example_copy, kubeconfig, wait_for_crd};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) const CACHES: usize = 200;

/// The size of Cache number `i`: 1 to 10, so half the Caches are larger than 5.
pub(crate) fn size(i: usize) -> usize {
    i % 10 + 1
}

/// The line of examples/bench-cache's script that builds the ConfigMap's data.
pub(crate) const DATA: &str = "data: #{ size: `${obj.spec.size}`, image: obj.spec.image },";

/// examples/bench-cache in `dir`, in API group `group`, with each `(from, to)` of `edits`
/// replaced in its script.
pub(crate) fn bench_cache(dir: &Path, group: &str, edits: &[(&str, &str)]) -> PathBuf {
    example_copy("bench-cache", dir, "diff-cache", group);
    let toml = dir.join("operator.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("bench.khai.dev", group)).unwrap();
    let script = dir.join("scripts/cache.rhai");
    let mut text = std::fs::read_to_string(&script).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "the script has no {from:?}");
        text = text.replace(from, to);
    }
    std::fs::write(&script, text).unwrap();
    dir.to_path_buf()
}

/// `khai diff --config config --namespace ns -o json` as the user of `kubeconfig`: its exit
/// code and JSON report.
async fn diff(config: &Path, ns: &str, kubeconfig: &Path) -> (i32, Value) {
    let (code, stdout, stderr) = run_diff(config, ns, kubeconfig, "json").await;
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("khai diff exited {code}, no JSON report ({e}): {stderr}"));
    (code, report)
}

/// `khai diff --config config --namespace ns -o output` as the user of `kubeconfig`: its exit
/// code, stdout and stderr.
async fn run_diff(
    config: &Path,
    ns: &str,
    kubeconfig: &Path,
    output: &str,
) -> (i32, String, String) {
    let args = [
        "diff".into(),
        "--config".into(),
        config.display().to_string(),
        "--namespace".into(),
        ns.to_string(),
        "-o".into(),
        output.to_string(),
    ];
    let kubeconfig = kubeconfig.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(crate::support::khai_bin())
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Creates the Caches `cache-0` to `cache-{n-1}`, 32 at a time.
pub(crate) async fn create_caches(caches: &Api<DynamicObject>, group: &str, n: usize) {
    futures::stream::iter(0..n)
        .map(|i| {
            let caches = caches.clone();
            async move {
                let cache: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{group}/v1"), "kind": "Cache",
                    "metadata": { "name": format!("cache-{i}") },
                    "spec": { "size": size(i), "image": "redis" },
                }))
                .unwrap();
                caches.create(&PostParams::default(), &cache).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("create the Caches");
}

/// Waits until `n` Caches have the status khai writes after applying their children.
pub(crate) async fn all_reconciled(caches: &Api<DynamicObject>, n: usize) {
    let mut ready = BTreeSet::new();
    let stream = kube::runtime::watcher(caches.clone(), Default::default());
    let stream = kube::runtime::WatchStreamExt::applied_objects(stream);
    futures::pin_mut!(stream);
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(obj) = stream.try_next().await.unwrap() {
            if obj.data["status"]["phase"] == "Ready" {
                ready.insert(obj.metadata.name.clone().unwrap());
            }
            if ready.len() == n {
                return;
            }
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "only {} of {n} Caches were reconciled by khai run in 60s",
        ready.len()
    );
}

fn names(report: &Value) -> BTreeSet<String> {
    report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn diff_lists_exactly_the_writes_a_candidate_would_make_and_the_refused_ones() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "diff").await;
    let group = format!(
        "d{:x}.diff.khai.dev",
        crate::support::nanos_u64() % 0xffff_ffff
    );
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let live = bench_cache(dirs[0].path(), &group, &[]);

    // 200 Caches, created in parallel, reconciled by `khai run`, which then stops.
    let khai = Khai::start(&live, &ns.name, &[]);
    wait_for_crd(&client, &format!("caches.{group}")).await;
    let caches = custom_api(&client, &ns.name, &group, "Cache", "caches");
    create_caches(&caches, &group, CACHES).await;
    all_reconciled(&caches, CACHES).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai run stops cleanly");

    // The config khai ran with: nothing to write.
    let (code, report) = diff(&live, &ns.name, kubeconfig()).await;
    assert_eq!(report["objects"], json!([]), "{report:#}");
    assert_eq!(report["summary"]["unchanged"], CACHES);
    assert_eq!(code, 0);

    // Caches larger than 5 get a `tier` and a second ConfigMap; diffed under the RBAC generated
    // for diff, read-only but for the `create` and `patch` its dry runs need.
    let tier = "data: #{ size: `${obj.spec.size}`, image: obj.spec.image,
                      tier: (if obj.spec.size > 5 { \"large\" } else { () }) },";
    let second = "        ] + (if obj.spec.size > 5 { [#{ apiVersion: \"v1\", kind: \"ConfigMap\",
                 metadata: #{ name: obj.metadata.name + \"-large\" } }] } else { [] }),
        status";
    let candidate = bench_cache(
        dirs[1].path(),
        &group,
        &[(DATA, tier), ("        ],\n        status", second)],
    );
    let rbac = generate_diff_rbac(&candidate, &ns.name);
    apply(&client, &ns.name, &rbac).await;
    let reader = service_account_kubeconfig(&client, &ns.name, "khai-diff-cache-diff").await;
    let (code, report) = diff(&candidate, &ns.name, &reader).await;
    let large: BTreeSet<String> = (0..CACHES)
        .filter(|&i| size(i) > 5)
        .map(|i| format!("cache-{i}"))
        .collect();
    assert_eq!(names(&report), large, "{:#}", report["objects"][0]);
    for o in report["objects"].as_array().unwrap() {
        let name = o["name"].as_str().unwrap();
        let children = o["children"].as_array().unwrap();
        assert_eq!(children.len(), 2, "{o:#}");
        let (change, create) = (&children[0], &children[1]);
        assert_eq!(change["action"], "change");
        assert_eq!(change["name"], format!("{name}-config"));
        assert_eq!(change["refused"], Value::Null, "{o:#}");
        assert_eq!(change["before"]["data"].get("tier"), None);
        assert_eq!(change["after"]["data"]["tier"], "large");
        let lines: Vec<&str> = change["diff"].as_str().unwrap().lines().collect();
        assert!(lines.contains(&"+  tier: large"), "{lines:#?}");
        assert!(
            !lines.iter().any(|l| l.starts_with("-  size")),
            "{lines:#?}"
        );
        assert_eq!(create["action"], "create");
        assert_eq!(create["name"], format!("{name}-large"));
        assert_eq!(
            create["refused"],
            Value::Null,
            "the dry run of a create is allowed: {o:#}"
        );
        assert_eq!(o["status"], json!([]), "the status stays as it is");
    }
    assert_eq!(report["summary"]["unchanged"], CACHES - large.len());
    assert_eq!(code, 1);
    // The text names the same objects, one header each, and ends with the summary.
    let (code, text, stderr) = run_diff(&candidate, &ns.name, kubeconfig(), "text").await;
    let headers: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Cache."))
        .map(|l| {
            l.split_once('/')
                .unwrap()
                .1
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(headers, large, "{text}\n{stderr}");
    assert_eq!(text.matches("+  tier: large\n").count(), large.len());
    assert!(
        text.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with(&format!(
                "{} objects would change, {} unchanged, 0 failing",
                large.len(),
                CACHES - large.len()
            )),
        "{text}"
    );
    assert_eq!(code, 1);

    // One Cache's ConfigMap gets a key the API server refuses.
    let bad = "data: (if obj.metadata.name == \"cache-7\" { #{ \"not a key!\": \"x\" } }
                  else { #{ size: `${obj.spec.size}`, image: obj.spec.image } }),";
    let refused = bench_cache(dirs[2].path(), &group, &[(DATA, bad)]);
    let (code, report) = diff(&refused, &ns.name, kubeconfig()).await;
    assert_eq!(names(&report), BTreeSet::from(["cache-7".to_string()]));
    let child = &report["objects"][0]["children"][0];
    let why = child["refused"].as_str().unwrap_or_default();
    assert!(
        why.contains("Invalid") && why.contains("not a key!"),
        "refused by the server's dry run, in its words: {child:#}"
    );
    assert_eq!(report["summary"]["refused"], 1);
    assert_eq!(code, 2);

    // Nothing was written: the live ConfigMap of cache-7 is as khai run left it.
    let cm = crate::support::configmaps(&client, &ns.name)
        .get("cache-7-config")
        .await
        .unwrap();
    assert_eq!(cm.data["data"], json!({ "size": "8", "image": "redis" }));
}

/// `khai generate rbac --for diff` for `config`, khai in `ns` watching `ns`.
fn generate_diff_rbac(config: &Path, ns: &str) -> Vec<Value> {
    let out = crate::support::khai_stdout(&[
        "generate",
        "rbac",
        &config.display().to_string(),
        "--for",
        "diff",
        "--namespace",
        ns,
        "--watch-namespace",
        ns,
    ]);
    serde_saphyr::from_multiple(&out).unwrap()
}
