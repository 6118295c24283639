//! The set of running controllers, and how a new version of the config replaces it: only the
//! controllers that changed are stopped and started again; the others keep running untouched,
//! with their work queues, backoffs and in-flight reconciles.
//!
//! Each controller runs as its own task, in a span naming it; a controller that ends on its own
//! (a panic included) is reported.

use crate::controller::Fingerprint;
use crate::watch::Informer;
use futures::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// What [`Running`] runs: something with a name and a fingerprint.
pub(super) trait Unit: Send + 'static {
    /// Equal across versions of the config exactly when the unit is unchanged.
    fn fingerprint(&self) -> Fingerprint;
    /// How logs name it.
    fn name(&self) -> String;
    /// The informers it reads, kept running while it runs.
    fn caches(&self) -> Vec<Arc<Informer>> {
        Vec::new()
    }
}

impl Unit for crate::controller::Prepared {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    fn name(&self) -> String {
        self.ctx.spec.controller.clone()
    }
    fn caches(&self) -> Vec<Arc<Informer>> {
        // The Secrets `ctx.secret` reads are not visible to lookups, but are read all the same.
        let secrets = self.ctx.spec.effects.secrets.informers().cloned();
        self.ctx
            .caches
            .visible
            .iter()
            .cloned()
            .chain(secrets)
            .collect()
    }
}

/// Starts a unit; the future ends once the token is cancelled and the unit has wound down.
pub(super) type Start<U> =
    Box<dyn Fn(U, CancellationToken) -> BoxFuture<'static, ()> + Send + Sync>;

/// Running controllers, each stoppable on its own.
pub(super) struct Running<U> {
    tasks: JoinSet<Fingerprint>,
    /// The fingerprint of each task, to know which one failed when a task panics.
    ids: HashMap<tokio::task::Id, Fingerprint>,
    live: HashMap<Fingerprint, Live>,
    shutdown: CancellationToken,
    start: Start<U>,
}

/// One running unit.
struct Live {
    name: String,
    stop: CancellationToken,
    caches: Vec<Arc<Informer>>,
}

/// What replacing the running set did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Swap {
    pub kept: usize,
    pub restarted: usize,
    pub stopped: usize,
}

impl<U: Unit> Running<U> {
    /// Starts `units` with `start`; every one stops when `shutdown` is cancelled.
    pub(super) fn new(units: Vec<U>, shutdown: &CancellationToken, start: Start<U>) -> Self {
        let mut r = Self {
            tasks: JoinSet::new(),
            ids: HashMap::new(),
            live: HashMap::new(),
            shutdown: shutdown.clone(),
            start,
        };
        for u in units {
            r.launch(u);
        }
        r
    }

    fn launch(&mut self, u: U) {
        let fp = u.fingerprint();
        let name = u.name();
        let caches = u.caches();
        let stop = self.shutdown.child_token();
        let run = (self.start)(u, stop.clone());
        let span = tracing::info_span!("controller", controller = %name);
        self.live.insert(fp, Live { name, stop, caches });
        let task = self.tasks.spawn(
            async move {
                run.await;
                fp
            }
            .instrument(span),
        );
        self.ids.insert(task.id(), fp);
    }

    /// Waits for the next unit to end; `None` when none is running.
    async fn next_ended(&mut self) -> Option<Fingerprint> {
        let (id, panicked) = match self.tasks.join_next_with_id().await? {
            Ok((id, _)) => (id, None),
            Err(e) => (e.id(), Some(e)),
        };
        let fp = self.ids.remove(&id)?;
        if let Some(Live { name, stop, .. }) = self.live.remove(&fp) {
            match panicked {
                Some(e) => {
                    tracing::error!(controller = %name, error = %e, "controller failed; its objects are not reconciled until the next config version or restart");
                    crate::metrics::controller_failed(&name);
                }
                None if !stop.is_cancelled() => {
                    tracing::error!(controller = %name, "controller stopped unexpectedly");
                    crate::metrics::controller_failed(&name);
                }
                None => {}
            }
        }
        Some(fp)
    }

