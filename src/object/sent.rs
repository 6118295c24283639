//! What khai sent about one object, its children and its own status, that the cache may not
//! show yet.
//!
//! Two questions are answered from it:
//!
//! - **Already written?** A reconcile running from a cache that does not show khai's last write
//!   yet would send the same write again. A write is recorded with the hash of what was sent,
//!   the resourceVersion the cache showed when it was sent, and the version its answer says it
//!   made; while the cache shows a version from before the write, the same hash is not sent
//!   again ([`Sent::already_written`]), for at most [`TRUST_FOR`]: a watch lags behind the writes
//!   that cause it by milliseconds to seconds, and a child created and deleted again while the
//!   watch was down shows as absent in the cache, just as before khai created it.
//!
//!   "From before the write" is decided by comparing versions
//!   ([`super::resource_version`]): versions up to the newest khai knew of when it sent the
//!   write (the one it read, or what its own previous write made), and versions below the one
//!   the write made. That matters after an outage, when the watch delivers a burst late: the
//!   event of khai's previous status write can arrive after its next one was sent, and is older
//!   than that write, not newer. Versions that do not compare fall back to equality with the
//!   version read.
//! - **Echo?** A child khai applies comes back through its kind's watch, and the owned-children
//!   trigger would queue the parent once more for a reconcile that finds nothing to do
//!   ("expectations", as controller-runtime calls them). Before each apply request goes out,
//!   khai records the body it sends ([`Sent::expect`]). A child's watch event is then an echo,
//!   and triggers nothing, when all of these hold (`crate::apply::is_echo`):
//!   - it is not a deletion (a deleted child always triggers, and is recreated);
//!   - its parent's last reconcile recorded it: that reconcile read nothing but its object
//!     (`crate::effects::Reads`), so the child's state cannot change its plan;
//!   - the child holds everything khai sent, as the applier's own "nothing to write" compare
//!     sees it. Someone else's edit of a field khai manages fails this and triggers, so drift
//!     is repaired as before.
//!
//!   Deciding on content, not on the resourceVersion the apply returns, is what makes the record
//!   usable before the response is in: under load the watch event often arrives first.
//!
//! Bounds: an echo is consumed by its echo, and all of an object's go when its next reconcile
//! starts; a write's record goes when the watch shows its target at a version not from before
//! the write (the write arrived, or a newer one: [`Sent::shown`]), with the child's
//! deletion, and with the plan that no longer has the child; all go with the object. What is
//! held is bounded by the children of the objects that exist, never by how many were ever
//! created, and in a steady cluster nothing is held at all.
//!
//! Memory: an object has a handful of records at most while its writes are on their way, so they
//! are kept in a small sorted `Vec`, and a write is remembered by its 64-bit hash.

use super::resource_version::{newest, order};
use crate::watch::Kind;
use serde_json::Value;
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long a write is taken as on its way while the cache does not show it.
pub const TRUST_FOR: Duration = Duration::from_secs(30);

/// What a write was about.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Target {
    /// The object's own `.status`, as its `reconcile` plans it.
    Status,
    /// The fields of its `.status` its handlers, timers and daemons return.
    HandlerStatus,
    /// One of its children.
    Child(ChildId),
}

/// A child: its kind's group and kind, its namespace (for a namespaced kind) and its name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ChildId {
    group: String,
    kind: String,
    namespace: Option<String>,
    /// The child's name.
    pub name: String,
}

impl ChildId {
    /// The child `namespace/name` of kind `kind`.
    pub fn new(kind: &Kind, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: kind.resource.group.clone(),
            kind: kind.resource.kind.clone(),
            namespace: namespace.filter(|_| kind.namespaced).map(str::to_string),
            name: name.to_string(),
        }
    }

    /// Whether the child is of kind `kind`.
    pub fn is_of(&self, kind: &Kind) -> bool {
        self.group == kind.resource.group && self.kind == kind.resource.kind
    }

    /// The child's namespace, for a namespaced kind.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

/// What khai sent about one object.
#[derive(Debug, Default)]
pub struct Sent {
    /// Sorted by target.
    records: Vec<(Target, Record)>,
    /// The handler annotations (`last-handled`, `progress`) khai wrote last, until the cache
    /// shows them (`crate::handler`).
    pub(crate) annotations: Option<Box<Annotated>>,
}

/// The handler annotations khai wrote to an object, and when.
#[derive(Debug, Clone)]
pub(crate) struct Annotated {
    pub last: Option<String>,
    pub progress: Option<String>,
    pub at: Instant,
}

