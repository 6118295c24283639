//! `khai test`: offline unit tests of an operator's scripts, with no cluster.
//!
//! A case (see [`case`]) gives an input object, the objects khai's caches would hold, and the
//! expected answer. Running it takes the daemon's own path wherever the daemon does not need a
//! cluster: the operator is loaded by [`Operator::load`]; the object is defaulted from its CRD's
//! schema as the API server would store it ([`crate::schema::default_object`]) and given the
//! metadata the API server sets on create; the controller's script is called through
//! [`Script::call_with_ctx`] with a [`ScriptCtx`] whose lookups read the case's `cache`
//! ([`lookup::MemoryLookup`]); and the answer is validated by [`reconcile::parse_plan`]. What is
//! compared is the script's answer: children before khai adds its ownerReference, labels and
//! hash annotation, and status before khai adds `observedGeneration` and the `Ready` condition.
//! Those additions are the same for every child and every operator, and are tested in khai.
//!
//! Webhook cases ([`webhook`]) take the server's path the same way: the request is built as the
//! API server would send it, the webhook's script answers through the functions the server
//! calls ([`crate::webhook::admission::decide_blocking`],
//! [`crate::webhook::conversion::convert_object`]), and a mutation's patch is applied to the
//! object, as the API server does, before it is compared.

pub mod case;
pub mod compare;
pub mod lookup;
pub mod webhook;

pub use case::{Call, Case, Expect};
pub use compare::Mismatch;

use crate::config::model::{Controller, Crd, Scope};
use crate::operator::Operator;
use crate::reconcile::children::Kinds as _;
use crate::reconcile::{self, Plan};
use crate::script::{Script, ScriptCtx};
use crate::webhook::admission::Kind;
use lookup::{KindRef, MemoryLookup, Owner};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// Why a case could not be run at all (as opposed to running and not matching).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: cannot read: {message}", file.display())]
    Read { file: PathBuf, message: String },
    #[error("{}: no test cases (*.yaml)", dir.display())]
    NoCases { dir: PathBuf },
    #[error("{}: {message}", at(file, *pos))]
    Parse {
        file: PathBuf,
        pos: Option<(usize, usize)>,
        message: String,
    },
    #[error("{}: {field}: {message}", file.display())]
    Case {
        file: PathBuf,
        field: String,
        message: String,
    },
}

fn at(file: &std::path::Path, pos: Option<(usize, usize)>) -> String {
    match pos {
        Some((l, c)) => format!("{}:{l}:{c}", file.display()),
        None => file.display().to_string(),
    }
}

/// Namespace given to a namespaced object that names none, as `kubectl apply` would.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Runs one case against a loaded operator; an empty list means it passed.
pub fn run_case(op: &Operator, case: &Case) -> Result<Vec<Mismatch>, Error> {
    let stubbed = Stubbed::new(op, case)?;
    let mut mismatches = match &case.call {
        Call::Reconcile => run_reconcile(op, case, &stubbed),
        Call::Validate(input) => webhook::run_admission(op, case, Kind::Validate, input),
        Call::Mutate(input) => webhook::run_admission(op, case, Kind::Mutate, input),
        Call::Convert(input) => webhook::run_conversion(op, case, input),
        Call::Handler(input) => run_handler(op, case, input, &stubbed),
    }?;
    if let Some(got) = stubbed.stubs.mismatch() {
        mismatches.push(Mismatch::new(
            "calls",
            "the calls the case lists, in order",
            got,
        ));
    }
    Ok(mismatches)
}

