//! Turns watch events into reconcile requests, and failures into retry delays.
//!
//! Each function here builds one trigger stream for kube-runtime's `Controller`: the primary
//! objects themselves (minus status-only changes), children mapped to their controller owner,
//! related objects mapped to parents by a label or a script function, and a periodic resync.
//! The controller deduplicates what they yield and never runs one object twice at once. With a
//! batch window (`--reconcile-batch`), each stream holds what it yields and passes it on in batches.

use crate::console::{Trigger, Triggers};
use crate::script::Script;
use crate::sync::lock;
use crate::watch::predicate::Changes;
use crate::watch::{Changed, Kind, Subscription};
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod batch;

pub(crate) use batch::{batched, set_batch_window};

type Ref = ObjectRef<DynamicObject>;

/// Primary objects that changed in a way that matters (see [`Changes`]); every change when
/// `all` is set. Each one passed is requested in `pending`: the first `seeded` changes (the
/// cache the subscription was handed when the controller started) as [`Trigger::Start`], the
/// rest as [`Trigger::Parent`]. `seen` is told of each change, deletions included, so per-object
/// state elsewhere (backoff, writes on their way) can follow the cache.
pub(crate) fn primary(
    sub: Subscription,
    all: bool,
    pending: Pending,
    seen: impl Fn(&Changed) + Send + 'static,
) -> impl Stream<Item = Arc<DynamicObject>> + Send {
    let mut changes = Changes::default();
    let mut seeded = sub.len();
    sub.into_stream().filter_map(move |c| {
        let trigger = match seeded.checked_sub(1) {
            Some(left) => {
                seeded = left;
                Trigger::Start
            }
            None => Trigger::Parent,
        };
        // A deleted object has nothing left to reconcile (one on its way out, with finalizers,
        // was announced by the update that set its deletionTimestamp).
        seen(&c);
        let pass = if c.deleted {
            changes.forget(&c.object);
            false
        } else {
            all || changes.matters(&c.object)
        };
        if pass {
            let (namespace, name) = Request::key(&c.object);
            pending.added(namespace, name, trigger);
        }
        futures::future::ready(pass.then_some(c.object))
    })
}

/// Children mapped to the parent of kind `parent` that controls them, minus the changes `echo`
/// says need no reconcile (the watch events of khai's own writes, `crate::apply::Echoes`).
pub(crate) fn owners(
    sub: Subscription,
    parent: Kind,
    echo: impl Fn(&Changed) -> bool + Send + 'static,
) -> impl Stream<Item = Ref> + Send {
    sub.into_stream().filter_map(move |c| {
        let r = match echo(&c) {
            true => None,
            false => controller_of(&c.object, &parent),
        };
        futures::future::ready(r)
    })
}

/// Maps a child to the parent of kind `parent` that controls it, if any. A namespaced parent
/// is in its child's namespace; a cluster-scoped one in none, whichever namespace the child is in.
/// An unowned child khai marked names its parent, namespace included, in an annotation
/// ([`crate::watch::ownership`]).
pub(crate) fn controller_of(child: &DynamicObject, parent: &Kind) -> Option<Ref> {
    let r = &parent.resource;
    if let Some(p) = crate::watch::ownership::unowned_parent(child) {
        if p.kind != r.kind || p.group != r.group {
            return None;
        }
        return Some(parent_ref(parent, &p.name, p.namespace));
    }
    let owner = child.owner_references().iter().find(|o| {
        o.controller == Some(true)
            && o.kind == r.kind
            && o.api_version.split_once('/').map_or("", |(g, _)| g) == r.group
    })?;
    Some(parent_ref(parent, &owner.name, child.namespace()))
}

/// The reference to the parent `name` of kind `parent`, found from an object in `namespace`.
fn parent_ref(parent: &Kind, name: &str, namespace: Option<String>) -> Ref {
    let r = ObjectRef::new_with(name, parent.resource.clone());
    match namespace.filter(|_| parent.namespaced) {
        Some(ns) => r.within(&ns),
        None => r,
    }
}

