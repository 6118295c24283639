//! A cap on one server's open connections. A new connection beyond the cap closes the oldest
//! connection that is idle (handshaking, sending headers, or kept alive between requests) or has
//! been busy on one request for longer than the server allows; only when every connection is
//! busy with a fresh request is the new one refused. So a crowd of slow or silent clients can
//! never lock out the next real request: the longer a slow client waits, the sooner it is the
//! one closed.
//!
//! A connection is busy from the moment its request reaches the service until its response body
//! has been handed to the socket ([`Busy`] travels inside the response body, see [`Guarded`]).
//! The set holds at most `cap` entries; an entry leaves it when its connection ends or is closed.

use super::accept::Throttle;
use hyper::body::{Body, Frame, SizeHint};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The open connections of one server.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    server: &'static str,
    cap: usize,
    /// A request busy for longer than this no longer protects its connection from eviction.
    stale: Duration,
    next_id: u64,
    /// By id, so in order of arrival: the first idle entry is the oldest idle connection.
    open: BTreeMap<u64, Entry>,
    refusals: Throttle,
}

#[derive(Debug)]
struct Entry {
    /// Requests in progress on the connection.
    busy: usize,
    /// When the connection last went from idle to busy.
    since: Instant,
    close: CancellationToken,
}

impl Inner {
    fn entry(&mut self, id: u64) -> Option<&mut Entry> {
        self.open.get_mut(&id)
    }

    /// Closes the oldest connection that may be closed; false when there is none.
    fn evict_one(&mut self, now: Instant) -> bool {
        let stale = self.stale;
        let victim = self
            .open
            .iter()
            .find(|(_, e)| e.busy == 0 || now.duration_since(e.since) > stale)
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.open.remove(&id)) {
            Some(entry) => {
                entry.close.cancel();
                true
            }
            None => false,
        }
    }
}

impl Slots {
    /// At most `cap` connections (at least one) for `server`; a request that has been running
    /// for longer than `stale` (the server's request timeout) counts as idle.
    pub(crate) fn new(server: &'static str, cap: usize, stale: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                server,
                cap: cap.max(1),
                stale,
                next_id: 0,
                open: BTreeMap::new(),
                refusals: Throttle::new(super::accept::LOG_EVERY),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection: at the cap, the oldest idle connection is closed to make
    /// room; `None` (refuse the connection) when every connection is busy.
    pub(crate) fn admit(&self) -> Option<Slot> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.open.len() >= inner.cap && !inner.evict_one(now) {
            if let Some(suppressed) = inner.refusals.ready(now) {
                tracing::warn!(
                    server = inner.server,
                    cap = inner.cap,
                    suppressed,
                    "every connection is busy; refusing a new one"
                );
            }
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let close = CancellationToken::new();
        inner.open.insert(
            id,
            Entry {
                busy: 0,
                since: now,
                close: close.clone(),
            },
        );
        Some(Slot {
            id,
            slots: self.clone(),
            close,
        })
    }

    /// How many connections are open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().open.len()
    }

    /// Whether no connection is open.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One admitted connection; it leaves the set when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    id: u64,
    slots: Slots,
    close: CancellationToken,
}

impl Slot {
    /// Resolves when the connection was chosen to make room: its task should drop it.
    pub(crate) fn closed(&self) -> WaitForCancellationFutureOwned {
        self.close.clone().cancelled_owned()
    }

    /// Marks the connection busy until the returned guard is dropped.
    #[cfg(test)]
    pub(crate) fn busy(&self) -> Busy {
        Busy::enter(self.slots.clone(), self.id)
    }

    /// Something the connection's service can clone and mark busy from.
    pub(crate) fn tracker(&self) -> Tracker {
        Tracker {
            slots: self.slots.clone(),
            id: self.id,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().open.remove(&self.id);
    }
}

/// Marks one connection busy, from its service.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    slots: Slots,
    id: u64,
}

impl Tracker {
    /// Marks the connection busy until the returned guard is dropped.
    pub(crate) fn busy(&self) -> Busy {
        Busy::enter(self.slots.clone(), self.id)
    }
}

/// A request in progress on a connection.
#[derive(Debug)]
pub(crate) struct Busy {
    slots: Slots,
    id: u64,
}

impl Busy {
    fn enter(slots: Slots, id: u64) -> Self {
        if let Some(e) = slots.lock().entry(id) {
            if e.busy == 0 {
                e.since = Instant::now();
            }
            e.busy += 1;
        }
        Self { slots, id }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(e) = self.slots.lock().entry(self.id) {
            e.busy = e.busy.saturating_sub(1);
        }
    }
}

/// A response body that keeps its connection marked busy until hyper has taken all of it.
#[derive(Debug)]
pub(crate) struct Guarded<B> {
    body: B,
    _busy: Busy,
}

impl<B> Guarded<B> {
    pub(crate) fn new(body: B, busy: Busy) -> Self {
        Self { body, _busy: busy }
    }
}

impl<B: Body + Unpin> Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    const STALE: Duration = Duration::from_secs(10);

    fn closed(slot: &Slot) -> bool {
        slot.closed().now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn beyond_the_cap_the_oldest_idle_connection_is_closed() {
        let slots = Slots::new("test", 3, STALE);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        let c = slots.admit().unwrap();
        let _working = a.busy();
        let d = slots.admit().expect("room is made");
        assert!(!closed(&a), "a busy connection is kept");
        assert!(closed(&b), "the oldest idle connection is closed");
        assert!(!closed(&c) && !closed(&d));
        assert_eq!(slots.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_connection_is_busy_the_new_one_is_refused_until_one_goes_stale() {
        let slots = Slots::new("test", 2, STALE);
        let a = slots.admit().unwrap();
        let b = slots.admit().unwrap();
        let _x = a.busy();
        let y = b.tracker().busy();
        assert!(slots.admit().is_none());
        tokio::time::advance(STALE + Duration::from_millis(1)).await;
        let _c = slots
            .admit()
            .expect("a request busy for too long no longer protects its connection");
        assert!(closed(&a), "the oldest stale connection is closed");
        drop(y);
        assert!(!closed(&b));
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_request_makes_its_connection_idle_again_and_dropped_slots_leave() {
        let slots = Slots::new("test", 1, STALE);
        let a = slots.admit().unwrap();
        drop(a.busy());
        let b = slots.admit().expect("a is idle again");
        drop(b);
        assert!(slots.is_empty());
    }
}