/// The side effects of a case's call: answered by the case's `calls`, on a runtime of their
/// own when `khai test` runs outside one (stubs never do I/O, but effects carry a runtime).
struct Stubbed {
    stubs: Arc<crate::effects::stub::Stubs>,
    effects: Option<Arc<crate::effects::Effects>>,
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Stubbed {
    fn new(op: &Operator, case: &Case) -> Result<Self, Error> {
        let stubs = Arc::new(crate::effects::stub::Stubs::new(case.calls.clone()));
        let names = &op.config.model.operator.secrets;
        let namespace = case.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(DEFAULT_NAMESPACE);
        let secrets = case
            .secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                case_secret(names, s, namespace).map_err(|message| Error::Case {
                    file: case.file.clone(),
                    field: format!("secrets[{i}]"),
                    message,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let secrets = Arc::new(crate::effects::secrets::Secrets::from_objects(
            names, secrets,
        ));
        let (handle, runtime) = match tokio::runtime::Handle::try_current() {
            Ok(h) => (Some(h), None),
            Err(_) => match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(rt) => (Some(rt.handle().clone()), Some(rt)),
                Err(_) => (None, None),
            },
        };
        let effects = handle.map(|h| {
            Arc::new(crate::effects::Effects {
                stubs: Some(stubs.clone()),
                secrets: secrets.clone(),
                ..crate::effects::Effects::new(h, crate::effects::Budget::default())
            })
        });
        Ok(Stubbed {
            stubs,
            effects,
            _runtime: runtime,
        })
    }
}

/// A Secret a case lists, as the API server stores it: in the object's namespace unless it
/// names one, `stringData` encoded into `data`. One the config does not let scripts read is an
/// error, since `ctx.secret` could never read it.
fn case_secret(
    names: &[crate::config::http::SecretName],
    secret: &Value,
    namespace: &str,
) -> Result<kube::api::DynamicObject, String> {
    use base64::Engine as _;
    let mut s = secret.clone();
    s["apiVersion"] = json!("v1");
    s["kind"] = json!("Secret");
    let ns = s["metadata"]["namespace"]
        .as_str()
        .unwrap_or(namespace)
        .to_string();
    s["metadata"]["namespace"] = json!(ns);
    let name = s["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !crate::effects::secrets::Secrets::lists(names, &ns, &name) {
        return Err(format!(
            "Secret {ns}/{name} is not in [operator] secrets, so ctx.secret could never read it"
        ));
    }
    if let Some(Value::Object(plain)) = s.as_object_mut().and_then(|m| m.remove("stringData")) {
        for (k, v) in plain {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            s["data"][k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    serde_json::from_value(s).map_err(|e| e.to_string())
}

/// Calls the handler, timer or daemon function a case names with its object (and the change
/// record built from `old`, or the daemon's `state`), and checks its status and events.
fn run_handler(
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
    let object = stored(op, &case.object, None).map_err(|m| bad("object", m))?;
    let mut ctx = ScriptCtx::detached(
        &op.config.model.operator.name,
        &input.name,
        object["metadata"]["namespace"].as_str(),
    );
    ctx.params = Value::Object(op.config.model.params.clone());
    ctx.memo = Some(crate::script::memo::Memo::default());
    ctx.effects = stubbed.effects.clone();
    let (lookup, indexes) =
        handler_lookups(op, case, &input.name, &object).map_err(|(f, m)| bad(&f, m))?;
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
            Some(o) => essence(&stored(op, o, None).map_err(|m| bad("old", m))?),
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
        return Err(bad(
            "handler",
            format!("no handler, timer or daemon function named {name:?} in the config"),
        ));
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
            taken.map_err(|message| reconcile::Error::InvalidResult {
                file: script.file().display().to_string(),
                function: function.clone(),
                field: "result".into(),
                message,
            })?;
            Ok(Plan {
                children: Vec::new(),
                status: handled.status,
                requeue_after: None,
                events: handled.events,
            })
        });
    expectations(&case.expect, answer).map_err(|(f, m)| bad(&f, m))
}

/// What a handler, timer or daemon case's `ctx` reads: lookups over the case's `cache` (and its
/// object) of the kinds the entry's kind is watched with under `khai run` (its own, and the
/// `owns` and `watches` of the controllers for it), and the config's indexes built from the
/// same objects.
fn handler_lookups(
    op: &Operator,
    case: &Case,
    name: &str,
    object: &Value,
) -> Result<(MemoryLookup, crate::handler::index::Fixed), (String, String)> {
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
        let m = format!("no handler, timer or daemon function named {name:?} in the config");
        return Err(("handler".into(), m));
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
            let m = format!(
                "kind {written:?} is neither watched with {} nor indexed, so neither ctx \
                 lookups nor ctx.index could ever see it",
                own.kind
            );
            return Err((at, m));
        }
        let ns = lookup.owner.namespace.as_deref();
        lookup
            .objects
            .push(stored(op, o, ns).map_err(|m| (at.clone(), m))?);
    }
    let indexes = crate::handler::index::Fixed::build(&c.indexes, &lookup.objects, |ix, o| {
        model
            .complete_kind(&ix.for_kind)
            .compatible(&KindRef::of(o))
    })
    .map_err(|m| ("cache".to_string(), m))?;
    Ok((lookup, indexes))
}

fn run_reconcile(op: &Operator, case: &Case, stubbed: &Stubbed) -> Result<Vec<Mismatch>, Error> {
    let bad = |field: &str, message: String| Error::Case {
        file: case.file.clone(),
        field: field.into(),
        message,
    };
    let index = pick_controller(op, case).map_err(|m| bad("controller", m))?;
    let ctl = &op.config.model.controllers[index];
    let script = op
        .scripts
        .get(index)
        .ok_or_else(|| bad("controller", "has no compiled script".into()))?;
    let object = stored(op, &case.object, None).map_err(|m| bad("object", m))?;
    let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
    let lookup = memory_lookup(op, ctl, case, &object).map_err(|(f, m)| bad(&f, m))?;
    let ctx = ScriptCtx {
        operator: op.config.model.operator.name.clone(),
        controller: ctl.display_name(),
        namespace,
        params: Value::Object(op.config.model.params.clone()),
        lookup: Arc::new(lookup),
        memo: Some(crate::script::memo::Memo::default()),
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
            .map_err(|(f, m)| bad(&f, m))?;
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
    expectations(&case.expect, answer).map_err(|(f, m)| bad(&f, m))
}

/// Refuses the children `khai run` would refuse ([`reconcile::children::place`], the same
/// function), so a plan that passes here applies there.
fn placed(
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
struct OfflineKinds<'a> {
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
fn pick_controller(op: &Operator, case: &Case) -> Result<usize, String> {
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
            .ok_or_else(|| format!("no controller named {name:?} (controllers: {})", names()));
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
        [] => Err(format!(
            "no controller reconciles kind {:?} (controllers: {})",
            kind.kind,
            names()
        )),
        _ => Err(format!(
            "several controllers reconcile kind {:?}; name one of: {}",
            kind.kind,
            names()
        )),
    }
}

/// The CRD of this config that declares `obj`'s kind, if any.
fn crd_of<'a>(op: &'a Operator, obj: &Value) -> Option<&'a Crd> {
    let kind = KindRef::of(obj);
    op.config.model.crds.iter().find(|c| {
        c.kind == kind.kind
            && kind.group.as_deref() == Some(c.group.as_str())
            && c.versions
                .iter()
                .any(|v| Some(v.name()) == kind.version.as_deref())
    })
}

