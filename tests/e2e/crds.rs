//! End to end against a real kube-apiserver: the CRDs khai generates are accepted as written and
//! the server then enforces them. Each config goes through `config::load` (so through khai's own
//! validation) and `schema::install`; every test uses its own CRD group and namespace.

use crate::support::TestNamespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, GetParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

/// Writes `files` into a temp dir, loads its `operator.toml` and installs every CRD in it.
async fn install(client: &kube::Client, files: &[(&str, &str)]) -> khai::config::Config {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let config = khai::config::load(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    khai::schema::install(
        client,
        &config.model.crds,
        "khai-test",
        crate::support::DEADLINE,
    )
    .await
    .unwrap();
    config
}

/// The CRD as the API server stores it.
async fn stored_crd(client: &kube::Client, name: &str) -> Value {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    serde_json::to_value(api.get(name).await.unwrap()).unwrap()
}

fn condition<'a>(crd: &'a Value, kind: &str) -> Option<&'a Value> {
    crd["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| &c["status"])
}

fn object(api_version: &str, kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap()
}

/// The API server's refusal of a create, which must be one.
fn refusal(result: Result<DynamicObject, kube::Error>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        Err(e) => panic!("expected the API server to refuse the object, got {e}"),
        Ok(o) => panic!("expected the API server to refuse the object, it accepted {o:?}"),
    }
}

const GADGET: &str = r#"
[[crd]]
group = "full.crds.khai.dev"
kind = "Gadget"
versions = [{ name = "v1alpha1" }, { name = "v1", storage = true }]
short_names = ["gdg"]
categories = ["khai-test"]
printer_columns = [
  { name = "Replicas", type = "integer", json_path = ".spec.replicas", description = "Desired replicas" },
  { name = "Mode", type = "string", json_path = ".spec.mode", priority = 1 },
  { name = "Ready", type = "boolean", json_path = ".status.ready" },
]
scale = { spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas", label_selector_path = ".status.selector" }
spec.name = { type = "string", min_length = 1, max_length = 20, pattern = "^[a-z]+$" }
spec.replicas = { type = "integer", minimum = 0, maximum = 100 }
spec.ratio = { type = "number", format = "double", minimum = 0, maximum = 1 }
spec.enabled = { type = "boolean" }
spec.mode = { type = "string", enum = ["fast", "safe"] }
spec.size = { type = "int-or-string" }
spec.ports = { type = "array", items = { type = "integer" } }
spec.labels = { type = "map", values = { type = "string" } }
spec.tls = { type = "object", properties = { port = { type = "integer", required = true }, host = { type = "string", nullable = true } } }
spec.extra = { type = "object", preserve_unknown_fields = true }
status.replicas = { type = "integer" }
status.selector = { type = "string" }
status.ready = { type = "boolean" }
"#;

#[tokio::test]
async fn a_crd_with_every_field_type_columns_scale_and_two_versions_is_established_and_served() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crd-full").await;
    let config = install(&client, &[("operator.toml", GADGET)]).await;
    let crd = &config.model.crds[0];

    let stored = stored_crd(&client, "gadgets.full.crds.khai.dev").await;
    assert_eq!(condition(&stored, "Established"), Some(&json!("True")));
    assert_eq!(
        stored["status"]["acceptedNames"]["shortNames"],
        json!(["gdg"])
    );
    assert_eq!(
        stored["status"]["acceptedNames"]["categories"],
        json!(["khai-test"])
    );
    assert_eq!(stored["status"]["storedVersions"], json!(["v1"]));
    let versions = stored["spec"]["versions"].as_array().unwrap();
    let flags: Vec<_> = versions
        .iter()
        .map(|v| (v["name"].clone(), v["served"].clone(), v["storage"].clone()))
        .collect();
    assert_eq!(
        flags,
        [
            (json!("v1alpha1"), json!(true), json!(false)),
            (json!("v1"), json!(true), json!(true)),
        ]
    );

    // Written through the non-storage version, read through the storage one: nothing pruned.
    let spec = json!({
        "name": "widget", "replicas": 3, "ratio": 0.25, "enabled": true, "mode": "fast",
        "size": "50%", "ports": [80, 443], "labels": { "app": "gadget" },
        "tls": { "port": 8443, "host": null }, "extra": { "free": { "form": [1, "two"] } },
    });
    let old: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::core::ApiResource {
            api_version: "full.crds.khai.dev/v1alpha1".into(),
            version: "v1alpha1".into(),
            ..crd.api_resource()
        },
    );
    old.create(
        &PostParams::default(),
        &object("full.crds.khai.dev/v1alpha1", "Gadget", "g1", spec.clone()),
    )
    .await
    .unwrap();
    let gadgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &crd.api_resource());
    assert_eq!(gadgets.get("g1").await.unwrap().data["spec"], spec);

    // The status subresource takes status; the scale subresource maps both replica paths.
    let status = json!({ "status": { "replicas": 2, "selector": "app=gadget", "ready": true } });
    gadgets
        .patch_status("g1", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let scale = gadgets.get_scale("g1").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let scale_status = scale.status.unwrap();
    assert_eq!(scale_status.replicas, 2);
    assert_eq!(scale_status.selector.as_deref(), Some("app=gadget"));
    let to_five = json!({ "spec": { "replicas": 5 } });
    gadgets
        .patch_scale("g1", &PatchParams::default(), &Patch::Merge(&to_five))
        .await
        .unwrap();
    assert_eq!(gadgets.get("g1").await.unwrap().data["spec"]["replicas"], 5);

    // The printer columns are what the server renders for `kubectl get`.
    let table = table(&client, &gadgets, "g1").await;
    let cell = |column: &str| {
        let i = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["name"] == column)
            .unwrap_or_else(|| panic!("no column {column} in {table}"));
        table["rows"][0]["cells"][i].clone()
    };
    assert_eq!(cell("Replicas"), json!(5));
    assert_eq!(cell("Mode"), json!("fast"));
    assert_eq!(cell("Ready"), json!(true));
}

