//! The user's path with the real Helm, end to end: the two install commands of README.md, read
//! from it (`khai generate values DIR > values.yaml`, `helm install NAME charts/khai -f values.yaml
//! -n NS --create-namespace`),
//! khai started exactly as the release's Deployment says, a script change through
//! `helm upgrade` live in under 2 s with no restart, a broken script reported while the last
//! good one keeps reconciling, and `helm uninstall` leaving nothing of the release.
//!
//! There is no kubelet, so the test plays it: it reads the Deployment the release made and runs
//! the `khai` binary with the container's args and env (fieldRefs resolved as the kubelet would)
//! and a ServiceAccount token from a TokenRequest for the pod's ServiceAccount. What it
//! substitutes is the pod network only: a pod has ports of its own and is reached through its
//! Service, so here khai listens on loopback ports it picks itself (`KHAI_METRICS_BIND`,
//! `KHAI_WEBHOOK_BIND` with port 0) and the API server calls the webhooks at that loopback
//! address (`KHAI_WEBHOOK_URL` with port 0, which khai fills with the port it bound) instead of
//! the Service's DNS name.

use crate::support::kubelet::{container_of, service_account_kubeconfig};
use crate::support::metrics::{http_get, metrics_until, wait_for_reloads};
use crate::support::{self, DEADLINE, Khai, TestNamespace, audit, helm};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How soon a `helm upgrade` must reach the running daemon's reconciles.
const RELOAD_BUDGET: Duration = Duration::from_secs(2);

/// A copy of examples/cache whose operator name and API group are this test's own, so its CRD,
/// webhook configurations and Lease touch no other test's. Returns the config directory.
fn cache_copy(into: &Path, operator: &str, group: &str) -> PathBuf {
    support::example_copy("cache", into, operator, group)
}

