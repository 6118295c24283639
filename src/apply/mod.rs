//! Carries out a [`Plan`]: children by server-side apply, owned by the parent; pruning of children
//! no longer desired; status only when it would change.
//!
//! Children get a controller ownerReference to the parent, khai's managed-by label, an owner label
//! naming the parent's uid, and an annotation hashing what khai applied. They land in the parent's
//! namespace unless they name one. Before applying, each child is compared with the cached copy
//! from its kind's informer: if everything khai would write is already there (the hash included,
//! so a field dropped from the desired object still counts as a change) nothing is sent. Status is
//! compared the same way, so a steady-state reconcile makes no write at all.
//!
//! Pruning only ever deletes an object that carries both this parent's controller ownerReference
//! and its owner label, and only with a uid precondition: nothing khai did not create is touched.

use crate::reconcile::Plan;
use crate::schema::MANAGED_BY;
use crate::watch::{self, Informer, Kind};
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Label naming the uid of the parent that applied a child; half of what pruning requires.
pub const OWNER_LABEL: &str = "khai.dev/owner";
/// Annotation holding a hash of the child as khai last applied it.
pub const APPLIED_HASH: &str = "khai.dev/applied-hash";

/// Errors applying a plan; all are retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to resolve child kind {kind}: {source}")]
    Resolve {
        kind: String,
        #[source]
        source: watch::Error,
    },
    #[error("failed to apply child {kind} {name}: {source}")]
    ApplyChild {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "child {kind} {name}: namespace {child_ns:?} differs from its owner's {parent_ns:?}; owner references cannot cross namespaces"
    )]
    CrossNamespace {
        kind: String,
        name: String,
        child_ns: String,
        parent_ns: String,
    },
    #[error("failed to write status: {0}")]
    Status(#[source] kube::Error),
    #[error("failed to prune child {kind} {name}: {source}")]
    Prune {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What applying a plan did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Children sent to the API server because they differed from the cache.
    pub children_applied: usize,
    /// Children already as desired; nothing sent.
    pub children_unchanged: usize,
    /// Children deleted because the plan no longer lists them.
    pub children_pruned: usize,
    pub status_written: bool,
}

/// Identity of a child: apiVersion, kind, namespace, name.
type ChildKey = (String, String, Option<String>, String);

/// Applies plans for one operator; caches child kinds it has resolved.
pub struct Applier {
    client: kube::Client,
    model: crate::config::Model,
    field_manager: String,
    kinds: Mutex<HashMap<String, Kind>>,
    /// Writes whose effect the caches may not show yet; see [`Written`].
    written: Mutex<HashMap<String, Written>>,
}

/// What khai last wrote to one object, and the resourceVersion it saw when it did.
///
/// A watch lags behind the writes that cause it: the reconcile right after a write can still see
/// the object as it was before. Without this memo that reconcile would write the same thing
/// again (and stamp a fresh `lastTransitionTime`), which is the double write per change that
/// makes operators heavy on the API server. While the cache still shows the version khai wrote
/// from, khai knows its write is already on its way and skips it; once the cache moves on, the
/// entry is dropped and the normal comparison takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    /// resourceVersion the object had in the cache when khai wrote ("" when absent).
    from: String,
    /// Hash of what khai wrote.
    hash: String,
}

impl Applier {
    pub fn new(client: kube::Client, model: crate::config::Model) -> Self {
        let field_manager = model.operator.field_manager().to_string();
        Self {
            client,
            model,
            field_manager,
            kinds: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        }
    }

    /// Applies `plan` for `parent` (of kind `parent_kind`). `owned` are the informers of the
    /// controller's owned kinds: they make change detection and pruning free of API reads.
    pub async fn apply(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        plan: &Plan,
        owned: &[Arc<Informer>],
    ) -> Result<Outcome, Error> {
        let mut outcome = Outcome::default();
        let mut desired = HashSet::new();
        for child in &plan.children {
            let (key, sent) = self
                .apply_child(parent, parent_kind, child.clone(), owned)
                .await?;
            desired.insert(key);
            if sent {
                outcome.children_applied += 1;
            } else {
                outcome.children_unchanged += 1;
            }
        }
        outcome.children_pruned = self.prune(parent, &desired, owned).await?;
        if let Some(status) = &plan.status {
            outcome.status_written = self.write_status(parent, parent_kind, status).await?;
        }
        Ok(outcome)
    }

