//! Reconciling one object: the controller's filters, then either the script's `reconcile` and
//! its plan carried out, or (for an object on its way out) `finalize` until it lets go.

use super::context::Ctx;
use super::exclusive::Exclusive;
use super::release::{cleanup, let_go, release_finalizers};
use super::report::{ReconcileError, object_span, report_failure, result_label};
use super::turn::{beside_turn, turn};
use crate::object::ObjectKey;
use crate::script::object_view;
use crate::watch;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// The reconcile function kube-runtime calls, one object at a time.
pub(crate) async fn reconcile_one(
    obj: Arc<DynamicObject>,
    ctx: Arc<Ctx>,
) -> Result<Action, ReconcileError> {
    let span = object_span(&obj, &ctx);
    let controller = ctx.spec.controller.clone();
    let triggers = ctx
        .pending
        .started(obj.metadata.namespace.as_deref(), &obj.name_any());
    let _worker = crate::metrics::reconcile_started(&controller);
    let _only = Exclusive::enter(&controller, &obj);
    if let Some(shard) = &ctx.spec.shard
        && obj.labels().contains_key(&shard.drain_label())
    {
        // No other reconcile of the object runs now: letting go here cannot overlap one.
        return Box::pin(super::drain::acknowledge(&obj, &ctx, shard).instrument(span)).await;
    }
    let started = std::time::Instant::now();
    let result = crate::console::turn(
        &controller,
        Arc::clone(&obj),
        triggers,
        // Boxed, as the drain above: kube-runtime keeps each reconcile in flight in an
        // allocation of this future's size, and the console's wrapper holds its future more
        // than once, so inline the work would be carried several times over.
        Box::pin(checked(obj.clone(), ctx.clone()).instrument(span)),
    )
    .await;
    crate::metrics::reconcile_finished(&controller, result_label(&result), started.elapsed());
    result
}

/// One reconcile past the drain check: the controller's filters and finalizer, then the turn.
/// Failures are reported (Event, `Ready=False`) before they are returned.
async fn checked(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let key = ObjectKey::of(&obj);
    // The echoes expected from the last reconcile go: what this one reads is not known yet,
    // and a child's event meanwhile must queue the object again.
    ctx.objects
        .update_existing(&key, |s| s.sent.forget_echoes());
    // A finalizer of khai's that no controller of this kind uses any more (the config
    // changed) goes first, or the object would hang on deletion for ever.
    let stale = ctx.spec.finalizers.stale(&ctx.spec.operator, &obj);
    if !stale.is_empty() {
        let result = release_finalizers(&obj, &ctx, &stale)
            .await
            .map(|()| Action::await_change());
        if let Err(e) = &result {
            report_failure(&obj, &ctx, e).await;
        }
        return result;
    }
    let ours = obj
        .finalizers()
        .iter()
        .any(|f| *f == ctx.spec.finalizer_name);
    if !ours {
        // The cache shows the finalizer gone: a later one is a new hold, to be let go again.
        ctx.objects.update_existing(&key, |s| s.released = false);
    }
    match selected(&obj, &ctx, ours).await {
        Ok(true) => {}
        // An object that stops matching is let go: cleaned up as for a deletion, and its
        // finalizer removed, so it never hangs on deletion after khai stops caring.
        Ok(false) if ours => {
            let result = let_go(&obj, &ctx).await;
            if let Err(e) = &result {
                report_failure(&obj, &ctx, e).await;
            }
            return result;
        }
        Ok(false) => {
            tracing::debug!("not selected by the controller's filters");
            return Ok(Action::await_change());
        }
        Err(e) => {
            report_failure(&obj, &ctx, &e).await;
            return Err(e);
        }
    }
    // khai deleting children itself (unowned ones, or in order) holds the object with its
    // finalizer too: it is what makes a parent deleted while khai was down wait for khai.
    let needs_finalizer = ctx.spec.finalize.is_some()
        || ctx.spec.children.deletes_children()
        || holds_for_handlers(&obj, &ctx).await?;
    let own = std::slice::from_ref(&ctx.spec.finalizer_name);
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let result = match needs_finalizer {
        // Cleaned up and let go already; the cache does not show it yet (another controller
        // of the kind wrote to the object meanwhile). Cleaning up again would run `finalize`
        // or the delete handlers twice.
        true if deleting && ctx.objects.read(&key, |s| s.is_some_and(|s| s.released)) => {
            Ok(Action::await_change())
        }
        true => {
            let api = watch::api(
                &ctx.services.client,
                &ctx.spec.kind,
                obj.namespace().as_deref(),
            );
            finalizer(&api, &ctx.spec.finalizer_name, obj.clone(), |event| async {
                match event {
                    FinalizerEvent::Apply(o) => turn(&o, &ctx).await,
                    FinalizerEvent::Cleanup(o) => cleanup(&o, &ctx).await,
                }
            })
            .await
            .map_err(ReconcileError::from_finalizer)
            .inspect(|_| {
                if deleting {
                    ctx.objects.update(&key, |s| s.released = true);
                }
            })
        }
        // The script no longer defines finalize, and no delete handler holds the object (an
        // edit or a reload since the finalizer was added): nothing needs khai's finalizer any
        // more, so it goes, or the object would hang on deletion for ever.
        false if ours => match release_finalizers(&obj, &ctx, own).await {
            Ok(()) if obj.metadata.deletion_timestamp.is_some() => Ok(Action::await_change()),
            Ok(()) => turn(&obj, &ctx).await,
            Err(e) => Err(e),
        },
        // Without finalize there is nothing to do for an object on its way out; its children
        // go with it through their ownerReferences.
        false if obj.metadata.deletion_timestamp.is_some() => Ok(Action::await_change()),
        false => turn(&obj, &ctx).await,
    };
    if let Err(e) = &result {
        report_failure(&obj, &ctx, e).await;
    }
    result
}

