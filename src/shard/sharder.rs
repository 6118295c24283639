//! The sharder: on the replica holding the sharder Lease, keeps every parent labelled for a
//! live shard of the ring, and its children and related objects with it. It watches the shard
//! Leases ([`members`]) and, to hear of new parents (and related objects) soon, a metadata watch
//! of the unassigned ones only; everything else it reads by paged lists ([`passes`]), so what
//! it holds does not grow with the number of objects. When a shard's Lease is released, or has
//! expired and the sharder has taken it over, the shard's children and related objects and then
//! its parents are relabelled for the live shards; when the membership changes otherwise (a
//! shard joins), parents the ring gives to another live shard are drained: the shard
//! acknowledges by removing their shard label, and they are assigned anew, children first.
//!
//! [`members`]: super::members
//! [`passes`]: super::passes

use super::Settings;
use super::kinds::Sharded;
use super::members::{self, Members};
use super::pages::PAGE;
use super::passes::Passes;
use super::ring::Ring;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the sharder lets new parents gather before assigning them.
const COALESCE: Duration = Duration::from_millis(200);

/// Every assigned parent is checked against the ring this often, besides membership changes:
/// the fallback for anything the other passes missed.
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the sharder whenever this replica holds the sharder Lease, until `shutdown`: a replica
/// that loses the Lease (a renewal missed its deadline) competes for it again. `holding` says
/// whether it holds it now, for the work that runs on the sharder's replica only.
pub(crate) async fn run(
    client: kube::Client,
    settings: Settings,
    kinds: Sharded,
    holding: tokio::sync::watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let mut elector = crate::leader::Elector::new(client.clone(), settings.sharder_lease());
    loop {
        tokio::select! {
            () = elector.acquire() => {}
            () = shutdown.cancelled() => return,
        }
        tracing::info!(shard = %settings.id, "holding the sharder lease; assigning objects to shards");
        holding.send_replace(true);
        tokio::select! {
            () = assign(&client, &settings, &kinds) => {}
            why = elector.hold() => tracing::warn!(reason = %why, "lost the sharder lease; another replica assigns objects now"),
            () = shutdown.cancelled() => {}
        }
        holding.send_replace(false);
        elector.release().await;
        if shutdown.is_cancelled() {
            return;
        }
    }
}

/// The sharder's work while it holds the Lease; runs until dropped.
async fn assign(client: &kube::Client, settings: &Settings, kinds: &Sharded) {
    let leases_changed = Arc::new(Notify::new());
    let unassigned = Arc::new(Notify::new());
    let mut watches = tokio::task::JoinSet::new();
    let members = Arc::new(Mutex::new(Members::default()));
    let (leases, task) = members::watch(client, settings, members.clone(), leases_changed.clone());
    watches.spawn(task);
    let label = settings.label();
    // Parents without a shard label (through their controllers' filters), and related objects
    // naming a parent without one.
    let parents = kinds.parents.iter().map(|p| {
        let unlabelled = super::narrowed(&p.filter, &format!("!{label}"));
        (&p.kind, p.namespace.as_deref(), unlabelled)
    });
    let related = kinds.related.iter().map(|l| {
        let unlabelled = super::narrowed(
            &crate::watch::Filter::default(),
            &format!("{},!{label}", l.label),
        );
        (&l.related, l.namespace.as_deref(), unlabelled)
    });
    for (kind, ns, unlabelled) in parents.chain(related) {
        // An `Api` of `PartialObjectMeta` watches metadata only.
        let api = match ns {
            Some(ns) if kind.namespaced => {
                kube::Api::namespaced_with(client.clone(), ns, &kind.resource)
            }
            _ => kube::Api::all_with(client.clone(), &kind.resource),
        };
        watches.spawn(watch_unassigned(api, &unlabelled, unassigned.clone()));
    }
    let wake = Wake {
        leases: &leases_changed,
        unassigned: &unassigned,
    };
    // The watches are aborted when the JoinSet is dropped with this future.
    sync_loop(client, settings, kinds, (&leases, &members), wake).await;
}

/// Wakes `changed` whenever an object `unlabelled` picks (a parent through its controllers'
/// filters, or a related object, without a shard label) appears or changes. The watch selects only those, so its stream
/// carries only them, and it keeps no cache.
fn watch_unassigned(
    api: kube::Api<PartialObjectMeta<DynamicObject>>,
    unlabelled: &crate::watch::Filter,
    changed: Arc<Notify>,
) -> impl Future<Output = ()> + use<> {
    let mut config = watcher::Config::default();
    if let Some(l) = &unlabelled.labels {
        config = config.labels(l);
    }
    if let Some(f) = &unlabelled.fields {
        config = config.fields(f);
    }
    watcher(api, config).default_backoff().for_each(move |e| {
        if matches!(
            e,
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_))
        ) {
            changed.notify_one();
        }
        futures::future::ready(())
    })
}

