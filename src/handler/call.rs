//! What every handler, timer and daemon call shares: its own budget of side effects, and the
//! `when` predicate that selects the objects it runs for.

use super::Turn;
use crate::script::{CallArg, Script, ScriptCtx};
use serde_json::Value;

/// `ctx` with the side effects of its controller under `budget` (a handler's, timer's or
/// daemon's own), when it gives one.
pub(crate) fn budgeted(ctx: &ScriptCtx, budget: Option<crate::config::model::Budget>) -> ScriptCtx {
    let mut ctx = ctx.clone();
    if let (Some(b), Some(fx)) = (budget, &ctx.effects) {
        ctx.effects = Some(fx.with_budget(b));
    }
    ctx
}

/// Whether `when(obj)` or `when(obj, ctx)` (if any) selects the turn's object; a failing
/// predicate is logged and selects nothing. `what` names the entry in the log.
pub(crate) async fn selects(
    script: &Script,
    when: Option<&str>,
    turn: &Turn<'_>,
    what: &str,
) -> bool {
    selects_view(script, when, &turn.view, &turn.ctx, what).await
}

/// [`selects`] for an object seen outside a turn (a spy's watch event, an object gone): `view`
/// is the object as scripts see it, `ctx` the `ctx` its calls get.
pub(crate) async fn selects_view(
    script: &Script,
    when: Option<&str>,
    view: &Value,
    ctx: &ScriptCtx,
    what: &str,
) -> bool {
    let Some(when) = when else {
        return true;
    };
    let mut args = vec![CallArg::Json(view.clone())];
    if script.has_function(when, 2) {
        // A predicate computes; it makes no calls.
        let mut ctx = ctx.clone();
        ctx.effects = None;
        args.push(CallArg::Ctx(ctx));
    }
    match script.call_args_async(when, args).await {
        Ok(v) => v == Value::Bool(true),
        Err(e) => {
            tracing::warn!(entry = %what, error = %e, "when() failed; not running it");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_handlers_own_budget_replaces_its_controllers_and_none_keeps_it() {
        use crate::effects::{Budget, Effects};
        let mut ctx = crate::script::ScriptCtx::detached("op", "h", None);
        let own = Budget {
            calls: 3,
            ..Budget::default()
        };
        assert!(
            super::budgeted(&ctx, Some(own)).effects.is_none(),
            "no effects, none given"
        );
        ctx.effects = Some(std::sync::Arc::new(Effects::new(
            tokio::runtime::Handle::current(),
            Budget::default(),
        )));
        let b = |c: &crate::script::ScriptCtx| c.effects.as_ref().map(|e| e.budget.calls);
        assert_eq!(b(&super::budgeted(&ctx, Some(own))), Some(3));
        assert_eq!(b(&super::budgeted(&ctx, None)), Some(100));
    }
}
