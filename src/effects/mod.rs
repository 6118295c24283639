//! Side effects from scripts: the calls a script makes that leave the process (the Kubernetes
//! API through the `k8s` module, HTTP through the `http` module), each bounded and counted.
//!
//! A call of a script that may have side effects carries [`Effects`] in its `ctx`. While the
//! call runs, they are the thread's current effects ([`Call`]), so the `k8s` and `http` modules,
//! whose functions do not receive `ctx`, find them through [`io`]. Calls without them (webhook
//! functions, `when()`, watch `map`s, `khai check`) refuse every side effect with a clear error.
//!
//! Every side effect goes through [`io`], which:
//! - ends a call that is still an inline attempt on an async worker (see `script::inline`)
//!   *before* anything leaves the process: the attempt is abandoned ([`Call::left_inline`]) and
//!   run again from the start on the blocking pool, which is only harmless while it has done
//!   nothing;
//! - takes one call from the call's [`Budget`], so a script looping on API or HTTP calls stops
//!   with an error naming the budget instead of hammering a server;
//! - hands the work the time left before the call's deadline, which covers I/O: a slow endpoint
//!   ends the script's call, not the worker.
//!
//! I/O itself runs on the daemon's runtime ([`Effects::block_on`]) while the script's blocking
//! thread waits, so the async workers stay free for other objects.

pub mod dry;
pub mod http;
pub(crate) mod k8s;
pub(crate) mod literals;
mod reads;
pub(crate) mod secrets;
pub(crate) mod stub;

use crate::config::duration::Duration as ConfigDuration;
use rhai::{EvalAltResult, Position};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How much one call of a script may do beyond computing: `budget` of `[[controller]]`,
/// `[[handler]]`, `[[timer]]` and `[[daemon]]`.
pub use crate::config::model::Budget;
pub use reads::Reads;

