//! End to end against a real kube-apiserver with RBAC: khai runs as a ServiceAccount that holds
//! only what `khai generate rbac` grants, and the operator works with no 403; take one generated
//! rule away and the flow fails where that rule was needed.
//!
//! The operator is `examples/hello`, copied with a script that also records an Event and defines
//! `finalize`, so every generated rule is exercised: CRD install, list/watch, server-side apply of
//! children, the status subresource, the finalizer patch, events.k8s.io and the leader Lease.

use crate::support::{Khai, TestNamespace, wait_for};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::path::Path;

/// `examples/hello` in a temporary directory, its script extended with an Event and `finalize`.
fn hello_with_events() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = crate::support::repo_root().join("examples/hello");
    std::fs::copy(src.join("operator.toml"), dir.path().join("operator.toml")).unwrap();
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    let script = std::fs::read_to_string(src.join("scripts/hello.rhai")).unwrap();
    let script = script.replacen(
        "        status: #{",
        "        events: [#{ type: \"Normal\", reason: \"Greeted\", message: \"said \" + greeting }],\n        status: #{",
        1,
    ) + "\nfn finalize(obj, ctx) { true }\n";
    assert!(script.contains("Greeted"), "the hello script changed shape");
    std::fs::write(dir.path().join("scripts/hello.rhai"), script).unwrap();
    dir
}

/// `khai generate rbac` for `config`, khai in `ns` watching `ns`.
pub(crate) fn generate_rbac(config: &Path, ns: &str) -> Vec<Value> {
    generate_rbac_with(config, ns, &[])
}

/// [`generate_rbac`] with `extra` flags (`--shards`).
pub(crate) fn generate_rbac_with(config: &Path, ns: &str, extra: &[&str]) -> Vec<Value> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(["generate", "rbac"])
        .arg(config)
        .args(["--namespace", ns, "--watch-namespace", ns])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "khai generate rbac failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

fn resource_of(doc: &Value) -> ApiResource {
    let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            doc["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let kind = doc["kind"].as_str().unwrap();
    let plural = format!("{}s", kind.to_lowercase());
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, &version, kind), &plural)
}

/// Applies the generated objects as the cluster admin. Cluster-scoped names get the test
/// namespace appended, so tests running side by side do not share a ClusterRoleBinding.
pub(crate) async fn apply(client: &kube::Client, ns: &str, docs: &[Value]) {
    for doc in docs {
        let mut doc = doc.clone();
        if doc["metadata"]["namespace"].is_null() {
            let name = format!("{}-{ns}", doc["metadata"]["name"].as_str().unwrap());
            doc["metadata"]["name"] = json!(name);
            if doc["roleRef"]["kind"] == "ClusterRole" {
                doc["roleRef"]["name"] = json!(name);
            }
        }
        let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let ar = resource_of(&doc);
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(n) => Api::namespaced_with(client.clone(), n, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let name = doc["metadata"]["name"].as_str().unwrap();
        api.patch(
            name,
            &PatchParams::apply("rbac-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", doc["kind"]));
    }
}

/// A kubeconfig that authenticates as the ServiceAccount `sa` with a TokenRequest token; the
/// file is removed when the returned path is dropped.
pub(crate) async fn service_account_kubeconfig(
    client: &kube::Client,
    ns: &str,
    sa: &str,
) -> tempfile::TempPath {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": { "expirationSeconds": 3600 },
    }))
    .unwrap();
    let token = sas
        .create_subresource::<TokenRequest, TokenRequest>(
            "token",
            sa,
            &PostParams::default(),
            &request,
        )
        .await
        .expect("TokenRequest for the ServiceAccount")
        .status
        .expect("TokenRequest status")
        .token;
    let admin = kube::config::Kubeconfig::read_from(crate::support::kubeconfig()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let server = cluster.server.unwrap();
    let ca = cluster.certificate_authority.unwrap();
    let path = tempfile::Builder::new()
        .prefix("khai-rbac-")
        .suffix(".kubeconfig")
        .tempfile()
        .unwrap()
        .into_temp_path();
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {sa}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: {sa}, namespace: {ns}}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    path
}

