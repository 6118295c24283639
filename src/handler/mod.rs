//! Kopf's event handlers on khai: functions run when an object is created, updated (or one of its
//! fields changes), deleted, or first seen after a start, with what changed.
//!
//! One [`Handlers`] holds the `[[handler]]` entries of one kind. The controller of that kind runs
//! them in its turn for an object ([`Handlers::on_change`], [`Handlers::on_delete`]), before the
//! level-triggered `reconcile`, so they never run concurrently for one object. What changed is
//! found by comparing the object's essence with the one recorded when its handlers last finished
//! ([`change`], [`progress`]); a handler that fails is tried again after its backoff, within its
//! `retries` and `timeout`, and handlers that succeeded are not run again for the same change,
//! across restarts too.
//!
//! Writes: one annotation patch per handled change (the new `last-handled`), plus one whenever a
//! handler must be tried again later (its progress). An object no handler is for, and an object
//! that did not change, cost none.
//!
//! Delivery is at least once: a crash between a handler's success and the write that records it
//! runs that handler again for the same change after the restart.

mod answer;
mod attempt;
pub mod change;
mod change_record;
pub mod clock;
pub mod filter;
pub mod index;
pub mod load;
pub mod progress;
pub mod spy;

pub use answer::take_result;
pub(crate) use answer::warning;
pub use change_record::change_record;
use change_record::{diffs, record, relevant};

use crate::config::handlers::{Handler, On};
use crate::reconcile::PlannedEvent;
use crate::script::{CallArg, Script, ScriptCtx};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use progress::{Keys, Progress, Recorded};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// The memos of every object (`ctx.memo`), process-wide: they outlive reloads of the config.
pub fn memos() -> &'static crate::script::memo::Memos {
    static MEMOS: std::sync::LazyLock<crate::script::memo::Memos> =
        std::sync::LazyLock::new(Default::default);
    &MEMOS
}

/// Runs `[operator] cleanup`, or `startup` once: `fn name(ctx)`, whose `ctx.memo` is the
/// operator's memo that every object's memo starts from. A failure is logged; khai carries on.
pub async fn run_hook(hook: &load::HookEntry, operator: &str, which: &str) {
    if let Err(e) = hook_attempt(hook, operator, which, None).await {
        tracing::error!(hook = which, function = %hook.spec.function, error = %e, "hook failed");
    }
}

/// Runs `[operator] startup` until it succeeds, as Kopf retries its startup handlers: a failure
/// is tried again after the hook's `backoff` (or the delay given to `retry()`), with `ctx.retry`
/// counting the attempts before; `fail()` or running out of `retries` gives up, logged as an
/// error, and khai carries on. Returns early, unfinished, when `shutdown` is cancelled.
pub async fn run_startup(
    hook: &load::HookEntry,
    operator: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let started = jiff::Timestamp::now();
    let mut retry = 0;
    loop {
        let runtime = jiff::Timestamp::now().duration_since(started);
        let attempt = crate::script::Attempt {
            retry,
            started: started.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            runtime: runtime.as_secs_f64(),
        };
        let error = match hook_attempt(hook, operator, "startup", Some(attempt)).await {
            Ok(()) => return,
            Err(e) => e,
        };
        let function = &hook.spec.function;
        let out_of_retries = hook.spec.retries.is_some_and(|r| retry >= r);
        let delay = match &error {
            crate::script::ScriptError::Fail { .. } => None,
            _ if out_of_retries => None,
            crate::script::ScriptError::Retry { delay, .. } => Some(delay.get()),
            _ => Some(hook.spec.backoff.get()),
        };
        let Some(delay) = delay else {
            tracing::error!(hook = "startup", %function, attempts = retry + 1, error = %error, "startup hook failed for good; carrying on without it");
            return;
        };
        tracing::warn!(hook = "startup", %function, attempt = retry + 1, retry_in = ?delay, error = %error, "startup hook failed; not ready until it succeeds");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return,
        }
        retry += 1;
    }
}

async fn hook_attempt(
    hook: &load::HookEntry,
    operator: &str,
    which: &str,
    attempt: Option<crate::script::Attempt>,
) -> Result<(), crate::script::ScriptError> {
    let mut ctx = ScriptCtx::detached(operator, which, None);
    ctx.memo = Some(memos().operator());
    ctx.attempt = attempt;
    hook.script
        .call_args_async(&hook.spec.function, vec![CallArg::Ctx(ctx)])
        .await?;
    tracing::info!(hook = which, function = %hook.spec.function, "hook ran");
    Ok(())
}

/// A failure to record handlers' progress; retried with the object's backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to record handler progress: {0}")]
    Record(#[source] crate::client::ApiError),
}

