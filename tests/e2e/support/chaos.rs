//! The machinery of the chaos scenarios (`tests/e2e/chaos.rs`): their size, a namespace with a
//! copy of `examples/cache` and khai processes ([`Scene`]), the driver that keeps updating the
//! Caches ([`Driver`]), and the checks and figures after the faults ([`recover_and_report`]).

use super::dedicated::{Dedicated, dedicated};
use super::metrics::{metrics_until, sum};
use super::{Khai, audit, example_copy};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub const GROUP: &str = "chaos.khai.dev";
pub const OPERATOR: &str = "chaos";
/// Leader election timings of the two-replica scenario.
pub const LEASE: Duration = Duration::from_secs(4);

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Size {
    pub objects: usize,
    pub kills: usize,
    pub leader_kills: usize,
    pub pause: u64,
    pub updates_per_second: u64,
    pub seed: u64,
    /// How long recovery may take before the scenario fails.
    pub recovery_deadline: Duration,
}

impl Size {
    pub fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let objects = var("KHAI_CHAOS_OBJECTS", 24) as usize;
        Self {
            objects,
            kills: var("KHAI_CHAOS_KILLS", 3) as usize,
            leader_kills: var("KHAI_CHAOS_LEADER_KILLS", 3) as usize,
            pause: var("KHAI_CHAOS_PAUSE", 5),
            updates_per_second: var("KHAI_CHAOS_UPDATES", 4),
            seed: var("KHAI_CHAOS_SEED", super::nanos_u64()),
            // At the default 20 requests a second, 3 writes an object, plus time to start.
            recovery_deadline: Duration::from_secs(60 + objects as u64 * 3 / 10),
        }
    }
}

/// A small deterministic generator (xorshift), seeded per run and printed, so a failing run can
/// be replayed with `KHAI_CHAOS_SEED`.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A duration between `lo` and `hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

pub fn cache_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Cache"), "caches")
}

/// One scenario's namespace, operator copy, API handles and khai processes.
pub struct Scene {
    pub cluster: &'static Dedicated,
    pub name: &'static str,
    pub ns: String,
    pub config: PathBuf,
    pub _dir: tempfile::TempDir,
    pub caches: Api<DynamicObject>,
    pub deployments: Api<DynamicObject>,
    pub services: Api<DynamicObject>,
    pub size: Size,
    pub rng: Rng,
    /// Incarnations started so far, for distinct identities (`POD_NAME`).
    pub started: usize,
}