/// Related objects mapped to the parent named by their `label` (in the same namespace, for a
/// namespaced parent).
pub(crate) fn by_label(
    sub: Subscription,
    label: String,
    parent: Kind,
) -> impl Stream<Item = Ref> + Send {
    sub.into_stream().filter_map(move |c| {
        let o = c.object;
        let r = o
            .labels()
            .get(&label)
            .map(|name| parent_ref(&parent, name, o.namespace()));
        futures::future::ready(r)
    })
}

/// Related objects mapped to parents by the script function `function(obj)`.
pub(crate) fn by_script(
    sub: Subscription,
    script: Script,
    function: String,
    parent: Kind,
    ctx: impl Fn(&DynamicObject) -> crate::script::ScriptCtx + Send + Sync + 'static,
) -> impl Stream<Item = Ref> + Send {
    let ctx = std::sync::Arc::new(ctx);
    let with_ctx = script.has_function(&function, 2);
    sub.into_stream()
        .then(move |c| {
            let o = c.object;
            let (script, function, parent) = (script.clone(), function.clone(), parent.clone());
            let view = crate::script::object_view(&o);
            let mut args = Vec::with_capacity(2);
            if with_ctx {
                args.push(crate::script::CallArg::Ctx(ctx(&o)));
            }
            async move {
                // An object the script cannot be given maps to no parent, said once per event.
                let view = match view {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(error = %e, object = %o.name_any(), function = %function, "cannot read the watched object to call the watch's map function; it maps to no parent");
                        return Vec::new();
                    }
                };
                args.insert(0, crate::script::CallArg::Json(view));
                match script.call_args_async(&function, args).await {
                    Ok(v) => parent_refs(&v, o.namespace(), &parent),
                    Err(e) => {
                        tracing::warn!(error = %e, object = %o.name_any(), "watch mapping failed");
                        Vec::new()
                    }
                }
            }
        })
        .flat_map(futures::stream::iter)
}

