//! The rest of what `khai generate` prints besides CRDs and webhook configurations: the
//! `[[policy]]` admission policies ([`policies`]), the least-privilege RBAC derived from the
//! config ([`rbac`]) and everything needed to deploy khai ([`deploy`]: Namespace, ConfigMap,
//! Deployment, Service), and the same as values for the Helm chart ([`values`]); the shard
//! assignment webhook's configuration ([`sharding`]).
//!
//! No I/O and no cluster: functions take the loaded model and return manifests as JSON values,
//! which `khai generate` renders as YAML. Nothing here knows the running daemon's state.

pub(crate) mod deploy;
pub(crate) mod policies;
pub(crate) mod rbac;
pub(crate) mod sharding;
pub(crate) mod values;
pub(crate) mod webhooks;
