//! Side effects from scripts: the calls a script makes that leave the process (the Kubernetes
//! API through the `k8s` module, HTTP through the `http` module), each bounded and counted.
//!
//! A call of a script that may have side effects carries [`Effects`] in its `ctx`. While the
//! call runs, they are the thread's current effects ([`Call`]), so the `k8s` and `http` modules,
//! whose functions do not receive `ctx`, find them through [`io`]. Calls without them (webhook
//! functions, `when()`, watch `map`s, `khai check`) refuse every side effect with a clear error.
//!
//! Every side effect goes through [`io`], which:
//! - moves a call that is still an inline attempt on an async worker (see
//!   `script::inline`) to the blocking pool *before* anything leaves the process: the attempt is
//!   abandoned and run again from the start, which is only harmless while it has done nothing;
//! - takes one call from the call's [`Budget`], so a script looping on API or HTTP calls stops
//!   with an error naming the budget instead of hammering a server;
//! - hands the work the time left before the call's deadline, which covers I/O: a slow endpoint
//!   ends the script's call, not the worker.
//!
//! I/O itself runs on the daemon's runtime ([`Effects::block_on`]) while the script's blocking
//! thread waits, so the async workers stay free for other objects.

pub mod http;
pub mod secrets;

use crate::config::duration::Duration as ConfigDuration;
use rhai::{EvalAltResult, Position};
use serde::Deserialize;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much one call of a script may do beyond computing: `[controller.budget]` and
/// `[[handler]] budget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// API and HTTP calls one call of a script may make.
    pub calls: u32,
    /// Wall-clock time one call of a script may take, I/O included. Replaces the script
    /// timeout for calls that carry [`Effects`].
    pub time: ConfigDuration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            calls: 100,
            time: ConfigDuration::from_secs(30),
        }
    }
}

