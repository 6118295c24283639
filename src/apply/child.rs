//! Applying one child: marked as khai's, compared with the cached copy of its kind's informer,
//! and sent with server-side apply only when something khai would write is not there yet; what
//! is sent is recorded in the parent's record first, as an expected echo when the parent's
//! reconcile allows it.

use super::compare::{as_stored, object_difference};
use super::hash::content_digest;
use super::owner::{Mark, own};
use super::{Applier, Error, Ledger};
use crate::client::write;
use crate::object::{ChildId, Target};
use crate::reconcile::children::ChildKey;
use crate::watch::{Informer, Kind};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

impl Applier {
    /// Applies one placed child unless the cache shows it already as desired, or khai already
    /// sent it from the version the cache shows. Returns whether a request was sent. What is
    /// sent is remembered in the parent's record (`ledger`).
    #[allow(clippy::too_many_arguments)] // one child: what it is, where it goes, how it is marked
    pub(super) async fn apply_child(
        &self,
        parent: &DynamicObject,
        parent_kind: &Kind,
        mut child: Value,
        key: &ChildKey,
        kind: &Kind,
        cache: Option<&Arc<Informer>>,
        mark: Mark,
        ledger: Ledger<'_>,
    ) -> Result<bool, Error> {
        let (_, kind_name, ns, name) = key;
        own(&mut child, parent, parent_kind, mark);
        let child = Arc::new(child);
        let stored = as_stored(&child);
        let cached = cache.and_then(|i| {
            let r = ObjectRef::new_with(name, kind.resource.clone());
            i.store().get(&match ns {
                Some(ns) => r.within(ns),
                None => r,
            })
        });
        let seen_rv = cached
            .as_ref()
            .and_then(|c| c.resource_version())
            .unwrap_or_default();
        // Compared in place first: a child the cache already shows as wanted (every reconcile
        // of a steady object, every object on a restart) needs no hash of what would be sent.
        let differs_at = match &cached {
            Some(current) => match object_difference(&stored, current) {
                None => return Ok(false),
                at => at,
            },
            None => None,
        };
        let hash = content_digest(&child);
        let id = ChildId::new(kind, ns.as_deref(), name);
        let slot = Target::Child(id.clone());
        if cache.is_some()
            && ledger
                .update(|s| s.sent.already_written(&slot, &seen_rv, hash))
                .unwrap_or(false)
        {
            return Ok(false);
        }
        if let Some(at) = differs_at {
            tracing::debug!(child.kind = %kind_name, child.name = %name, differs_at = %at, "child differs from the cache");
        }
        let mut params = PatchParams::apply(&self.field_manager);
        params.force = self.model.operator.force_apply;
        params.dry_run = self.dry_run;
        // Recorded before the request goes: its watch event may arrive before its response.
        let recorded = cache.is_some().then_some(slot);
        if let Some(slot) = &recorded {
            let echo = ledger.echoes.then(|| match stored {
                Cow::Borrowed(_) => child.clone(),
                Cow::Owned(v) => Arc::new(v),
            });
            ledger.objects.update(ledger.parent, |s| {
                if let Some(sent) = echo {
                    s.sent.expect(id, sent);
                }
                s.sent.written(slot.clone(), &seen_rv, hash);
            });
        }
        let target = write::Target {
            resource: &kind.resource,
            namespace: ns.as_deref().filter(|_| kind.namespaced),
            name,
            subresource: None,
        };
        let sent = write::patch(&self.client, target, &params, &Patch::Apply(&*child)).await;
        if let Some(slot) = &recorded {
            ledger
                .objects
                .update_existing(ledger.parent, |s| match &sent {
                    Ok(made) => made.iter().for_each(|rv| s.sent.made(slot, hash, rv)),
                    Err(_) => s.sent.unwritten(slot, hash),
                });
        }
        sent.map_err(|cause| Error::ApplyChild {
            kind: kind_name.clone(),
            name: name.clone(),
            cause: cause.into(),
        })?;
        tracing::debug!(child.kind = %kind_name, child.name = %name, "applied child");
        Ok(true)
    }
}