/// What calls of one controller's (or handler's) scripts may reach, and how much of it.
///
/// Shared by every call; what one call has used is kept in [`Call`].
#[derive(Clone)]
pub struct Effects {
    /// The runtime that does the I/O while a script's blocking thread waits.
    pub handle: tokio::runtime::Handle,
    pub budget: Budget,
    /// The Kubernetes API of `k8s::…` calls; `None` refuses them.
    pub k8s: Option<Arc<k8s::Api>>,
    /// `khai test`: canned answers instead of any I/O.
    pub stubs: Option<Arc<stub::Stubs>>,
    /// `khai diff`: reads go to the cluster, writes and HTTP requests are held back.
    pub dry: Option<Arc<dry::Held>>,
    /// The operator's client for `http::…` (`[operator.http]`); reaches nothing by default.
    pub http: Arc<http::Client>,
    /// The Secrets `ctx.secret` may read (`[operator] secrets`); none by default.
    pub secrets: Arc<secrets::Secrets>,
    /// Told of every side effect and Secret read, when one call's reads are tracked.
    pub reads: Reads,
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
            k8s: None,
            stubs: None,
            dry: None,
            http: Arc::default(),
            secrets: Arc::default(),
            reads: Reads::default(),
        }
    }

    /// These effects for one call whose reads `reads` tracks.
    pub(crate) fn tracked(&self, reads: Reads) -> Arc<Effects> {
        Arc::new(Effects {
            reads,
            ..self.clone()
        })
    }

    /// These effects with another budget (a handler's own).
    pub(crate) fn with_budget(&self, budget: Budget) -> Arc<Effects> {
        Arc::new(Effects {
            budget,
            ..self.clone()
        })
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

/// Runs side effect `what` described by `request` (the JSON `khai test` stubs match on, see
/// [`stub`]) through [`io`]: answered by the case's stubs when there are, else by `live`. An
/// `Err` of `live` is a value the script can catch (`try { … } catch (e) { … }`).
pub fn request(
    what: &str,
    request: serde_json::Value,
    live: impl FnOnce(&Effects, Duration) -> Result<serde_json::Value, serde_json::Value>,
) -> Result<rhai::Dynamic, Box<EvalAltResult>> {
    match answer(what, request, live)? {
        Ok(v) => to_dynamic(what, &v),
        Err(e) => Err(thrown(to_dynamic(what, &e)?)),
    }
}

/// [`request`] without the conversion: the answer as JSON, `Ok` the value returned, `Err` the
/// value thrown, whether stubbed or live, for a module that shapes answers itself (`http`).
/// The outer error refuses the call itself (no effects here, budget used up, an unexpected
/// call in `khai test`).
pub fn answer(
    what: &str,
    request: serde_json::Value,
    live: impl FnOnce(&Effects, Duration) -> Result<serde_json::Value, serde_json::Value>,
) -> Result<Result<serde_json::Value, serde_json::Value>, Box<EvalAltResult>> {
    let answer = io(what, |effects, left| {
        Ok(match &effects.stubs {
            Some(stubs) => stubs.answer(&request),
            None => match effects.dry.as_ref().and_then(|d| d.hold(&request)) {
                Some(held) => held,
                None => match live(effects, left) {
                    Ok(v) => stub::Answer::Response(v),
                    Err(e) => stub::Answer::Error(e),
                },
            },
        })
    })?;
    match answer {
        stub::Answer::Response(v) => Ok(Ok(v)),
        stub::Answer::Error(e) => Ok(Err(e)),
        stub::Answer::Unexpected(m) => Err(Box::new(EvalAltResult::ErrorRuntime(
            m.into(),
            Position::NONE,
        ))),
    }
}

/// `v` as a script value; `what` names the call if it cannot be one.
pub fn to_dynamic(what: &str, v: &serde_json::Value) -> Result<rhai::Dynamic, Box<EvalAltResult>> {
    rhai::serde::to_dynamic(v).map_err(|e| {
        Box::new(EvalAltResult::ErrorRuntime(
            format!("{what}: {e}").into(),
            Position::NONE,
        ))
    })
}

/// `value` thrown, for the script to catch.
pub(crate) fn thrown(value: rhai::Dynamic) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(value, Position::NONE))
}

/// The side effects of the call running on this thread: what it may reach and what it has
/// used. Set for the length of one call by [`Call::enter`].
struct Current {
    effects: Arc<Effects>,
    calls_left: u32,
    deadline: Instant,
    /// The call is an inline attempt on an async worker: its first side effect ends it.
    inline: bool,
    /// It did end for that reason.
    left_inline: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
}

/// Makes `effects` the current call's for as long as the guard lives.
pub struct Call {
    previous: Option<Current>,
}

impl Call {
    /// Starts a call that may make side effects until `deadline`. An `inline` call (an attempt
    /// on an async worker) makes none: its first one ends it, see [`Call::left_inline`].
    pub(crate) fn enter(effects: &Arc<Effects>, deadline: Instant, inline: bool) -> Call {
        let current = Current {
            effects: effects.clone(),
            calls_left: effects.budget.calls,
            deadline,
            inline,
            left_inline: false,
        };
        Call {
            previous: CURRENT.with(|c| c.borrow_mut().replace(current)),
        }
    }