    /// Writes `desired` into `.status` if it differs from what `parent` has.
    pub async fn status(
        &self,
        parent: &DynamicObject,
        kind: &Kind,
        desired: &Map<String, Value>,
    ) -> Result<bool, Error> {
        self.write_status(parent, kind, desired).await
    }

    /// Deletes children of `parent` in the owned caches that are not in `desired`.
    async fn prune(
        &self,
        parent: &DynamicObject,
        desired: &HashSet<ChildKey>,
        owned: &[Arc<Informer>],
    ) -> Result<usize, Error> {
        let Some(uid) = parent.uid() else {
            return Ok(0);
        };
        let mut pruned = 0;
        for inf in owned {
            for child in inf.controlled_by(&uid) {
                if !applied_by(&child, &uid) || desired.contains(&key_of(&inf.kind, &child)) {
                    continue;
                }
                let name = child.name_any();
                let api = watch::api(&self.client, &inf.kind, child.namespace().as_deref());
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: child.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => pruned += 1,
                    // Already gone, or replaced by a different object of the same name: not ours.
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(source) => {
                        return Err(Error::Prune {
                            kind: inf.kind.resource.kind.clone(),
                            name,
                            source,
                        });
                    }
                }
                tracing::info!(child.kind = %inf.kind.resource.kind, child.name = %name, "pruned child no longer desired");
            }
        }
        Ok(pruned)
    }

    async fn kind_of(&self, api_version: &str, kind: &str) -> Result<Kind, Error> {
        let key = format!("{api_version}/{kind}");
        if let Some(k) = self.kinds.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(k);
        }
        let resolved = watch::resolve(&self.client, &self.model, &key)
            .await
            .map_err(|source| Error::Resolve {
                kind: key.clone(),
                source,
            })?;
        if let Ok(mut m) = self.kinds.lock() {
            m.insert(key, resolved.clone());
        }
        Ok(resolved)
    }

    /// Applies one child unless the cache shows it already as desired. Returns its identity and
    /// whether a request was sent.
    async fn apply_child(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        mut child: Value,
        owned: &[Arc<Informer>],
    ) -> Result<(ChildKey, bool), Error> {
        let api_version = child["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind_name = child["kind"].as_str().unwrap_or_default().to_string();
        let name = child["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let kind = self.kind_of(&api_version, &kind_name).await?;
        let parent_ns = parent.namespace();
        let ns = if kind.namespaced {
            let ns = child["metadata"]["namespace"]
                .as_str()
                .map(str::to_string)
                .or(parent_ns.clone())
                .unwrap_or_else(|| "default".into());
            if parent_kind.namespaced && Some(&ns) != parent_ns.as_ref() {
                return Err(Error::CrossNamespace {
                    kind: kind_name,
                    name,
                    child_ns: ns,
                    parent_ns: parent_ns.unwrap_or_default(),
                });
            }
            child["metadata"]["namespace"] = json!(ns);
            Some(ns)
        } else {
            None
        };
        own(&mut child, parent, parent_kind);
        let key = (
            kind.resource.api_version.clone(),
            kind.resource.kind.clone(),
            ns.clone(),
            name.clone(),
        );
        let cached = owned
            .iter()
            .find(|i| {
                i.kind.resource.api_version == kind.resource.api_version
                    && i.kind.resource.kind == kind.resource.kind
            })
            .and_then(|i| {
                i.store().get(
                    &ObjectRef::new_with(&name, kind.resource.clone())
                        .within(ns.as_deref().unwrap_or("")),
                )
            });
        let memo_key = format!("child/{}/{}/{:?}/{}", key.0, key.1, key.2, key.3);
        let seen_rv = cached
            .as_ref()
            .and_then(|c| c.resource_version())
            .unwrap_or_default();
        let hash = content_hash(&child);
        if self.already_written(&memo_key, &seen_rv, &hash) {
            return Ok((key, false));
        }
        if let Some(current) = cached
            && serde_json::to_value(&*current).is_ok_and(|cur| is_subset(&as_stored(&child), &cur))
        {
            return Ok((key, false));
        }
        let api = watch::api(&self.client, &kind, ns.as_deref());
        let mut params = PatchParams::apply(&self.field_manager);
        params.force = self.model.operator.force_apply;
        api.patch(&name, &params, &Patch::Apply(&child))
            .await
            .map_err(|source| Error::ApplyChild {
                kind: kind_name.clone(),
                name: name.clone(),
                source,
            })?;
        self.remember(memo_key, seen_rv, hash);
        tracing::debug!(child.kind = %kind_name, child.name = %name, "applied child");
        Ok((key, true))
    }

    /// Writes `desired` into `.status` with a merge patch, unless it is already there.
    async fn write_status(
        &self,
        parent: &DynamicObject,
        kind: &Kind,
        desired: &Map<String, Value>,
    ) -> Result<bool, Error> {
        let memo_key = format!("status/{}", parent.uid().unwrap_or_default());
        let seen_rv = parent.resource_version().unwrap_or_default();
        // The script's inputs are this very version of the object, so what it wants now is
        // what khai already wrote for it (give or take a timestamp).
        let hash = status_hash(desired);
        if self.already_written(&memo_key, &seen_rv, &hash) {
            return Ok(false);
        }
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        if !status_differs(&current, desired) {
            return Ok(false);
        }
        let api = watch::api(&self.client, kind, parent.namespace().as_deref());
        let patch = json!({ "status": desired });
        api.patch_status(
            &parent.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::Status)?;
        self.remember(memo_key, seen_rv, hash);
        Ok(true)
    }

    /// Whether khai wrote `hash` to `key` when the cache showed `seen_rv`, and the cache still
    /// shows it. Forgets the entry once the cache has moved on.
    fn already_written(&self, key: &str, seen_rv: &str, hash: &str) -> bool {
        let Ok(mut memo) = self.written.lock() else {
            return false;
        };
        match memo.get(key) {
            Some(w) if w.from == seen_rv => w.hash == hash,
            Some(_) => {
                memo.remove(key);
                false
            }
            None => false,
        }
    }

    fn remember(&self, key: String, from: String, hash: String) {
        if let Ok(mut memo) = self.written.lock() {
            memo.insert(key, Written { from, hash });
        }
    }
}

/// Sets the controller ownerReference and managed-by label on a child.
fn own(child: &mut Value, parent: &DynamicObject, parent_kind: &Kind) {
    let owner = json!({
        "apiVersion": parent_kind.resource.api_version,
        "kind": parent_kind.resource.kind,
        "name": parent.name_any(),
        "uid": parent.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let meta = &mut child["metadata"];
    meta["ownerReferences"] = json!([owner]);
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][MANAGED_BY.0] = json!(MANAGED_BY.1);
    meta["labels"][OWNER_LABEL] = json!(parent.uid().unwrap_or_default());
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    // Hashing the child with the annotation still empty makes the hash a function of the
    // desired object alone, so it is stable from one reconcile to the next.
    meta["annotations"][APPLIED_HASH] = json!("");
    let hash = content_hash(child);
    child["metadata"]["annotations"][APPLIED_HASH] = json!(hash);
}

/// Hash of a desired status without the conditions' `lastTransitionTime`, which a reconcile
/// working from a stale copy would stamp afresh although nothing changed.
fn status_hash(desired: &Map<String, Value>) -> String {
    let mut s = desired.clone();
    if let Some(Value::Array(conds)) = s.get_mut("conditions") {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastTransitionTime");
        }
    }
    content_hash(&Value::Object(s))
}

/// A short, stable hash of a JSON value (key order as produced by the script).
fn content_hash(v: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.to_string().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Whether `child` was applied by the parent with `uid`: its controller ownerReference and owner
/// label must both name that parent.
fn applied_by(child: &DynamicObject, uid: &str) -> bool {
    let owned = child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    owned && child.labels().get(OWNER_LABEL).is_some_and(|l| l == uid)
}

fn key_of(kind: &Kind, obj: &DynamicObject) -> ChildKey {
    (
        kind.resource.api_version.clone(),
        kind.resource.kind.clone(),
        obj.namespace().filter(|_| kind.namespaced),
        obj.name_any(),
    )
}

/// `child` as the API server stores it, for comparing with the cache. A Secret's `stringData`
/// is write-only: the server merges it into `data`, base64-encoded, and never returns it, so a
/// Secret written with `stringData` would otherwise look changed on every reconcile.
fn as_stored(child: &Value) -> std::borrow::Cow<'_, Value> {
    use base64::Engine as _;
    use std::borrow::Cow;
    let is_secret = child["apiVersion"] == "v1" && child["kind"] == "Secret";
    if !is_secret || !child.get("stringData").is_some_and(Value::is_object) {
        return Cow::Borrowed(child);
    }
    let mut stored = child.clone();
    let Some(obj) = stored.as_object_mut() else {
        return Cow::Borrowed(child);
    };
    let strings = obj.remove("stringData");
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if let (Some(data), Some(Value::Object(strings))) = (data.as_object_mut(), strings) {
        for (k, v) in strings {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(k, Value::String(encoded));
        }
    }
    Cow::Owned(stored)
}

/// Whether every field of `want` is present with the same value in `have`. Arrays must match
/// element by element; numbers compare by value (1 == 1.0).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| is_subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == have,
    }
}

