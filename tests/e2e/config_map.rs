//! `khai run --config configmap:NAMESPACE/NAME`: the config read and watched through the API.
//!
//! Two replicas (leader and standby) follow one ConfigMap; a change reaches both within 2 s of
//! the write, measured against the API server's audit timestamps, and the leader's reconciles
//! use it. A ConfigMap that is missing at start is an error that names it.

use crate::support::metrics::{metrics_until, wait_for_leadership};
use crate::support::{self, Khai, TestNamespace, audit};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const BUDGET: Duration = Duration::from_secs(2);

/// examples/hello as ConfigMap data, the script's message passed through `shout`.
fn hello_data(shout: &str) -> BTreeMap<String, String> {
    let dir = support::repo_root().join("examples/hello");
    let script = std::fs::read_to_string(dir.join("scripts/hello.rhai")).unwrap();
    let changed = script.replacen(
        "                    message: message,",
        &format!("                    message: message + \"{shout}\","),
        1,
    );
    assert_ne!(changed, script, "the hello script changed shape");
    BTreeMap::from([
        (
            "operator.toml".to_string(),
            std::fs::read_to_string(dir.join("operator.toml")).unwrap(),
        ),
        // `scripts/hello.rhai`, as a ConfigMap key.
        ("scripts__hello.rhai".to_string(), changed),
    ])
}

/// When a JSON log line was written.
fn logged_at(line: &serde_json::Value) -> jiff::Timestamp {
    line["timestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no timestamp in {line}"))
}

#[tokio::test]
async fn every_replica_follows_a_configmap_change_within_two_seconds() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "cm-source").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("operator".into());
    cm.data = Some(hello_data(""));
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let source = format!("configmap:{}/operator", ns.name);
    let leader_args = [
        "--leader-elect",
        "--leader-elect-namespace",
        &ns.name,
        "--log-format",
        "json",
    ];
    let first = Khai::start(Path::new(&source), &ns.name, &leader_args);
    let leader_metrics = first.metrics_addr().await;
    wait_for_leadership(&leader_metrics, "the first replica to lead", true).await;
    let second = Khai::start(Path::new(&source), &ns.name, &leader_args);
    let standby_metrics = second.metrics_addr().await;
    wait_for_leadership(&standby_metrics, "the second replica to stand by", false).await;

    let gvk = GroupVersionKind::gvk("examples.khai.dev", "v1", "Hello");
    let hellos: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "hellos"),
    );
    let hello = support::repo_root().join("examples/hello/hello.yaml");
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(hello).unwrap()).unwrap();
    let message = sample.data["spec"]["message"].as_str().unwrap().to_string();
    hellos
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    let children: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::erase::<ConfigMap>(&()),
    );
    let child = format!("{}-hello", sample.metadata.name.clone().unwrap());
    let says = |text: String| {
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["data"]["message"] == text)
    };
    support::wait_for(
        &children,
        &child,
        "the first version's child",
        says(message.clone()),
    )
    .await;

    // A new script through the API.
    let (first_len, second_len) = (first.log_len(), second.log_len());
    let mark = audit::mark();
    let patch = serde_json::json!({ "data": hello_data("!") });
    let written = cms
        .patch("operator", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let version = written.metadata.resource_version.unwrap();
    support::wait_for(
        &children,
        &child,
        "the child from the new script",
        says(format!("{message}!")),
    )
    .await;
    let write = audit::wait_for_entry(mark, "the ConfigMap write", |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["name"] == "operator"
    })
    .await;
    let written_at = audit::timestamp(&write, "requestReceivedTimestamp");
    // khai's first write of the child after the ConfigMap's (one from before it, still in
    // flight when the mark was taken, is not the new script's).
    let applied = audit::wait_for_entry(mark, "khai's write of the child", |e| {
        e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["name"] == child.as_str()
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
            && audit::timestamp(e, "requestReceivedTimestamp") >= written_at
    })
    .await;
    let took =
        Duration::try_from(audit::timestamp(&applied, "stageTimestamp").duration_since(written_at))
            .unwrap();
    eprintln!("ConfigMap write -> the leader's changed child: {took:?}");
    assert!(
        took < BUDGET,
        "the leader applied the new script after {took:?}"
    );

    // Both replicas loaded it; the standby holds it for when it leads.
    for (name, khai, skip) in [
        ("leader", &first, first_len),
        ("standby", &second, second_len),
    ] {
        let changed = serde_json::json!({ "message": "config changed; reloading" });
        let line = khai.wait_for_json_log(skip, "the reload", changed).await;
        let took = Duration::try_from(logged_at(&line).duration_since(written_at)).unwrap();
        eprintln!("ConfigMap write -> the {name} loading it: {took:?}");
        assert!(took < BUDGET, "the {name} saw the change after {took:?}");
        assert_eq!(line["version"], version.as_str(), "{line}");
    }
    metrics_until(
        &leader_metrics,
        "khai_config_info of the new version",
        |m| {
            m.lines().any(|l| {
                l.starts_with("khai_config_info{")
                    && l.contains(&format!("version=\"{version}\""))
                    && l.contains(&format!("source=\"{source}/operator.toml\""))
            })
        },
    )
    .await;
}

#[test]
fn a_missing_configmap_is_an_error_that_names_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(["run", "--config", "configmap:default/no-such-config"])
        .env("KUBECONFIG", support::kubeconfig())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "error: failed to read configmap:default/no-such-config: configmaps \"no-such-config\" not found"
        ),
        "{stderr}"
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(["run", "--config", "configmap:default"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("expected configmap:NAMESPACE/NAME, got configmap:default"),
        "{stderr}"
    );
}
