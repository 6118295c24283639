//! `ctx.secret(name, key)`: the Secrets `[operator] secrets` names, and only those, read from a
//! watch of each by name, so RBAC grants them by `resourceNames` and nothing wider.
//!
//! An entry `"name"` is that Secret in every watched namespace (the object's namespace is the
//! one read), `"namespace/name"` that one Secret. The opt-in `"*"` (or `"namespace/*"`) is every
//! Secret there, for objects that name their own credentials: one watch of all of them, which
//! RBAC grants without `resourceNames`. A Secret the config does not name is an error
//! that says which entry to add; a missing Secret or key is `()`. Values never appear in logs or
//! errors.

use crate::config::http::{ANY_SECRET, SecretName};
use crate::watch::{Filter, Informer, Informers, Kind};
use base64::Engine as _;
use std::sync::Arc;

/// Why a Secret could not be read; messages name Secrets and keys, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "ctx.secret: Secret {namespace}/{name} is not one the config lets scripts read: add \
         \"{namespace}/{name}\" (or \"{name}\", for every watched namespace) to [operator] secrets"
    )]
    NotListed { namespace: String, name: String },
    #[error(
        "ctx.secret: the object has no namespace: name the Secret's, ctx.secret(namespace, name, \
         key)"
    )]
    NoNamespace,
    #[error("ctx.secret: Secret {namespace}/{name} is not read from the API server yet")]
    NotReady { namespace: String, name: String },
    #[error("ctx.secret: key {key:?} of Secret {namespace}/{name} is not UTF-8 text")]
    NotText {
        namespace: String,
        name: String,
        key: String,
    },
}

/// The Secrets one operator's scripts may read, each from its own watch.
#[derive(Default)]
pub struct Secrets {
    /// One per configured entry and namespace it covers (`None`: every namespace).
    watches: Vec<(SecretName, Option<String>, Arc<Informer>)>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.watches.iter().map(|(n, _, _)| n.to_string()))
            .finish()
    }
}

/// Secrets, as the informers address them.
pub(crate) fn secret_kind() -> Kind {
    Kind {
        resource: kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        namespaced: true,
    }
}

impl Secrets {
    /// Starts a watch of each Secret `names` lists (through `informers`, which own them): an
    /// unqualified name in each of `watched` (or across the cluster when it is empty).
    pub fn start(names: &[SecretName], watched: &[String], informers: &Informers) -> Self {
        let kind = secret_kind();
        let mut watches = Vec::new();
        for n in names {
            let filter = Filter {
                labels: None,
                fields: (n.name != ANY_SECRET).then(|| format!("metadata.name={}", n.name)),
            };
            let namespaces: Vec<Option<String>> = match (&n.namespace, watched.is_empty()) {
                (Some(ns), _) => vec![Some(ns.clone())],
                (None, true) => vec![None],
                (None, false) => watched.iter().cloned().map(Some).collect(),
            };
            for ns in namespaces {
                let informer = informers.filtered(&kind, ns.as_deref(), &filter);
                watches.push((n.clone(), ns, informer));
            }
        }
        Secrets { watches }
    }

    /// The Secrets `names` lists, read from `objects` instead of watches: for `khai test`, whose
    /// cases list the Secrets there are. A listed Secret that `objects` lacks reads as missing;
    /// one `names` does not list is refused as at run time.
    pub(crate) fn from_objects(
        names: &[SecretName],
        objects: Vec<kube::api::DynamicObject>,
    ) -> Self {
        let informer = Informer::with_objects(secret_kind(), None, objects);
        Secrets {
            watches: names
                .iter()
                .map(|n| (n.clone(), None, informer.clone()))
                .collect(),
        }
    }

    /// Whether `[operator] secrets` lets scripts read Secret `namespace/name`.
    pub fn lists(names: &[SecretName], namespace: &str, name: &str) -> bool {
        names.iter().any(|n| n.covers(namespace, name))
    }

    /// The watches it reads, to keep running while a controller uses them.
    pub fn informers(&self) -> impl Iterator<Item = &Arc<Informer>> {
        self.watches.iter().map(|(_, _, i)| i)
    }

