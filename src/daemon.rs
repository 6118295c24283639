//! Wires up `khai run`: CRDs, shared informers, one kube-runtime `Controller` per controller and
//! namespace, finalizers, failure reporting, hot reload and graceful shutdown. Each reconcile runs
//! the script ([`crate::reconcile`]) and carries out the plan ([`crate::apply`]).

use crate::apply::Applier;
use crate::config::model::Watch;
use crate::leader::Elector;
use crate::operator::Operator;
use crate::queue;
use crate::reconcile::lookup::CacheLookup;
use crate::reconcile::{
    self,
    conditions::{self, Health},
};
use crate::reload::Updates;
use crate::script::{Script, ScriptCtx, ScriptError, object_view};
use crate::watch::{self, Filter, Informer, Informers, Kind};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{Resource, ResourceExt};
use lifecycle::{config_loaded, drain, lead, report_synced};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod lifecycle;
mod running;

use running::{Fingerprint, Running};

/// How long `khai run` waits for its CRDs to become Established.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// How long in-flight reconciles may run on after a shutdown signal, unless told otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// Settings of one run that do not come from the config file.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Overrides `[operator] namespaces` when non-empty.
    pub namespaces: Vec<String>,
    /// Leader election; `None` reconciles at once, as the only replica.
    pub leader: Option<crate::leader::Settings>,
    /// How long in-flight reconciles may take to finish after a shutdown signal.
    pub shutdown_grace: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            leader: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Schema(#[from] crate::schema::Error),
    #[error("controller {controller}: {source}")]
    Resolve {
        controller: String,
        #[source]
        source: watch::Error,
    },
    #[error("lost the leader lease {lease}: {reason}")]
    LostLease { lease: String, reason: String },
}

/// Why one reconcile failed; logged and retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Plan(#[from] reconcile::Error),
    #[error(transparent)]
    Apply(#[from] crate::apply::Error),
    #[error("failed to serialize object: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("{function} has not finished yet (it must return true to let the object go)")]
    NotFinalized { function: String },
    #[error(transparent)]
    Finalizer(Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    /// The script's own error, when the script is what failed.
    fn script_error(&self) -> Option<&ScriptError> {
        match self {
            ReconcileError::Plan(reconcile::Error::Script(e)) => Some(e),
            _ => None,
        }
    }

    /// Unwraps the finalizer helper's wrapping so reports show the script's own error.
    fn from_finalizer(e: kube::runtime::finalizer::Error<ReconcileError>) -> Self {
        use kube::runtime::finalizer::Error as F;
        match e {
            F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
            other => ReconcileError::Finalizer(Box::new(other)),
        }
    }
}

/// Everything the reconciles of one controller in one namespace share.
struct Ctx {
    controller: String,
    operator: String,
    function: String,
    /// The script's `finalize(obj, ctx)`, when it defines one; only then is a finalizer added.
    finalize: Option<String>,
    finalizer_name: String,
    script: Script,
    kind: Kind,
    /// Script predicate `when(obj)`; objects for which it is not true are left alone.
    when: Option<String>,
    /// Annotations an object must carry to be reconciled.
    annotations: Vec<String>,
    /// Whether khai owns `.status` of this kind (a CRD of this config with a status schema) and
    /// so maintains `observedGeneration` and the `Ready` condition.
    manage_status: bool,
    owned: Vec<Arc<Informer>>,
    /// Informers scripts may look up through `ctx`: the primary kind and the owned kinds.
    visible: Vec<Arc<Informer>>,
    /// `[params]` of the config.
    params: Value,
    applier: Arc<Applier>,
    client: kube::Client,
    recorder: Recorder,
    backoff: queue::Backoff,
    /// Requests waiting for a reconcile, for the workqueue metrics.
    pending: queue::Pending,
}

/// One controller in one namespace with its informers started, waiting to be run.
struct Prepared {
    ctx: Arc<Ctx>,
    primary: Arc<Informer>,
    related: Vec<(Arc<Informer>, Watch)>,
    reconcile_on_status: bool,
    concurrency: u16,
    resync: Option<Duration>,
    /// Equal across versions of the config exactly when this controller is unchanged.
    fingerprint: Fingerprint,
}

/// Runs the operator until `shutdown` is cancelled; in-flight reconciles finish first (within
/// the grace period). With leader election, informers start at once (so standby replicas are
/// ready and take over with warm caches) but controllers run only while this replica leads.
///
/// With `updates`, each new version of the config is swapped in as a whole: it is prepared
/// (kinds resolved, CRDs installed, informers started or reused) while the running version keeps
/// reconciling, then the running controllers stop taking work, finish their in-flight
/// reconciles on the old version, and the new controllers start and reconcile every object. A
/// version that cannot be prepared is reported and the running one is kept.
pub async fn run(
    op: Operator,
    client: kube::Client,
    opts: RunOptions,
    updates: Option<Updates>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    config_loaded(&op);
    tokio::select! {
        res = install_crds(&op, &client) => res?,
        // A signal during start-up ends the run at once; nothing has been reconciled yet.
        () = shutdown.cancelled() => return Ok(()),
    }
    let informers = Informers::new(client.clone());
    let prepared = prepare(&op, &client, &opts, &informers).await?;
    let synced = tokio::spawn(report_synced(informers.all()));
    let env = Env {
        client: &client,
        opts: &opts,
        informers: &informers,
    };
    let controllers = supervise(prepared, updates, &env, &shutdown);
    let result = match &opts.leader {
        None => {
            drain(controllers, &shutdown, opts.shutdown_grace).await;
            Ok(())
        }
        Some(settings) => {
            let elector = Elector::new(client.clone(), settings.clone());
            lead(elector, controllers, &shutdown, opts.shutdown_grace).await
        }
    };
    synced.abort();
    informers.shutdown();
    tracing::info!("all controllers stopped");
    result
}

/// Installs the config's CRDs and waits for them to be Established, when it asks for that.
async fn install_crds(op: &Operator, client: &kube::Client) -> Result<(), Error> {
    let model = &op.config.model;
    if model.operator.install_crds && !model.crds.is_empty() {
        crate::schema::install(
            client,
            &model.crds,
            model.operator.field_manager(),
            CRD_ESTABLISH_TIMEOUT,
        )
        .await?;
    }
    Ok(())
}

/// What preparing a new version of the config needs; lives as long as the run.
struct Env<'a> {
    client: &'a kube::Client,
    opts: &'a RunOptions,
    informers: &'a Informers,
}

