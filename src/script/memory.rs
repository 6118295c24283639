//! The memory a script call builds, counted where it is allocated.
//!
//! Rhai's size limits bound each string, array and map by its nested contents, but not map keys
//! (600 keys of 1 MiB pass a 1 MiB string limit), nor how many such values a call holds at
//! once. So a call's memory is bounded by counting it: khai's global allocator ([`Counting`])
//! keeps, per thread, the bytes allocated minus the bytes freed, and the engine's progress hook
//! stops a call whose count has grown by more than its budget ([`Limits::max_memory`]) since
//! it began. A script call runs on one thread, so that count is the call's, whatever the
//! shape of what it builds. Each Rhai operation allocates a bounded amount (values are capped
//! by the size limits), so a call stops within one operation of its budget.
//!
//! [`Limits::max_memory`]: super::Limits::max_memory

// The allocator hands every request to the system allocator unchanged; the only unsafe code is
// that delegation, which `GlobalAlloc` requires.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting what each thread allocates and frees.
pub(super) struct Counting;

#[global_allocator]
static GLOBAL: Counting = Counting;

thread_local! {
    /// Bytes allocated minus bytes freed on this thread. Memory freed on another thread than
    /// the one that allocated it makes the counts drift, so only differences over one call
    /// (on one thread) mean anything; the arithmetic wraps rather than panic in the allocator.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Bytes ever allocated on this thread (wrapping), freed or not: a measure of work done.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// `LIVE` when the running call began, and the growth it may not pass.
    static BUDGET: Cell<Option<(isize, isize)>> = const { Cell::new(None) };
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
}

/// Whether the call running on this thread has built more than its budget.
pub(super) fn over_budget() -> bool {
    BUDGET
        .with(Cell::get)
        .is_some_and(|(start, max)| LIVE.with(Cell::get).wrapping_sub(start) > max)
}

/// Bytes allocated on this thread so far, freed or not (wrapping: compare with `wrapping_sub`).
pub(super) fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
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
        assert!(!over_budget());
        let big = std::hint::black_box(vec![1u8; 2 << 20]);
        assert!(over_budget());
        drop(big);
        assert!(!over_budget(), "freed memory no longer counts");
        end();
        let _big = std::hint::black_box(vec![1u8; 2 << 20]);
        assert!(!over_budget(), "outside a call there is no budget");
        drop(small);
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
    fn budgets_are_named_in_mebibytes() {
        assert_eq!(describe(64 << 20), "64 MiB");
        assert_eq!(describe(1000), "1000 bytes");
    }
}
