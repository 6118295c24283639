//! Shared harness for tests against a real kube-apiserver and etcd.
//!
//! Each test binary starts one cluster with `scripts/cluster start` the first time a test asks
//! for it (or uses `KHAI_TEST_KUBECONFIG` when set, e.g. a kind cluster), and a watchdog process
//! stops it when the test binary exits, however it exits. Every test gets its own namespace.
//! `KHAI_TEST_K8S_VERSION` picks the kube-apiserver version (`scripts/cluster start --version`:
//! `current`, the default, or `v1.20.2`, the oldest supported; docs/kubernetes-versions.md).
//! Waiting is always on a condition observed through a watch, with a deadline.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod audit;
pub mod chaos;
pub mod dedicated;
pub mod gadget;
pub mod helm;
pub mod kubelet;
pub mod metrics;
pub mod shards;
mod widget;

pub use widget::{create_widget, widget_crd, widgets};

use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{Condition, await_condition};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The flags that make khai log JSON, for tests that wait on fields of its log lines
/// ([`Khai::wait_for_json_log`]).
pub const JSON_LOG: &[&str] = &["--log-format", "json"];

/// How long a test waits for the operator to act before failing.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A turn among the tests that run several khai processes against a clock (the sharding tests,
/// which time a dead shard's move against its Lease, and the chaos scenarios): held for the
/// whole test, so two of them never share the two cores, while the other tests go on beside
/// them. A test holding it may also hold [`dedicated::Dedicated::exclusive`], taken after it.
pub async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    HEAVY
        .get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Cluster {
    kubeconfig: PathBuf,
    /// Write end of the watchdog's stdin; closed by the OS when this process exits.
    _watchdog: Option<Mutex<ChildStdin>>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

/// The kubeconfig of this test binary's cluster, starting the cluster on first use.
pub fn kubeconfig() -> &'static Path {
    &CLUSTER.get_or_init(start_cluster).kubeconfig
}

fn start_cluster() -> Cluster {
    if let Some(kc) = std::env::var_os("KHAI_TEST_KUBECONFIG") {
        return Cluster {
            kubeconfig: PathBuf::from(kc),
            _watchdog: None,
        };
    }
    start_cluster_in(&std::env::temp_dir().join(format!(
        "khai-test-{}-{}",
        std::process::id(),
        nanos()
    )))
}

/// The kube-apiserver version the tests run against: `KHAI_TEST_K8S_VERSION`, else the current
/// one (`scripts/cluster versions`).
pub fn k8s_version() -> String {
    std::env::var("KHAI_TEST_K8S_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "current".to_string())
}

/// Starts a cluster in `dir` with `scripts/cluster start --version` [`k8s_version`], and a
/// watchdog that stops it when this process exits.
fn start_cluster_in(dir: &Path) -> Cluster {
    let script = repo_root().join("scripts/cluster");
    let out = Command::new(&script)
        .arg("start")
        .arg("--version")
        .arg(k8s_version())
        .arg(dir)
        .stderr(Stdio::inherit())
        .output()
        .expect("failed to run scripts/cluster start");
    assert!(
        out.status.success(),
        "scripts/cluster start failed; see its output above"
    );
    // The watchdog blocks reading stdin; when this process exits (pass, fail or panic) the pipe
    // closes and it stops exactly the cluster started here. It must outlive this process, so it
    // is deliberately never waited on.
    #[allow(clippy::zombie_processes)]
    let mut watchdog = Command::new("sh")
        .arg("-c")
        .arg("cat >/dev/null; exec \"$0\" stop \"$1\" >/dev/null 2>&1")
        .arg(&script)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("failed to start the cluster watchdog");
    let stdin = watchdog.stdin.take().expect("watchdog stdin");
    Cluster {
        kubeconfig: dir.join("kubeconfig"),
        _watchdog: Some(Mutex::new(stdin)),
    }
}

use std::os::unix::process::CommandExt;

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Nanoseconds of the wall clock, for unique names and seeds.
pub fn nanos_u64() -> u64 {
    (nanos() % u128::from(u64::MAX)) as u64
}

/// A client for the test cluster; made per test, since a client belongs to one runtime.
pub async fn client() -> kube::Client {
    client_of(kubeconfig()).await
}

/// A client for the cluster of `kubeconfig`.
pub async fn client_of(kubeconfig: &Path) -> kube::Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(config).expect("client")
}

