//! A loaded operator: the validated config with every script compiled and checked.
//!
//! This is the unit that `khai run` starts from and that a reload will swap as a whole: building
//! it needs no cluster, and it either succeeds completely or reports every problem it found.

use crate::config::{self, Config, ConfigError};
use crate::script::{self, Limits, Script, ScriptError};
use std::path::Path;
use std::sync::Arc;

/// Arity of `reconcile(obj, ctx)`.
pub const RECONCILE_ARITY: usize = 2;

/// A config plus the compiled script of each controller, in config order.
#[derive(Debug, Clone)]
pub struct Operator {
    pub config: Config,
    pub scripts: Vec<Script>,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{}", join(.0))]
    Scripts(Vec<ScriptError>),
}

fn join(errs: &[ScriptError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Operator {
    /// Loads the config at `path`, compiles every controller's script and checks that each
    /// function the config names exists with the right number of parameters.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let config = config::load(path)?;
        let limits = Limits::default();
        let engine = Arc::new(script::engine(&limits));
        let mut scripts = Vec::new();
        let mut errors = Vec::new();
        for ctl in &config.model.controllers {
            let file = config.resolve(&ctl.script);
            match Script::compile_file(engine.clone(), &limits, &file) {
                Ok(s) => {
                    // Every function the config names must exist with the arity khai calls it with.
                    let named = std::iter::once((ctl.reconcile.as_str(), RECONCILE_ARITY))
                        .chain(ctl.when.as_deref().map(|w| (w, 1)))
                        .chain(
                            ctl.watches
                                .iter()
                                .filter_map(|w| w.map.as_deref())
                                .map(|m| (m, 1)),
                        );
                    errors
                        .extend(named.filter_map(|(f, arity)| s.require_function(f, arity).err()));
                    scripts.push(s);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(Self {
                config,
                scripts,
                limits,
            })
        } else {
            Err(Error::Scripts(errors))
        }
    }
}
