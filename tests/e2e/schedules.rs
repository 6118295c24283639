//! `[[schedule]]` on the real API server: functions about no object, run every interval or at
//! the times of a cron expression, with `k8s::` calls; a schedule that fails is counted and
//! runs again, and the others carry on.

use crate::support::metrics::{metrics_until, sum};
use crate::support::{Khai, TestNamespace, configmaps, wait_for};
use kube::api::DynamicObject;

/// Counts its runs in the ConfigMap `name` of `ns`.
fn counter(function: &str, ns: &str, name: &str) -> String {
    format!(
        "fn {function}(ctx) {{\n\
         \x20   let cm = k8s::get(\"v1/ConfigMap\", \"{ns}\", \"{name}\");\n\
         \x20   let n = if cm == () {{ 0 }} else {{ parse_int(cm.data.n) }};\n\
         \x20   k8s::apply(#{{ apiVersion: \"v1\", kind: \"ConfigMap\", metadata: #{{ name: \"{name}\", namespace: \"{ns}\" }}, data: #{{ n: `${{n + 1}}` }} }});\n\
         \x20   ()\n}}\n"
    )
}

fn count(o: &DynamicObject) -> i64 {
    o.data["data"]["n"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn schedules_run_on_their_interval_and_cron_and_a_failing_one_harms_nothing() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "schedules").await;
    let dir = tempfile::tempdir().unwrap();
    let toml = "[operator]\nname = \"schedules\"\n\
                uses = [{ kind = \"v1/ConfigMap\", verbs = [\"get\", \"apply\"] }]\n\n\
                [[schedule]]\nname = \"every\"\nscript = \"s.rhai\"\nfunction = \"every\"\ninterval = \"1s\"\n\n\
                [[schedule]]\nname = \"cron\"\nscript = \"s.rhai\"\nfunction = \"by_cron\"\ncron = \"* * * * * *\"\n\n\
                [[schedule]]\nname = \"broken\"\nscript = \"s.rhai\"\nfunction = \"broken\"\ninterval = \"1s\"\n";
    let script = format!(
        "{}{}fn broken(ctx) {{ throw \"boom\"; }}\n",
        counter("every", &ns.name, "every"),
        counter("by_cron", &ns.name, "cron"),
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("s.rhai"), script).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &[]);
    let cms = configmaps(&client, &ns.name);
    for name in ["every", "cron"] {
        wait_for(
            &cms,
            name,
            &format!("three runs of schedule {name}"),
            |o: Option<&DynamicObject>| o.is_some_and(|o| count(o) >= 3),
        )
        .await;
    }
    let addr = khai.metrics_addr().await;
    metrics_until(&addr, "failed runs of the broken schedule counted", |b| {
        b.lines().any(|l| {
            l.starts_with("khai_schedule_runs_total{result=\"error\",schedule=\"broken\"}")
                && l.split_whitespace()
                    .last()
                    .and_then(|v| v.parse::<f64>().ok())
                    >= Some(2.0)
        })
    })
    .await;
    let body = metrics_until(&addr, "successful runs counted", |b| {
        sum(b, "khai_schedule_runs_total") >= 6.0
    })
    .await;
    assert!(
        !body.contains("schedule=\"every\",result=\"error\"")
            && !body.contains("result=\"error\",schedule=\"every\""),
        "{body}"
    );
}

#[tokio::test]
async fn a_schedule_runs_on_the_leader_only_and_moves_with_the_lease() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "schedules-lead").await;
    let dir = tempfile::tempdir().unwrap();
    let toml = "[operator]\nname = \"schedules-lead\"\n\n\
                [[schedule]]\nname = \"beat\"\nscript = \"s.rhai\"\nfunction = \"beat\"\ninterval = \"1s\"\n";
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("s.rhai"), "fn beat(ctx) { }\n").unwrap();
    let flags = [
        "--leader-elect",
        "--leader-elect-namespace",
        &ns.name,
        "--leader-elect-lease-duration",
        "4s",
        "--leader-elect-renew-deadline",
        "3s",
        "--leader-elect-retry-period",
        "1s",
    ];
    let runs = |b: &str| sum(b, "khai_schedule_runs_total");
    let leading = |b: &str| sum(b, "leader_election_master_status");
    let first = Khai::start(dir.path(), &ns.name, &flags);
    let first_addr = first.metrics_addr().await;
    metrics_until(&first_addr, "the first replica leads", |b| {
        leading(b) == 1.0
    })
    .await;
    let second = Khai::start(dir.path(), &ns.name, &flags);
    let second_addr = second.metrics_addr().await;
    metrics_until(&first_addr, "three runs on the leader", |b| runs(b) >= 3.0).await;
    let standby = metrics_until(&second_addr, "the standby's metrics", |b| {
        b.contains("leader_election_master_status")
    })
    .await;
    assert_eq!(leading(&standby), 0.0, "{standby}");
    assert_eq!(
        runs(&standby),
        0.0,
        "the standby ran the schedule: {standby}"
    );
    first.terminate().await;
    metrics_until(&second_addr, "runs on the new leader", |b| {
        leading(b) == 1.0 && runs(b) >= 1.0
    })
    .await;
}
