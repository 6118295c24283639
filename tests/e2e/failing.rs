//! End to end: a failing reconcile says why in its own status (`fail(msg, #{ status })`,
//! `retry(msg, delay, #{ status })`), written with khai's `Ready=False` in one status write, and
//! no condition an earlier success set stays `True` beside it.

use crate::support::{Khai, TestNamespace, audit, custom_api, wait_for, wait_for_crd};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    if obj.spec.message == "bad" {
        fail("spec.message may not be bad", #{ status: #{ phase: "Invalid",
            conditions: [#{ type: "Synced", status: "False", reason: "Refused", message: "not synced" }] } });
    }
    if obj.spec.message == "wait" {
        retry("waiting for the backend", "1h", #{ status: #{ phase: "Waiting" } });
    }
    #{ status: #{ phase: "Ready", conditions: [
        #{ type: "Valid", status: "True", reason: "Checked" },
        #{ type: "Synced", status: "True", reason: "UpToDate" },
    ] } }
}
"#;

fn operator(group: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "failing"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.message = {{ type = "string", default = "ok" }}
status.phase = {{ type = "string" }}

[[controller]]
for = "Widget"
script = "widget.rhai"
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), SCRIPT).unwrap();
    dir
}

/// The condition `type_` of `o`.
fn condition(o: &DynamicObject, type_: &str) -> Value {
    o.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

/// Sets `spec.message` of `name` and waits until its status shows `phase` with `Ready` at `ready`.
async fn answer(
    api: &Api<DynamicObject>,
    name: &str,
    message: &str,
    phase: &'static str,
    ready: &'static str,
) -> DynamicObject {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "message": message } })),
    )
    .await
    .unwrap();
    wait_for(
        api,
        name,
        "the status of the answer",
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.data["status"]["phase"] == phase && condition(o, "Ready")["status"] == ready
            })
        },
    )
    .await
}

#[tokio::test]
async fn a_failing_reconcile_writes_its_own_status_with_ready_false_in_one_write() {
    let group = "failstatus.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "failstatus").await;
    let op = operator(group);
    let _khai = Khai::start(op.path(), &ns.name, &[]);
    let api = custom_api(&client, &ns.name, group, "Widget", "widgets");
    wait_for_crd(&client, &format!("widgets.{group}")).await;
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": { "name": "w" },
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let ok = wait_for(
        &api,
        "w",
        "the Widget to be Ready",
        |o: Option<&DynamicObject>| o.is_some_and(|o| condition(o, "Ready")["status"] == "True"),
    )
    .await;
    assert_eq!(condition(&ok, "Valid")["status"], "True");

    let from = audit::mark();
    let failed = answer(&api, "w", "bad", "Invalid", "False").await;
    assert_eq!(condition(&failed, "Ready")["reason"], "Failed");
    assert_eq!(condition(&failed, "Failed")["status"], "True");
    let synced = condition(&failed, "Synced");
    assert_eq!(
        (&synced["status"], &synced["reason"]),
        (&json!("False"), &json!("Refused")),
        "the condition the failing answer restates is written as given"
    );
    let valid = condition(&failed, "Valid");
    assert_eq!(
        (&valid["status"], &valid["reason"]),
        (&json!("Unknown"), &json!("Failed")),
        "a condition of the earlier success the failing answer leaves out is not left True: {valid}"
    );
    // The Warning Event is recorded after the status write: once it is there, the failure's
    // writes are all in the audit log.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(events, "the Failed Event", |e| {
        e.reason.as_deref() == Some("Failed")
    })
    .await;
    let writes = audit::khai_writes(from, &ns.name);
    assert_eq!(
        writes.get("patch widgets/status"),
        Some(&1),
        "the failing answer's status and Ready=False are one write: {writes:?}"
    );
    assert!(
        !writes
            .keys()
            .any(|k| k.contains("widgets") && k != "patch widgets/status"),
        "{writes:?}"
    );

    let waiting = answer(&api, "w", "wait", "Waiting", "False").await;
    assert_eq!(condition(&waiting, "Ready")["reason"], "RetryRequested");
    assert_eq!(
        condition(&waiting, "Synced")["status"],
        "Unknown",
        "retry restates nothing: every condition of the script's is Unknown"
    );

    let back = answer(&api, "w", "ok", "Ready", "True").await;
    assert_eq!(condition(&back, "Valid")["status"], "True");
    assert_eq!(condition(&back, "Synced")["status"], "True");
    assert_eq!(condition(&back, "Failed"), Value::Null);
}
