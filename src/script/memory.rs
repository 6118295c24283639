//! The memory a script call builds, counted where it is allocated.
//!
//! Rhai's size limits bound each string, array and map by its nested contents, but not map keys
//! (600 keys of 1 MiB pass a 1 MiB string limit), nor how many such values a call holds at
//! once. So a call's memory is bounded by counting it: the global allocator [`Counting`]
//! keeps, per thread, the bytes allocated minus the bytes freed, and the engine's progress hook
//! stops a call whose count has grown by more than its budget ([`Limits::max_memory`]) since
//! it began. A script call runs on one thread, so that count is the call's, whatever the
//! shape of what it builds. Each Rhai operation allocates a bounded amount (values are capped
//! by the size limits), so a call stops within one operation of its budget.
//!
//! Calls running at once are bounded together too: each publishes what it holds to a shared
//! count ([`ALL_CALLS`]) in steps of [`PUBLISH_STEP`], and once the calls together hold more
//! than [`ALL_CALLS_MAX`], a call holding at least a step of it stops with its own error instead
//! of growing further, so many objects building large values at once cannot push the process
//! past what its pod may use. Calls holding little go on.
//!
//! The process picks its allocator, so the library only provides [`Counting`]: the `khai`
//! binary installs it (`src/main.rs`), and so do the library's unit tests. A process that
//! installs another allocator runs scripts without memory budgets; [`is_counting`] tells.
//!
//! [`Limits::max_memory`]: super::Limits::max_memory

// The allocator hands every request to the system allocator unchanged; the only unsafe code is
// that delegation, which `GlobalAlloc` requires.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Bytes all script calls running at once may hold together beyond what they started with:
/// eight calls at the default per-call budget.
pub(super) const ALL_CALLS_MAX: usize = 512 << 20;

/// A call publishes what it holds to the shared count when that changed by this much.
const PUBLISH_STEP: isize = 1 << 20;

/// What the calls running at once hold together, as each last published it.
pub(super) struct Shared {
    held: AtomicIsize,
    max: AtomicIsize,
}

/// The calls of this process.
static ALL_CALLS: Shared = Shared::new(ALL_CALLS_MAX);

/// Sets what all script calls running at once may hold together (`khai run
/// --scripts-memory`), instead of [`ALL_CALLS_MAX`]; for the start of the process.
pub(crate) fn set_shared_limit(bytes: usize) {
    ALL_CALLS.set_max(bytes);
}

/// What all script calls running at once may hold together.
pub(super) fn shared_limit() -> usize {
    ALL_CALLS.max.load(Ordering::Relaxed).unsigned_abs()
}

const fn clamp(max: usize) -> isize {
    if max > isize::MAX as usize {
        isize::MAX
    } else {
        max as isize
    }
}

impl Shared {
    const fn new(max: usize) -> Self {
        Self {
            held: AtomicIsize::new(0),
            max: AtomicIsize::new(clamp(max)),
        }
    }

    fn set_max(&self, max: usize) {
        self.max.store(clamp(max), Ordering::Relaxed);
    }

    /// Publishes that a call now holds `growth` where it last published `published`; returns
    /// what it has now published.
    fn publish(&self, published: isize, growth: isize) -> isize {
        let growth = growth.max(0);
        if (growth - published).abs() < PUBLISH_STEP {
            return published;
        }
        self.held.fetch_add(growth - published, Ordering::Relaxed);
        growth
    }

    /// Whether a call that has published `published` must stop: the calls together hold more
    /// than the limit, and this one holds a step or more of it.
    fn over(&self, published: isize) -> bool {
        published >= PUBLISH_STEP
            && self.held.load(Ordering::Relaxed) > self.max.load(Ordering::Relaxed)
    }

    /// A call that published `published` ended.
    fn withdraw(&self, published: isize) {
        self.held.fetch_sub(published, Ordering::Relaxed);
    }
}

/// Which memory budget a call used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Over {
    /// Its own, [`super::Limits::max_memory`].
    Call,
    /// The one all calls share, [`ALL_CALLS_MAX`].
    AllCalls,
}

/// The system allocator, counting what each thread allocates and frees: install it with
/// `#[global_allocator]` for script calls to have memory budgets.
pub struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed on this thread. Memory freed on another thread than
    /// the one that allocated it makes the counts drift, so only differences over one call
    /// (on one thread) mean anything; the arithmetic wraps rather than panic in the allocator.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Bytes ever allocated on this thread (wrapping), freed or not: a measure of work done.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// `LIVE` when the running call began, and the growth it may not pass.
    static BUDGET: Cell<Option<(isize, isize)>> = const { Cell::new(None) };
    /// What the running call has published to [`ALL_CALLS`].
    static PUBLISHED: Cell<isize> = const { Cell::new(0) };
    /// The highest `LIVE` since [`peak_during`] began (tests measure peaks with it).
    #[cfg(test)]
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: allocations may happen while the thread's locals are being torn down.
    if bytes > 0 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get().wrapping_add(bytes.unsigned_abs())));
    }
    let _ = LIVE.try_with(|live| {
        let now = live.get().wrapping_add(bytes);
        live.set(now);
        #[cfg(test)]
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed to `System` as is; counting touches only plain thread-locals
// (const-initialised, no destructor), so it neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(signed(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(signed(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) };
        count(signed(layout.size()).wrapping_neg());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(signed(new_size).wrapping_sub(signed(layout.size())));
        }
        p
    }
}