/// The commands of README.md's "Install on a cluster" section, each split into words.
fn readme_install_commands() -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("\n## Install on a cluster\n")
        .nth(1)
        .expect("README.md has an 'Install on a cluster' section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the install section has a sh block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// `khai generate values DIR > OUT`.
fn generate_values(dir: &Path, out: &Path) {
    let values = support::khai_stdout(&["generate", "values", dir.to_str().unwrap()]);
    std::fs::write(out, values).unwrap();
}

/// The release's one Deployment, found by Helm's instance label.
async fn release_deployment(client: &kube::Client, ns: &str, release: &str) -> Deployment {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let mut list = deployments.list(&lp).await.unwrap().items;
    assert_eq!(list.len(), 1, "the release makes one Deployment");
    list.remove(0)
}

/// The value of `khai_config_info`'s `version` label.
fn info_version(metrics: &str) -> Option<String> {
    let line = metrics
        .lines()
        .find(|l| l.starts_with("khai_config_info{"))?;
    let rest = line.split("version=\"").nth(1)?;
    Some(rest.split('"').next()?.to_string())
}

fn failures(metrics: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with("khai_config_reloads_total{result=\"failure\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Every object of the release, as `helm get manifest` lists them: (apiVersion, kind,
/// namespace, name).
fn release_objects(release: &str, ns: &str) -> Vec<(String, String, Option<String>, String)> {
    let manifest = helm::ok(&["get", "manifest", release, "-n", ns]);
    serde_saphyr::from_multiple::<Value>(&manifest)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .map(|d| {
            (
                d["apiVersion"].as_str().unwrap().to_string(),
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["namespace"].as_str().map(str::to_string),
                d["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn helm_install_upgrade_and_uninstall_run_khai_as_the_chart_says() {
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "helm").await;
    let tmp = tempfile::tempdir().unwrap();
    let suffix = ns.name.rsplit('-').next().unwrap().to_string();
    let operator = format!("cache{suffix}");
    let group = format!("h{suffix}.khai.dev");
    let dir = cache_copy(&tmp.path().join("v1"), &operator, &group);
    let chart = helm::chart();

    // The two commands of README.md, word for word but for four substitutions: the example
    // directory becomes this test's copy (its own API group and operator name), `values.yaml`
    // a file in a temporary directory, the chart's relative path an absolute one, and the
    // namespace this test's.
    let commands = readme_install_commands();
    let [generate, install] = <[Vec<String>; 2]>::try_from(commands)
        .unwrap_or_else(|c| panic!("README.md's install section has two commands: {c:?}"));
    let [khai, verb, what, example, redirect, values_name] = <[String; 6]>::try_from(generate)
        .unwrap_or_else(|g| panic!("khai generate values DIR > FILE, got {g:?}"));
    assert_eq!(
        [&*khai, &*verb, &*what, &*example, &*redirect],
        ["khai", "generate", "values", "examples/cache", ">"]
    );
    let values = tmp.path().join(&values_name);
    generate_values(&dir, &values);
    assert_eq!(install[..2], ["helm", "install"], "{install:?}");
    let release = install[2].as_str();
    let mut args = Vec::new();
    let mut words = install[1..].iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "charts/khai" => args.push(helm::arg(&chart).to_string()),
            "-f" => {
                assert_eq!(words.next(), Some(&values_name), "{install:?}");
                args.extend(["-f".to_string(), helm::arg(&values).to_string()]);
            }
            "-n" => {
                assert!(words.next().is_some(), "{install:?}");
                args.extend(["-n".to_string(), ns.name.clone()]);
            }
            _ => args.push(w.clone()),
        }
    }
    assert!(
        args.iter().any(|a| a == "--create-namespace"),
        "the README installs into a namespace of its own: {install:?}"
    );
    helm::ok(&args.iter().map(String::as_str).collect::<Vec<_>>());

    // khai, as the Deployment says.
    let deploy = release_deployment(&client, &ns.name, release).await;
    let deploy_name = deploy.metadata.name.clone().unwrap();
    assert_eq!(deploy_name, "cache-khai");
    let pod = format!("{deploy_name}-7d9f8-x2x4q");
    let c = container_of(&deploy, &pod, &ns.name);
    let config_map = format!("{deploy_name}-config");
    assert_eq!(
        c.args,
        [
            "run",
            "--config",
            &format!("configmap:{}/{config_map}", ns.name),
            "--log-format",
            "json",
            "--leader-elect"
        ],
        "the chart's args"
    );
    let kubeconfig =
        service_account_kubeconfig(&client, &ns.name, &c.service_account, tmp.path()).await;
    let mut env = c.env.clone();
    for (k, v) in &mut env {
        if k == "KHAI_WEBHOOK_URL" {
            assert_eq!(
                *v,
                format!("https://{deploy_name}.{}.svc:443", ns.name),
                "the release's Service"
            );
            // Port 0 stands for the port khai binds.
            *v = "https://127.0.0.1:0".into();
        }
    }
    env.extend([
        ("KUBECONFIG".into(), kubeconfig.display().to_string()),
        ("KHAI_METRICS_BIND".into(), "127.0.0.1:0".into()),
        ("KHAI_WEBHOOK_BIND".into(), "127.0.0.1:0".into()),
    ]);
    let khai_bin = PathBuf::from(env!("CARGO_BIN_EXE_khai"));
    let khai = Khai::start_exact(&khai_bin, &c.args, &env);
    let metrics = khai.metrics_addr().await;
    khai.wait_for_webhooks_installed(0, "webhook configurations to be installed")
        .await;
    support::wait_for_crd(&client, &format!("caches.{group}")).await;

    // A Cache reconciles.
    let gvk = GroupVersionKind::gvk(&group, "v1", "Cache");
    let caches: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "caches"),
    );
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("cache.yaml")).unwrap()).unwrap();
    caches
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::erase::<Deployment>(&()),
    );
    support::wait_exists(&deployments, "sessions", "the Cache's Deployment").await;
    support::wait_for(
        &caches,
        "sessions",
        "the Cache's status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Progressing"),
    )
    .await;
    let first = http_get(&metrics, "/metrics").await.1;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm_version = |cm: ConfigMap| cm.metadata.resource_version.unwrap();
    assert_eq!(
        info_version(&first),
        Some(cm_version(configmaps.get(&config_map).await.unwrap())),
        "khai_config_info shows the ConfigMap version running"
    );

    // `helm upgrade` with a changed script: live in under 2 s, no restart, no rollout.
    let v2 = cache_copy(&tmp.path().join("v2"), &operator, &group);
    let script = v2.join("scripts/cache.rhai");
    let text = std::fs::read_to_string(&script).unwrap();
    let changed = text.replace(
        "kind: \"Deployment\",\n        metadata: #{ name: name, labels: labels },",
        "kind: \"Deployment\",\n        metadata: #{ name: name, labels: labels, annotations: #{ \"khai.dev/script\": \"v2\" } },",
    );
    assert_ne!(changed, text, "the script change applies");
    std::fs::write(&script, changed).unwrap();
    let values_v2 = tmp.path().join("values-v2.yaml");
    generate_values(&v2, &values_v2);
    let generation = deploy.metadata.generation;
    let mark = audit::mark();
    let started = Instant::now();
    helm::ok(&[
        "upgrade",
        release,
        helm::arg(&chart),
        "-f",
        helm::arg(&values_v2),
        "-n",
        &ns.name,
    ]);
    let has_v2 = |o: Option<&DynamicObject>| {
        o.is_some_and(|o| {
            o.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.get("khai.dev/script").is_some_and(|v| v == "v2"))
        })
    };
    support::wait_for(
        &deployments,
        "sessions",
        "the v2 script's annotation",
        has_v2,
    )
    .await;
    let wall = started.elapsed();
    // Measured on the API server's clock: from Helm's write of the ConfigMap to khai's write of
    // the changed child.
    let in_ns = |e: &Value| e["objectRef"]["namespace"] == ns.name.as_str();
    let agent = |e: &Value, prefix: &str| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with(prefix))
    };
    let helm_write = audit::wait_for_entry(mark, "Helm's write of the ConfigMap", |e| {
        in_ns(e)
            && e["objectRef"]["resource"] == "configmaps"
            && e["objectRef"]["name"] == config_map.as_str()
            && agent(e, "Helm/")
    })
    .await;
    // khai's write that changed the child: its first to the Deployment after the upgrade (khai
    // writes nothing to a child that has not changed).
    let khai_write = audit::wait_for_entry(mark, "khai's write of the Deployment", |e| {
        in_ns(e)
            && e["objectRef"]["resource"] == "deployments"
            && e["objectRef"]["name"] == "sessions"
            && agent(e, "khai/")
    })
    .await;
    let took = audit::timestamp(&khai_write, "stageTimestamp")
        .duration_since(audit::timestamp(&helm_write, "requestReceivedTimestamp"));
    let took = Duration::try_from(took).unwrap();
    eprintln!(
        "ConfigMap written by helm upgrade -> child changed by khai: {took:?} \
         (helm upgrade started -> change seen by the test: {wall:?})"
    );
    assert!(
        took < RELOAD_BUDGET,
        "the changed script reached the existing Cache's children {took:?} after helm upgrade wrote the ConfigMap, over {RELOAD_BUDGET:?}"
    );
    let after = release_deployment(&client, &ns.name, release).await;
    assert_eq!(
        after.metadata.generation, generation,
        "helm upgrade changed the pod template, so the pods would roll"
    );
    wait_for_reloads(&metrics, "success", 1.0).await;
    let v2_version = cm_version(configmaps.get(&config_map).await.unwrap());
    let v2_metrics = metrics_until(&metrics, "khai_config_info of the upgrade", |m| {
        info_version(m).as_deref() == Some(v2_version.as_str())
    })
    .await;
    let failed_before = failures(&v2_metrics);

    // A broken script through `helm upgrade`: an Event on the ConfigMap, the metric, and the
    // last good script keeps reconciling.
    let broken = tmp.path().join("broken.rhai");
    std::fs::write(&broken, "fn reconcile(obj, ctx) {\n").unwrap();
    helm::ok(&[
        "upgrade",
        release,
        helm::arg(&chart),
        "-f",
        helm::arg(&values_v2),
        "--set-file",
        &format!("config.files.scripts/cache\\.rhai={}", broken.display()),
        "-n",
        &ns.name,
    ]);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let event = support::wait_for_any(events, "the ConfigReloadFailed Event", |e| {
        e.reason.as_deref() == Some("ConfigReloadFailed")
            && e.regarding
                .as_ref()
                .is_some_and(|r| r.name.as_deref() == Some(config_map.as_str()))
    })
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "configmap:{}/{config_map}/scripts/cache.rhai:",
            ns.name
        )),
        "{note}"
    );
    let broken_metrics = metrics_until(&metrics, "a failed reload counted", |m| {
        failures(m) > failed_before
    })
    .await;
    assert_eq!(
        info_version(&broken_metrics),
        Some(v2_version),
        "khai_config_info still shows the last good version"
    );
    let mut second = sample.clone();
    second.metadata.name = Some("second".into());
    caches
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    support::wait_for(
        &deployments,
        "second",
        "the last good script's child",
        has_v2,
    )
    .await;

    // `helm uninstall` leaves no object of the release.
    let objects = release_objects(release, &ns.name);
    assert!(objects.len() >= 8, "the release's objects: {objects:?}");
    helm::ok(&["uninstall", release, "-n", &ns.name]);
    for (api_version, kind, namespace, name) in &objects {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = match (caps.scope, namespace) {
            (kube::discovery::Scope::Namespaced, Some(n)) => {
                Api::namespaced_with(client.clone(), n, &ar)
            }
            (kube::discovery::Scope::Namespaced, None) => {
                Api::namespaced_with(client.clone(), &ns.name, &ar)
            }
            (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
        };
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "{kind} {name} of the release is still there after helm uninstall"
        );
    }
    let (code, log) = tokio::time::timeout(DEADLINE, khai.terminate())
        .await
        .expect("khai stops");
    let starts = log.iter().filter(|l| l.contains("khai starting")).count();
    assert_eq!(starts, 1, "khai started once: {code:?}");

    // What khai itself made outside the namespace (not objects of the release).
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = format!("khai-{operator}");
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(&name, &Default::default())
        .await;
    let _ = Api::<CustomResourceDefinition>::all(client.clone())
        .delete(&format!("caches.{group}"), &Default::default())
        .await;
}