/// `obj` as the API server would store and serve it: CRD defaults filled in, and the metadata a
/// create sets when absent (namespace `default` or `namespace`, `uid`, `generation: 1`).
fn stored(op: &Operator, obj: &Value, namespace: Option<&str>) -> Result<Value, String> {
    let mut out = defaulted(op, obj, namespace)?;
    if let Some(meta) = out["metadata"].as_object_mut() {
        let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
        let uid = format!("uid-{name}");
        meta.entry("uid").or_insert_with(|| json!(uid));
        meta.entry("generation").or_insert_with(|| json!(1));
    }
    Ok(out)
}

/// `obj` as the API server decodes it, before admission: CRD defaults filled in, no
/// `managedFields`, and a namespaced object in `namespace` (else `default`) when it names none.
fn defaulted(op: &Operator, obj: &Value, namespace: Option<&str>) -> Result<Value, String> {
    let mut out = obj.clone();
    let crd = crd_of(op, obj);
    if let Some(crd) = crd {
        crate::schema::default_object(crd, &mut out).map_err(|e| e.to_string())?;
    }
    let cluster_scoped = crd.is_some_and(|c| c.scope == Scope::Cluster);
    let meta = out["metadata"]
        .as_object_mut()
        .ok_or_else(|| "metadata: expected a map".to_string())?;
    meta.remove("managedFields");
    if !cluster_scoped && !meta.contains_key("namespace") {
        meta.insert(
            "namespace".into(),
            json!(namespace.unwrap_or(DEFAULT_NAMESPACE)),
        );
    }
    Ok(out)
}

