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
    ctx.memo = Some(super::hooks::operator_memo(op, case)?);
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
    let (obj, c) = (CallArg::Json(object.clone()), CallArg::Ctx(ctx.clone()));
    let (script, function, args, daemon, filters) = if let Some(h) = handler {
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
        (&h.script, h.spec.function(), args, false, h.spec.filters())
    } else if let Some(t) = compiled.timers.iter().find(|t| t.spec.function == name) {
        let args = vec![obj, c];
        (
            &t.script,
            t.spec.function.clone(),
            args,
            false,
            t.spec.filters(),
        )
    } else if let Some(d) = compiled
        .daemons
        .iter()
        .find(|d| d.spec.tick == name || d.spec.stop.as_deref() == Some(name))
    {
        let state = CallArg::Json(input.state.clone().unwrap_or(Value::Null));
        let args = vec![obj, c, state];
        (&d.script, name.to_string(), args, true, d.spec.filters())
    } else {
        let name = name.to_string();
        return Err(Problem::NoHandlerFunction { name }
            .at("handler")
            .in_case(case));
    };
    let excluded = excluded_by(&filters, script, &object, &ctx);
    match (excluded, case.expect.runs) {
        (None, Some(false)) => {
            let got = "it runs: its filters select the object";
            return Ok(vec![Mismatch::new("runs", "false", got)]);
        }
        (Some(_), Some(false)) => return Ok(Vec::new()),
        (Some(why), _) => {
            let got = format!("it does not run: {why}, as under khai run");
            return Ok(vec![Mismatch::new("runs", "true", got)]);
        }
        (None, _) => {}
    }
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

/// Which of an entry's filters keeps it from running for `object` under `khai run`, if any:
/// its labels, its annotations, or its `when` (which, failing, selects nothing there too).
fn excluded_by(
    filters: &crate::config::handlers::Filters<'_>,
    script: &crate::script::Script,
    object: &Value,
    ctx: &ScriptCtx,
) -> Option<String> {
    use crate::config::handlers::Filters;
    use crate::handler::filter::metadata_passes;
    use crate::script::CallArg;
    let none = std::collections::BTreeMap::new();
    let only = |labels, annotations| Filters {
        labels,
        annotations,
        when: None,
    };
    if !metadata_passes(&only(filters.labels, &none), object) {
        return Some("its labels filter excludes the object".into());
    }
    if !metadata_passes(&only(&none, filters.annotations), object) {
        return Some("its annotations filter excludes the object".into());
    }
    let when = filters.when?;
    let mut args = vec![CallArg::Json(object.clone())];
    if script.has_function(when, 2) {
        // A predicate computes; it makes no calls (as `handler::selects`).
        let mut ctx = ctx.clone();
        ctx.effects = None;
        args.push(CallArg::Ctx(ctx));
    }
    match script.call_args(when, &args) {
        Ok(Value::Bool(true)) => None,
        Ok(v) => Some(format!("its when ({when}) answers {v}")),
        Err(e) => Some(format!("its when ({when}) fails: {e}")),
    }
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

#[cfg(test)]
mod tests {
    use crate::testing::run_case;
    use crate::testing::tests::{case, handler_operator};

    fn found(op: &crate::operator::Operator, src: &str) -> Vec<String> {
        let found = run_case(op, &case(src)).unwrap();
        found.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_handler_case_runs_only_where_the_entrys_filters_select_the_object() {
        let toml = "[[handler]]\nfor = \"Web\"\non = \"create\"\nscript = \"h.rhai\"\nfunction = \"made\"\nlabels = { pick = \"yes\" }\n\n\
                    [[timer]]\nfor = \"Web\"\nscript = \"h.rhai\"\nfunction = \"tick\"\ninterval = \"1s\"\nwhen = \"big\"\n";
        let script = "fn made(obj, ctx, change) { #{ status: #{ ran: true } } }\n\
                      fn tick(obj, ctx) { #{ status: #{ ran: true } } }\n\
                      fn big(obj) { obj.spec.replicas > 2 }\n";
        let (_dir, op) = handler_operator(toml, script);
        // The case's object has no label and no replicas: neither entry would run live.
        assert_eq!(
            found(&op, "handler: made\nexpect: { status: { ran: true } }\n"),
            [
                "runs: expected true, got it does not run: its labels filter excludes the object, as under khai run"
            ]
        );
        assert!(found(&op, "handler: made\nexpect: { runs: false }\n").is_empty());
        assert_eq!(
            found(&op, "handler: tick\nexpect: { status: { ran: true } }\n")[0],
            "runs: expected true, got it does not run: its when (big) answers false, as under khai run"
        );
        let labelled = "handler: made\nobject: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w, labels: { pick: \"yes\" } }, spec: { replicas: 3 } }\n";
        let c = crate::testing::case::parse(
            std::path::Path::new("tests/c.yaml"),
            &format!("{labelled}expect: {{ status: {{ ran: true }} }}\n"),
        )
        .unwrap();
        assert!(run_case(&op, &c).unwrap().is_empty());
        let c = crate::testing::case::parse(
            std::path::Path::new("tests/c.yaml"),
            &format!("{labelled}expect: {{ runs: false }}\n"),
        )
        .unwrap();
        assert_eq!(
            run_case(&op, &c).unwrap()[0].to_string(),
            "runs: expected false, got it runs: its filters select the object"
        );
    }

    #[test]
    fn a_case_starts_from_the_memo_the_startup_hook_fills() {
        let toml = "[operator.startup]\nscript = \"h.rhai\"\nfunction = \"startup\"\n\n\
                    [[handler]]\nfor = \"Web\"\non = \"create\"\nscript = \"h.rhai\"\nfunction = \"made\"\n";
        let script = "fn startup(ctx) { ctx.memo.region = \"eu-west\"; }\n\
                      fn made(obj, ctx, change) { #{ status: #{ region: ctx.memo.region } } }\n";
        let (_dir, op) = handler_operator(toml, script);
        assert!(
            found(
                &op,
                "handler: made\nexpect: { status: { region: eu-west } }\n"
            )
            .is_empty()
        );
    }
}
