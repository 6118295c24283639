//! The self-signed CA and serving certificate every replica shares, kept in one Secret
//! (`khai-<operator>-webhook-tls`, type `kubernetes.io/tls` plus `ca.crt` and `ca.key`) in
//! khai's own namespace, so the caBundle each replica installs is the same one.
//!
//! At start a replica reads the Secret and [`decide`]s: use it as it is, issue a new serving
//! certificate under the same CA, or make a new CA. It creates the Secret when absent and
//! replaces it guarded by its resourceVersion; when another replica wrote first (409), it reads
//! the winner's and decides again. Replicas that need different names (two local processes
//! with different `--webhook-url` hosts) each add theirs: the stored certificate covers the
//! union, and a replica keeps serving the one it loaded, which the same CA signed.

use super::ca::Material;
use super::tls;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;

/// A certificate or CA this close to expiry is replaced.
const RENEW_BEFORE: jiff::SignedDuration = jiff::SignedDuration::from_hours(30 * 24);
/// Past this many names in the union, the new certificate covers only this replica's names.
const MAX_NAMES: usize = 64;
/// Conflicting writes in a row before giving up.
const ATTEMPTS: usize = 5;
/// Annotations recording what the stored certificate covers and when it and its CA expire.
const NAMES: &str = "khai.dev/webhook-names";
const CA_NOT_AFTER: &str = "khai.dev/ca-not-after";
const CERT_NOT_AFTER: &str = "khai.dev/cert-not-after";

/// What to do with a stored CA and certificate, for a replica that needs `names`.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// It covers the names and neither expires soon.
    Use,
    /// The CA is good; issue a certificate for these names under it.
    Reissue(Vec<String>),
    /// The CA expires soon: a new CA and a certificate for these names.
    NewCa(Vec<String>),
}

/// Decides what a replica needing `need` does with `stored` at `now`.
pub(crate) fn decide(stored: &Material, need: &[String], now: jiff::Timestamp) -> Decision {
    let soon = now + RENEW_BEFORE;
    if stored.ca_not_after <= soon {
        return Decision::NewCa(need.to_vec());
    }
    let missing: Vec<String> = need
        .iter()
        .filter(|n| !stored.names.contains(n))
        .cloned()
        .collect();
    if missing.is_empty() && stored.cert_not_after > soon {
        return Decision::Use;
    }
    let mut names = stored.names.clone();
    names.extend(missing);
    if names.len() > MAX_NAMES {
        names = need.to_vec();
    }
    Decision::Reissue(names)
}

/// Where the shared Secret lives.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub namespace: String,
    pub name: String,
}

/// Why the shared Secret could not be used; khai then makes a CA of its own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("no permission to {verb} the Secret {}/{}: {cause}", place.namespace, place.name)]
    Forbidden {
        verb: &'static str,
        place: Place,
        cause: crate::client::ApiError,
    },
    #[error("cannot {verb} the Secret {}/{}: {cause}", place.namespace, place.name)]
    Api {
        verb: &'static str,
        place: Place,
        cause: crate::client::ApiError,
    },
    #[error(
        "the Secret {}/{} changed under khai {ATTEMPTS} times in a row",
        place.namespace, place.name
    )]
    Contended { place: Place },
    #[error("the Secret {}/{}: {cause}", place.namespace, place.name)]
    Tls { place: Place, cause: tls::Error },
}

impl Error {
    /// Whether the error is a missing permission (RBAC), which the warning names.
    pub(crate) fn is_forbidden(&self) -> bool {
        matches!(self, Error::Forbidden { .. })
    }

    /// Whether asking again soon may succeed: the API server was unreachable, overloaded
    /// (429) or failing (5xx), or other replicas kept writing the Secret.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Error::Api { cause, .. } => cause.code().is_none_or(|c| c == 429 || c >= 500),
            Error::Contended { .. } => true,
            Error::Forbidden { .. } | Error::Tls { .. } => false,
        }
    }
}

