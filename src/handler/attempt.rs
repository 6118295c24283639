//! One attempt of one handler: it is called with what its retries know (`ctx.attempt`), and a
//! failure is sorted into trying again after its backoff, after the delay the script asked
//! for, or giving up, recorded in the object's progress.

use super::answer::{take_result, warning};
use super::progress::Progress;
use super::{Entry, Handled, Handlers, Turn};
use crate::script::{Attempt, CallArg, ScriptError};
use serde_json::Value;
use std::time::Duration;

impl Handlers {
    /// One attempt of `entry` unless it is done or waiting for its retry; records the outcome
    /// in `progress` and what it returned in `handled`.
    pub(super) async fn attempt(
        &self,
        entry: &Entry,
        turn: &Turn<'_>,
        record: &Value,
        progress: &mut Progress,
        handled: &mut Handled,
    ) {
        let now = jiff::Timestamp::now();
        let id = entry.spec.id();
        let a = progress.handlers.entry(id.clone()).or_default();
        if a.done {
            return;
        }
        if let Some(at) = a
            .retry_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            && at > now
        {
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
            handled.retry_in = Some(handled.retry_in.map_or(wait, |r| r.min(wait)));
            return;
        }
        if a.started.is_empty() {
            a.started = rfc3339(now);
        }
        let started: jiff::Timestamp = a.started.parse().unwrap_or(now);
        let runtime = Duration::try_from(now.duration_since(started)).unwrap_or_default();
        let mut ctx = super::budgeted(&turn.ctx, entry.spec.budget);
        ctx.attempt = Some(Attempt {
            retry: a.attempts,
            started: a.started.clone(),
            runtime: runtime.as_secs_f64(),
        });
        a.attempts += 1;
        let args = vec![
            CallArg::Json(turn.view.clone()),
            CallArg::Ctx(ctx),
            CallArg::Json(record.clone()),
        ];
        let result = entry
            .script
            .call_args_async(&entry.spec.function(), args)
            .await;
        let failure = match result {
            Ok(out) => match take_result(out, handled) {
                Ok(()) => {
                    a.done = true;
                    a.message = None;
                    a.retry_at = None;
                    tracing::info!(handler = %id, "handler succeeded");
                    return;
                }
                Err(m) => Failure::Again(format!(
                    "{}: {}: {m}",
                    entry.script.file().display(),
                    entry.spec.function()
                )),
            },
            Err(ScriptError::Fail { message, .. }) => Failure::Final(message),
            Err(ScriptError::Retry { message, delay, .. }) => Failure::After(message, delay.get()),
            Err(e) => Failure::Again(e.to_string()),
        };
        let spec = &entry.spec;
        let out_of_retries = spec.retries.is_some_and(|r| a.attempts > r);
        let out_of_time = spec.timeout.is_some_and(|t| runtime >= t.get());
        let (message, delay) = match failure {
            Failure::Final(m) => (m, None),
            _ if out_of_retries || out_of_time => {
                let why = if out_of_retries { "retries" } else { "timeout" };
                (
                    format!("{} (gave up: out of {why})", failure.message()),
                    None,
                )
            }
            Failure::After(m, d) => (m, Some(d)),
            Failure::Again(m) => (m, Some(spec.backoff.get())),
        };
        a.message = Some(message.clone());
        match delay {
            Some(d) => {
                a.retry_at = Some(rfc3339(
                    now + jiff::SignedDuration::try_from(d).unwrap_or_default(),
                ));
                handled.retry_in = Some(handled.retry_in.map_or(d, |r| r.min(d)));
                tracing::warn!(handler = %id, retry_in = ?d, error = %message, "handler failed");
                handled
                    .events
                    .push(warning("HandlerRetrying", &format!("{id}: {message}")));
            }
            None => {
                a.done = true;
                a.retry_at = None;
                tracing::warn!(handler = %id, error = %message, "handler failed for good; the change counts as handled");
                handled
                    .events
                    .push(warning("HandlerFailed", &format!("{id}: {message}")));
            }
        }
    }
}

/// Why an attempt failed.
enum Failure {
    /// Tried again after the handler's backoff.
    Again(String),
    /// Tried again after this long, as the script asked with `retry()`.
    After(String, Duration),
    /// Not tried again, as the script said with `fail()`.
    Final(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Again(m) | Failure::After(m, _) | Failure::Final(m) => m,
        }
    }
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}
