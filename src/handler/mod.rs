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

pub mod change;
pub mod clock;
pub mod filter;
pub mod index;
pub mod load;
pub mod progress;

use crate::config::handlers::{Handler, On};
use crate::reconcile::PlannedEvent;
use crate::script::{Attempt, CallArg, Script, ScriptCtx, ScriptError};
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

/// Runs `[operator] startup` or `cleanup`: `fn name(ctx)`, whose `ctx.memo` is the operator's
/// memo that every object's memo starts from. A failure is logged; khai carries on.
pub async fn run_hook(hook: &load::HookEntry, operator: &str, which: &str) {
    let mut ctx = ScriptCtx::detached(operator, which, None);
    ctx.memo = Some(memos().operator());
    match hook
        .script
        .call_args_async(&hook.spec.function, vec![CallArg::Ctx(ctx)])
        .await
    {
        Ok(_) => tracing::info!(hook = which, function = %hook.spec.function, "hook ran"),
        Err(e) => {
            tracing::error!(hook = which, function = %hook.spec.function, error = %e, "hook failed")
        }
    }
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
                CallArg::Ctx(ctx.clone()),
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

    /// Runs the raw event handlers (Kopf's spies) for one watch event.
    pub async fn on_event(&self, view: Value, deleted: bool, ctx: ScriptCtx) {
        let kind = if deleted { "DELETED" } else { "MODIFIED" };
        for entry in self.spies() {
            if !filter::metadata_passes(&entry.spec.filters(), &view) {
                continue;
            }
            let event = json!({ "type": kind, "object": view });
            let args = vec![
                CallArg::Json(view.clone()),
                CallArg::Ctx(ctx.clone()),
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

    /// One attempt of `entry` unless it is done or waiting for its retry; records the outcome
    /// in `progress` and what it returned in `handled`.
    async fn attempt(
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
        let mut ctx = turn.ctx.clone();
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
        args.push(CallArg::Ctx(turn.ctx.clone()));
    }
    match script.call_args_async(when, args).await {
        Ok(v) => v == Value::Bool(true),
        Err(e) => {
            tracing::warn!(entry = %what, error = %e, "when() failed; not running it");
            false
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

pub(crate) fn warning(reason: &str, message: &str) -> PlannedEvent {
    PlannedEvent {
        warning: true,
        reason: reason.into(),
        message: message.chars().take(1024).collect(),
    }
}

/// Whether `spec` cares about a change from `old` to `new`: with a `field`, only when that
/// field changed and its conditions pass. Returns the field (or `""`).
fn relevant<'a>(spec: &'a Handler, old: &Value, new: &Value) -> Option<&'a str> {
    let Some(field) = spec.field.as_deref() else {
        return Some("");
    };
    let (o, n) = (change::field(old, field), change::field(new, field));
    let conditions = filter::FieldConditions {
        value: spec.value.as_ref(),
        old: spec.old.as_ref(),
        new: spec.new.as_ref(),
    };
    (!change::diff(o, n).is_empty() && conditions.pass(o, n)).then_some(field)
}

/// The change record a handler gets: `#{ type, old, new, diff }`, relative to `field` when
/// given (and `field` itself).
/// The change record a handler of `spec` gets for a change from `old` to `new` (the
/// objects' essences; `old` is the object itself for a delete); what `khai test` calls
/// handlers with.
pub fn change_record(spec: &Handler, old: &Value, new: &Value) -> Value {
    match spec.on {
        On::Create => record("create", &Value::Null, new, None),
        On::Update => record("update", old, new, None),
        On::Field => record("field", old, new, spec.field.as_deref()),
        On::Delete => record("delete", old, &Value::Null, None),
        On::Resume => json!({ "type": "resume", "old": old, "new": new, "diff": [] }),
        On::Event => json!({ "type": "MODIFIED", "object": new }),
    }
}

fn record(kind: &str, old: &Value, new: &Value, field: Option<&str>) -> Value {
    match field.filter(|f| !f.is_empty()) {
        Some(f) => {
            let (o, n) = (change::field(old, f), change::field(new, f));
            json!({ "type": kind, "field": f, "old": o, "new": n, "diff": diffs(o, n) })
        }
        None => json!({ "type": kind, "old": old, "new": new, "diff": diffs(old, new) }),
    }
}

fn diffs(old: &Value, new: &Value) -> Value {
    Value::Array(
        change::diff(old, new)
            .iter()
            .map(change::Diff::to_json)
            .collect(),
    )
}

/// Reads a handler's answer: nothing, or a map with `status` and `events`.
pub fn take_result(out: Value, handled: &mut Handled) -> Result<(), String> {
    let mut map = match out {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "a handler returns nothing or a map of status and events, not {}",
                crate::script::type_name(&other)
            ));
        }
    };
    if let Some(status) = map.remove("status") {
        match status {
            Value::Object(s) => handled.status.get_or_insert_with(Map::new).extend(s),
            Value::Null => {}
            other => {
                return Err(format!(
                    "status: expected a map, got {}",
                    crate::script::type_name(&other)
                ));
            }
        }
    }
    if let Some(events) = map.remove("events") {
        let plan = crate::reconcile::parse_plan(json!({ "events": events }))
            .map_err(|(f, m)| format!("{f}: {m}"))?;
        handled.events.extend(plan.events);
    }
    if let Some(key) = map.keys().next() {
        return Err(format!(
            "{key}: unknown key; a handler returns status or events"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(on: &str, extra: &str) -> Handler {
        toml::from_str(&format!(
            "for = \"Widget\"\non = \"{on}\"\nscript = \"h.rhai\"\n{extra}"
        ))
        .unwrap()
    }

    #[test]
    fn a_field_handler_cares_only_for_its_field_and_its_conditions() {
        let old = json!({ "spec": { "size": 1, "image": "a" } });
        let new = json!({ "spec": { "size": 2, "image": "a" } });
        assert_eq!(
            relevant(&handler("field", "field = \"spec.size\""), &old, &new),
            Some("spec.size")
        );
        assert_eq!(
            relevant(&handler("field", "field = \"spec.image\""), &old, &new),
            None
        );
        assert_eq!(
            relevant(
                &handler("field", "field = \"spec.size\"\nnew = 3"),
                &old,
                &new
            ),
            None
        );
        assert_eq!(
            relevant(
                &handler("field", "field = \"spec.size\"\nold = 1\nnew = 2"),
                &old,
                &new
            ),
            Some("spec.size")
        );
        assert_eq!(relevant(&handler("update", ""), &old, &new), Some(""));
    }

    #[test]
    fn a_field_change_record_is_relative_to_the_field() {
        let old = json!({ "spec": { "size": 1 } });
        let new = json!({ "spec": { "size": 2 } });
        assert_eq!(
            record("field", &old, &new, Some("spec.size")),
            json!({ "type": "field", "field": "spec.size", "old": 1, "new": 2,
                    "diff": [{ "op": "change", "path": [], "old": 1, "new": 2 }] })
        );
        let whole = record("update", &old, &new, None);
        assert_eq!(whole["diff"][0]["path"], json!(["spec", "size"]));
    }

    #[test]
    fn a_handler_answer_is_nothing_or_status_and_events() {
        let mut h = Handled::default();
        take_result(
            json!({ "status": { "a": 1 }, "events": [{ "reason": "Done", "message": "m" }] }),
            &mut h,
        )
        .unwrap();
        take_result(json!({ "status": { "b": 2 } }), &mut h).unwrap();
        assert_eq!(
            h.status,
            Some(json!({ "a": 1, "b": 2 }).as_object().cloned().unwrap())
        );
        assert_eq!(h.events.len(), 1);
        assert!(
            take_result(json!({ "children": [] }), &mut h)
                .unwrap_err()
                .contains("children: unknown key")
        );
        assert!(take_result(json!(3), &mut h).is_err());
    }
}
