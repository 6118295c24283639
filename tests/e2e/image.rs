//! khai's container image, built and run.
//!
//! [`image_runs_examples_hello_as_65532_with_the_config_read_only`] builds the runtime image with
//! `scripts/image` (buildah, vfs storage, chroot isolation, a `FROM scratch` base out of Debian's
//! libc6, libgcc-s1 and ca-certificates) from the debug binary this test run built, which keeps
//! the release build (minutes on 2 cores) out of the suite; the image is the same but for the
//! binary's optimisation. It then runs the image's entrypoint and command with
//! `buildah run --isolation chroot` as uid 65532, `examples/hello` mounted read-only at /config,
//! and checks that it reconciles a Hello against the test API server (chroot isolation shares
//! the host's network, so the loopback API server is reachable). Nothing in the image is
//! writable by 65532, so a run that works also shows khai needs no writable root filesystem.
//!
//! It needs root and buildah; `scripts/test` installs buildah and sets
//! `KHAI_TEST_REQUIRE_BUILDAH`, under which a missing buildah fails the test instead of skipping.
//!
//! [`dockerfile_copies_what_cargo_needs_to_load_the_workspace`] copies exactly what the
//! Dockerfile's build stage copies and loads the workspace from it with Cargo.

use crate::support::metrics::wait_for_metric;
use crate::support::{self, Khai, TestNamespace};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// buildah, when it can run here (on PATH, as root); `None` means skip, unless the suite
/// requires it.
fn buildah() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("buildah"))
        .find(|p| p.is_file());
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let why = match (&found, root) {
        (Some(_), true) => return found,
        (None, _) => "buildah is not on PATH",
        (Some(_), false) => "buildah's vfs storage with chroot isolation needs root",
    };
    assert!(
        std::env::var_os("KHAI_TEST_REQUIRE_BUILDAH").is_none(),
        "the image test is required (KHAI_TEST_REQUIRE_BUILDAH) but {why}"
    );
    eprintln!("image test skipped: {why} (scripts/test installs buildah)");
    None
}

fn buildah_ok(bin: &Path, args: &[&str]) -> String {
    let out = Command::new(bin)
        .arg("--storage-driver")
        .arg("vfs")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "buildah {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The test's image and working container, removed however the test ends.
struct Cleanup {
    buildah: PathBuf,
    image: String,
    container: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let run = |args: &[&str]| {
            let _ = Command::new(&self.buildah)
                .args(["--storage-driver", "vfs"])
                .args(args)
                .output();
        };
        if let Some(c) = &self.container {
            run(&["rm", c]);
        }
        run(&["rmi", &self.image]);
    }
}

/// What the Dockerfile's final stage says the image runs: USER, ENTRYPOINT, CMD, EXPOSE.
struct FinalStage {
    user: String,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    ports: Vec<String>,
}

fn dockerfile() -> String {
    std::fs::read_to_string(support::repo_root().join("Dockerfile")).unwrap()
}

fn final_stage() -> FinalStage {
    let text = dockerfile();
    let last = text.rsplit("\nFROM ").next().unwrap();
    let directive = |name: &str| {
        last.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in the Dockerfile's final stage"))
            .trim()
            .to_string()
    };
    let json = |name: &str| -> Vec<String> { serde_json::from_str(&directive(name)).unwrap() };
    FinalStage {
        user: directive("USER"),
        entrypoint: json("ENTRYPOINT"),
        cmd: json("CMD"),
        ports: directive("EXPOSE")
            .split_whitespace()
            .map(|p| format!("{p}/tcp"))
            .collect(),
    }
}

/// The kubeconfig of the test cluster, rewritten to read its CA from `/kube/ca.crt`, in a
/// directory every user can read (it is mounted read-only at /kube).
fn kube_dir(into: &Path) -> PathBuf {
    let kc = support::kubeconfig();
    let text = std::fs::read_to_string(kc).unwrap();
    let ca = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("certificate-authority: "))
        .expect("the test kubeconfig names its CA file")
        .to_string();
    let dir = into.join("kube");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(&ca, dir.join("ca.crt")).unwrap();
    std::fs::write(dir.join("kubeconfig"), text.replace(&ca, "/kube/ca.crt")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [
        (into.to_path_buf(), 0o755),
        (dir.clone(), 0o755),
        (dir.join("ca.crt"), 0o644),
        (dir.join("kubeconfig"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    dir
}

/// The pid and uid of the process whose command line holds every one of `parts`.
fn find_process(parts: &[&str]) -> Option<(u32, String)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().map(String::as_str) != Some("/usr/local/bin/khai")
            || !parts.iter().all(|p| args.iter().any(|a| a == p))
        {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
        let uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))?
            .split_whitespace()
            .nth(1)?
            .to_string();
        return Some((pid, uid));
    }
    None
}