impl Scene {
    /// A namespace and a copy of the cache example (webhooks left out: khai is killed, and the
    /// API server would then refuse every write to a Cache).
    pub async fn new(name: &'static str) -> Self {
        let cluster = dedicated();
        let client = cluster.client().await;
        let size = Size::from_env();
        let ns = format!("chaos-{name}-{:x}", super::nanos_u64() % 0xffff_ffff);
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap(),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = example_copy("cache", dir.path(), OPERATOR, GROUP);
        let toml = std::fs::read_to_string(config.join("operator.toml")).unwrap();
        let without_webhooks = toml.split("[[webhook]]").next().unwrap().to_string();
        std::fs::write(config.join("operator.toml"), without_webhooks).unwrap();
        let ar = |g: &str, v: &str, k: &str, p: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, k), p)
        };
        eprintln!(
            "chaos {name}: seed {} (KHAI_CHAOS_SEED to replay), {} objects",
            size.seed, size.objects
        );
        Self {
            cluster,
            name,
            caches: Api::namespaced_with(client.clone(), &ns, &cache_resource()),
            deployments: Api::namespaced_with(
                client.clone(),
                &ns,
                &ar("apps", "v1", "Deployment", "deployments"),
            ),
            services: Api::namespaced_with(client, &ns, &ar("", "v1", "Service", "services")),
            ns,
            config,
            _dir: dir,
            rng: Rng(size.seed | 1),
            size,
            started: 0,
        }
    }

    /// Starts a khai process with `extra` flags and its own identity.
    pub fn start(&mut self, extra: &[&str]) -> Khai {
        self.started += 1;
        let identity = format!("{}-{}", self.name, self.started);
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Ok(qps) = std::env::var("KHAI_CHAOS_QPS") {
            args.extend(["--kube-api-qps".into(), qps]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Khai::start_on(
            self.cluster.kubeconfig(),
            &self.config,
            &self.ns,
            &args,
            &[("POD_NAME", &identity)],
        )
    }

    pub fn name_of(i: usize) -> String {
        format!("c-{i}")
    }

    /// Creates the Caches, eight at a time; returns the sizes they were created with.
    async fn create_all(&self) -> Expected {
        super::wait_for_crd(&self.caches_client().await, &format!("caches.{GROUP}")).await;
        let created: Vec<(String, i64)> = futures::stream::iter(0..self.size.objects)
            .map(|i| {
                let api = self.caches.clone();
                async move {
                    let name = Self::name_of(i);
                    let size = 1 + (i % 20) as i64;
                    let obj: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": format!("{GROUP}/v1"), "kind": "Cache",
                        "metadata": { "name": name },
                        "spec": { "image": "redis", "desired_size": size },
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &obj)
                        .await
                        .unwrap_or_else(|e| panic!("create Cache {name}: {e}"));
                    (name, size)
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        Arc::new(Mutex::new(
            created.into_iter().map(|(n, s)| (n, Some(s))).collect(),
        ))
    }

    async fn caches_client(&self) -> kube::Client {
        self.cluster.client().await
    }

    /// Waits until every Cache is converged (see [`converged`]); returns how long each took from
    /// `since`, after which nothing changes their specs.
    async fn converge(&self, expected: &Expected, since: Instant, khai: &Khai) -> Vec<Duration> {
        let want: BTreeMap<String, Option<i64>> = expected.lock().unwrap().clone();
        let caches = watcher(self.caches.clone(), watcher::Config::default()).map(|e| (true, e));
        let deploys =
            watcher(self.deployments.clone(), watcher::Config::default()).map(|e| (false, e));
        let mut events = futures::stream::select(caches, deploys).boxed();
        let mut seen_caches: HashMap<String, DynamicObject> = HashMap::new();
        let mut seen_deploys: HashMap<String, DynamicObject> = HashMap::new();
        let mut done: BTreeMap<String, Duration> = BTreeMap::new();
        let deadline = tokio::time::Instant::now() + self.size.recovery_deadline;
        while done.len() < want.len() {
            let next = tokio::time::timeout_at(deadline, events.next()).await;
            let (is_cache, event) = match next {
                Ok(Some((c, Ok(e)))) => (c, e),
                // The watch recovers by itself (the API server may still be settling).
                Ok(Some((_, Err(_)))) => continue,
                Ok(None) => panic!("the convergence watch ended"),
                Err(_) => {
                    let stuck: Vec<String> = want
                        .keys()
                        .filter(|n| !done.contains_key(*n))
                        .take(5)
                        .map(|n| {
                            format!(
                                "{n}: {}",
                                why_not(seen_caches.get(n), seen_deploys.get(n), want[n])
                            )
                        })
                        .collect();
                    panic!(
                        "chaos {}: {} of {} Caches not converged {:?} after the faults; e.g.\n{}\n\
                         khai's log ends:\n{}",
                        self.name,
                        want.len() - done.len(),
                        want.len(),
                        self.size.recovery_deadline,
                        stuck.join("\n"),
                        khai.tail(30)
                    );
                }
            };
            let map = if is_cache {
                &mut seen_caches
            } else {
                &mut seen_deploys
            };
            let touched = match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    let n = o.metadata.name.clone().unwrap_or_default();
                    map.insert(n.clone(), o);
                    vec![n]
                }
                watcher::Event::Delete(o) => {
                    let n = o.metadata.name.clone().unwrap_or_default();
                    map.remove(&n);
                    vec![n]
                }
                watcher::Event::Init => {
                    map.clear();
                    vec![]
                }
                watcher::Event::InitDone => want.keys().cloned().collect(),
            };
            for n in touched {
                if done.contains_key(&n) || !want.contains_key(&n) {
                    continue;
                }
                if why_not(seen_caches.get(&n), seen_deploys.get(&n), want[&n]).is_empty() {
                    done.insert(n, since.elapsed());
                }
            }
        }
        done.into_values().collect()
    }

    /// Lists everything and checks the invariants that need the whole picture: the Services, 0
    /// duplicates, 0 orphans, the last spec everywhere.
    async fn check(&self, expected: &Expected) {
        let want = expected.lock().unwrap().clone();
        let lp = ListParams::default();
        let caches = list_settled(&self.caches, &lp).await;
        let uids: HashMap<String, String> = caches
            .iter()
            .map(|c| {
                (
                    c.metadata.uid.clone().unwrap(),
                    c.metadata.name.clone().unwrap(),
                )
            })
            .collect();
        for c in &caches {
            let n = c.metadata.name.as_deref().unwrap();
            if let Some(Some(size)) = want.get(n) {
                assert_eq!(
                    c.data["spec"]["desired_size"],
                    json!(size),
                    "Cache {n}: the API server lost the driver's last update"
                );
            }
        }
        for (what, api) in [
            ("Deployment", &self.deployments),
            ("Service", &self.services),
        ] {
            let children = list_settled(api, &lp).await;
            let mut per_owner: HashMap<String, Vec<String>> = HashMap::new();
            for child in &children {
                let n = child.metadata.name.clone().unwrap();
                let owners: Vec<_> = child
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .filter(|o| o.controller == Some(true))
                    .collect();
                assert_eq!(
                    owners.len(),
                    1,
                    "{what} {n} has {} controllers",
                    owners.len()
                );
                let owner = &owners[0].uid;
                assert!(
                    uids.contains_key(owner),
                    "{what} {n} is an orphan: its controller {owner} is no live Cache"
                );
                per_owner.entry(owner.clone()).or_default().push(n);
            }
            for (uid, name) in &uids {
                let mine = per_owner.get(uid).cloned().unwrap_or_default();
                assert_eq!(
                    mine,
                    std::slice::from_ref(name),
                    "Cache {name} should have exactly one {what}, named after it"
                );
            }
        }
    }
}

/// Every object `api` lists. The watches that judged convergence are served from the API
/// server's cache, while a list reads etcd, which may still refuse a moment after a restart (a
/// 5xx, or no answer): those are retried until the deadline; anything else fails the test.
async fn list_settled(api: &Api<DynamicObject>, lp: &ListParams) -> Vec<DynamicObject> {
    let deadline = Instant::now() + super::DEADLINE;
    loop {
        match api.list(lp).await {
            Ok(list) => return list.items,
            Err(kube::Error::Api(e)) if e.code < 500 => panic!("list: {e}"),
            Err(e) if Instant::now() < deadline => {
                eprintln!("chaos: a list failed after the faults, retried: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!(
                "list still failing {:?} after the faults: {e}",
                super::DEADLINE
            ),
        }
    }
}

/// The size each Cache should end with: `Some` when the driver's last write of it was answered,
/// `None` when its last write failed (it may or may not have landed: the API server's copy
/// decides, and the Deployment must follow it).
pub type Expected = Arc<Mutex<BTreeMap<String, Option<i64>>>>;

/// What keeps `cache` from being converged (empty when it is).
fn why_not(
    cache: Option<&DynamicObject>,
    deploy: Option<&DynamicObject>,
    want: Option<i64>,
) -> String {
    let Some(c) = cache else {
        return "no Cache".into();
    };
    let size = c.data["spec"]["desired_size"].as_i64();
    if want.is_some() && size != want {
        return format!("spec.desired_size {size:?}, driver wrote {want:?}");
    }
    let Some(d) = deploy else {
        return "no Deployment".into();
    };
    let owner = d
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone());
    if owner != c.metadata.uid {
        return format!("Deployment controlled by {owner:?}, not the Cache's uid");
    }
    if d.data["spec"]["replicas"].as_i64() != size {
        return format!(
            "Deployment replicas {} while the Cache wants {size:?}",
            d.data["spec"]["replicas"]
        );
    }
    let status = &c.data["status"];
    let ready = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|k| k["type"] == "Ready" && k["status"] == "True");
    if status["observedGeneration"].as_i64() != c.metadata.generation || !ready {
        return format!(
            "status not Ready at generation {:?}: {status}",
            c.metadata.generation
        );
    }
    if status["phase"] != "Progressing" || status["current_size"] != json!(0) {
        return format!("status phase/current_size wrong: {status}");
    }
    String::new()
}

