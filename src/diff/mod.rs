//! `khai diff`: the writes `khai run` would make with a config, against the live cluster, made
//! by the same engine and sent nowhere.
//!
//! The controllers are prepared as `khai run` prepares them ([`crate::controller::prepare`]:
//! the same kinds, informers, filters, `ctx` lookups over the informer caches), every object in
//! their caches goes through the controller's filters and its script's `reconcile`
//! ([`crate::reconcile::plan`]), and the plan is compared with the live children and status by
//! [`crate::apply::Applier::preview`], which uses the functions `apply` decides "would this write
//! change anything" with. The script's side effects are those of [`crate::effects::dry`]: reads
//! reach the cluster, writes and HTTP requests are held back and reported. Nothing is written;
//! the only requests besides lists and watches are server-side apply dry runs of the children
//! that would be written.
//!
//! Handlers, timers and daemons are not run: their answers depend on what changed and when,
//! which a diff of the present state cannot know. Objects being deleted are skipped (`khai run`
//! would call `finalize`, not `reconcile`).

mod plans;
mod report;

pub(crate) use plans::between;
pub(crate) use report::{Format, ObjectDiff, Report, Verdict};

use crate::controller::{Ctx, Prepared};
use crate::effects::Effects;
use crate::effects::dry::Held;
use crate::operator::Operator;
use crate::reconcile::Plan;
use crate::reconcile::conditions::{self, Health};
use crate::script::{CallArg, Script};
use crate::watch::{Informer, Informers};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Objects whose reconcile and dry runs are in flight at once.
const CONCURRENCY: usize = 8;

/// Why a diff could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Prepare(#[from] crate::controller::Error),
    #[error("the cache of {kind} did not fill within {}s{}", .waited.as_secs(), reason(.refused))]
    Sync {
        kind: String,
        waited: Duration,
        /// The API server's answer to a list of the kind, when it refuses it.
        refused: Option<crate::client::ApiError>,
    },
}

fn reason(refused: &Option<crate::client::ApiError>) -> String {
    refused
        .as_ref()
        .map(|e| format!(": listing it fails: {e}"))
        .unwrap_or_default()
}

/// What `khai run` would write with `op` for every object of its controllers in `namespaces`
/// (all when empty, or `[operator] namespaces`), waiting at most `sync` for the caches.
pub(crate) async fn diff(
    op: &Operator,
    client: &kube::Client,
    namespaces: &[String],
    sync: Duration,
) -> Result<Report, Error> {
    let informers = Informers::new(client.clone());
    let made = async {
        let prepared = crate::controller::prepare(op, client, namespaces, &informers).await?;
        synced(client, &informers.all(), sync).await?;
        let work: Vec<(&Prepared, Arc<DynamicObject>)> = prepared
            .iter()
            .filter(|p| p.ctx.spec.function.is_some())
            .flat_map(|p| {
                let mut objects = p.primary.store().state();
                objects.sort_by_key(|o| (o.namespace(), o.name_any()));
                objects.into_iter().map(move |o| (p, o))
            })
            .collect();
        let objects: Vec<ObjectDiff> = futures::stream::iter(work)
            .map(|(p, obj)| one(p, obj))
            .buffered(CONCURRENCY)
            .collect()
            .await;
        Ok(Report::new(objects))
    }
    .await;
    informers.shutdown();
    made
}

/// Waits until every informer has its first full list, for at most `limit` in all.
async fn synced(
    client: &kube::Client,
    informers: &[Arc<Informer>],
    limit: Duration,
) -> Result<(), Error> {
    let deadline = tokio::time::Instant::now() + limit;
    for inf in informers {
        if tokio::time::timeout_at(deadline, inf.synced())
            .await
            .is_err()
        {
            let api = crate::watch::api(client, &inf.kind, inf.namespace.as_deref());
            let refused = api
                .list_metadata(&kube::api::ListParams::default().limit(1))
                .await
                .err()
                .map(crate::client::ApiError::from);
            return Err(Error::Sync {
                kind: inf.kind.resource.kind.clone(),
                waited: limit,
                refused,
            });
        }
    }
    Ok(())
}

/// What `khai run` would do for one object of `p`'s controller.
async fn one(p: &Prepared, obj: Arc<DynamicObject>) -> ObjectDiff {
    object_with(&p.ctx, &p.ctx.spec.script, obj).await
}

