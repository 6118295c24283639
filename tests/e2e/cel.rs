//! What current Kubernetes gives an operator, from the config: CRD validation rules and webhook
//! match conditions in CEL, and selectable fields. On a server too old for one, khai says so at
//! start-up and installs nothing.

use crate::support::{Khai, TestNamespace, custom_api, k8s_version, nanos_u64, wait_for_crd};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const SCRIPT: &str = "fn reconcile(obj, ctx) { #{} }\n";

fn window_operator(group: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "cel"

[[crd]]
group = "{group}"
kind = "Window"
versions = ["v1"]
rules = [{{ rule = "self.spec.min <= self.spec.max", message = "min must not exceed max", field_path = ".spec.min" }}]
spec.min = {{ type = "integer", default = 0 }}
spec.max = {{ type = "integer", default = 10 }}

[crd.spec.size]
type = "integer"
rules = [
  {{ rule = "self <= 100", message = "size is at most 100" }},
  {{ rule = "self >= oldSelf", message = "size never shrinks", reason = "FieldValueForbidden" }},
]

[crd.spec.hours]
type = "object"
properties = {{ from = {{ type = "integer" }}, to = {{ type = "integer" }} }}
rules = [{{ rule = "self.from < self.to", message_expression = "self.from == self.to ? 'from equals to' : 'from is after to'" }}]

[[controller]]
for = "Window"
script = "w.rhai"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("w.rhai"), SCRIPT).unwrap();
    dir
}

fn window(group: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Window",
        "metadata": { "name": name }, "spec": spec,
    }))
    .unwrap()
}

/// The API server's refusal message of `result`, which must be a 422.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("expected a 422 refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn crd_rules_refuse_objects_that_break_them_or_khai_names_the_server_too_old() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "cel-rules").await;
    let group = format!("w{:x}.cel.khai.dev", nanos_u64() % 0xffff_ffff);
    let op = window_operator(&group);
    let khai = Khai::start(op.path(), &ns.name, &[]);
    if k8s_version() == "v1.20.2" {
        let (code, log) = khai.wait().await;
        let log = log.join("\n");
        assert_eq!(code, Some(1), "{log}");
        for want in [
            "the API server is Kubernetes v1.20.2, older than this config needs",
            "operator.toml:9:",
            "crd[0].rules: CRD validation rules (x-kubernetes-validations) need Kubernetes v1.25 or newer; on v1.20 it drops them from the CRD and accepts every object",
            "crd[0].spec.size.rules",
            "crd[0].spec.hours.rules",
        ] {
            assert!(log.contains(want), "{want:?} not in:\n{log}");
        }
        return;
    }
    wait_for_crd(&client, &format!("windows.{group}")).await;
    let api = custom_api(&client, &ns.name, &group, "Window", "windows");
    let pp = PostParams::default();

    let msg = refusal(
        api.create(&pp, &window(&group, "a", json!({ "min": 5, "max": 3 })))
            .await,
    );
    assert!(
        msg.contains("spec.min") && msg.contains("min must not exceed max"),
        "{msg}"
    );
    let msg = refusal(
        api.create(&pp, &window(&group, "b", json!({ "size": 101 })))
            .await,
    );
    assert!(
        msg.contains("spec.size") && msg.contains("size is at most 100"),
        "{msg}"
    );
    let hours = json!({ "hours": { "from": 9, "to": 9 } });
    let msg = refusal(api.create(&pp, &window(&group, "c", hours)).await);
    assert!(msg.contains("from equals to"), "{msg}");

    // A transition rule holds on creates and is checked on updates.
    api.create(&pp, &window(&group, "d", json!({ "size": 50 })))
        .await
        .unwrap();
    let shrink = Patch::Merge(json!({ "spec": { "size": 40 } }));
    let msg = refusal(api.patch("d", &PatchParams::default(), &shrink).await);
    assert!(
        msg.contains("size never shrinks") && msg.contains("Forbidden"),
        "{msg}"
    );
    let grow = Patch::Merge(json!({ "spec": { "size": 60 } }));
    api.patch("d", &PatchParams::default(), &grow)
        .await
        .unwrap();
    drop(khai);
}

