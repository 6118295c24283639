//! `khai generate manifests` against a real kube-apiserver: for every example the output is
//! accepted by a server-side dry run, and the kustomize base in `config/` is what the generator
//! writes for `examples/hello` and builds with `kubectl kustomize`.

use crate::support::TestNamespace;
use std::path::Path;
use std::process::Command;

const EXAMPLES: &[&str] = &["cache", "greeting", "hello", "memcached", "nginx"];

fn generate(args: &[&str]) -> String {
    let args: Vec<&str> = ["generate", "manifests"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    crate::support::khai_stdout(&args)
}

#[tokio::test]
async fn every_example_is_accepted_by_a_server_side_dry_run() {
    let Some(kubectl) = crate::support::kubectl() else {
        eprintln!("skipped: kubectl is not on PATH or in /usr/bin");
        return;
    };
    let client = crate::support::client().await;
    // An existing namespace: a dry run creates nothing, so objects in a new one would be refused.
    let ns = TestNamespace::new(&client, "manifests").await;
    for example in EXAMPLES {
        let dir = crate::support::repo_root().join("examples").join(example);
        let yaml = generate(&[
            dir.to_str().unwrap(),
            "--namespace",
            &ns.name,
            "--replicas",
            "2",
        ]);
        for kind in [
            "kind: Deployment",
            "kind: ConfigMap",
            "kind: Service",
            "kind: ClusterRole",
        ] {
            assert!(yaml.contains(kind), "{example}: no {kind} in\n{yaml}");
        }
        let applied = crate::support::dry_run_apply(&kubectl, &yaml, example);
        assert!(
            applied.contains("deployment.apps/khai-") && applied.contains("(server dry run)"),
            "{example}: {applied}"
        );
    }
}

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "kustomization.yaml")
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn kustomize_base_is_what_the_generator_writes_for_hello() {
    let tmp = tempfile::tempdir().unwrap();
    let hello = crate::support::repo_root().join("examples/hello");
    generate(&[hello.to_str().unwrap(), "-o", tmp.path().to_str().unwrap()]);
    let base = crate::support::repo_root().join("config");
    assert_eq!(
        files(&base),
        files(tmp.path()),
        "config/ is stale; regenerate it with: khai generate manifests examples/hello -o config"
    );
    let kustomization = std::fs::read_to_string(base.join("kustomization.yaml")).unwrap();
    for (name, _) in files(&base) {
        assert!(
            kustomization.contains(&format!("- {name}")),
            "config/kustomization.yaml does not list {name}"
        );
    }
}

#[test]
fn kustomize_builds_the_base() {
    let Some(kubectl) = crate::support::kubectl() else {
        eprintln!(
            "skipped: kubectl is not on PATH or in /usr/bin, so `kubectl kustomize` cannot run"
        );
        return;
    };
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(crate::support::repo_root().join("config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize config/ failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = String::from_utf8(out.stdout).unwrap();
    for kind in [
        "kind: Deployment",
        "kind: CustomResourceDefinition",
        "kind: Role",
    ] {
        assert!(built.contains(kind), "no {kind} in the build:\n{built}");
    }
}
