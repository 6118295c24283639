//! A canary rollout of the candidate revision (`khai run --candidate DIR --candidate-percent
//! N`): the candidate reconciles, and writes for, a stable hash share of each shadowed
//! controller's objects ([`share`]); the active revision reconciles the rest and keeps
//! shadowing the candidate there. Which revision runs is picked per object in the controller's
//! own turn ([`crate::controller::Route`]), so one queue still never runs an object twice at
//! once, and an object is reconciled by exactly one revision at a time.
//!
//! Each revision's reconciles and failures are counted ([`decide`]); the candidate is promoted
//! to every object once `promote_after` has passed within its limit, or rolled back at once
//! when it breaks it. Either way every object is reconciled again by the revision that now owns
//! it, an Event is recorded (on the config's ConfigMap, or khai's Pod), and the state is kept
//! in a Lease ([`store`]), so a restart or a new leader resumes the same rollout.

mod decide;
mod share;
mod store;

use crate::controller::{Ctx, Prepared, Route};
use crate::events::{Event, EventType, Recorder, Reporter};
use decide::{Decision, Window};
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Saved, Store};
use tokio::sync::{Notify, watch};

/// How often the rollout checks whether its window has ended.
const TICK: Duration = Duration::from_secs(1);

/// What `khai run` was asked to do with the candidate, and where it keeps and says it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// Percent of the objects the candidate reconciles during the canary, 0 to 100.
    pub percent: u8,
    /// How long the canary runs before the candidate can be promoted.
    pub promote_after: Duration,
    /// The candidate's error rate may be at most this many times the active revision's.
    pub max_error_ratio: f64,
    /// khai's own namespace, where the rollout's Lease is.
    pub namespace: String,
    /// What the rollout's Events regard: the config's ConfigMap, or khai's Pod; none without
    /// either.
    pub regarding: Option<ObjectReference>,
}

/// Where a rollout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The candidate reconciles its share.
    Canary,
    /// The candidate reconciles every object.
    Promoted,
    /// The active revision reconciles every object again; the candidate only shadows it.
    RolledBack,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Canary => "canary",
            Self::Promoted => "promoted",
            Self::RolledBack => "rolled-back",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Self::Canary, Self::Promoted, Self::RolledBack]
            .into_iter()
            .find(|p| p.as_str() == s)
    }

    /// Percent of the objects the candidate reconciles in this phase.
    fn share(self, percent: u8) -> u8 {
        match self {
            Self::Canary => percent,
            Self::Promoted => 100,
            Self::RolledBack => 0,
        }
    }
}

/// Where [`Rollout::resume`] found the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resumed {
    /// When the rollout started, in seconds since the Unix epoch.
    pub started: u64,
    /// Whether it had already been promoted or rolled back.
    pub decided: bool,
}

/// One rollout of the candidate, shared by every controller it routes.
pub(crate) struct Rollout {
    settings: Settings,
    /// Content hashes of the active revision and the candidate.
    active: String,
    candidate: String,
    phase: watch::Sender<Phase>,
    window: Mutex<Window>,
    /// Wakes [`Rollout::run`] when a reconcile decided a rollback.
    decided: Notify,
    store: Store,
    events: Option<(Recorder, ObjectReference)>,
}

impl Rollout {
    /// The rollout of `candidate` over `active` (their content hashes) of `operator`.
    pub(crate) fn new(
        settings: Settings,
        active: u64,
        candidate: u64,
        client: &kube::Client,
        operator: &str,
    ) -> Arc<Self> {
        let window = Window::new(
            tokio::time::Instant::now(),
            settings.promote_after,
            settings.max_error_ratio,
        );
        let events = settings.regarding.clone().map(|r| {
            let reporter = Reporter {
                controller: format!("khai-{operator}"),
                instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
            };
            (Recorder::new(client.clone(), reporter), r)
        });
        let store = Store::new(client.clone(), &settings.namespace, operator);
        Arc::new(Self {
            settings,
            active: format!("{active:016x}"),
            candidate: format!("{candidate:016x}"),
            phase: watch::Sender::new(Phase::Canary),
            window: Mutex::new(window),
            decided: Notify::new(),
            store,
            events,
        })
    }

