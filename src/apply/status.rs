//! Writing a parent's status: a merge patch of `.status`, sent only when it would change
//! something and khai has not already written it from the version the cache shows.

use super::compare::status_differs;
use super::hash::status_hash;
use super::{Applier, Error};
use crate::watch::{self, Informer, Kind, Slot};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

impl Applier {
    /// Writes `desired` into `.status` with a merge patch, unless it is already there.
    pub async fn status(
        &self,
        parent: &DynamicObject,
        kind: &Kind,
        desired: &Map<String, Value>,
        primary: &Informer,
    ) -> Result<bool, Error> {
        let ns = parent.namespace().filter(|_| kind.namespaced);
        let name = parent.name_any();
        let seen_rv = parent.resource_version().unwrap_or_default();
        // The script's inputs are this very version of the object, so what it wants now is
        // what khai already wrote for it (give or take a timestamp).
        let hash = status_hash(desired);
        if primary.already_written(ns.as_deref(), &name, Slot::Status, &seen_rv, &hash) {
            return Ok(false);
        }
        let current = parent.data.get("status").cloned().unwrap_or(Value::Null);
        if !status_differs(&current, desired) {
            return Ok(false);
        }
        let api = watch::api(&self.client, kind, ns.as_deref());
        let patch = json!({ "status": desired });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::Status(e.into()))?;
        primary.remember_write(ns.as_deref(), &name, Slot::Status, &seen_rv, &hash);
        Ok(true)
    }
}
