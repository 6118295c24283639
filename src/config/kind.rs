//! How configs and scripts name a kind, and what khai knows about kinds without a cluster.
//!
//! A kind is written as a CRD kind of the same config or a built-in kind (`Cache`,
//! `ConfigMap`), `Kind.group` (`Deployment.apps`), `version/Kind` for the core group
//! (`v1/ConfigMap`) or `group/version/Kind` (`apps/v1/Deployment`). [`KindRef`] is that spelling,
//! parsed once where the config is read; parts left unwritten match anything.
//! [`super::Model::resolve_kind`] fills them from the config's CRDs, then from the table of
//! built-in kinds every API server serves, which is also what `khai test`, `khai generate rbac` and
//! `khai check` use where `khai run` asks the API server (discovery).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A kind as written: unknown parts (`None`) match anything.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KindRef {
    /// `Some("")` is the core group.
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: String,
}

/// Why a kind is not written the way khai reads kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{written:?} is not a kind: write Kind, Kind.group, version/Kind or group/version/Kind ({why})"
)]
pub struct ParseError {
    written: String,
    why: &'static str,
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

impl std::str::FromStr for KindRef {
    type Err = ParseError;
    fn from_str(written: &str) -> Result<Self, ParseError> {
        let bad = |why| ParseError {
            written: written.to_string(),
            why,
        };
        let parts: Vec<&str> = written.split('/').collect();
        let (group, version, kind) = match parts.as_slice() {
            [g, v, k] => (Some(*g), Some(*v), *k),
            [v, k] => (Some(""), Some(*v), *k),
            [one] => match one.split_once('.') {
                Some((k, g)) => (Some(g), None, k),
                None => (None, None, *one),
            },
            _ => return Err(bad("too many '/'")),
        };
        if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("a kind is letters and digits, like ConfigMap"));
        }
        if version.is_some_and(|v| !name_ok(v)) {
            return Err(bad("empty or invalid version"));
        }
        if group.is_some_and(|g| !g.is_empty() && !name_ok(g)) {
            return Err(bad("invalid group"));
        }
        Ok(Self {
            group: group.map(str::to_string),
            version: version.map(str::to_string),
            kind: kind.to_string(),
        })
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.group, &self.version) {
            (Some(g), Some(v)) if g.is_empty() => write!(f, "{v}/{}", self.kind),
            (Some(g), Some(v)) => write!(f, "{g}/{v}/{}", self.kind),
            (Some(g), None) if !g.is_empty() => write!(f, "{}.{g}", self.kind),
            _ => write!(f, "{}", self.kind),
        }
    }
}

impl<'de> Deserialize<'de> for KindRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for KindRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl KindRef {
    /// The kind of an object, from its `apiVersion` and `kind`.
    pub fn of(obj: &serde_json::Value) -> Self {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default();
        Self::from_api_version(api_version, obj["kind"].as_str().unwrap_or_default())
    }

    /// The kind `kind` of `apiVersion` `api_version` (`v1`, `apps/v1`).
    pub(crate) fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Self {
            group: Some(group.into()),
            version: Some(version.into()),
            kind: kind.into(),
        }
    }

    /// Whether both could name the same kind: the parts known on both sides agree.
    pub(crate) fn compatible(&self, other: &KindRef) -> bool {
        let agree = |a: &Option<String>, b: &Option<String>| match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.kind == other.kind
            && agree(&self.group, &other.group)
            && agree(&self.version, &other.version)
    }

    /// Whether nothing but the kind was written (`ConfigMap`).
    pub(crate) fn is_bare(&self) -> bool {
        self.group.is_none() && self.version.is_none()
    }

    /// The built-in kind this names, if it is one khai knows.
    pub(crate) fn builtin(&self) -> Option<&'static Builtin> {
        BUILTIN
            .iter()
            .find(|b| b.kind == self.kind && self.group.as_ref().is_none_or(|g| g == b.group))
    }
}

/// Lower-case plural of a kind, as Kubernetes tooling derives it.
pub(crate) fn plural_of(kind: &str) -> String {
    let k = kind.to_lowercase();
    if k.ends_with('s')
        || k.ends_with('x')
        || k.ends_with("ch")
        || k.ends_with("sh")
        || k.ends_with('z')
    {
        format!("{k}es")
    } else if let Some(stem) = k
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

/// What khai knows of a kind without asking a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offline {
    /// The kind, group and version filled in where known.
    pub kind: KindRef,
    pub plural: String,
    /// Namespaced unless known otherwise.
    pub namespaced: bool,
    /// Whether the config or khai's table knows the kind.
    pub known: bool,
}

/// A kind every Kubernetes API server serves.
#[derive(Debug)]
pub(crate) struct Builtin {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn b(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        kind,
        namespaced,
    }
}

