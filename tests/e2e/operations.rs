//! End to end against a real kube-apiserver: running khai in production. Metrics and probes on
//! their own port, JSON logs that carry the object of every reconcile, and leader election
//! between replicas (one reconciles; a crash or a SIGTERM hands over to another).

use crate::support::metrics::{http_get, metrics_until, sum, wait_for_metric};
use crate::support::{DEADLINE, Khai, TestNamespace, create_widget, wait_for, widgets};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// One namespaced `Widget` in `group`, reconciled into a ConfigMap; `spec.message = "spin"`
/// loops forever, so its reconcile is stopped by a script limit.
fn operator(group: &str, extra_controller: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "widgets"

{crd}
[[controller]]
for = "Widget"
owns = ["v1/ConfigMap"{extra_controller}]
script = "widget.rhai"
"#,
        crd = crate::support::widget_crd(group),
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(
        dir.path().join("widget.rhai"),
        r#"
fn reconcile(obj, ctx) {
    if obj.spec.message == "spin" { loop { } }
    #{ children: [#{ apiVersion: "v1", kind: "ConfigMap",
                     metadata: #{ name: obj.metadata.name + "-cm" },
                     data: #{ message: obj.spec.message } }],
       status: #{ phase: "Ready" } }
}
"#,
    )
    .unwrap();
    dir
}

fn ready(o: Option<&DynamicObject>) -> bool {
    o.is_some_and(|o| o.data["status"]["phase"] == "Ready")
}

/// The value of `leader_election_master_status` (-1 while it is not exported yet).
fn leading(body: &str) -> f64 {
    if body.contains("leader_election_master_status{") {
        sum(body, "leader_election_master_status")
    } else {
        -1.0
    }
}

/// Waits until `/readyz` of `addr` answers `code`.
pub(crate) async fn readyz_until(addr: &str, code: u16) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (status, body) = http_get(addr, "/readyz").await;
        if status == code {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for /readyz {code}; last: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn metrics_expose_every_family_and_json_log_lines_carry_the_object() {
    let group = "metrics.ops.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "ops-metrics").await;
    let op = operator(group, "");
    let khai = Khai::start(op.path(), &ns.name, &["--log-format", "json"]);
    let addr = khai.metrics_addr().await;
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let api = widgets(&client, group, &ns.name);
    create_widget(&api, group, "plain", "ok").await;
    create_widget(&api, group, "spinner", "spin").await;
    wait_for(&api, "plain", "the widget to be reconciled", ready).await;
    // Families with labels appear with their first sample, and a reconcile's duration is
    // recorded just after its status write becomes visible: wait until every one is there.
    const FAMILIES: &[&str] = &[
        "controller_runtime_reconcile_total{controller=\"widget\",result=\"success\"}",
        "controller_runtime_reconcile_total{controller=\"widget\",result=\"error\"}",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "controller_runtime_active_workers",
        "controller_runtime_max_concurrent_reconciles",
        "workqueue_adds_total",
        "workqueue_retries_total",
        "workqueue_depth{controller=\"widget\",name=\"widget\"}",
        "workqueue_queue_duration_seconds_bucket{controller=\"widget\",name=\"widget\",le=\"10\"}",
        "workqueue_work_duration_seconds_bucket",
        "khai_script_duration_seconds_bucket",
        "khai_script_errors_total",
        "khai_script_limit_aborts_total{function=\"reconcile\",limit=\"operations\",script=\"widget.rhai\"}",
        "khai_children_applied_total",
        "khai_children_unchanged_total",
        "khai_children_pruned_total",
        "khai_status_writes_total",
        "khai_watch_restarts_total{kind=\"Widget\",reason=\"error\"}",
        "khai_watch_restarts_total{kind=\"ConfigMap\",reason=\"gone\"}",
        "khai_watches{kind=\"Widget\"} 1",
        "khai_config_reloads_total{result=\"success\"} 0",
        "khai_config_hash ",
        "khai_build_info{version=",
    ];
    let body = metrics_until(
        &addr,
        "every metric family, including a script limit abort",
        |b| {
            sum(b, "khai_script_limit_aborts_total") >= 1.0
                && FAMILIES.iter().all(|f| b.contains(f))
        },
    )
    .await;

    assert!(sum(&body, "khai_children_applied_total") >= 1.0);
    assert!(sum(&body, "khai_status_writes_total") >= 1.0);
    assert!(sum(&body, "workqueue_adds_total") >= 2.0);
    // Both widgets waited in the queue before their first reconcile; whatever waits now is at
    // most the spinner's next request.
    assert!(sum(&body, "workqueue_queue_duration_seconds_count") >= 2.0);
    assert!(sum(&body, "workqueue_depth") <= 1.0, "{body}");
    assert_eq!(http_get(&addr, "/healthz").await.0, 200);
    assert_eq!(http_get(&addr, "/readyz").await.0, 200);
    assert_eq!(http_get(&addr, "/nope").await.0, 404);

    let (code, lines) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai did not exit 0 on SIGTERM");
    let mut reconciled = 0;
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line is not JSON ({e}): {line}"));
        if v["span"] == "reconcile" {
            for field in ["controller", "kind", "namespace", "name", "uid"] {
                assert!(
                    v[field].as_str().is_some_and(|s| !s.is_empty()),
                    "reconcile log line lacks {field}: {line}"
                );
            }
            assert_eq!(v["namespace"], ns.name.as_str());
            reconciled += usize::from(v["message"] == "reconciled");
        }
    }
    assert!(reconciled >= 1, "no 'reconciled' line in {lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains("\"name\":\"spinner\"")
            && l.contains("reconcile failed")
            && l.contains("\"kind\":\"Widget\"")),
        "the failed reconcile's line does not name the object: {lines:#?}"
    );
}