/// The CA and serving certificate for a replica needing `need`, from the Secret at `place`,
/// creating or renewing it there as [`decide`] says.
pub(crate) async fn obtain(
    client: &kube::Client,
    place: &Place,
    need: &[String],
) -> Result<Material, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &place.namespace);
    let api_error = |verb: &'static str, e: kube::Error| {
        let cause = crate::client::ApiError::from(e);
        let place = place.clone();
        match cause.code() {
            Some(403) => Error::Forbidden { verb, place, cause },
            _ => Error::Api { verb, place, cause },
        }
    };
    let tls_error = |cause| Error::Tls {
        place: place.clone(),
        cause,
    };
    for _ in 0..ATTEMPTS {
        let now = jiff::Timestamp::now();
        let found = api
            .get_opt(&place.name)
            .await
            .map_err(|e| api_error("get", e))?;
        let Some(found) = found else {
            let made = Material::new(need, now).map_err(tls_error)?;
            match api
                .create(&PostParams::default(), &to_secret(place, &made, None))
                .await
            {
                Ok(_) => {
                    tracing::info!(secret = %place.name, namespace = %place.namespace, "created the shared webhook CA");
                    return Ok(made);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(api_error("create", e)),
            }
        };
        let version = found.metadata.resource_version.clone();
        let made = match from_secret(&found) {
            Some(stored) => match decide(&stored, need, now) {
                Decision::Use => return Ok(stored),
                Decision::Reissue(names) => stored.reissue(&names, now),
                Decision::NewCa(names) => Material::new(&names, now),
            },
            None => Material::new(need, now),
        }
        .map_err(tls_error)?;
        let secret = to_secret(place, &made, version);
        match api
            .replace(&place.name, &PostParams::default(), &secret)
            .await
        {
            Ok(_) => {
                tracing::info!(secret = %place.name, namespace = %place.namespace, names = ?made.names, "renewed the shared webhook certificate");
                return Ok(made);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api_error("update", e)),
        }
    }
    Err(Error::Contended {
        place: place.clone(),
    })
}

