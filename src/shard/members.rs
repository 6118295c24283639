//! The shard membership as the sharder sees it: a watch on the operator's shard Leases (a
//! handful of small objects, so cached in full) and, for each, whether its shard is live. A
//! Lease released on SIGTERM or taken over is seen the moment it changes, and an expired one is
//! judged at its expiry by the local clock, as leader election judges it.

use super::Settings;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A Lease's holder and renew time, as a change of either restarts its duration.
type Record = (Option<String>, Option<String>);

/// Each shard Lease's record and when this replica first saw it.
#[derive(Default)]
pub(super) struct Members {
    seen: HashMap<String, (Record, Instant)>,
    /// When the first live shard's Lease expires unless renewed: the sharder looks again then.
    pub next_expiry: Option<Instant>,
}

/// One shard Lease, read.
#[derive(Debug)]
pub(super) struct Member {
    pub lease: String,
    pub shard: String,
    /// Holds its own Lease and renewed it within the Lease's duration.
    pub live: bool,
    /// Expired while still naming the shard as holder: must be taken over before its objects
    /// move.
    pub expired: bool,
}

fn record(l: &Lease) -> Record {
    let spec = l.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let renew = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0.to_string());
    (holder, renew)
}

impl Members {
    /// Notes that the watch delivered `lease` at `now`: a new holder or renewal is timed from
    /// here.
    pub(super) fn saw(&mut self, lease: &Lease, now: Instant) {
        let Some(name) = lease.metadata.name.clone() else {
            return;
        };
        let record = record(lease);
        if self.seen.get(&name).is_none_or(|(r, _)| *r != record) {
            self.seen.insert(name, (record, now));
        }
    }

    /// Forgets a Lease the watch saw deleted.
    pub(super) fn gone(&mut self, lease: &Lease) {
        if let Some(name) = &lease.metadata.name {
            self.seen.remove(name);
        }
    }

    /// Reads `leases` at `now`; `default` is the duration of a Lease that states none.
    pub(super) fn observe(
        &mut self,
        leases: &[Arc<Lease>],
        default: Duration,
        now: Instant,
    ) -> Vec<Member> {
        let mut out = Vec::new();
        let mut seen = HashMap::new();
        self.next_expiry = None;
        for l in leases {
            let (Some(name), Some(shard)) = (
                l.metadata.name.clone(),
                l.metadata
                    .labels
                    .as_ref()
                    .and_then(|m| m.get(super::LEASE_SHARD))
                    .cloned(),
            ) else {
                continue;
            };
            let record = record(l);
            let first = match self.seen.get(&name) {
                Some((r, at)) if *r == record => *at,
                _ => now,
            };
            let valid = l
                .spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map_or(default, Duration::from_secs);
            let held = record.0.as_deref() == Some(shard.as_str());
            let live = held && now < first + valid;
            out.push(Member {
                live,
                expired: held && !live,
                lease: name.clone(),
                shard,
            });
            if live {
                let at = first + valid;
                self.next_expiry = Some(self.next_expiry.map_or(at, |e| e.min(at)));
            }
            seen.insert(name, (record, first));
        }
        self.seen = seen;
        out
    }
}

/// Judges the Leases in `leases` at `now` with the records the watch noted in `members`
/// (`default` as in [`Members::observe`]); also when the first live one expires. The cache is
/// read under the lock, so a change the watch has applied but not yet noted is timed from now,
/// and the watch's later note of it keeps that time.
pub(super) fn judge(
    leases: &Store<Lease>,
    members: &Mutex<Members>,
    default: Duration,
    now: Instant,
) -> (Vec<Member>, Option<Instant>) {
    let mut members = crate::sync::lock(members);
    let seen = members.observe(&leases.state(), default, now);
    (seen, members.next_expiry)
}

/// Watches the shard Leases of the operator: their cache, and the task that keeps it, which
/// notes each change in `members` as it arrives and wakes `changed`.
pub(super) fn watch(
    client: &kube::Client,
    s: &Settings,
    members: Arc<Mutex<Members>>,
    changed: Arc<Notify>,
) -> (Store<Lease>, impl Future<Output = ()> + use<>) {
    let api: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &s.namespace);
    let writer = Writer::default();
    let store = writer.as_reader();
    let config = watcher::Config::default().labels(&s.lease_selector());
    let task = reflector(writer, watcher(api, config))
        .default_backoff()
        .for_each(move |e| {
            match &e {
                Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                    crate::sync::lock(&members).saw(l, Instant::now());
                }
                Ok(watcher::Event::Delete(l)) => crate::sync::lock(&members).gone(l),
                _ => {}
            }
            changed.notify_one();
            futures::future::ready(())
        });
    (store, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn lease(shard: &str, holder: Option<&str>, renew: &str) -> Arc<Lease> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": { "name": format!("l-{shard}"), "labels": { super::super::LEASE_SHARD: shard } },
                "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10, "renewTime": renew },
            }))
            .unwrap(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_live_until_its_lease_goes_unrenewed_for_its_duration_or_is_released() {
        let mut m = Members::default();
        let d = Duration::from_secs(15);
        let t0 = Instant::now();
        let r1 = "2026-01-01T00:00:00.000000Z";
        let seen = m.observe(&[lease("a", Some("a"), r1), lease("b", None, r1)], d, t0);
        assert!(seen[0].live && !seen[0].expired);
        assert_eq!(m.next_expiry, Some(t0 + Duration::from_secs(10)));
        assert!(
            !seen[1].live && !seen[1].expired,
            "released: gone at once, nothing to take over"
        );
        let t1 = t0 + Duration::from_secs(11);
        let seen = m.observe(&[lease("a", Some("a"), r1)], d, t1);
        assert!(
            !seen[0].live && seen[0].expired,
            "not renewed for 11 s of 10"
        );
        let r2 = "2026-01-01T00:00:09.000000Z";
        let seen = m.observe(&[lease("a", Some("a"), r2)], d, t1);
        assert!(
            seen[0].live,
            "renewed: live again, judged from when it was seen"
        );
        let seen = m.observe(&[lease("a", Some("sharder"), r2)], d, t1);
        assert!(!seen[0].live && !seen[0].expired, "taken over");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_is_timed_from_when_the_watch_delivered_it_not_from_the_next_look() {
        let mut m = Members::default();
        let d = Duration::from_secs(15);
        let t0 = Instant::now();
        let r1 = "2026-01-01T00:00:00.000000Z";
        let a = lease("a", Some("a"), r1);
        m.saw(&a, t0);
        // The sharder was busy: it looks 4 s later, and again once 10 s have passed since the
        // renewal arrived.
        let later = t0 + Duration::from_secs(4);
        assert!(m.observe(std::slice::from_ref(&a), d, later)[0].live);
        assert_eq!(m.next_expiry, Some(t0 + Duration::from_secs(10)));
        m.saw(&a, later);
        let due = t0 + Duration::from_secs(10) + Duration::from_millis(1);
        assert!(
            m.observe(std::slice::from_ref(&a), d, due)[0].expired,
            "the same renewal delivered again does not restart its duration"
        );
        m.gone(&a);
        assert!(
            m.observe(&[a], d, due)[0].live,
            "a Lease deleted and seen again is timed afresh"
        );
    }
}