    /// Routes every controller of `active` that `candidate` has too (same name, namespace and
    /// informer of its kind) through this rollout; returns how many are routed.
    pub(crate) fn attach(self: &Arc<Self>, active: &[Prepared], candidate: &[Prepared]) -> usize {
        let mut routed = 0;
        for (a, c) in super::twins(active, candidate) {
            a.ctx.revisions.route_with(Arc::new(Routing {
                candidate: c.ctx.clone(),
                rollout: self.clone(),
            }));
            routed += 1;
        }
        routed
    }

    fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    fn saved(&self, started: u64) -> Saved {
        Saved {
            active: self.active.clone(),
            candidate: self.candidate.clone(),
            share: self.settings.percent,
            started,
            phase: self.phase(),
        }
    }

    /// Picks up the rollout of the same candidate kept in the Lease (its phase and start), or
    /// starts a new one and keeps it. Run before the controllers start, so that no object is
    /// reconciled by the wrong revision first. A Lease that cannot be read or written is
    /// logged, and the rollout runs from memory.
    pub(crate) async fn resume(&self) -> Resumed {
        let kept = match self.store.load().await {
            Ok(kept) => kept,
            Err(e) => {
                tracing::error!(error = %e, "the canary rollout's state cannot be read; starting it anew");
                None
            }
        };
        let started = match kept.filter(|k| k.candidate == self.candidate) {
            Some(k) => {
                let age = k.age();
                self.start_window(age);
                self.phase.send_replace(k.phase);
                // The share is the one the rollout started with.
                tracing::info!(lease = %self.store.name(), phase = k.phase.as_str(), share = k.share, started = k.started, age_s = age.as_secs(), "canary rollout resumed");
                crate::metrics::rollout(k.phase.as_str(), k.phase.share(k.share));
                return Resumed {
                    started: k.started,
                    decided: k.phase != Phase::Canary,
                };
            }
            None => {
                self.start_window(Duration::ZERO);
                store::now_secs()
            }
        };
        let saved = self.saved(started);
        if let Err(e) = self.store.save(&saved).await {
            tracing::error!(error = %e, "the canary rollout's state cannot be kept; a restart starts it anew");
        }
        tracing::info!(lease = %self.store.name(), phase = "canary", share = self.settings.percent, started, promote_after_s = self.settings.promote_after.as_secs(), max_error_ratio = self.settings.max_error_ratio, "canary rollout started");
        crate::metrics::rollout("canary", self.settings.percent);
        Resumed {
            started,
            decided: false,
        }
    }

    /// Counts afresh, for a window that started `age` ago.
    fn start_window(&self, age: Duration) {
        if let Ok(mut w) = self.window.lock() {
            let now = tokio::time::Instant::now();
            *w = Window::new(
                now.checked_sub(age).unwrap_or(now),
                self.settings.promote_after,
                self.settings.max_error_ratio,
            );
        }
    }

