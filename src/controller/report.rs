//! What a failed reconcile tells people and what it does next: a Warning Event and a `Ready=False`
//! condition on the object, and a retry delay (the script's own, or per-object backoff).

use super::context::Ctx;
use crate::apply::Manager;
use crate::events::{Event as KubeEvent, EventType};
use crate::object::ObjectKey;
use crate::reconcile::conditions;
use crate::script::ScriptError;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// Why one reconcile failed; logged and retried with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReconcileError {
    #[error(transparent)]
    Plan(#[from] crate::reconcile::Error),
    #[error(transparent)]
    Apply(#[from] crate::apply::Error),
    #[error("failed to serialize object: {0}")]
    Serialize(serde_json::Error),
    /// The object could not be turned into the view `function` is called with.
    #[error("cannot read the object to call {function}(): {cause}")]
    Unreadable {
        function: String,
        cause: serde_json::Error,
    },
    #[error("{function} has not finished yet (it must return true to let the object go)")]
    NotFinalized { function: String },
    #[error("failed to add khai's finalizer: {0}")]
    AddFinalizer(crate::client::ApiError),
    #[error("failed to remove khai's finalizer: {0}")]
    RemoveFinalizer(crate::client::ApiError),
    /// The object could not be read back from the API server.
    #[error("failed to read the object: {0}")]
    Read(crate::client::ApiError),
    /// The shard could not remove its labels to let the object move to another shard.
    #[error("failed to let go of the object for another shard: {0}")]
    Drain(crate::client::ApiError),
    #[error(transparent)]
    Handlers(#[from] crate::handler::Error),
    #[error("delete handlers have not all finished yet; the object is held until they do")]
    DeleteHandlersPending,
    /// khai deletes the children itself and has not finished.
    #[error("{0}; the object is held until then")]
    DeletingChildren(crate::apply::Progress),
    /// The finalizer helper refused an object without a name.
    #[error("object has no name")]
    Unnamed,
    /// The finalizer helper could not build the patch for khai's finalizer name.
    #[error("invalid finalizer")]
    InvalidFinalizer,
}

impl From<serde_json::Error> for ReconcileError {
    fn from(e: serde_json::Error) -> Self {
        ReconcileError::Serialize(e)
    }
}

impl ReconcileError {
    /// The script's own error, when the script is what failed.
    fn script_error(&self) -> Option<&ScriptError> {
        match self {
            ReconcileError::Plan(crate::reconcile::Error::Script(e)) => Some(e),
            _ => None,
        }
    }

    /// Unwraps the finalizer helper's wrapping so reports show the script's own error.
    pub(crate) fn from_finalizer(e: kube::runtime::finalizer::Error<ReconcileError>) -> Self {
        use kube::runtime::finalizer::Error as F;
        match e {
            F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner,
            F::AddFinalizer(e) => ReconcileError::AddFinalizer(e.into()),
            F::RemoveFinalizer(e) => ReconcileError::RemoveFinalizer(e.into()),
            F::UnnamedObject => ReconcileError::Unnamed,
            F::InvalidFinalizer => ReconcileError::InvalidFinalizer,
        }
    }
}

/// The span every log line about one object's reconcile sits in, so text and JSON logs carry
/// controller, kind, namespace, name and uid.
pub(crate) fn object_span(obj: &DynamicObject, ctx: &Ctx) -> tracing::Span {
    tracing::info_span!(
        "reconcile",
        controller = %ctx.spec.controller,
        kind = %ctx.spec.kind.resource.kind,
        namespace = obj.namespace().unwrap_or_default(),
        name = %obj.name_any(),
        uid = obj.uid().unwrap_or_default(),
    )
}

/// controller-runtime's `result` label for a finished reconcile.
pub(crate) fn result_label(result: &Result<Action, ReconcileError>) -> &'static str {
    match result {
        Err(_) => "error",
        Ok(a) if *a == Action::await_change() => "success",
        Ok(_) => "requeue_after",
    }
}

/// Tells the object's owner what went wrong: a Warning Event and, where khai owns the status, a
/// `Ready=False` condition. Failures to report are logged, never fatal.
pub(crate) async fn report_failure(obj: &DynamicObject, ctx: &Ctx, err: &ReconcileError) {
    let message: String = err.to_string().chars().take(1024).collect();
    if let ReconcileError::DeletingChildren(_) = err {
        // Progress, not a failure: the object is on its way out and nobody has to act.
        publish(ctx, obj, EventType::Normal, "DeletingChildren", &message).await;
        return;
    }
    let reason = match err {
        ReconcileError::Plan(e) => e.failure_reason(),
        _ => "ReconcileFailed",
    };
    // A call khai's RBAC does not allow fails the same way until someone changes the RBAC or
    // the config: said once, while the condition already says it, not on every retry.
    if !(reason == FORBIDDEN && already_said(obj, reason, &message)) {
        publish(ctx, obj, EventType::Warning, reason, &message).await;
    }
    let answer = err.script_error().and_then(ScriptError::failing_status);
    if (ctx.spec.manage_status || answer.is_some()) && obj.metadata.deletion_timestamp.is_none() {
        // One write: the failing answer's status and khai's Ready=False together.
        let status = conditions::failing(obj, answer, reason, &message, ctx.spec.manage_status);
        match ctx
            .services
            .applier
            .status(
                obj,
                &ctx.spec.kind,
                &status,
                ctx.ledger(&ObjectKey::of(obj), false),
                Manager::Reconcile,
            )
            .await
        {
            Ok(true) => crate::metrics::status_written(&ctx.spec.controller),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "failed to write failure condition"),
        }
    }
}

