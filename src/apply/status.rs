//! Writing a parent's status: a merge patch of `.status`, sent only when it would change
//! something and khai has not already written it from the version the cache shows.

use super::compare::status_differs;
use super::hash::status_hash;
use super::{Applier, Error};
use crate::client::write;
use crate::watch::{Informer, Kind, Slot};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value};

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
        // Compared in place first: a status already there (every reconcile of a steady object)
        // needs no hash.
        let current = parent.data.get("status").unwrap_or(&Value::Null);
        if !status_differs(current, desired) {
            return Ok(false);
        }
        // The script's inputs are this very version of the object, so what it wants now is
        // what khai already wrote for it (give or take a timestamp).
        let hash = status_hash(desired);
        if primary.already_written(ns.as_deref(), &name, Slot::Status, &seen_rv, &hash) {
            return Ok(false);
        }
        let target = write::Target {
            resource: &kind.resource,
            namespace: ns.as_deref(),
            name: &name,
            subresource: Some("status"),
        };
        // Serialised from the plan as it is, not copied into a new JSON tree first.
        #[derive(serde::Serialize)]
        struct StatusPatch<'a> {
            status: &'a Map<String, Value>,
        }
        let patch = StatusPatch { status: desired };
        write::patch(
            &self.client,
            target,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|e| Error::Status(e.into()))?;
        primary.remember_write(ns.as_deref(), &name, Slot::Status, &seen_rv, &hash);
        Ok(true)
    }
}
