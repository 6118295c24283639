//! The sharder: on the replica holding the sharder Lease, keeps every parent labelled for a
//! live shard of the ring. Parents are watched metadata only, so its memory does not grow with
//! the size of the objects. Each sync it reads the shard Leases, takes over the Lease of a shard
//! that stopped renewing (so a shard that was only slow stops reconciling before its objects
//! move), and then, per parent: labels an unassigned one, relabels one of a dead shard, and
//! asks a live shard to let go of one the ring now gives to another (the drain label); the
//! shard acknowledges by removing both labels and the parent is then assigned anew.

use super::Settings;
use super::ring::Ring;
use crate::watch::Kind;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type Meta = PartialObjectMeta<DynamicObject>;

/// One parent kind in one namespace (or all), as the sharder watches it.
struct Parents {
    kind: Kind,
    store: Store<Meta>,
}

/// What one sync does to one parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Move {
    /// Label it for `to` (it had no shard, or a dead one: `from`).
    Assign { from: Option<String>, to: String },
    /// Ask its live shard to let go of it.
    Drain,
}

/// The membership as the sharder sees it: each shard Lease's record and when this replica first
/// saw it, so expiry is judged by the local clock, as leader election judges it.
#[derive(Default)]
pub(super) struct Members {
    seen: HashMap<String, (Option<String>, Option<String>, Instant)>,
    /// When the first live shard's Lease expires unless renewed: the sharder looks again then.
    pub(super) next_expiry: Option<Instant>,
}

/// One shard Lease, read.
pub(super) struct Member {
    lease: String,
    pub(super) shard: String,
    /// Holds its own Lease and renewed it within the Lease's duration.
    pub(super) live: bool,
    /// Expired while still naming the shard as holder: must be taken over before its objects
    /// move.
    expired: bool,
}

impl Members {
    pub(super) fn observe(
        &mut self,
        leases: &[Lease],
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
            let spec = l.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.filter(|h| !h.is_empty());
            let renew = spec.renew_time.map(|t| t.0.to_string());
            let first = match self.seen.get(&name) {
                Some((h, r, at)) if *h == holder && *r == renew => *at,
                _ => now,
            };
            let valid = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(default, Duration::from_secs);
            let held = holder.as_deref() == Some(shard.as_str());
            out.push(Member {
                live: held && now < first + valid,
                expired: held && now >= first + valid,
                lease: name.clone(),
                shard,
            });
            if held && now < first + valid {
                self.next_expiry = Some(
                    self.next_expiry
                        .map_or(first + valid, |e| e.min(first + valid)),
                );
            }
            seen.insert(name, (holder, renew, first));
        }
        self.seen = seen;
        out
    }
}

/// What to do with a parent labelled `current` (and `draining`) on `ring`, whose live shards
/// are the ring's; `None` when it is where it belongs, or waits for its shard to let go.
pub(crate) fn decide(
    ring: &Ring,
    key: &str,
    current: Option<&str>,
    draining: bool,
    may_move: bool,
) -> Option<Move> {
    let to = ring.owner(key)?;
    match current {
        None => Some(Move::Assign {
            from: None,
            to: to.to_string(),
        }),
        Some(c) if c == to => None,
        Some(c) if !ring.shards().iter().any(|s| s == c) => may_move.then(|| Move::Assign {
            from: Some(c.to_string()),
            to: to.to_string(),
        }),
        Some(_) if draining || !may_move => None,
        Some(_) => Some(Move::Drain),
    }
}