/// What calls of one controller's (or handler's) scripts may reach, and how much of it.
///
/// Shared by every call; what one call has used is kept in [`Call`].
#[derive(Clone)]
pub struct Effects {
    /// The runtime that does the I/O while a script's blocking thread waits.
    pub handle: tokio::runtime::Handle,
    pub budget: Budget,
    /// The operator's client for `http::…` (`[operator.http]`); reaches nothing by default.
    pub http: Arc<http::Client>,
    /// The Secrets `ctx.secret` may read (`[operator] secrets`); none by default.
    pub secrets: Arc<secrets::Secrets>,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Effects {
    pub fn new(handle: tokio::runtime::Handle, budget: Budget) -> Self {
        Effects {
            handle,
            budget,
            http: Arc::default(),
            secrets: Arc::default(),
        }
    }

    /// With the operator's HTTP client and readable Secrets.
    #[must_use]
    pub fn reaching(mut self, http: Arc<http::Client>, secrets: Arc<secrets::Secrets>) -> Self {
        self.http = http;
        self.secrets = secrets;
        self
    }

    /// Runs `fut` on the daemon's runtime and waits for it on this (blocking) thread, for at
    /// most `timeout`. Must not be called on an async worker: [`io`] guarantees it is not, by
    /// moving inline attempts to the blocking pool first.
    pub fn block_on<F: std::future::Future>(
        &self,
        timeout: Duration,
        fut: F,
    ) -> Result<F::Output, tokio::time::error::Elapsed> {
        self.handle
            .block_on(async { tokio::time::timeout(timeout, fut).await })
    }
}

/// The side effects of the call running on this thread: what it may reach and what it has
/// used. Set for the length of one call by [`Call::enter`].
struct Current {
    effects: Arc<Effects>,
    calls_left: u32,
    deadline: Instant,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Makes `effects` the current call's for as long as the guard lives.
pub struct Call {
    previous: Option<Current>,
}

impl Call {
    /// Starts a call that may make side effects until `deadline`.
    pub fn enter(effects: &Arc<Effects>, deadline: Instant) -> Call {
        let current = Current {
            effects: effects.clone(),
            calls_left: effects.budget.calls,
            deadline,
        };
        Call {
            previous: CURRENT.with(|c| c.borrow_mut().replace(current)),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Why a side effect was refused before it started; what scripts see as the error.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error(
        "{what} is not available here: only reconcile, finalize, handlers, timers and daemons may \
         make API or HTTP calls"
    )]
    NoEffects { what: String },
    #[error("{what}: this call's budget of {calls} API and HTTP calls is used up")]
    Calls { what: String, calls: u32 },
    #[error("{what}: this call's time budget of {time} is used up")]
    Time { what: String, time: ConfigDuration },
}

/// Runs one side effect `what` (`"k8s::get"`, `"http::request"`) of the current call: moves an
/// inline attempt to the blocking pool, takes one call from the budget, and gives `work` the
/// effects and the time left before the call's deadline.
pub fn io<T>(
    what: &str,
    work: impl FnOnce(&Effects, Duration) -> Result<T, Box<EvalAltResult>>,
) -> Result<T, Box<EvalAltResult>> {
    if crate::script::leave_inline() {
        // Not an error of the script's: the call runs again from the start on the pool.
        return Err(Box::new(EvalAltResult::ErrorTerminated(
            "side effect: moving to the blocking pool".into(),
            Position::NONE,
        )));
    }
    let (effects, left) = CURRENT
        .with(|c| {
            let mut c = c.borrow_mut();
            let Some(current) = c.as_mut() else {
                return Err(Refused::NoEffects { what: what.into() });
            };
            if current.calls_left == 0 {
                return Err(Refused::Calls {
                    what: what.into(),
                    calls: current.effects.budget.calls,
                });
            }
            let left = current.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refused::Time {
                    what: what.into(),
                    time: current.effects.budget.time,
                });
            }
            current.calls_left -= 1;
            Ok((current.effects.clone(), left))
        })
        .map_err(|e| {
            Box::new(EvalAltResult::ErrorRuntime(
                e.to_string().into(),
                Position::NONE,
            ))
        })?;
    work(&effects, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(calls: u32) -> Arc<Effects> {
        Arc::new(Effects::new(
            tokio::runtime::Handle::current(),
            Budget {
                calls,
                ..Budget::default()
            },
        ))
    }

    fn message(e: &EvalAltResult) -> String {
        match e {
            EvalAltResult::ErrorRuntime(v, _) => v.to_string(),
            other => other.to_string(),
        }
    }

    #[tokio::test]
    async fn a_call_without_effects_is_refused_with_the_function_named() {
        let err = io("k8s::get", |_, _| Ok(())).unwrap_err();
        assert!(
            message(&err).contains("k8s::get is not available here"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_budget_counts_calls_and_is_restored_after_the_call() {
        let e = effects(2);
        {
            let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5));
            assert!(io("http::request", |_, left| Ok(left)).is_ok());
            assert!(io("http::request", |_, _| Ok(())).is_ok());
            let err = io("http::request", |_, _| Ok(())).unwrap_err();
            assert!(
                message(&err).contains("budget of 2 API and HTTP calls is used up"),
                "{err}"
            );
        }
        assert!(
            io("k8s::get", |_, _| Ok(())).is_err(),
            "no effects after the call"
        );
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_refused() {
        let e = effects(5);
        let _call = Call::enter(&e, Instant::now());
        let err = io("k8s::list", |_, _| Ok(())).unwrap_err();
        assert!(
            message(&err).contains("time budget of 30s is used up"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn io_runs_on_the_runtime_while_a_blocking_thread_waits() {
        let e = effects(1);
        let got = tokio::task::spawn_blocking(move || {
            let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5));
            io("k8s::get", |fx, left| {
                fx.block_on(left, async { 7 })
                    .map_err(|e| e.to_string().into())
            })
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(got, 7);
    }
}
