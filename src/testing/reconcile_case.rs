//! Reconcile cases: the controller's script called on the case's object as `khai run` calls it,
//! its answer validated into a plan and placed as `khai run` would place its children.

use super::case::Case;
use super::compare::Mismatch;
use super::expect::{expectations, reconcile_expectations};
use super::lookup::{KindRef, MemoryLookup, Owner};
use super::stubbed::Stubbed;
use super::{Error, Invalid, Problem, stored};
use crate::config::model::{Controller, Scope};
use crate::operator::Operator;
use crate::reconcile::children::Kinds as _;
use crate::reconcile::{self, Plan};
use crate::script::{Script, ScriptCtx};
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) fn run_reconcile(
    op: &Operator,
    case: &Case,
    stubbed: &Stubbed,
) -> Result<Vec<Mismatch>, Error> {
    let bad = |field: &str, message: String| Error::Case {
        file: case.file.clone(),
        field: field.into(),
        message,
    };
    let index = pick_controller(op, case).map_err(|p| p.at("controller").in_case(case))?;
    let ctl = &op.config.model.controllers[index];
    let script = op
        .scripts
        .get(index)
        .ok_or_else(|| bad("controller", "has no compiled script".into()))?;
    let object = stored(op, &case.object, None).map_err(|p| p.at("object").in_case(case))?;
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    let lookup = memory_lookup(op, ctl, case, &object).map_err(|i| i.in_case(case))?;
    let ctx = ScriptCtx {
        operator: op.config.model.operator.name.clone(),
        controller: ctl.display_name(),
        namespace,
        params: Value::Object(op.config.model.params.clone()),
        lookup: Arc::new(lookup),
        memo: Some(super::hooks::operator_memo(op, case)?),
        attempt: None,
        indexes: None,
        effects: stubbed.effects.clone(),
    };
    // The function khai calls on an object being deleted (`controller::prepare`).
    let finalize = "finalize";
    if object["metadata"].get("deletionTimestamp").is_some()
        && script.has_function(finalize, crate::operator::RECONCILE_ARITY)
    {
        // Being deleted: khai calls `finalize`, not `reconcile`.
        let answer = script
            .call_with_ctx(finalize, &object, ctx)
            .map_err(reconcile::Error::Script);
        let done = answer.as_ref().ok().map(|v| *v == Value::Bool(true));
        let mut out = expectations(&case.expect, answer.map(|_| Plan::default()))
            .map_err(|i| i.in_case(case))?;
        if let (Some(want), Some(got)) = (case.expect.finalized, done)
            && want != got
        {
            out.push(Mismatch::new(
                "finalized",
                want.to_string(),
                got.to_string(),
            ));
        }
        return Ok(out);
    }
    let answer =
        plan(script, &ctl.reconcile, &object, ctx).and_then(|p| placed(op, ctl, &object, p));
    reconcile_expectations(&case.expect, answer, |e| failed(op, &object, e))
        .map_err(|i| i.in_case(case))
}

/// What khai writes and records when a reconcile of `object` fails with `e`
/// (`controller::report`): a Warning Event, and the status [`conditions::failing`] makes of the
/// object's own, the failing answer's `status` (`fail(msg, #{ status })`) and, where khai owns
/// the status (a CRD of the config with a status), `Ready=False` and `Failed=True`.
fn failed(op: &Operator, object: &Value, e: &reconcile::Error) -> Plan {
    use crate::reconcile::conditions;
    let reason = e.failure_reason();
    let message: String = e.to_string().chars().take(1024).collect();
    let owns_status = super::stored::crd_of(op, object).is_some_and(|c| c.status.is_some());
    let answer = match e {
        reconcile::Error::Script(s) => s.failing_status(),
        _ => None,
    };
    let status = (owns_status || answer.is_some())
        .then(|| serde_json::from_value::<kube::api::DynamicObject>(object.clone()).ok())
        .flatten()
        .map(|obj| conditions::failing(&obj, answer, reason, &message, owns_status));
    Plan {
        status,
        events: vec![reconcile::PlannedEvent {
            warning: true,
            reason: reason.into(),
            message,
        }],
        ..Plan::default()
    }
}