fn hellos(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.khai.dev", "v1", "Hello"),
        "hellos",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn config_maps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Starts khai as the ServiceAccount with `docs` applied, and creates the sample Hello. The
/// kubeconfig is returned so it outlives khai's start-up.
async fn start(
    client: &kube::Client,
    ns: &str,
    config: &Path,
    docs: &[Value],
) -> (Khai, tempfile::TempPath) {
    apply(client, ns, docs).await;
    let kubeconfig = service_account_kubeconfig(client, ns, "khai-hello").await;
    let khai = Khai::start_with_kubeconfig(
        config,
        ns,
        &[
            "--leader-elect",
            "--leader-elect-namespace",
            ns,
            "--log-level",
            "info,khai=debug",
        ],
        &kubeconfig,
    );
    crate::support::wait_for_crd(client, "hellos.examples.khai.dev").await;
    let sample =
        std::fs::read_to_string(crate::support::repo_root().join("examples/hello/hello.yaml"))
            .unwrap();
    let sample: DynamicObject = serde_saphyr::from_str(&sample).unwrap();
    hellos(client, ns)
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    (khai, kubeconfig)
}

/// A refusal by the API server. Not any "403": uids and timestamps contain those digits.
pub(crate) fn denied(line: &str) -> bool {
    line.contains("code: 403") || line.to_lowercase().contains("forbidden")
}

#[tokio::test]
async fn operator_runs_with_only_the_generated_rbac_and_no_403() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-ok").await;
    let config = hello_with_events();
    let docs = generate_rbac(config.path(), &ns.name);
    let (khai, _kubeconfig) = start(&client, &ns.name, config.path(), &docs).await;

    wait_for(
        &config_maps(&client, &ns.name),
        "world-hello",
        "the child ConfigMap",
        |o: Option<&DynamicObject>| o.is_some(),
    )
    .await;
    let hello = wait_for(
        &hellos(&client, &ns.name),
        "world",
        "status written and the finalizer added",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.data["status"]["configMap"] == "world-hello"
                    && o.metadata
                        .finalizers
                        .as_ref()
                        .is_some_and(|f| f.iter().any(|f| f == "khai.dev/hello"))
            })
        },
    )
    .await;
    assert_eq!(hello.data["status"]["phase"], "Ready");
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    crate::support::wait_for_any(events, "the Greeted event", |e| {
        e.reason.as_deref() == Some("Greeted")
    })
    .await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns.name);
    leases
        .get("khai-hello")
        .await
        .expect("the leader Lease, created as the ServiceAccount");

    let (_, logs) = khai.terminate().await;
    let refused: Vec<&String> = logs.iter().filter(|l| denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");
}

#[tokio::test]
async fn removing_the_generated_status_rule_makes_the_status_write_fail() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-min").await;
    let config = hello_with_events();
    let mut docs = generate_rbac(config.path(), &ns.name);
    let mut removed = 0;
    for doc in &mut docs {
        if let Some(rules) = doc.get_mut("rules").and_then(Value::as_array_mut) {
            let before = rules.len();
            rules.retain(|r| r["resources"] != json!(["hellos/status"]));
            removed += before - rules.len();
        }
    }
    assert_eq!(removed, 1, "the generated RBAC has one hellos/status rule");
    let mark = crate::support::audit::mark();
    let (khai, _kubeconfig) = start(&client, &ns.name, config.path(), &docs).await;

    // Everything before the status write still works.
    wait_for(
        &config_maps(&client, &ns.name),
        "world-hello",
        "the child ConfigMap",
        |o: Option<&DynamicObject>| o.is_some(),
    )
    .await;
    crate::support::audit::wait_for_entry(mark, "a 403 on the status write", |e| {
        e["verb"] == "patch"
            && e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["resource"] == "hellos"
            && e["objectRef"]["subresource"] == "status"
            && e["responseStatus"]["code"] == 403
    })
    .await;
    let hello = hellos(&client, &ns.name).get("world").await.unwrap();
    assert!(
        hello.data["status"]["configMap"].is_null(),
        "status written without the rule: {:?}",
        hello.data["status"]
    );
    khai.terminate().await;
}