/// A namespace of the test's own, deleted when dropped (best effort: with no
/// controller-manager the namespace stays Terminating, which harms nothing).
pub struct TestNamespace {
    pub name: String,
}

impl TestNamespace {
    pub async fn new(client: &kube::Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{:x}", nanos() % 0xffff_ffff);
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).unwrap();
        Api::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        Self { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client().await);
                api.delete(&name, &Default::default()).await.ok()
            })
        })
        .join();
    }
}

/// Waits, through a watch, until the object satisfies `cond`; panics naming `what` otherwise.
pub async fn wait_for<C>(api: &Api<DynamicObject>, name: &str, what: &str, cond: C) -> DynamicObject
where
    C: Condition<DynamicObject>,
{
    let cond = move |o: Option<&DynamicObject>| cond.matches_object(o);
    let waited = tokio::time::timeout(DEADLINE, await_condition(api.clone(), name, cond)).await;
    match waited {
        Ok(Ok(Some(obj))) => obj,
        Ok(Ok(None)) => {
            panic!("{what}: {name} does not exist (use wait_until_gone to wait for deletion)")
        }
        Ok(Err(e)) => panic!("{what}: watch on {name} failed: {e}"),
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what} ({name})"),
    }
}

/// Waits, through a watch, until the object `name` no longer exists.
pub async fn wait_until_gone(api: &Api<DynamicObject>, name: &str, what: &str) {
    let gone = await_condition(api.clone(), name, |o: Option<&DynamicObject>| o.is_none());
    match tokio::time::timeout(DEADLINE, gone).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("{what}: watch on {name} failed: {e}"),
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what} ({name})"),
    }
}

/// The `khai` binary the tests run: this build's, or `KHAI_TEST_BIN` (to show that a new test
/// fails on an older build, as a regression test must).
pub fn khai_bin() -> PathBuf {
    std::env::var_os("KHAI_TEST_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_khai")), PathBuf::from)
}

/// The `khai` binary running as a real daemon, with its stderr collected.
pub struct Khai {
    child: Child,
    log: std::sync::Arc<(Mutex<Vec<String>>, std::sync::Condvar)>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Khai {
    /// Starts `khai run --config <config> --namespace <ns> <extra...>` against the test cluster.
    pub fn start(config: &Path, namespace: &str, extra: &[&str]) -> Self {
        Self::start_with_kubeconfig(config, namespace, extra, kubeconfig())
    }

    /// Like [`Khai::start`], connecting with `kubeconfig` (e.g. one that impersonates a user
    /// with fewer rights).
    pub fn start_with_kubeconfig(
        config: &Path,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Self {
        Self::spawn(config, namespace, extra, kubeconfig, &[], &[])
    }

    /// Like [`Khai::start`], run through `wrapper` (e.g. `prlimit --nofile=64:64`), which must
    /// exec khai so that [`Khai::pid`] is khai's.
    pub fn start_wrapped(config: &Path, namespace: &str, extra: &[&str], wrapper: &[&str]) -> Self {
        Self::spawn(config, namespace, extra, kubeconfig(), &[], wrapper)
    }

    /// Like [`Khai::start`], on the cluster of `kubeconfig` with extra environment variables.
    pub fn start_on(
        kubeconfig: &Path,
        config: &Path,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(config, namespace, extra, kubeconfig, env, &[])
    }

    /// Like [`Khai::start`], with extra environment variables (e.g. `POD_NAME`).
    pub fn start_with_env(
        config: &Path,
        namespace: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(config, namespace, extra, kubeconfig(), env, &[])
    }

    fn spawn(
        config: &Path,
        namespace: &str,
        extra: &[&str],
        kubeconfig: &Path,
        env: &[(&str, &str)],
        wrapper: &[&str],
    ) -> Self {
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(khai_bin());
                c
            }
            None => Command::new(khai_bin()),
        };
        let child = command
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--namespace")
            .arg(namespace)
            .args(extra)
            // Many daemons run at once: each serves metrics and webhooks on a port it picks
            // itself unless told otherwise, and says which ([`Khai::listening`]). A port picked
            // here and passed in could be taken by another process before khai binds it.
            .args(unless_given(extra, "--metrics-bind"))
            .args(unless_given(extra, "--webhook-bind"))
            .env("KUBECONFIG", kubeconfig)
            .envs(env.iter().copied())
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("failed to start khai");
        Self::attach(child)
    }