#[tokio::test]
async fn image_runs_examples_hello_as_65532_with_the_config_read_only() {
    let Some(buildah) = buildah() else {
        return;
    };
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "image").await;
    let tag = format!("localhost/khai:e2e-{}", ns.name);
    let mut cleanup = Cleanup {
        buildah: buildah.clone(),
        image: tag.clone(),
        container: None,
    };
    let built = Command::new(support::repo_root().join("scripts/image"))
        .args(["--binary", env!("CARGO_BIN_EXE_khai"), "--tag", &tag])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "scripts/image failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&built.stdout).trim(), tag);

    // The image says what the Dockerfile's final stage says.
    let inspected: Value =
        serde_json::from_str(&buildah_ok(&buildah, &["inspect", "--type", "image", &tag])).unwrap();
    let config = &inspected["OCIv1"]["config"];
    let stage = final_stage();
    assert_eq!(config["User"], stage.user.as_str());
    assert_eq!(config["Entrypoint"], serde_json::json!(stage.entrypoint));
    assert_eq!(config["Cmd"], serde_json::json!(stage.cmd));
    let ports: Vec<String> = config["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(ports, stage.ports);

    // Its entrypoint and command, as uid 65532, examples/hello read-only at /config.
    let tmp = tempfile::tempdir().unwrap();
    let kube = kube_dir(tmp.path());
    let container = buildah_ok(&buildah, &["from", "--name", &ns.name, &tag])
        .trim()
        .to_string();
    cleanup.container = Some(container.clone());
    let hello = support::repo_root().join("examples/hello");
    let mut args: Vec<String> = [
        "--storage-driver",
        "vfs",
        "run",
        "--isolation",
        "chroot",
        "--user",
        &stage.user,
        "--volume",
        &format!("{}:/config:ro", hello.display()),
        "--volume",
        &format!("{}:/kube:ro", kube.display()),
        "--env",
        "KUBECONFIG=/kube/kubeconfig",
        &container,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(stage.entrypoint.iter().cloned());
    args.extend(stage.cmd.iter().cloned());
    // Many tests share the API server: this run watches only its namespace, and serves its
    // metrics on a free port (the image's 8080 may be taken on the host it shares).
    args.extend(["--namespace", &ns.name, "--metrics-bind", "127.0.0.1:0"].map(String::from));
    let khai = Khai::start_exact(&buildah, &args, &[]);
    // A controller's series exist from its start.
    let addr = khai.metrics_addr().await;
    let family = "controller_runtime_max_concurrent_reconciles";
    wait_for_metric(&addr, "the controller to start", family, &[], |_| true).await;
    let (pid, uid) = find_process(&["run", "/config", &ns.name])
        .expect("the khai process started by buildah run");
    assert_eq!(uid, "65532", "khai runs as 65532");

    let gvk = GroupVersionKind::gvk("examples.khai.dev", "v1", "Hello");
    let hellos: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(&gvk, "hellos"),
    );
    let sample: DynamicObject =
        serde_saphyr::from_str(&std::fs::read_to_string(hello.join("hello.yaml")).unwrap())
            .unwrap();
    let name = sample.metadata.name.clone().unwrap();
    hellos
        .create(&PostParams::default(), &sample)
        .await
        .unwrap();
    support::wait_for(
        &hellos,
        &name,
        "the Hello's status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["phase"] == "Ready"),
    )
    .await;
    let config_maps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    let child = support::wait_exists(
        &config_maps,
        &format!("{name}-hello"),
        "the Hello's ConfigMap",
    )
    .await;
    assert_eq!(
        child.data["data"]["message"],
        sample.data["spec"]["message"]
    );

    // SIGTERM to khai in the container (a pod's stop): it drains and exits 0.
    let sent = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let (code, log) = khai.wait().await;
    assert!(
        log.iter().any(|l| l.contains("khai stopped")),
        "khai did not stop cleanly: {log:?}"
    );
    assert_eq!(code, Some(0), "{log:?}");
    drop(cleanup);
    let images = buildah_ok(&buildah, &["images", "--format", "{{.Name}}:{{.Tag}}"]);
    assert!(
        !images.contains(&tag),
        "the test image was not removed: {images}"
    );
}

/// The Dockerfile copies the workspace members Cargo.toml names (benches/*) with it, or Cargo
/// cannot load the manifest in the build stage.
#[test]
fn dockerfile_copies_what_cargo_needs_to_load_the_workspace() {
    let text = dockerfile();
    let build_stage = text.split("\nFROM ").nth(1).expect("a build stage");
    let tmp = tempfile::tempdir().unwrap();
    let root = support::repo_root();
    let mut copied = 0;
    for line in build_stage.lines() {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        assert!(!rest.starts_with("--"), "unexpected COPY flags: {line}");
        let parts: Vec<&str> = rest.split_whitespace().collect();
        let (dest, sources) = parts.split_last().unwrap();
        for src in sources {
            let to = if dest.ends_with('/') || sources.len() > 1 {
                tmp.path().join(dest.trim_start_matches("./")).join(src)
            } else {
                tmp.path().join(dest.trim_start_matches("./"))
            };
            let status = Command::new("cp")
                .arg("-r")
                .arg(root.join(src))
                .arg(&to)
                .status()
                .unwrap();
            assert!(status.success(), "cp {src} {}", to.display());
            copied += 1;
        }
    }
    assert!(copied >= 2, "the build stage copies nothing: {build_stage}");
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--locked",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(tmp.path().join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "Cargo cannot load the workspace from what the Dockerfile copies:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"khai"), "{names:?}");
}
