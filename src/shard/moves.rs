//! No decisions about membership: what the sharder writes to one object, and how. A parent is
//! assigned, moved or asked to drain by a merge patch of its labels guarded by the
//! resourceVersion the sharder read, so a patch never undoes a change it did not see; a child
//! is relabelled the same way, before its parent (docs/scaling.md, "Moves without overlap").

use super::ring::Ring;
use futures::StreamExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// What the sharder does to one parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Move {
    /// Label it for `to` (it had no shard, or a dead one: `from`).
    Assign { from: Option<String>, to: String },
    /// Ask its live shard to let go of it.
    Drain,
}

impl Move {
    /// The `sort` of `khai_shard_moves_total`.
    fn sort(&self) -> &'static str {
        match self {
            Move::Assign { from: None, .. } => "assign",
            Move::Assign { .. } => "move",
            Move::Drain => "drain",
        }
    }
}

/// What to do with a parent labelled `current` (and `draining`) on `ring`, whose live shards
/// are the ring's; `None` when it is where it belongs, or waits for its shard to let go.
pub(crate) fn decide(
    ring: &Ring,
    key: &str,
    current: Option<&str>,
    draining: bool,
    may_move: bool,
) -> Option<Move> {
    let to = ring.owner(key)?;
    match current {
        None => Some(Move::Assign {
            from: None,
            to: to.to_string(),
        }),
        Some(c) if c == to => None,
        Some(c) if !ring.shards().iter().any(|s| s == c) => may_move.then(|| Move::Assign {
            from: Some(c.to_string()),
            to: to.to_string(),
        }),
        Some(_) if draining || !may_move => None,
        Some(_) => Some(Move::Drain),
    }
}

/// One label patch the sharder sends.
pub(super) struct Relabel {
    pub api: kube::Api<DynamicObject>,
    pub name: String,
    /// The resourceVersion the sharder read: the patch fails (409) if the object changed since.
    pub version: Option<String>,
    pub labels: Value,
    /// The `sort` counted in `khai_shard_moves_total` once written.
    pub sort: &'static str,
}

impl Relabel {
    /// The patch carrying `m` out on a parent, with the sharder's `label` and `drain` keys.
    pub(super) fn parent(
        api: kube::Api<DynamicObject>,
        name: String,
        version: Option<String>,
        m: &Move,
        label: &str,
        drain: &str,
    ) -> Self {
        let labels = match m {
            Move::Assign { to, .. } => json!({ label: to, drain: null }),
            Move::Drain => json!({ drain: "true" }),
        };
        Self {
            api,
            name,
            version,
            labels,
            sort: m.sort(),
        }
    }

    /// The patch giving a child its parent's new shard `to`.
    pub(super) fn child(
        api: kube::Api<DynamicObject>,
        name: String,
        version: Option<String>,
        label: &str,
        to: &str,
    ) -> Self {
        Self {
            api,
            name,
            version,
            labels: json!({ label: to }),
            sort: "child",
        }
    }
}

/// Label patches the sharder has in flight at once: moving a dead shard's thousand parents
/// one at a time would take seconds.
pub(super) const PATCHES_AT_ONCE: usize = 16;

/// Sends `patches`, [`PATCHES_AT_ONCE`] at a time; how many were written, and how many were
/// not because the object changed (409) or went (404) since it was read: those are left for
/// the next pass to decide again.
pub(super) async fn send(patches: Vec<Relabel>) -> Result<(usize, usize), kube::Error> {
    let mut sent = futures::stream::iter(patches)
        .map(|r| async move {
            let patch = json!({ "metadata": { "resourceVersion": r.version, "labels": r.labels } });
            // The answer is the object's metadata only: the sharder reads nothing else, and the
            // API server need not encode the whole object for it.
            let sent = r
                .api
                .patch_metadata(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop);
            (r.name, r.sort, sent)
        })
        .buffer_unordered(PATCHES_AT_ONCE);
    let (mut written, mut stale) = (0, 0);
    while let Some((name, sort, sent)) = sent.next().await {
        match sent {
            Ok(_) => {
                written += 1;
                crate::metrics::shard_moved(sort);
                tracing::debug!(object = %name, sort, "sharder relabelled an object");
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => stale += 1,
            Err(e) => return Err(e),
        }
    }
    Ok((written, stale))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assign(from: Option<&str>, to: &str) -> Option<Move> {
        Some(Move::Assign {
            from: from.map(str::to_string),
            to: to.into(),
        })
    }

    #[test]
    fn unassigned_objects_are_assigned_dead_shards_relabelled_live_ones_drained() {
        let ring = Ring::new(["a"]);
        assert_eq!(decide(&ring, "k", None, false, false), assign(None, "a"));
        assert_eq!(decide(&ring, "k", Some("a"), false, true), None);
        assert_eq!(
            decide(&ring, "k", Some("gone"), false, true),
            assign(Some("gone"), "a")
        );
        // Freshly holding the sharder Lease: nothing moves yet, unassigned objects are labelled.
        assert_eq!(decide(&ring, "k", Some("gone"), false, false), None);
        let two = Ring::new(["a", "b"]);
        let key = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| two.owner(k) == Some("b"))
            .unwrap();
        assert_eq!(
            decide(&two, &key, Some("a"), false, true),
            Some(Move::Drain)
        );
        assert_eq!(
            decide(&two, &key, Some("a"), true, true),
            None,
            "waits for the ack"
        );
        assert_eq!(decide(&Ring::new([]), "k", None, false, true), None);
    }
}