    /// Starts `program` (`khai`, or a container runtime running it) with exactly `args` and
    /// `env` on top of this process's environment (less RUST_LOG and KUBECONFIG); nothing is
    /// added, so the run is what a Deployment or an image says.
    pub fn start_exact(program: &Path, args: &[String], env: &[(String, String)]) -> Self {
        let child = Command::new(program)
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {}: {e}", program.display()));
        Self::attach(child)
    }

    fn attach(mut child: Child) -> Self {
        let log = std::sync::Arc::new((Mutex::new(Vec::new()), std::sync::Condvar::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("KHAI_TEST_VERBOSE").is_some() {
                    eprintln!("khai: {line}");
                }
                sink.0.lock().unwrap().push(line);
                sink.1.notify_all();
            }
        });
        Self {
            child,
            log,
            reader: Some(reader),
        }
    }

    /// Sends SIGTERM and waits (with a deadline) for the process to exit; returns its exit code
    /// and every log line it wrote.
    pub async fn terminate(self) -> (Option<i32>, Vec<String>) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "failed to send SIGTERM to khai");
        self.wait().await
    }

    /// Waits (with a deadline) for the process to exit by itself; returns its exit code and
    /// every log line it wrote.
    pub async fn wait(mut self) -> (Option<i32>, Vec<String>) {
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        let status =
            tokio::time::timeout(DEADLINE, tokio::task::spawn_blocking(move || child.wait()))
                .await
                .expect("khai did not exit within the deadline")
                .unwrap()
                .unwrap();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        (status.code(), self.log.0.lock().unwrap().clone())
    }

    /// Where khai serves /metrics, /healthz and /readyz, as it logged at start.
    pub async fn metrics_addr(&self) -> String {
        self.listening("metrics").await
    }

    /// The address `server` (`metrics`, `webhook`, `console`) bound, from the fields khai logs
    /// it with, `listening` and `address`: a JSON line's (`--log-format json`) or, in the text
    /// format, the `listening="server"` and `address=ADDR` pairs; never the message's wording.
    pub async fn listening(&self, server: &'static str) -> String {
        let what = format!("the {server} server's address");
        let line = self
            .wait_for_log(0, &what, move |l| listening_address(l, server).is_some())
            .await;
        listening_address(&line, server).unwrap()
    }

    /// The port of [`Khai::listening`].
    pub async fn listening_port(&self, server: &'static str) -> u16 {
        let addr = self.listening(server).await;
        let port = addr.rsplit_once(':').map(|(_, p)| p.parse());
        port.and_then(Result::ok)
            .unwrap_or_else(|| panic!("no port in {addr:?}"))
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills khai with SIGKILL, as a crash or a node failure would, and waits for it to exit.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill khai");
        self.child.wait().expect("wait for khai");
    }

    /// The last `n` log lines khai wrote, for failure messages.
    pub fn tail(&self, n: usize) -> String {
        let lines = self.log.0.lock().unwrap();
        let from = lines.len().saturating_sub(n);
        lines[from..].join("\n")
    }

    /// How many log lines khai has written so far.
    pub fn log_len(&self) -> usize {
        self.log.0.lock().unwrap().len()
    }

    /// Waits until a line of khai's JSON log (`--log-format json`) after the first `skip` has
    /// every top-level field of `fields` (a JSON object) with the same value; returns it parsed.
    /// Matching whole fields, not text, keeps the wait independent of how lines are worded.
    pub async fn wait_for_json_log(
        &self,
        skip: usize,
        what: &str,
        fields: serde_json::Value,
    ) -> serde_json::Value {
        self.wait_for_json_logs(skip, what, 1, fields)
            .await
            .remove(0)
    }

    /// Like [`Khai::wait_for_json_log`], for `n` such lines.
    pub async fn wait_for_json_logs(
        &self,
        skip: usize,
        what: &str,
        n: usize,
        fields: serde_json::Value,
    ) -> Vec<serde_json::Value> {
        let want = fields.as_object().expect("fields is a JSON object").clone();
        let has = move |line: &serde_json::Value| want.iter().all(|(k, v)| line.get(k) == Some(v));
        self.wait_for_json_logs_where(skip, what, n, has).await
    }

    /// Like [`Khai::wait_for_json_logs`], for lines that satisfy `pred`.
    pub async fn wait_for_json_logs_where(
        &self,
        skip: usize,
        what: &str,
        n: usize,
        pred: impl Fn(&serde_json::Value) -> bool + Send + 'static,
    ) -> Vec<serde_json::Value> {
        let holds = move |l: &str| serde_json::from_str(l).is_ok_and(|line| pred(&line));
        self.wait_for_logs(skip, what, n, holds)
            .await
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until khai, logging JSON, says after its first `skip` log lines that every webhook
    /// configuration and CRD conversion of its config is applied: one event covers them all,
    /// whichever the config has, where the objects would have to be listed per config.
    pub async fn wait_for_webhooks_installed(&self, skip: usize, what: &str) {
        let installed = serde_json::json!({ "message": "webhook configurations installed" });
        self.wait_for_json_log(skip, what, installed).await;
    }

    /// Waits until a log line after the first `skip` lines satisfies `pred`; returns it.
    pub async fn wait_for_log(
        &self,
        skip: usize,
        what: &str,
        pred: impl Fn(&str) -> bool + Send + 'static,
    ) -> String {
        self.wait_for_logs(skip, what, 1, pred).await.remove(0)
    }

    /// Waits until `n` log lines after the first `skip` satisfy `pred`; returns them.
    pub async fn wait_for_logs(
        &self,
        skip: usize,
        what: &str,
        n: usize,
        pred: impl Fn(&str) -> bool + Send + 'static,
    ) -> Vec<String> {
        let log = self.log.clone();
        let what = what.to_string();
        tokio::task::spawn_blocking(move || {
            let (lines, changed) = &*log;
            let deadline = std::time::Instant::now() + DEADLINE;
            let mut guard = lines.lock().unwrap();
            // Each line is looked at once, however many arrive while waiting.
            let (mut found, mut scanned) = (Vec::new(), skip);
            loop {
                while found.len() < n && scanned < guard.len() {
                    if pred(&guard[scanned]) {
                        found.push(guard[scanned].clone());
                    }
                    scanned += 1;
                }
                if found.len() == n {
                    return found;
                }
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    let from = guard.len().saturating_sub(40);
                    let tail = guard[from..].join("\n");
                    // Not holding the lock while panicking: it would poison the log for
                    // whoever reads it next (a caller that catches the panic, `tail`).
                    drop(guard);
                    panic!(
                        "timed out after {DEADLINE:?} waiting for khai to log {what} ({} of {n} \
                         seen); khai's log ends:\n{tail}",
                        found.len(),
                    );
                }
                guard = changed.wait_timeout(guard, left).unwrap().0;
            }
        })
        .await
        .unwrap()
    }
}