#[tokio::test]
async fn cache_example_with_self_signed_webhooks_runs_with_only_the_generated_rbac() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-cache").await;
    // Self-signed mode installs cluster-wide webhook configurations and the CRD's conversion
    // webhook: a copy under its own operator name and group keeps them away from other tests.
    let dir = tempfile::tempdir().unwrap();
    let group = "rbaccache.khai.dev";
    let config = crate::support::example_copy("cache", dir.path(), "rbaccache", group);
    let docs = generate_rbac(&config, &ns.name);
    apply(&client, &ns.name, &docs).await;
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, "khai-rbaccache").await;
    // Installed as the ServiceAccount: both configurations and the CRD's conversion.
    let (khai, _) = crate::webhooks::start_with(&config, &ns.name, true, &[], &kubeconfig).await;
    crate::support::wait_for_crd(&client, &format!("caches.{group}")).await;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", "Cache"), "caches");
    let caches: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let text = std::fs::read_to_string(config.join("cache.yaml")).unwrap();
    let sample: DynamicObject = serde_saphyr::from_str(&text).unwrap();
    let created = caches
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    assert_eq!(
        created.metadata.annotations.unwrap_or_default()[&format!("{group}/owner")],
        "admin",
        "the mutating webhook ran"
    );
    for (group, kind) in [("apps", "Deployment"), ("", "Service")] {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
        crate::support::wait_exists(&api, "sessions", kind).await;
    }
    wait_for(
        &caches,
        "sessions",
        "status written",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"].is_string()),
    )
    .await;

    let (_, logs) = khai.terminate().await;
    let refused: Vec<&String> = logs.iter().filter(|l| denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");
}

/// Runs `khai rbac verify` as the ServiceAccount until its exit status is `ok` (the RBAC
/// authorizer sees role changes shortly after they are stored), within the deadline; returns
/// its output.
async fn verify_until(config: &Path, ns: &str, kubeconfig: &Path, ok: bool) -> String {
    let deadline = std::time::Instant::now() + crate::support::DEADLINE;
    loop {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["rbac", "verify"])
            .arg(config)
            .args(["--namespace", ns, "--watch-namespace", ns])
            .env("KUBECONFIG", kubeconfig)
            .output()
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() == ok {
            assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }), "{text}");
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "khai rbac verify did not {} within {:?}:\n{text}",
            if ok { "pass" } else { "fail" },
            crate::support::DEADLINE
        );
    }
}

#[tokio::test]
async fn rbac_verify_passes_with_the_generated_rules_and_names_a_missing_one() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-verify").await;
    let config = hello_with_events();
    let mut docs = generate_rbac(config.path(), &ns.name);
    apply(&client, &ns.name, &docs).await;
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, "khai-hello").await;
    let out = verify_until(config.path(), &ns.name, &kubeconfig, true).await;
    assert!(out.starts_with("ok: all "), "{out}");

    for doc in &mut docs {
        if let Some(rules) = doc.get_mut("rules").and_then(Value::as_array_mut) {
            rules.retain(|r| r["resources"] != json!(["hellos/status"]));
        }
    }
    apply(&client, &ns.name, &docs).await;
    let out = verify_until(config.path(), &ns.name, &kubeconfig, false).await;
    let missing: Vec<&str> = out.lines().filter(|l| l.starts_with("missing:")).collect();
    assert_eq!(
        missing,
        [format!(
            "missing: patch hellos/status.examples.khai.dev in namespace {}",
            ns.name
        )],
        "{out}"
    );
}

