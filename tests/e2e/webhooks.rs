//! End to end: admission and conversion webhooks in Rhai, served by the real `khai` binary over
//! TLS on 127.0.0.1 and called by a real kube-apiserver.
//!
//! Each test runs its own khai on its own port; tests that register webhooks with the
//! API server use their own CRD group, so their webhooks never see each other's objects.

use crate::support::metrics::wait_for_reloads;
use crate::support::{Khai, TestNamespace, poll_until};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// khai on `config` with its webhook server on a port it picks (returned, from its log); with
/// `install`, khai points the API server at that port (self-signed mode installs its
/// configurations, `--webhook-url https://127.0.0.1:0` standing for the port bound).
pub(crate) async fn start(config: &Path, ns: &str, install: bool) -> (Khai, u16) {
    start_with(config, ns, install, &[], crate::support::kubeconfig()).await
}

/// Like [`start`], with `extra` flags, connecting with `kubeconfig`.
pub(crate) async fn start_with(
    config: &Path,
    ns: &str,
    install: bool,
    extra: &[&str],
    kubeconfig: &Path,
) -> (Khai, u16) {
    let mut args = vec!["--webhook-bind", "127.0.0.1:0"];
    if install {
        args.extend([
            "--webhook-url",
            "https://127.0.0.1:0",
            "--log-format",
            "json",
        ]);
    }
    args.extend(extra);
    let khai = Khai::start_with_kubeconfig(config, ns, &args, kubeconfig);
    let port = khai.listening_port("webhook").await;
    if install {
        khai.wait_for_webhooks_installed(0, "webhook configurations to be installed")
            .await;
    }
    (khai, port)
}

/// Deletes khai's webhook configurations `name` when dropped (the test passed or panicked), so
/// they do not outlive the khai that served them: configurations are cluster-wide, and one
/// pointing at a stopped khai would reject other tests' writes of the same kind.
pub(crate) struct Registered(pub(crate) &'static str);

impl Drop for Registered {
    fn drop(&mut self) {
        let name = self.0;
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let client = crate::support::client().await;
                for kind in [
                    "ValidatingWebhookConfiguration",
                    "MutatingWebhookConfiguration",
                ] {
                    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
                    let api: Api<DynamicObject> =
                        Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
                    let _ = api.delete(name, &Default::default()).await;
                }
                Some(())
            })
        })
        .join();
    }
}

/// The Caches of `group` in `ns`, at `version`.
fn cache_api(client: &kube::Client, group: &str, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, "Cache");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "caches");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// The API server's message for a rejected create.
async fn rejection(api: &Api<DynamicObject>, obj: Value) -> String {
    match api.create(&PostParams::default(), &object(obj)).await {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("expected the webhook to reject the create, got {other:?}"),
    }
}

