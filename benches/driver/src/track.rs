//! What the bench client sees through its own watches on Caches and ConfigMaps in the run's
//! namespace, with the client-side time it first saw each state. Phases wait on these counts
//! instead of polling.

use crate::workload::OBJECT_PREFIX;
use anyhow::{Result, anyhow};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The watched state. Counts cover only benchmark objects (names starting with
/// [`OBJECT_PREFIX`]), so the warm-up object never counts toward a phase.
#[derive(Default)]
pub struct State {
    /// Watches that have finished their initial list.
    pub synced: usize,
    /// When each Cache was first seen Ready at a generation.
    pub ready_at: HashMap<(String, i64), Instant>,
    /// Benchmark Caches seen Ready, by generation.
    pub ready: HashMap<i64, usize>,
    /// When each Cache was seen deleted.
    pub gone_at: HashMap<String, Instant>,
    /// Benchmark Caches seen deleted.
    pub gone: usize,
    /// `data.size` of each ConfigMap.
    pub sizes: HashMap<String, String>,
    /// Benchmark ConfigMaps by their current `data.size`.
    pub with_size: HashMap<String, usize>,
    /// Caches present in the last completed list, to find deletions a re-list reveals.
    live: HashSet<String>,
    relist: Option<HashSet<String>>,
}

fn counted(name: &str) -> bool {
    name.starts_with(OBJECT_PREFIX)
}

impl State {
    fn see_cache(&mut self, obj: &DynamicObject, now: Instant) {
        let Some(name) = obj.metadata.name.clone() else {
            return;
        };
        self.live.insert(name.clone());
        if let Some(relist) = &mut self.relist {
            relist.insert(name.clone());
        }
        let generation = obj.metadata.generation.unwrap_or(0);
        let status = &obj.data["status"];
        let ready =
            status["phase"] == "Ready" && status["observedGeneration"].as_i64() == Some(generation);
        if ready && !self.ready_at.contains_key(&(name.clone(), generation)) {
            if counted(&name) {
                *self.ready.entry(generation).or_default() += 1;
            }
            self.ready_at.insert((name, generation), now);
        }
    }

    fn cache_gone(&mut self, name: &str, now: Instant) {
        self.live.remove(name);
        if !self.gone_at.contains_key(name) {
            if counted(name) {
                self.gone += 1;
            }
            self.gone_at.insert(name.to_string(), now);
        }
    }

    /// A re-list finished: Caches it no longer holds were deleted while the watch was down.
    fn relisted(&mut self, now: Instant) {
        if let Some(present) = self.relist.take() {
            let missing: Vec<String> = self.live.difference(&present).cloned().collect();
            for name in missing {
                self.cache_gone(&name, now);
            }
        }
    }

    fn see_configmap(&mut self, cm: &ConfigMap) {
        let Some(name) = cm.metadata.name.clone() else {
            return;
        };
        let size = cm
            .data
            .as_ref()
            .and_then(|d| d.get("size"))
            .cloned()
            .unwrap_or_default();
        let old = self.sizes.insert(name.clone(), size.clone());
        if !counted(&name) || old.as_ref() == Some(&size) {
            return;
        }
        if let Some(old) = old
            && let Some(n) = self.with_size.get_mut(&old)
        {
            *n = n.saturating_sub(1);
        }
        *self.with_size.entry(size).or_default() += 1;
    }

    pub fn ready_count(&self, generation: i64) -> usize {
        self.ready.get(&generation).copied().unwrap_or(0)
    }

    pub fn size_count(&self, size: &str) -> usize {
        self.with_size.get(size).copied().unwrap_or(0)
    }
}

/// The two watches and their shared state; dropping it stops the watches.
pub struct Tracker {
    state: Arc<Mutex<State>>,
    version: watch::Sender<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Tracker {
    pub fn start(caches: Api<DynamicObject>, configmaps: Api<ConfigMap>) -> Tracker {
        let state = Arc::new(Mutex::new(State::default()));
        let (version, _) = watch::channel(0);
        let cache_events = watcher(caches, watcher::Config::default()).default_backoff();
        let cm_events = watcher(configmaps, watcher::Config::default()).default_backoff();
        let tasks = vec![
            tokio::spawn(follow(
                cache_events,
                state.clone(),
                version.clone(),
                on_cache,
            )),
            tokio::spawn(follow(
                cm_events,
                state.clone(),
                version.clone(),
                on_configmap,
            )),
        ];
        Tracker {
            state,
            version,
            tasks,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `done` holds for the watched state; errors after `timeout`.
    pub async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&State) -> bool,
    ) -> Result<()> {
        let mut changes = self.version.subscribe();
        let until_done = async {
            loop {
                if done(&self.lock()) {
                    return Ok(());
                }
                if changes.changed().await.is_err() {
                    return Err(anyhow!("the bench client's watches stopped"));
                }
            }
        };
        tokio::time::timeout(timeout, until_done)
            .await
            .map_err(|_| anyhow!("timed out after {timeout:?} waiting for {what}"))?
    }
}

/// Applies every event of one watch to the state and wakes the waiters.
async fn follow<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    state: Arc<Mutex<State>>,
    version: watch::Sender<u64>,
    apply: fn(&mut State, watcher::Event<K>, Instant),
) {
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        // Watch errors are retried with backoff by the stream itself; a phase that stalls
        // because of them ends in its timeout.
        let Ok(event) = event else { continue };
        let now = Instant::now();
        apply(
            &mut state.lock().unwrap_or_else(PoisonError::into_inner),
            event,
            now,
        );
        version.send_modify(|v| *v += 1);
    }
}

fn on_cache(state: &mut State, event: watcher::Event<DynamicObject>, now: Instant) {
    match event {
        watcher::Event::Init => state.relist = Some(HashSet::new()),
        watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => state.see_cache(&obj, now),
        watcher::Event::Delete(obj) => {
            if let Some(name) = &obj.metadata.name {
                state.cache_gone(name, now);
            }
        }
        watcher::Event::InitDone => {
            state.relisted(now);
            state.synced += 1;
        }
    }
}

fn on_configmap(state: &mut State, event: watcher::Event<ConfigMap>, _now: Instant) {
    match event {
        watcher::Event::InitApply(cm) | watcher::Event::Apply(cm) => state.see_configmap(&cm),
        watcher::Event::InitDone => state.synced += 1,
        watcher::Event::Init | watcher::Event::Delete(_) => {}
    }
}