/// What wakes the sharder besides its timers.
struct Wake<'a> {
    leases: &'a Notify,
    unassigned: &'a Notify,
}

/// The sharder's state between passes; nothing in it grows with the number of objects.
struct State<'a> {
    /// Kept current by the Lease watch as well ([`members::watch`]).
    members: &'a Mutex<Members>,
    /// When the first live shard's Lease expires unless renewed, at the last look.
    next_expiry: Option<Instant>,
    /// Moves wait one Lease duration after taking the sharder over: shards restarting at the
    /// same time have then taken their Leases again, and a restart moves nothing.
    settled: Instant,
    announced: bool,
    /// The ring of the live shards at the last look: placed again only when they change.
    live: Ring,
    /// The ring at the last pass over every assigned parent, and when the next is due.
    ring: Option<Vec<String>>,
    full_due: Instant,
    unassigned_due: Instant,
    /// Dead shards whose objects have all been moved, until their Lease changes again: one
    /// entry per shard Lease at most.
    cleared: BTreeSet<String>,
}

/// The shard Leases: the watch's cache, and each one's record as the watch delivered it.
type Leases<'a> = (&'a Store<Lease>, &'a Mutex<Members>);

async fn sync_loop(
    client: &kube::Client,
    s: &Settings,
    kinds: &Sharded,
    (leases, members): Leases<'_>,
    wake: Wake<'_>,
) {
    let now = Instant::now();
    let mut state = State {
        members,
        next_expiry: None,
        settled: now + s.lease_duration,
        announced: false,
        live: Ring::default(),
        ring: None,
        full_due: now,
        unassigned_due: now,
        cleared: BTreeSet::new(),
    };
    let passes = Passes {
        client,
        kinds,
        label: s.label(),
        drain: s.drain_label(),
        page: PAGE,
    };
    leases.wait_until_ready().await.ok();
    loop {
        step(client, s, &passes, leases, &mut state).await;
        let mut next = state.unassigned_due;
        if let Some(e) = state.next_expiry {
            // Just past the expiry, so the Lease is judged expired then.
            next = next.min(e + Duration::from_millis(10));
        }
        if Instant::now() < state.settled {
            next = next.min(state.settled);
        } else {
            next = next.min(state.full_due);
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = wake.leases.notified() => {}
            () = wake.unassigned.notified() => {
                // Coalesce a burst of new parents into one pass.
                tokio::time::sleep(COALESCE).await;
                state.unassigned_due = Instant::now();
            }
        }
    }
}

