//! A subscriber's view of an informer: the objects that changed since it last looked.
//!
//! Each subscriber holds at most one entry per object, the latest version (or the deleted
//! object), however many events arrive before it reads them. A slow subscriber therefore costs
//! memory bounded by the number of objects, never by the number of events, and it always acts
//! on the newest state. Entries come out in the order their objects first changed, each in
//! constant time: a new subscriber is handed the whole cache at once, and taking entries from
//! the front of an ordered map would shift every other entry each time, quadratic in the
//! number of objects on every start.

use kube::ResourceExt;
use kube::api::DynamicObject;
use std::collections::VecDeque;
use std::collections::hash_map::{Entry, HashMap};
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::Notify;

/// One object that changed: its latest version, or the object as it was when deleted.
#[derive(Debug, Clone)]
pub struct Changed {
    pub object: Arc<DynamicObject>,
    pub deleted: bool,
}

/// Namespace and name.
type Name = (Option<String>, String);

#[derive(Default)]
struct Pending {
    changes: Mutex<Queue>,
    notify: Notify,
}

/// The latest change per object, in the order the objects first changed.
#[derive(Default)]
struct Queue {
    order: VecDeque<Name>,
    latest: HashMap<Name, Changed>,
}

impl Queue {
    /// Records `c` for `name`: in place of what was pending for it, or at the back.
    fn put(&mut self, name: Name, c: Changed) {
        match self.latest.entry(name) {
            Entry::Occupied(mut e) => {
                e.insert(c);
            }
            Entry::Vacant(e) => {
                self.order.push_back(e.key().clone());
                e.insert(c);
            }
        }
    }

    /// The change of the object that first changed, if any.
    fn take(&mut self) -> Option<Changed> {
        // Every name in `order` has its entry in `latest`: they are added and removed together.
        let name = self.order.pop_front()?;
        self.latest.remove(&name)
    }

    fn len(&self) -> usize {
        self.latest.len()
    }
}

/// The receiving end, held by one consumer; dropping it unsubscribes.
pub struct Subscription {
    pending: Arc<Pending>,
}

/// The informer's end of one subscription.
pub(super) struct Publisher {
    pending: Weak<Pending>,
}

/// A new subscription and the informer's end of it.
pub(super) fn channel() -> (Publisher, Subscription) {
    let pending = Arc::new(Pending::default());
    (
        Publisher {
            pending: Arc::downgrade(&pending),
        },
        Subscription { pending },
    )
}

impl Publisher {
    /// Records `c`, replacing what was pending for the same object. `false` once the
    /// subscriber is gone.
    pub(super) fn send(&self, c: Changed) -> bool {
        let Some(pending) = self.pending.upgrade() else {
            return false;
        };
        let name = (c.object.namespace(), c.object.name_any());
        crate::sync::lock(&pending.changes).put(name, c);
        pending.notify.notify_one();
        true
    }
}

impl Subscription {
    /// The next change, waiting for one if none is pending.
    pub async fn next(&self) -> Changed {
        loop {
            if let Some(c) = crate::sync::lock(&self.pending.changes).take() {
                return c;
            }
            // A change sent between the check above and this wait leaves a permit behind, so
            // it is not missed.
            self.pending.notify.notified().await;
        }
    }

    /// How many objects have changes waiting.
    pub fn len(&self) -> usize {
        crate::sync::lock(&self.pending.changes).len()
    }

    /// Whether no change is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The changes as a stream that never ends.
    pub(crate) fn into_stream(self) -> impl futures::Stream<Item = Changed> + Send {
        futures::stream::unfold(self, |s| async move {
            let c = s.next().await;
            Some((c, s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, rv: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": name, "namespace": "ns", "resourceVersion": rv },
            }))
            .unwrap(),
        )
    }

    fn changed(name: &str, rv: &str) -> Changed {
        Changed {
            object: obj(name, rv),
            deleted: false,
        }
    }

    /// A slow subscriber's memory is bounded by the objects, not by the events: a channel per
    /// subscriber carrying every event would grow without bound.
    #[tokio::test]
    async fn a_slow_subscriber_holds_one_entry_per_object_the_latest() {
        let (publisher, sub) = channel();
        for rv in 0..1000 {
            publisher.send(changed("a", &rv.to_string()));
            publisher.send(changed("b", &rv.to_string()));
        }
        assert_eq!(sub.len(), 2);
        let first = sub.next().await;
        assert_eq!(
            first.object.name_any(),
            "a",
            "in the order objects first changed"
        );
        assert_eq!(first.object.resource_version().as_deref(), Some("999"));
        publisher.send(Changed {
            object: obj("b", "1000"),
            deleted: true,
        });
        let last = sub.next().await;
        assert!(last.deleted, "a deletion replaces what was pending");
        assert!(sub.is_empty());
    }

    #[tokio::test]
    async fn changes_come_out_in_the_order_their_objects_first_changed() {
        let (publisher, sub) = channel();
        for i in 0..1000 {
            publisher.send(changed(&format!("o{i}"), "1"));
        }
        // A newer version of an object keeps its place.
        publisher.send(changed("o0", "2"));
        publisher.send(changed("o500", "2"));
        for i in 0..1000 {
            let c = sub.next().await;
            assert_eq!(c.object.name_any(), format!("o{i}"));
            let want = if i == 0 || i == 500 { "2" } else { "1" };
            assert_eq!(c.object.resource_version().as_deref(), Some(want));
        }
        assert!(sub.is_empty());
        // Taken and sent again: at the back.
        publisher.send(changed("x", "1"));
        publisher.send(changed("o0", "3"));
        assert_eq!(sub.next().await.object.name_any(), "x");
        assert_eq!(sub.next().await.object.name_any(), "o0");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_subscriber_wakes_on_the_next_change_and_a_dropped_one_unsubscribes() {
        let (publisher, sub) = channel();
        let waiting = tokio::spawn(async move { sub.next().await });
        tokio::task::yield_now().await;
        assert!(publisher.send(changed("a", "1")));
        let got = tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("the subscriber was not woken")
            .unwrap();
        assert_eq!(got.object.name_any(), "a");
        assert!(!publisher.send(changed("a", "2")), "the subscriber is gone");
    }
}
