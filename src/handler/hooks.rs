//! `[operator] startup` and `cleanup`: functions run once for the whole operator, whose
//! `ctx.memo` is the operator's memo every object's memo starts from.

use super::load::HookEntry;
use crate::script::{CallArg, ScriptCtx};

/// The memos of every object (`ctx.memo`), process-wide: they outlive reloads of the config.
pub(crate) fn memos() -> &'static crate::script::memo::Memos {
    static MEMOS: std::sync::LazyLock<crate::script::memo::Memos> =
        std::sync::LazyLock::new(Default::default);
    &MEMOS
}

/// Runs `[operator] cleanup`, or `startup` once: `fn name(ctx)`, whose `ctx.memo` is the
/// operator's memo that every object's memo starts from. A failure is logged; khai carries on.
pub(crate) async fn run_hook(hook: &HookEntry, operator: &str, which: &str) {
    if let Err(e) = hook_attempt(hook, operator, which, None).await {
        tracing::error!(hook = which, function = %hook.spec.function, error = %e, "hook failed");
    }
}

/// Runs `[operator] startup` until it succeeds, as Kopf retries its startup handlers: a failure
/// is tried again after the hook's `backoff` (or the delay given to `retry()`), with `ctx.retry`
/// counting the attempts before; `fail()` or running out of `retries` gives up, logged as an
/// error, and khai carries on. Returns early, unfinished, when `shutdown` is cancelled.
pub(crate) async fn run_startup(
    hook: &HookEntry,
    operator: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let started = jiff::Timestamp::now();
    let mut retry = 0;
    loop {
        let runtime = jiff::Timestamp::now().duration_since(started);
        let attempt = crate::script::Attempt {
            retry,
            started: started.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            runtime: runtime.as_secs_f64(),
        };
        let error = match hook_attempt(hook, operator, "startup", Some(attempt)).await {
            Ok(()) => return,
            Err(e) => e,
        };
        let function = &hook.spec.function;
        let out_of_retries = hook.spec.retries.is_some_and(|r| retry >= r);
        let delay = match &error {
            crate::script::ScriptError::Fail { .. } => None,
            _ if out_of_retries => None,
            crate::script::ScriptError::Retry { delay, .. } => Some(delay.get()),
            _ => Some(hook.spec.backoff.get()),
        };
        let Some(delay) = delay else {
            tracing::error!(hook = "startup", %function, attempts = retry + 1, error = %error, "startup hook failed for good; carrying on without it");
            return;
        };
        tracing::warn!(hook = "startup", %function, attempt = retry + 1, retry_in = ?delay, error = %error, "startup hook failed; not ready until it succeeds");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return,
        }
        retry += 1;
    }
}

async fn hook_attempt(
    hook: &HookEntry,
    operator: &str,
    which: &str,
    attempt: Option<crate::script::Attempt>,
) -> Result<(), crate::script::ScriptError> {
    let mut ctx = ScriptCtx::detached(operator, which, None);
    ctx.memo = Some(memos().operator());
    ctx.attempt = attempt;
    hook.script
        .call_args_async(&hook.spec.function, vec![CallArg::Ctx(ctx)])
        .await?;
    tracing::info!(hook = which, function = %hook.spec.function, "hook ran");
    Ok(())
}