/// Reads a mapping function's answer: a name, an array of names, or maps `#{ name, namespace }`
/// (namespace defaulting to the related object's; ignored for a cluster-scoped parent).
pub(crate) fn parent_refs(v: &Value, default_ns: Option<String>, parent: &Kind) -> Vec<Ref> {
    let one = |v: &Value| -> Option<Ref> {
        let (name, ns) = match v {
            Value::String(n) => (n.as_str(), default_ns.clone()),
            Value::Object(m) => (
                m.get("name")?.as_str()?,
                m.get("namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or(default_ns.clone()),
            ),
            _ => return None,
        };
        Some(parent_ref(parent, name, ns))
    };
    match v {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        other => one(other).into_iter().collect(),
    }
}

/// A tick every `period`, first one after a full period, for `reconcile_all_on`.
pub(crate) fn resync(period: Duration) -> impl Stream<Item = ()> + Send {
    let start = tokio::time::Instant::now() + period;
    futures::stream::unfold(
        tokio::time::interval_at(start, period),
        |mut t| async move {
            t.tick().await;
            Some(((), t))
        },
    )
}

/// The objects of one controller whose reconcile was requested but has not started, for
/// `workqueue_depth` and `workqueue_queue_duration_seconds`.
///
/// kube-runtime's scheduler does not expose its queue, so this watches both of its ends: every
/// request a trigger stream yields is [`added`](Self::added), every reconcile that starts is
/// [`started`](Self::started), and a request for an object that vanished meanwhile is
/// [`dropped`](Self::dropped). Like the scheduler, it merges requests for the same object: the
/// first one starts the clock. Retries and `requeue_after` run without a request and are not
/// counted here (controller-runtime counts them only once their delay is over, too).
#[derive(Clone)]
pub(crate) struct Pending {
    controller: Arc<str>,
    waiting: Arc<Mutex<Waiting>>,
}

/// Since when each object (namespace, name) has waited, and what asked for it.
type Waiting = HashMap<(Option<String>, String), (Instant, Triggers)>;

impl Pending {
    pub(crate) fn new(controller: &str) -> Self {
        Self {
            controller: controller.into(),
            waiting: Arc::default(),
        }
    }

    /// A reconcile of `namespace/name` was requested by `trigger`.
    pub(crate) fn added(&self, namespace: Option<&str>, name: &str, trigger: Trigger) {
        crate::metrics::queue_add(&self.controller, 1);
        self.update(|w| {
            w.entry((namespace.map(str::to_string), name.to_string()))
                .or_insert_with(|| (Instant::now(), Triggers::default()))
                .1
                .add(trigger);
            None
        });
    }

    /// The reconcile of `namespace/name` started; what requested it since the last one started
    /// (none when kube-runtime scheduled it itself: a retry or a requested wake).
    pub(crate) fn started(&self, namespace: Option<&str>, name: &str) -> Triggers {
        let key = (namespace.map(str::to_string), name.to_string());
        let mut triggers = Triggers::default();
        self.update(|w| {
            let (since, t) = w.remove(&key)?;
            triggers = t;
            Some(since.elapsed())
        });
        triggers
    }

    /// The request for `namespace/name` was dropped: the object is gone.
    pub(crate) fn dropped(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.map(str::to_string), name.to_string());
        self.update(|w| {
            w.remove(&key);
            None
        });
    }

    /// How many objects wait.
    #[cfg(test)]
    pub(crate) fn depth(&self) -> usize {
        lock(&self.waiting).len()
    }

    fn update(&self, f: impl FnOnce(&mut Waiting) -> Option<Duration>) {
        let mut w = lock(&self.waiting);
        let waited = f(&mut w);
        crate::metrics::queue_state(&self.controller, w.len(), waited);
    }
}

/// What a trigger stream yields names one object to reconcile.
pub(crate) trait Request {
    fn key(&self) -> (Option<&str>, &str);
}

impl Request for Arc<DynamicObject> {
    fn key(&self) -> (Option<&str>, &str) {
        let m = &self.metadata;
        (
            m.namespace.as_deref(),
            m.name.as_deref().unwrap_or_default(),
        )
    }
}

impl Request for Ref {
    fn key(&self) -> (Option<&str>, &str) {
        (self.namespace.as_deref(), &self.name)
    }
}

