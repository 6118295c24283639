//! One controller of the config at run time: prepared from its `[[controller]]` entry
//! ([`prepare`]), driven by kube-runtime's `Controller` and its triggers ([`drive`]), reconciling
//! one object at a time ([`reconcile`], whose normal path is [`turn`]) and reporting what fails ([`report`]). [`context`] is
//! what its reconciles share.

mod beside;
mod context;
mod drain;
mod drive;
mod exclusive;
mod finalizer_names;
mod finalizers;
mod prepare;
mod reconcile;
mod release;
mod report;
mod shadow;
mod turn;

pub(crate) use context::Ctx;
pub(crate) use drive::start;
pub(crate) use finalizers::{release_abandoned, release_patch};
pub(crate) use prepare::{Fingerprint, Prepared, prepare, prepare_sharded};
pub(crate) use shadow::{Route, Shadow};

use crate::watch;

/// Why a controller could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("controller {controller}: {cause}")]
    Resolve {
        controller: String,
        cause: watch::Error,
    },
    #[error(transparent)]
    Http(#[from] crate::effects::http::client::Error),
}

#[cfg(test)]
mod tests;