#[tokio::test]
async fn cache_example_validates_mutates_and_converts_through_the_api_server() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-cache").await;
    // The webhook configurations and the CRD's conversion webhook are cluster-wide: a copy of
    // the example under its own operator name and group keeps them away from every other
    // test's Caches.
    let dir = tempfile::tempdir().unwrap();
    let group = "hooks.khai.dev";
    let example = crate::support::example_copy("cache", dir.path(), "hookcache", group);
    let _registered = Registered("khai-hookcache");
    let (_khai, _) = start(&example, &ns.name, true).await;
    crate::support::wait_for_crd(&client, &format!("caches.{group}")).await;
    let v1 = cache_api(&client, group, &ns.name, "v1");
    let v1alpha1 = cache_api(&client, group, &ns.name, "v1alpha1");

    let bad = json!({ "apiVersion": format!("{group}/v1"), "kind": "Cache",
        "metadata": { "name": "bad" }, "spec": { "image": "valkey", "version": "9.9" } });
    assert_eq!(
        rejection(&v1, bad).await,
        "admission webhook \"validate-cache.hookcache.khai.dev\" denied the request: \
         spec.version \"9.9\" is not allowed for valkey (allowed: 8.0, 8.1)"
    );

    let text = std::fs::read_to_string(example.join("cache.yaml")).unwrap();
    let sample: DynamicObject = serde_saphyr::from_str(&text).unwrap();
    let created = v1.create(&PostParams::default(), &sample).await.unwrap();
    let annotations = &created.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations[&format!("{group}/owner")], "admin");
    assert_eq!(annotations[&format!("{group}/lastUpdatedBy")], "admin");

    // Stored at v1; read at both versions.
    let at_v1 = v1.get("sessions").await.unwrap();
    assert_eq!(at_v1.data["spec"]["desired_size"], 2);
    assert!(at_v1.data["spec"].get("size").is_none(), "{:?}", at_v1.data);
    let old = v1alpha1.get("sessions").await.unwrap();
    assert_eq!(old.types.unwrap().api_version, format!("{group}/v1alpha1"));
    assert_eq!(old.data["spec"]["size"], 2);
    assert!(
        old.data["spec"].get("desired_size").is_none(),
        "{:?}",
        old.data
    );
    assert_eq!(old.data["spec"]["image"], "valkey");

    // Written at v1alpha1, stored and read at v1.
    let legacy = json!({ "apiVersion": format!("{group}/v1alpha1"), "kind": "Cache",
        "metadata": { "name": "legacy" }, "spec": { "image": "redis", "size": 5 } });
    v1alpha1
        .create(&PostParams::default(), &object(legacy))
        .await
        .unwrap();
    let new = v1.get("legacy").await.unwrap();
    assert_eq!(new.data["spec"]["desired_size"], 5);
    assert!(new.data["spec"].get("size").is_none(), "{:?}", new.data);
    let annotations = new.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations[&format!("{group}/owner")], "admin");
}

/// A one-CRD operator with a validate script, in a temporary directory.
fn widget_operator(dir: &Path, group: &str, validate: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("scripts/w.rhai"), validate).unwrap();
    let toml = format!(
        "[operator]\nname = \"{op}\"\n\n[[crd]]\ngroup = \"{group}\"\nkind = \"Widget\"\n\
         versions = [\"v1\"]\nspec.count = {{ type = \"integer\" }}\n\n\
         [[webhook]]\nfor = \"Widget\"\nscript = \"scripts/w.rhai\"\nvalidate = \"validate\"\n",
        op = group.split('.').next().unwrap(),
    );
    std::fs::write(dir.join("operator.toml"), toml).unwrap();
    dir.to_path_buf()
}

#[tokio::test]
async fn script_error_in_validate_denies_with_the_error_message_under_failure_policy_fail() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-error").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "errors.webhooks.khai.dev";
    let script = "fn validate(req) {\n    req.object.spec.count + \"x\" + undefined_fn()\n}\n";
    let config = widget_operator(dir.path(), group, script);
    let (_khai, _) = start(&config, &ns.name, true).await;
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let gvk = GroupVersionKind::gvk(group, "v1", "Widget");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &ApiResource::from_gvk(&gvk));
    let obj = json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "count": 1 } });
    let file = config.join("scripts/w.rhai");
    assert_eq!(
        rejection(&api, obj).await,
        format!(
            "admission webhook \"validate-widget.errors.khai.dev\" denied the request: \
             {}:2:35: in validate: Function not found: undefined_fn ()",
            file.display()
        )
    );
}

/// A TLS client that trusts `ca` only.
fn connector(ca: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A TLS connection to 127.0.0.1:`port` trusting `ca`, or the connection or TLS error.
pub(crate) async fn connect_tls(
    port: u16,
    ca: &str,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector(ca)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}

/// POSTs `body` to `path` over TLS trusting `ca`; returns status and body, or the TLS error.
pub(crate) async fn post(
    port: u16,
    ca: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Value), String> {
    let tls = connect_tls(port, ca).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let res = send.send_request(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap()))
}

