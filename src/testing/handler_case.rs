//! Handler, timer and daemon cases: the function called with the case's object (and a change
//! record or a daemon's state), reading the case's cache and the indexes built from it.

use super::case::{self, Case};
use super::compare::Mismatch;
use super::expect::expectations;
use super::lookup::{KindRef, MemoryLookup, Owner};
use super::stubbed::Stubbed;
use super::{Error, Invalid, Problem, stored};
use crate::operator::Operator;
use crate::reconcile::{self, Plan};
use crate::script::ScriptCtx;
use serde_json::{Value, json};
use std::sync::Arc;

/// Calls the handler, timer or daemon function a case names with its object (and the change
/// record built from `old`, or the daemon's `state`), and checks its status and events.
pub(super) fn run_handler(
    op: &Operator,
    case: &Case,
    input: &case::HandlerInput,
    stubbed: &Stubbed,
) -> Result<Vec<Mismatch>, Error> {
    use crate::handler::{Handled, change, change_record, clock::daemon_result, take_result};
    use crate::script::CallArg;
    let bad = |field: &str, message: String| Error::Case {
        file: case.file.clone(),
        field: field.into(),
        message,
    };
    let compiled = &op.handlers;
    let object = stored(op, &case.object, None).map_err(|p| p.at("object").in_case(case))?;
    let mut ctx = ScriptCtx::detached(
        &op.config.model.operator.name,
        &input.name,
        object["metadata"]["namespace"].as_str(),
    );
    ctx.params = Value::Object(op.config.model.params.clone());
    ctx.memo = Some(crate::script::memo::Memo::default());
    ctx.effects = stubbed.effects.clone();
    let (lookup, indexes) =
        handler_lookups(op, case, &input.name, &object).map_err(|i| i.in_case(case))?;
    ctx.lookup = Arc::new(lookup);
    ctx.indexes = Some(Arc::new(indexes));
    let keys = crate::handler::progress::Keys::new(&op.config.model.operator.name);
    let essence = |v: &Value| change::essence(v, &keys.prefix);
    let name = input.name.as_str();
    let handler = compiled
        .handlers
        .iter()
        .find(|h| h.spec.function() == name || h.spec.id() == name);
    match (handler, input.retry) {
        // A handler's attempt: `ctx.retry` as the case says, begun now.
        (Some(_), retry) => {
            ctx.attempt = Some(crate::script::Attempt {
                retry: retry.unwrap_or(0),
                started: jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
                    .to_string(),
                runtime: 0.0,
            });
        }
        (None, Some(_)) => {
            return Err(bad(
                "retry",
                format!("only for handlers; {name:?} is not a [[handler]] function"),
            ));
        }
        (None, None) => {}
    }
    let (obj, c) = (CallArg::Json(object.clone()), CallArg::Ctx(ctx));
    let (script, function, args, daemon) = if let Some(h) = handler {
        let old = match &input.old {
            Some(o) => essence(&stored(op, o, None).map_err(|p| p.at("old").in_case(case))?),
            None if h.spec.on == crate::config::handlers::On::Delete => essence(&object),
            None => Value::Null,
        };
        let record = match h.spec.on {
            // A spy gets the whole object, as under `khai run`: ADDED, or MODIFIED given `old`.
            crate::config::handlers::On::Event => json!({
                "type": if input.old.is_some() { "MODIFIED" } else { "ADDED" },
                "object": object,
            }),
            _ => change_record(&h.spec, &old, &essence(&object)),
        };
        let args = vec![obj, c, CallArg::Json(record)];
        (&h.script, h.spec.function(), args, false)
    } else if let Some(t) = compiled.timers.iter().find(|t| t.spec.function == name) {
        (&t.script, t.spec.function.clone(), vec![obj, c], false)
    } else if let Some(d) = compiled
        .daemons
        .iter()
        .find(|d| d.spec.tick == name || d.spec.stop.as_deref() == Some(name))
    {
        let state = CallArg::Json(input.state.clone().unwrap_or(Value::Null));
        (&d.script, name.to_string(), vec![obj, c, state], true)
    } else {
        let name = name.to_string();
        return Err(Problem::NoHandlerFunction { name }
            .at("handler")
            .in_case(case));
    };
    let answer = script
        .call_args(&function, &args)
        .map_err(reconcile::Error::Script)
        .and_then(|out| {
            let mut handled = Handled::default();
            let taken = if daemon {
                daemon_result(out, &mut handled).map(|_| ())
            } else {
                take_result(out, &mut handled)
            };
            taken.map_err(|e| reconcile::Error::InvalidResult {
                file: script.file().display().to_string(),
                function: function.clone(),
                answer: Box::new(reconcile::InvalidAnswer {
                    field: "result".into(),
                    problem: reconcile::Problem::Handler(e.to_string()),
                }),
            })?;
            Ok(Plan {
                children: Vec::new(),
                status: handled.status,
                requeue_after: None,
                events: handled.events,
            })
        });
    expectations(&case.expect, answer).map_err(|i| i.in_case(case))
}