#[derive(Debug, Default)]
struct Record {
    /// The write sent, while the cache may not show it.
    written: Option<Written>,
    /// What was sent, as the API server stores it, while its watch event is expected.
    echo: Option<Arc<Value>>,
}

#[derive(Debug)]
struct Written {
    /// The resourceVersion the cache showed when it was sent (`""`: absent).
    from: Box<str>,
    /// The newest version khai knew of when it sent it, if versions compare: the one read, or
    /// the one its previous write to the target made. Every version up to it predates the write.
    floor: Option<Box<str>>,
    /// The version the write made, once its answer says.
    made: Option<Box<str>>,
    /// The hash of what was sent.
    hash: u64,
    at: Instant,
}

impl Written {
    /// Whether a cache showing the target at `rv` does not show this write yet.
    fn pending_at(&self, rv: &str) -> bool {
        if let Some(o) = self.made.as_deref().and_then(|made| order(rv, made)) {
            return o == Ordering::Less;
        }
        &*self.from == rv
            || self.made.is_none()
                && self
                    .floor
                    .as_deref()
                    .and_then(|floor| order(rv, floor))
                    .is_some_and(|o| o != Ordering::Greater)
    }
}

impl Record {
    fn is_empty(&self) -> bool {
        self.written.is_none() && self.echo.is_none()
    }
}

impl Sent {
    fn find(&self, target: &Target) -> Result<usize, usize> {
        self.records.binary_search_by(|(t, _)| t.cmp(target))
    }

    fn get(&self, target: &Target) -> Option<&Record> {
        self.find(target).ok().map(|i| &self.records[i].1)
    }

    /// `target`'s record, a new empty one if it has none.
    fn entry(&mut self, target: Target) -> &mut Record {
        let i = match self.find(&target) {
            Ok(i) => i,
            Err(i) => {
                self.records.insert(i, (target, Record::default()));
                i
            }
        };
        &mut self.records[i].1
    }

    /// Runs `f` on `target`'s record, if it has one, and drops the record if `f` leaves it
    /// empty.
    fn edit<R>(&mut self, target: &Target, f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        let i = self.find(target).ok()?;
        let out = f(&mut self.records[i].1);
        if self.records[i].1.is_empty() {
            self.records.remove(i);
        }
        Some(out)
    }

    /// Whether khai already wrote `hash` to `target` and the version the cache shows (`seen`,
    /// `""` when absent) is from before that write: the write is on its way and need not be
    /// repeated. A record the cache has caught up with, or too old to trust, is dropped.
    pub fn already_written(&mut self, target: &Target, seen: &str, hash: u64) -> bool {
        self.edit(target, |r| match &r.written {
            Some(w) if w.at.elapsed() <= TRUST_FOR && w.pending_at(seen) => w.hash == hash,
            Some(_) => {
                r.written = None;
                false
            }
            None => false,
        })
        .unwrap_or(false)
    }

    /// khai is about to write `hash` to `target` while the cache shows resourceVersion `from`
    /// (`""`: absent). Recorded before the request goes, as its watch event may arrive before its
    /// response; [`Sent::unwritten`] takes it back if the request fails.
    pub fn written(&mut self, target: Target, from: &str, hash: u64) {
        let r = self.entry(target);
        let before = r.written.as_ref();
        let known = [
            Some(from),
            before.and_then(|w| w.floor.as_deref()),
            before.and_then(|w| w.made.as_deref()),
        ];
        let floor = newest(known.into_iter().flatten()).map(Into::into);
        r.written = Some(Written {
            from: from.into(),
            floor,
            made: None,
            hash,
            at: Instant::now(),
        });
    }

    /// The write of `hash` to `target` made resourceVersion `rv`, as its answer says.
    pub fn made(&mut self, target: &Target, hash: u64, rv: &str) {
        self.edit(target, |r| {
            if let Some(w) = r.written.as_mut().filter(|w| w.hash == hash) {
                w.made = Some(rv.into());
            }
        });
    }

    /// The write to `target` recorded with `hash` failed: it is not on its way.
    pub fn unwritten(&mut self, target: &Target, hash: u64) {
        self.edit(target, |r| {
            if r.written.as_ref().is_some_and(|w| w.hash == hash) {
                r.written = None;
            }
        });
    }

