//! Why a script call must stop before it ends: its deadline has passed or its memory budget is
//! used up. The engine's progress hook asks between operations; long functions of the standard
//! library ask as they go, since a native function is one operation however long it runs.

use super::memory;
use rhai::Dynamic;
use std::cell::Cell;
use std::time::Instant;

thread_local! {
    /// Deadline of the call running on this thread; read by the engine's progress hook.
    pub(super) static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How a call stopped for its memory budget says so.
pub(super) const OVER_MEMORY: &str = "memory budget used up";
/// How a call stopped for the memory all calls share says so.
pub(super) const OVER_SHARED_MEMORY: &str = "shared memory budget used up";

/// Why the call running on this thread must stop now, if it must.
pub(super) fn must_stop() -> Option<&'static str> {
    match memory::over_budget() {
        Some(memory::Over::Call) => return Some(OVER_MEMORY),
        Some(memory::Over::AllCalls) => return Some(OVER_SHARED_MEMORY),
        None => {}
    }
    let expired = DEADLINE.with(|d| d.get().is_some_and(|t| Instant::now() >= t));
    expired.then_some("deadline exceeded")
}

/// Whether a call's termination token says it stopped for its memory budget.
pub(super) fn is_over_memory(token: &Dynamic) -> bool {
    token.to_string() == OVER_MEMORY
}

/// Whether a call's termination token says it stopped for the memory all calls share.
pub(super) fn is_over_shared_memory(token: &Dynamic) -> bool {
    token.to_string() == OVER_SHARED_MEMORY
}