/// One `[[handler]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct Entry {
    pub spec: Handler,
    pub script: Script,
}

/// The handlers of one kind, and what they remember between turns.
pub struct Handlers {
    keys: Keys,
    entries: Vec<Entry>,
    /// When this khai started: objects created before it are resumed, not created.
    started: jiff::Timestamp,
    /// Objects seen since the start (a resume runs once per start).
    seen: Mutex<HashSet<String>>,
    /// What khai wrote to each object's annotations that the cache may not show yet.
    pending: Mutex<HashMap<String, Written>>,
}

/// Annotations khai wrote, kept until the cache shows them.
#[derive(Debug, Clone)]
struct Written {
    last: Option<String>,
    progress: Option<String>,
    at: std::time::Instant,
}

/// How long khai trusts what it wrote over a cache that does not show it yet.
const PENDING_FOR: Duration = Duration::from_secs(300);

/// What a turn of handlers produced for the controller to carry out.
#[derive(Debug, Default)]
pub struct Handled {
    /// Try again after this long (a handler waits for its retry).
    pub retry_in: Option<Duration>,
    /// Status the handlers returned, merged.
    pub status: Option<Map<String, Value>>,
    /// Events to record on the object.
    pub events: Vec<PlannedEvent>,
}

/// The object a turn is about, as the handlers need it.
pub struct Turn<'a> {
    pub obj: &'a DynamicObject,
    /// The object as scripts see it.
    pub view: Value,
    /// The `ctx` of every call (its `attempt` is set per handler).
    pub ctx: ScriptCtx,
    /// Where annotations are written.
    pub api: Api<DynamicObject>,
}

/// What changed since the handlers last finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Create,
    Update,
    None,
}

impl Handlers {
    pub fn new(operator: &str, entries: Vec<Entry>) -> Self {
        Self {
            keys: Keys::new(operator),
            entries,
            started: jiff::Timestamp::now(),
            seen: Mutex::default(),
            pending: Mutex::default(),
        }
    }

