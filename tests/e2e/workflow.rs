//! The author's workflow with the real `khai` binary: `khai new` scaffolds an operator, `khai
//! check` accepts it, `khai test` runs its offline cases, and the scaffolded operator reconciles
//! its sample object on a real kube-apiserver. Only the last test needs a cluster.

use crate::support::{Khai, TestNamespace, wait_for};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::path::Path;
use std::process::{Command, Output};

/// Runs khai in `dir` with no cluster configured.
fn khai_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(args)
        .current_dir(dir)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("RUST_LOG")
        .output()
        .expect("run khai")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts success, showing everything khai printed otherwise.
fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

/// A temp dir holding `khai new operator demo`.
fn scaffolded() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(&khai_in(dir.path(), &["new", "operator", "demo"]));
    dir
}

#[test]
fn new_and_test_commands_have_help() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in [
        vec!["test", "--help"],
        vec!["new", "--help"],
        vec!["new", "operator", "--help"],
        vec!["new", "controller", "--help"],
    ] {
        let out = ok(&khai_in(dir.path(), &cmd));
        assert!(out.contains("Usage: khai"), "{cmd:?}: {out}");
    }
}

#[test]
fn new_operator_passes_check_and_test_out_of_the_box() {
    let dir = scaffolded();
    let demo = dir.path().join("demo");
    for f in [
        "operator.toml",
        "README.md",
        "demo.yaml",
        "scripts/demo.rhai",
        "tests/demo_new.yaml",
        "tests/demo_ready.yaml",
    ] {
        assert!(demo.join(f).is_file(), "{f} was not generated");
    }
    assert_eq!(
        ok(&khai_in(dir.path(), &["check", "demo"])).trim(),
        "demo/operator.toml: ok (1 CRD, 1 controller)"
    );
    assert_eq!(
        ok(&khai_in(dir.path(), &["test", "demo"])),
        "ok    demo/tests/demo_new.yaml\nok    demo/tests/demo_ready.yaml\n2 passed, 0 failed\n"
    );
}

#[test]
fn new_operator_takes_kind_and_group_flags() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "new",
        "operator",
        "shop",
        "--kind",
        "Store",
        "--group",
        "retail.acme.io",
    ];
    ok(&khai_in(dir.path(), &args));
    let toml = std::fs::read_to_string(dir.path().join("shop/operator.toml")).unwrap();
    assert!(
        toml.contains("group = \"retail.acme.io\"\nkind = \"Store\""),
        "{toml}"
    );
    assert!(dir.path().join("shop/scripts/store.rhai").is_file());
    ok(&khai_in(dir.path(), &["test", "shop"]));
}

#[test]
fn new_operator_refuses_an_existing_folder_and_a_bad_name() {
    let dir = scaffolded();
    let again = khai_in(dir.path(), &["new", "operator", "demo"]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again).trim(),
        "error: demo: already exists; choose another name"
    );
    let bad = khai_in(dir.path(), &["new", "operator", "Demo App"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("operator name \"Demo App\" must be"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn a_failing_case_prints_the_field_path_expected_and_got_and_exits_1() {
    let dir = scaffolded();
    let case = dir.path().join("demo/tests/demo_new.yaml");
    let text = std::fs::read_to_string(&case).unwrap();
    std::fs::write(
        &case,
        text.replace("message: Hello from demo", "message: hi"),
    )
    .unwrap();
    let out = khai_in(dir.path(), &["test", "demo"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        "FAIL  demo/tests/demo_new.yaml\n      children[0].data.message: expected \"hi\", got \"Hello from demo\"\nok    demo/tests/demo_ready.yaml\n1 passed, 1 failed\n"
    );
}

#[test]
fn a_broken_case_file_fails_with_its_line() {
    let dir = scaffolded();
    let case = dir.path().join("demo/tests/typo.yaml");
    std::fs::write(
        &case,
        "object: { apiVersion: demo.example.com/v1, kind: Demo, metadata: { name: x }, spec: {} }\nexpect:\n  stauts: {}\n",
    )
    .unwrap();
    let out = khai_in(dir.path(), &["test", "demo"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains(
            "FAIL  demo/tests/typo.yaml\n      demo/tests/typo.yaml:3:3: unknown field `stauts`"
        ),
        "{text}"
    );
    assert!(text.ends_with("2 passed, 1 failed\n"), "{text}");
}

/// Every example directory: `examples/<name>`, and each port of Kopf's examples in
/// `examples/kopf/<name>` (which has no operator of its own).
fn example_dirs() -> Vec<std::path::PathBuf> {
    let root = crate::support::repo_root();
    let list = |dir: std::path::PathBuf| {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        out.sort();
        out
    };
    let mut out = Vec::new();
    for dir in list(root.join("examples")) {
        if dir.file_name().is_some_and(|n| n == "kopf") {
            out.extend(list(dir));
        } else {
            out.push(dir);
        }
    }
    out
}

#[test]
fn every_example_passes_its_own_tests() {
    let root = crate::support::repo_root();
    let mut seen = 0;
    for dir in example_dirs() {
        let check = khai_in(&root, &["check", dir.to_str().unwrap()]);
        ok(&check);
        let out = khai_in(&root, &["test", dir.to_str().unwrap()]);
        let text = ok(&out);
        let summary = text.lines().last().unwrap_or_default();
        let passed: usize = summary.split(' ').next().unwrap().parse().unwrap();
        assert!(
            passed >= 2 && summary.ends_with(" passed, 0 failed"),
            "{}: {text}",
            dir.display()
        );
        seen += 1;
    }
    assert!(seen >= 6, "expected every example (six), found {seen}");
    let kopf = example_dirs()
        .iter()
        .filter(|d| d.parent().is_some_and(|p| p.ends_with("examples/kopf")))
        .count();
    assert!(
        kopf >= 13,
        "expected the ports of Kopf's examples (thirteen), found {kopf}"
    );
}

#[test]
fn new_controller_adds_a_second_controller_that_check_and_test_accept() {
    let dir = scaffolded();
    let toml = dir.path().join("demo/operator.toml");
    let before = format!(
        "# my own notes\n{}",
        std::fs::read_to_string(&toml).unwrap()
    );
    std::fs::write(&toml, &before).unwrap();
    let args = [
        "new",
        "controller",
        "--kind",
        "Backup",
        "--group",
        "ops.example.com",
        "--version",
        "v1beta1",
        "demo",
    ];
    ok(&khai_in(dir.path(), &args));
    let after = std::fs::read_to_string(&toml).unwrap();
    assert!(
        after.starts_with(&before),
        "the author's text must be kept:\n{after}"
    );
    assert!(
        after.contains("group = \"ops.example.com\"\nkind = \"Backup\"\nversions = [\"v1beta1\"]")
    );
    assert_eq!(
        ok(&khai_in(dir.path(), &["check", "demo"])).trim(),
        "demo/operator.toml: ok (2 CRDs, 2 controllers)"
    );
    assert!(ok(&khai_in(dir.path(), &["test", "demo"])).ends_with("4 passed, 0 failed\n"));
    let again = khai_in(dir.path(), &args);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        stderr(&again).trim(),
        "error: demo/operator.toml: kind \"Backup\" is already declared"
    );
}

#[tokio::test]
async fn scaffolded_operator_reconciles_its_sample_on_a_real_cluster() {
    let dir = scaffolded();
    let demo = dir.path().join("demo");
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "workflow").await;
    let _khai = Khai::start(&demo, &ns.name, &[]);
    crate::support::wait_for_crd(&client, "demos.demo.example.com").await;
    let gvk = GroupVersionKind::gvk("demo.example.com", "v1", "Demo");
    let demos: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "demos"),
    );
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(demo.join("demo.yaml")).unwrap()).unwrap();
    demos.create(&PostParams::default(), &sample).await.unwrap();

    let cm_gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
    let config_maps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&cm_gvk, "configmaps"),
    );
    let cm =
        crate::support::wait_exists(&config_maps, "demo-sample-demo", "the sample's ConfigMap")
            .await;
    assert_eq!(cm.data["data"]["message"], "Hello from the sample Demo");
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Demo", "demo-sample")
    );
    let d = wait_for(
        &demos,
        "demo-sample",
        "status.phase Ready once the ConfigMap is in khai's cache",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
    )
    .await;
    assert_eq!(d.data["status"]["configMap"], "demo-sample-demo");
}