/// The case's cache (each object stored as the API server would, in the object's namespace
/// unless it names one) plus the object itself, visible through the controller's kinds only.
fn memory_lookup(
    op: &Operator,
    ctl: &Controller,
    case: &Case,
    object: &Value,
) -> Result<MemoryLookup, (String, String)> {
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
            let msg = format!(
                "kind {written:?} is not watched by controller {} (for, owns, watches), so \
                 ctx lookups could never see it",
                ctl.display_name()
            );
            (at.clone(), msg)
        })?;
        let ns = lookup.owner.namespace.as_deref();
        lookup
            .objects
            .push(stored(op, o, ns).map_err(|m| (at.clone(), m))?);
    }
    Ok(lookup)
}

/// The engine path of one reconcile, without a cluster: call the script, validate its answer.
pub fn plan(
    script: &Script,
    function: &str,
    object: &Value,
    ctx: ScriptCtx,
) -> Result<Plan, reconcile::Error> {
    let out = script.call_with_ctx(function, object, ctx)?;
    reconcile::parse_plan(out).map_err(|(field, message)| reconcile::Error::InvalidResult {
        file: script.file().display().to_string(),
        function: function.into(),
        field,
        message,
    })
}

/// Every way in which `answer` misses `expect`; `Err` for an expectation that is itself invalid.
fn expectations(
    expect: &Expect,
    answer: Result<Plan, reconcile::Error>,
) -> Result<Vec<Mismatch>, (String, String)> {
    let plan = match (answer, &expect.error) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => return Ok(Vec::new()),
        (Err(e), Some(want)) => {
            return Ok(vec![Mismatch::new(
                "error",
                format!("an error containing {}", json!(want)),
                json!(e.to_string()).to_string(),
            )]);
        }
        (Ok(_), Some(want)) => {
            return Ok(vec![Mismatch::new(
                "error",
                format!("an error containing {}", json!(want)),
                "success",
            )]);
        }
        (Err(e), None) => {
            return Ok(vec![Mismatch::new(
                "reconcile",
                "success",
                format!("error: {e}"),
            )]);
        }
        (Ok(plan), None) => plan,
    };
    compare_plan(expect, &plan)
}

