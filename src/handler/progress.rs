//! What khai records on an object about handling its changes, read back after a restart.
//!
//! Two annotations, under `<operator>.khai.dev/`:
//!
//! - `last-handled`: the object's essence (see [`super::change::essence`]) when its handlers
//!   last finished with a change. It is the `old` side of the next change, and it is how a
//!   restarted khai knows what it has handled already. An essence too large for an annotation
//!   is recorded by its digest alone; the next change then has no `old`.
//! - `progress`: only while a change is not finished: per handler, its attempts, when the first
//!   began, whether it is done, and its last failure. It is written only when a handler must be
//!   tried again later, so a change whose handlers all succeed at once costs one write
//!   (`last-handled`), and an object nobody changed costs none.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Largest essence recorded whole (annotations share 256 KiB per object).
const MAX_RECORDED: usize = 64 * 1024;

/// The annotation keys of one operator.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `<operator>.khai.dev/`: every annotation khai keeps for handlers starts with it.
    pub prefix: String,
    pub last_handled: String,
    pub progress: String,
}

impl Keys {
    pub(crate) fn new(operator: &str) -> Self {
        let prefix = format!("{operator}.khai.dev/");
        Self {
            last_handled: format!("{prefix}last-handled"),
            progress: format!("{prefix}progress"),
            prefix,
        }
    }
}

/// The handlers' progress on one change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// The digest of the essence being handled: progress on another change does not count.
    #[serde(rename = "for")]
    pub change: String,
    /// By handler id.
    pub handlers: BTreeMap<String, Attempt>,
}

/// One handler's attempts on one change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Attempt {
    /// Calls made so far.
    pub attempts: u32,
    /// When the first call began (RFC 3339).
    pub started: String,
    /// Succeeded, or given up on: either way not called again for this change.
    #[serde(default)]
    pub done: bool,
    /// Why it failed last (or why khai gave up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Not before this time (RFC 3339) is it called again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// What an object's annotations say.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Recorded {
    /// Whether `last-handled` is there at all (a handled object), and what it holds: the
    /// essence, or `None` when only its digest was recorded.
    pub handled: bool,
    pub last: Option<Value>,
    pub last_digest: Option<String>,
    pub progress: Option<Progress>,
}

/// Reads khai's annotations from `obj`. One that is not khai's JSON (edited by hand) counts as
/// absent, so the handlers it recorded run again, and says so with a warning naming it.
pub(crate) fn read(obj: &Value, keys: &Keys) -> Recorded {
    let annotation = |k: &str| obj["metadata"]["annotations"][k].as_str();
    let mut out = Recorded::default();
    if let Some(text) = annotation(&keys.last_handled) {
        out.handled = true;
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) if m.len() == 1 && m.contains_key(DIGEST_KEY) => {
                out.last_digest = m[DIGEST_KEY].as_str().map(str::to_string);
            }
            Ok(v) => {
                out.last_digest = Some(digest(&v));
                out.last = Some(v);
            }
            Err(e) => unreadable(&keys.last_handled, &e),
        }
    }
    out.progress = annotation(&keys.progress).and_then(|t| {
        serde_json::from_str(t)
            .inspect_err(|e| unreadable(&keys.progress, e))
            .ok()
    });
    out
}

fn unreadable(annotation: &str, e: &serde_json::Error) {
    tracing::warn!(%annotation, error = %e, "khai's handler annotation is not what khai wrote; reading it as absent, so the handlers it recorded run again");
}

/// Key of a `last-handled` that records a digest only.
const DIGEST_KEY: &str = "digest";

/// A digest of a value: XXH3-64 of its JSON text.
pub(crate) fn digest(v: &Value) -> String {
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(v.to_string().as_bytes())
    )
}

/// The merge patch that records `last` as handled (when given) and sets or clears `progress`.
pub(crate) fn patch(keys: &Keys, last: Option<&Value>, progress: Option<&Progress>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(last) = last {
        let text = last.to_string();
        let recorded = if text.len() > MAX_RECORDED {
            json!({ DIGEST_KEY: digest(last) }).to_string()
        } else {
            text
        };
        annotations.insert(keys.last_handled.clone(), Value::String(recorded));
    }
    let progress = progress.map_or(Value::Null, |p| Value::String(json!(p).to_string()));
    annotations.insert(keys.progress.clone(), progress);
    json!({ "metadata": { "annotations": annotations } })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-edited annotation is read as absent, and khai says which one, rather than
    /// quietly starting the handlers over.
    #[tokio::test]
    async fn an_annotation_that_is_not_khais_json_reads_as_absent_and_says_so() {
        let keys = Keys::new("op");
        let mut annotations = serde_json::Map::new();
        annotations.insert(keys.last_handled.clone(), json!("{"));
        annotations.insert(keys.progress.clone(), json!("not json"));
        let obj = json!({ "metadata": { "annotations": annotations } });
        let (rec, text) = crate::test_logs::capture(async { read(&obj, &keys) }).await;
        assert!(rec.handled && rec.last.is_none() && rec.progress.is_none());
        assert!(text.contains(&keys.last_handled), "{text}");
        assert!(text.contains(&keys.progress), "{text}");
    }

    #[test]
    fn what_is_written_is_read_back() {
        let keys = Keys::new("ops");
        let last = json!({ "spec": { "size": 2 } });
        let progress = Progress {
            change: "c1".into(),
            handlers: BTreeMap::from([(
                "on_update".to_string(),
                Attempt {
                    attempts: 2,
                    started: "2026-01-01T00:00:00Z".into(),
                    message: Some("boom".into()),
                    ..Attempt::default()
                },
            )]),
        };
        let p = patch(&keys, Some(&last), Some(&progress));
        let obj = json!({ "metadata": { "annotations": {
            "ops.khai.dev/last-handled": p["metadata"]["annotations"]["ops.khai.dev/last-handled"],
            "ops.khai.dev/progress": p["metadata"]["annotations"]["ops.khai.dev/progress"],
        } } });
        let r = read(&obj, &keys);
        assert!(r.handled);
        assert_eq!(r.last.as_ref(), Some(&last));
        assert_eq!(r.last_digest, Some(digest(&last)));
        assert_eq!(r.progress, Some(progress));
        // Done: progress is removed in the same patch that records the change.
        let done = patch(&keys, Some(&last), None);
        assert_eq!(
            done["metadata"]["annotations"]["ops.khai.dev/progress"],
            Value::Null
        );
    }

    #[test]
    fn an_essence_too_large_for_an_annotation_is_recorded_by_digest() {
        let keys = Keys::new("ops");
        let big = json!({ "spec": { "blob": "x".repeat(MAX_RECORDED) } });
        let p = patch(&keys, Some(&big), None);
        let text = p["metadata"]["annotations"]["ops.khai.dev/last-handled"]
            .as_str()
            .unwrap();
        assert!(text.len() < 100, "{text}");
        let obj = json!({ "metadata": { "annotations": { "ops.khai.dev/last-handled": text } } });
        let r = read(&obj, &keys);
        assert!(r.handled && r.last.is_none());
        assert_eq!(r.last_digest, Some(digest(&big)));
    }
}