/// `khai new` wrote webhook stubs as `validate(obj, ctx)` where the contract is
/// `validate(req)`. `khai new operator --webhooks` writes a webhook script with the contract's
/// signatures and cases for it; `khai check` and `khai test` accept them as generated, and the
/// webhooks deny and mutate through a real API server.
#[tokio::test]
async fn new_operator_with_webhooks_passes_check_and_test_and_its_webhooks_answer_the_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let group = "scaffold.workflow.khai.dev";
    ok(&khai_in(
        dir.path(),
        &[
            "new",
            "operator",
            "hooks",
            "--kind",
            "Hook",
            "--group",
            group,
            "--webhooks",
        ],
    ));
    let hooks = dir.path().join("hooks");
    let script = std::fs::read_to_string(hooks.join("scripts/hook_webhooks.rhai")).unwrap();
    assert!(script.contains("fn validate(req) {") && script.contains("fn mutate(req) {"));
    assert_eq!(
        ok(&khai_in(dir.path(), &["check", "hooks"])).trim(),
        "hooks/operator.toml: ok (1 CRD, 1 controller)"
    );
    assert_eq!(
        ok(&khai_in(dir.path(), &["test", "hooks"])),
        "ok    hooks/tests/hook_mutate.yaml\nok    hooks/tests/hook_new.yaml\n\
         ok    hooks/tests/hook_ready.yaml\nok    hooks/tests/hook_validate.yaml\n\
         4 passed, 0 failed\n"
    );

    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "workflow-hooks").await;
    let (_khai, _) = crate::webhooks::start(&hooks, &ns.name, true).await;
    crate::support::wait_for_crd(&client, &format!("hooks.{group}")).await;
    let gvk = GroupVersionKind::gvk(group, "v1", "Hook");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &ApiResource::from_gvk(&gvk));
    let hook = |name: &str, message: &str| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": format!("{group}/v1"), "kind": "Hook",
            "metadata": { "name": name }, "spec": { "message": message },
        }))
        .unwrap()
    };
    let long = "x".repeat(65);
    let denied = match api
        .create(&PostParams::default(), &hook("long", &long))
        .await
    {
        Err(kube::Error::Api(e)) => e.message,
        other => panic!("expected the validate webhook to deny, got {other:?}"),
    };
    assert_eq!(
        denied,
        "admission webhook \"validate-hook.hooks.khai.dev\" denied the request: spec.message \
         must be at most 64 characters, got 65"
    );
    let stored = api
        .create(&PostParams::default(), &hook("hi", "hi"))
        .await
        .unwrap();
    let annotations = stored.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations[&format!("{group}/last-updated-by")], "admin");
}