/// `[flag, "127.0.0.1:0"]` unless `extra` gives `flag`.
fn unless_given<'a>(extra: &[&str], flag: &'a str) -> Vec<&'a str> {
    if extra.contains(&flag) {
        Vec::new()
    } else {
        vec![flag, "127.0.0.1:0"]
    }
}

/// The `address` field of `line` when its `listening` field is `server`, in either log format.
fn listening_address(line: &str, server: &str) -> Option<String> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        return (json["listening"] == server)
            .then(|| json["address"].as_str().map(str::to_string))
            .flatten();
    }
    let mut tokens = line.split_whitespace();
    let named = format!("listening=\"{server}\"");
    if !line.split_whitespace().any(|t| t == named) {
        return None;
    }
    tokens.find_map(|t| t.strip_prefix("address=").map(str::to_string))
}

impl Drop for Khai {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fields of the JSON log line of a successful reconcile of the object `name` (its span
/// gives `name`; the event is the one every successful reconcile logs).
pub fn reconciled(name: &str) -> serde_json::Value {
    serde_json::json!({ "message": "reconciled", "name": name })
}

/// A copy of `examples/<name>` in `into` whose operator name and API group are `operator` and
/// `group`, so its CRDs, webhook configurations (cluster-wide objects named after the operator)
/// and Lease touch no other test's on the shared API server. Returns `into`.
pub fn example_copy(name: &str, into: &Path, operator: &str, group: &str) -> PathBuf {
    let from = repo_root().join("examples").join(name);
    let config = std::fs::read_to_string(from.join("operator.toml")).unwrap();
    let original = config
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    copy_tree(&from, into, &|text| {
        text.replace("examples.khai.dev", group).replace(
            &format!("name = \"{original}\""),
            &format!("name = \"{operator}\""),
        )
    });
    into.to_path_buf()
}

fn copy_tree(from: &Path, to: &Path, edit: &dyn Fn(&str) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, edit);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(target, edit(&text)).unwrap();
        }
    }
}