    /// Whether deleting an object must wait for a handler (a non-optional delete handler),
    /// which takes a finalizer.
    pub fn hold_deletion(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.spec.on == On::Delete && !e.spec.optional)
    }

    /// The handlers run on each watch event, with no retries and no bookkeeping.
    pub fn spies(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.spec.on == On::Event)
    }

    /// The delete handlers run on the watch's delete event, best effort.
    pub fn optional_deletes(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| e.spec.on == On::Delete && e.spec.optional)
    }

    /// Whether any handler of `on` exists.
    fn any(&self, on: &[On]) -> bool {
        self.entries.iter().any(|e| on.contains(&e.spec.on))
    }

    /// Forgets `uid`, whose object is gone.
    pub fn forget(&self, uid: &str) {
        crate::sync::lock(&self.seen).remove(uid);
        crate::sync::lock(&self.pending).remove(uid);
    }

    /// What the object's annotations say, or what khai wrote when the cache does not show it
    /// yet.
    fn recorded(&self, uid: &str, view: &Value) -> Recorded {
        let mut pending = crate::sync::lock(&self.pending);
        let annotations = &view["metadata"]["annotations"];
        let Some(w) = pending.get(uid).cloned() else {
            return progress::read(view, &self.keys);
        };
        let shows = |key: &str, v: &Option<String>| annotations[key].as_str() == v.as_deref();
        let caught_up =
            shows(&self.keys.last_handled, &w.last) && shows(&self.keys.progress, &w.progress);
        if caught_up || w.at.elapsed() > PENDING_FOR {
            pending.remove(uid);
            return progress::read(view, &self.keys);
        }
        let mut view = view.clone();
        let meta = &mut view["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        let set = |m: &mut Value, k: &str, v: &Option<String>| {
            m[k] = v.as_ref().map_or(Value::Null, |t| Value::String(t.clone()));
        };
        set(&mut meta["annotations"], &self.keys.last_handled, &w.last);
        set(&mut meta["annotations"], &self.keys.progress, &w.progress);
        progress::read(&view, &self.keys)
    }

    /// Runs the create, update, field and resume handlers that the object's change calls for.
    pub async fn on_change(&self, turn: &Turn<'_>) -> Result<Handled, Error> {
        let uid = turn.obj.uid().unwrap_or_default();
        let first_sight = crate::sync::lock(&self.seen).insert(uid.clone());
        let rec = self.recorded(&uid, &turn.view);
        let essence = change::essence(&turn.view, &self.keys.prefix);
        let digest = progress::digest(&essence);
        let old = rec.last.clone().unwrap_or(Value::Null);
        let cause = if !rec.handled {
            Cause::Create
        } else if rec.last_digest.as_deref() != Some(digest.as_str()) {
            Cause::Update
        } else {
            Cause::None
        };
        let resumed = first_sight && cause != Cause::Create && self.created_before_start(turn.obj);
        let mut calls = Vec::new();
        let mut anyone = false;
        for entry in &self.entries {
            let filters = entry.spec.filters();
            if !filter::metadata_passes(&filters, &turn.view) {
                continue;
            }
            anyone |= entry.spec.on != On::Event;
            let record = match (entry.spec.on, cause) {
                (On::Create, Cause::Create) => Some(record("create", &Value::Null, &essence, None)),
                (On::Update, Cause::Update) => relevant(&entry.spec, &old, &essence)
                    .map(|_| record("update", &old, &essence, None)),
                (On::Field, Cause::Create | Cause::Update) => relevant(&entry.spec, &old, &essence)
                    .map(|f| record("field", &old, &essence, Some(f))),
                (On::Resume, _) if resumed => Some(json!({
                    "type": "resume", "old": rec.last, "new": essence, "diff": [],
                })),
                _ => None,
            };
            if let Some(record) = record
                && self.wanted(entry, turn).await
            {
                calls.push((entry, record));
            }
        }
        let bookkeeping = anyone && self.any(&[On::Create, On::Update, On::Field]);
        let mut progress = match rec.progress.clone() {
            Some(p) if p.change == digest => p,
            _ => Progress {
                change: digest.clone(),
                handlers: Default::default(),
            },
        };
        let before = progress.clone();
        let mut handled = Handled::default();
        for (entry, record) in &calls {
            self.attempt(entry, turn, record, &mut progress, &mut handled)
                .await;
        }
        let done = progress.handlers.values().all(|a| a.done)
            && calls
                .iter()
                .all(|(e, _)| progress.handlers.contains_key(&e.spec.id()));
        if bookkeeping {
            let finished = done && (cause != Cause::None || rec.progress.is_some());
            if finished {
                self.record(turn, &uid, Some(&essence), None).await?;
            } else if !done && progress != before {
                self.record(turn, &uid, None, Some(&progress)).await?;
            }
        }
        Ok(handled)
    }

    /// Runs the delete handlers that hold the object back; `true` once all are done.
    pub async fn on_delete(&self, turn: &Turn<'_>) -> Result<(bool, Handled), Error> {
        let uid = turn.obj.uid().unwrap_or_default();
        let rec = self.recorded(&uid, &turn.view);
        let essence = change::essence(&turn.view, &self.keys.prefix);
        let change = format!("delete-{}", progress::digest(&essence));
        let mut progress = match rec.progress.clone() {
            Some(p) if p.change == change => p,
            _ => Progress {
                change,
                handlers: Default::default(),
            },
        };
        let before = progress.clone();
        let old = rec.last.clone().unwrap_or(Value::Null);
        let mut handled = Handled::default();
        let mut wanted = Vec::new();
        for entry in self
            .entries
            .iter()
            .filter(|e| e.spec.on == On::Delete && !e.spec.optional)
        {
            if filter::metadata_passes(&entry.spec.filters(), &turn.view)
                && self.wanted(entry, turn).await
            {
                wanted.push(entry);
            }
        }
        let record = json!({ "type": "delete", "old": old, "new": Value::Null,
                             "diff": diffs(&old, &Value::Null) });
        for entry in &wanted {
            self.attempt(entry, turn, &record, &mut progress, &mut handled)
                .await;
        }
        let done = wanted
            .iter()
            .all(|e| progress.handlers.get(&e.spec.id()).is_some_and(|a| a.done));
        if !done && progress != before {
            self.record(turn, &uid, None, Some(&progress)).await?;
        }
        Ok((done, handled))
    }

    /// Runs the optional delete handlers for an object already gone, once each, logging what
    /// fails.
    pub async fn on_gone(&self, obj: &DynamicObject, view: Value, ctx: ScriptCtx) {
        let essence = change::essence(&view, &self.keys.prefix);
        let record = json!({ "type": "delete", "old": essence, "new": Value::Null,
                             "diff": diffs(&essence, &Value::Null) });
        for entry in self.optional_deletes() {
            if !filter::metadata_passes(&entry.spec.filters(), &view) {
                continue;
            }
            let args = vec![
                CallArg::Json(view.clone()),
                CallArg::Ctx(budgeted(&ctx, entry.spec.budget)),
                CallArg::Json(record.clone()),
            ];
            if let Err(e) = entry
                .script
                .call_args_async(&entry.spec.function(), args)
                .await
            {
                tracing::warn!(handler = %entry.spec.id(), object = %obj.name_any(), error = %e, "optional delete handler failed");
            }
        }
    }

    /// Runs the raw event handlers (Kopf's spies) for one watch event of type `kind` (`None`:
    /// an object of the initial list, see [`spy`]); `view` is the whole object.
    pub async fn on_event(&self, view: Value, kind: Option<&str>, ctx: ScriptCtx) {
        for entry in self.spies() {
            if !filter::metadata_passes(&entry.spec.filters(), &view) {
                continue;
            }
            let event = json!({ "type": kind, "object": view });
            let args = vec![
                CallArg::Json(view.clone()),
                CallArg::Ctx(budgeted(&ctx, entry.spec.budget)),
                CallArg::Json(event),
            ];
            if let Err(e) = entry
                .script
                .call_args_async(&entry.spec.function(), args)
                .await
            {
                tracing::warn!(handler = %entry.spec.id(), error = %e, "event handler failed");
            }
        }
    }

    fn created_before_start(&self, obj: &DynamicObject) -> bool {
        obj.metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| t.0 < self.started)
    }

    /// Whether `entry`'s `when(obj, ctx)` (if any) selects the object; a failing predicate is
    /// logged and selects nothing.
    async fn wanted(&self, entry: &Entry, turn: &Turn<'_>) -> bool {
        selects(
            &entry.script,
            entry.spec.filters().when,
            turn,
            &entry.spec.id(),
        )
        .await
    }

    /// Writes `last-handled` (when given) and sets or clears `progress` on the object.
    async fn record(
        &self,
        turn: &Turn<'_>,
        uid: &str,
        last: Option<&Value>,
        progress: Option<&Progress>,
    ) -> Result<(), Error> {
        let patch = progress::patch(&self.keys, last, progress);
        turn.api
            .patch(
                &turn.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::Record(e.into()))?;
        let annotations = &patch["metadata"]["annotations"];
        let text = |k: &str| annotations[k].as_str().map(str::to_string);
        let previous = self.recorded(uid, &turn.view);
        let last = match last {
            Some(_) => text(&self.keys.last_handled),
            None => previous
                .handled
                .then(|| {
                    turn.view["metadata"]["annotations"][&self.keys.last_handled]
                        .as_str()
                        .map(str::to_string)
                })
                .flatten()
                .or_else(|| {
                    crate::sync::lock(&self.pending)
                        .get(uid)
                        .and_then(|w| w.last.clone())
                }),
        };
        crate::sync::lock(&self.pending).insert(
            uid.to_string(),
            Written {
                last,
                progress: text(&self.keys.progress),
                at: std::time::Instant::now(),
            },
        );
        Ok(())
    }
}

