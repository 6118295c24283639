//! Reading and writing what the handlers of an object have done: its `last-handled` and
//! `progress` annotations, and what khai wrote that the cache may not show yet, so a turn
//! right after a write does not run a handler again.

use super::progress::{self, Progress, Recorded};
use super::{Error, Handlers, Turn};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;

/// Annotations khai wrote, kept until the cache shows them.
#[derive(Debug, Clone)]
pub(super) struct Written {
    last: Option<String>,
    progress: Option<String>,
    at: std::time::Instant,
}

/// How long khai trusts what it wrote over a cache that does not show it yet.
const PENDING_FOR: Duration = Duration::from_secs(300);

impl Handlers {
    /// What the object's annotations say, or what khai wrote when the cache does not show it
    /// yet.
    pub(super) fn recorded(&self, uid: &str, view: &Value) -> Recorded {
        let mut pending = crate::sync::lock(&self.pending);
        let annotations = &view["metadata"]["annotations"];
        let Some(w) = pending.get(uid).cloned() else {
            return progress::read(view, &self.keys);
        };
        let shows = |key: &str, v: &Option<String>| annotations[key].as_str() == v.as_deref();
        let caught_up =
            shows(&self.keys.last_handled, &w.last) && shows(&self.keys.progress, &w.progress);
        if caught_up || w.at.elapsed() > PENDING_FOR {
            pending.remove(uid);
            return progress::read(view, &self.keys);
        }
        let mut view = view.clone();
        let meta = &mut view["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        let set = |m: &mut Value, k: &str, v: &Option<String>| {
            m[k] = v.as_ref().map_or(Value::Null, |t| Value::String(t.clone()));
        };
        set(&mut meta["annotations"], &self.keys.last_handled, &w.last);
        set(&mut meta["annotations"], &self.keys.progress, &w.progress);
        progress::read(&view, &self.keys)
    }

    /// Writes `last-handled` (when given) and sets or clears `progress` on the object.
    pub(super) async fn record(
        &self,
        turn: &Turn<'_>,
        uid: &str,
        last: Option<&Value>,
        progress: Option<&Progress>,
    ) -> Result<(), Error> {
        let patch = progress::patch(&self.keys, last, progress);
        turn.api
            .patch(
                &turn.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| Error::Record(e.into()))?;
        let annotations = &patch["metadata"]["annotations"];
        let text = |k: &str| annotations[k].as_str().map(str::to_string);
        let previous = self.recorded(uid, &turn.view);
        let last = match last {
            Some(_) => text(&self.keys.last_handled),
            None => previous
                .handled
                .then(|| {
                    turn.view["metadata"]["annotations"][&self.keys.last_handled]
                        .as_str()
                        .map(str::to_string)
                })
                .flatten()
                .or_else(|| {
                    crate::sync::lock(&self.pending)
                        .get(uid)
                        .and_then(|w| w.last.clone())
                }),
        };
        crate::sync::lock(&self.pending).insert(
            uid.to_string(),
            Written {
                last,
                progress: text(&self.keys.progress),
                at: std::time::Instant::now(),
            },
        );
        Ok(())
    }
}
