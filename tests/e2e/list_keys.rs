//! Children whose list-map entries leave out a key the API server defaults (a Service port or a
//! container port without `protocol`) apply on the real API server, where server-side apply
//! would refuse them with an opaque 500, and cost no write once steady: khai fills in what the
//! server defaults, as `khai test` shows the child.

use crate::support::metrics::{metrics_until, sum};
use crate::support::{Khai, TestNamespace, audit, custom_api, wait_for, wait_for_crd};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let name = obj.metadata.name;
    let labels = #{ app: name };
    #{
        children: [
            #{ apiVersion: "v1", kind: "Service", metadata: #{ name: name },
               spec: #{ selector: labels, ports: [#{ name: "http", port: 80, targetPort: 8080 },
                                                  #{ name: "dns", port: 53, protocol: "UDP" }] } },
            #{ apiVersion: "apps/v1", kind: "Deployment", metadata: #{ name: name },
               spec: #{ selector: #{ matchLabels: labels },
                        template: #{ metadata: #{ labels: labels },
                                     spec: #{ containers: [#{ name: "web", image: "nginx",
                                                              ports: [#{ containerPort: 8080 }] }] } } } },
        ],
        status: #{ phase: "Ready" },
    }
}
"#;

#[tokio::test]
async fn ports_without_a_protocol_apply_and_stay_steady() {
    let group = "listkeys.khai.test";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "list-keys").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.toml"),
        format!(
            r#"
[operator]
name = "list-keys"

[[crd]]
group = "{group}"
kind = "Web"
versions = ["v1"]
spec.n = {{ type = "integer", default = 0 }}
status.phase = {{ type = "string" }}

[[controller]]
for = "Web"
owns = ["v1/Service", "apps/v1/Deployment"]
script = "web.rhai"
"#
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("web.rhai"), SCRIPT).unwrap();
    let khai = Khai::start(dir.path(), &ns.name, &[]);
    wait_for_crd(&client, &format!("webs.{group}")).await;
    let webs = custom_api(&client, &ns.name, group, "Web", "webs");
    let web: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Web", "metadata": { "name": "site" },
        "spec": { "n": 1 },
    }))
    .unwrap();
    webs.create(&PostParams::default(), &web).await.unwrap();
    wait_for(
        &webs,
        "site",
        "the Web Ready",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
    )
    .await;
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &ns.name);
    let ports = services
        .get("site")
        .await
        .unwrap()
        .spec
        .unwrap()
        .ports
        .unwrap();
    let protocols: Vec<_> = ports.iter().map(|p| p.protocol.clone()).collect();
    assert_eq!(protocols, [Some("TCP".into()), Some("UDP".into())]);

    // Steady: another reconcile of the same Web writes nothing.
    let addr = khai.metrics_addr().await;
    let before = sum(
        &metrics_until(&addr, "metrics", |_| true).await,
        "controller_runtime_reconcile_total",
    );
    let mark = audit::mark();
    webs.patch(
        "site",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
    )
    .await
    .unwrap();
    metrics_until(&addr, "a reconcile after the poke", |b| {
        sum(b, "controller_runtime_reconcile_total") > before
    })
    .await;
    let writes = audit::khai_writes(mark, &ns.name);
    assert_eq!(audit::total(&writes), 0, "writes once steady: {writes:?}");
}