/// Runs the sharder while this replica holds the sharder Lease, until `shutdown`; `holding`
/// says whether it does.
pub(crate) async fn run(
    client: kube::Client,
    settings: Settings,
    kinds: Vec<(Kind, Option<String>)>,
    holding: tokio::sync::watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let mut elector = crate::leader::Elector::new(client.clone(), settings.sharder_lease());
    tokio::select! {
        () = elector.acquire() => {}
        () = shutdown.cancelled() => return,
    }
    tracing::info!(shard = %settings.id, "holding the sharder lease; assigning objects to shards");
    holding.send_replace(true);
    let changed = Arc::new(Notify::new());
    let mut watches = tokio::task::JoinSet::new();
    let parents: Vec<Parents> = kinds
        .into_iter()
        .map(|(kind, ns)| {
            let writer = Writer::new(kind.resource.clone());
            let store = writer.as_reader();
            // An `Api` of `PartialObjectMeta` lists and watches metadata only.
            let api: kube::Api<Meta> = match ns.as_deref() {
                Some(ns) if kind.namespaced => {
                    kube::Api::namespaced_with(client.clone(), ns, &kind.resource)
                }
                _ => kube::Api::all_with(client.clone(), &kind.resource),
            };
            let changed = changed.clone();
            let stream = reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff()
                .for_each(move |_| {
                    changed.notify_one();
                    futures::future::ready(())
                });
            watches.spawn(stream);
            Parents { kind, store }
        })
        .collect();
    let work = sync_loop(&client, &settings, &parents, &changed);
    tokio::select! {
        () = work => {}
        why = elector.hold() => tracing::warn!(reason = %why, "lost the sharder lease; another replica assigns objects now"),
        () = shutdown.cancelled() => {}
    }
    holding.send_replace(false);
    watches.abort_all();
    elector.release().await;
}

/// Syncs every retry period, and soon after a parent changes.
async fn sync_loop(client: &kube::Client, s: &Settings, parents: &[Parents], changed: &Notify) {
    let mut members = Members::default();
    // Moves wait one Lease duration after taking the sharder over: shards restarting at the
    // same time have then taken their Leases again, and a restart moves nothing.
    let settled = Instant::now() + s.lease_duration;
    for p in parents {
        p.store.wait_until_ready().await.ok();
    }
    let mut announced = false;
    loop {
        let may_move = Instant::now() >= settled;
        match sync(client, s, parents, &mut members, may_move).await {
            Ok(()) if may_move && !announced => {
                announced = true;
                tracing::info!(
                    settled = true,
                    "sharder settled: every parent is on its shard or being moved to it"
                );
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(error = %crate::client::ApiError::from(e), "sharder sync failed; retrying")
            }
        }
        tokio::select! {
            // At the next retry, or the moment a Lease would expire, whichever comes first: a
            // dead shard's objects move as soon as its Lease has run out.
            () = tokio::time::sleep_until(next_look(&members, s.retry_period)) => {}
            () = changed.notified() => {
                // Coalesce a burst of changes into one sync.
                tokio::time::sleep(COALESCE).await;
            }
        }
    }
}

/// When the sharder looks at the Leases next: after `retry`, or just past the next expiry.
fn next_look(members: &Members, retry: Duration) -> Instant {
    let retry = Instant::now() + retry;
    members
        .next_expiry
        .map_or(retry, |e| retry.min(e + Duration::from_millis(10)))
}

/// Label patches the sharder has in flight at once: moving a dead shard's thousand parents
/// one at a time would take seconds.
const PATCHES_AT_ONCE: usize = 16;

/// How long the sharder lets parent changes gather before a sync.
const COALESCE: Duration = Duration::from_millis(200);

