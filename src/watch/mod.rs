//! Finds the API resources behind the kinds a config names, and builds the `Api`s to watch them.
//!
//! Kinds come from config, so everything downstream works on `DynamicObject` with an
//! [`ApiResource`]. A kind is written as a CRD kind of the same config (`Hello`),
//! `group/version/Kind` (`apps/v1/Deployment`), `version/Kind` for the core group
//! (`v1/ConfigMap`), `Kind.group` (`Deployment.apps`), or a bare built-in kind resolved through
//! API discovery (`ConfigMap`).

pub mod builtin;
pub mod informer;
pub mod predicate;
pub mod subscription;

pub use informer::{Filter, Informer, Informers, Slot};
pub use subscription::{Changed, Subscription};

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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown kind {0:?}: not a CRD of this config and not served by the API server")]
    Unknown(String),
    #[error("failed to discover kind {kind:?}: {source}")]
    Discovery {
        kind: String,
        #[source]
        source: crate::client::ApiError,
    },
}

impl Kind {
    /// Whether `written` (as a config or script writes a kind) names this kind.
    pub fn matches(&self, written: &str) -> bool {
        let r = &self.resource;
        match spelling(written) {
            Spelling::Bare(k) => k == r.kind,
            Spelling::GroupKind { group, kind } => kind == r.kind && group == r.group,
            Spelling::Gvk {
                group,
                version,
                kind,
            } => kind == r.kind && group == r.group && version == r.version,
        }
    }
}

/// How a kind was written, before asking the API server anything.
#[derive(Debug, PartialEq, Eq)]
enum Spelling<'a> {
    Gvk {
        group: &'a str,
        version: &'a str,
        kind: &'a str,
    },
    GroupKind {
        group: &'a str,
        kind: &'a str,
    },
    Bare(&'a str),
}

fn spelling(s: &str) -> Spelling<'_> {
    let parts: Vec<&str> = s.split('/').collect();
    match parts.as_slice() {
        [group, version, kind] => Spelling::Gvk {
            group,
            version,
            kind,
        },
        [version, kind] => Spelling::Gvk {
            group: "",
            version,
            kind,
        },
        _ => match s.split_once('.') {
            Some((kind, group)) => Spelling::GroupKind { group, kind },
            None => Spelling::Bare(s),
        },
    }
}

/// Resolves `written` against the config's CRDs first, then the API server.
pub async fn resolve(client: &kube::Client, model: &Model, written: &str) -> Result<Kind, Error> {
    if let Some(crd) = model.crds.iter().find(|c| {
        let ar = c.api_resource();
        match spelling(written) {
            Spelling::Bare(k) => k == c.kind,
            Spelling::GroupKind { group, kind } => kind == c.kind && group == c.group,
            Spelling::Gvk {
                group,
                version,
                kind,
            } => {
                kind == c.kind
                    && group == c.group
                    && c.versions.iter().any(|v| v.name() == version)
                    && !ar.group.is_empty()
            }
        }
    }) {
        let mut resource = crd.api_resource();
        if let Spelling::Gvk { version, .. } = spelling(written) {
            resource.version = version.to_string();
            resource.api_version = format!("{}/{version}", crd.group);
        }
        return Ok(Kind {
            resource,
            namespaced: crd.scope == Scope::Namespaced,
        });
    }
    let err = |source: kube::Error| Error::Discovery {
        kind: written.to_string(),
        source: source.into(),
    };
    let found = match spelling(written) {
        Spelling::Gvk {
            group,
            version,
            kind,
        } => {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            match discovery::pinned_kind(client, &gvk).await {
                Ok(found) => Some(found),
                Err(kube::Error::Discovery(_)) => None,
                Err(e) => return Err(err(e)),
            }
        }
        Spelling::GroupKind { group, kind } => match discovery::group(client, group).await {
            Ok(g) => g.recommended_kind(kind),
            Err(kube::Error::Discovery(_)) => None,
            Err(e) => return Err(err(e)),
        },
        Spelling::Bare(kind) => {
            let d = Discovery::new(client.clone()).run().await.map_err(err)?;
            d.groups().find_map(|g| g.recommended_kind(kind))
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
pub fn api(client: &kube::Client, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
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
        for w in ["Deployment", "Deployment.apps", "apps/v1/Deployment"] {
            assert!(k.matches(w), "{w}");
        }
        for w in [
            "Deploymentx",
            "Deployment.batch",
            "apps/v2/Deployment",
            "v1/Deployment",
        ] {
            assert!(!k.matches(w), "{w}");
        }
    }

    #[test]
    fn spellings_of_a_kind_are_told_apart() {
        assert_eq!(
            spelling("apps/v1/Deployment"),
            Spelling::Gvk {
                group: "apps",
                version: "v1",
                kind: "Deployment"
            }
        );
        assert_eq!(
            spelling("v1/ConfigMap"),
            Spelling::Gvk {
                group: "",
                version: "v1",
                kind: "ConfigMap"
            }
        );
        assert_eq!(
            spelling("Deployment.apps"),
            Spelling::GroupKind {
                group: "apps",
                kind: "Deployment"
            }
        );
        assert_eq!(spelling("Hello"), Spelling::Bare("Hello"));
    }
}