/// `khai rbac verify --file`: offline, against the rules `khai generate rbac` printed; a rule
/// taken out of the file is named, and the exit status says so.
#[test]
fn rbac_verify_file_checks_a_rules_file_offline() {
    let dir = hello_with_events();
    let ns = "ops";
    let rules = tempfile::NamedTempFile::new().unwrap();
    let verify = |file: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
            .args(["rbac", "verify"])
            .arg(dir.path())
            .args(["--namespace", ns, "--watch-namespace", ns, "--file"])
            .arg(file)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap()
    };
    let docs = generate_rbac(dir.path(), ns);
    let yaml: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    std::fs::write(rules.path(), &yaml).unwrap();
    let out = verify(rules.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("ok: all ")
            && stdout.contains(&format!("granted by {}", rules.path().display())),
        "{stdout}"
    );

    // The Role in `ops` loses its status rule.
    let mut fewer = docs.clone();
    for d in &mut fewer {
        if d["kind"] == "Role" {
            let kept: Vec<Value> = d["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["resources"] != json!(["hellos/status"]))
                .cloned()
                .collect();
            d["rules"] = json!(kept);
        }
    }
    let yaml: String = fewer
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    std::fs::write(rules.path(), &yaml).unwrap();
    let out = verify(rules.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with("missing: patch hellos/status.examples.khai.dev in namespace ops\n"),
        "{stdout}"
    );
}

/// A Secret `[operator] secrets` names in another namespace is granted by a Role of its own in
/// that namespace; `khai rbac verify` checks that Role too (it used to skip it and report ok
/// with the grant missing).
#[test]
fn rbac_verify_checks_the_role_on_a_secret_in_another_namespace() {
    let dir = hello_with_events();
    let toml = dir.path().join("operator.toml");
    let config = std::fs::read_to_string(&toml).unwrap().replacen(
        "name = \"hello\"\n",
        "name = \"hello\"\nsecrets = [\"billing/api-token\"]\n",
        1,
    );
    assert!(
        config.contains("billing/api-token"),
        "hello's config changed shape"
    );
    std::fs::write(&toml, config).unwrap();
    let docs = generate_rbac(dir.path(), "ops");
    let (roles, others): (Vec<Value>, Vec<Value>) = docs
        .into_iter()
        .partition(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "billing");
    assert_eq!(
        roles.len(),
        1,
        "no Role in billing for the Secret: {others:#?}"
    );
    let rules = tempfile::NamedTempFile::new().unwrap();
    let yaml: String = others
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    std::fs::write(rules.path(), &yaml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(["rbac", "verify"])
        .arg(dir.path())
        .args(["--namespace", "ops", "--watch-namespace", "ops", "--file"])
        .arg(rules.path())
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let missing: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("missing:"))
        .collect();
    assert_eq!(
        missing,
        [
            "missing: get secrets named api-token in namespace billing",
            "missing: list secrets named api-token in namespace billing",
            "missing: watch secrets named api-token in namespace billing",
        ],
        "{stdout}"
    );
}

