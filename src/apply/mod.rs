//! Carries out a [`Plan`]: children by server-side apply, owned by the parent; status only when
//! it would change.
//!
//! Children get a controller ownerReference to the parent and khai's managed-by label, and land
//! in the parent's namespace unless they name one. Status is compared with what the object
//! already has before writing, so a steady-state reconcile makes no write at all.

use crate::reconcile::Plan;
use crate::schema::MANAGED_BY;
use crate::watch::{self, Kind};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Mutex;

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
}

/// What applying a plan did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub children_applied: usize,
    pub status_written: bool,
}

/// Applies plans for one operator; caches child kinds it has resolved.
pub struct Applier {
    client: kube::Client,
    model: crate::config::Model,
    field_manager: String,
    kinds: Mutex<HashMap<String, Kind>>,
}

impl Applier {
    pub fn new(client: kube::Client, model: crate::config::Model) -> Self {
        let field_manager = model.operator.field_manager.clone();
        Self {
            client,
            model,
            field_manager,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// Applies `plan` for `parent` (of kind `parent_kind`).
    pub async fn apply(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        plan: &Plan,
    ) -> Result<Outcome, Error> {
        let mut outcome = Outcome::default();
        for child in &plan.children {
            self.apply_child(parent, parent_kind, child.clone()).await?;
            outcome.children_applied += 1;
        }
        if let Some(desired) = &plan.status {
            outcome.status_written = self.write_status(parent, parent_kind, desired).await?;
        }
        Ok(outcome)
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

    async fn apply_child(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        mut child: Value,
    ) -> Result<(), Error> {
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
        let api = watch::api(&self.client, &kind, ns.as_deref());
        let params = PatchParams::apply(&self.field_manager).force();
        api.patch(&name, &params, &Patch::Apply(&child))
            .await
            .map_err(|source| Error::ApplyChild {
                kind: kind_name.clone(),
                name: name.clone(),
                source,
            })?;
        tracing::debug!(child.kind = %kind_name, child.name = %name, "applied child");
        Ok(())
    }

    /// Writes `desired` into `.status` with a merge patch, unless it is already there.
    async fn write_status(
        &self,
        parent: &DynamicObject,
        kind: &Kind,
        desired: &Map<String, Value>,
    ) -> Result<bool, Error> {
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
        Ok(true)
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
