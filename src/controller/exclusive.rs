//! The guard that proves one object is reconciled by one controller at a time.

use crate::object::ObjectKey;
use kube::api::DynamicObject;

/// Proof that one object is reconciled by one controller at a time, as kube-runtime promises
/// and khai's own keying must not undo (a cluster-scoped parent queued under each of its
/// children's namespaces would run concurrently). A second reconcile of an object already in
/// flight is counted in `khai_reconcile_overlaps_total` and logged as an error; tests assert
/// the counter stays at 0. The set holds at most the objects reconciling right now.
pub(super) struct Exclusive {
    key: Option<(String, ObjectKey)>,
}

static IN_FLIGHT: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashSet<(String, ObjectKey)>>,
> = std::sync::LazyLock::new(Default::default);

impl Exclusive {
    pub(super) fn enter(controller: &str, obj: &DynamicObject) -> Self {
        let key = (controller.to_string(), ObjectKey::of(obj));
        let mut set = crate::sync::lock(&IN_FLIGHT);
        if set.insert(key.clone()) {
            Self { key: Some(key) }
        } else {
            tracing::error!("two reconciles of this object at once; this is a bug in khai");
            crate::metrics::reconcile_overlap(controller);
            Self { key: None }
        }
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            crate::sync::lock(&IN_FLIGHT).remove(&key);
        }
    }
}
