//! The config read from one ConfigMap through the API, and watched: `khai run --config
//! configmap:NAMESPACE/NAME`.
//!
//! The ConfigMap's keys are the config's files (`operator.toml`, and `scripts__x.rhai` for
//! `scripts/x.rhai`; see [`crate::config::files`]). They are loaded in memory, so nothing is
//! written to disk and a read-only root filesystem needs no writable volume. The watch selects
//! the one ConfigMap by `metadata.name`, so RBAC can grant get, list and watch on that name alone
//! (`resourceNames`). A change reaches every replica as soon as the API server has it, with no
//! kubelet volume sync in between, and is loaded on the blocking pool. A version that loads is
//! published to the daemon; one that does not is reported through [`Failures`] (an Event
//! regarding the ConfigMap, the metric, the log) and the last good version keeps running. A
//! deleted ConfigMap is logged and changes nothing.

use super::{Failures, Publisher};
use crate::config::files::display_root;
use crate::operator::Operator;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How a ConfigMap source is written on the command line.
pub(crate) const PREFIX: &str = "configmap:";

/// The ConfigMap a config is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ref {
    pub namespace: String,
    pub name: String,
}

/// A `configmap:` source that does not name a ConfigMap; holds what followed the prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {PREFIX}NAMESPACE/NAME, got {PREFIX}{0}")]
pub(crate) struct BadRef(String);

impl std::str::FromStr for Ref {
    type Err = BadRef;

    /// Parses `NAMESPACE/NAME` (what follows `configmap:`).
    fn from_str(s: &str) -> Result<Self, BadRef> {
        let bad = || BadRef(s.into());
        let (namespace, name) = s.split_once('/').ok_or_else(bad)?;
        let valid = |part: &str| {
            !part.is_empty()
                && part.len() <= 253
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !valid(namespace) || !valid(name) {
            return Err(bad());
        }
        Ok(Ref {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PREFIX}{}/{}", self.namespace, self.name)
    }
}

/// Why the config could not be read from its ConfigMap.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The API server refused or could not be reached.
    #[error("failed to read {target}: {message}")]
    Read {
        target: Ref,
        message: String,
        #[source]
        source: kube::Error,
    },
    /// The ConfigMap's files do not make a valid operator.
    #[error(transparent)]
    Load(#[from] crate::operator::Error),
    /// Loading panicked (a bug); the daemon keeps running.
    #[error("failed to load {0}: the loader panicked")]
    Panicked(Ref),
}

/// The operator loaded from the ConfigMap, with what the watch and failure reports need.
pub(crate) struct Loaded {
    pub operator: Operator,
    /// [`fingerprint`] of the data it was loaded from.
    pub fingerprint: u64,
    /// The ConfigMap, for Events about failed reloads.
    pub object: ObjectReference,
}

/// Reads the ConfigMap and loads the operator from it (compiling scripts on the blocking pool).
pub(crate) async fn load(client: &kube::Client, target: &Ref) -> Result<Loaded, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &target.namespace);
    let cm = api.get(&target.name).await.map_err(|source| Error::Read {
        target: target.clone(),
        message: api_message(&source),
        source,
    })?;
    let object = object_ref(&cm);
    let (data, version) = contents(cm);
    let fingerprint = fingerprint(&data);
    let operator = load_data(target, data, version).await?;
    Ok(Loaded {
        operator,
        fingerprint,
        object,
    })
}

/// A reference to `cm` for Events (with its uid, so `kubectl describe` lists them).
pub(crate) fn object_ref(cm: &ConfigMap) -> ObjectReference {
    cm.object_ref(&())
}

/// A hash of every key and value: equal exactly when the files are.
pub(crate) fn fingerprint(data: &BTreeMap<String, String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

fn contents(cm: ConfigMap) -> (BTreeMap<String, String>, Option<String>) {
    (cm.data.unwrap_or_default(), cm.metadata.resource_version)
}

async fn load_data(
    target: &Ref,
    data: BTreeMap<String, String>,
    version: Option<String>,
) -> Result<Operator, Error> {
    let root = display_root(&target.namespace, &target.name);
    tokio::task::spawn_blocking(move || Operator::load_memory(&root, data, version))
        .await
        .map_err(|_| Error::Panicked(target.clone()))?
        .map_err(Error::from)
}

/// The API server's own message for an API error; the error's text otherwise.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

fn watch_message(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_message(e),
        watcher::Error::WatchError(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Watches the ConfigMap until `shutdown`, publishing to `tx` every version that loads.
/// `current` is the [`fingerprint`] of the version already running.
pub(crate) async fn watch(
    client: kube::Client,
    target: Ref,
    current: u64,
    tx: Publisher,
    failures: Failures,
    shutdown: CancellationToken,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &target.namespace);
    let by_name = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
    let events = watcher(api, by_name).default_backoff();
    futures::pin_mut!(events);
    tracing::info!(source = %target, "watching the config for changes");
    let mut tried = current;
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = shutdown.cancelled() => return,
        };
        let cm = match event {
            // A watcher's stream does not end; should it, there is nothing left to follow.
            None => return,
            Some(Err(e)) => {
                tracing::warn!(source = %target, error = %watch_message(&e), "failed to watch the config; retrying");
                continue;
            }
            Some(Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm))) => cm,
            Some(Ok(watcher::Event::Delete(_))) => {
                tracing::warn!(source = %target, "the config's ConfigMap was deleted; still running the last good config");
                continue;
            }
            Some(Ok(watcher::Event::Init | watcher::Event::InitDone)) => continue,
        };
        let (data, version) = contents(cm);
        let now = fingerprint(&data);
        if now == tried {
            continue;
        }
        tried = now;
        tracing::info!(source = %target, version = version.as_deref().unwrap_or_default(), "config changed; reloading");
        match load_data(&target, data, version).await {
            Ok(op) => {
                tx.send_replace(Some(Arc::new(op)));
            }
            Err(e) => failures.report(&e.to_string()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configmap_source_names_namespace_and_name() {
        let r: Ref = "ops/khai-cache-config".parse().unwrap();
        assert_eq!(r.namespace, "ops");
        assert_eq!(r.name, "khai-cache-config");
        assert_eq!(r.to_string(), "configmap:ops/khai-cache-config");
        for bad in ["ops", "/x", "ops/", "ops/a/b", "Ops/x"] {
            assert_eq!(
                bad.parse::<Ref>().unwrap_err().to_string(),
                format!("expected configmap:NAMESPACE/NAME, got configmap:{bad}")
            );
        }
    }

    #[test]
    fn the_fingerprint_changes_with_any_key_or_value() {
        let mut data = BTreeMap::from([("operator.toml".to_string(), "a".to_string())]);
        let first = fingerprint(&data);
        assert_eq!(fingerprint(&data.clone()), first);
        data.insert("scripts__x.rhai".into(), String::new());
        let second = fingerprint(&data);
        assert_ne!(second, first);
        data.insert("scripts__x.rhai".into(), "x".into());
        assert_ne!(fingerprint(&data), second);
    }
}