    /// The watch shows `target` at resourceVersion `rv`: unless that is from before khai's write,
    /// the write has arrived (or been overtaken), so the cache answers for it from now on.
    pub fn shown(&mut self, target: &Target, rv: &str) {
        self.edit(target, |r| {
            if r.written.as_ref().is_some_and(|w| !w.pending_at(rv)) {
                r.written = None;
            }
        });
    }

    /// The watch shows the object itself at resourceVersion `rv`: [`Sent::shown`] for its
    /// status writes.
    pub fn shown_object(&mut self, rv: &str) {
        self.shown(&Target::Status, rv);
        self.shown(&Target::HandlerStatus, rv);
    }

    /// khai is about to send `sent` (as the server will store it) for `child`, and expects its
    /// watch event back.
    pub fn expect(&mut self, child: ChildId, sent: Arc<Value>) {
        self.entry(Target::Child(child)).echo = Some(sent);
    }

    /// What khai sent for `child` and expects back, if anything.
    pub fn echo(&self, child: &ChildId) -> Option<Arc<Value>> {
        self.get(&Target::Child(child.clone()))
            .and_then(|r| r.echo.clone())
    }

    /// The echo of `child` came back: the record compared (`sent`) is consumed; a newer one (the
    /// object reconciled meanwhile) stays.
    pub fn echoed(&mut self, child: &ChildId, sent: &Arc<Value>) {
        self.edit(&Target::Child(child.clone()), |r| {
            if r.echo.as_ref().is_some_and(|s| Arc::ptr_eq(s, sent)) {
                r.echo = None;
            }
        });
    }

    /// Forgets every echo expected: the object's reconcile starts again, and what it will read
    /// is not known yet.
    pub fn forget_echoes(&mut self) {
        self.records.retain_mut(|(_, r)| {
            r.echo = None;
            !r.is_empty()
        });
    }

    /// `child` is gone: nothing about it is kept.
    pub fn deleted(&mut self, child: &ChildId) {
        if let Ok(i) = self.find(&Target::Child(child.clone())) {
            self.records.remove(i);
        }
    }

    /// Keeps the records of the children `wanted` says the object still has.
    pub fn retain_children(&mut self, wanted: impl Fn(&ChildId) -> bool) {
        self.records.retain(|(t, _)| match t {
            Target::Child(c) => wanted(c),
            Target::Status | Target::HandlerStatus => true,
        });
    }

    /// The children khai created (applied while the cache did not have them).
    pub fn created(&self) -> impl Iterator<Item = &ChildId> {
        self.records
            .iter()
            .filter_map(|(t, r)| match (t, &r.written) {
                (Target::Child(c), Some(w)) if w.from.is_empty() => Some(c),
                _ => None,
            })
    }

    /// How many echoes are expected.
    pub fn echoes(&self) -> usize {
        self.records
            .iter()
            .filter(|(_, r)| r.echo.is_some())
            .count()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.annotations.is_none()
    }

