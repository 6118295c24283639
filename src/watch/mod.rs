//! Finds the API resources behind the kinds a config names, and builds the `Api`s to watch them.
//!
//! Kinds come from config, so everything downstream works on `DynamicObject` with an
//! [`ApiResource`]. A kind is written as a CRD kind of the same config (`Hello`),
//! `group/version/Kind` (`apps/v1/Deployment`), `version/Kind` for the core group
//! (`v1/ConfigMap`), `Kind.group` (`Deployment.apps`), or a bare built-in kind resolved through
//! API discovery (`ConfigMap`).

mod decode;
pub(crate) mod informer;
pub(crate) mod ownership;
pub(crate) mod predicate;
pub(crate) mod subscription;

pub use decode::decode_object;
pub(crate) use informer::{Filter, Informer, Informers};
pub(crate) use subscription::{Changed, Subscription};

use crate::config::kind::KindRef;
use crate::config::model::{Model, Scope};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Discovery, Scope as DiscoveryScope};

/// A resolved kind: how to address it and whether it lives in namespaces.
#[derive(Debug, Clone, PartialEq)]
pub struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[cfg(test)]
impl Kind {
    /// ConfigMaps (`v1`, namespaced): the kind most unit tests read and write.
    pub(crate) fn configmaps() -> Self {
        Self {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "ConfigMap"),
                "configmaps",
            ),
            namespaced: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown kind {0:?}: not a CRD of this config and not served by the API server")]
    Unknown(String),
    #[error("failed to discover kind {kind:?}: {cause}")]
    Discovery {
        kind: String,
        cause: crate::client::ApiError,
    },
}

impl Kind {
    /// Whether `written` (as a config or script writes a kind) names this kind.
    pub fn matches(&self, written: &KindRef) -> bool {
        let r = &self.resource;
        written.kind == r.kind
            && written.group.as_ref().is_none_or(|g| *g == r.group)
            && written.version.as_ref().is_none_or(|v| *v == r.version)
    }
}

/// Resolves `written` against the config's CRDs first, then the API server: a bare built-in
/// kind is looked up in its group (khai's table of built-in kinds), any other bare kind across
/// every group the server serves.
pub(crate) async fn resolve(
    client: &kube::Client,
    model: &Model,
    written: &KindRef,
) -> Result<Kind, Error> {
    if let Some(crd) = model.crd_for(written) {
        let mut resource = crd.api_resource();
        if let Some(version) = &written.version {
            resource.version = version.clone();
            resource.api_version = format!("{}/{version}", crd.group);
        }
        return Ok(Kind {
            resource,
            namespaced: crd.scope == Scope::Namespaced,
        });
    }
    let err = |cause: kube::Error| Error::Discovery {
        kind: written.to_string(),
        cause: cause.into(),
    };
    let group = written
        .group
        .clone()
        .or_else(|| written.builtin().map(|b| b.group.to_string()));
    let found = match (group, &written.version) {
        (Some(group), Some(version)) => {
            let gvk = GroupVersionKind::gvk(&group, version, &written.kind);
            match discovery::pinned_kind(client, &gvk).await {
                Ok(found) => Some(found),
                Err(kube::Error::Discovery(_)) => None,
                Err(e) => return Err(err(e)),
            }
        }
        (Some(group), None) => match discovery::group(client, &group).await {
            Ok(g) => g.recommended_kind(&written.kind),
            Err(kube::Error::Discovery(_)) => None,
            Err(e) => return Err(err(e)),
        },
        (None, _) => {
            let d = Discovery::new(client.clone()).run().await.map_err(err)?;
            d.groups().find_map(|g| g.recommended_kind(&written.kind))
        }
    };
    let (resource, caps) = found.ok_or_else(|| Error::Unknown(written.to_string()))?;
    Ok(Kind {
        resource,
        namespaced: caps.scope == DiscoveryScope::Namespaced,
    })
}

/// The `Api` for `kind` in one namespace, or across all of them. Cluster-scoped kinds ignore
/// `namespace`, so callers need not care which scope a kind has.
pub(crate) fn api(
    client: &kube::Client,
    kind: &Kind,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) if kind.namespaced => Api::namespaced_with(client.clone(), ns, &kind.resource),
        _ => Api::all_with(client.clone(), &kind.resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_matches_every_way_of_writing_it() {
        let k = Kind {
            resource: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apps", "v1", "Deployment"),
                "deployments",
            ),
            namespaced: true,
        };
        let w = |s: &str| s.parse::<KindRef>().unwrap();
        for s in ["Deployment", "Deployment.apps", "apps/v1/Deployment"] {
            assert!(k.matches(&w(s)), "{s}");
        }
        for s in [
            "Deploymentx",
            "Deployment.batch",
            "apps/v2/Deployment",
            "v1/Deployment",
        ] {
            assert!(!k.matches(&w(s)), "{s}");
        }
    }
}