/// Runs `prepared` until `shutdown`, replacing it with each new version from `updates`: the
/// controllers that changed are restarted (reconciling all their objects with the new version),
/// the others keep running.
async fn supervise(
    prepared: Vec<Prepared>,
    mut updates: Option<Updates>,
    env: &Env<'_>,
    shutdown: &CancellationToken,
) {
    let mut running = Running::new(prepared, shutdown);
    loop {
        let (op, next) = tokio::select! {
            () = running.run() => return,
            next = next_version(&mut updates, env) => next,
        };
        let started = std::time::Instant::now();
        let swap = running.replace(next).await;
        if shutdown.is_cancelled() {
            running.run().await;
            return;
        }
        config_loaded(&op);
        crate::metrics::config_reloaded(true);
        tracing::info!(
            config = %op.config.file.display(),
            restarted = swap.restarted,
            kept = swap.kept,
            stopped = swap.stopped,
            swapped_ms = started.elapsed().as_millis(),
            "config reloaded; changed controllers reconcile every object with the new version"
        );
    }
}

/// Waits for the next version from `updates` that can be prepared; reports those that cannot.
/// Pends forever without updates.
async fn next_version(
    updates: &mut Option<Updates>,
    env: &Env<'_>,
) -> (Arc<Operator>, Vec<Prepared>) {
    let Some(u) = updates else {
        return futures::future::pending().await;
    };
    loop {
        if u.versions.changed().await.is_err() {
            return futures::future::pending().await;
        }
        let Some(op) = u.versions.borrow_and_update().clone() else {
            continue;
        };
        let ready = async {
            install_crds(&op, env.client).await?;
            prepare(&op, env.client, env.opts, env.informers).await
        };
        match ready.await {
            Ok(prepared) => return (op, prepared),
            Err(e) => u.failures.report(&e.to_string()).await,
        }
    }
}