/// `name` rendered as a `kubectl get` table (`as=Table`).
async fn table(client: &kube::Client, api: &Api<DynamicObject>, name: &str) -> Value {
    let mut req = kube::core::Request::new(api.resource_url())
        .get(name, &GetParams::default())
        .unwrap();
    req.headers_mut().insert(
        "accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io"
            .parse()
            .unwrap(),
    );
    client.request(req).await.unwrap()
}

const DEFAULTED: &str = r#"
[[crd]]
group = "defaults.crds.khai.dev"
kind = "Defaulted"
versions = ["v1"]
spec.message = { type = "string" }
spec.replicas = { type = "integer", minimum = 0, default = 3 }
spec.mode = { type = "string", enum = ["fast", "safe"], default = "safe" }
spec.ports = { type = "array", items = { type = "integer" }, default = [80] }
spec.tls = { type = "object", properties = { port = { type = "integer", default = 443 } }, default = {} }
"#;

#[tokio::test]
async fn the_api_server_applies_declared_defaults() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crd-defaults").await;
    let config = install(&client, &[("operator.toml", DEFAULTED)]).await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &config.model.crds[0].api_resource(),
    );
    let sent = object(
        "defaults.crds.khai.dev/v1",
        "Defaulted",
        "d1",
        json!({ "message": "hi" }),
    );
    api.create(&PostParams::default(), &sent).await.unwrap();
    let read = api.get("d1").await.unwrap();
    assert_eq!(
        read.data["spec"],
        json!({ "message": "hi", "replicas": 3, "mode": "safe", "ports": [80], "tls": { "port": 443 } })
    );

    // A value that is given is kept, not defaulted.
    let given = object(
        "defaults.crds.khai.dev/v1",
        "Defaulted",
        "d2",
        json!({ "replicas": 0, "mode": "fast" }),
    );
    let created = api.create(&PostParams::default(), &given).await.unwrap();
    assert_eq!(created.data["spec"]["replicas"], 0);
    assert_eq!(created.data["spec"]["mode"], "fast");
}