/// Keeps updating random Caches' `desired_size` until stopped.
pub struct Driver {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<u64>,
    from: audit::Mark,
    log: &'static std::path::Path,
}

/// Where a scenario stood when its driver stopped, right after the last fault.
pub struct Stopped {
    updates: u64,
    /// The audit log when the driver started and when it stopped.
    from: audit::Mark,
    mark: audit::Mark,
    end: Instant,
    at: jiff::Timestamp,
}

impl Driver {
    pub fn start(scene: &Scene, expected: &Expected) -> Self {
        let log = scene.cluster.audit_log();
        let from = audit::mark_in(log);
        let stop = CancellationToken::new();
        let (api, expected, n) = (scene.caches.clone(), expected.clone(), scene.size.objects);
        let mut rng = Rng(scene.size.seed.rotate_left(17) | 1);
        let every = Duration::from_millis(1000 / scene.size.updates_per_second.max(1));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let mut sent = 0;
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    () = s.cancelled() => return sent,
                    _ = tick.tick() => {}
                }
                let name = Scene::name_of(rng.below(n as u64) as usize);
                let size = 1 + rng.below(20) as i64;
                let patch = json!({ "spec": { "desired_size": size } });
                // A write that fails may still have landed: its outcome is unknown.
                let outcome = tokio::time::timeout(
                    Duration::from_secs(5),
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await;
                let known = matches!(outcome, Ok(Ok(_))).then_some(size);
                expected.lock().unwrap().insert(name, known);
                sent += 1;
            }
        });
        Self {
            stop,
            task,
            from,
            log,
        }
    }

    /// Stops updating, at the end of the faults.
    pub async fn stop(self) -> Stopped {
        self.stop.cancel();
        let updates = self.task.await.unwrap();
        Stopped {
            updates,
            from: self.from,
            mark: audit::mark_in(self.log),
            end: Instant::now(),
            at: jiff::Timestamp::now(),
        }
    }
}