/// Waits until the CRD `name` exists and is Established; panics after the deadline.
pub async fn wait_for_crd(client: &kube::Client, name: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = await_condition(
        crds,
        name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    match tokio::time::timeout(DEADLINE, established).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("watch on CRD {name} failed: {e}"),
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for CRD {name} to be Established"),
    }
}

/// Waits, through a watch, until any object in `api` satisfies `pred`; returns it.
pub async fn wait_for_any<K, P>(api: Api<K>, what: &str, pred: P) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    P: Fn(&K) -> bool,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let found = async {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if let Ok(obj) = item
                && pred(&obj)
            {
                return Some(obj);
            }
        }
        None
    };
    match tokio::time::timeout(DEADLINE, found).await {
        Ok(Some(obj)) => obj,
        Ok(None) => panic!("watch ended while waiting for {what}"),
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what}"),
    }
}

/// Runs `check` (at most every 50 ms, until the deadline) until it holds, for state that no
/// watch or metric shows, such as what a server answers.
pub async fn poll_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits, through a watch, until the object `name` exists; returns it.
pub async fn wait_exists(api: &Api<DynamicObject>, name: &str, what: &str) -> DynamicObject {
    wait_for(api, name, what, |o: Option<&DynamicObject>| o.is_some()).await
}

/// Runs the `khai` binary with `args`, which must succeed; returns its standard output.
pub fn khai_stdout(args: &[&str]) -> String {
    khai_stdout_with(args, &[])
}

/// `khai args` against the test cluster (its KUBECONFIG), which must succeed; its stdout.
pub fn khai_stdout_on_cluster(args: &[&str]) -> String {
    khai_stdout_with(args, &[("KUBECONFIG", kubeconfig())])
}

fn khai_stdout_with(args: &[&str], env: &[(&str, &Path)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "khai {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of `group/v1` `kind` (resource `plural`) in namespace `ns`.
pub fn custom_api(
    client: &kube::Client,
    ns: &str,
    group: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk(group, "v1", kind);
    let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The ConfigMaps in namespace `ns`, as dynamic objects.
pub fn configmaps(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    custom_api(client, ns, "", "ConfigMap", "configmaps")
}

/// kubectl from PATH or /usr/bin. Tests that need it skip without it, except under
/// `scripts/test` (`KHAI_TEST_REQUIRE_KUBECTL`), which installs it and where a skip would hide
/// a failure.
pub fn kubectl() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file());
    if found.is_none() && std::env::var_os("KHAI_TEST_REQUIRE_KUBECTL").is_some() {
        panic!("kubectl is required (KHAI_TEST_REQUIRE_KUBECTL) but not on PATH or in /usr/bin");
    }
    found
}

/// `kubectl apply --dry-run=server --server-side` of `yaml` against the test cluster; panics
/// with the server's answer when it refuses. Returns kubectl's output.
pub fn dry_run_apply(kubectl: &Path, yaml: &str, what: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(kubectl)
        .args(["apply", "--dry-run=server", "--server-side", "-f", "-"])
        .env("KUBECONFIG", kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: the API server refused it:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