    /// Whether nothing kept matters at `now`: no echo expected, no handler annotations, and
    /// only writes older than [`TRUST_FOR`], which [`Sent::already_written`] no longer trusts.
    pub(crate) fn is_idle(&self, now: Instant) -> bool {
        self.annotations.is_none()
            && self.records.iter().all(|(_, r)| {
                r.echo.is_none() && r.written.as_ref().is_none_or(|w| now - w.at > TRUST_FOR)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(name: &str) -> ChildId {
        ChildId::new(&Kind::configmaps(), Some("ns"), name)
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_holds_while_the_cache_shows_the_version_it_was_sent_from() {
        let mut s = Sent::default();
        let t = Target::Child(child("a"));
        assert!(!s.already_written(&t, "1", 1));
        s.written(t.clone(), "1", 1);
        assert!(
            s.already_written(&t, "1", 1),
            "the same write from the same version"
        );
        assert!(!s.already_written(&t, "1", 2), "a different write");
        assert!(!s.already_written(&t, "2", 1), "the cache moved on");
        assert!(s.is_empty(), "the stale record is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_the_cache_never_shows_is_trusted_for_a_while_only() {
        let mut s = Sent::default();
        let t = Target::Child(child("a"));
        s.written(t.clone(), "", 1);
        tokio::time::advance(TRUST_FOR).await;
        assert!(!s.is_idle(Instant::now()));
        assert!(s.already_written(&t, "", 1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(s.is_idle(Instant::now()), "a sweep may take it");
        assert!(
            !s.already_written(&t, "", 1),
            "created and deleted unseen: sent again"
        );
        assert!(s.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_echo_is_consumed_once_and_all_go_when_the_reconcile_starts_again() {
        let mut s = Sent::default();
        let sent = Arc::new(json!({"data": {"k": "v"}}));
        s.expect(child("a"), sent.clone());
        s.written(Target::Child(child("a")), "", 1);
        assert_eq!(s.echoes(), 1);
        let newer = Arc::new(json!({"data": {"k": "w"}}));
        s.expect(child("a"), newer.clone());
        s.echoed(&child("a"), &sent);
        assert_eq!(s.echoes(), 1, "a newer record stays");
        s.echoed(&child("a"), &newer);
        assert_eq!(s.echoes(), 0);
        assert_eq!(s.created().count(), 1, "the write record stays");
        s.expect(child("b"), sent);
        s.forget_echoes();
        assert_eq!(s.echoes(), 0);
        s.deleted(&child("a"));
        assert!(s.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn records_of_children_the_plan_no_longer_has_go() {
        let mut s = Sent::default();
        s.written(Target::Child(child("a")), "", 1);
        s.written(Target::Child(child("b")), "", 1);
        s.written(Target::Status, "1", 1);
        s.retain_children(|c| c.name == "a");
        assert_eq!(
            s.created().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert!(s.already_written(&Target::Status, "1", 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_is_forgotten_once_the_watch_shows_another_version() {
        let mut s = Sent::default();
        let t = Target::Child(child("a"));
        s.written(t.clone(), "", 1);
        s.shown(&t, "");
        assert!(
            s.already_written(&t, "", 1),
            "the cache still shows the old version"
        );
        s.shown(&t, "5");
        assert!(s.is_empty(), "the write arrived: nothing left to remember");
        s.written(t.clone(), "5", 1);
        s.unwritten(&t, 2);
        assert!(!s.is_empty(), "another write's failure takes nothing back");
        s.unwritten(&t, 1);
        assert!(s.is_empty(), "a failed write is not on its way");
    }

    /// After an outage the watch delivers late: the event of khai's previous status write (12)
    /// can come after its next write was sent from 11. That event is older than the write on
    /// its way, so the same status is not sent again from it.
    #[tokio::test(start_paused = true)]
    async fn a_late_event_older_than_the_write_on_its_way_does_not_release_it() {
        let mut s = Sent::default();
        let t = Target::Status;
        s.written(t.clone(), "10", 1);
        s.made(&t, 1, "12");
        s.shown(&t, "11");
        assert!(
            !s.is_empty(),
            "11, someone's update, came before khai's write"
        );
        assert!(!s.already_written(&t, "11", 2), "another status is sent");
        s.written(t.clone(), "11", 2);
        s.shown(&t, "12");
        assert!(
            s.already_written(&t, "12", 2),
            "12 is khai's previous write, older than the one on its way"
        );
        s.made(&t, 2, "14");
        s.shown(&t, "13");
        assert!(s.already_written(&t, "13", 2), "13 came before 14 too");
        s.shown(&t, "14");
        assert!(s.is_empty(), "the write arrived");
    }

    #[tokio::test(start_paused = true)]
    async fn a_version_past_the_write_releases_it_even_unseen() {
        let mut s = Sent::default();
        let t = Target::Status;
        s.written(t.clone(), "10", 1);
        s.shown(&t, "13");
        assert!(
            s.is_empty(),
            "its answer not in yet: anything newer than 10 may be it"
        );
        s.written(t.clone(), "13", 1);
        s.made(&t, 1, "15");
        assert!(!s.already_written(&t, "16", 1), "a relist jumped past it");
        assert!(s.is_empty());
        s.written(t.clone(), "16", 1);
        s.made(&t, 1, "16");
        assert!(
            !s.already_written(&t, "16", 1),
            "a write that changed nothing made the version already shown"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn versions_that_do_not_compare_hold_only_the_one_read() {
        let mut s = Sent::default();
        let t = Target::Status;
        s.written(t.clone(), "a", 1);
        s.made(&t, 1, "c");
        assert!(s.already_written(&t, "a", 1));
        assert!(!s.already_written(&t, "b", 1), "b may be newer than c");
        assert!(s.is_empty());
    }

    #[test]
    fn records_stay_sorted_by_target() {
        let mut s = Sent::default();
        for name in ["c", "a", "b"] {
            s.written(Target::Child(child(name)), "", 1);
        }
        s.written(Target::Status, "1", 1);
        assert!(s.records.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(s.already_written(&Target::Child(child("b")), "", 1));
    }
}
