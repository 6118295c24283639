//! `[operator] startup` offline: what it puts in the operator's memo is what every case's
//! `ctx.memo` starts from, as every object's memo does under `khai run`.

use super::Error;
use super::case::Case;
use crate::operator::Operator;
use crate::script::memo::Memo;
use crate::script::{Attempt, CallArg, ScriptCtx, ScriptError};

/// Attempts of a startup hook that keeps failing before a case gives up on it (`khai run`
/// would retry it for ever, not ready meanwhile).
const MAX_ATTEMPTS: u32 = 100;

/// The memo a case's call starts with: a copy of the operator's memo once the startup hook (if
/// any) has run as `khai run` runs it (`fn startup(ctx)`, with no side effects), retried at once
/// with `ctx.retry` counting the attempts before, until it succeeds, calls `fail()` or runs out
/// of its `retries` (khai then carries on without it, and so does the case).
pub(super) fn operator_memo(op: &Operator, case: &Case) -> Result<Memo, Error> {
    let memo = Memo::default();
    let Some(hook) = &op.handlers.startup else {
        return Ok(memo);
    };
    let function = &hook.spec.function;
    let started = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    for retry in 0..MAX_ATTEMPTS {
        let mut ctx = ScriptCtx::detached(&op.config.model.operator.name, "startup", None);
        ctx.memo = Some(memo.clone());
        ctx.attempt = Some(Attempt {
            retry,
            started: started.clone(),
            runtime: 0.0,
        });
        match hook.script.call_args(function, &[CallArg::Ctx(ctx)]) {
            Ok(_) | Err(ScriptError::Fail { .. }) => break,
            Err(_) if hook.spec.retries.is_some_and(|r| retry >= r) => break,
            Err(_) if retry + 1 < MAX_ATTEMPTS => {}
            Err(e) => {
                return Err(Error::Case {
                    file: case.file.clone(),
                    field: "[operator] startup".into(),
                    message: format!(
                        "{function} still fails after {MAX_ATTEMPTS} attempts, so khai run would \
                         never be ready: {e}"
                    ),
                });
            }
        }
    }
    Ok(Memo::from_map(memo.snapshot()))
}