    /// Drives the units; returns once shutdown has stopped all of them. With none running (a
    /// config without controllers) it waits for shutdown.
    pub(super) async fn run(&mut self) {
        loop {
            match self.next_ended().await {
                Some(_) => {}
                None if self.shutdown.is_cancelled() => return,
                None => self.shutdown.cancelled().await,
            }
        }
    }

    /// Replaces the running set with `next`: units whose fingerprint is not in `next` stop
    /// taking work and finish their in-flight reconciles on the old version (the others keep
    /// running meanwhile), then the units of `next` that are not running start.
    pub(super) async fn replace(&mut self, next: Vec<U>) -> Swap {
        let wanted: HashSet<Fingerprint> = next.iter().map(Unit::fingerprint).collect();
        let mut stopping: HashSet<Fingerprint> = HashSet::new();
        for (fp, live) in &self.live {
            if !wanted.contains(fp) {
                tracing::info!(controller = %live.name, "stopping controller: its config or script changed");
                live.stop.cancel();
                stopping.insert(*fp);
            }
        }
        let stopped = stopping.len();
        while !stopping.is_empty() {
            let Some(fp) = self.next_ended().await else {
                break;
            };
            stopping.remove(&fp);
            stopping.retain(|fp| self.live.contains_key(fp));
        }
        let mut swap = Swap {
            stopped,
            ..Swap::default()
        };
        for u in next {
            if self.live.contains_key(&u.fingerprint()) {
                tracing::info!(controller = %u.name(), "controller unchanged; it keeps running");
                swap.kept += 1;
            } else if !self.shutdown.is_cancelled() {
                self.launch(u);
                swap.restarted += 1;
            }
        }
        swap
    }

    /// Whether a running unit reads `informer`.
    pub(super) fn uses(&self, informer: &Arc<Informer>) -> bool {
        self.live
            .values()
            .any(|l| l.caches.iter().any(|c| Arc::ptr_eq(c, informer)))
    }

    /// Fingerprints of the units running now.
    #[cfg(test)]
    fn live(&self) -> HashSet<Fingerprint> {
        self.live.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A unit that records when it starts and stops.
    struct Fake(Fingerprint);

    impl Unit for Fake {
        fn fingerprint(&self) -> Fingerprint {
            self.0
        }
        fn name(&self) -> String {
            format!("fake-{}", self.0)
        }
    }

    type Log = Arc<Mutex<Vec<String>>>;

    fn recording(log: &Log) -> Start<Fake> {
        let log = log.clone();
        Box::new(move |u, stop| {
            let log = log.clone();
            Box::pin(async move {
                log.lock().unwrap().push(format!("start {}", u.0));
                stop.cancelled().await;
                log.lock().unwrap().push(format!("stop {}", u.0));
            })
        })
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn replace_restarts_only_what_changed_and_stops_what_is_gone() {
        let log = Log::default();
        let shutdown = CancellationToken::new();
        let mut r = Running::new(vec![Fake(1), Fake(2), Fake(3)], &shutdown, recording(&log));
        settle().await;
        let swap = r.replace(vec![Fake(1), Fake(4)]).await;
        assert_eq!(
            swap,
            Swap {
                kept: 1,
                restarted: 1,
                stopped: 2
            }
        );
        assert_eq!(r.live(), HashSet::from([1, 4]));
        settle().await;
        let mut seen = log.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            [
                "start 1", "start 2", "start 3", "start 4", "stop 2", "stop 3"
            ]
        );
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(1), r.run())
            .await
            .expect("run() did not return after shutdown");
        assert!(r.live().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_unit_that_panics_is_reported_and_the_others_keep_running() {
        let shutdown = CancellationToken::new();
        let start: Start<Fake> = Box::new(|u, stop| {
            Box::pin(async move {
                if u.0 == 2 {
                    panic!("boom");
                }
                stop.cancelled().await;
            })
        });
        let mut r = Running::new(vec![Fake(1), Fake(2)], &shutdown, start);
        assert_eq!(r.next_ended().await, Some(2), "the panicking unit ends");
        assert!(!r.live().contains(&2));
        assert!(r.live().contains(&1), "the other unit keeps running");
        shutdown.cancel();
        r.run().await;
    }
}