/// The Secret holding `made`, replacing the one at `version` when given.
fn to_secret(place: &Place, made: &Material, version: Option<String>) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    let data = BTreeMap::from([
        ("tls.crt".to_string(), bytes(&made.pair.cert)),
        ("tls.key".to_string(), bytes(&made.pair.key)),
        ("ca.crt".to_string(), bytes(&made.ca_cert)),
        ("ca.key".to_string(), bytes(&made.ca_key)),
    ]);
    let annotations = BTreeMap::from([
        (NAMES.to_string(), made.names.join(",")),
        (CA_NOT_AFTER.to_string(), made.ca_not_after.to_string()),
        (CERT_NOT_AFTER.to_string(), made.cert_not_after.to_string()),
    ]);
    let labels = BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_string(),
        "khai".to_string(),
    )]);
    Secret {
        metadata: ObjectMeta {
            name: Some(place.name.clone()),
            namespace: Some(place.namespace.clone()),
            resource_version: version,
            annotations: Some(annotations),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The material in `secret`, or `None` when something is missing or unreadable (it is then
/// replaced).
fn from_secret(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let notes = secret.metadata.annotations.as_ref()?;
    let time = |key: &str| notes.get(key)?.parse::<jiff::Timestamp>().ok();
    let names = notes.get(NAMES)?;
    Some(Material {
        ca_cert: text("ca.crt")?,
        ca_key: text("ca.key")?,
        pair: tls::PemPair {
            cert: text("tls.crt")?,
            key: text("tls.key")?,
        },
        names: names
            .split(',')
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
        ca_not_after: time(CA_NOT_AFTER)?,
        cert_not_after: time(CERT_NOT_AFTER)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    const PATH: &str = "/api/v1/namespaces/khai/secrets/khai-x-webhook-tls";
    const CREATE: &str = "POST /api/v1/namespaces/khai/secrets";
    const REPLACE: &str = "PUT /api/v1/namespaces/khai/secrets/khai-x-webhook-tls";

    fn place() -> Place {
        Place {
            namespace: "khai".into(),
            name: "khai-x-webhook-tls".into(),
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn days(n: i64) -> jiff::SignedDuration {
        jiff::SignedDuration::from_hours(n * 24)
    }

    /// A stored pair for `n`, as if made `age` ago.
    fn stored(n: &[&str], age: jiff::SignedDuration) -> Material {
        Material::new(&names(n), jiff::Timestamp::now() - age).unwrap()
    }

    /// Stores `made` in the fake as another replica would have.
    fn put(api: &FakeApi, made: &Material) {
        let secret = serde_json::to_value(to_secret(&place(), made, None)).unwrap();
        api.put(PATH, secret);
    }

    #[test]
    fn a_fresh_pair_covering_the_names_is_used() {
        let s = stored(&["a", "127.0.0.1"], days(0));
        let now = jiff::Timestamp::now();
        assert_eq!(decide(&s, &names(&["127.0.0.1"]), now), Decision::Use);
        assert_eq!(decide(&s, &names(&["a", "127.0.0.1"]), now), Decision::Use);
    }

    #[test]
    fn a_missing_name_is_added_to_the_stored_ones_under_the_same_ca() {
        let s = stored(&["a", "127.0.0.1"], days(0));
        let now = jiff::Timestamp::now();
        assert_eq!(
            decide(&s, &names(&["b", "127.0.0.1"]), now),
            Decision::Reissue(names(&["a", "127.0.0.1", "b"]))
        );
        let mut crowded = s.clone();
        crowded.names = (0..MAX_NAMES).map(|i| format!("h{i}")).collect();
        assert_eq!(
            decide(&crowded, &names(&["b"]), now),
            Decision::Reissue(names(&["b"])),
            "past the cap only this replica's names"
        );
    }

    #[test]
    fn a_certificate_or_ca_near_expiry_is_renewed() {
        let now = jiff::Timestamp::now();
        let mut s = stored(&["a"], days(0));
        s.cert_not_after = now + days(29);
        assert_eq!(
            decide(&s, &names(&["a"]), now),
            Decision::Reissue(names(&["a"]))
        );
        s.ca_not_after = now + days(29);
        assert_eq!(
            decide(&s, &names(&["a"]), now),
            Decision::NewCa(names(&["a"]))
        );
    }

    #[tokio::test]
    async fn the_first_replica_creates_the_secret_and_the_next_one_uses_it_without_a_write() {
        let api = FakeApi::default();
        let need = names(&["127.0.0.1"]);
        let first = obtain(&api.client(), &place(), &need).await.unwrap();
        assert_eq!(api.writes(), [CREATE]);
        let second = obtain(&api.client(), &place(), &need).await.unwrap();
        assert_eq!(second, first, "the same CA and certificate");
        assert_eq!(api.writes(), [CREATE], "no write for the second replica");
        let secret = api.get(PATH).unwrap();
        assert_eq!(secret["type"], "kubernetes.io/tls");
        for key in ["tls.crt", "tls.key", "ca.crt", "ca.key"] {
            assert!(secret["data"][key].is_string(), "{key} in {secret}");
        }
    }

    #[tokio::test]
    async fn a_replica_losing_the_create_race_uses_the_winners_pair() {
        let api = FakeApi::default();
        let winner = stored(&["127.0.0.1"], days(0));
        put(&api, &winner);
        // It read before the winner created the Secret.
        api.fail(PATH, 404, 1);
        let got = obtain(&api.client(), &place(), &names(&["127.0.0.1"]))
            .await
            .unwrap();
        assert_eq!(got, winner);
        assert_eq!(api.writes(), [CREATE], "its own create was refused");
    }

    #[tokio::test]
    async fn a_replica_needing_another_name_reissues_under_the_same_ca() {
        let api = FakeApi::default();
        let first = stored(&["127.0.0.1"], days(0));
        put(&api, &first);
        let got = obtain(&api.client(), &place(), &names(&["other.example"]))
            .await
            .unwrap();
        assert_eq!(got.ca_cert, first.ca_cert, "the caBundle stays");
        assert_ne!(got.pair, first.pair);
        assert_eq!(got.names, names(&["127.0.0.1", "other.example"]));
        assert_eq!(api.writes(), [REPLACE]);
        let again = from_secret(&serde_json::from_value(api.get(PATH).unwrap()).unwrap());
        assert_eq!(again, Some(got), "the Secret holds what the replica serves");
    }

    #[tokio::test]
    async fn a_conflicting_update_is_decided_again_on_what_the_secret_holds_now() {
        let api = FakeApi::default();
        let expiring = stored(&["127.0.0.1"], days(1825 - 10));
        put(&api, &expiring);
        api.fail_writes(PATH, 409, 1);
        let got = obtain(&api.client(), &place(), &names(&["127.0.0.1"]))
            .await
            .unwrap();
        assert_eq!(got.ca_cert, expiring.ca_cert);
        assert!(got.cert_not_after > expiring.cert_not_after, "renewed");
        assert_eq!(api.writes(), [REPLACE, REPLACE]);
    }

    #[tokio::test]
    async fn a_forbidden_read_names_the_secret_and_the_verb() {
        let api = FakeApi::default();
        api.refuse(PATH, 403, "secrets \"khai-x-webhook-tls\" is forbidden", 1);
        let err = obtain(&api.client(), &place(), &names(&["a"]))
            .await
            .unwrap_err();
        assert!(err.is_forbidden());
        assert_eq!(
            err.to_string(),
            "no permission to get the Secret khai/khai-x-webhook-tls: \
             secrets \"khai-x-webhook-tls\" is forbidden (Forbidden, 403)"
        );
        assert!(api.writes().is_empty());
    }

    #[tokio::test]
    async fn a_secret_missing_a_key_is_replaced_by_a_new_pair() {
        let api = FakeApi::default();
        put(&api, &stored(&["a"], days(0)));
        let mut broken = api.get(PATH).unwrap();
        broken["data"].as_object_mut().unwrap().remove("ca.key");
        api.put(PATH, broken);
        let got = obtain(&api.client(), &place(), &names(&["a"]))
            .await
            .unwrap();
        assert_eq!(api.writes(), [REPLACE]);
        assert!(api.get(PATH).unwrap()["data"]["ca.key"].is_string());
        assert_eq!(got.names, names(&["a"]));
    }
}