/// Writes a fresh CA-signed certificate for 127.0.0.1 to `dir`; returns the CA PEM.
pub(crate) fn write_cert(dir: &Path) -> String {
    let (pair, ca) = khai::webhook::ca::self_signed(&["127.0.0.1".into()]).unwrap();
    // Write to temporary names and rename, as a Secret update swaps files at once.
    for (name, text) in [("tls.crt", &pair.cert), ("tls.key", &pair.key)] {
        std::fs::write(dir.join(format!("{name}.new")), text).unwrap();
        std::fs::rename(dir.join(format!("{name}.new")), dir.join(name)).unwrap();
    }
    ca
}

/// The widget operator with `tls = "files"`, reloading every 200ms.
fn files_operator(dir: &Path) -> PathBuf {
    let config = widget_operator(
        dir,
        "files.webhooks.khai.dev",
        "fn validate(req) { allow() }",
    );
    let mut toml = std::fs::read_to_string(config.join("operator.toml")).unwrap();
    toml.push_str(
        "\n[webhook_server]\ntls = \"files\"\ncert_file = \"tls.crt\"\nkey_file = \"tls.key\"\n\
         reload_interval = \"200ms\"\nmax_body_bytes = 4096\n",
    );
    std::fs::write(config.join("operator.toml"), toml).unwrap();
    config
}

fn review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(
        &json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": { "uid": uid, "operation": "CREATE", "object": { "spec": {} } } }),
    )
    .unwrap()
}

#[tokio::test]
async fn bad_requests_get_json_errors_and_the_server_keeps_serving() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-bad").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = write_cert(dir.path());
    let (_khai, port) = start(&files_operator(dir.path()), &ns.name, false).await;

    let garbage = post(port, &ca, "/validate/widget", b"\x00garbage{".to_vec()).await;
    let (status, body) = garbage.unwrap();
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("malformed AdmissionReview: expected value"),
        "{body}"
    );
    let huge = post(port, &ca, "/validate/widget", vec![b' '; 5000])
        .await
        .unwrap();
    assert_eq!(
        huge,
        (
            413,
            json!({ "error": "request body is larger than 4096 bytes (max_body_bytes)" })
        )
    );
    let nowhere = post(port, &ca, "/nope", review("u0")).await.unwrap();
    assert_eq!(nowhere, (404, json!({ "error": "no webhook at /nope" })));

    let (status, body) = post(port, &ca, "/validate/widget", review("u1"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["response"], json!({ "uid": "u1", "allowed": true }));
}

#[tokio::test]
async fn certificate_files_replaced_on_disk_are_served_without_a_restart() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-reload").await;
    let dir = tempfile::tempdir().unwrap();
    let first_ca = write_cert(dir.path());
    let (_khai, port) = start(&files_operator(dir.path()), &ns.name, false).await;
    assert_eq!(
        post(port, &first_ca, "/validate/widget", review("a"))
            .await
            .unwrap()
            .0,
        200
    );

    let second_ca = write_cert(dir.path());
    poll_until("the new certificate to be served", || async {
        connect_tls(port, &second_ca).await.is_ok()
    })
    .await;
    assert_eq!(
        post(port, &second_ca, "/validate/widget", review("b"))
            .await
            .unwrap()
            .0,
        200
    );
    let stale = post(port, &first_ca, "/validate/widget", review("c")).await;
    assert!(
        stale.as_ref().is_err_and(|e| e.contains("certificate")),
        "the old CA still verifies: {stale:?}"
    );
}

#[test]
fn generate_webhooks_points_configurations_at_the_url_or_asks_for_a_target() {
    let example = crate::support::repo_root().join("examples/cache");
    let khai = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["generate", "webhooks"])
            .args(args)
            .output()
            .unwrap()
    };
    let out = khai(&[example.to_str().unwrap(), "--url", "https://127.0.0.1:9443"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration"
        ]
    );
    assert_eq!(
        docs[1]["webhooks"][0]["clientConfig"],
        json!({ "url": "https://127.0.0.1:9443/mutate/cache" })
    );
    let out = khai(&[example.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: {}: no [webhook_server] service to point at; set one or pass --url\n",
            example.join("operator.toml").display()
        )
    );
}

