//! End to end: khai holds an object with its finalizer only while the object is its own. Every
//! way an object stops being khai's (deleted; filtered out by `selector`, `annotations`, `when`
//! or a delete handler's filters) cleans it up once and releases the finalizer, and never
//! deletes an object that is only filtered out. `khai release` strips what is left.

use crate::support::kubelet::{container_of, service_account_kubeconfig};
use crate::support::{Khai, TestNamespace, configmaps, custom_api, helm, wait_for, wait_for_crd};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A controller of Widgets filtered by all three of its filters, whose `finalize` records each
/// call as a ConfigMap (`fin-<name>`, then `fin-<name>-again` for any further call), and a
/// delete handler of Gadgets filtered by a label, which records its calls the same way.
fn operator(group: &str) -> tempfile::TempDir {
    operator_named(group, "letgo")
}

fn operator_named(group: &str, name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[operator]
name = "{name}"
uses = [{{ kind = "v1/ConfigMap", verbs = ["create"] }}]

[[crd]]
group = "{group}"
kind = "Widget"
versions = ["v1"]
spec.message = {{ type = "string", default = "on" }}
status.phase = {{ type = "string" }}

[[crd]]
group = "{group}"
kind = "Gadget"
versions = ["v1"]
spec.message = {{ type = "string", default = "on" }}

[[controller]]
for = "Widget"
script = "widget.rhai"
selector = "keep=yes"
annotations = ["example.com/managed"]
when = "wanted"

[[handler]]
for = "Gadget"
on = "delete"
labels = {{ keep = "yes" }}
script = "gadget.rhai"
function = "deleting"
"#
    );
    let record = r#"
fn cm(obj, suffix) {
    #{ apiVersion: "v1", kind: "ConfigMap",
       metadata: #{ name: `fin-${obj.metadata.name}${suffix}`, namespace: obj.metadata.namespace } }
}
fn record(obj) {
    try { k8s::create(cm(obj, "")); } catch (e) { k8s::create(cm(obj, "-again")); }
    ()
}
"#;
    let widget = format!(
        r#"{record}
fn wanted(obj) {{ obj.spec.message != "off" }}
fn reconcile(obj, ctx) {{ #{{ status: #{{ phase: "Ready" }} }} }}
fn finalize(obj, ctx) {{ record(obj); true }}
"#
    );
    let gadget = format!("{record}\nfn deleting(obj, ctx, change) {{ record(obj); }}\n");
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("widget.rhai"), widget).unwrap();
    std::fs::write(dir.path().join("gadget.rhai"), gadget).unwrap();
    dir
}

const FINALIZER: &str = "khai.dev/letgo";

