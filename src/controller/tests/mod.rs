//! Unit tests of one controller's reconciles over the in-memory [`crate::fake_api::FakeApi`],
//! on tokio's paused clock: a turn, backoff, spin damping, the Events budget, finalizers,
//! handlers (their retries, and refused calls said once), timers and daemons, and a shard
//! letting go of an object. Each asserts on what a reconcile returns and on what reaches the API
//! (objects, writes, Events), never on the controller's private state.

mod backoff;
mod clock;
mod drain;
mod event_budget;
mod finalizers;
mod handlers;
mod harness;
mod spin;
mod turn;