/// khai's `khai_reconcile_overlaps_total`, which must be 0.
pub async fn assert_no_overlap(khai: &Khai, when: &str) {
    let overlaps = total(khai, "khai_reconcile_overlaps_total").await;
    assert_eq!(
        overlaps, 0.0,
        "{when}: two reconciles of one object ran at once"
    );
}

/// Waits until khai has reconciled at least `objects` times since it started (a khai started
/// after the faults first goes over every object) and has nothing queued or running; returns
/// its reconcile count then.
async fn quiet(khai: &Khai, objects: usize) -> f64 {
    let addr = khai.metrics_addr().await;
    let body = metrics_until(
        &addr,
        "every object reconciled and an idle work queue",
        |b| {
            sum(b, "controller_runtime_reconcile_total") >= objects as f64
                && sum(b, "workqueue_depth") == 0.0
                && sum(b, "controller_runtime_active_workers") == 0.0
        },
    )
    .await;
    sum(&body, "controller_runtime_reconcile_total")
}

/// khai's metric `family` now, summed over its labels.
async fn total(khai: &Khai, family: &str) -> f64 {
    let addr = khai.metrics_addr().await;
    let body = metrics_until(&addr, "khai's metrics", |_| true).await;
    sum(&body, family)
}

/// How many times khai's watches have restarted.
async fn watch_restarts(khai: &Khai) -> f64 {
    total(khai, "khai_watch_restarts_total").await
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// khai's writes in the namespace since `mark`, by object name (a Cache and its children share
/// one).
fn writes_by_object(scene: &Scene, mark: audit::Mark) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for e in audit::entries(mark, |e| {
        e["objectRef"]["namespace"] == scene.ns.as_str()
            && e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["resource"] != "leases"
            && e["objectRef"]["resource"] != "events"
    }) {
        let name = e["objectRef"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *by.entry(name).or_default() += 1;
    }
    by
}

/// For each object, the driver's updates of it that came after khai's last status write of it
/// and before `until` (the end of the faults): each may cost khai its Deployment and status after
/// the faults (more than one when khai, behind, reconciles an update before the next arrives).
///
/// An update counts as written only once khai has written the status, the last write of its
/// reconcile. Counting from any khai write misjudged a reconcile that straddled the end of the
/// faults (seen once after a freeze, when the requests queued in the frozen server all landed
/// at once): its Deployment write, received before `until`, marked the update written, and its
/// status write after `until` then counted against the next update's allowance.
fn unwritten_updates(
    scene: &Scene,
    from: audit::Mark,
    until: jiff::Timestamp,
) -> HashMap<String, u64> {
    let mut events: Vec<(jiff::Timestamp, bool, String)> =
        audit::entries(from, |e| e["objectRef"]["namespace"] == scene.ns.as_str())
            .iter()
            .filter_map(|e| {
                let at = audit::timestamp(e, "requestReceivedTimestamp");
                let name = e["objectRef"]["name"].as_str()?.to_string();
                let by_khai = e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("khai/"));
                let of_cache = e["objectRef"]["resource"] == "caches";
                let status = of_cache && e["objectRef"]["subresource"] == "status";
                let update = !by_khai
                    && e["verb"] == "patch"
                    && of_cache
                    && e["objectRef"]["subresource"].is_null();
                // A status write the API server refused (etcd away) wrote nothing: khai still
                // owes that update.
                let answered = e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c));
                let written = by_khai && status && answered;
                (at <= until && (written || update)).then_some((at, written, name))
            })
            .collect();
    events.sort();
    let mut pending: HashMap<String, u64> = HashMap::new();
    for (_, written, name) in events {
        let n = pending.entry(name).or_default();
        *n = if written { 0 } else { *n + 1 };
    }
    pending
}

