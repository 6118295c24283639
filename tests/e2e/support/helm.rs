//! The real Helm (v3.17.1), installed by `scripts/helm` into the cache on first use.
//!
//! Helm keeps its own state (repositories, plugins, caches) under `HELM_*_HOME`; every run here
//! points those at one temporary directory of this test binary, so tests never read or write
//! the user's Helm setup. Releases live in the cluster, as Secrets in the release namespace.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
}

static HELM: OnceLock<Helm> = OnceLock::new();

fn helm() -> &'static Helm {
    HELM.get_or_init(|| {
        let out = Command::new(super::repo_root().join("scripts/helm"))
            .stderr(Stdio::inherit())
            .output()
            .expect("failed to run scripts/helm");
        assert!(
            out.status.success(),
            "scripts/helm could not install Helm; see its output above"
        );
        let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        Helm {
            bin,
            home: tempfile::tempdir().unwrap(),
        }
    })
}

/// The chart in this repository.
pub fn chart() -> PathBuf {
    super::repo_root().join("charts/khai")
}

/// Runs `helm ARGS` against the test cluster; `Err` holds its standard error.
pub fn run(args: &[&str]) -> Result<String, String> {
    let h = helm();
    let home = h.home.path();
    let out = Command::new(&h.bin)
        .args(args)
        .env("KUBECONFIG", super::kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .expect("failed to run helm");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Runs `helm ARGS`, which must succeed; returns its standard output.
pub fn ok(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("helm {args:?} failed:\n{e}"))
}

/// `helm template` with `args` after the release name and chart.
pub fn template(release: &str, args: &[&str]) -> String {
    let chart = chart();
    let mut all = vec!["template", release, chart.to_str().unwrap()];
    all.extend(args);
    ok(&all)
}

/// A path as a `&str` for helm's arguments.
pub fn arg(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}
