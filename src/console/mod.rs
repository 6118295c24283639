//! `khai run --console ADDR`: a read-only look inside the running operator, as a JSON API
//! ([`api`]), a stream of Server-Sent Events ([`sse`]) and a web page ([`assets`]), served by
//! [`server`] on its own port.
//!
//! Off unless `--console` is given. On a loopback address (and through `kubectl port-forward`)
//! it asks for no credentials; elsewhere every API request needs a bearer token the API server
//! authenticates and authorizes ([`auth`]). The daemon records into it through three functions: [`turn`]
//! wraps each reconcile, [`config_loaded`] and [`reload_failed`] follow the config; and it
//! hands it the [`playground`] of each config version it runs. What they
//! record is bounded ([`history`], [`overview`]) and lives as long as the process. With the
//! console off each of them returns at once.

mod api;
mod assets;
mod auth;
mod history;
mod overview;
mod playground;
mod recent;
mod server;
mod sse;
mod trigger;

pub(crate) use playground::{Play, PlayError, Playground, Source};
pub(crate) use server::{bind, serve};
pub(crate) use trigger::{Trigger, Triggers};

use history::{History, ObjectKey, Turn};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use overview::Overview;
use sse::Change;
use std::collections::BTreeSet;
use std::fmt::Display;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::broadcast;

/// Changes an SSE client may fall behind by before it is told it missed some: what its stream
/// takes in at most every [`sse::BATCH_EVERY`].
const FEED_CAPACITY: usize = 1024;

/// Everything the console serves from.
pub(crate) struct Console {
    history: History,
    overview: Mutex<Overview>,
    client: kube::Client,
    /// Off loopback: who may use the console.
    auth: Option<auth::Auth>,
    /// What runs the playground's requests against the running config, once it runs.
    playground: Mutex<Option<Arc<dyn Playground>>>,
    /// Each change (a turn, a config load or failure), for the SSE clients.
    feed: broadcast::Sender<Change>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("history", &self.history)
            .finish_non_exhaustive()
    }
}

static CONSOLE: OnceLock<Arc<Console>> = OnceLock::new();

impl Console {
    fn new(client: kube::Client, max_bytes: usize, authorize: bool) -> Self {
        Self {
            history: History::new(max_bytes),
            overview: Mutex::new(Overview::default()),
            auth: authorize.then(|| auth::Auth::new(client.clone())),
            client,
            playground: Mutex::new(None),
            feed: broadcast::channel(FEED_CAPACITY).0,
        }
    }

    fn playground(&self) -> Option<Arc<dyn Playground>> {
        crate::sync::lock(&self.playground).clone()
    }

    fn announce(&self, change: Change) {
        // No receiver (no SSE client) is not an error.
        let _ = self.feed.send(change);
    }

    /// A turn of `obj` by `controller` starts: its key and what triggered it (`triggers` as
    /// queued, else read from how its last turn ended).
    fn begin(
        &self,
        controller: &str,
        obj: &DynamicObject,
        triggers: Triggers,
    ) -> (Arc<ObjectKey>, trigger::Named) {
        let key = Arc::new(ObjectKey {
            controller: controller.to_string(),
            namespace: obj.namespace(),
            name: obj.name_any(),
        });
        let triggers = match triggers.is_empty() {
            true => self.history.scheduled(&key),
            false => triggers,
        };
        let reloaded = triggers.contains(Trigger::Start)
            && crate::sync::lock(&self.overview)
                .reloads
                .iter()
                .any(|r| r.result == "reloaded");
        (key, trigger::Named { triggers, reloaded })
    }

    /// The turn [`begin`](Self::begin) started ended as `turn` says: recorded and announced.
    fn end(&self, key: Arc<ObjectKey>, obj: &DynamicObject, turn: Turn) {
        let phase = obj.data["status"]["phase"].as_str();
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let result = turn.result;
        let bytes = self.history.record(Arc::clone(&key), uid, phase, turn);
        crate::metrics::console_history_bytes(bytes);
        self.announce(Change::Turn { key, result });
    }
}

