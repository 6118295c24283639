//! The metrics of a canary rollout (`khai run --candidate-percent`): its phase, the share of
//! objects the candidate reconciles, and the reconciles of each revision by outcome, which the
//! promotion and rollback decision reads.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

/// The phases a rollout can be in, as `khai_rollout_phase` labels them.
pub(crate) const PHASES: [&str; 3] = ["canary", "promoted", "rolled-back"];

pub(super) struct RolloutMetrics {
    phase: IntGaugeVec,
    share: IntGaugeVec,
    reconciles: IntCounterVec,
}

impl RolloutMetrics {
    pub(super) fn new(r: &Registry) -> Self {
        Self {
            phase: super::gauge(
                r,
                "khai_rollout_phase",
                "1 for the phase the canary rollout is in (canary, promoted, rolled-back), 0 for the others",
                &["phase"],
            ),
            share: super::gauge(
                r,
                "khai_rollout_share",
                "Percent of the objects the candidate revision reconciles in the canary rollout",
                &[],
            ),
            reconciles: super::counter(
                r,
                "khai_rollout_reconciles_total",
                "Reconciles of the canary rollout's objects, by the revision that ran them (active, candidate) and outcome (ok, failed)",
                &["revision", "outcome"],
            ),
        }
    }
}

/// The rollout is in `phase` (one of [`PHASES`]), the candidate reconciling `share` percent of
/// the objects.
pub(crate) fn rollout(phase: &str, share: u8) {
    let m = &super::METRICS.rollout;
    for p in PHASES {
        m.phase.with_label_values(&[p]).set(i64::from(p == phase));
    }
    m.share
        .with_label_values(&[] as &[&str])
        .set(i64::from(share));
}

/// One reconcile of an object of the rollout, by the candidate or the active revision.
pub(crate) fn rollout_reconciled(candidate: bool, failed: bool) {
    let revision = if candidate { "candidate" } else { "active" };
    let outcome = if failed { "failed" } else { "ok" };
    super::METRICS
        .rollout
        .reconciles
        .with_label_values(&[revision, outcome])
        .inc();
}
