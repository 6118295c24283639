//! The set of running controllers, and how a new version of the config replaces it: only the
//! controllers that changed are stopped and started again; the others keep running untouched,
//! with their work queues, backoffs and in-flight reconciles.

use super::{Prepared, start};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use tokio_util::sync::CancellationToken;

/// A controller's identity across versions: a hash of everything that shapes its behaviour
/// (its config entry, its script's text, `[operator]`, `[params]`, the CRDs, its namespace).
pub(super) type Fingerprint = u64;

type Loop = Pin<Box<dyn Future<Output = Fingerprint>>>;

/// Running controllers, each stoppable on its own.
pub(super) struct Running {
    loops: FuturesUnordered<Loop>,
    live: HashMap<Fingerprint, (String, CancellationToken)>,
    shutdown: CancellationToken,
}

/// What replacing the running set did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Swap {
    pub kept: usize,
    pub restarted: usize,
    pub stopped: usize,
}

impl Running {
    /// Starts `prepared`; every controller stops when `shutdown` is cancelled.
    pub fn new(prepared: Vec<Prepared>, shutdown: &CancellationToken) -> Self {
        let mut r = Self {
            loops: FuturesUnordered::new(),
            live: HashMap::new(),
            shutdown: shutdown.clone(),
        };
        for p in prepared {
            r.start(p);
        }
        r
    }

    fn start(&mut self, p: Prepared) {
        let fp = p.fingerprint;
        let stop = self.shutdown.child_token();
        self.live
            .insert(fp, (p.ctx.controller.clone(), stop.clone()));
        let run = start(p, stop);
        self.loops.push(Box::pin(async move {
            run.await;
            fp
        }));
    }

    /// Drives the controllers; returns once shutdown has stopped all of them. With none
    /// running (a config without controllers, for now) it waits for shutdown.
    pub async fn run(&mut self) {
        loop {
            match self.loops.next().await {
                Some(fp) => {
                    self.live.remove(&fp);
                }
                None if self.shutdown.is_cancelled() => return,
                None => self.shutdown.cancelled().await,
            }
        }
    }

    /// Replaces the running set with `next`: controllers whose fingerprint is not in `next`
    /// stop taking work and finish their in-flight reconciles on the old version (the others
    /// keep running meanwhile), then the controllers of `next` that are not running start.
    pub async fn replace(&mut self, next: Vec<Prepared>) -> Swap {
        let wanted: HashSet<Fingerprint> = next.iter().map(|p| p.fingerprint).collect();
        let mut stopping: HashSet<Fingerprint> = HashSet::new();
        for (fp, (name, stop)) in &self.live {
            if !wanted.contains(fp) {
                tracing::info!(controller = %name, "stopping controller: its config or script changed");
                stop.cancel();
                stopping.insert(*fp);
            }
        }
        let stopped = stopping.len();
        while !stopping.is_empty() {
            let Some(fp) = self.loops.next().await else {
                break;
            };
            self.live.remove(&fp);
            stopping.remove(&fp);
        }
        let mut swap = Swap {
            stopped,
            ..Swap::default()
        };
        for p in next {
            if self.live.contains_key(&p.fingerprint) {
                tracing::info!(controller = %p.ctx.controller, "controller unchanged; it keeps running");
                swap.kept += 1;
            } else if !self.shutdown.is_cancelled() {
                self.start(p);
                swap.restarted += 1;
            }
        }
        swap
    }
}
