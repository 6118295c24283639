//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas exactly one
//! reconciles.
//!
//! The algorithm is client-go's `leaderelection`, written directly on the Lease API: every
//! `retry_period` a replica reads the Lease; the holder renews it, the others take it once it is
//! free (no holder, after a release) or expired. Expiry is judged by the local clock from the
//! moment this replica last saw the Lease record *change*, never by comparing timestamps written
//! by another machine, so clock skew between nodes cannot cause two leaders. Every write carries
//! the resourceVersion it read (optimistic concurrency): of two replicas racing for a free Lease
//! the API server lets exactly one win.
//!
//! A leader that has not renewed for `renew_deadline` (shorter than `lease_duration`) reports the
//! lease lost, so it stops before any other replica may take over. On shutdown the leader
//! releases the Lease (no holder, 1 s duration) so a successor takes over at its next retry
//! instead of waiting for the lease to expire.
//!
//! No crate is used: the protocol is small, and owning it keeps it on kube 5 with expiry judged
//! by observed change as client-go does.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::time::Duration;
use tokio::time::Instant;

/// How one replica takes part in the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Name of the Lease object.
    pub lease_name: String,
    /// Namespace of the Lease object.
    pub namespace: String,
    /// This replica's name in `holderIdentity`; unique among the replicas.
    pub identity: String,
    /// How long a lease is valid without renewal; others wait this long before taking it.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// How often every replica tries to acquire or renew.
    pub retry_period: Duration,
    /// Labels of the Lease when this replica creates it (shard Leases are listed by label).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Errors in the settings; everything at run time is retried.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Error {
    #[error(
        "leader election: renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?})"
    )]
    RenewNotShorter { renew: Duration, lease: Duration },
    #[error(
        "leader election: retry period ({retry:?}) must be shorter than the renew deadline ({renew:?})"
    )]
    RetryNotShorter { retry: Duration, renew: Duration },
}

impl Settings {
    /// Checks the timing rules client-go enforces: retry < renew deadline < lease duration.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.renew_deadline >= self.lease_duration {
            return Err(Error::RenewNotShorter {
                renew: self.renew_deadline,
                lease: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(Error::RetryNotShorter {
                retry: self.retry_period,
                renew: self.renew_deadline,
            });
        }
        Ok(())
    }
}

/// The part of a Lease whose change shows its holder is alive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew: Option<MicroTime>,
    transitions: Option<i32>,
}

/// One replica's view of the election.
pub(crate) struct Elector {
    api: Api<Lease>,
    settings: Settings,
    /// The record last seen and when (local clock) it was first seen.
    observed: Option<(Record, Instant)>,
}

impl Elector {
    pub(crate) fn new(client: kube::Client, settings: Settings) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Tries every retry period until this replica holds the lease.
    pub(crate) async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.settings.lease_name, error = %crate::client::ApiError::from(e), "failed to read or take the lease; retrying")
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews every retry period for as long as the caller keeps polling; returns why leading
    /// ended when another replica holds the lease or no renewal succeeded for the renew
    /// deadline. Dropping the future stops renewing (then [`Self::release`]).
    pub(crate) async fn hold(&mut self) -> String {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            let deadline = renewed + self.settings.renew_deadline;
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => renewed = Instant::now(),
                Ok(Ok(false)) => return "another replica holds the lease".into(),
                Ok(Err(e)) => {
                    tracing::warn!(error = %crate::client::ApiError::from(e), "failed to renew the lease; retrying")
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return format!(
                    "not renewed within the renew deadline of {:?}",
                    self.settings.renew_deadline
                );
            }
        }
    }

    /// Gives the lease up if this replica holds it, so a successor need not wait for expiry.
    pub(crate) async fn release(&mut self) {
        let lease = match self.api.get_opt(&self.settings.lease_name).await {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %crate::client::ApiError::from(e), "failed to read the lease to release it");
                return;
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return;
        }
        let released = LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now()),
            ..spec
        };
        let lease = Lease {
            spec: Some(released),
            ..lease
        };
        match self
            .api
            .replace(&self.settings.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.settings.lease_name, "released the lease"),
            Err(e) => {
                tracing::warn!(error = %crate::client::ApiError::from(e), "failed to release the lease")
            }
        }
    }

    /// One round: read the lease, then create, renew or take it when allowed. `Ok(true)` when
    /// this replica holds it afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.settings.lease_name).await? else {
            return self.create().await;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = Record {
            holder: spec.holder_identity.clone(),
            renew: spec.renew_time.clone(),
            transitions: spec.lease_transitions,
        };
        let now_local = Instant::now();
        let first_seen = match &self.observed {
            Some((r, at)) if *r == seen => *at,
            _ => now_local,
        };
        self.observed = Some((seen, first_seen));
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        let mine = holder == self.settings.identity;
        let valid_for = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.settings.lease_duration, Duration::from_secs);
        if !mine && !holder.is_empty() && now_local < first_seen + valid_for {
            return Ok(false);
        }
        let next = self.next_spec(&spec, mine);
        let record = Record {
            holder: next.holder_identity.clone(),
            renew: next.renew_time.clone(),
            transitions: next.lease_transitions,
        };
        let lease = Lease {
            spec: Some(next),
            ..lease
        };
        // `lease` carries the resourceVersion read above: a concurrent writer makes this a 409.
        match self
            .api
            .replace(&self.settings.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = Some((record, Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The spec this replica writes to hold the lease, renewing when it is already `mine`.
    fn next_spec(&self, spec: &LeaseSpec, mine: bool) -> LeaseSpec {
        let now = now();
        let transitions = spec.lease_transitions.unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(seconds(self.settings.lease_duration)),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine { transitions } else { transitions + 1 }),
            ..spec.clone()
        }
    }

    async fn create(&mut self) -> Result<bool, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.lease_name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                labels: (!self.settings.labels.is_empty()).then(|| self.settings.labels.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                lease_transitions: Some(0),
                ..self.next_spec(&LeaseSpec::default(), true)
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Takes the Lease `name` from whoever holds it, for `hold`, so no replica leads meanwhile:
/// the leader finds another holder at its next renewal and stops reconciling, and standbys wait
/// for a lease that stays valid. Returns how long the replaced leader may still be finishing
/// (its lease duration), `None` when nobody held the Lease.
pub(crate) async fn take_over(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    identity: &str,
    hold: Duration,
) -> Result<Option<Duration>, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let ours = |spec: LeaseSpec, transitions: i32| LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(seconds(hold)),
        acquire_time: Some(now()),
        renew_time: Some(now()),
        lease_transitions: Some(transitions),
        ..spec
    };
    // A leader renewing at the same moment makes the replace a conflict: read and try again.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(lease) = api.get_opt(name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(ours(LeaseSpec::default(), 0)),
            };
            match api.create(&PostParams::default(), &lease).await {
                Err(kube::Error::Api(s)) if s.code == 409 && attempts < 5 => continue,
                other => return other.map(|_| None),
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let held = spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty() && h != identity);
        let finishing = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs);
        let transitions = spec.lease_transitions.unwrap_or(0) + 1;
        let lease = Lease {
            spec: Some(ours(spec, transitions)),
            ..lease
        };
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => return Ok(held.then(|| finishing.unwrap_or(hold))),
            Err(kube::Error::Api(s)) if s.code == 409 && attempts < 5 => {}
            Err(e) => return Err(e),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// Whole seconds, at least 1, as the Lease API counts them.
fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(lease: u64, renew: u64, retry: u64) -> Settings {
        Settings {
            lease_name: "l".into(),
            namespace: "n".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
            labels: Default::default(),
        }
    }

    #[test]
    fn renew_deadline_must_be_shorter_than_the_lease_and_retry_shorter_than_renew() {
        assert_eq!(settings(15, 10, 2).validate(), Ok(()));
        assert!(matches!(
            settings(10, 10, 2).validate(),
            Err(Error::RenewNotShorter { .. })
        ));
        assert!(matches!(
            settings(15, 10, 10).validate(),
            Err(Error::RetryNotShorter { .. })
        ));
    }

    #[test]
    fn sub_second_leases_are_written_as_one_second() {
        assert_eq!(seconds(Duration::from_millis(300)), 1);
        assert_eq!(seconds(Duration::from_secs(4)), 4);
    }

    use crate::fake_api::FakeApi;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/n/leases/l";

    fn elector(api: &FakeApi, identity: &str) -> Elector {
        let settings = Settings {
            identity: identity.into(),
            ..settings(15, 10, 2)
        };
        Elector::new(api.client(), settings)
    }

    fn holder(api: &FakeApi) -> Option<String> {
        api.get(LEASE)?["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_string)
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_replicas_one_leads_and_the_other_takes_over_only_once_the_lease_expires() {
        let api = FakeApi::default();
        let mut a = elector(&api, "a");
        a.acquire().await;
        assert_eq!(holder(&api).as_deref(), Some("a"));
        let started = Instant::now();
        let b = tokio::spawn(async move {
            let mut b = elector(&api, "b");
            b.acquire().await;
            (Instant::now(), holder(&api))
        });
        // "a" renews nothing from here on: "b" must wait out the whole lease, from the moment
        // it saw the record, judged by its own clock.
        let (took, held) = tokio::time::timeout(Duration::from_secs(60), b)
            .await
            .expect("b never took the lease")
            .unwrap();
        let waited = took - started;
        assert!(
            waited >= Duration::from_secs(15) && waited <= Duration::from_secs(15 + 2),
            "took over after {waited:?}"
        );
        assert_eq!(held.as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_is_taken_at_the_next_retry() {
        let api = FakeApi::default();
        let mut a = elector(&api, "a");
        a.acquire().await;
        let started = Instant::now();
        let waiting = {
            let api = api.clone();
            tokio::spawn(async move {
                elector(&api, "b").acquire().await;
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        a.release().await;
        let took = waiting.await.unwrap() - started;
        assert!(
            took <= Duration::from_secs(3 + 2 + 1),
            "the successor waited {took:?} instead of its next retry"
        );
        assert_eq!(holder(&api).as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_stops_before_anyone_else_may_lead() {
        let api = FakeApi::default();
        let mut a = elector(&api, "a");
        a.acquire().await;
        let started = Instant::now();
        api.fail(LEASE, 500, 100);
        let why = a.hold().await;
        let held = Instant::now() - started;
        assert!(why.contains("renew deadline"), "{why}");
        assert!(
            held < Duration::from_secs(15),
            "still leading after {held:?}: another replica could have taken over"
        );
    }
}
