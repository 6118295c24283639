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
mod call;
pub(crate) mod change;
mod change_record;
pub(crate) mod clock;
pub(crate) mod filter;
mod hooks;
pub(crate) mod index;
pub(crate) mod load;
pub(crate) mod progress;
mod recorded;
pub(crate) mod schedule;
pub(crate) mod spy;
mod unrecorded;

pub(crate) use answer::take_result;
pub(crate) use answer::warning;
pub(crate) use call::{budgeted, selects, selects_view};
pub(crate) use change_record::change_record;
use change_record::{diffs, record, relevant};
pub(crate) use hooks::{memos, run_hook, run_startup};

use crate::config::handlers::{Handler, On};
use crate::reconcile::PlannedEvent;
use crate::script::{Script, ScriptCtx};
use kube::api::DynamicObject;
use progress::{Keys, Progress};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// A failure to record handlers' progress; retried with the object's backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Record(#[from] crate::apply::Error),
}

/// One `[[handler]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct Entry {
    pub spec: Handler,
    pub script: Script,
}

/// The handlers of one kind, and what they remember between turns.
pub(crate) struct Handlers {
    keys: Keys,
    entries: Vec<Entry>,
    /// When this khai started: objects created before it are resumed, not created.
    started: jiff::Timestamp,
}

/// What a turn of handlers produced for the controller to carry out.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// Try again after this long (a handler waits for its retry).
    pub retry_in: Option<Duration>,
    /// Status the handlers returned, merged.
    pub status: Option<Map<String, Value>>,
    /// Events to record on the object.
    pub events: Vec<PlannedEvent>,
}

/// The object a turn is about, as the handlers need it.
pub(crate) struct Turn<'a> {
    pub obj: &'a DynamicObject,
    /// The object as scripts see it.
    pub view: Value,
    /// The `ctx` of every call (its `attempt` is set per handler).
    pub ctx: ScriptCtx,
    /// What writes its annotations (`last-handled`, `progress`), and its kind.
    pub applier: std::sync::Arc<crate::apply::Applier>,
    pub kind: crate::watch::Kind,
    /// The records of the controller's objects, and this object's key among them: what khai
    /// wrote that the cache may not show yet, and whether the handlers have seen it since start.
    pub objects: std::sync::Arc<crate::object::Objects>,
    pub key: crate::object::ObjectKey,
}

/// What changed since the handlers last finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Create,
    Update,
    None,
}

impl Handlers {
    pub(crate) fn new(operator: &str, entries: Vec<Entry>) -> Self {
        Self {
            keys: Keys::new(operator),
            entries,
            started: jiff::Timestamp::now(),
        }
    }

    /// Whether deleting an object must wait for a handler (a non-optional delete handler),
    /// which takes a finalizer.
    pub(crate) fn hold_deletion(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.spec.on == On::Delete && !e.spec.optional)
    }

    /// Whether a delete handler that waits (not `optional`) is for the object by its filters
    /// (`labels`, `annotations`, `when`): only then does khai hold it with its finalizer.
    pub(crate) async fn holds(&self, turn: &Turn<'_>) -> bool {
        !self.deletes_for(turn).await.is_empty()
    }

    /// The delete handlers that wait (not `optional`) whose filters select the object.
    async fn deletes_for(&self, turn: &Turn<'_>) -> Vec<&Entry> {
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
        wanted
    }

    /// The handlers run on each watch event, with no retries and no bookkeeping.
    pub(crate) fn spies(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.spec.on == On::Event)
    }

    /// The delete handlers run on the watch's delete event, best effort.
    pub(crate) fn optional_deletes(&self) -> impl Iterator<Item = &Entry> {
        self.entries
            .iter()
            .filter(|e| e.spec.on == On::Delete && e.spec.optional)
    }

    /// Whether any handler of `on` exists.
    fn any(&self, on: &[On]) -> bool {
        self.entries.iter().any(|e| on.contains(&e.spec.on))
    }

    /// Runs the create, update, field and resume handlers that the object's change calls for.
    pub(crate) async fn on_change(&self, turn: &Turn<'_>) -> Result<Handled, Error> {
        let first_sight = turn
            .objects
            .update(&turn.key, |s| !std::mem::replace(&mut s.seen, true));
        let rec = self.recorded(turn);
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
                self.record(turn, Some(&essence), None).await?;
            } else if !done && progress != before {
                self.record(turn, None, Some(&progress)).await?;
            }
        }
        Ok(handled)
    }

    /// Runs the delete handlers that hold the object back; `true` once all are done.
    pub(crate) async fn on_delete(&self, turn: &Turn<'_>) -> Result<(bool, Handled), Error> {
        let rec = self.recorded(turn);
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
        let wanted = self.deletes_for(turn).await;
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
            self.record(turn, None, Some(&progress)).await?;
        }
        Ok((done, handled))
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
}