/// Whether merging `desired` into `current` (JSON merge patch semantics) would change it.
pub fn status_differs(current: &Value, desired: &Map<String, Value>) -> bool {
    let empty = Map::new();
    let current = current.as_object().unwrap_or(&empty);
    desired
        .iter()
        .any(|(k, want)| match (current.get(k), want) {
            (None, Value::Null) => false,
            (None, _) => true,
            (Some(_), Value::Null) => true,
            (Some(Value::Object(have)), Value::Object(want)) => {
                status_differs(&Value::Object(have.clone()), want)
            }
            (Some(have), want) => !same_value(have, want),
        })
}

/// Compares JSON values treating 1 and 1.0 as equal, as the API server's round trip may change
/// one into the other.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn subset_ignores_fields_the_server_adds_but_not_changed_ones() {
        let have = json!({ "metadata": { "name": "a", "uid": "x", "labels": { "k": "v" } }, "data": { "a": "1" } });
        assert!(is_subset(
            &json!({ "metadata": { "name": "a" }, "data": { "a": "1" } }),
            &have
        ));
        assert!(!is_subset(&json!({ "data": { "a": "2" } }), &have));
        assert!(!is_subset(&json!({ "data": { "b": "1" } }), &have));
        assert!(!is_subset(
            &json!({ "list": [1] }),
            &json!({ "list": [1, 2] })
        ));
    }

    #[test]
    fn a_secret_written_with_string_data_compares_with_its_stored_data() {
        let child = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "data": { "raw": "eA==" }, "stringData": { "password": "hunter2" } });
        let stored = json!({ "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": "s", "uid": "u" }, "type": "Opaque",
            "data": { "raw": "eA==", "password": "aHVudGVyMg==" } });
        assert!(is_subset(&as_stored(&child), &stored));
        let changed = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "stringData": { "password": "hunter3" } });
        assert!(!is_subset(&as_stored(&changed), &stored));
        // Only Secrets are rewritten.
        let cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "stringData": { "a": "b" } });
        assert_eq!(*as_stored(&cm), cm);
    }

    #[test]
    fn status_hash_ignores_transition_times_only() {
        let a = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "t1" }] }),
        );
        let b = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "t2" }] }),
        );
        let c = map(
            json!({ "phase": "Ready", "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": "t2" }] }),
        );
        assert_eq!(status_hash(&a), status_hash(&b));
        assert_ne!(status_hash(&a), status_hash(&c));
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let current = json!({ "phase": "Ready", "replicas": 3, "extra": "kept" });
        assert!(!status_differs(
            &current,
            &map(json!({ "phase": "Ready", "replicas": 3.0 }))
        ));
    }

    #[test]
    fn changed_or_removed_status_field_is_written() {
        let current = json!({ "phase": "Ready", "nested": { "a": 1 } });
        assert!(status_differs(&current, &map(json!({ "phase": "Failed" }))));
        assert!(status_differs(
            &current,
            &map(json!({ "nested": { "a": 2 } }))
        ));
        assert!(status_differs(&current, &map(json!({ "phase": null }))));
        assert!(!status_differs(&current, &map(json!({ "gone": null }))));
        assert!(status_differs(
            &Value::Null,
            &map(json!({ "phase": "Ready" }))
        ));
    }
}