/// `ctx` with the side effects of its controller under `budget` (a handler's, timer's or
/// daemon's own), when it gives one.
pub(crate) fn budgeted(ctx: &ScriptCtx, budget: Option<crate::config::model::Budget>) -> ScriptCtx {
    let mut ctx = ctx.clone();
    if let (Some(b), Some(fx)) = (budget, &ctx.effects) {
        ctx.effects = Some(fx.with_budget(b));
    }
    ctx
}

/// Whether `when(obj)` or `when(obj, ctx)` (if any) selects the turn's object; a failing
/// predicate is logged and selects nothing. `what` names the entry in the log.
pub(crate) async fn selects(
    script: &Script,
    when: Option<&str>,
    turn: &Turn<'_>,
    what: &str,
) -> bool {
    let Some(when) = when else {
        return true;
    };
    let mut args = vec![CallArg::Json(turn.view.clone())];
    if script.has_function(when, 2) {
        // A predicate computes; it makes no calls.
        let mut ctx = turn.ctx.clone();
        ctx.effects = None;
        args.push(CallArg::Ctx(ctx));
    }
    match script.call_args_async(when, args).await {
        Ok(v) => v == Value::Bool(true),
        Err(e) => {
            tracing::warn!(entry = %what, error = %e, "when() failed; not running it");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_handlers_own_budget_replaces_its_controllers_and_none_keeps_it() {
        use crate::effects::{Budget, Effects};
        let mut ctx = crate::script::ScriptCtx::detached("op", "h", None);
        let own = Budget {
            calls: 3,
            ..Budget::default()
        };
        assert!(
            super::budgeted(&ctx, Some(own)).effects.is_none(),
            "no effects, none given"
        );
        ctx.effects = Some(std::sync::Arc::new(Effects::new(
            tokio::runtime::Handle::current(),
            Budget::default(),
        )));
        let b = |c: &crate::script::ScriptCtx| c.effects.as_ref().map(|e| e.budget.calls);
        assert_eq!(b(&super::budgeted(&ctx, Some(own))), Some(3));
        assert_eq!(b(&super::budgeted(&ctx, None)), Some(100));
    }
}