/// The writes to object `name` (a Cache and its children) since `from`, one line each: when,
/// who, what, and the answer.
fn writes_of(scene: &Scene, from: audit::Mark, name: &str) -> Vec<String> {
    audit::entries(from, |e| {
        e["objectRef"]["namespace"] == scene.ns.as_str() && e["objectRef"]["name"] == name
    })
    .iter()
    .map(|e| {
        let who = e["userAgent"].as_str().unwrap_or_default();
        format!(
            "{} {} {} {} -> {}",
            e["requestReceivedTimestamp"].as_str().unwrap_or_default(),
            who.split('/').next().unwrap_or_default(),
            e["verb"].as_str().unwrap_or_default(),
            audit::resource(e).unwrap_or_default(),
            e["responseStatus"]["code"]
        )
    })
    .collect()
}

/// After the last fault: converge, check, count, and report.
pub async fn recover_and_report(
    scene: &Scene,
    khai: &Khai,
    expected: &Expected,
    stopped: Stopped,
    faults: &str,
) {
    let Stopped {
        updates,
        from,
        mark,
        end,
        at,
    } = stopped;
    let mut times = scene.converge(expected, end, khai).await;
    let mut restarts = watch_restarts(khai).await;
    scene.check(expected).await;
    let reconciles = quiet(khai, scene.size.objects).await;
    let writes = writes_by_object(scene, mark);
    let total: u64 = writes.values().sum();
    let worst_n = writes.values().max().copied().unwrap_or(0);
    let pending = unwritten_updates(scene, from, at);
    for (name, n) in &writes {
        // A reconcile from a copy older than khai's own last status write (that write's event
        // still on its way, behind the burst the watches deliver after an outage) does not
        // write the status again: `object::sent` orders resourceVersions.
        let allowed = 2 * pending.get(name).copied().unwrap_or(0).max(1);
        assert!(
            *n <= allowed,
            "chaos {}: {name} took {n} writes after the faults, more than its Deployment and \
             status for each of its {} updates khai had not written when the faults ended; \
             all: {writes:?}; {name}'s writes since the driver started:\n{}",
            scene.name,
            pending.get(name).copied().unwrap_or(0),
            writes_of(scene, from, name).join("\n")
        );
    }
    // No hot loop: a steady cluster sees no reconcile and no write for a while. A watch of
    // khai's that restarts in the window (the API server re-reads etcd for each kind in its own
    // time after an etcd restart, and ends the watches it serves) lists again and may reconcile
    // each object once: such a window is watched again, and a hot loop leaves none quiet.
    let window = Duration::from_secs(2);
    let mut before = reconciles;
    for attempt in 1.. {
        let idle_mark = audit::mark_in(scene.cluster.audit_log());
        tokio::time::sleep(window).await;
        let after = quiet(khai, scene.size.objects).await;
        let idle_writes = writes_by_object(scene, idle_mark);
        if after == before && idle_writes.is_empty() {
            break;
        }
        // Restarted since the last look: its list may have landed in this window.
        let now = watch_restarts(khai).await;
        let relisted = now > restarts;
        restarts = now;
        assert!(
            relisted && idle_writes.is_empty() && attempt < 3,
            "chaos {}: hot loop: {} reconciles and writes {idle_writes:?} in {window:?} of a \
             steady cluster (window {attempt}, a watch restarted in it: {relisted})",
            scene.name,
            after - before
        );
        before = after;
    }
    assert_no_overlap(khai, "after recovery").await;
    times.sort();
    eprintln!(
        "chaos: scenario={} objects={} faults=[{faults}] updates={updates} recovered_in: p50={:.2}s \
         p99={:.2}s max={:.2}s; writes after the faults: {total} ({:.2}/object, max {worst_n}); \
         reconciles by the last khai: {reconciles}",
        scene.name,
        scene.size.objects,
        percentile(&times, 0.5).as_secs_f64(),
        percentile(&times, 0.99).as_secs_f64(),
        times.last().copied().unwrap_or_default().as_secs_f64(),
        total as f64 / scene.size.objects as f64,
    );
}

/// Creates the Caches with `khai` running and waits until all are converged.
pub async fn steady(scene: &Scene, khai: &Khai) -> Expected {
    let started = Instant::now();
    let expected = scene.create_all().await;
    let times = scene.converge(&expected, started, khai).await;
    eprintln!(
        "chaos {}: {} Caches created and converged in {:.1}s",
        scene.name,
        times.len(),
        started.elapsed().as_secs_f64()
    );
    expected
}