async fn sync(
    client: &kube::Client,
    s: &Settings,
    parents: &[Parents],
    members: &mut Members,
    may_move: bool,
) -> Result<(), kube::Error> {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &s.namespace);
    let listed = leases
        .list(&ListParams::default().labels(&s.lease_selector()))
        .await?;
    let seen = members.observe(&listed.items, s.lease_duration, Instant::now());
    for m in seen.iter().filter(|m| m.expired && may_move) {
        // The holder stopped renewing: taking its Lease over makes it stop, should it come back,
        // before its objects move.
        let taken =
            crate::leader::take_over(client, &s.namespace, &m.lease, &s.id, s.lease_duration).await;
        match taken {
            Ok(_) => {
                tracing::info!(shard = %m.shard, lease = %m.lease, "took over the Lease of a shard that stopped renewing; moving its objects")
            }
            Err(e) => {
                tracing::warn!(shard = %m.shard, error = %crate::client::ApiError::from(e), "cannot take over the Lease of a dead shard")
            }
        }
    }
    let ring = Ring::new(seen.iter().filter(|m| m.live).map(|m| m.shard.as_str()));
    let label = s.label();
    let drain = s.drain_label();
    let mut owned: BTreeMap<String, i64> = ring.shards().iter().map(|s| (s.clone(), 0)).collect();
    let mut patches = Vec::new();
    for p in parents {
        for o in p.store.state() {
            let labels = o.metadata.labels.as_ref();
            let current = labels.and_then(|l| l.get(&label)).map(String::as_str);
            let draining = labels.is_some_and(|l| l.contains_key(&drain));
            let name = o.metadata.name.clone().unwrap_or_default();
            let ns = o.metadata.namespace.clone();
            let key = super::key(
                &p.kind.resource.group,
                &p.kind.resource.kind,
                ns.as_deref(),
                &name,
            );
            if let Some(c) = current {
                *owned.entry(c.to_string()).or_default() += 1;
            }
            if let Some(m) = decide(&ring, &key, current, draining, may_move) {
                let api = crate::watch::api(client, &p.kind, ns.as_deref());
                patches.push((api, name, o.metadata.resource_version.clone(), m));
            }
        }
    }
    let (label, drain) = (&label, &drain);
    let mut sent = futures::stream::iter(patches)
        .map(|(api, name, version, m)| async move {
            let labels = match &m {
                Move::Assign { to, .. } => json!({ label.as_str(): to, drain.as_str(): null }),
                Move::Drain => json!({ drain.as_str(): "true" }),
            };
            // The resourceVersion makes the patch fail if the object changed since it was seen
            // (a shard acknowledging a drain meanwhile): the next sync decides again.
            let patch = json!({ "metadata": { "resourceVersion": version, "labels": labels } });
            let sent = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            (name, m, sent)
        })
        .buffer_unordered(PATCHES_AT_ONCE);
    while let Some((name, m, sent)) = sent.next().await {
        match sent {
            Ok(_) => {
                crate::metrics::shard_moved(match &m {
                    Move::Assign { from: None, .. } => "assign",
                    Move::Assign { .. } => "move",
                    Move::Drain => "drain",
                });
                tracing::debug!(object = %name, change = ?m, "sharder relabelled an object");
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    crate::metrics::shard_objects(&owned);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assign(from: Option<&str>, to: &str) -> Option<Move> {
        Some(Move::Assign {
            from: from.map(str::to_string),
            to: to.into(),
        })
    }

    #[test]
    fn unassigned_objects_are_assigned_dead_shards_relabelled_live_ones_drained() {
        let ring = Ring::new(["a"]);
        assert_eq!(decide(&ring, "k", None, false, false), assign(None, "a"));
        assert_eq!(decide(&ring, "k", Some("a"), false, true), None);
        assert_eq!(
            decide(&ring, "k", Some("gone"), false, true),
            assign(Some("gone"), "a")
        );
        // Freshly holding the sharder Lease: nothing moves yet, unassigned objects are labelled.
        assert_eq!(decide(&ring, "k", Some("gone"), false, false), None);
        let two = Ring::new(["a", "b"]);
        let key = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| two.owner(k) == Some("b"))
            .unwrap();
        assert_eq!(
            decide(&two, &key, Some("a"), false, true),
            Some(Move::Drain)
        );
        assert_eq!(
            decide(&two, &key, Some("a"), true, true),
            None,
            "waits for the ack"
        );
        assert_eq!(decide(&Ring::new([]), "k", None, false, true), None);
    }

    fn lease(shard: &str, holder: Option<&str>, renew: &str) -> Lease {
        serde_json::from_value(json!({
            "metadata": { "name": format!("l-{shard}"), "labels": { super::super::LEASE_SHARD: shard } },
            "spec": { "holderIdentity": holder, "leaseDurationSeconds": 10, "renewTime": renew },
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_shard_is_live_until_its_lease_goes_unrenewed_for_its_duration_or_is_released() {
        let mut m = Members::default();
        let d = Duration::from_secs(15);
        let t0 = Instant::now();
        let r1 = "2026-01-01T00:00:00.000000Z";
        let seen = m.observe(&[lease("a", Some("a"), r1), lease("b", None, r1)], d, t0);
        assert!(seen[0].live && !seen[0].expired);
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
}
