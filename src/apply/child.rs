//! Applying one child: marked as khai's, compared with the cached copy of its kind's informer,
//! and sent with server-side apply only when something khai would write is not there yet; what
//! is sent is recorded as an expected echo first, when the parent's reconcile allows it.

use super::compare::{as_stored, object_difference};
use super::hash::content_hash;
use super::owner::{Mark, own};
use super::{Applier, Echoes, Error};
use crate::client::write;
use crate::reconcile::children::ChildKey;
use crate::watch::{Informer, Kind, Slot};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

impl Applier {
    /// Applies one placed child unless the cache shows it already as desired. Returns whether a
    /// request was sent. With `echoes`, the watch event of the write is expected
    /// ([`Echoes`]).
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
        echoes: Option<&Echoes>,
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
        let hash = content_hash(&child);
        if let Some(inf) = cache
            && inf.already_written(ns.as_deref(), name, Slot::Object, &seen_rv, &hash)
        {
            return Ok(false);
        }
        if let Some(at) = differs_at {
            tracing::debug!(child.kind = %kind_name, child.name = %name, differs_at = %at, "child differs from the cache");
        }
        let mut params = PatchParams::apply(&self.field_manager);
        params.force = self.model.operator.force_apply;
        // Recorded before the request goes: its watch event may arrive before its response.
        if let (Some(echoes), Some(_), Some(uid)) = (echoes, cache, parent.uid()) {
            let sent = match stored {
                Cow::Borrowed(_) => child.clone(),
                Cow::Owned(v) => Arc::new(v),
            };
            echoes.expect(&uid, kind, ns.as_deref(), name, sent);
        }
        let target = write::Target {
            resource: &kind.resource,
            namespace: ns.as_deref().filter(|_| kind.namespaced),
            name,
            subresource: None,
        };
        write::patch(&self.client, target, &params, &Patch::Apply(&*child))
            .await
            .map_err(|source| Error::ApplyChild {
                kind: kind_name.clone(),
                name: name.clone(),
                source: source.into(),
            })?;
        if let Some(inf) = cache {
            inf.remember_write(ns.as_deref(), name, Slot::Object, &seen_rv, &hash);
        }
        tracing::debug!(child.kind = %kind_name, child.name = %name, "applied child");
        Ok(true)
    }
}