/// Whether a delete handler that waits (not `optional`) is for `obj` by its filters, and so
/// holds it with khai's finalizer.
async fn holds_for_handlers(obj: &DynamicObject, ctx: &Ctx) -> Result<bool, ReconcileError> {
    match &ctx.beside.handlers {
        Some(h) if h.hold_deletion() => Ok(h.holds(&beside_turn(obj, ctx)?).await),
        _ => Ok(false),
    }
}

/// Whether the controller's annotation filter and `when(obj)` predicate select `obj`. A failing
/// predicate is logged and counts as not selected.
///
/// An object khai cannot turn into the script's view is an error, a failed reconcile (logged as
/// a warning with the object and the reason, a Warning Event, retried with backoff), not "not
/// selected": `reconcile` could not read it either, and calling it unselected would hide
/// for good an object whose children khai manages.
///
/// For an object khai holds (`ours`), a failing predicate is a failed reconcile too: letting
/// the object go would run `finalize` because of a script error.
async fn selected(obj: &DynamicObject, ctx: &Ctx, ours: bool) -> Result<bool, ReconcileError> {
    if !ctx
        .spec
        .annotations
        .iter()
        .all(|a| obj.annotations().contains_key(a))
    {
        return Ok(false);
    }
    let Some(when) = &ctx.spec.when else {
        return Ok(true);
    };
    let view = object_view(obj).map_err(|e| ReconcileError::Unreadable {
        function: when.clone(),
        cause: e,
    })?;
    let mut args = vec![crate::script::CallArg::Json(view)];
    if ctx.spec.script.has_function(when, 2) {
        args.push(crate::script::CallArg::Ctx(ctx.related_ctx(obj)));
    }
    match ctx.spec.script.call_args_async(when, args).await {
        Ok(v) => Ok(v == Value::Bool(true)),
        Err(e) if ours => Err(ReconcileError::Plan(e.into())),
        Err(e) => {
            tracing::warn!(error = %e, "when() failed; skipping object");
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::{Beside, Caches, Services, Spec};
    use crate::fake_api::FakeApi;
    use crate::watch::{Informer, Kind};
    use kube::api::{ApiResource, GroupVersionKind};
    use serde_json::json;
    use std::path::Path;

    fn widgets() -> Kind {
        Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("x.dev", "v1", "Widget"),
                "widgets",
            ),
            namespaced: true,
        }
    }

    /// A controller of widgets whose script is `script`, selecting with `when`, over `api`.
    fn ctx(api: &FakeApi, script: &str, when: Option<&str>) -> Ctx {
        let limits = crate::script::Limits::default();
        let engine = Arc::new(crate::script::engine(&limits));
        let script =
            crate::script::Script::compile(engine, &limits, Path::new("w.rhai"), script).unwrap();
        let client = api.client();
        let primary = Informer::with_objects(widgets(), Some("ns"), Vec::new());
        Ctx {
            spec: Spec {
                controller: "widgets".into(),
                operator: "op".into(),
                function: Some("reconcile".into()),
                finalize: None,
                finalizer_name: "khai.dev/op".into(),
                finalizers: crate::controller::finalizer_names::Names {
                    own: "khai.dev/op".into(),
                    kind: vec!["khai.dev/op".into()],
                    sweeps: true,
                },
                script,
                kind: widgets(),
                when: when.map(str::to_string),
                annotations: Vec::new(),
                filter: Default::default(),
                manage_status: false,
                params: json!({}),
                children: Default::default(),
                effects: Arc::new(crate::effects::Effects::new(
                    tokio::runtime::Handle::current(),
                    crate::effects::Budget::default(),
                )),
                shard: None,
            },
            caches: Caches {
                primary: primary.clone(),
                owned: Vec::new(),
                namespaces: Vec::new(),
                visible: vec![primary],
            },
            services: Services {
                applier: Arc::new(crate::apply::Applier::new(
                    client.clone(),
                    crate::config::Model::default(),
                )),
                recorder: crate::events::Recorder::new(
                    client.clone(),
                    crate::events::Reporter {
                        controller: "khai-op".into(),
                        instance: None,
                    },
                ),
                client,
            },
            backoff: crate::queue::Backoff::new(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(60),
            ),
            objects: Default::default(),
            pending: crate::queue::Pending::new("widgets"),
            beside: Beside::default(),
            revisions: Default::default(),
        }
    }

    /// A `when` that throws for an object khai holds must not let the object go (and run
    /// `finalize`) because of a script error: the reconcile fails and is retried.
    #[tokio::test]
    async fn a_failing_when_does_not_let_go_of_an_object_khai_holds() {
        let api = FakeApi::default();
        let ctx = Arc::new(ctx(
            &api,
            "fn when(obj) { throw \"boom\" }\nfn reconcile(obj, ctx) { #{} }",
            Some("when"),
        ));
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "Widget",
            "metadata": { "name": "w", "namespace": "ns", "uid": "u1",
                          "finalizers": ["khai.dev/op"] },
        }))
        .unwrap();
        let err = reconcile_one(Arc::new(obj), ctx).await.unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }

    /// An object `when` cannot be given to is a failed reconcile, not quietly "not selected".
    #[tokio::test]
    async fn an_object_when_cannot_read_fails_its_reconcile_instead_of_going_unselected() {
        let api = FakeApi::default();
        let ctx = Arc::new(ctx(
            &api,
            "fn when(obj) { true }\nfn reconcile(obj, ctx) { #{} }",
            Some("when"),
        ));
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "x.dev/v1", "kind": "Widget",
            "metadata": { "name": "w", "namespace": "ns", "uid": "u1" },
        }))
        .unwrap();
        // A body that is not a map cannot be serialised (flattened) into the script's view.
        obj.data = Value::String("not a map".into());
        let err = reconcile_one(Arc::new(obj), ctx).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot read the object to call when(): can only flatten structs and maps (got a string)"
        );
    }
}