/// Exponential backoff per object: `base`, doubling per failure in a row, capped. The failures
/// are counted in each object's record (`crate::object::State`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        Self { base, cap }
    }

    /// How long to wait before the next attempt after `failures` failures in a row (at least 1).
    pub(crate) fn delay(&self, failures: u32) -> Duration {
        self.base
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
            .min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;
    use serde_json::json;

    fn parent() -> Kind {
        Kind {
            resource: kube::core::ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("x.dev", "v1", "App"),
                "apps",
            ),
            namespaced: true,
        }
    }

    fn cluster_parent() -> Kind {
        Kind {
            namespaced: false,
            ..parent()
        }
    }

    #[test]
    fn backoff_doubles_per_failure_and_caps() {
        let b = Backoff::default();
        assert_eq!(b.delay(1), Duration::from_secs(1));
        assert_eq!(b.delay(2), Duration::from_secs(2));
        assert_eq!(b.delay(3), Duration::from_secs(4));
        assert_eq!(b.delay(24), Duration::from_secs(300));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn pending_merges_requests_per_object_until_it_starts_or_vanishes() {
        let p = Pending::new("pending-unit");
        p.added(Some("ns"), "a", Trigger::Parent);
        p.added(Some("ns"), "a", Trigger::Child);
        p.added(Some("ns"), "b", Trigger::Parent);
        p.added(None, "a", Trigger::Resync);
        assert_eq!(p.depth(), 3, "two requests for ns/a are one queued object");
        let mut both = Triggers::from(Trigger::Parent);
        both.add(Trigger::Child);
        assert_eq!(p.started(Some("ns"), "a"), both, "both causes are kept");
        assert_eq!(p.depth(), 2);
        p.dropped(Some("ns"), "b");
        assert!(p.started(Some("other"), "never-requested").is_empty());
        assert_eq!(p.depth(), 1);
        let text = crate::metrics::encode();
        assert!(
            text.contains("workqueue_depth{controller=\"pending-unit\",name=\"pending-unit\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("workqueue_queue_duration_seconds_count{controller=\"pending-unit\",name=\"pending-unit\"} 1"),
            "only the started request is observed: {text}"
        );
    }

    #[test]
    fn mapping_answers_become_parent_refs() {
        let ns = Some("team".to_string());
        let names = |v: Value| -> Vec<(String, Option<String>)> {
            parent_refs(&v, ns.clone(), &parent())
                .into_iter()
                .map(|r| (r.name, r.namespace))
                .collect()
        };
        assert_eq!(names(json!("a")), [("a".into(), ns.clone())]);
        assert_eq!(
            names(json!(["a", { "name": "b", "namespace": "other" }])),
            [("a".into(), ns.clone()), ("b".into(), Some("other".into()))]
        );
        assert!(names(Value::Null).is_empty());
    }

    #[test]
    fn a_child_maps_to_its_controller_owner_of_the_right_kind_only() {
        let child: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c", "namespace": "ns", "ownerReferences": [
                { "apiVersion": "other.dev/v1", "kind": "App", "name": "wrong-group", "uid": "1", "controller": true },
                { "apiVersion": "x.dev/v2", "kind": "App", "name": "mine", "uid": "2", "controller": true },
            ] },
        }))
        .unwrap();
        let r = controller_of(&child, &parent()).unwrap();
        assert_eq!(
            (r.name.as_str(), r.namespace.as_deref()),
            ("mine", Some("ns"))
        );
    }

    /// A cluster-scoped child of a namespaced parent carries no ownerReference; its
    /// changes still reach the parent its annotation names, in the parent's namespace.
    #[test]
    fn an_unowned_child_maps_to_the_parent_its_annotation_names() {
        use crate::watch::ownership::{OWNER_LABEL, PARENT_ANNOTATION};
        let child = |annotation: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": { "name": "c", "labels": { OWNER_LABEL: "2" },
                    "annotations": { PARENT_ANNOTATION: annotation } },
            }))
            .unwrap()
        };
        let r = controller_of(&child("x.dev/App/team/p"), &parent()).unwrap();
        assert_eq!(
            (r.name.as_str(), r.namespace.as_deref()),
            ("p", Some("team"))
        );
        assert!(controller_of(&child("other.dev/App/team/p"), &parent()).is_none());
    }

    /// A cluster-scoped parent with children in three namespaces is queued once, not once per
    /// namespace (and reconciled concurrently under each key).
    #[test]
    fn a_cluster_scoped_parent_is_one_object_whatever_namespace_its_children_are_in() {
        let child = |ns: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "c", "namespace": ns, "labels": { "parent": "p" },
                    "ownerReferences": [
                        { "apiVersion": "x.dev/v1", "kind": "App", "name": "p", "uid": "2", "controller": true },
                    ] },
            }))
            .unwrap()
        };
        let parent = cluster_parent();
        for ns in ["one", "two", "three"] {
            let r = controller_of(&child(ns), &parent).unwrap();
            assert_eq!((r.name.as_str(), r.namespace.as_deref()), ("p", None));
        }
        let named = parent_refs(
            &json!(["p", { "name": "q", "namespace": "two" }]),
            Some("one".into()),
            &parent,
        );
        assert!(named.iter().all(|r| r.namespace.is_none()), "{named:?}");
    }
}
