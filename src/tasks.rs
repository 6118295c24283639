//! The background tasks of a run, owned: each is tracked, runs in a span named for it, and its
//! failure (an error it returns or a panic) is logged with that name, so no task runs detached
//! and none dies silently. At the end of a run [`Tasks::stop`] waits for them (within a grace
//! period) and names how many did not finish.
//!
//! Tasks whose failure must stop khai (the webhook server) are supervised by whoever spawned
//! them through the returned handle; the log line here comes in addition.

use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// The tasks of one run.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
}

/// What a task ends with: nothing, or a result whose error is worth logging.
pub(crate) trait Outcome {
    /// The failure to report, if the task failed.
    fn failure(&self) -> Option<String>;
}

impl Outcome for () {
    fn failure(&self) -> Option<String> {
        None
    }
}

impl<E: std::fmt::Display> Outcome for Result<(), E> {
    fn failure(&self) -> Option<String> {
        self.as_ref().err().map(ToString::to_string)
    }
}

impl Tasks {
    pub(crate) fn new() -> Self {
        Tasks::default()
    }

    /// Spawns `task` as `name`: tracked, in a span `task{name}`, its failure or panic logged at
    /// `error`. The handle yields the task's own output (a panic resumes as the handle's
    /// `JoinError`), for tasks whose failure the caller acts on.
    pub(crate) fn spawn<F>(&self, name: &'static str, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Outcome + Send + 'static,
    {
        let span = tracing::info_span!("task", task = name);
        self.tracker.spawn(
            async move {
                match AssertUnwindSafe(task).catch_unwind().await {
                    Ok(out) => {
                        if let Some(e) = out.failure() {
                            tracing::error!(error = %e, "task failed");
                        }
                        out
                    }
                    Err(panic) => {
                        tracing::error!(panic = %panic_message(&*panic), "task panicked");
                        std::panic::resume_unwind(panic)
                    }
                }
            }
            .instrument(span),
        )
    }

    /// Takes no more tasks and waits up to `grace` for the running ones to end; returns how
    /// many were still running (and logs it when any were).
    pub(crate) async fn stop(&self, grace: Duration) -> usize {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let left = self.tracker.len();
            tracing::warn!(
                tasks = left,
                ?grace,
                "background tasks still running at exit"
            );
            return left;
        }
        0
    }
}

/// The message a panic carried, when it is text.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_or_panicking_task_is_logged_with_its_name() {
        let tasks = Tasks::new();
        let ((), text) = crate::test_logs::capture(async {
            let failed = tasks.spawn("reload", async { Err::<(), _>("config unreadable") });
            assert_eq!(failed.await.unwrap(), Err("config unreadable"));
            let panicked = tasks.spawn("metrics", async { panic!("boom") as () });
            assert!(panicked.await.unwrap_err().is_panic());
        })
        .await;
        assert!(
            text.contains("task{task=\"reload\"}") && text.contains("config unreadable"),
            "{text}"
        );
        assert!(
            text.contains("task{task=\"metrics\"}") && text.contains("boom"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_tasks_and_counts_those_past_the_grace() {
        let tasks = Tasks::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn("quick", async move {
            let _ = rx.await;
        });
        tasks.spawn("stuck", futures::future::pending::<()>());
        drop(tx);
        assert_eq!(tasks.stop(Duration::from_secs(1)).await, 1);
    }
}
