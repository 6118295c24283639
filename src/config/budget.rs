//! `budget`: what one call of a script may do beyond computing, per `[[controller]]`,
//! `[[handler]]`, `[[timer]]` and `[[daemon]]`.

use crate::config::duration::Duration;
use serde::{Deserialize, Serialize};

/// `budget = { calls = 100, time = "30s" }`: what one call of a script (reconcile, finalize, a
/// handler, a timer or a daemon's tick) may do beyond computing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// API and HTTP calls one call of a script may make.
    pub calls: u32,
    /// Wall-clock time one call of a script may take, I/O included. Replaces the script
    /// timeout for calls that may make side effects.
    pub time: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            calls: 100,
            time: Duration::from_secs(30),
        }
    }
}