    /// Promotes or rolls back when the counts say so, then keeps the new phase, records its
    /// Event and logs it; returns once the rollout is decided (pends in the meantime).
    pub(crate) async fn run(&self, resumed: Resumed) {
        if resumed.decided {
            // Resumed after the decision: nothing left to decide or say.
            return;
        }
        while self.phase() == Phase::Canary {
            tokio::select! {
                () = self.decided.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
            let now = tokio::time::Instant::now();
            let decided = self.window.lock().ok().and_then(|w| w.decide(now));
            match decided {
                Some(Decision::Promote) => {
                    self.switch(Phase::Promoted);
                }
                Some(Decision::RollBack) => {
                    self.switch(Phase::RolledBack);
                }
                None => {}
            }
        }
        self.announce(resumed.started).await;
    }

    /// Leaves the canary for `to`; returns whether this call did.
    fn switch(&self, to: Phase) -> bool {
        self.phase.send_if_modified(|p| {
            let canary = *p == Phase::Canary;
            if canary {
                *p = to;
            }
            canary
        })
    }

    /// Keeps the decided phase, logs it, records the Event and sets the metrics.
    async fn announce(&self, started: u64) {
        let phase = self.phase();
        let (active, candidate, limit) = match self.window.lock() {
            Ok(w) => (w.active, w.candidate, w.limit()),
            Err(_) => return,
        };
        crate::metrics::rollout(phase.as_str(), phase.share(self.settings.percent));
        let (reason, message, event_type) = match phase {
            Phase::Promoted => (
                "CandidatePromoted",
                format!(
                    "candidate {} promoted to every object: {} of its {} reconciles failed ({:.1}%, limit {:.1}%)",
                    self.candidate,
                    candidate.failed,
                    candidate.reconciles,
                    candidate.rate() * 100.0,
                    limit * 100.0
                ),
                EventType::Normal,
            ),
            _ => (
                "CandidateRolledBack",
                format!(
                    "candidate {} rolled back, the active revision {} reconciles every object again: {} of its {} reconciles failed ({:.1}%, limit {:.1}%, the active revision's {} of {})",
                    self.candidate,
                    self.active,
                    candidate.failed,
                    candidate.reconciles,
                    candidate.rate() * 100.0,
                    limit * 100.0,
                    active.failed,
                    active.reconciles
                ),
                EventType::Warning,
            ),
        };
        tracing::warn!(
            phase = phase.as_str(),
            candidate_reconciles = candidate.reconciles,
            candidate_failed = candidate.failed,
            active_reconciles = active.reconciles,
            active_failed = active.failed,
            limit,
            "canary rollout decided: {message}"
        );
        if let Err(e) = self.store.save(&self.saved(started)).await {
            tracing::error!(error = %e, "the canary rollout's decision cannot be kept; a restart runs the canary again");
        }
        if let Some((recorder, regarding)) = &self.events {
            let event = Event {
                type_: event_type,
                reason: reason.into(),
                note: Some(message),
                action: "Rollout".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, regarding).await {
                tracing::debug!(error = %e, "failed to publish the rollout event");
            }
        }
    }
}

/// One controller's side of the rollout: its candidate's controller.
struct Routing {
    candidate: Arc<Ctx>,
    rollout: Arc<Rollout>,
}

impl Route for Routing {
    fn candidate_for(&self, obj: &DynamicObject) -> Option<Arc<Ctx>> {
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        self.rollout.owns(uid).then(|| self.candidate.clone())
    }

    fn outcome(&self, candidate: bool, failed: bool) {
        self.rollout.outcome(candidate, failed);
    }

    fn moves(&self) -> BoxStream<'static, ()> {
        self.rollout.moves()
    }
}

impl Rollout {
    /// Whether the candidate reconciles the object with `uid` now.
    fn owns(&self, uid: &str) -> bool {
        match self.phase() {
            Phase::Canary => !uid.is_empty() && share::in_share(uid, self.settings.percent),
            Phase::Promoted => true,
            Phase::RolledBack => false,
        }
    }

    /// Counts one reconcile by the candidate or the active revision; rolls the candidate back
    /// at once when that puts it over its limit.
    fn outcome(&self, candidate: bool, failed: bool) {
        crate::metrics::rollout_reconciled(candidate, failed);
        if self.phase() != Phase::Canary {
            return;
        }
        let decided = self
            .window
            .lock()
            .ok()
            .and_then(|mut w| w.record(candidate, failed));
        if decided == Some(Decision::RollBack) && self.switch(Phase::RolledBack) {
            self.decided.notify_one();
        }
    }

    /// Yields each time the phase changes from now on.
    fn moves(&self) -> BoxStream<'static, ()> {
        let rx = self.phase.subscribe();
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        }))
    }
}

#[cfg(test)]
mod tests;