/// The config of `widget_operator` with a mutate function registered as well.
fn register_mutate(config: &Path) {
    let toml = config.join("operator.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}mutate = \"mutate\"\n")).unwrap();
}

#[tokio::test]
async fn webhook_scripts_and_registrations_hot_reload_and_a_broken_script_keeps_the_last_good_one()
{
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-hot").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "hot.webhooks.khai.dev";
    let limit = |n: u32| {
        format!(
            "fn validate(req) {{ if req.object.spec.count > {n} {{ deny(\"count above {n}\") }} }}\n\
             fn mutate(req) {{ let o = req.object; o.metadata.labels = #{{ mutated: \"yes\" }}; o }}\n"
        )
    };
    let config = widget_operator(dir.path(), group, &limit(5));
    let kubeconfig = crate::support::kubeconfig();
    let (khai, _) = start_with(&config, &ns.name, true, &["--watch"], kubeconfig).await;
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let gvk = GroupVersionKind::gvk(group, "v1", "Widget");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &ApiResource::from_gvk(&gvk));
    let widget = |name: &str, count: u32| {
        json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": { "name": name }, "spec": { "count": count } })
    };
    assert!(
        rejection(&api, widget("a", 10))
            .await
            .ends_with("count above 5")
    );

    // A new script and a newly registered mutate function: both in force without a restart.
    let seen = khai.log_len();
    std::fs::write(config.join("scripts/w.rhai"), limit(50)).unwrap();
    register_mutate(&config);
    khai.wait_for_webhooks_installed(seen, "the new webhook configurations")
        .await;
    let stored = api
        .create(&PostParams::default(), &object(widget("b", 10)))
        .await
        .expect("the reloaded validate allows count 10");
    assert_eq!(
        stored.labels().get("mutated").map(String::as_str),
        Some("yes")
    );
    assert!(
        rejection(&api, widget("c", 60))
            .await
            .ends_with("count above 50")
    );

    // A script that does not compile leaves the last good one serving.
    let addr = khai.metrics_addr().await;
    let failed = wait_for_reloads(&addr, "failure", 0.0).await;
    std::fs::write(config.join("scripts/w.rhai"), "fn validate(req) {").unwrap();
    wait_for_reloads(&addr, "failure", failed + 1.0).await;
    assert!(
        rejection(&api, widget("d", 60))
            .await
            .ends_with("count above 50")
    );
}

/// A client for the test cluster that impersonates `user` in `groups`, with `extra` user info.
async fn impersonating(user: &str, groups: &[&str], extra: (&str, &str)) -> kube::Client {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(crate::support::kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.into());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    config.auth_info.impersonate_user_extra =
        Some([(extra.0.to_string(), vec![extra.1.to_string()])].into());
    kube::Client::try_from(config).unwrap()
}