fn has_finalizer(o: &DynamicObject) -> bool {
    o.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// One way an object stops being khai's, and the change that does it.
struct Way {
    name: &'static str,
    kind: &'static str,
    change: Option<Value>,
}

#[tokio::test]
async fn every_way_an_object_stops_being_khais_cleans_up_once_and_releases_the_finalizer() {
    let group = "letgo.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "letgo").await;
    let op = operator(group);
    let khai = Khai::start(op.path(), &ns.name, &[]);
    let ways = [
        Way {
            name: "deleted",
            kind: "Widget",
            change: None,
        },
        Way {
            name: "selector",
            kind: "Widget",
            change: Some(json!({ "metadata": { "labels": { "keep": "no" } } })),
        },
        Way {
            name: "annotations",
            kind: "Widget",
            change: Some(json!({ "metadata": { "annotations": { "example.com/managed": null } } })),
        },
        Way {
            name: "when",
            kind: "Widget",
            change: Some(json!({ "spec": { "message": "off" } })),
        },
        Way {
            name: "gadget-deleted",
            kind: "Gadget",
            change: None,
        },
        Way {
            name: "gadget-handler-filter",
            kind: "Gadget",
            change: Some(json!({ "metadata": { "labels": { "keep": "no" } } })),
        },
    ];
    let api = |kind: &str| {
        let plural = format!("{}s", kind.to_lowercase());
        custom_api(&client, &ns.name, group, kind, &plural)
    };
    wait_for_crd(&client, &format!("widgets.{group}")).await;
    wait_for_crd(&client, &format!("gadgets.{group}")).await;
    for w in &ways {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": w.kind,
            "metadata": { "name": w.name, "labels": { "keep": "yes" },
                          "annotations": { "example.com/managed": "" } },
        }))
        .unwrap();
        api(w.kind)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    for w in &ways {
        wait_for(
            &api(w.kind),
            w.name,
            "khai's finalizer",
            |o: Option<&DynamicObject>| o.is_some_and(has_finalizer),
        )
        .await;
    }
    for w in &ways {
        match &w.change {
            None => api(w.kind)
                .delete(w.name, &DeleteParams::default())
                .await
                .map(|_| ())
                .unwrap(),
            Some(patch) => api(w.kind)
                .patch(w.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| ())
                .unwrap(),
        }
    }
    let cms = configmaps(&client, &ns.name);
    for w in &ways {
        let kind_api = api(w.kind);
        if w.change.is_none() {
            crate::support::wait_until_gone(&kind_api, w.name, "the deleted object").await;
        } else {
            let o = wait_for(
                &kind_api,
                w.name,
                "the finalizer released",
                |o: Option<&DynamicObject>| o.is_some_and(|o| !has_finalizer(o)),
            )
            .await;
            assert!(
                o.metadata.deletion_timestamp.is_none(),
                "{}: filtering an object out never deletes it",
                w.name
            );
        }
    }
    // The handler's filter no longer selects the object: no delete handler is for it, so none
    // runs; every other way runs the cleanup once.
    for w in &ways {
        let ran = cms
            .get_opt(&format!("fin-{}", w.name))
            .await
            .unwrap()
            .is_some();
        let expected = w.name != "gadget-handler-filter";
        assert_eq!(ran, expected, "{}: cleanup ran", w.name);
    }
    // A reconcile of each filtered-out object after its release (a label change triggers one)
    // must not clean it up again.
    for w in ways.iter().filter(|w| w.change.is_some()) {
        api(w.kind)
            .patch(
                w.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { "poked": "1" } } })),
            )
            .await
            .unwrap();
    }
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    for w in &ways {
        assert!(
            cms.get_opt(&format!("fin-{}-again", w.name))
                .await
                .unwrap()
                .is_none(),
            "{}: cleanup ran more than once",
            w.name
        );
        if let Some(o) = api(w.kind).get_opt(w.name).await.unwrap() {
            assert!(!has_finalizer(&o), "{}: the finalizer came back", w.name);
        }
    }
}

#[tokio::test]
async fn khai_release_strips_the_operators_finalizers_and_annotations_and_lets_stuck_objects_go() {
    let group = "release.khai.dev";
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "release").await;
    let op = operator(group);
    wait_for_crd_or_install(&op, &ns.name).await;
    let widgets = custom_api(&client, &ns.name, group, "Widget", "widgets");
    let stuck = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": { "name": name,
                "finalizers": [FINALIZER, "ops.khai.dev/letgo", "other.io/keep"],
                "annotations": { "letgo.khai.dev/last-handled": "{}", "note": "kept" } },
        }))
        .unwrap()
    };
    for name in ["a", "b"] {
        widgets
            .create(&PostParams::default(), &stuck(name))
            .await
            .unwrap();
    }
    widgets.delete("a", &DeleteParams::default()).await.unwrap();
    let dir = op.path().to_str().unwrap();
    let release = || {
        crate::support::khai_stdout_on_cluster(&[
            "release",
            "--config",
            dir,
            "--namespace",
            &ns.name,
        ])
    };
    let first = release();
    assert!(
        first.contains(&format!("released Widget {}/a", ns.name)),
        "{first}"
    );
    assert!(first.contains("released 2 object(s)"), "{first}");
    let second = release();
    assert!(
        second.starts_with("nothing to release"),
        "idempotent: {second}"
    );
    let b = widgets.get("b").await.unwrap();
    assert_eq!(
        b.metadata.finalizers,
        Some(vec!["other.io/keep".to_string()])
    );
    assert_eq!(
        b.metadata
            .annotations
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        [("note".to_string(), "kept".to_string())]
    );
    // `a` waits only for the other finalizer now; once it goes, so does `a`.
    widgets
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await
        .unwrap();
    crate::support::wait_until_gone(&widgets, "a", "the Widget stuck in deletion").await;
}

