//! A canary rollout's state kept in the API server, so that it survives a restart and a leader
//! change: annotations of a Lease of khai's own, `khai-<operator>-rollout` in khai's namespace
//! (where the leader election Lease is, and with the same grants: get, create, update).

use super::Phase;
use crate::client::ApiError;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ACTIVE: &str = "khai.dev/rollout-active";
const CANDIDATE: &str = "khai.dev/rollout-candidate";
const SHARE: &str = "khai.dev/rollout-share";
const STARTED: &str = "khai.dev/rollout-started";
const PHASE: &str = "khai.dev/rollout-phase";

/// What is kept about one rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Saved {
    /// Content hashes of the two revisions ([`crate::operator::Operator::content_hash`]).
    pub active: String,
    pub candidate: String,
    /// Percent of the objects the candidate reconciles while in the canary.
    pub share: u8,
    /// When the rollout started, in seconds since the Unix epoch.
    pub started: u64,
    pub phase: Phase,
}

impl Saved {
    fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ACTIVE.into(), self.active.clone()),
            (CANDIDATE.into(), self.candidate.clone()),
            (SHARE.into(), self.share.to_string()),
            (STARTED.into(), self.started.to_string()),
            (PHASE.into(), self.phase.as_str().into()),
        ])
    }

    /// Reads the annotations; `None` when one is missing or unreadable (a Lease edited by hand
    /// starts a new rollout).
    fn read(a: &BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            active: a.get(ACTIVE)?.clone(),
            candidate: a.get(CANDIDATE)?.clone(),
            share: a.get(SHARE)?.parse().ok().filter(|s| *s <= 100)?,
            started: a.get(STARTED)?.parse().ok()?,
            phase: Phase::parse(a.get(PHASE)?)?,
        })
    }

    /// How long ago the rollout started (0 if its start is in the future).
    pub(crate) fn age(&self) -> Duration {
        now_secs()
            .checked_sub(self.started)
            .map_or(Duration::ZERO, Duration::from_secs)
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why the rollout's state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("cannot read the rollout Lease {namespace}/{name}: {cause}")]
    Read {
        namespace: String,
        name: String,
        cause: ApiError,
    },
    #[error("cannot write the rollout Lease {namespace}/{name}: {cause}")]
    Write {
        namespace: String,
        name: String,
        cause: ApiError,
    },
}

/// The Lease a rollout is kept in.
pub(crate) struct Store {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl Store {
    pub(crate) fn new(client: kube::Client, namespace: &str, operator: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.into(),
            name: format!("khai-{operator}-rollout"),
        }
    }

    /// The Lease's name, for logs.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The kept state; `None` when there is none.
    pub(crate) async fn load(&self) -> Result<Option<Saved>, Error> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| Error::Read {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                cause: e.into(),
            })?;
        Ok(lease.and_then(|l| Saved::read(&l.metadata.annotations.unwrap_or_default())))
    }

    /// Keeps `saved`, creating the Lease if there is none; a conflict with another writer is
    /// read again and retried a few times.
    pub(crate) async fn save(&self, saved: &Saved) -> Result<(), Error> {
        let write = |e: kube::Error| Error::Write {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause: e.into(),
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self.api.get_opt(&self.name).await.map_err(write)?;
            let sent = match current {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            namespace: Some(self.namespace.clone()),
                            annotations: Some(saved.annotations()),
                            ..ObjectMeta::default()
                        },
                        spec: Some(Default::default()),
                    };
                    self.api.create(&PostParams::default(), &lease).await
                }
                Some(mut lease) => {
                    let mut a = lease.metadata.annotations.take().unwrap_or_default();
                    a.extend(saved.annotations());
                    lease.metadata.annotations = Some(a);
                    self.api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await
                }
            };
            match sent {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && attempts < 5 => {}
                Err(e) => return Err(write(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_reads_back_from_its_annotations_and_a_broken_one_is_none() {
        let saved = Saved {
            active: "a1".into(),
            candidate: "c2".into(),
            share: 10,
            started: 1_700_000_000,
            phase: Phase::RolledBack,
        };
        let mut a = saved.annotations();
        assert_eq!(a[PHASE], "rolled-back");
        assert_eq!(Saved::read(&a), Some(saved));
        a.insert(SHARE.into(), "101".into());
        assert_eq!(Saved::read(&a), None);
    }
}
