//! `[[schedule]]`: functions run on a clock that belongs to no object, `fn name(ctx)`, every
//! `interval` (counted from the end of the previous run) or at the times of a cron expression
//! (UTC). They run while this replica leads, each schedule in a loop of its own, so two runs of
//! one schedule never overlap: a run that outlasts its next time delays it. A run's `ctx` has
//! `k8s::` calls under the schedule's budget and the operator's memo; a failing run is logged
//! and counted (`khai_schedule_runs_total{result="error"}`), and the schedule carries on. A run
//! that writes nothing costs nothing.

use super::load::ScheduleEntry;
use crate::script::{CallArg, ScriptCtx};
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// When a schedule runs next.
enum Clock {
    Every(Duration),
    Cron(Box<croner::Cron>),
}

impl Clock {
    fn of(entry: &ScheduleEntry) -> Option<Self> {
        match (&entry.spec.interval, &entry.spec.cron) {
            (Some(d), _) => Some(Clock::Every(d.get())),
            // `khai check` refuses an expression that does not parse.
            (None, Some(c)) => croner::Cron::from_str(c)
                .ok()
                .map(|c| Clock::Cron(Box::new(c))),
            (None, None) => None,
        }
    }

    /// How long from now until the next run; `None` when the expression never matches again.
    fn wait(&self) -> Option<Duration> {
        match self {
            Clock::Every(d) => Some(*d),
            Clock::Cron(c) => {
                let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
                let next = c.find_next_occurrence(&now, false).ok()?;
                let left = next.timestamp().duration_since(now.timestamp());
                Some(Duration::try_from(left).unwrap_or_default())
            }
        }
    }
}

/// Runs every schedule until `shutdown`; `effects` are what their calls may reach.
pub(crate) async fn run_all(
    entries: Vec<ScheduleEntry>,
    operator: String,
    effects: Option<Arc<crate::effects::Effects>>,
    shutdown: CancellationToken,
) {
    let loops = entries.into_iter().map(|entry| {
        let (operator, effects, shutdown) = (operator.clone(), effects.clone(), shutdown.clone());
        async move { run_one(entry, &operator, effects, &shutdown).await }
    });
    futures::future::join_all(loops).await;
}

async fn run_one(
    entry: ScheduleEntry,
    operator: &str,
    effects: Option<Arc<crate::effects::Effects>>,
    shutdown: &CancellationToken,
) {
    let Some(clock) = Clock::of(&entry) else {
        return;
    };
    let name = &entry.spec.name;
    loop {
        let Some(wait) = clock.wait() else {
            tracing::info!(schedule = %name, "the cron expression matches no time to come; the schedule ends");
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.cancelled() => return,
        }
        let mut ctx = ScriptCtx::detached(operator, &format!("schedule/{name}"), None);
        ctx.memo = Some(super::memos().operator());
        ctx.effects = effects.clone();
        let ctx = super::budgeted(&ctx, entry.spec.budget);
        let result = entry
            .script
            .call_args_async(&entry.spec.function, vec![CallArg::Ctx(ctx)])
            .await;
        let label = if result.is_ok() { "success" } else { "error" };
        crate::metrics::schedule_run(name, label);
        if let Err(e) = result {
            tracing::warn!(schedule = %name, error = %e, "schedule run failed; it runs again at its next time");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cron_clock_waits_until_the_next_matching_time() {
        let every_second = Clock::Cron(Box::new(croner::Cron::from_str("* * * * * *").unwrap()));
        let wait = every_second.wait().unwrap();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        let yearly = Clock::Cron(Box::new(croner::Cron::from_str("@yearly").unwrap()));
        assert!(yearly.wait().unwrap() > Duration::from_secs(60));
        let every = Clock::Every(Duration::from_secs(5));
        assert_eq!(every.wait(), Some(Duration::from_secs(5)));
    }
}