fn compare_plan(expect: &Expect, plan: &Plan) -> Result<Vec<Mismatch>, (String, String)> {
    let mut out = Vec::new();
    if let Some(children) = &expect.children {
        let got = Value::Array(plan.children.clone());
        compare::compare(
            "children",
            &Value::Array(children.clone()),
            Some(&got),
            &mut out,
        );
    }
    if let Some(status) = &expect.status {
        let got = plan.status.clone().map(Value::Object);
        compare::compare("status", status, got.as_ref(), &mut out);
    }
    if let Some(requeue) = &expect.requeue_after {
        let want = match requeue {
            Value::Null => None,
            v => {
                Some(reconcile::parse_duration(v).map_err(|m| ("expect.requeue_after".into(), m))?)
            }
        };
        if want != plan.requeue_after {
            let show =
                |d: Option<std::time::Duration>| d.map_or("none".into(), |d| format!("{d:?}"));
            out.push(Mismatch::new(
                "requeue_after",
                show(want),
                show(plan.requeue_after),
            ));
        }
    }
    if let Some(events) = &expect.events {
        let got: Vec<Value> = plan
            .events
            .iter()
            .map(|e| {
                let ty = if e.warning { "Warning" } else { "Normal" };
                json!({ "type": ty, "reason": e.reason, "message": e.message })
            })
            .collect();
        compare::compare(
            "events",
            &Value::Array(events.clone()),
            Some(&Value::Array(got)),
            &mut out,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An operator in a temp dir with one CRD and the given script.
    fn operator(script: &str) -> (tempfile::TempDir, Operator) {
        let dir = tempfile::tempdir().unwrap();
        let toml = concat!(
            "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\n",
            "spec.replicas = { type = \"integer\", default = 2 }\nstatus.phase = { type = \"string\" }\n\n",
            "[[controller]]\nfor = \"Web\"\nowns = [\"apps/v1/Deployment\"]\nscript = \"web.rhai\"\n",
        );
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        std::fs::write(dir.path().join("web.rhai"), script).unwrap();
        let op = Operator::load(dir.path()).unwrap();
        (dir, op)
    }

    fn case(src: &str) -> Case {
        let obj =
            "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: {} }\n";
        case::parse(Path::new("tests/c.yaml"), &format!("{obj}{src}")).unwrap()
    }

    fn run(script: &str, src: &str) -> Vec<String> {
        let (_dir, op) = operator(script);
        let found = run_case(&op, &case(src)).unwrap();
        found.iter().map(ToString::to_string).collect()
    }

    const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let ready = ctx.get("Deployment", obj.metadata.name)?.status?.readyReplicas ?? 0;
    #{
        children: [#{ apiVersion: "apps/v1", kind: "Deployment", metadata: #{ name: obj.metadata.name, namespace: obj.metadata.namespace },
                      spec: #{ replicas: obj.spec.replicas } }],
        status: #{ phase: if ready == obj.spec.replicas { "Ready" } else { "Pending" } },
        requeue_after: "30s",
        events: [#{ reason: "Seen", message: `uid ${obj.metadata.uid} gen ${obj.metadata.generation}` }],
    }
}
"#;

    #[test]
    fn the_object_is_defaulted_and_given_create_metadata() {
        let found = run(
            SCRIPT,
            "expect:\n  children: [{ metadata: { namespace: default }, spec: { replicas: 2 } }]\n  events: [{ type: Normal, message: uid uid-w gen 1 }]\n  requeue_after: 30s\n",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn cache_contents_reach_the_script() {
        let cache = "cache:\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: w }, status: { readyReplicas: 2 } }\n";
        let found = run(
            SCRIPT,
            &format!("{cache}expect:\n  status: {{ phase: Ready }}\n"),
        );
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(
            run(SCRIPT, "expect:\n  status: { phase: Ready }\n"),
            [r#"status.phase: expected "Ready", got "Pending""#]
        );
    }

    const PROPAGATE: &str = r#"
fn reconcile(obj, ctx) {
    let pods = k8s::list("v1/Pod", #{ namespace: obj.metadata.namespace, labels: #{ web: obj.metadata.name } });
    for p in pods { k8s::label(p, #{ tier: "web" }); }
    try { k8s::get("v1/Pod", "default", "gone"); } catch (e) { return #{ status: #{ phase: e.reason } }; }
    #{ status: #{ phase: "Labelled" } }
}
"#;

    #[test]
    fn stubbed_calls_answer_in_order_and_an_error_is_caught_as_a_value() {
        let calls = concat!(
            "calls:\n",
            "  - request: { call: k8s::list, kind: v1/Pod, namespace: default, labels: web=w }\n",
            "    response: [{ apiVersion: v1, kind: Pod, metadata: { name: p1, namespace: default } }]\n",
            "  - request: { call: k8s::patch, name: p1, patch: { metadata: { labels: { tier: web } } } }\n",
            "    response: {}\n",
            "  - request: { call: k8s::get, name: gone }\n",
            "    error: { reason: not_found, code: 404, message: gone }\n",
        );
        let found = run(
            PROPAGATE,
            &format!("{calls}expect:\n  status: {{ phase: not_found }}\n"),
        );
        assert!(found.is_empty(), "{found:?}");
    }

    const HTTP: &str = r#"
fn reconcile(obj, ctx) {
    let token = ctx.secret("creds", "token");
    let r = http::post("https://api.example.com/things", #{
        headers: #{ authorization: `Bearer ${token}` }, json: #{ name: obj.metadata.name } });
    let pods = k8s::list("v1/Pod", #{ namespace: "default" });
    let reason = "";
    try { http::get("https://api.example.com/health"); } catch (e) { reason = e.message; }
    #{ status: #{ phase: `${r.status} ${r.json.id} ${r.body.len()} ${pods.len()} ${reason}` } }
}
fn finalize(obj, ctx) { http::delete(`https://api.example.com/things/${obj.status.phase}`).status == 204 }
"#;

    /// An operator whose script reads `ctx.secret("creds", …)` (`[operator] secrets`).
    fn secret_operator(script: &str) -> (tempfile::TempDir, Operator) {
        let dir = tempfile::tempdir().unwrap();
        let toml = concat!(
            "[operator]\nname = \"t\"\nsecrets = [\"creds\"]\n\n",
            "[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\n",
            "status.phase = { type = \"string\" }\n\n",
            "[[controller]]\nfor = \"Web\"\nscript = \"web.rhai\"\n",
        );
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        std::fs::write(dir.path().join("web.rhai"), script).unwrap();
        let op = Operator::load(dir.path()).unwrap();
        (dir, op)
    }

    fn run_with_secrets(script: &str, src: &str) -> Result<Vec<String>, Error> {
        let (_dir, op) = secret_operator(script);
        let found = run_case(&op, &case(src))?;
        Ok(found.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn http_requests_are_answered_by_the_case_in_order_with_k8s_calls_and_secrets_it_lists() {
        let src = concat!(
            "secrets:\n  - { metadata: { name: creds }, stringData: { token: tok } }\n",
            "calls:\n",
            "  - request: { call: http::request, method: POST, url: \"https://api.example.com/things\",\n",
            "               headers: { authorization: Bearer tok }, json: { name: w } }\n",
            "    response: { status: 201, json: { id: t-1 } }\n",
            "  - request: { call: k8s::list, kind: v1/Pod }\n",
            "    response: []\n",
            "  - request: { method: GET, url: \"https://api.example.com/health\" }\n",
            "    error: { reason: timeout }\n",
        );
        let want = "expect:\n  status: { phase: \"201 t-1 12 0 http::request GET api.example.com: timeout\" }\n";
        let found = run_with_secrets(HTTP, &format!("{src}{want}")).unwrap();
        assert!(found.is_empty(), "{found:?}");

        // A request the case does not list fails it, named; so does a wrong header.
        let wrong = src.replace("Bearer tok", "Bearer other");
        let found = run_with_secrets(HTTP, &format!("{wrong}{want}")).unwrap();
        assert!(
            found[1].contains(r#"unexpected call {"call":"http::request","method":"POST","url":"https://api.example.com/things","headers":{"authorization":"Bearer tok""#),
            "{found:?}"
        );

        // No Secret in the case: ctx.secret reads `()` (text ""), as a missing Secret does.
        let no_secret = src.replace(
            "secrets:\n  - { metadata: { name: creds }, stringData: { token: tok } }\n",
            "",
        );
        let found = run_with_secrets(HTTP, &format!("{no_secret}{want}")).unwrap();
        assert!(
            found[0].contains(r#""authorization":"Bearer ""#),
            "{found:?}"
        );

        // A Secret the config does not list is refused where the case gives it.
        let err = run_with_secrets(
            HTTP,
            "secrets:\n  - { metadata: { name: other } }\nexpect: {}\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/c.yaml: secrets[0]: Secret default/other is not in [operator] secrets, so \
             ctx.secret could never read it"
        );
    }

    #[test]
    fn an_object_being_deleted_calls_finalize_and_its_answer_is_checked() {
        let obj = "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w, deletionTimestamp: \"2026-01-01T00:00:00Z\" }, status: { phase: t-1 } }\n";
        let calls = "calls:\n  - request: { method: DELETE, url: \"https://api.example.com/things/t-1\" }\n    response: { status: 204 }\n";
        let (_dir, op) = secret_operator(HTTP);
        let run = |src: &str| -> Vec<String> {
            let case = case::parse(Path::new("tests/c.yaml"), src).unwrap();
            run_case(&op, &case)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert!(run(&format!("{obj}{calls}expect:\n  finalized: true\n")).is_empty());
        assert_eq!(
            run(&format!("{obj}{calls}expect:\n  finalized: false\n")),
            ["finalized: expected false, got true"]
        );
    }

    #[test]
    fn an_unexpected_call_fails_the_case_naming_it() {
        let found = run(PROPAGATE, "expect: {}\n");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[1].starts_with(r#"calls: expected the calls the case lists, in order, got unexpected call {"call":"k8s::list","kind":"v1/Pod""#),
            "{found:?}"
        );
        let missing = run(
            "fn reconcile(obj, ctx) { #{} }",
            "calls:\n  - request: { call: k8s::get }\nexpect: {}\n",
        );
        assert_eq!(
            missing,
            [
                r#"calls: expected the calls the case lists, in order, got expected calls not made: {"call":"k8s::get"}"#
            ]
        );
    }

    #[test]
    fn wrong_requeue_and_unexpected_error_are_mismatches() {
        assert_eq!(
            run(SCRIPT, "expect:\n  requeue_after: null\n"),
            ["requeue_after: expected none, got 30s"]
        );
        let found = run("fn reconcile(obj, ctx) { throw \"boom\" }", "expect: {}\n");
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("reconcile: expected success, got error: "),
            "{found:?}"
        );
        assert!(
            found[0].ends_with("web.rhai:1:26: in reconcile: boom"),
            "{found:?}"
        );
    }

    #[test]
    fn expected_errors_match_by_substring_including_invalid_answers() {
        let bad = "fn reconcile(obj, ctx) { #{ stauts: #{} } }";
        assert!(run(bad, "expect:\n  error: \"stauts: unknown key\"\n").is_empty());
        assert_eq!(
            run(SCRIPT, "expect:\n  error: boom\n"),
            [r#"error: expected an error containing "boom", got success"#]
        );
    }

    #[test]
    fn unwatched_cache_kind_is_a_case_error() {
        let (_dir, op) = operator(SCRIPT);
        let c = case("cache:\n  - { apiVersion: v1, kind: Secret, metadata: { name: s } }\n");
        let err = run_case(&op, &c).unwrap_err().to_string();
        assert_eq!(
            err,
            "tests/c.yaml: cache[0]: kind \"Secret\" is not watched by controller web (for, owns, watches), so ctx lookups could never see it"
        );
    }

    /// An operator with one CRD and the handler entries `toml`, all in `h.rhai`.
    fn handler_operator(toml: &str, script: &str) -> (tempfile::TempDir, Operator) {
        let dir = tempfile::tempdir().unwrap();
        let head = "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\nspec.replicas = { type = \"integer\" }\n\n";
        std::fs::write(dir.path().join("operator.toml"), format!("{head}{toml}")).unwrap();
        std::fs::write(dir.path().join("h.rhai"), script).unwrap();
        let op = Operator::load(dir.path()).unwrap();
        (dir, op)
    }

    #[test]
    fn a_handler_case_sets_ctx_retry() {
        let (_dir, op) = handler_operator(
            "[[handler]]\nfor = \"Web\"\non = \"create\"\nscript = \"h.rhai\"\nfunction = \"made\"\n",
            "fn made(obj, ctx, change) { if ctx.retry < 2 { throw `retry ${ctx.retry}`; } #{ status: #{ r: ctx.retry, s: ctx.started } } }",
        );
        let run = |extra: &str| {
            let c = case(&format!("handler: made\n{extra}"));
            let found = run_case(&op, &c).unwrap();
            found.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert!(run("expect: { error: retry 0 }\n").is_empty());
        assert!(run("retry: 1\nexpect: { error: retry 1 }\n").is_empty());
        assert!(run("retry: 2\nexpect: { status: { r: 2 } }\n").is_empty());
    }

    #[test]
    fn retry_is_only_for_handler_cases() {
        let err = case::parse(
            Path::new("tests/c.yaml"),
            "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w } }\nretry: 1\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/c.yaml: retry: only for handler cases (`handler` with `object`)"
        );
    }

    #[test]
    fn a_spy_case_gets_the_whole_object() {
        let (_dir, op) = handler_operator(
            "[[handler]]\nfor = \"Web\"\non = \"event\"\nscript = \"h.rhai\"\nfunction = \"spied\"\n",
            "fn spied(obj, ctx, event) { throw `${event.type} ${event.object.metadata.name}`; }",
        );
        let c = case("handler: spied\nexpect: { error: ADDED w }\n");
        assert!(run_case(&op, &c).unwrap().is_empty());
    }

    #[test]
    fn ctx_list_takes_a_namespace_or_every_one_and_refuses_unknown_options() {
        let script = r#"
fn reconcile(obj, ctx) {
    let names = |l| l.map(|o| `${o.metadata.namespace}/${o.metadata.name}`);
    #{ status: #{ phase: `${names.call(ctx.list("Deployment"))} ${names.call(ctx.list("Deployment", #{ namespace: "other" }))} ${names.call(ctx.list("Deployment", #{ namespace: "*", selector: "app=x" }))}` } }
}
"#;
        let cache = "cache:\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: here, labels: { app: x } } }\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: there, namespace: other, labels: { app: x } } }\n";
        let expect = r#"expect: { status: { phase: '["default/here"] ["other/there"] ["default/here", "other/there"]' } }"#;
        assert_eq!(
            run(script, &format!("{cache}{expect}\n")),
            Vec::<String>::new()
        );
        let bad = r#"fn reconcile(obj, ctx) { ctx.list("Deployment", #{ namspace: "*" }); #{} }"#;
        assert!(run(bad, "expect: { error: 'unknown option \"namspace\"' }\n").is_empty());
    }
}
