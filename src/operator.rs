//! A loaded operator: the validated config with every script compiled and checked.
//!
//! This is the unit that `khai run` starts from and that a reload will swap as a whole: building
//! it needs no cluster, and it either succeeds completely or reports every problem it found.

use crate::config::model::Controller;
use crate::config::{self, Config, ConfigError};
use crate::script::{self, Limits, Problem, Script, ScriptError, read_script};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Arity of `reconcile(obj, ctx)`.
pub(crate) const RECONCILE_ARITY: usize = 2;

/// A config plus the compiled script of each controller, in config order.
#[derive(Debug, Clone)]
pub struct Operator {
    pub config: Config,
    pub scripts: Vec<Script>,
    pub limits: Limits,
    /// Each `[[webhook]]` with its compiled script, in config order.
    pub webhooks: Vec<crate::script::webhook::Handler>,
    /// Handlers, timers, daemons, indexes and the startup/cleanup hooks, compiled.
    pub handlers: crate::handler::load::Compiled,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{}", join(.0))]
    Scripts(Vec<Problem>),
}

fn join(errs: &[Problem]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Operator {
    /// A hash of the config file's text and every script's, the same across processes and khai
    /// versions (xxh3): what names a revision in a canary rollout's persisted state.
    pub(crate) fn content_hash(&self) -> u64 {
        let mut bytes = self.config.source.as_bytes().to_vec();
        for s in &self.scripts {
            bytes.extend_from_slice(&s.source_hash().to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    /// Loads the config at `path`, compiles every controller's script and checks that each
    /// function the config names exists with the right number of parameters.
    pub fn load(path: &Path) -> Result<Self, Error> {
        Self::compile(config::load(path)?)
    }

    /// Like [`Operator::load`], for a config held in memory (a ConfigMap's keys; see
    /// [`config::load_memory`]).
    pub fn load_memory(
        root: &Path,
        data: BTreeMap<String, String>,
        version: Option<String>,
    ) -> Result<Self, Error> {
        Self::compile(config::load_memory(root, data, version)?)
    }

    fn compile(config: Config) -> Result<Self, Error> {
        let limits = Limits::default();
        let engine = Arc::new(script::engine(&limits));
        let mut scripts = Vec::new();
        let mut problems = Vec::new();
        for (i, ctl) in config.model.controllers.iter().enumerate() {
            match read_script(&config, &ctl.script)
                .and_then(|(file, src)| Script::compile(engine.clone(), &limits, &file, &src))
            {
                Ok(s) => {
                    problems.extend(
                        check_functions(&config, i, ctl, &s)
                            .into_iter()
                            .map(Problem::Config),
                    );
                    scripts.push(s);
                }
                Err(e @ ScriptError::Read { .. }) => {
                    problems.push(Problem::Config(config.diagnostic_at(
                        "controller",
                        i,
                        "script",
                        e.to_string(),
                    )));
                }
                Err(e) => problems.push(e.into()),
            }
        }
        let (webhooks, webhook_problems) = crate::script::webhook::load(&config, &limits);
        problems.extend(webhook_problems);
        let (handlers, handler_problems) = crate::handler::load::load(&config, &engine, &limits);
        problems.extend(handler_problems);
        if problems.is_empty() {
            Ok(Self {
                config,
                scripts,
                limits,
                webhooks,
                handlers,
            })
        } else {
            Err(Error::Scripts(problems))
        }
    }
}

/// Every function the config names in the script with the arity khai calls it with.
/// A problem points at the config line that names the function.
fn check_functions(
    config: &Config,
    i: usize,
    ctl: &Controller,
    script: &Script,
) -> Vec<config::Diagnostic> {
    let named = std::iter::once(("reconcile", ctl.reconcile.as_str(), RECONCILE_ARITY))
        .chain(ctl.when.as_deref().map(|w| ("when", w, 1)))
        .chain(
            ctl.watches
                .iter()
                .filter_map(|w| match &w.parents {
                    crate::config::model::Parents::Map(f) => Some(f.as_str()),
                    crate::config::model::Parents::Label(_) => None,
                })
                .map(|m| ("watches", m, 1)),
        );
    named
        // `when` and a watch's `map` may also take `ctx`.
        .filter(|(key, f, arity)| {
            let with_ctx = *key != "reconcile" && script.has_function(f, 2);
            !(script.has_function(f, *arity) || with_ctx)
        })
        .map(|(key, f, arity)| {
            let file = script.file().display();
            let wanted = script::param_list(arity);
            let names = script.function_names();
            let mut msg = format!("function {f}({wanted}) is not defined in {file}");
            if names.iter().any(|n| n == f) {
                msg = format!("{f} in {file} must take {arity} parameter(s): {f}({wanted})");
            } else if let Some(s) = config::diag::did_you_mean(f, names.iter().map(String::as_str))
            {
                msg.push_str(&format!(" (did you mean {s:?}?)"));
            }
            config.diagnostic_at("controller", i, key, msg)
        })
        .collect()
}
