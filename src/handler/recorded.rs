//! Reading and writing what the handlers of an object have done: its `last-handled` and
//! `progress` annotations, and what khai wrote that the cache may not show yet, so a turn
//! right after a write does not run a handler again.

use super::progress::{self, Progress, Recorded};
use super::{Error, Handlers, Turn};
use crate::object::sent::Annotated;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// How long khai trusts what it wrote over a cache that does not show it yet.
const PENDING_FOR: Duration = Duration::from_secs(300);

impl Handlers {
    /// What the object's annotations say, or what khai wrote when the cache does not show it
    /// yet.
    pub(super) fn recorded(&self, turn: &Turn<'_>) -> Recorded {
        let view = &turn.view;
        let annotations = &view["metadata"]["annotations"];
        let shows = |key: &str, v: &Option<String>| annotations[key].as_str() == v.as_deref();
        let keys = &self.keys;
        let pending = turn
            .objects
            .update_existing(&turn.key, |s| {
                let w = s.sent.annotations.take()?;
                let caught_up =
                    shows(&keys.last_handled, &w.last) && shows(&keys.progress, &w.progress);
                if caught_up || w.at.elapsed() > PENDING_FOR {
                    return None;
                }
                s.sent.annotations = Some(w.clone());
                Some(w)
            })
            .flatten();
        let Some(w) = pending else {
            return progress::read(view, keys);
        };
        let mut view = view.clone();
        let meta = &mut view["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        let set = |m: &mut Value, k: &str, v: &Option<String>| {
            m[k] = v.as_ref().map_or(Value::Null, |t| Value::String(t.clone()));
        };
        set(&mut meta["annotations"], &keys.last_handled, &w.last);
        set(&mut meta["annotations"], &keys.progress, &w.progress);
        progress::read(&view, keys)
    }

    /// Writes `last-handled` (when given) and sets or clears `progress` on the object.
    pub(super) async fn record(
        &self,
        turn: &Turn<'_>,
        last: Option<&Value>,
        progress: Option<&Progress>,
    ) -> Result<(), Error> {
        let patch = progress::patch(&self.keys, last, progress);
        turn.applier.annotate(turn.obj, &turn.kind, &patch).await?;
        let annotations = &patch["metadata"]["annotations"];
        let text = |k: &str| annotations[k].as_str().map(str::to_string);
        let previous = self.recorded(turn);
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
                    turn.objects
                        .read(&turn.key, |s| s?.sent.annotations.as_ref()?.last.clone())
                }),
        };
        let written = Annotated {
            last,
            progress: text(&self.keys.progress),
            at: Instant::now(),
        };
        turn.objects
            .update(&turn.key, |s| s.sent.annotations = Some(Box::new(written)));
        Ok(())
    }
}