/// Refuses the children `khai run` would refuse ([`reconcile::children::place`], the same
/// function), so a plan that passes here applies there.
pub(super) fn placed(
    op: &Operator,
    ctl: &Controller,
    object: &Value,
    plan: Plan,
) -> Result<Plan, reconcile::Error> {
    let model = &op.config.model;
    let parent_kind = KindRef::of(object);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (name, namespace) = (
        text(&object["metadata"]["name"]),
        object["metadata"]["namespace"].as_str(),
    );
    let kinds = OfflineKinds { op, ctl };
    let parent_namespaced = kinds
        .namespaced(&text(&object["apiVersion"]), &parent_kind.kind)
        .unwrap_or(true);
    let mut children = plan.children.clone();
    reconcile::children::place(
        &mut children,
        reconcile::children::Parent {
            group: parent_kind.group.as_deref().unwrap_or_default(),
            kind: &parent_kind.kind,
            name: &name,
            namespace: namespace.filter(|_| parent_namespaced),
        },
        &kinds,
        &model.operator.namespaces,
        ctl.unowned_children,
    )?;
    Ok(plan)
}

/// Kinds as far as the config and khai's table of built-in kinds tell.
pub(super) struct OfflineKinds<'a> {
    op: &'a Operator,
    ctl: &'a Controller,
}

impl reconcile::children::Kinds for OfflineKinds<'_> {
    fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        let of = KindRef::of(&json!({ "apiVersion": api_version, "kind": kind }));
        let crd = self
            .op
            .config
            .model
            .crds
            .iter()
            .find(|c| c.kind == of.kind && of.group.as_deref() == Some(c.group.as_str()));
        match crd {
            Some(c) => Some(c.scope == Scope::Namespaced),
            None => of.builtin().map(|b| b.namespaced),
        }
    }
    fn owned(&self, api_version: &str, kind: &str) -> bool {
        let of = KindRef::of(&json!({ "apiVersion": api_version, "kind": kind }));
        let model = &self.op.config.model;
        self.ctl
            .owns
            .iter()
            .any(|o| model.complete_kind(o).compatible(&of))
    }
}

/// The controller that reconciles the case's object: the one named by `controller:`, else the
/// only one whose `for` matches the object's kind.
pub(super) fn pick_controller(op: &Operator, case: &Case) -> Result<usize, Problem> {
    let controllers = &op.config.model.controllers;
    let names = || {
        controllers
            .iter()
            .map(Controller::display_name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(name) = &case.controller {
        return controllers
            .iter()
            .position(|c| c.display_name() == *name)
            .ok_or_else(|| Problem::NoSuchController {
                name: name.clone(),
                names: names(),
            });
    }
    let kind = KindRef::of(&case.object);
    let model = &op.config.model;
    let matching: Vec<usize> = (0..controllers.len())
        .filter(|&i| {
            model
                .complete_kind(&controllers[i].for_kind)
                .compatible(&kind)
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok(*one),
        [] => Err(Problem::NoController {
            kind: kind.kind,
            names: names(),
        }),
        _ => Err(Problem::SeveralControllers {
            kind: kind.kind,
            names: names(),
        }),
    }
}

/// The case's cache (each object stored as the API server would, in the object's namespace
/// unless it names one) plus the object itself, visible through the controller's kinds only.
pub(super) fn memory_lookup(
    op: &Operator,
    ctl: &Controller,
    case: &Case,
    object: &Value,
) -> Result<MemoryLookup, Invalid> {
    let model = &op.config.model;
    let visible: Vec<KindRef> = std::iter::once(&ctl.for_kind)
        .chain(&ctl.owns)
        .chain(ctl.watches.iter().map(|w| &w.kind))
        .map(|k| model.complete_kind(k))
        .collect();
    let meta = &object["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let owner = Owner {
        kind: text(&object["kind"]),
        name: text(&meta["name"]),
        uid: text(&meta["uid"]),
        namespace: meta["namespace"].as_str().map(str::to_string),
    };
    let mut lookup = MemoryLookup {
        visible,
        objects: vec![object.clone()],
        owner,
        model: model.clone(),
    };
    for (i, o) in case.cache.iter().enumerate() {
        let at = format!("cache[{i}]");
        let kind = KindRef::of(o);
        let written = o["kind"].as_str().unwrap_or_default();
        lookup.check_visible(&kind, written).map_err(|_| {
            Problem::NotWatched {
                written: written.to_string(),
                controller: ctl.display_name(),
            }
            .at(&at)
        })?;
        let ns = lookup.owner.namespace.as_deref();
        lookup
            .objects
            .push(stored(op, o, ns).map_err(|p| p.at(&at))?);
    }
    Ok(lookup)
}

/// The engine path of one reconcile, without a cluster: call the script, validate its answer.
pub(crate) fn plan(
    script: &Script,
    function: &str,
    object: &Value,
    ctx: ScriptCtx,
) -> Result<Plan, reconcile::Error> {
    let out = script.call_with_ctx(function, object, ctx)?;
    reconcile::parse_plan(out).map_err(|answer| reconcile::Error::InvalidResult {
        file: script.file().display().to_string(),
        function: function.into(),
        answer: Box::new(answer),
    })
}