/// A permission missing from khai's RBAC (here `patch configmaps`: no child can be
/// applied) must give each object one Warning Event (repeated, not multiplied) and a
/// `Ready=False` condition in the API server's words, show in `rest_client_requests_total`
/// with code 403, and be retried with backoff: no hot loop, no crash.
#[tokio::test]
async fn a_missing_permission_gives_one_event_and_condition_per_object_and_no_hot_loop() {
    use crate::support::metrics::{http_get, metrics_until, sum};
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-403").await;
    let config = hello_with_events();
    let mut docs = generate_rbac(config.path(), &ns.name);
    let mut removed = 0;
    for doc in &mut docs {
        for rule in doc
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if rule["resources"]
                .as_array()
                .is_some_and(|r| r.contains(&json!("configmaps")))
                && let Some(verbs) = rule["verbs"].as_array_mut()
            {
                let before = verbs.len();
                verbs.retain(|v| v != "patch");
                removed += before - verbs.len();
            }
        }
    }
    assert!(
        removed >= 1,
        "the generated RBAC lets khai patch configmaps"
    );
    let (khai, _kubeconfig) = start(&client, &ns.name, config.path(), &docs).await;
    let refused = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Ready"
                    && c["status"] == "False"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("cannot patch resource \"configmaps\""))
            })
    };
    let hello = wait_for(
        &hellos(&client, &ns.name),
        "world",
        "Ready=False naming the refused permission",
        refused,
    )
    .await;
    let message = hello.data["status"]["conditions"][0]["message"].clone();
    eprintln!("condition: {message}");
    assert!(
        !message.to_string().contains("Status {"),
        "the condition is in the API server's words, not a debug dump: {message}"
    );

    // Retries back off (1, 2, 4, 8 s...): a few reconciles in 15 s, not hundreds.
    let addr = khai.metrics_addr().await;
    let before = metrics_until(&addr, "a first reconcile", |b| {
        sum(b, "controller_runtime_reconcile_total") >= 1.0
    })
    .await;
    let window = std::time::Duration::from_secs(15);
    tokio::time::sleep(window).await;
    let (code, _) = http_get(&addr, "/healthz").await;
    assert_eq!(code, 200, "khai is alive and healthy");
    let (_, after) = http_get(&addr, "/metrics").await;
    let reconciles = sum(&after, "controller_runtime_reconcile_total")
        - sum(&before, "controller_runtime_reconcile_total");
    let refusals: f64 = after
        .lines()
        .filter(|l| l.starts_with("rest_client_requests_total{code=\"403\",method=\"PATCH\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    eprintln!("in {window:?}: {reconciles} reconciles, {refusals} refused PATCHes in all");
    assert!(
        (1.0..=6.0).contains(&reconciles),
        "{reconciles} reconciles in {window:?} of a permanent 403: a hot loop, or none at all"
    );
    assert!(
        refusals >= 2.0,
        "rest_client_requests_total counts the 403s"
    );

    // One Event for the object, its count going up, not one Event per attempt.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let warnings: Vec<_> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .collect();
    let notes: Vec<_> = warnings.iter().map(|e| e.note.clone()).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one Warning Event for the object, not one per attempt: {notes:#?}"
    );
    assert!(
        notes[0]
            .as_deref()
            .is_some_and(|n| n.contains("cannot patch resource \"configmaps\"")),
        "the Event says which permission is missing: {notes:?}"
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0), "khai stops cleanly");
}