const VALIDATED: &str = r#"
[[crd]]
group = "invalid.crds.khai.dev"
kind = "Checked"
versions = ["v1"]
spec.message = { type = "string", required = true }
spec.replicas = { type = "integer", minimum = 0 }
spec.mode = { type = "string", enum = ["fast", "safe"] }
"#;

#[tokio::test]
async fn the_api_server_rejects_objects_breaking_enum_minimum_or_required() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crd-invalid").await;
    let config = install(&client, &[("operator.toml", VALIDATED)]).await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &config.model.crds[0].api_resource(),
    );
    let create = |name: &str, spec: Value| {
        let obj = object("invalid.crds.khai.dev/v1", "Checked", name, spec);
        let api = api.clone();
        async move { api.create(&PostParams::default(), &obj).await }
    };

    // The control: a valid object is accepted, so each refusal below is about its one field.
    create(
        "ok",
        json!({ "message": "hi", "replicas": 0, "mode": "safe" }),
    )
    .await
    .unwrap();

    let cases = [
        (
            "bad-enum",
            json!({ "message": "hi", "mode": "slow" }),
            "spec.mode: Unsupported value: \"slow\"",
        ),
        (
            "bad-minimum",
            json!({ "message": "hi", "replicas": -1 }),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            "no-message",
            json!({ "replicas": 1 }),
            "spec.message: Required value",
        ),
    ];
    for (name, spec, expected) in cases {
        let status = refusal(create(name, spec).await);
        assert_eq!(status.code, 422, "{name}: {status:?}");
        assert_eq!(status.reason, "Invalid", "{name}: {status:?}");
        assert!(
            status.message.contains(expected),
            "{name}: expected {expected:?} in {:?}",
            status.message
        );
    }
}

/// A schema the compact form cannot say: a list keyed by `name` (`x-kubernetes-list-type: map`).
const RAW_SCHEMA: &str = r#"
type: object
properties:
  spec:
    type: object
    properties:
      level:
        type: string
        default: info
      routes:
        type: array
        x-kubernetes-list-type: map
        x-kubernetes-list-map-keys: [name]
        items:
          type: object
          required: [name]
          properties:
            name: { type: string }
            target: { type: string }
  status:
    type: object
    properties:
      phase: { type: string }
"#;

const RAW: &str = r#"
[[crd]]
group = "raw.crds.khai.dev"
kind = "Router"
versions = ["v1"]
printer_columns = [{ name = "Level", type = "string", json_path = ".spec.level" }]
schema_file = "schemas/router.yaml"
"#;

#[tokio::test]
async fn a_crd_from_a_raw_schema_file_installs_and_is_enforced() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crd-raw").await;
    let config = install(
        &client,
        &[("operator.toml", RAW), ("schemas/router.yaml", RAW_SCHEMA)],
    )
    .await;

    let stored = stored_crd(&client, "routers.raw.crds.khai.dev").await;
    assert_eq!(condition(&stored, "Established"), Some(&json!("True")));
    let version = &stored["spec"]["versions"][0];
    assert_eq!(
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["routes"]["x-kubernetes-list-map-keys"],
        json!(["name"])
    );
    assert_eq!(version["subresources"], json!({ "status": {} }));

    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &config.model.crds[0].api_resource(),
    );
    let routes = json!([{ "name": "a", "target": "x" }]);
    let created = api
        .create(
            &PostParams::default(),
            &object(
                "raw.crds.khai.dev/v1",
                "Router",
                "r1",
                json!({ "routes": routes }),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["level"], "info",
        "the file's default applies"
    );

    let duplicate = json!({ "routes": [{ "name": "a" }, { "name": "a" }] });
    let status = refusal(
        api.create(
            &PostParams::default(),
            &object("raw.crds.khai.dev/v1", "Router", "r2", duplicate),
        )
        .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("spec.routes[1]: Duplicate value"),
        "{}",
        status.message
    );
}

