//! Wires up `khai run`: CRDs, one kube-runtime `Controller` per controller and namespace, and
//! graceful shutdown. It holds no logic of its own: each reconcile runs the script
//! ([`crate::reconcile`]) and carries out the plan ([`crate::apply`]).

use crate::apply::Applier;
use crate::operator::Operator;
use crate::reconcile;
use crate::script::Script;
use crate::watch::{self, Kind};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long `khai run` waits for its CRDs to become Established.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of one run that do not come from the config file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Overrides `[operator] namespaces` when non-empty.
    pub namespaces: Vec<String>,
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
}

/// Per-object exponential backoff: 1s, 2s, 4s … capped at 5 minutes, reset on success.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    const BASE: Duration = Duration::from_secs(1);
    const CAP: Duration = Duration::from_secs(300);

    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn fail(&self, key: &str) -> Duration {
        let n = self.failures.lock().map_or(0, |mut m| {
            let n = m.entry(key.to_string()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        });
        Self::BASE
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1).min(16)))
            .min(Self::CAP)
    }

    pub fn succeed(&self, key: &str) {
        if let Ok(mut m) = self.failures.lock() {
            m.remove(key);
        }
    }
}

/// Everything one controller's reconciles share.
struct Ctx {
    controller: String,
    operator: String,
    function: String,
    script: Script,
    kind: Kind,
    applier: Arc<Applier>,
    backoff: Backoff,
}

/// Runs the operator until `shutdown` is cancelled; in-flight reconciles finish first.
pub async fn run(
    op: Operator,
    client: kube::Client,
    opts: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let model = &op.config.model;
    if model.operator.install_crds && !model.crds.is_empty() {
        let install = crate::schema::install(
            &client,
            &model.crds,
            &model.operator.field_manager,
            CRD_ESTABLISH_TIMEOUT,
        );
        tokio::select! {
            res = install => res?,
            // A signal during start-up ends the run at once; nothing has been reconciled yet.
            () = shutdown.cancelled() => return Ok(()),
        }
    }
    let namespaces: Vec<Option<String>> = match (&opts.namespaces, &model.operator.namespaces) {
        (cli, _) if !cli.is_empty() => cli.iter().cloned().map(Some).collect(),
        (_, cfg) if !cfg.is_empty() => cfg.iter().cloned().map(Some).collect(),
        _ => vec![None],
    };
    let applier = Arc::new(Applier::new(client.clone(), model.clone()));
    let mut loops = Vec::new();
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
        let mut owned = Vec::new();
        for o in &ctl.owns {
            owned.push(resolve(o).await?);
        }
        let ctx = Arc::new(Ctx {
            controller: name.clone(),
            operator: model.operator.name.clone(),
            function: ctl.reconcile.clone(),
            script: script.clone(),
            kind: kind.clone(),
            applier: applier.clone(),
            backoff: Backoff::default(),
        });
        for ns in &namespaces {
            let ns = ns.as_deref();
            let mut c = Controller::new_with(
                watch::api(&client, &kind, ns),
                watcher::Config::default(),
                kind.resource.clone(),
            );
            for o in &owned {
                c = c.owns_with(
                    watch::api(&client, o, ns),
                    o.resource.clone(),
                    watcher::Config::default(),
                );
            }
            tracing::info!(controller = %name, kind = %kind.resource.kind, namespace = ns.unwrap_or("*"), "starting controller");
            let name = name.clone();
            let stream = c
                .graceful_shutdown_on(shutdown.clone().cancelled_owned())
                .run(reconcile_one, error_policy, ctx.clone())
                .for_each(move |res| {
                    if let Err(e) = res {
                        tracing::debug!(controller = %name, error = %e, "reconcile did not complete");
                    }
                    futures::future::ready(())
                });
            loops.push(stream);
        }
    }
    futures::future::join_all(loops).await;
    tracing::info!("all controllers stopped");
    Ok(())
}

/// The object as scripts see it: the full object without `managedFields`, which is noise.
fn script_view(obj: &DynamicObject) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    Ok(v)
}

async fn reconcile_one(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let span = tracing::info_span!(
        "reconcile",
        controller = %ctx.controller,
        kind = %ctx.kind.resource.kind,
        namespace = obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
        uid = obj.uid().unwrap_or_default(),
    );
    async move {
        // Without finalizers there is nothing to do for an object on its way out; its children
        // are left to the garbage collector through their ownerReferences.
        if obj.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let key = obj.uid().unwrap_or_else(|| obj.name_any());
        let view = script_view(&obj)?;
        let script_ctx = json!({
            "operator": ctx.operator,
            "controller": ctx.controller,
            "namespace": obj.namespace(),
        });
        let plan = reconcile::plan(&ctx.script, &ctx.function, view, script_ctx).await?;
        let outcome = ctx.applier.apply(&obj, &ctx.kind, &plan).await?;
        ctx.backoff.succeed(&key);
        tracing::info!(
            children = outcome.children_applied,
            status_written = outcome.status_written,
            "reconciled"
        );
        Ok(plan
            .requeue_after
            .map_or_else(Action::await_change, Action::requeue))
    }
    .instrument(span)
    .await
}

fn error_policy(obj: Arc<DynamicObject>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    let key = obj.uid().unwrap_or_else(|| obj.name_any());
    let delay = ctx.backoff.fail(&key);
    tracing::warn!(
        controller = %ctx.controller,
        namespace = obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
        error = %err,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_caps_and_resets_on_success() {
        let b = Backoff::default();
        assert_eq!(b.fail("a"), Duration::from_secs(1));
        assert_eq!(b.fail("a"), Duration::from_secs(2));
        assert_eq!(b.fail("a"), Duration::from_secs(4));
        assert_eq!(b.fail("other"), Duration::from_secs(1));
        for _ in 0..20 {
            b.fail("a");
        }
        assert_eq!(b.fail("a"), Duration::from_secs(300));
        b.succeed("a");
        assert_eq!(b.fail("a"), Duration::from_secs(1));
    }
}
