//! The stack every script call runs on: deep enough for Rhai's own recursive walks over any
//! value the call can build within its limits.
//!
//! Rhai clones, compares, measures (its size limits), prints and drops arrays and maps
//! recursively, a few stack frames per level. A plain loop (`x = [x]`) nests a value one level
//! per few operations, so a call can build a value far deeper than a thread's usual 2 MiB stack
//! can walk, and a stack overflow aborts the whole process, not just the call. So:
//! - an inline attempt on an async worker stops after [`super::inline::INLINE_OPS`]
//!   operations, so it nests at most that many levels; the runtime's threads are started with
//!   [`THREAD_STACK`], which holds [`INLINE_STACK`] for it;
//! - any other call (on the blocking pool, in `khai test`, in a unit test) runs on a fresh
//!   stack of [`SCRIPT_STACK`] for its duration. That stack is reserved address space: only
//!   the pages a call touches take memory, and it is unmapped when the call returns. Such calls
//!   run for over a millisecond, so the mapping costs them little.

/// Stack an inline attempt may use: its operation budget nests a value at most
/// [`super::inline::INLINE_OPS`] levels deep, a few hundred bytes of frames each.
pub(crate) const INLINE_STACK: usize = 8 << 20;

/// Stack any other call may use. Each level of nesting allocates at least about 100 bytes, so
/// the default memory budget (64 MiB) bounds a call's values at under 700,000 levels; Rhai's
/// walks take a few small frames, under 300 bytes, a level. (Time bounds them sooner: Rhai
/// measures a value after each change, so nesting one `n` deep costs about `n²/2` steps.)
pub(crate) const SCRIPT_STACK: usize = 256 << 20;

/// The stack size of the runtime's threads: [`INLINE_STACK`] plus what the runtime itself
/// uses below a call.
pub(crate) const THREAD_STACK: usize = INLINE_STACK + (2 << 20);

/// Runs `f` with the stack a script call needs left: on this thread's own stack when it has
/// that much, else on a fresh one.
pub(super) fn with_script_stack<R>(f: impl FnOnce() -> R) -> R {
    let need = if super::inline::active() {
        INLINE_STACK
    } else {
        SCRIPT_STACK
    };
    stacker::maybe_grow(need, need + (1 << 20), f)
}
