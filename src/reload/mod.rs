//! Hot reload: follows the config's source and hands the daemon each new [`Operator`] that
//! loads cleanly.
//!
//! Two sources ([`Source`]): a file or directory on disk, polled ([`dir`]), or a ConfigMap read
//! and watched through the API ([`configmap`]), which reaches every replica as soon as the API
//! server has the change, with no kubelet volume sync in between.
//!
//! A change that loads is sent to the daemon, which swaps it in (see [`crate::daemon`]). One that
//! does not is reported by [`Failures`] and nothing else happens: the last good config keeps
//! running, and the next change is tried again. This module never touches the cluster's
//! objects.

pub(crate) mod configmap;
pub(crate) mod dir;

pub(crate) use dir::fingerprint;

use crate::events::{Event, EventType, Recorder, Reporter};
use crate::operator::Operator;
use k8s_openapi::api::core::v1::ObjectReference;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch as latest;

/// Where `khai run` reads its config from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A file, or a directory holding `operator.toml` (a mounted ConfigMap included).
    Path(PathBuf),
    /// A ConfigMap read and watched through the API, written `configmap:NAMESPACE/NAME`.
    ConfigMap(configmap::Ref),
}

impl std::str::FromStr for Source {
    type Err = configmap::BadRef;

    fn from_str(s: &str) -> Result<Self, configmap::BadRef> {
        match s.strip_prefix(configmap::PREFIX) {
            Some(rest) => rest.parse().map(Source::ConfigMap),
            None => Ok(Source::Path(PathBuf::from(s))),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Path(p) => write!(f, "{}", p.display()),
            Source::ConfigMap(r) => write!(f, "{r}"),
        }
    }
}

/// Where a failed reload is reported besides the log and the metric: a Warning Event regarding
/// the config's ConfigMap (API source), or khai's own Pod when `POD_NAME` and `POD_NAMESPACE`
/// say which Pod that is (directory source).
#[derive(Clone)]
pub(crate) struct Failures {
    event: Option<(Recorder, ObjectReference)>,
}

impl Failures {
    /// Reads `POD_NAME` and `POD_NAMESPACE`; without both, failures are only logged and counted.
    pub(crate) fn from_env(client: &kube::Client, operator: &str) -> Self {
        let regarding = crate::events::own_pod();
        Self::regarding(client, operator, regarding)
    }

    /// Failures recorded as Events regarding `object` (the config's ConfigMap), or only logged
    /// and counted without one.
    pub(crate) fn regarding(
        client: &kube::Client,
        operator: &str,
        object: Option<ObjectReference>,
    ) -> Self {
        let event = object.map(|object| {
            let instance = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty());
            let recorder = Recorder::new(
                client.clone(),
                Reporter {
                    controller: format!("khai-{operator}"),
                    instance,
                },
            );
            (recorder, object)
        });
        Self { event }
    }

    /// Logs `error` (whose text starts with file:line), counts a failed reload and records the
    /// Event. The running config is not touched.
    pub(crate) async fn report(&self, error: &str) {
        // Counted before it is logged, so whoever reads the log line finds the count up to date.
        crate::metrics::config_reloaded(false);
        crate::console::reload_failed(error);
        tracing::error!(%error, "config reload failed; still running the last good config");
        let Some((recorder, regarding)) = &self.event else {
            return;
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "ConfigReloadFailed".into(),
            note: Some(error.chars().take(1024).collect()),
            action: "Reload".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, regarding).await {
            tracing::debug!(error = %e, "failed to publish the reload failure event");
        }
    }
}

/// The newest version that loaded, as a source's watch publishes it. Only the newest counts: a
/// follower that was busy (a standby replica, a controller draining) skips straight to it.
pub(crate) type Versions = latest::Receiver<Option<Arc<Operator>>>;

/// Where a source's watch publishes each version that loads.
pub(crate) fn versions() -> (Publisher, Versions) {
    latest::channel(None)
}

/// What the daemon receives from a source's running watch: each new version that loaded, and where to
/// report a version that loaded but could not be started (an unknown kind, a CRD the API server
/// rejected).
pub(crate) struct Updates {
    pub versions: Versions,
    pub failures: Failures,
}

/// The sending side of [`Versions`].
pub(crate) type Publisher = latest::Sender<Option<Arc<Operator>>>;