/// Starts counting a call on this thread, which may grow its memory by `max` bytes (0: no
/// bound). Ends with [`end`].
pub(super) fn begin(max: usize) {
    let start = LIVE.with(Cell::get);
    BUDGET.with(|b| b.set((max > 0).then(|| (start, signed(max)))));
}

/// Stops counting the call on this thread.
pub(super) fn end() {
    BUDGET.with(|b| b.set(None));
    ALL_CALLS.withdraw(PUBLISHED.with(|p| p.replace(0)));
}

/// Whether the call running on this thread has built more than its budget, or holds a share
/// of more than all calls may hold together.
pub(super) fn over_budget() -> Option<Over> {
    let (start, max) = BUDGET.with(Cell::get)?;
    let growth = LIVE.with(Cell::get).wrapping_sub(start);
    if growth > max {
        return Some(Over::Call);
    }
    let published = PUBLISHED.with(|p| {
        let now = ALL_CALLS.publish(p.get(), growth);
        p.set(now);
        now
    });
    ALL_CALLS.over(published).then_some(Over::AllCalls)
}

/// Bytes allocated on this thread so far, freed or not (wrapping: compare with `wrapping_sub`).
pub(super) fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
}

/// Whether [`Counting`] is the process's allocator, so that memory budgets hold.
pub(crate) fn is_counting() -> bool {
    let before = allocated();
    drop(std::hint::black_box(Box::new(0u64)));
    allocated() != before
}

/// "64 MiB": a budget as messages name it.
pub(super) fn describe(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Runs `f` and returns its result with the most memory this thread held meanwhile beyond
/// what it held before.
#[cfg(test)]
pub(super) fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let value = f();
    let peak = PEAK.with(Cell::get).wrapping_sub(start);
    (value, usize::try_from(peak).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_over_budget_once_it_holds_more_than_its_budget() {
        begin(1 << 20);
        let small = std::hint::black_box(vec![0u8; 1 << 10]);
        assert_eq!(over_budget(), None);
        let big = std::hint::black_box(vec![1u8; 2 << 20]);
        assert_eq!(over_budget(), Some(Over::Call));
        drop(big);
        assert_eq!(over_budget(), None, "freed memory no longer counts");
        end();
        let _big = std::hint::black_box(vec![1u8; 2 << 20]);
        assert_eq!(over_budget(), None, "outside a call there is no budget");
        drop(small);
    }

    #[test]
    fn calls_together_stop_the_ones_holding_memory_once_past_the_shared_limit() {
        const MIB: isize = 1 << 20;
        let shared = Shared::new(10 << 20);
        // Four calls each holding 3 MiB: 12 MiB together, past the 10 MiB limit.
        let published: Vec<isize> = (0..4).map(|_| shared.publish(0, 3 * MIB)).collect();
        assert_eq!(published, vec![3 * MIB; 4]);
        assert!(shared.over(3 * MIB), "a call holding 3 MiB stops");
        let tiny = shared.publish(0, MIB / 2);
        assert_eq!(tiny, 0, "half a step is not published");
        assert!(!shared.over(tiny), "a call holding little goes on");
        shared.withdraw(published[0]);
        assert!(!shared.over(3 * MIB), "9 MiB together is within the limit");
        // A call that frees what it held publishes that too.
        let after = shared.publish(published[1], 0);
        assert_eq!(after, 0);
        assert_eq!(shared.held.load(Ordering::Relaxed), 6 * MIB);
    }

    #[test]
    fn allocations_count_as_work_even_when_freed() {
        let before = allocated();
        drop(std::hint::black_box(vec![1u8; 1 << 20]));
        assert!(allocated().wrapping_sub(before) >= 1 << 20);
    }

    #[test]
    fn peaks_are_measured_even_when_freed() {
        let ((), peak) = peak_during(|| drop(std::hint::black_box(vec![1u8; 4 << 20])));
        assert!(peak >= 4 << 20, "{peak}");
    }

    #[test]
    fn unit_tests_run_with_the_counting_allocator() {
        assert!(is_counting());
    }

    #[test]
    fn budgets_are_named_in_mebibytes() {
        assert_eq!(describe(64 << 20), "64 MiB");
        assert_eq!(describe(1000), "1000 bytes");
    }
}