/// What a handler, timer or daemon case's `ctx` reads: lookups over the case's `cache` (and its
/// object) of the kinds the entry's kind is watched with under `khai run` (its own, and the
/// `owns` and `watches` of the controllers for it), and the config's indexes built from the
/// same objects.
pub(super) fn handler_lookups(
    op: &Operator,
    case: &Case,
    name: &str,
    object: &Value,
) -> Result<(MemoryLookup, crate::handler::index::Fixed), Invalid> {
    let model = &op.config.model;
    let c = &op.handlers;
    let for_kind = c
        .handlers
        .iter()
        .find(|h| h.spec.function() == name || h.spec.id() == name)
        .map(|h| &h.spec.for_kind)
        .or_else(|| {
            c.timers
                .iter()
                .find(|t| t.spec.function == name)
                .map(|t| &t.spec.for_kind)
        })
        .or_else(|| {
            c.daemons
                .iter()
                .find(|d| d.spec.tick == name || d.spec.stop.as_deref() == Some(name))
                .map(|d| &d.spec.for_kind)
        });
    let Some(for_kind) = for_kind else {
        let name = name.to_string();
        return Err(Problem::NoHandlerFunction { name }.at("handler"));
    };
    let own = model.complete_kind(for_kind);
    let mut visible = vec![own.clone()];
    for ctl in &model.controllers {
        if model.complete_kind(&ctl.for_kind).compatible(&own) {
            let related = ctl.owns.iter().chain(ctl.watches.iter().map(|w| &w.kind));
            visible.extend(related.map(|k| model.complete_kind(k)));
        }
    }
    let indexed: Vec<KindRef> = c
        .indexes
        .iter()
        .map(|e| model.complete_kind(&e.spec.for_kind))
        .collect();
    let meta = &object["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut lookup = MemoryLookup {
        visible,
        objects: vec![object.clone()],
        owner: Owner {
            kind: text(&object["kind"]),
            name: text(&meta["name"]),
            uid: text(&meta["uid"]),
            namespace: meta["namespace"].as_str().map(str::to_string),
        },
        model: model.clone(),
    };
    for (i, o) in case.cache.iter().enumerate() {
        let at = format!("cache[{i}]");
        let kind = KindRef::of(o);
        let written = o["kind"].as_str().unwrap_or_default();
        if lookup.check_visible(&kind, written).is_err()
            && !indexed.iter().any(|k| k.compatible(&kind))
        {
            let problem = Problem::NotWatchedNorIndexed {
                written: written.to_string(),
                kind: own.kind.clone(),
            };
            return Err(problem.at(at));
        }
        let ns = lookup.owner.namespace.as_deref();
        lookup
            .objects
            .push(stored(op, o, ns).map_err(|p| p.at(&at))?);
    }
    let indexes = crate::handler::index::Fixed::build(&c.indexes, &lookup.objects, |ix, o| {
        model
            .complete_kind(&ix.for_kind)
            .compatible(&KindRef::of(o))
    })
    .map_err(|e| Problem::Index(e).at("cache"))?;
    Ok((lookup, indexes))
}