/// A kubeconfig for the test cluster that impersonates `user`.
fn impersonating(user: &str) -> TempDir {
    let mut kc = kube::config::Kubeconfig::read_from(crate::support::kubeconfig()).unwrap();
    for auth in &mut kc.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kubeconfig"),
        serde_json::to_string(&kc).unwrap(),
    )
    .unwrap();
    dir
}

pub(crate) async fn apply_rbac(client: &kube::Client, obj: serde_json::Value) {
    use kube::api::{Patch, PatchParams};
    let field = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let api_version = field(&obj["apiVersion"]);
    let (group, version) = api_version.split_once('/').unwrap();
    let kind = field(&obj["kind"]);
    let plural = format!("{}s", kind.to_lowercase());
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, &kind), &plural);
    let name = field(&obj["metadata"]["name"]);
    let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        &name,
        &PatchParams::apply("khai-test").force(),
        &Patch::Apply(obj),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

#[tokio::test]
async fn readyz_is_unavailable_until_every_cache_has_synced() {
    let group = "ready.ops.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "ops-ready").await;
    let user = format!("khai-{}", ns.name);
    // khai may do everything it needs except list Secrets, which this controller also owns: its
    // Secret cache cannot fill until that right is granted.
    apply_rbac(&client, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": user },
        "rules": [
            { "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["*"] },
            { "apiGroups": [group], "resources": ["*"], "verbs": ["*"] },
            { "apiGroups": [""], "resources": ["configmaps", "events"], "verbs": ["*"] },
            { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"] },
        ],
    }))
    .await;
    apply_rbac(&client, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": user },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .await;
    let kubeconfig = impersonating(&user);
    let op = operator(group, ", \"v1/Secret\"");
    let khai = Khai::start_with_kubeconfig(
        op.path(),
        &ns.name,
        &[],
        &kubeconfig.path().join("kubeconfig"),
    );
    let addr = khai.metrics_addr().await;
    assert_eq!(http_get(&addr, "/healthz").await.0, 200);
    // The controller's own caches fill; the Secret cache cannot.
    let restarts = [("kind", "Secret")];
    wait_for_metric(
        &addr,
        "the Secret watch failing",
        "khai_watch_restarts_total",
        &restarts,
        |n| n >= 1.0,
    )
    .await;
    let (status, body) = http_get(&addr, "/readyz").await;
    assert_eq!(
        (status, body.as_str()),
        (503, "caches not synced\n"),
        "/readyz before the caches synced"
    );

    apply_rbac(&client, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": "secrets", "namespace": ns.name },
        "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"] }],
    }))
    .await;
    apply_rbac(&client, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "secrets", "namespace": ns.name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .await;
    readyz_until(&addr, 200).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

/// Flags for a short lease, so hand-over is quick enough to test.
const ELECT: [&str; 9] = [
    "--leader-elect",
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
    "--leader-elect-namespace",
    "", // the test namespace, filled in below
];

fn elect_flags(ns: &str) -> Vec<&str> {
    let mut flags = ELECT.to_vec();
    flags[8] = ns;
    flags
}

/// Waits until exactly one of `replicas` leads; returns its index.
async fn one_leader(addrs: &[String]) -> usize {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut states = Vec::new();
        for a in addrs {
            states.push(leading(&http_get(a, "/metrics").await.1));
        }
        let leaders: Vec<usize> = (0..states.len()).filter(|i| states[*i] == 1.0).collect();
        if leaders.len() == 1 && states.iter().all(|s| *s >= 0.0) {
            return leaders[0];
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for exactly one leader; leader_election_master_status: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn of_two_replicas_one_reconciles_and_a_crash_or_sigterm_hands_over() {
    let group = "leader.ops.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "ops-leader").await;
    let op = operator(group, "");
    let flags = elect_flags(&ns.name);
    let mut replicas = vec![
        Some(Khai::start(op.path(), &ns.name, &flags)),
        Some(Khai::start(op.path(), &ns.name, &flags)),
    ];
    let mut addrs = Vec::new();
    for r in &replicas {
        addrs.push(r.as_ref().unwrap().metrics_addr().await);
    }
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let leader = one_leader(&addrs).await;
    let standby = 1 - leader;
    let api = widgets(&client, group, &ns.name);
    for name in ["a", "b", "c"] {
        create_widget(&api, group, name, "ok").await;
    }
    for name in ["a", "b", "c"] {
        wait_for(
            &api,
            name,
            "the widget to be reconciled by the leader",
            ready,
        )
        .await;
    }
    // A reconcile is counted when it returns, just after its status write: wait for the count.
    metrics_until(&addrs[leader], "the leader's three reconciles", |b| {
        sum(b, "controller_runtime_reconcile_total") >= 3.0
    })
    .await;
    let standby_body = http_get(&addrs[standby], "/metrics").await.1;
    assert_eq!(
        sum(&standby_body, "controller_runtime_reconcile_total"),
        0.0,
        "the standby reconciled"
    );
    assert_eq!(leading(&standby_body), 0.0);
    readyz_until(&addrs[standby], 200).await;

    // A crash: the standby takes over once the lease expires.
    replicas[leader].as_mut().unwrap().kill();
    let killed = Instant::now();
    create_widget(&api, group, "after-kill", "ok").await;
    wait_for(
        &api,
        "after-kill",
        "the standby to take over after kill -9",
        ready,
    )
    .await;
    let took = killed.elapsed();
    eprintln!("hand-over after kill -9: {took:?}");
    assert!(
        took <= Duration::from_secs(4 + 2),
        "took {took:?} after kill -9, more than lease duration + 2 s"
    );
    assert_eq!(leading(&http_get(&addrs[standby], "/metrics").await.1), 1.0);

    // A SIGTERM: the leader releases the lease and a fresh standby takes over at once.
    let third = Khai::start(op.path(), &ns.name, &flags);
    let third_addr = third.metrics_addr().await;
    readyz_until(&third_addr, 200).await;
    assert_eq!(leading(&http_get(&third_addr, "/metrics").await.1), 0.0);
    let old = replicas[standby].take().unwrap();
    let terminated = Instant::now();
    let (code, lines) = old.terminate().await;
    create_widget(&api, group, "after-term", "ok").await;
    wait_for(
        &api,
        "after-term",
        "the new standby to take over after SIGTERM",
        ready,
    )
    .await;
    let took = terminated.elapsed();
    eprintln!("hand-over after SIGTERM: {took:?}");
    assert_eq!(code, Some(0), "the leader did not exit 0 on SIGTERM");
    assert!(
        lines.iter().any(|l| l.contains("released the lease")),
        "the leader did not release the lease: {lines:#?}"
    );
    assert!(
        took <= Duration::from_secs(2),
        "took {took:?} after SIGTERM, more than 2 s"
    );
    let body = metrics_until(&third_addr, "the new leader's first reconcile", |b| {
        sum(b, "controller_runtime_reconcile_total") >= 1.0
    })
    .await;
    assert_eq!(leading(&body), 1.0);
}
