//! khai: one prebuilt daemon that turns a declarative config plus Rhai scripts into a
//! Kubernetes operator.
//!
//! Modules are listed in the order data flows through them: a config is read and validated
//! ([`config`]), its CRDs are generated and installed ([`schema`]), kinds are resolved and
//! watched ([`watch`]), scripts are compiled and called ([`script`]), events become reconcile
//! requests ([`queue`]), a script's answer becomes a plan ([`reconcile`]) and the plan is carried out ([`apply`]). [`operator`] bundles a loaded
//! config with its compiled scripts, [`daemon`] wires `khai run`, and [`cli`] is the command line.
//! [`metrics`] is the one module every step records into; [`leader`] decides which replica runs
//! the controllers.
//! [`testing`] runs a controller's script offline for `khai test`, along the same path as the
//! daemon; [`scaffold`] holds the files `khai new` writes.
//! [`webhook`] serves admission and conversion webhooks through scripts, over TLS; [`serve`] holds
//! what it shares with the metrics server to survive hostile load.
//! [`manifest`] derives the RBAC and deployment manifests `khai generate` prints.
//! [`revisions`] runs a candidate revision of the config beside the active one and reports
//! where they differ.
//! [`reload`] watches the config directory and hands the daemon each new version that loads.
//! [`diff`] runs a config's controllers over the live objects as the daemon would, for `khai
//! diff`, and reports the writes they would make without making them.
//! [`console`] (`khai run --console`) shows what the daemon records into it: each reconcile, each
//! config load, as a JSON API, an event stream and a web page.
//!
//! Public modules are the ones khai's own tests, benches and fuzz targets reach into (`apply`,
//! `cli`, `config`, `effects`, `operator`, `reconcile`, `schema`, `script`, `watch`,
//! `webhook`); the rest are crate-private, and `unreachable_pub` keeps every item inside them
//! `pub(crate)`.

#![warn(unreachable_pub)]

/// Unit tests run with the allocator the `khai` binary installs, so memory budgets hold in them.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: script::Counting = script::Counting;

pub mod apply;
pub mod cli;
pub(crate) mod client;
pub mod config;
pub(crate) mod console;
pub(crate) mod controller;
pub(crate) mod daemon;
pub(crate) mod diff;
pub mod effects;
pub(crate) mod events;
#[cfg(test)]
mod fake_api;
pub(crate) mod handler;
pub(crate) mod leader;
pub(crate) mod manifest;
pub(crate) mod metrics;
pub mod nesting;
pub mod object;
pub mod operator;
pub(crate) mod pace;
pub(crate) mod playground;
pub(crate) mod queue;
pub mod reconcile;
pub(crate) mod reload;
pub(crate) mod revisions;
pub(crate) mod scaffold;
pub mod schema;
pub mod script;
pub(crate) mod serve;
pub(crate) mod shard;
pub(crate) mod sync;
pub(crate) mod tasks;
#[cfg(test)]
mod test_logs;
pub(crate) mod testing;
pub mod watch;
pub mod webhook;