/// One look at the membership, and the passes it calls for: a dead shard's objects first, as
/// they wait for nobody else, then unassigned parents, then (membership changed, or the resync
/// is due) every assigned parent.
async fn step(
    client: &kube::Client,
    s: &Settings,
    passes: &Passes<'_>,
    leases: &Store<Lease>,
    state: &mut State<'_>,
) {
    let now = Instant::now();
    let may_move = now >= state.settled;
    let (seen, next_expiry) = members::judge(leases, state.members, s.lease_duration, now);
    state.next_expiry = next_expiry;
    state
        .live
        .set(seen.iter().filter(|m| m.live).map(|m| m.shard.as_str()));
    // Taken for the passes and put back at the end: a step is never cut short.
    let ring = std::mem::take(&mut state.live);
    state
        .cleared
        .retain(|c| seen.iter().any(|m| !m.live && m.shard == *c));
    let mut dead = Vec::new();
    // A shard whose expired Lease could not be taken over may still be reconciling: none of
    // its objects moves, by any pass, until the Lease is taken over.
    let mut held = false;
    for m in seen.iter().filter(|m| !m.live && may_move) {
        if state.cleared.contains(&m.shard) {
            continue;
        }
        if m.expired {
            // The holder stopped renewing: taking its Lease over makes it stop, should it come
            // back, before its objects move.
            let taken =
                crate::leader::take_over(client, &s.namespace, &m.lease, &s.id, s.lease_duration)
                    .await;
            if let Err(e) = taken {
                held = true;
                tracing::warn!(shard = %m.shard, error = %crate::client::ApiError::from(e), "cannot take over the Lease of a dead shard");
                continue;
            }
            tracing::info!(shard = %m.shard, lease = %m.lease, "took over the Lease of a shard that stopped renewing; moving its objects");
        }
        dead.push(m.shard.clone());
    }
    let mut failed = false;
    let mut fail = |what: &str, e: kube::Error| {
        failed = true;
        tracing::warn!(pass = what, error = %crate::client::ApiError::from(e), "sharder pass failed; retrying");
    };
    // With no live shard, there is nowhere to move to: the objects wait.
    let dead = if ring.shards().is_empty() {
        Vec::new()
    } else {
        dead
    };
    for d in dead {
        match passes.dead(&ring, &d).await {
            Ok(t) => {
                tracing::info!(shard = %d, moved = t.written, left = t.stale, "moved the objects of a shard that is gone");
                if t.stale == 0 {
                    state.cleared.insert(d);
                }
            }
            Err(e) => fail("dead", e),
        }
    }
    if now >= state.unassigned_due {
        state.unassigned_due = now + s.retry_period;
        if let Err(e) = passes.unassigned(&ring).await {
            fail("unassigned", e);
        }
    }
    let changed = state.ring.as_deref() != Some(ring.shards());
    if held {
        // Try the take-over again after a retry period.
        state.full_due = now + s.retry_period;
    } else if may_move && (changed || now >= state.full_due) {
        match passes.full(&ring).await {
            Ok((owned, _)) => {
                crate::metrics::shard_objects(&owned);
                state.ring = Some(ring.shards().to_vec());
                state.full_due = Instant::now() + RESYNC;
            }
            Err(e) => {
                state.full_due = now + s.retry_period;
                fail("full", e);
            }
        }
    }
    if may_move && !failed && !held && !state.announced {
        state.announced = true;
        tracing::info!(
            settled = true,
            "sharder settled: every parent is on its shard or being moved to it"
        );
    }
    state.live = ring;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fake::Fake;
    use crate::shard::fake::PARTS;
    use crate::shard::passes::tests::kinds;
    use kube::runtime::reflector::store::Writer;
    use serde_json::json;

    fn lease(shard: &str, holder: Option<&str>) -> Lease {
        serde_json::from_value(json!({
            "metadata": { "name": format!("l-{shard}"), "labels": { crate::shard::LEASE_SHARD: shard } },
            "spec": { "holderIdentity": holder, "leaseDurationSeconds": 3600,
                      "renewTime": "2026-01-01T00:00:00.000000Z" },
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_moves_its_shards_objects_without_waiting_for_a_retry_period() {
        let ring = Ring::new(["a", "b"]);
        let name = (0..100)
            .map(|i| format!("p{i}"))
            .find(|n| ring.owner(&crate::shard::key("x.dev", "Part", Some("ns"), n)) == Some("b"))
            .unwrap();
        let fake = Fake::default();
        fake.add(PARTS, &name, json!({ "shard.khai.dev/op": "b" }), json!({}));
        let client = fake.client();
        let mut s = crate::shard::tests::settings("op", "a");
        s.lease_duration = Duration::from_secs(10);
        s.retry_period = Duration::from_secs(3600);
        let mut writer: Writer<Lease> = Writer::default();
        let store = writer.as_reader();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(lease("a", Some("a"))));
        writer.apply_watcher_event(&watcher::Event::InitApply(lease("b", Some("b"))));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let (leases, unassigned) = (Notify::new(), Notify::new());
        let kinds = kinds();
        let wake = Wake {
            leases: &leases,
            unassigned: &unassigned,
        };
        let members = Mutex::new(Members::default());
        let work = sync_loop(&client, &s, &kinds, (&store, &members), wake);
        tokio::pin!(work);
        // Past the first Lease duration: the sharder may move objects, and has looked at all.
        tokio::select! {
            () = &mut work => unreachable!("the sync loop ends only when dropped"),
            () = tokio::time::sleep(Duration::from_secs(11)) => {}
        }
        let moved = format!("PATCH {PARTS}/{name}");
        assert!(!fake.log().iter().any(|l| l.starts_with(&moved)));
        // Shard b stops and releases its Lease.
        writer.apply_watcher_event(&watcher::Event::Apply(lease("b", None)));
        leases.notify_one();
        tokio::select! {
            () = &mut work => unreachable!("the sync loop ends only when dropped"),
            () = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
        let log = fake.log();
        assert!(
            log.iter()
                .any(|l| l.starts_with(&moved) && l.contains(r#""shard.khai.dev/op":"a""#)),
            "{log:#?}"
        );
    }
}
