//! Sharding across replicas (`khai run --shards`): every replica holds a shard Lease and
//! reconciles the objects labelled for it; the replica holding the sharder Lease assigns
//! objects to the live shards on a consistent-hash ring ([`ring`]) and moves them when the
//! membership changes ([`sharder`]). Every replica also follows the ring itself ([`view`]) to
//! label objects at admission ([`assign`]); the sharder also keeps related objects on their
//! parent's shard ([`related`]). Work that must run once, `[[schedule]]`s, runs on the sharder's
//! replica ([`single`]). docs/scaling.md describes the protocol.

pub(crate) mod assign;
#[cfg(test)]
mod fake;
mod kinds;
mod members;
mod moves;
mod pages;
mod passes;
pub(crate) mod related;
pub(crate) mod ring;
pub(crate) mod sharder;
pub(crate) mod single;
pub(crate) mod view;

pub(crate) use kinds::{Parent, Sharded};

use crate::config::selector::{label_value, qualified_name};
use std::collections::BTreeMap;
use std::time::Duration;

/// Prefix of the label naming an object's shard: `shard.khai.dev/<operator>`.
const LABEL_PREFIX: &str = "shard.khai.dev/";
/// Prefix of the label asking a shard to let go of an object: `drain.shard.khai.dev/<operator>`.
const DRAIN_PREFIX: &str = "drain.shard.khai.dev/";
/// Label of every shard Lease: the operator it belongs to.
pub(crate) const LEASE_OPERATOR: &str = "lease.shard.khai.dev/operator";
/// Label of every shard Lease: the shard's id.
pub(crate) const LEASE_SHARD: &str = "lease.shard.khai.dev/shard";

/// The label naming an object's shard among `operator`'s shards.
pub(crate) fn label_of(operator: &str) -> String {
    format!("{LABEL_PREFIX}{operator}")
}

/// The label asking a shard of `operator` to let go of an object.
pub(crate) fn drain_label_of(operator: &str) -> String {
    format!("{DRAIN_PREFIX}{operator}")
}

/// Whether `key` is a shard label (of any operator): children carry their parent's.
pub(crate) fn is_shard_label(key: &str) -> bool {
    key.starts_with(LABEL_PREFIX)
}

/// How one replica takes part in sharding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `[operator] name`.
    pub operator: String,
    /// This shard's id: its Lease's holder and the value of the shard label.
    pub id: String,
    /// The namespace of the shard and sharder Leases.
    pub namespace: String,
    /// Lease timing, as leader election's.
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// Settings that cannot work; named in the user's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum Error {
    #[error(
        "--shards: [operator] name {name:?} cannot name a label `shard.khai.dev/{name}`: {cause}"
    )]
    OperatorName { name: String, cause: String },
    #[error("--shard-id {id:?} is not a label value: {cause}")]
    ShardId { id: String, cause: String },
    #[error("--shards: {0}")]
    Lease(#[from] crate::leader::Error),
}

impl Settings {
    /// Checks that the labels and Lease names the settings make are valid.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        qualified_name(&self.label()).map_err(|cause| Error::OperatorName {
            name: self.operator.clone(),
            cause,
        })?;
        qualified_name(&self.drain_label()).map_err(|cause| Error::OperatorName {
            name: self.operator.clone(),
            cause,
        })?;
        if self.id.is_empty() {
            return Err(Error::ShardId {
                id: self.id.clone(),
                cause: "empty".into(),
            });
        }
        label_value(&self.id).map_err(|cause| Error::ShardId {
            id: self.id.clone(),
            cause,
        })?;
        self.member_lease().validate()?;
        Ok(())
    }

    /// The label naming an object's shard.
    pub(crate) fn label(&self) -> String {
        label_of(&self.operator)
    }

    /// The label asking the object's shard to let go of it.
    pub(crate) fn drain_label(&self) -> String {
        drain_label_of(&self.operator)
    }

    /// The label selector of this shard's watches.
    pub(crate) fn selector(&self) -> String {
        format!("{}={}", self.label(), self.id)
    }

    /// `filter` narrowed to this shard's objects.
    pub(crate) fn narrow(&self, filter: &crate::watch::Filter) -> crate::watch::Filter {
        narrowed(filter, &self.selector())
    }

    /// The selector of every shard Lease of the operator.
    pub(crate) fn lease_selector(&self) -> String {
        format!("{LEASE_OPERATOR}={}", self.operator)
    }

    /// This shard's Lease.
    pub(crate) fn member_lease(&self) -> crate::leader::Settings {
        crate::leader::Settings {
            lease_name: format!("khai-{}-shard-{}", self.operator, self.id)
                .to_lowercase()
                .replace('_', "-"),
            labels: BTreeMap::from([
                (LEASE_OPERATOR.to_string(), self.operator.clone()),
                (LEASE_SHARD.to_string(), self.id.clone()),
            ]),
            ..self.lease("")
        }
    }

    /// The sharder Lease, which one replica holds at a time.
    pub(crate) fn sharder_lease(&self) -> crate::leader::Settings {
        self.lease(&format!("khai-{}-sharder", self.operator))
    }

    fn lease(&self, name: &str) -> crate::leader::Settings {
        crate::leader::Settings {
            lease_name: name.to_string(),
            namespace: self.namespace.clone(),
            identity: self.id.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            labels: BTreeMap::new(),
        }
    }
}

/// `filter` with the label requirement `more` added to its label selector.
pub(crate) fn narrowed(filter: &crate::watch::Filter, more: &str) -> crate::watch::Filter {
    let labels = match filter.labels.as_deref() {
        Some(l) if !l.trim().is_empty() => format!("{l},{more}"),
        _ => more.to_string(),
    };
    crate::watch::Filter {
        labels: Some(labels),
        fields: filter.fields.clone(),
    }
}

/// The key a parent is hashed by: `group/kind/namespace/name`.
pub(crate) fn key(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn settings(operator: &str, id: &str) -> Settings {
        Settings {
            operator: operator.into(),
            id: id.into(),
            namespace: "ns".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn labels_and_leases_are_named_after_the_operator_and_shard() {
        let s = settings("cache", "khai-0");
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.selector(), "shard.khai.dev/cache=khai-0");
        assert_eq!(s.drain_label(), "drain.shard.khai.dev/cache");
        assert_eq!(s.member_lease().lease_name, "khai-cache-shard-khai-0");
        assert_eq!(s.member_lease().labels[LEASE_SHARD], "khai-0");
        assert_eq!(s.sharder_lease().lease_name, "khai-cache-sharder");
    }

    #[test]
    fn an_operator_name_too_long_for_a_label_is_refused_naming_it() {
        let long = "a".repeat(64);
        let e = settings(&long, "x").validate().unwrap_err();
        assert!(matches!(e, Error::OperatorName { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with(&format!("--shards: [operator] name \"{long}\""))
        );
        let e = settings("cache", "bad id").validate().unwrap_err();
        assert!(matches!(e, Error::ShardId { .. }), "{e}");
    }
}