/// Installs the operator's CRDs by running khai once until they are established.
async fn wait_for_crd_or_install(op: &tempfile::TempDir, ns: &str) {
    let client = crate::support::client().await;
    let khai = Khai::start(op.path(), ns, &[]);
    wait_for_crd(&client, "widgets.release.khai.dev").await;
    wait_for_crd(&client, "gadgets.release.khai.dev").await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn the_charts_pre_delete_hook_runs_khai_release_as_khais_service_account() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "hook").await;
    let suffix = ns.name.rsplit('-').next().unwrap().to_string();
    let (name, group) = (format!("hook{suffix}"), format!("hook{suffix}.khai.dev"));
    let finalizer = format!("khai.dev/{name}");
    let op = operator_named(&group, &name);
    let tmp = tempfile::tempdir().unwrap();
    let values = tmp.path().join("values.yaml");
    let generated =
        crate::support::khai_stdout(&["generate", "values", op.path().to_str().unwrap()]);
    std::fs::write(&values, generated).unwrap();
    let chart = helm::chart();
    let set = [
        "-f",
        helm::arg(&values),
        "-n",
        &ns.name,
        "--set",
        "releaseHook.enabled=true",
    ];
    let mut install = vec!["install", "hook", helm::arg(&chart)];
    install.extend(set);
    helm::ok(&install);

    // The hook as Helm renders it, accepted by the API server (a server-side dry run).
    let mut show = set.to_vec();
    show.extend(["--show-only", "templates/release-hook.yaml"]);
    let job: Job = serde_saphyr::from_str(&helm::template("hook", &show)).unwrap();
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations["helm.sh/hook"], "pre-delete");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    jobs.create(&dry, &job)
        .await
        .expect("the hook Job passes a server-side dry run");

    // khai, as the release's Deployment says, holds a Widget with its finalizer.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deploy = deployments.get("hook-khai").await.unwrap();
    let c = container_of(&deploy, "hook-khai-5d8f-x1", &ns.name);
    let kubeconfig =
        service_account_kubeconfig(&client, &ns.name, &c.service_account, tmp.path()).await;
    let mut env = c.env.clone();
    env.extend([
        ("KUBECONFIG".into(), kubeconfig.display().to_string()),
        ("KHAI_METRICS_BIND".into(), "127.0.0.1:0".into()),
    ]);
    let khai = Khai::start_exact(&crate::support::khai_bin(), &c.args, &env);
    wait_for_crd(&client, &format!("widgets.{group}")).await;
    let widgets = custom_api(&client, &ns.name, &group, "Widget", "widgets");
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": "w", "labels": { "keep": "yes" },
                      "annotations": { "example.com/managed": "" } },
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &w).await.unwrap();
    let held = |o: Option<&DynamicObject>| o.is_some_and(|o| o.finalizers().contains(&finalizer));
    wait_for(&widgets, "w", "khai's finalizer", held).await;

    // The hook's pod, as the kubelet would run it: the Job's container with a token of its
    // ServiceAccount, which is khai's own.
    let pod = Deployment {
        spec: Some(DeploymentSpec {
            template: job.spec.clone().unwrap().template,
            ..Default::default()
        }),
        ..Default::default()
    };
    let hook = container_of(&pod, "hook-khai-release-x1", &ns.name);
    assert_eq!(hook.service_account, c.service_account);
    let out = std::process::Command::new(crate::support::khai_bin())
        .args(&hook.args)
        .envs(hook.env.iter().cloned())
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("released Widget {}/w", ns.name)),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns.name);
    let lease = leases.get(&format!("khai-{name}")).await.unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap_or_default();
    assert!(
        holder.starts_with("khai-release-"),
        "the hook holds the Lease: {holder}"
    );

    // The running khai has stopped leading: nothing puts the finalizer back, and deleting the
    // Widget is not held up.
    widgets.delete("w", &DeleteParams::default()).await.unwrap();
    crate::support::wait_until_gone(&widgets, "w", "the released Widget").await;
    khai.terminate().await;
    helm::ok(&["uninstall", "hook", "-n", &ns.name, "--no-hooks"]);
}