/// Turns recording on; called once, before the daemon starts, by [`bind`]. With `authorize`
/// (off loopback), API requests need a token the API server authorizes.
fn enable(client: kube::Client, authorize: bool) -> Arc<Console> {
    Arc::clone(
        CONSOLE.get_or_init(|| Arc::new(Console::new(client, history::MAX_BYTES, authorize))),
    )
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// Runs one reconcile of `obj` by `controller` and, with the console on, records how it ended:
/// its time, what triggered it (`triggers`, as queued; none when kube-runtime scheduled it), its
/// result, error (in the words khai reports on the object) and what it wrote.
pub(crate) async fn turn<F, E>(
    controller: &str,
    obj: Arc<DynamicObject>,
    triggers: Triggers,
    reconcile: F,
) -> F::Output
where
    F: Future<Output = Result<Action, E>>,
    E: Display,
{
    let Some(console) = CONSOLE.get() else {
        return reconcile.await;
    };
    let (key, triggers) = console.begin(controller, &obj, triggers);
    let started = std::time::Instant::now();
    let (result, writes) = crate::metrics::tallied(reconcile).await;
    let (label, error) = match &result {
        Ok(action) if *action == Action::await_change() => ("success", None),
        Ok(_) => ("requeue", None),
        Err(e) => ("error", Some(e.to_string())),
    };
    let turn = Turn {
        at_ms: now_ms(),
        took_ms: started.elapsed().as_secs_f64() * 1000.0,
        triggers,
        result: label,
        error,
        writes,
    };
    console.end(key, &obj, turn);
    result
}

/// The playground runs against `p` from now on: the controllers of the config running now.
pub(crate) fn playground(p: Arc<dyn Playground>) {
    if let Some(console) = CONSOLE.get() {
        *crate::sync::lock(&console.playground) = Some(p);
    }
}

/// Whether the console is on, so the daemon prepares nothing for it otherwise.
pub(crate) fn enabled() -> bool {
    CONSOLE.get().is_some()
}

/// The config `op` (hashed as `hash`) is running now, at start or after a reload.
pub(crate) fn config_loaded(op: &crate::operator::Operator, hash: u64) {
    let Some(console) = CONSOLE.get() else {
        return;
    };
    let names: BTreeSet<String> = {
        let mut overview = crate::sync::lock(&console.overview);
        overview.loaded(op, hash, now_ms());
        overview
            .controllers
            .iter()
            .map(|c| c.name.clone())
            .collect()
    };
    let bytes = console.history.keep_controllers(&names);
    crate::metrics::console_history_bytes(bytes);
    console.announce(Change::Config { result: "loaded" });
}

/// A new config version failed to load with `error`; the last good one keeps running.
pub(crate) fn reload_failed(error: &str) {
    let Some(console) = CONSOLE.get() else {
        return;
    };
    crate::sync::lock(&console.overview).failed(error, now_ms());
    console.announce(Change::Config { result: "failed" });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test]
    async fn with_the_console_off_a_turn_is_the_reconcile_alone() {
        // No unit test turns the console on: only `khai run --console` does.
        assert!(!enabled());
        let obj = Arc::new(DynamicObject {
            types: None,
            metadata: kube::api::ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            data: serde_json::Value::Null,
        });
        let wrapped = Cell::new(None);
        let result = turn("cache", obj, Trigger::Parent.into(), async {
            wrapped.set(Some(crate::metrics::in_tally()));
            Err::<Action, _>("boom")
        })
        .await;
        assert_eq!(result, Err("boom"));
        assert_eq!(
            wrapped.get(),
            Some(false),
            "the reconcile should run as is, with no tally kept for a console"
        );
        assert!(CONSOLE.get().is_none(), "nothing should be recorded");
    }
}
