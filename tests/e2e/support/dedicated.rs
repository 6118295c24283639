//! A cluster of its own for tests that break it (restart or freeze the API server or etcd), so
//! the tests sharing the main cluster never see those faults.
//!
//! Started on first use with `scripts/cluster start`, stopped by the same kind of watchdog as
//! the shared cluster when the test binary exits. Faults go through `scripts/cluster`'s
//! `restart-apiserver`, `restart-etcd`, `pause` and `compact`, which bring each server back on
//! its own port. Tests that inject faults must hold [`Dedicated::exclusive`] for as long as they
//! run, so one test's fault never lands in another's measurement.

use super::{Cluster, repo_root, start_cluster_in};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The dedicated cluster.
pub struct Dedicated {
    dir: PathBuf,
    audit_log: PathBuf,
    cluster: Cluster,
    turn: tokio::sync::Mutex<()>,
}

static DEDICATED: OnceLock<Dedicated> = OnceLock::new();

/// The dedicated cluster, started on first use.
pub fn dedicated() -> &'static Dedicated {
    DEDICATED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!(
            "khai-chaos-{}-{}",
            std::process::id(),
            super::nanos()
        ));
        let cluster = start_cluster_in(&dir);
        Dedicated {
            audit_log: dir.join("logs/audit.log"),
            dir,
            cluster,
            turn: tokio::sync::Mutex::const_new(()),
        }
    })
}

impl Dedicated {
    pub fn kubeconfig(&self) -> &Path {
        &self.cluster.kubeconfig
    }

    /// The API server's audit log.
    pub fn audit_log(&'static self) -> &'static Path {
        &self.audit_log
    }

    pub async fn client(&self) -> kube::Client {
        super::client_of(self.kubeconfig()).await
    }

    /// Waits for this test's turn on the cluster; faults are injected only while it is held.
    pub async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Stops kube-apiserver and starts it again with `flags` added; returns once it is ready,
    /// with how long it was away.
    pub async fn restart_apiserver(&self, flags: &[&str]) -> Duration {
        let mut args = vec!["restart-apiserver".to_string(), self.dir_arg()];
        args.extend(flags.iter().map(|f| f.to_string()));
        self.run(args).await
    }

    /// Stops etcd and starts it again; returns once the API server is ready again.
    pub async fn restart_etcd(&self) -> Duration {
        self.run(vec!["restart-etcd".into(), self.dir_arg()]).await
    }

    /// Freezes kube-apiserver (SIGSTOP) for `seconds`, then lets it go on (SIGCONT).
    pub async fn pause_apiserver(&self, seconds: u64) -> Duration {
        self.run(vec!["pause".into(), self.dir_arg(), seconds.to_string()])
            .await
    }

    /// Compacts etcd's history up to now: watches resuming from older versions get 410 Gone.
    pub async fn compact(&self) {
        self.run(vec!["compact".into(), self.dir_arg()]).await;
    }

    fn dir_arg(&self) -> String {
        self.dir.display().to_string()
    }

    async fn run(&self, args: Vec<String>) -> Duration {
        let started = Instant::now();
        let what = args.join(" ");
        let out = tokio::task::spawn_blocking(move || {
            Command::new(repo_root().join("scripts/cluster"))
                .args(&args)
                .output()
                .expect("run scripts/cluster")
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "scripts/cluster {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    }
}