/// The first `[[crd]]` example of docs/configuration.md (the `[[crd]]` section's), with its own
/// group.
fn reference_crd_example() -> String {
    let page =
        std::fs::read_to_string(crate::support::repo_root().join("docs/configuration.md")).unwrap();
    let start = page
        .find("```toml\n[[crd]]\n")
        .expect("docs/configuration.md has a [[crd]] example")
        + "```toml\n".len();
    let len = page[start..].find("```\n").unwrap();
    page[start..start + len].replace("examples.khai.dev", "readme.crds.khai.dev")
}

#[tokio::test]
async fn the_reference_crd_example_installs_with_its_columns_and_scale() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "crd-readme").await;
    let config = install(&client, &[("operator.toml", &reference_crd_example())]).await;
    let crd = &config.model.crds[0];
    let stored = stored_crd(&client, &crd.crd_name()).await;
    assert_eq!(condition(&stored, "Established"), Some(&json!("True")));
    assert!(
        !crd.printer_columns.is_empty() && crd.scale.is_some(),
        "the example shows printer columns and scale"
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &crd.api_resource());
    let api_version = format!("readme.crds.khai.dev/{}", crd.storage_version());
    api.create(
        &PostParams::default(),
        &object(&api_version, &crd.kind, "c1", json!({})),
    )
    .await
    .unwrap();
    let scale = api.get_scale("c1").await.unwrap();
    assert_eq!(
        scale.spec.and_then(|s| s.replicas),
        Some(1),
        "default replicas via scale"
    );
    let table = table(&client, &api, "c1").await;
    let columns: Vec<_> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    for col in &crd.printer_columns {
        assert!(
            columns.contains(&json!(col.name)),
            "{} in {columns:?}",
            col.name
        );
    }
}

/// Restarting khai must not write its CRDs again when the cluster already holds them
/// as khai would apply them; a CRD edited by hand is applied again.
#[tokio::test]
async fn installing_an_up_to_date_crd_again_writes_nothing_and_a_hand_edit_is_reverted() {
    const WIDGET: &str = r#"
[[crd]]
group = "again.crds.khai.dev"
kind = "Widget"
versions = ["v1"]
spec.size = { type = "integer", minimum = 0 }
"#;
    let name = "widgets.again.crds.khai.dev";
    let client = crate::support::client().await;
    let config = install(&client, &[("operator.toml", WIDGET)]).await;
    let ours = |e: &Value| {
        e["objectRef"]["name"] == name
            && e["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains("fieldManager=khai-test"))
    };
    let install_again = || {
        khai::schema::install(
            &client,
            &config.model.crds,
            "khai-test",
            crate::support::DEADLINE,
        )
    };

    let from = crate::support::audit::mark();
    install_again().await.unwrap();
    // A hand edit: the minimum khai set is gone.
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let edit = json!([{ "op": "remove",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/size/minimum" }]);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(edit).unwrap()),
    )
    .await
    .unwrap();
    install_again().await.unwrap();
    // The log is complete up to the apply after the edit, so it shows the first install's too,
    // had there been one.
    crate::support::audit::wait_for_entry(from, "khai applying the edited CRD", ours).await;
    let writes = crate::support::audit::writes(from, ours);
    assert_eq!(
        writes,
        crate::support::audit::Writes::from([("patch customresourcedefinitions".into(), 1)]),
        "only the install after the hand edit writes"
    );
    let stored = stored_crd(&client, name).await;
    assert_eq!(
        stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["size"]["minimum"]
            .as_f64(),
        Some(0.0),
        "the hand edit is reverted"
    );
}