pub(crate) use crate::reconcile::FORBIDDEN;

/// Whether `obj`'s `Ready` condition already reports `reason` with `message`.
fn already_said(obj: &DynamicObject, reason: &str, message: &str) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["reason"] == reason && c["message"] == message)
}

/// Records the Events of one answer within the object's budget ([`crate::object::event_budget`]): the
/// rest are counted in `khai_events_dropped_total`, and the first drop of a window is said with
/// one `EventsDropped` Warning. `record` publishes one.
pub(crate) async fn capped_events<'a, F, Fut>(
    ctx: &Ctx,
    obj: &DynamicObject,
    events: &'a [crate::reconcile::PlannedEvent],
    mut record: F,
) where
    F: FnMut(&'a crate::reconcile::PlannedEvent) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    use crate::object::event_budget::{PER_ANSWER, PER_WINDOW, WINDOW, Window};
    // Most answers ask for none: no lock and no record for them.
    if events.is_empty() {
        return;
    }
    let grant = ctx.objects.update(&ObjectKey::of(obj), |s| {
        Window::take(&mut s.events, tokio::time::Instant::now(), events.len())
    });
    for e in &events[..grant.kept] {
        record(e).await;
    }
    if grant.dropped > 0 {
        crate::metrics::events_dropped(&ctx.spec.controller, grant.dropped);
    }
    if grant.say {
        let message = format!(
            "the answer asked for {} Events and khai dropped {}: it records at most \
             {PER_ANSWER} per answer and {PER_WINDOW} per object within {}s; further drops \
             in this window are only counted in khai_events_dropped_total",
            events.len(),
            grant.dropped,
            WINDOW.as_secs()
        );
        publish(ctx, obj, EventType::Warning, "EventsDropped", &message).await;
    }
}

/// Records an Event on `obj`; a failure to record is logged, never fatal.
pub(crate) async fn publish(
    ctx: &Ctx,
    obj: &DynamicObject,
    type_: EventType,
    reason: &str,
    message: &str,
) {
    let event = KubeEvent {
        type_,
        reason: reason.into(),
        note: Some(message.chars().take(1024).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .services
        .recorder
        .publish(&event, &obj.object_ref(&ctx.spec.kind.resource))
        .await
    {
        let e = crate::client::ApiError::from(e);
        tracing::warn!(error = %e, reason, "failed to publish an Event");
    }
}

/// After a failure: `retry(msg, delay)` is honoured as asked, `fail(msg)` waits for the object
/// to change, anything else backs off exponentially per object.
pub(crate) fn error_policy(obj: Arc<DynamicObject>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    let _span = object_span(&obj, &ctx).entered();
    let asked = match err.script_error() {
        Some(ScriptError::Fail { .. }) => {
            tracing::warn!(error = %err, "reconcile failed permanently; waiting for a change");
            return Action::await_change();
        }
        // As `requeue_after`, never sooner than a second: `retry(msg, "1ms")` would spin.
        Some(ScriptError::Retry { delay, .. }) => {
            Some(delay.get().max(crate::reconcile::MIN_REQUEUE_AFTER))
        }
        _ => None,
    };
    let delay = asked.unwrap_or_else(|| ctx.failed(&ObjectKey::of(&obj)));
    crate::metrics::queue_retry(&ctx.spec.controller);
    if let ReconcileError::DeletingChildren(progress) = err {
        // Progress on the way out, not a failure; the child's deletion re-triggers it sooner.
        tracing::info!(%progress, retry_in = ?delay, "deleting children");
    } else {
        tracing::warn!(error = %err, retry_in = ?delay, "reconcile failed");
    }
    Action::requeue(delay)
}