/// Rules can cover a subresource (Kopf's `subresource=`),
/// and scripts see who is asking (`req.userInfo`: username, groups, extra) as the API server
/// sends it. A validate webhook on `widgets/status` rejects a status update; one on the object
/// itself names the impersonated user, their groups and extra info in its denial.
#[tokio::test]
async fn status_subresource_rules_and_the_callers_user_info_reach_scripts() {
    use kube::api::{Patch, PatchParams};
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-status").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "status.webhooks.khai.dev";
    std::fs::write(
        dir.path().join("w.rhai"),
        r#"
fn validate(req) {
    let u = req.userInfo;
    if req.object.spec.count > 5 {
        deny(`count ${req.object.spec.count} is too high for ${u.username} (groups: ${u.groups}, team: ${u.extra?.team})`)
    }
}
fn validate_status(req) {
    if req.object.status?.phase == "Broken" {
        deny(`${req.subResource}: ${req.kind.kind} ${req.name} cannot be Broken (was ${req.oldObject.status?.phase ?? "unset"})`)
    }
}
"#,
    )
    .unwrap();
    let toml = format!(
        r#"
[operator]
name = "status"

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.count = {{ type = "integer" }}
status.phase = {{ type = "string" }}

[[webhook]]
name = "widget"
for = "Widget"
script = "w.rhai"
validate = "validate"

[[webhook]]
name = "widget-status"
for = "Widget"
script = "w.rhai"
validate = "validate_status"
subresources = ["status"]
operations = ["UPDATE"]
"#
    );
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    let (_khai, _) = start(dir.path(), &ns.name, true).await;
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Widget"));
    let widget = |name: &str, count: u32| {
        json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": { "name": name }, "spec": { "count": count } })
    };

    // Who asks: alice may create Widgets here, and says so through impersonation.
    crate::operations::apply_rbac(
        &client,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": "widgets", "namespace": ns.name },
            "rules": [{ "apiGroups": [group], "resources": ["widgets"], "verbs": ["create"] }],
        }),
    )
    .await;
    crate::operations::apply_rbac(&client, json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": "alice", "namespace": ns.name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widgets" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice" }],
    }))
    .await;
    let alice = impersonating("alice", &["team-a"], ("team", "storage")).await;
    let as_alice: Api<DynamicObject> = Api::namespaced_with(alice, &ns.name, &ar);
    assert_eq!(
        rejection(&as_alice, widget("big", 10)).await,
        "admission webhook \"validate-widget.status.khai.dev\" denied the request: count 10 is \
         too high for alice (groups: [\"team-a\", \"system:authenticated\"], team: [\"storage\"])"
    );

    // The status webhook sees status updates, with `subResource` set, and rejects one.
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    api.create(&PostParams::default(), &object(widget("w", 1)))
        .await
        .unwrap();
    let status = |phase: &str| Patch::Merge(json!({ "status": { "phase": phase } }));
    let params = PatchParams::default();
    api.patch_status("w", &params, &status("Ready"))
        .await
        .expect("a status update the webhook allows");
    let denied = match api.patch_status("w", &params, &status("Broken")).await {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("expected the status webhook to reject the update, got {other:?}"),
    };
    assert_eq!(
        denied,
        "admission webhook \"validate-widget-status.status.khai.dev\" denied the request: status: \
         Widget w cannot be Broken (was Ready)"
    );
    let stored = api.get("w").await.unwrap();
    assert_eq!(stored.data["status"]["phase"], "Ready");
}

/// A configuration khai no longer needs is deleted: with the last `mutate` gone from the config
/// (here by a hot reload), the API server would otherwise keep calling `/mutate/<name>`, which
/// khai no longer serves, and reject every write under `failure_policy = "Fail"`. Seen failing
/// against the build before the fix: the mutating configuration stayed.
#[tokio::test]
async fn a_webhook_configuration_the_config_no_longer_needs_is_deleted() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "wh-stale").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "stale.webhooks.khai.dev";
    let script = "fn validate(req) { allow() }\n\
                  fn mutate(req) { let o = req.object; o.metadata.labels = #{ m: \"yes\" }; o }\n";
    let config = widget_operator(dir.path(), group, script);
    register_mutate(&config);
    let kubeconfig = crate::support::kubeconfig();
    let (khai, _) = start_with(&config, &ns.name, true, &["--watch"], kubeconfig).await;
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
    );
    let mutating: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    crate::support::wait_exists(&mutating, "khai-stale", "the mutating configuration").await;

    let seen = khai.log_len();
    widget_operator(dir.path(), group, script);
    khai.wait_for_webhooks_installed(seen, "the configurations to be installed again")
        .await;
    crate::support::wait_until_gone(
        &mutating,
        "khai-stale",
        "the mutating configuration to be deleted",
    )
    .await;
    crate::support::wait_for_crd(&client, &format!("widgets.{group}")).await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", "Widget")),
    );
    let obj = json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "count": 1 } });
    let stored = api
        .create(&PostParams::default(), &object(obj))
        .await
        .expect("writes pass once the mutating configuration is gone");
    assert!(stored.labels().get("m").is_none(), "{:?}", stored.labels());
}