/// Resolves every controller's kinds and starts the informers it needs, in every namespace.
async fn prepare(
    op: &Operator,
    client: &kube::Client,
    opts: &RunOptions,
    informers: &Informers,
) -> Result<Vec<Prepared>, Error> {
    let model = &op.config.model;
    let namespaces: Vec<Option<String>> = match (&opts.namespaces, &model.operator.namespaces) {
        (cli, _) if !cli.is_empty() => cli.iter().cloned().map(Some).collect(),
        (_, cfg) if !cfg.is_empty() => cfg.iter().cloned().map(Some).collect(),
        _ => vec![None],
    };
    let applier = Arc::new(Applier::new(client.clone(), model.clone()));
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: format!("khai-{}", model.operator.name),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    let mut prepared = Vec::new();
    for (ctl, script) in model.controllers.iter().zip(&op.scripts) {
        let name = ctl.display_name();
        let resolve = |k: &str| {
            let client = client.clone();
            let name = name.clone();
            let k = k.to_string();
            async move {
                watch::resolve(&client, model, &k)
                    .await
                    .map_err(|source| Error::Resolve {
                        controller: name,
                        source,
                    })
            }
        };
        let kind = resolve(&ctl.for_kind).await?;
        let mut owned_kinds = Vec::new();
        for o in &ctl.owns {
            owned_kinds.push(resolve(o).await?);
        }
        let mut watched = Vec::new();
        for w in &ctl.watches {
            watched.push((resolve(&w.kind).await?, w.clone()));
        }
        let manage_status = model.crds.iter().any(|c| {
            c.status.is_some() && c.kind == kind.resource.kind && c.group == kind.resource.group
        });
        let finalize = script
            .has_function(FINALIZE, crate::operator::RECONCILE_ARITY)
            .then(|| FINALIZE.to_string());
        let duration =
            |s: &str| crate::config::duration::parse(s).unwrap_or(Duration::from_secs(1));
        let filter = Filter {
            labels: ctl.selector.clone(),
            fields: ctl.field_selector.clone(),
        };
        for ns in &namespaces {
            let ns = ns.as_deref();
            let primary = informers.filtered(&kind, ns, &filter);
            let owned: Vec<_> = owned_kinds
                .iter()
                .map(|o| informers.informer(o, ns))
                .collect();
            let related: Vec<_> = watched
                .iter()
                .map(|(k, w)| (informers.informer(k, ns), w.clone()))
                .collect();
            let visible = std::iter::once(primary.clone())
                .chain(owned.iter().cloned())
                .chain(related.iter().map(|(i, _)| i.clone()))
                .collect();
            let ctx = Arc::new(Ctx {
                controller: name.clone(),
                operator: model.operator.name.clone(),
                function: ctl.reconcile.clone(),
                finalize: finalize.clone(),
                finalizer_name: format!("khai.dev/{}", model.operator.name),
                when: ctl.when.clone(),
                annotations: ctl.annotations.clone(),
                script: script.clone(),
                kind: kind.clone(),
                manage_status,
                owned,
                visible,
                params: Value::Object(model.params.clone()),
                applier: applier.clone(),
                client: client.clone(),
                recorder: recorder.clone(),
                backoff: queue::Backoff::new(
                    duration(&ctl.backoff.base),
                    duration(&ctl.backoff.cap),
                ),
                pending: queue::Pending::new(&name),
            });
            prepared.push(Prepared {
                ctx,
                primary,
                related,
                reconcile_on_status: ctl.reconcile_on_status,
                concurrency: ctl.concurrency,
                resync: ctl.resync.as_deref().map(duration),
                fingerprint: fingerprint(model, ctl, script, ns),
            });
        }
    }
    for inf in informers.all() {
        crate::metrics::watch_started(&inf.kind.resource.kind);
    }
    Ok(prepared)
}

/// What identifies one controller in one namespace across versions of the config. `[operator]`
/// and the CRDs are included because they change what every controller writes; the script is
/// hashed by its text (scripts cannot import other files).
fn fingerprint(
    model: &crate::config::model::Model,
    ctl: &crate::config::model::Controller,
    script: &Script,
    namespace: Option<&str>,
) -> Fingerprint {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let shape = (ctl, &model.operator, &model.crds, &model.params);
    serde_json::to_string(&shape)
        .unwrap_or_default()
        .hash(&mut h);
    script.digest().hash(&mut h);
    namespace.hash(&mut h);
    h.finish()
}

/// Records each reconcile request a trigger stream yields.
fn requested<T: queue::Request>(pending: &queue::Pending) -> impl FnMut(&T) + Send + use<T> {
    let pending = pending.clone();
    move |r| {
        let (namespace, name) = r.key();
        pending.added(namespace, name);
    }
}

