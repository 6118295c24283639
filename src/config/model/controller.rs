//! `[[controller]]`: one reconcile loop: the kind it is for, what it owns and watches, and its
//! concurrency and backoff.

use crate::config::duration::Duration;
use crate::config::kind::KindRef;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[[controller]]`: one reconcile loop.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    /// Name used in logs and metrics; defaults to the lower-cased kind.
    pub name: Option<String>,
    /// The reconciled kind: a CRD kind of this file, `group/version/Kind`, `v1/Kind` or `Kind.group`.
    #[serde(rename = "for")]
    pub(crate) for_kind: KindRef,
    /// Kinds of children this controller creates; their changes re-trigger the owner.
    #[serde(default)]
    pub owns: Vec<KindRef>,
    /// The Rhai script, relative to the config file.
    pub script: PathBuf,
    /// Name of the reconcile function in the script.
    #[serde(default = "default_reconcile")]
    pub reconcile: String,
    /// Related kinds whose changes re-trigger parents, mapped by a label or a script function.
    #[serde(default)]
    pub watches: Vec<Watch>,
    /// Only reconcile objects matching this label selector (`app=web,tier!=db`); applied to the
    /// list/watch itself, so other objects are never sent to khai.
    pub selector: Option<String>,
    /// Only reconcile objects matching this field selector (`metadata.name=x`); also server-side.
    pub field_selector: Option<String>,
    /// Only reconcile objects carrying every one of these annotations.
    #[serde(default)]
    pub annotations: Vec<String>,
    /// Name of a script function `when(obj)` returning true for objects to reconcile.
    pub when: Option<String>,
    /// How many objects may reconcile at once (never the same object twice); 0 is unbounded.
    #[serde(default = "default_concurrency")]
    pub concurrency: u16,
    /// Reconcile every object again this often even without changes (`"10m"`); off by default.
    pub resync: Option<Duration>,
    /// Per-object retry backoff after failures.
    #[serde(default)]
    pub backoff: BackoffSettings,
    /// What one call of its scripts may do beyond computing: `k8s::…` and `http::…` calls and
    /// wall-clock time, I/O included.
    #[serde(default)]
    pub budget: crate::config::budget::Budget,
    /// Also reconcile on changes to the object's status alone (off: spec, labels, annotations,
    /// finalizers and deletion trigger reconciles, the controller's own status writes do not).
    #[serde(default)]
    pub(crate) reconcile_on_status: bool,
    /// Allow children that cannot carry an ownerReference to their parent (a cluster-scoped
    /// child of a namespaced parent, a child in another namespace): khai tracks them by its
    /// owner label, prunes them and deletes them when the parent goes, holding the parent with
    /// its finalizer until it has.
    #[serde(default)]
    pub unowned_children: bool,
    /// Who deletes the children when the parent is deleted.
    #[serde(default)]
    pub delete_children: DeleteChildren,
}

/// `delete_children`: who deletes a parent's children when the parent is deleted.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum DeleteChildren {
    /// Kubernetes' garbage collector, through the children's ownerReferences (khai deletes the
    /// unowned children itself, all at once).
    #[default]
    GarbageCollector,
    /// khai, in reverse order of the plan, each child gone before the one before it is deleted;
    /// the parent's finalizer goes last.
    Ordered,
}

fn default_reconcile() -> String {
    "reconcile".into()
}
/// Enough that a burst of new objects is limited by the API server, not by khai (at 4, khai
/// fell seconds behind 1,000 creates in `scripts/bench`); bounded, unlike kube-runtime's
/// default, so a resync or a reload of thousands of objects cannot open thousands of
/// connections to the API server at once.
fn default_concurrency() -> u16 {
    64
}

/// `[[controller.watches]]`: a related kind and how its objects name their parents.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(try_from = "WatchEntry", into = "WatchEntry")]
pub struct Watch {
    pub kind: KindRef,
    pub parents: Parents,
    /// `shared = true`: cached in full on every shard (`khai run --shards`), never narrowed to
    /// the shard's own objects.
    pub shared: bool,
}

impl Watch {
    /// Whether a shard caches only the objects labelled for it: a `label` names the parent, so
    /// the object's shard is its parent's, and `shared` does not keep it whole. A `map` function
    /// can name any parent, so its kind is cached in full.
    pub fn sharded(&self) -> bool {
        !self.shared && matches!(self.parents, Parents::Label(_))
    }
}

/// How a related object names the parents it re-triggers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parents {
    /// A label on the related object whose value is the parent's name (same namespace).
    Label(String),
    /// A script function `map(obj)` returning a parent name, an array of names, or maps
    /// `#{ name, namespace }`.
    Map(String),
}

/// A `watches` entry as written: exactly one of `label` and `map`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct WatchEntry {
    kind: KindRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shared: bool,
}

impl TryFrom<WatchEntry> for Watch {
    type Error = &'static str;
    fn try_from(w: WatchEntry) -> Result<Self, Self::Error> {
        let parents = match (w.label, w.map) {
            (Some(l), None) => Parents::Label(l),
            (None, Some(m)) => Parents::Map(m),
            _ => {
                return Err(
                    "set exactly one of `label` (names the parent) or `map` (a script function)",
                );
            }
        };
        Ok(Self {
            kind: w.kind,
            parents,
            shared: w.shared,
        })
    }
}

impl From<Watch> for WatchEntry {
    fn from(w: Watch) -> Self {
        let (label, map) = match w.parents {
            Parents::Label(l) => (Some(l), None),
            Parents::Map(m) => (None, Some(m)),
        };
        Self {
            kind: w.kind,
            label,
            map,
            shared: w.shared,
        }
    }
}

/// `backoff = { base = "1s", cap = "5m" }`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackoffSettings {
    #[serde(default = "default_backoff_base")]
    pub base: Duration,
    #[serde(default = "default_backoff_cap")]
    pub cap: Duration,
}

impl Default for BackoffSettings {
    fn default() -> Self {
        Self {
            base: default_backoff_base(),
            cap: default_backoff_cap(),
        }
    }
}
fn default_backoff_base() -> Duration {
    Duration::from_secs(1)
}
fn default_backoff_cap() -> Duration {
    Duration::from_secs(300)
}

impl Controller {
    /// The name used in logs: the explicit one, or the lower-cased kind.
    pub(crate) fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| self.for_kind.kind.to_lowercase())
    }

    /// Whether khai itself deletes children of this controller when their parent goes, and so
    /// holds the parent with its finalizer until it has.
    pub(crate) fn deletes_children(&self) -> bool {
        self.unowned_children || self.delete_children == DeleteChildren::Ordered
    }
}