/// What a running controller (`ctx`) would do for `obj` if its script were `script`: the same
/// filters, `reconcile` with read-only effects and previewed plan as `khai diff`, against the
/// controller's own caches (the console's playground).
pub(crate) async fn object_with(ctx: &Ctx, script: &Script, obj: Arc<DynamicObject>) -> ObjectDiff {
    let mut diff = ObjectDiff::of(&ctx.spec.controller, &obj);
    if obj.metadata.deletion_timestamp.is_some() {
        diff.verdict = Verdict::Skipped("being deleted: khai would call finalize".into());
        return diff;
    }
    let held = Arc::new(Held::default());
    diff.verdict = match selected(ctx, script, &obj).await {
        Ok(true) => plan(ctx, script, &obj, &held).await,
        Ok(false) => Verdict::Skipped("not selected by the controller's filters".into()),
        Err(e) => Verdict::Failed(e),
    };
    (diff.calls, diff.more_calls) = held.calls();
    diff
}

/// Whether the controller's annotation filter and `when` (from `script`) select `obj`, as
/// `khai run` decides.
pub(crate) async fn selected(
    ctx: &Ctx,
    script: &Script,
    obj: &DynamicObject,
) -> Result<bool, String> {
    let spec = &ctx.spec;
    if !spec
        .annotations
        .iter()
        .all(|a| obj.annotations().contains_key(a))
    {
        return Ok(false);
    }
    let Some(when) = &spec.when else {
        return Ok(true);
    };
    let view =
        crate::script::object_view(obj).map_err(|e| format!("cannot read the object: {e}"))?;
    let mut args = vec![CallArg::Json(view)];
    if script.has_function(when, 2) {
        args.push(CallArg::Ctx(ctx.related_ctx(obj)));
    }
    match script.call_args_async(when, args).await {
        Ok(v) => Ok(v == Value::Bool(true)),
        Err(e) => Err(format!("{when}() fails: {e}")),
    }
}

/// The script's plan for `obj`, its side effects held in `held`, compared with the cluster.
async fn plan(ctx: &Ctx, script: &Script, obj: &Arc<DynamicObject>, held: &Arc<Held>) -> Verdict {
    let plan = match held_plan(ctx, script, obj, held).await {
        Ok(Some(plan)) => plan,
        Ok(None) => return Verdict::Skipped("the controller runs no reconcile".into()),
        Err(e) => return Verdict::Failed(e),
    };
    let preview = ctx
        .services
        .applier
        .preview(
            obj,
            &ctx.spec.kind,
            &plan,
            ctx.caches.for_apply(),
            ctx.spec.children,
        )
        .await;
    match preview {
        Ok(preview) => Verdict::Planned(preview),
        Err(e) => Verdict::Failed(e.to_string()),
    }
}

/// The plan `ctx`'s controller makes for `obj` with `script`, as `khai run` would carry it out (with
/// `observedGeneration` and `Ready` where khai owns the status), its script's side effects held
/// in `held` and its `ctx.memo` a copy; `None` for a controller that runs no reconcile.
pub(crate) async fn held_plan(
    ctx: &Ctx,
    script: &Script,
    obj: &Arc<DynamicObject>,
    held: &Arc<Held>,
) -> Result<Option<Plan>, String> {
    let Some(function) = &ctx.spec.function else {
        return Ok(None);
    };
    let mut script_ctx = ctx.script_ctx(obj);
    // The object's memo as it is, but what the script sets in it stays with this run: held,
    // as its writes are.
    script_ctx.memo = script_ctx
        .memo
        .map(|m| crate::script::memo::Memo::from_map(m.snapshot()));
    script_ctx.effects = script_ctx.effects.map(|e| {
        Arc::new(Effects {
            dry: Some(held.clone()),
            ..(*e).clone()
        })
    });
    if let Err(e) = crate::script::has_view(obj) {
        return Err(format!("cannot read the object: {e}"));
    }
    let mut plan = crate::reconcile::plan(script, function, obj.clone(), script_ctx)
        .await
        .map_err(|e| e.to_string())?;
    if ctx.spec.manage_status {
        let mut status = plan.status.take().unwrap_or_default();
        conditions::set(&mut status, obj, Health::Ready);
        plan.status = Some(status);
    }
    Ok(Some(plan))
}