    /// Whether the call, an inline attempt, was ended because it was about to make a side
    /// effect: the caller runs it again from the start on the blocking pool.
    pub(crate) fn left_inline(&self) -> bool {
        CURRENT.with(|c| c.borrow().as_ref().is_some_and(|c| c.left_inline))
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
    /// Not an error of the script's: an inline attempt leaves for the blocking pool.
    #[error("side effect: moving to the blocking pool")]
    Inline,
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
    let (effects, left) = CURRENT
        .with(|c| {
            let mut c = c.borrow_mut();
            let Some(current) = c.as_mut() else {
                return Err(Refused::NoEffects { what: what.into() });
            };
            // What comes back may depend on anything, the caller's own children included.
            current.effects.reads.mark();
            if current.inline {
                current.left_inline = true;
                return Err(Refused::Inline);
            }
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
        .map_err(|e| match e {
            Refused::Inline => Box::new(EvalAltResult::ErrorTerminated(
                e.to_string().into(),
                Position::NONE,
            )),
            Refused::Calls { .. } => thrown(budget_error("calls", &e)),
            Refused::Time { .. } => thrown(budget_error("time", &e)),
            Refused::NoEffects { .. } => Box::new(EvalAltResult::ErrorRuntime(
                e.to_string().into(),
                Position::NONE,
            )),
        })?;
    work(&effects, left)
}

/// What a call refused for its budget throws, a map as every failed call's (docs/side-effects.md,
/// "Errors are values"): `reason` `"budget"`, `limit`
/// the part used up (`"calls"` or `"time"`), and `message`, the line reported when it is not
/// caught.
fn budget_error(limit: &str, refused: &Refused) -> rhai::Dynamic {
    let mut map = rhai::Map::new();
    map.insert("reason".into(), rhai::Dynamic::from("budget".to_string()));
    map.insert("limit".into(), rhai::Dynamic::from(limit.to_string()));
    map.insert("message".into(), rhai::Dynamic::from(refused.to_string()));
    rhai::Dynamic::from_map(map)
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
            let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5), false);
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

    /// A reconcile whose script reads its children through `k8s::get` must not have the watch
    /// events of those children skipped.
    #[tokio::test]
    async fn a_side_effect_counts_as_a_read_of_the_tracked_call() {
        let reads = Reads::tracked();
        let e = effects(1).tracked(reads.clone());
        let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5), false);
        assert!(!reads.any());
        io("k8s::get", |_, _| Ok(())).unwrap();
        assert!(reads.any());
    }

    /// The map a script catches, read back as JSON.
    fn caught(e: &EvalAltResult) -> serde_json::Value {
        let EvalAltResult::ErrorRuntime(v, _) = e else {
            panic!("not a thrown value: {e}");
        };
        rhai::serde::from_dynamic(v).unwrap()
    }

    #[tokio::test]
    async fn a_caught_budget_error_is_the_documented_map() {
        let e = effects(0);
        let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5), false);
        let err = io("k8s::get", |_, _| Ok(())).unwrap_err();
        assert_eq!(
            caught(&err),
            serde_json::json!({
                "reason": "budget",
                "limit": "calls",
                "message": "k8s::get: this call's budget of 0 API and HTTP calls is used up",
            })
        );
        let e = effects(5);
        let late = Call::enter(&e, Instant::now(), false);
        let err = io("http::request", |_, _| Ok(())).unwrap_err();
        assert_eq!(caught(&err)["limit"], "time");
        assert_eq!(
            caught(&err)["message"],
            "http::request: this call's time budget of 30s is used up"
        );
        drop(late);
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_refused() {
        let e = effects(5);
        let _call = Call::enter(&e, Instant::now(), false);
        let err = io("k8s::list", |_, _| Ok(())).unwrap_err();
        assert!(
            message(&err).contains("time budget of 30s is used up"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_inline_call_leaves_before_its_side_effect_and_is_not_charged() {
        let e = effects(1);
        let call = Call::enter(&e, Instant::now() + Duration::from_secs(5), true);
        let mut ran = false;
        let err = io("k8s::get", |_, _| {
            ran = true;
            Ok(())
        })
        .unwrap_err();
        assert!(matches!(*err, EvalAltResult::ErrorTerminated(..)), "{err}");
        assert!(!ran, "the work must not start in an inline attempt");
        assert!(call.left_inline());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn io_runs_on_the_runtime_while_a_blocking_thread_waits() {
        let e = effects(1);
        let got = tokio::task::spawn_blocking(move || {
            let _call = Call::enter(&e, Instant::now() + Duration::from_secs(5), false);
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
