//! The config's event handlers, timers, daemons and indexes: Kopf's handler model, declared.
//!
//! `[[handler]]` runs a function when an object is created, updated (or one field of it
//! changes), deleted, or first seen after khai starts, and for every raw watch event. `[[timer]]`
//! runs one every interval for each object, `[[daemon]]` keeps a per-object loop with state, and
//! `[[index]]` keeps a lookup table scripts read through `ctx.index`. They coexist with the
//! level-triggered `[[controller]]` of the same kind; the order and guarantees are in
//! `docs/handlers.md`.

use super::duration::Duration;
use super::kind::KindRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a `[[handler]]` reacts to.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum On {
    /// The object appeared (and khai had not handled it before).
    Create,
    /// The object changed (anything but its status and khai's own bookkeeping).
    Update,
    /// The object is being deleted.
    Delete,
    /// The object existed before khai started: first sight after a start.
    Resume,
    /// One field changed, or appeared on creation (`field = "spec.size"`).
    Field,
    /// Every watch event, as it comes: no retries, no bookkeeping (Kopf's spies).
    Event,
}

impl On {
    /// How authors write it.
    pub fn name(self) -> &'static str {
        match self {
            On::Create => "create",
            On::Update => "update",
            On::Delete => "delete",
            On::Resume => "resume",
            On::Field => "field",
            On::Event => "event",
        }
    }
}

/// A label or annotation condition: an exact value, or `true` (present) / `false` (absent).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Presence {
    Present(bool),
    Value(String),
}

impl Presence {
    /// Whether `value` (the object's, `None` when it has no such key) satisfies this.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self {
            Presence::Present(true) => value.is_some(),
            Presence::Present(false) => value.is_none(),
            Presence::Value(v) => value == Some(v.as_str()),
        }
    }
}

/// Filters shared by handlers, timers and daemons; an object must pass all of them.
#[derive(Debug, Clone, Copy)]
pub struct Filters<'a> {
    /// Labels by value, or present (`true`) / absent (`false`).
    pub labels: &'a BTreeMap<String, Presence>,
    /// Annotations by value, or present / absent.
    pub annotations: &'a BTreeMap<String, Presence>,
    /// A script function `when(obj, ctx)` that must return true.
    pub when: Option<&'a str>,
}

/// The filter keys of an entry, the same in `[[handler]]`, `[[timer]]` and `[[daemon]]`.
macro_rules! filters {
    ($t:ty) => {
        impl $t {
            /// Its filters.
            pub fn filters(&self) -> Filters<'_> {
                Filters {
                    labels: &self.labels,
                    annotations: &self.annotations,
                    when: self.when.as_deref(),
                }
            }
        }
    };
}

/// `[[handler]]`: a function run on a change to an object.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Handler {
    /// The kind, written as in `[[controller]] for`.
    #[serde(rename = "for")]
    pub(crate) for_kind: KindRef,
    pub on: On,
    /// The Rhai script, relative to the config file.
    pub script: PathBuf,
    /// The function to call: `fn name(obj, ctx, change)`. Defaults to `on_<on>`.
    pub function: Option<String>,
    /// What khai records this handler's progress under; defaults to the function's name.
    pub id: Option<String>,
    /// For `on = "field"`: the dotted path of the field, as `spec.size`.
    pub field: Option<String>,
    /// For `on = "field"`: run only when the field's new value is this.
    pub value: Option<serde_json::Value>,
    /// For `on = "field"` or `"update"` with `field`: run only when the old value was this.
    pub old: Option<serde_json::Value>,
    /// For `on = "field"` or `"update"` with `field`: run only when the new value is this.
    pub new: Option<serde_json::Value>,
    /// Labels by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub labels: BTreeMap<String, Presence>,
    /// Annotations by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub annotations: BTreeMap<String, Presence>,
    /// A script function `when(obj, ctx)` that must return true.
    pub when: Option<String>,
    /// Attempts after the first failure before khai gives up on this change; unlimited when
    /// left out.
    pub retries: Option<u32>,
    /// Give up once this long has passed since the first attempt for this change.
    pub timeout: Option<Duration>,
    /// Wait between attempts after a failure (Kopf's default: 60 s).
    #[serde(default = "default_handler_backoff")]
    pub backoff: Duration,
    /// What one call may do beyond computing; defaults to its controller's `budget`.
    pub budget: Option<crate::config::budget::Budget>,
    /// For `on = "delete"`: run on the watch's delete event, best effort, with no finalizer
    /// holding the object back.
    #[serde(default)]
    pub optional: bool,
}