/// The validate calls khai's scripts answered, from khai's metrics.
fn validate_calls(body: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.starts_with("khai_script_duration_seconds_count{")
                && l.contains("function=\"validate\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn webhook_match_conditions_keep_requests_from_the_webhook_or_khai_names_the_server_too_old()
{
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "cel-match").await;
    let group = "match.cel.khai.dev";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.rhai"),
        "fn validate(req) { deny(\"checked and refused\") }\n",
    )
    .unwrap();
    let toml = format!(
        r#"
[operator]
name = "celmatch"

[[crd]]
group = "{group}"
kind = "Gadget"
versions = ["v1"]
spec.checked = {{ type = "boolean" }}

[[webhook]]
for = "Gadget"
script = "w.rhai"
validate = "validate"
match_conditions = [
  {{ name = "asks-for-checking", expression = "has(object.spec.checked) && object.spec.checked" }},
]
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    let _registered = crate::webhooks::Registered("khai-celmatch");
    if k8s_version() == "v1.20.2" {
        let args = [
            "--webhook-bind",
            "127.0.0.1:0",
            "--webhook-url",
            "https://127.0.0.1:0",
        ];
        let (code, log) = Khai::start(dir.path(), &ns.name, &args).wait().await;
        let log = log.join("\n");
        assert_eq!(code, Some(1), "{log}");
        assert!(
            log.contains("webhook[0].match_conditions: webhook match conditions (matchConditions) need Kubernetes v1.28 or newer; on v1.20 it drops them and calls the webhook for every request its rules match"),
            "{log}"
        );
        return;
    }
    let (khai, _) = crate::webhooks::start(dir.path(), &ns.name, true).await;
    wait_for_crd(&client, &format!("gadgets.{group}")).await;
    let addr = khai.metrics_addr().await;
    let api = custom_api(&client, &ns.name, group, "Gadget", "gadgets");
    let gadget = |name: &str, checked: bool| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": { "name": name }, "spec": { "checked": checked },
        }))
        .unwrap()
    };
    let pp = PostParams::default();
    // Matching: the webhook is called and refuses.
    let msg = match api.create(&pp, &gadget("checked", true)).await {
        Err(kube::Error::Api(s)) => s.message,
        other => panic!("expected the webhook's refusal, got {other:?}"),
    };
    assert!(msg.contains("checked and refused"), "{msg}");
    let body = crate::support::metrics::metrics_until(&addr, "the validate call counted", |b| {
        validate_calls(b) >= 1.0
    })
    .await;
    let called = validate_calls(&body);
    // Not matching: the API server admits it without calling khai.
    for i in 0..3 {
        api.create(&pp, &gadget(&format!("unchecked-{i}"), false))
            .await
            .unwrap();
    }
    let (_, body) = crate::support::metrics::http_get(&addr, "/metrics").await;
    assert_eq!(
        validate_calls(&body),
        called,
        "the webhook was called for requests its conditions exclude"
    );
}

#[tokio::test]
async fn a_controller_selects_custom_resources_by_a_selectable_field_or_khai_names_the_server_too_old()
 {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "cel-select").await;
    let group = format!("j{:x}.cel.khai.dev", nanos_u64() % 0xffff_ffff);
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "celselect"

[[crd]]
group = "{group}"
kind = "Job"
versions = ["v1"]
spec.queue = {{ type = "string", default = "default" }}
status.seen = {{ type = "string" }}
selectable_fields = [".spec.queue"]

[[controller]]
for = "Job"
script = "j.rhai"
field_selector = "spec.queue=fast"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(
        dir.path().join("j.rhai"),
        "fn reconcile(obj, ctx) { #{ status: #{ seen: obj.spec.queue } } }\n",
    )
    .unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &[]);
    if k8s_version() == "v1.20.2" {
        let (code, log) = khai.wait().await;
        let log = log.join("\n");
        assert_eq!(code, Some(1), "{log}");
        assert!(
            log.contains("crd[0].selectable_fields: CRD selectable fields (selectableFields) need Kubernetes v1.31 or newer; on v1.20 it drops them and refuses field selectors on them"),
            "{log}"
        );
        return;
    }
    wait_for_crd(&client, &format!("jobs.{group}")).await;
    let api = custom_api(&client, &ns.name, &group, "Job", "jobs");
    let job = |name: &str, queue: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Job",
            "metadata": { "name": name }, "spec": { "queue": queue },
        }))
        .unwrap()
    };
    let pp = PostParams::default();
    api.create(&pp, &job("slow", "slow")).await.unwrap();
    api.create(&pp, &job("fast", "fast")).await.unwrap();
    crate::support::wait_for(
        &api,
        "fast",
        "the fast Job reconciled",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["seen"] == "fast"),
    )
    .await;
    let addr = khai.metrics_addr().await;
    crate::support::metrics::metrics_until(&addr, "an idle work queue", |b| {
        crate::support::metrics::sum(b, "workqueue_depth") == 0.0
            && crate::support::metrics::sum(b, "controller_runtime_active_workers") == 0.0
    })
    .await;
    let slow = api.get("slow").await.unwrap();
    assert!(
        slow.data["status"].is_null(),
        "the API server sent khai a Job its field selector excludes: {:?}",
        slow.data["status"]
    );
}
