//! Handlers run without bookkeeping or retries: spies (`on = "event"`) on each watch event,
//! and optional delete handlers once their object is gone.

use super::change_record::diffs;
use super::{Entry, Handlers, budgeted, change, filter, selects_view};
use crate::script::{CallArg, ScriptCtx};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

impl Handlers {
    /// Runs the optional delete handlers for an object already gone, once each, logging what
    /// fails.
    pub(crate) async fn on_gone(&self, obj: &DynamicObject, view: Value, ctx: ScriptCtx) {
        let essence = change::essence(&view, &self.keys.prefix);
        let record = json!({ "type": "delete", "old": essence, "new": Value::Null,
                             "diff": diffs(&essence, &Value::Null) });
        for entry in self.optional_deletes() {
            if !admits(entry, &view, &ctx).await {
                continue;
            }
            let args = vec![
                CallArg::Json(view.clone()),
                CallArg::Ctx(budgeted(&ctx, entry.spec.budget)),
                CallArg::Json(record.clone()),
            ];
            if let Err(e) = entry
                .script
                .call_args_async(&entry.spec.function(), args)
                .await
            {
                tracing::warn!(handler = %entry.spec.id(), object = %obj.name_any(), error = %e, "optional delete handler failed");
            }
        }
    }

    /// Runs the raw event handlers (Kopf's spies) for one watch event of type `kind` (`None`:
    /// an object of the initial list, see [`spy`]); `view` is the whole object.
    pub(crate) async fn on_event(&self, view: Value, kind: Option<&str>, ctx: ScriptCtx) {
        for entry in self.spies() {
            if !admits(entry, &view, &ctx).await {
                continue;
            }
            let event = json!({ "type": kind, "object": view });
            let args = vec![
                CallArg::Json(view.clone()),
                CallArg::Ctx(budgeted(&ctx, entry.spec.budget)),
                CallArg::Json(event),
            ];
            if let Err(e) = entry
                .script
                .call_args_async(&entry.spec.function(), args)
                .await
            {
                tracing::warn!(handler = %entry.spec.id(), error = %e, "event handler failed");
            }
        }
    }
}

/// Whether `entry`'s filters (labels, annotations and its `when`) select the object `view`, as
/// they do for the handlers run in an object's turn.
async fn admits(entry: &Entry, view: &Value, ctx: &ScriptCtx) -> bool {
    let filters = entry.spec.filters();
    filter::metadata_passes(&filters, view)
        && selects_view(&entry.script, filters.when, view, ctx, &entry.spec.id()).await
}
