//! khai's end-to-end suite: one test binary, so it is linked once and every test shares one real
//! kube-apiserver + etcd (started by [`support`] on first use, stopped when the binary exits).
//!
//! Each module is one area of behaviour and every test works in a namespace (and, where it
//! installs CRDs, an API group) of its own, so tests run side by side on the shared cluster.
//! Tests that count the API writes khai makes read them from the API server's audit log,
//! filtered by khai's user agent and the test's namespace ([`support::audit`]), so other tests'
//! traffic never enters the count.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod apiserver;
mod batching;
mod canary;
mod cel;
mod chaos;
mod chart;
mod cli;
mod cluster_scoped;
mod config_map;
mod console;
mod console_auth;
mod console_playground;
mod crds;
mod diff;
mod edges;
mod engine;
mod events;
mod examples;
mod failing;
mod filters;
mod handlers;
mod hello;
mod helm;
mod hostile;
mod http;
mod idle;
mod image;
mod install_path;
mod kopf;
mod list_keys;
mod manifests;
mod operations;
mod policies;
mod ports;
mod rate_limit;
mod rbac;
mod release;
mod reload;
mod replace;
mod restart;
mod rollouts;
mod schedules;
mod servers;
mod sharding;
mod sharding_admission;
mod sharding_rbac;
mod sharding_scale;
mod sharding_scope;
mod shared_ca;
mod side_effects;
mod stdlib;
mod unowned;
mod webhooks;
mod workflow;