filters!(Handler);
filters!(Timer);
filters!(Daemon);

fn default_handler_backoff() -> Duration {
    Duration::from_secs(60)
}

impl Handler {
    /// The function khai calls.
    pub fn function(&self) -> String {
        self.function
            .clone()
            .unwrap_or_else(|| format!("on_{}", self.on.name()))
    }

    /// What its progress is recorded under.
    pub fn id(&self) -> String {
        self.id.clone().unwrap_or_else(|| self.function())
    }
}

/// `[[timer]]`: a function run every interval for each object.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Timer {
    #[serde(rename = "for")]
    pub(crate) for_kind: KindRef,
    pub script: PathBuf,
    /// `fn name(obj, ctx)`; it may return `#{ status, events }`.
    pub function: String,
    pub interval: Duration,
    /// The first run waits this long after the object is first seen.
    pub initial_delay: Option<Duration>,
    /// Run only once the object has not changed for this long.
    pub idle: Option<Duration>,
    /// What one call may do beyond computing; defaults to its controller's `budget`.
    pub budget: Option<crate::config::budget::Budget>,
    /// A fixed schedule (every `interval` from the first run) instead of `interval` after the
    /// previous run ended.
    #[serde(default)]
    pub sharp: bool,
    /// Labels by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub labels: BTreeMap<String, Presence>,
    /// Annotations by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub annotations: BTreeMap<String, Presence>,
    /// A script function `when(obj, ctx)` that must return true.
    pub when: Option<String>,
}

/// `[[daemon]]`: a per-object loop with state.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Daemon {
    #[serde(rename = "for")]
    pub(crate) for_kind: KindRef,
    pub script: PathBuf,
    /// `fn tick(obj, ctx, state)`, called every `interval`; returns `#{ state, status, events }`.
    pub tick: String,
    /// `fn stop(obj, ctx, state)`, called when the object goes, stops matching, or khai stops.
    pub stop: Option<String>,
    pub interval: Duration,
    /// The first tick waits this long after the daemon starts.
    pub initial_delay: Option<Duration>,
    /// What one call may do beyond computing; defaults to its controller's `budget`.
    pub budget: Option<crate::config::budget::Budget>,
    /// How long `stop` may take.
    #[serde(default = "default_grace")]
    pub(crate) grace: Duration,
    /// Wait before the next tick after a failed one; the `interval` when left out.
    pub backoff: Option<Duration>,
    /// Failed ticks in a row after which khai gives up on the daemon for the object (until it
    /// stops matching and matches again, or khai restarts); unlimited when left out.
    pub retries: Option<u32>,
    /// Labels by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub labels: BTreeMap<String, Presence>,
    /// Annotations by value, or present (`true`) / absent (`false`).
    #[serde(default)]
    pub annotations: BTreeMap<String, Presence>,
    /// A script function `when(obj, ctx)` that must return true.
    pub when: Option<String>,
}

fn default_grace() -> Duration {
    Duration::from_secs(5)
}

/// `[[index]]`: a lookup table over every object of a kind, read as `ctx.index(name, key)`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub name: String,
    #[serde(rename = "for")]
    pub(crate) for_kind: KindRef,
    pub script: PathBuf,
    /// `fn name(obj)`: a key, an array of keys (the value is the object), or a map of keys to
    /// values; `()` leaves the object out.
    pub function: String,
}

/// `[[schedule]]`: a function run on a clock that belongs to no object (a cron expression or an
/// interval), on the leader only.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// What logs and metrics call it; unique.
    pub name: String,
    pub script: PathBuf,
    /// `fn name(ctx)`.
    pub function: String,
    /// A cron expression: five fields (minute granularity) or six (seconds first), or an alias
    /// such as `@hourly`; in UTC.
    pub cron: Option<String>,
    /// Instead of `cron`: run every this long, counted from the end of the previous run.
    pub interval: Option<Duration>,
    /// What one call may do beyond computing; the default budget when left out.
    pub budget: Option<crate::config::budget::Budget>,
}

/// `[operator] startup` and `cleanup`: a function run once when khai starts or stops.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    pub script: PathBuf,
    /// `fn name(ctx)`.
    pub function: String,
    /// `startup`: wait before the next attempt after a failure (Kopf's default: 60 s).
    #[serde(default = "default_handler_backoff")]
    pub backoff: Duration,
    /// `startup`: attempts after the first failure before khai gives up on it and carries on;
    /// unlimited when left out.
    pub retries: Option<u32>,
}