/// Starts `examples/kopf/labels` as its ServiceAccount holding `docs`, with a Pod that names the
/// sample example and the sample itself; returns khai, the kubeconfig (to outlive start-up),
/// and the Pods' and examples' `Api`s.
async fn start_labels(
    client: &kube::Client,
    ns: &str,
    docs: &[Value],
) -> (
    Khai,
    tempfile::TempPath,
    Api<DynamicObject>,
    Api<DynamicObject>,
) {
    let example = crate::support::repo_root().join("examples/kopf/labels");
    apply(client, ns, docs).await;
    let kubeconfig = service_account_kubeconfig(client, ns, "khai-kopf-labels").await;
    let khai = Khai::start_with_kubeconfig(
        &example,
        ns,
        &["--log-level", "info,khai=debug"],
        &kubeconfig,
    );
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
    let pods: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "named", "labels": { "kopf.khai.dev/example": "kopf-example-1" } },
        "spec": { "containers": [{ "name": "c", "image": "busybox" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    crate::support::wait_for_crd(client, "kopfexamples.labels.kopf.khai.dev").await;
    let examples = crate::support::custom_api(
        client,
        ns,
        "labels.kopf.khai.dev",
        "KopfExample",
        "kopfexamples",
    );
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(example.join("kopfexample.yaml")).unwrap())
            .unwrap();
    examples
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    (khai, kubeconfig, pods, examples)
}

fn generate_labels_rbac(ns: &str) -> Vec<Value> {
    generate_rbac(
        &crate::support::repo_root().join("examples/kopf/labels"),
        ns,
    )
}

#[tokio::test]
async fn label_propagation_runs_with_only_the_generated_rbac_and_no_403() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-labels").await;
    let docs = generate_labels_rbac(&ns.name);
    let (khai, _kubeconfig, pods, _) = start_labels(&client, &ns.name, &docs).await;
    wait_for(
        &pods,
        "named",
        "the example's label on its Pod",
        |o: Option<&DynamicObject>| {
            o.and_then(|o| o.metadata.labels.as_ref())
                .is_some_and(|l| l.get("somelabel").is_some_and(|v| v == "somevalue"))
        },
    )
    .await;
    let (_, logs) = khai.terminate().await;
    let refused: Vec<&String> = logs.iter().filter(|l| denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");
}

/// Without `patch` on Pods in `uses`, the script's `k8s::label` is refused: one `Forbidden`
/// Warning Event and a `Ready=False` condition naming the call, said once however often the
/// object is retried, with backoff between retries.
#[tokio::test]
async fn a_forbidden_script_call_is_one_event_and_condition_and_backs_off() {
    use crate::support::metrics::{metrics_until, sample, sum};
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-fx-403").await;
    let mut docs = generate_labels_rbac(&ns.name);
    let mut removed = 0;
    for rule in docs
        .iter_mut()
        .filter_map(|d| d.get_mut("rules").and_then(Value::as_array_mut))
        .flatten()
    {
        if rule["resources"] == json!(["pods"])
            && let Some(verbs) = rule["verbs"].as_array_mut()
        {
            let before = verbs.len();
            verbs.retain(|v| v != "patch");
            removed += before - verbs.len();
        }
    }
    assert_eq!(removed, 1, "the generated RBAC lets khai patch pods");
    let (khai, _kubeconfig, _, examples) = start_labels(&client, &ns.name, &docs).await;
    let example = wait_for(
        &examples,
        "kopf-example-1",
        "Ready=False with reason Forbidden",
        |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["reason"] == "Forbidden")
        },
    )
    .await;
    let message = example.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("in reconcile: k8s::patch v1/Pod")
            && message.contains("/named: pods \"named\" is forbidden")
            && message.ends_with("(forbidden, 403)"),
        "{message}"
    );
    // Three failed reconciles (1 s, then 2 s apart: backoff), each refused its patch, still one
    // Event. A failed reconcile is counted once its failure is reported.
    let addr = khai.metrics_addr().await;
    metrics_until(&addr, "three refused reconciles", |b| {
        sum(b, "controller_runtime_reconcile_errors_total") >= 3.0
            && sample(b, "khai_script_api_calls_total", &[("code", "403")]).unwrap_or_default()
                >= 3.0
    })
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let forbidden: Vec<_> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Forbidden"))
        .collect();
    assert_eq!(forbidden.len(), 1, "{forbidden:#?}");
    assert!(
        forbidden[0].series.is_none(),
        "said once, not once per retry: {:?}",
        forbidden[0].series
    );
}