/// The built-in kinds khai knows offline. Where a kind is in two groups (`Event`), the first
/// wins for a bare name.
pub(crate) const BUILTIN: &[Builtin] = &[
    b("", "v1", "ConfigMap", true),
    b("", "v1", "Secret", true),
    b("", "v1", "Service", true),
    b("", "v1", "ServiceAccount", true),
    b("", "v1", "Pod", true),
    b("", "v1", "PersistentVolumeClaim", true),
    b("", "v1", "Endpoints", true),
    b("", "v1", "Event", true),
    b("", "v1", "LimitRange", true),
    b("", "v1", "ResourceQuota", true),
    b("", "v1", "ReplicationController", true),
    b("", "v1", "PodTemplate", true),
    b("", "v1", "Namespace", false),
    b("", "v1", "Node", false),
    b("", "v1", "PersistentVolume", false),
    b("", "v1", "ComponentStatus", false),
    b("apps", "v1", "Deployment", true),
    b("apps", "v1", "StatefulSet", true),
    b("apps", "v1", "DaemonSet", true),
    b("apps", "v1", "ReplicaSet", true),
    b("apps", "v1", "ControllerRevision", true),
    b("batch", "v1", "Job", true),
    b("batch", "v1", "CronJob", true),
    b("autoscaling", "v2", "HorizontalPodAutoscaler", true),
    b("policy", "v1", "PodDisruptionBudget", true),
    b("policy", "v1beta1", "PodSecurityPolicy", false),
    b("networking.k8s.io", "v1", "Ingress", true),
    b("networking.k8s.io", "v1", "NetworkPolicy", true),
    b("networking.k8s.io", "v1", "IngressClass", false),
    b("rbac.authorization.k8s.io", "v1", "Role", true),
    b("rbac.authorization.k8s.io", "v1", "RoleBinding", true),
    b("rbac.authorization.k8s.io", "v1", "ClusterRole", false),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        false,
    ),
    b("coordination.k8s.io", "v1", "Lease", true),
    b("events.k8s.io", "v1", "Event", true),
    b("discovery.k8s.io", "v1", "EndpointSlice", true),
    b(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        false,
    ),
    b("apiregistration.k8s.io", "v1", "APIService", false),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        false,
    ),
    b(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        false,
    ),
    b("storage.k8s.io", "v1", "StorageClass", false),
    b("storage.k8s.io", "v1", "CSIDriver", false),
    b("storage.k8s.io", "v1", "CSINode", false),
    b("storage.k8s.io", "v1", "VolumeAttachment", false),
    b("scheduling.k8s.io", "v1", "PriorityClass", false),
    b("node.k8s.io", "v1", "RuntimeClass", false),
    b(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        false,
    ),
    b(
        "flowcontrol.apiserver.k8s.io",
        "v1beta1",
        "FlowSchema",
        false,
    ),
    b(
        "flowcontrol.apiserver.k8s.io",
        "v1beta1",
        "PriorityLevelConfiguration",
        false,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Model;

    fn k(s: &str) -> KindRef {
        s.parse().unwrap()
    }

    #[test]
    fn every_spelling_parses_and_prints_back() {
        for (written, group, version) in [
            ("ConfigMap", None, None),
            ("Deployment.apps", Some("apps"), None),
            ("v1/ConfigMap", Some(""), Some("v1")),
            ("apps/v1/Deployment", Some("apps"), Some("v1")),
        ] {
            let r = k(written);
            assert_eq!(r.group.as_deref(), group, "{written}");
            assert_eq!(r.version.as_deref(), version, "{written}");
            assert_eq!(r.to_string(), written);
        }
        for bad in ["", "a/b/c/D", "v1/", "Config Map", "apps//Deployment"] {
            assert!(bad.parse::<KindRef>().is_err(), "{bad:?}");
        }
    }

    /// Every reader of kinds agrees about a bare non-CRD kind: a bare `Deployment` is in
    /// `apps`, not the core group, for `khai generate rbac` too.
    #[test]
    fn a_bare_built_in_kind_resolves_to_its_group_everywhere() {
        let model = Model::default();
        let d = model.resolve_kind(&k("Deployment"));
        assert_eq!(d.kind.group.as_deref(), Some("apps"));
        assert_eq!(
            (d.plural.as_str(), d.namespaced, d.known),
            ("deployments", true, true)
        );
        let ns = model.resolve_kind(&k("Namespace"));
        assert!(!ns.namespaced);
        let unknown = model.resolve_kind(&k("Widgte"));
        assert!(!unknown.known);
        assert!(k("Deployment").compatible(&KindRef::from_api_version("apps/v1", "Deployment")));
        assert!(!k("Deployment.apps").compatible(&KindRef::from_api_version(
            "extensions/v1beta1",
            "Deployment"
        )));
    }
}
