//! `k8s::replace` on the real API server: a PUT of the whole object, written only while the
//! object still has the resourceVersion it was read with; a stale one comes back as a
//! `conflict` value, and an object with no resourceVersion is refused before any request.

use crate::support::{Khai, TestNamespace, configmaps, create_widget, wait_for, widgets};
use kube::api::{DynamicObject, PostParams};
use serde_json::json;

const GROUP: &str = "replace.fx.khai.dev";

/// Reads the ConfigMap `target`, replaces its data with the widget's message, then replaces it
/// again from the copy read before (now stale), and once with no resourceVersion at all.
const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let ns = obj.metadata.namespace;
    let cm = k8s::get("v1/ConfigMap", ns, "target");
    let stale = cm;
    cm.data = #{ message: obj.spec.message };
    let stored = k8s::replace(cm);
    stale.data = #{ message: "stale" };
    let conflict = "none";
    try { k8s::replace(stale); } catch (e) { conflict = `${e.reason}/${e.code}`; }
    let bare = "none";
    try {
        k8s::replace(#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: "target", namespace: ns } });
    } catch (e) { bare = `${e}`; }
    let phase = `written:${stored.data.message} rv-changed:${stored.metadata.resourceVersion != cm.metadata.resourceVersion} stale:${conflict} bare:${bare}`;
    #{ status: #{ phase: phase } }
}
"#;

#[tokio::test]
async fn replace_puts_the_whole_object_and_a_stale_resource_version_is_a_conflict_value() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fx-replace").await;
    let cms = configmaps(&client, &ns.name);
    let target: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "target" },
        "data": { "message": "before", "other": "dropped by the PUT" },
    }))
    .unwrap();
    cms.create(&PostParams::default(), &target).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[operator]\nname = \"fx-replace\"\nuses = [{{ kind = \"v1/ConfigMap\", verbs = [\"get\", \"replace\"] }}]\n\n{}\n\
         [[controller]]\nfor = \"Widget\"\nscript = \"widget.rhai\"\n",
        crate::support::widget_crd(GROUP)
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), SCRIPT).unwrap();
    let _khai = Khai::start(dir.path(), &ns.name, &[]);
    let api = widgets(&client, GROUP, &ns.name);
    create_widget(&api, GROUP, "w", "hello").await;
    let w = wait_for(
        &api,
        "w",
        "the widget's status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"].is_string()),
    )
    .await;
    let phase = w.data["status"]["phase"].as_str().unwrap();
    assert!(
        phase.starts_with("written:hello rv-changed:true stale:conflict/409 bare:"),
        "{phase}"
    );
    assert!(
        phase.contains("k8s::replace: the v1/ConfigMap")
            && phase.contains("has no metadata.resourceVersion"),
        "{phase}"
    );
    let stored = cms.get("target").await.unwrap();
    assert_eq!(
        stored.data["data"],
        json!({ "message": "hello" }),
        "the whole object was put, and the stale copy was not"
    );
}