/// `examples/access` under the RBAC generated for a namespaced khai: its `extra_rbac` (`bind`
/// and `escalate` on `clusterroles`, cluster-scoped) must be in the ClusterRole, where it grants
/// something, not in the namespace's Role, where it grants nothing. khai creates the
/// ClusterRole and ClusterRoleBinding of a ReadAccess, deletes them when it goes, and is never
/// refused.
#[tokio::test]
async fn access_example_runs_namespaced_with_its_extra_rules_in_the_cluster_role() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-access").await;
    let dir = tempfile::tempdir().unwrap();
    let group = "rbac.access.khai.dev";
    let config = crate::support::example_copy("access", dir.path(), "rbac-access", group);
    let docs = generate_rbac(&config, &ns.name);
    let in_role = |kind: &str| {
        docs.iter()
            .filter(|d| d["kind"] == kind)
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .any(|r| {
                let verbs = r["verbs"].as_array().cloned().unwrap_or_default();
                r["resources"] == json!(["clusterroles"])
                    && verbs.contains(&json!("bind"))
                    && verbs.contains(&json!("escalate"))
            })
    };
    assert!(
        in_role("ClusterRole"),
        "bind/escalate on clusterroles is cluster-wide: {docs:#?}"
    );
    assert!(
        !in_role("Role"),
        "a Role grants nothing on clusterroles: {docs:#?}"
    );

    apply(&client, &ns.name, &docs).await;
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, "khai-rbac-access").await;
    let khai = Khai::start_with_kubeconfig(&config, &ns.name, &[], &kubeconfig);
    crate::support::wait_for_crd(&client, &format!("readaccesses.{group}")).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, "v1", "ReadAccess"),
        "readaccesses",
    );
    let parents: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "ReadAccess",
        "metadata": { "name": "auditors" },
        "spec": { "users": ["alice"], "resources": ["configmaps"] },
    }))
    .unwrap();
    parents
        .create(&PostParams::default(), &parent)
        .await
        .unwrap();
    let child = format!("read-{}-auditors", ns.name);
    let rbac = |kind: &str, plural: &str| -> Api<DynamicObject> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
            plural,
        );
        Api::all_with(client.clone(), &ar)
    };
    let (roles, bindings) = (
        rbac("ClusterRole", "clusterroles"),
        rbac("ClusterRoleBinding", "clusterrolebindings"),
    );
    crate::support::wait_exists(&roles, &child, "the ClusterRole").await;
    crate::support::wait_exists(&bindings, &child, "the ClusterRoleBinding").await;
    wait_for(
        &parents,
        "auditors",
        "status.role",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["role"] == child.as_str()),
    )
    .await;

    parents
        .delete("auditors", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    crate::support::wait_until_gone(&parents, "auditors", "the ReadAccess let go").await;
    assert!(roles.get_opt(&child).await.unwrap().is_none());
    assert!(bindings.get_opt(&child).await.unwrap().is_none());

    let (_, logs) = khai.terminate().await;
    let refused: Vec<&String> = logs.iter().filter(|l| denied(l)).collect();
    assert!(refused.is_empty(), "khai was refused: {refused:#?}");
}

/// `[operator] secrets = ["*"]`, the opt-in for objects that name their own credentials: the
/// script reads the Secret its object names, as the ServiceAccount the generated RBAC binds,
/// with no 403.
#[tokio::test]
async fn a_secret_named_by_the_object_is_read_with_the_star_opt_in_and_the_generated_rbac() {
    let group = "creds.rbac.khai.test";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "rbac-star").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.toml"),
        format!(
            r#"
[operator]
name = "creds"
secrets = ["*"]

[[crd]]
group = "{group}"
kind = "Client"
versions = ["v1"]
spec.secretName = {{ type = "string" }}
status.tokenLength = {{ type = "integer" }}

[[controller]]
for = "Client"
script = "client.rhai"
"#
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("client.rhai"),
        r#"
fn reconcile(obj, ctx) {
    let token = ctx.secret(obj.spec.secretName, "token");
    #{ status: #{ tokenLength: if token == () { -1 } else { token.len() } } }
}
"#,
    )
    .unwrap();
    let docs = generate_rbac(dir.path(), &ns.name);
    let secret_rules: Vec<&Value> = docs
        .iter()
        .flat_map(|d| d["rules"].as_array().into_iter().flatten())
        .filter(|r| r["resources"] == json!(["secrets"]))
        .collect();
    assert!(
        !secret_rules.is_empty()
            && secret_rules
                .iter()
                .all(|r| r.get("resourceNames").is_none()),
        "{secret_rules:#?}"
    );
    apply(&client, &ns.name, &docs).await;
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, "khai-creds").await;
    let mark = crate::support::audit::mark();
    let _khai = Khai::start_with_kubeconfig(dir.path(), &ns.name, &[], &kubeconfig);
    crate::support::wait_for_crd(&client, &format!("clients.{group}")).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": { "name": "my-creds" }, "stringData": { "token": "abcd" },
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let clients = crate::support::custom_api(&client, &ns.name, group, "Client", "clients");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Client",
        "metadata": { "name": "c" }, "spec": { "secretName": "my-creds" },
    }))
    .unwrap();
    clients.create(&PostParams::default(), &obj).await.unwrap();
    wait_for(
        &clients,
        "c",
        "the token read",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["tokenLength"] == 4),
    )
    .await;
    let user = format!("system:serviceaccount:{}:khai-creds", ns.name);
    let refused = crate::support::audit::forbidden(mark, &user);
    assert!(refused.is_empty(), "refused: {refused:#?}");
}