/// Builds the kube-runtime `Controller` of one prepared controller and drives it.
fn start(p: Prepared, shutdown: CancellationToken) -> impl std::future::Future<Output = ()> {
    let ctx = p.ctx;
    let name = ctx.controller.clone();
    let parent = ctx.kind.resource.clone();
    let pending = ctx.pending.clone();
    crate::metrics::controller_started(&name, p.concurrency);
    let trigger =
        queue::primary(p.primary.subscribe(), p.reconcile_on_status).inspect(requested(&pending));
    let mut c = Controller::for_shared_stream_with(trigger, p.primary.store(), parent.clone())
        .with_config(ControllerConfig::default().concurrency(p.concurrency));
    for inf in &ctx.owned {
        c = c.reconcile_on(
            queue::owners(inf.subscribe(), parent.clone()).inspect(requested(&pending)),
        );
    }
    for (inf, w) in &p.related {
        let (rx, parent) = (inf.subscribe(), parent.clone());
        c = match (&w.label, &w.map) {
            (Some(label), _) => c.reconcile_on(
                queue::by_label(rx, label.clone(), parent).inspect(requested(&pending)),
            ),
            (None, Some(f)) => c.reconcile_on(
                queue::by_script(rx, ctx.script.clone(), f.clone(), parent)
                    .inspect(requested(&pending)),
            ),
            (None, None) => c,
        };
    }
    if let Some(period) = p.resync {
        let (store, pending) = (p.primary.store(), pending.clone());
        let all = queue::resync(period).inspect(move |_| {
            for o in store.state() {
                let (namespace, name) = queue::Request::key(&o);
                pending.added(namespace, name);
            }
        });
        c = c.reconcile_all_on(all);
    }
    tracing::info!(controller = %name, kind = %parent.kind, namespace = p.primary.namespace.as_deref().unwrap_or("*"), "starting controller");
    c.graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile_one, error_policy, ctx)
        .for_each(move |res| {
            match res {
                // The object went away while its request waited.
                Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                    pending.dropped(r.namespace.as_deref(), &r.name);
                }
                Err(e) => {
                    tracing::debug!(controller = %name, error = %e, "reconcile did not complete")
                }
                Ok(_) => {}
            }
            futures::future::ready(())
        })
}

/// Name of the optional cleanup function in a controller's script.
const FINALIZE: &str = "finalize";

fn script_ctx(ctx: &Ctx, obj: &DynamicObject) -> ScriptCtx {
    ScriptCtx {
        operator: ctx.operator.clone(),
        controller: ctx.controller.clone(),
        namespace: obj.namespace(),
        params: ctx.params.clone(),
        lookup: Arc::new(CacheLookup {
            uid: obj.uid().unwrap_or_default(),
            namespace: obj.namespace(),
            informers: ctx.visible.clone(),
        }),
    }
}

async fn reconcile_one(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let span = object_span(&obj, &ctx);
    let controller = ctx.controller.clone();
    ctx.pending
        .started(obj.metadata.namespace.as_deref(), &obj.name_any());
    let _worker = crate::metrics::reconcile_started(&controller);
    let started = std::time::Instant::now();
    let result = async move {
        // An object that carries khai's finalizer is always seen through to its end.
        let ours = obj.finalizers().iter().any(|f| *f == ctx.finalizer_name);
        if !ours && !selected(&obj, &ctx).await {
            tracing::debug!("not selected by the controller's filters");
            return Ok(Action::await_change());
        }
        let result = match &ctx.finalize {
            Some(_) => {
                let api = watch::api(&ctx.client, &ctx.kind, obj.namespace().as_deref());
                finalizer(&api, &ctx.finalizer_name, obj.clone(), |event| async {
                    match event {
                        FinalizerEvent::Apply(o) => apply(&o, &ctx).await,
                        FinalizerEvent::Cleanup(o) => cleanup(&o, &ctx).await,
                    }
                })
                .await
                .map_err(ReconcileError::from_finalizer)
            }
            // Without finalize there is nothing to do for an object on its way out; its children
            // go with it through their ownerReferences.
            None if obj.metadata.deletion_timestamp.is_some() => Ok(Action::await_change()),
            None => apply(&obj, &ctx).await,
        };
        if let Err(e) = &result {
            report_failure(&obj, &ctx, e).await;
        }
        result
    }
    .instrument(span)
    .await;
    crate::metrics::reconcile_finished(&controller, result_label(&result), started.elapsed());
    result
}

/// The span every log line about one object's reconcile sits in, so text and JSON logs carry
/// controller, kind, namespace, name and uid.
fn object_span(obj: &DynamicObject, ctx: &Ctx) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        controller = %ctx.controller,
        kind = %ctx.kind.resource.kind,
        namespace = obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
        uid = obj.uid().unwrap_or_default(),
    )
}

/// controller-runtime's `result` label for a finished reconcile.
fn result_label(result: &Result<Action, ReconcileError>) -> &'static str {
    match result {
        Err(_) => "error",
        Ok(a) if *a == Action::await_change() => "success",
        Ok(_) => "requeue_after",
    }
}