    /// The value of `key` in Secret `namespace/name` (`namespace` defaults to the object's).
    pub fn read(
        &self,
        namespace: Option<&str>,
        name: &str,
        key: &str,
    ) -> Result<Option<String>, Error> {
        let namespace = namespace.ok_or(Error::NoNamespace)?;
        let watch = self.watches.iter().find(|(n, ns, _)| {
            n.covers(namespace, name) && ns.as_deref().is_none_or(|w| w == namespace)
        });
        let Some((_, _, informer)) = watch else {
            return Err(Error::NotListed {
                namespace: namespace.into(),
                name: name.into(),
            });
        };
        if !informer.is_synced() {
            return Err(Error::NotReady {
                namespace: namespace.into(),
                name: name.into(),
            });
        }
        let found = informer.store().state().into_iter().find(|s| {
            s.metadata.name.as_deref() == Some(name)
                && s.metadata.namespace.as_deref() == Some(namespace)
        });
        let Some(secret) = found else {
            return Ok(None);
        };
        let Some(encoded) = secret.data.get("data").and_then(|d| d.get(key)) else {
            return Ok(None);
        };
        let not_text = || Error::NotText {
            namespace: namespace.into(),
            name: name.into(),
            key: key.into(),
        };
        let bytes = encoded
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .ok_or_else(not_text)?;
        String::from_utf8(bytes).map(Some).map_err(|_| not_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;
    use serde_json::json;

    fn secret(ns: &str, name: &str, data: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": name, "namespace": ns },
            "data": data,
        }))
        .unwrap()
    }

    fn secrets(entries: &[&str], objects: Vec<DynamicObject>) -> Secrets {
        let informer = Informer::with_objects(secret_kind(), None, objects);
        Secrets {
            watches: entries
                .iter()
                .map(|e| (e.parse().unwrap(), None, informer.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_listed_secret_reads_as_text_and_missing_ones_as_nothing() {
        let s = secrets(
            &["db-credentials", "billing/api-token"],
            vec![
                secret("a", "db-credentials", json!({ "password": "aHVudGVyMg==" })),
                secret("billing", "api-token", json!({ "token": "dG9r" })),
            ],
        );
        assert_eq!(
            s.read(Some("a"), "db-credentials", "password")
                .unwrap()
                .as_deref(),
            Some("hunter2")
        );
        assert_eq!(s.read(Some("a"), "db-credentials", "user").unwrap(), None);
        assert_eq!(
            s.read(Some("b"), "db-credentials", "password").unwrap(),
            None
        );
        assert_eq!(
            s.read(Some("billing"), "api-token", "token")
                .unwrap()
                .as_deref(),
            Some("tok")
        );
    }

    #[test]
    fn a_secret_the_config_does_not_name_is_an_error_naming_the_entry_to_add() {
        let s = secrets(&["billing/api-token"], vec![]);
        let err = s.read(Some("other"), "api-token", "token").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ctx.secret: Secret other/api-token is not one the config lets scripts read: add \
             \"other/api-token\" (or \"api-token\", for every watched namespace) to [operator] \
             secrets"
        );
        assert_eq!(
            s.read(None, "api-token", "t").unwrap_err(),
            Error::NoNamespace
        );
    }

    #[test]
    fn a_value_that_is_not_text_is_an_error_without_the_value() {
        let s = secrets(&["k"], vec![secret("a", "k", json!({ "bin": "/w==" }))]);
        let err = s.read(Some("a"), "k", "bin").unwrap_err().to_string();
        assert_eq!(
            err,
            "ctx.secret: key \"bin\" of Secret a/k is not UTF-8 text"
        );
    }

    #[test]
    fn the_opt_in_star_reads_any_secret_of_its_namespaces_by_the_name_the_script_gives() {
        let objects = vec![
            secret("a", "from-the-object", json!({ "token": "dG9r" })),
            secret("b", "elsewhere", json!({ "token": "dG9r" })),
        ];
        let any = secrets(&["*"], objects.clone());
        assert_eq!(
            any.read(Some("a"), "from-the-object", "token")
                .unwrap()
                .as_deref(),
            Some("tok")
        );
        assert_eq!(any.read(Some("a"), "missing", "token").unwrap(), None);
        let in_b = secrets(&["b/*"], objects);
        assert_eq!(
            in_b.read(Some("b"), "elsewhere", "token")
                .unwrap()
                .as_deref(),
            Some("tok")
        );
        assert!(matches!(
            in_b.read(Some("a"), "from-the-object", "token"),
            Err(Error::NotListed { .. })
        ));
        let bad: Result<SecretName, _> = "a/b*".parse();
        assert!(bad.is_err(), "only a whole name is a wildcard");
    }
}
