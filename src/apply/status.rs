//! Writing to the object itself: its status, a merge patch of `.status` sent only when it would
//! change something and khai has not already written it from the version the cache shows; and
//! the annotations its handlers' progress is kept in.

use super::compare::status_differs;
use super::hash::status_hash;
use super::{Applier, Error, Ledger};
use crate::client::write;
use crate::object::Target;
use crate::watch::Kind;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value};

/// Who the status written is from. Each writes under its own field manager, so neither takes
/// away the other's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    /// The plan of `reconcile`, with `observedGeneration` and the `Ready` condition.
    Reconcile,
    /// The answers of handlers, timers and daemons.
    Handlers,
}

/// The field manager of the status handlers, timers and daemons return.
const HANDLERS_MANAGER: &str = "khai-handlers";

impl Applier {
    /// Writes `desired` into `.status` with a merge patch, unless it is already there or khai
    /// already sent it from the version the cache shows. Returns whether it was sent.
    pub async fn status(
        &self,
        parent: &DynamicObject,
        kind: &Kind,
        desired: &Map<String, Value>,
        ledger: Ledger<'_>,
        manager: Manager,
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
        // Read from an older version than the cache shows now (khai's last write arrived while
        // this reconcile ran): the newer one may hold it already.
        if let Some(newer) = ledger.newer(parent)
            && !status_differs(newer.data.get("status").unwrap_or(&Value::Null), desired)
        {
            return Ok(false);
        }
        // The script's inputs are this very version of the object, so what it wants now is
        // what khai already wrote for it (give or take a timestamp).
        let hash = status_hash(desired);
        let target = match manager {
            Manager::Reconcile => Target::Status,
            Manager::Handlers => Target::HandlerStatus,
        };
        if ledger
            .update(|s| s.sent.already_written(&target, &seen_rv, hash))
            .unwrap_or(false)
        {
            return Ok(false);
        }
        let to = write::Target {
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
        let params = PatchParams {
            field_manager: (manager == Manager::Handlers).then(|| HANDLERS_MANAGER.into()),
            ..self.params()
        };
        // Recorded before the request goes: its watch event may arrive before its response.
        ledger.objects.update(ledger.parent, |s| {
            s.sent.written(target.clone(), &seen_rv, hash)
        });
        let sent = write::patch(&self.client, to, &params, &Patch::Merge(&patch)).await;
        ledger
            .objects
            .update_existing(ledger.parent, |s| match &sent {
                Ok(made) => made.iter().for_each(|rv| s.sent.made(&target, hash, rv)),
                Err(_) => s.sent.unwritten(&target, hash),
            });
        sent.map_err(|e| match manager {
            Manager::Reconcile => Error::Status(e.into()),
            Manager::Handlers => Error::HandlerStatus(e.into()),
        })?;
        Ok(true)
    }
}

impl Applier {
    /// Merge-patches `patch`, a partial object that sets or clears annotations, onto `obj`.
    pub async fn annotate(
        &self,
        obj: &DynamicObject,
        kind: &Kind,
        patch: &Value,
    ) -> Result<(), Error> {
        let (name, ns) = (obj.name_any(), obj.namespace());
        let to = write::Target {
            resource: &kind.resource,
            namespace: ns.as_deref().filter(|_| kind.namespaced),
            name: &name,
            subresource: None,
        };
        write::patch(&self.client, to, &self.params(), &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| Error::Annotate(e.into()))
    }
}