/// Whether the controller's annotation filter and `when(obj)` predicate select `obj`. A failing
/// predicate is logged and counts as not selected.
async fn selected(obj: &DynamicObject, ctx: &Ctx) -> bool {
    if !ctx
        .annotations
        .iter()
        .all(|a| obj.annotations().contains_key(a))
    {
        return false;
    }
    let Some(when) = &ctx.when else { return true };
    let view = match object_view(obj) {
        Ok(v) => v,
        Err(_) => return false,
    };
    match ctx.script.call_one_async(when, view).await {
        Ok(v) => v == Value::Bool(true),
        Err(e) => {
            tracing::warn!(error = %e, "when() failed; skipping object");
            false
        }
    }
}

/// The normal path: run `reconcile`, then carry out its plan.
async fn apply(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, ReconcileError> {
    let key = obj.uid().unwrap_or_else(|| obj.name_any());
    let mut plan = reconcile::plan(
        &ctx.script,
        &ctx.function,
        object_view(obj)?,
        script_ctx(ctx, obj),
    )
    .await?;
    if ctx.manage_status {
        let mut status = plan.status.take().unwrap_or_default();
        conditions::set(&mut status, obj, Health::Ready);
        plan.status = Some(status);
    }
    let outcome = ctx.applier.apply(obj, &ctx.kind, &plan, &ctx.owned).await?;
    crate::metrics::applied(
        &ctx.controller,
        outcome.children_applied,
        outcome.children_unchanged,
        outcome.children_pruned,
        outcome.status_written,
    );
    ctx.backoff.succeed(&key);
    for e in &plan.events {
        let kind = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(ctx, obj, kind, &e.reason, &e.message).await;
    }
    tracing::info!(
        applied = outcome.children_applied,
        unchanged = outcome.children_unchanged,
        pruned = outcome.children_pruned,
        status_written = outcome.status_written,
        "reconciled"
    );
    Ok(plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

/// The deletion path: run `finalize` until it returns true; the finalizer is then removed.
async fn cleanup(obj: &DynamicObject, ctx: &Ctx) -> Result<Action, ReconcileError> {
    let function = ctx.finalize.clone().unwrap_or_else(|| FINALIZE.into());
    let done = ctx
        .script
        .call_async(&function, object_view(obj)?, script_ctx(ctx, obj))
        .await
        .map_err(|e| ReconcileError::Plan(e.into()))?;
    if done == Value::Bool(true) {
        tracing::info!("finalized");
        Ok(Action::await_change())
    } else {
        Err(ReconcileError::NotFinalized { function })
    }
}

/// Tells the object's owner what went wrong: a Warning Event and, where khai owns the status, a
/// `Ready=False` condition. Failures to report are logged, never fatal.
async fn report_failure(obj: &DynamicObject, ctx: &Ctx, err: &ReconcileError) {
    let message: String = err.to_string().chars().take(1024).collect();
    let reason = match err.script_error() {
        Some(ScriptError::Retry { .. }) => "RetryRequested",
        Some(ScriptError::Fail { .. }) => "Failed",
        _ => "ReconcileFailed",
    };
    publish(ctx, obj, EventType::Warning, reason, &message).await;
    if ctx.manage_status && obj.metadata.deletion_timestamp.is_none() {
        let mut status = obj.data["status"].as_object().cloned().unwrap_or_default();
        conditions::set(
            &mut status,
            obj,
            Health::Failing {
                reason,
                message: &message,
            },
        );
        match ctx.applier.status(obj, &ctx.kind, &status).await {
            Ok(true) => crate::metrics::status_written(&ctx.controller),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "failed to write failure condition"),
        }
    }
}

/// Records an Event on `obj`; a failure to record is logged, never fatal.
async fn publish(ctx: &Ctx, obj: &DynamicObject, type_: EventType, reason: &str, message: &str) {
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(message.chars().take(1024).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .recorder
        .publish(&event, &obj.object_ref(&ctx.kind.resource))
        .await
    {
        tracing::debug!(error = %e, "failed to publish event");
    }
}

/// After a failure: `retry(msg, delay)` is honoured as asked, `fail(msg)` waits for the object
/// to change, anything else backs off exponentially per object.
fn error_policy(obj: Arc<DynamicObject>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    let _span = object_span(&obj, &ctx).entered();
    let key = obj.uid().unwrap_or_else(|| obj.name_any());
    let asked = match err.script_error() {
        Some(ScriptError::Fail { .. }) => {
            tracing::warn!(error = %err, "reconcile failed permanently; waiting for a change");
            return Action::await_change();
        }
        Some(ScriptError::Retry { delay, .. }) => reconcile::parse_duration(&json!(delay)).ok(),
        _ => None,
    };
    let delay = asked.unwrap_or_else(|| ctx.backoff.fail(&key));
    crate::metrics::queue_retry(&ctx.controller);
    tracing::warn!(error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
