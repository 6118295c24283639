//! The script side of webhooks: `allow()` and `deny()` for admission scripts, and compiling
//! each `[[webhook]]`'s script with its functions checked.
//!
//! Webhook engines are reconcile engines ([`crate::script::engine`], same sandbox and limits)
//! with the two admission helpers added. `allow()`/`deny()` return marked maps rather than
//! throwing, so a script can build its answer and return it like any other value.

use crate::config::Config;
use crate::config::webhook::Webhook;
use crate::script::Problem;
use crate::script::{self, Limits, Script, ScriptError};
use rhai::{Array, Dynamic, Engine, Map};
use std::sync::Arc;

/// Marker key of the maps `allow()` and `deny()` return.
pub(crate) const VERDICT_KEY: &str = "__khai_admission";

/// Builds the engine webhook scripts run in.
pub fn engine(limits: &Limits) -> Engine {
    let mut e = script::engine(limits);
    register(&mut e);
    e
}

fn verdict(kind: &str) -> Map {
    let mut m = Map::new();
    m.insert(VERDICT_KEY.into(), kind.into());
    m
}

fn deny(message: &str, reason: &str, code: i64) -> Map {
    let mut m = verdict("deny");
    m.insert("message".into(), message.into());
    m.insert("reason".into(), reason.into());
    m.insert("code".into(), code.into());
    m
}

fn allow_warning(warnings: Dynamic) -> Map {
    let mut m = verdict("allow");
    let list: Array = match warnings.clone().try_cast::<Array>() {
        Some(a) => a,
        None => vec![Dynamic::from(warnings.to_string())],
    };
    m.insert("warnings".into(), list.into());
    m
}

/// Registers `allow()`, `allow(warnings)`, `deny(message)`, `deny(message, reason)` and
/// `deny(message, reason, code)`.
pub fn register(engine: &mut Engine) {
    engine
        .register_fn("allow", || verdict("allow"))
        .register_fn("allow", allow_warning)
        .register_fn("deny", |m: &str| deny(m, "Forbidden", 403))
        .register_fn("deny", |m: &str, reason: &str| deny(m, reason, 403))
        .register_fn("deny", |m: &str, reason: &str, code: i64| {
            deny(m, reason, code)
        });
}

/// One `[[webhook]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct Handler {
    pub hook: Webhook,
    pub name: String,
    pub script: Script,
    /// The `group/version`s of the kind's CRD, when it is one of this config's: the only
    /// versions a conversion may be asked for.
    pub versions: Vec<String>,
}

/// Compiles each webhook's script and checks its functions exist with the right arity. Problems
/// point at the config line that names the script or function.
pub fn load(config: &Config, limits: &Limits) -> (Vec<Handler>, Vec<Problem>) {
    if config.model.webhooks.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let engine = Arc::new(engine(limits));
    let mut handlers = Vec::new();
    let mut problems = Vec::new();
    for (i, hook) in config.model.webhooks.iter().enumerate() {
        let file = config.resolve(&hook.script);
        let read = crate::script::read_script(config, &hook.script);
        let script =
            match read.and_then(|(f, src)| Script::compile(engine.clone(), limits, &f, &src)) {
                Ok(s) => s,
                Err(e @ ScriptError::Read { .. }) => {
                    let d = config.diagnostic_at("webhook", i, "script", e.to_string());
                    problems.push(Problem::Config(d));
                    continue;
                }
                Err(e) => {
                    problems.push(Problem::Script(e));
                    continue;
                }
            };
        for (key, function, params) in functions(hook) {
            if !script.has_function(function, params.len()) {
                let msg = format!(
                    "function {function}({}) is not defined in {}",
                    params.join(", "),
                    file.display()
                );
                problems.push(Problem::Config(
                    config.diagnostic_at("webhook", i, key, msg),
                ));
            }
        }
        let versions = config
            .model
            .crd_for(&hook.for_kind)
            .map(|c| {
                let name =
                    |v: &crate::config::model::CrdVersion| format!("{}/{}", c.group, v.name());
                c.versions.iter().map(name).collect()
            })
            .unwrap_or_default();
        handlers.push(Handler {
            name: hook.display_name(),
            hook: hook.clone(),
            script,
            versions,
        });
    }
    (handlers, problems)
}

/// The functions a webhook names: config key, function name, parameter names.
fn functions(hook: &Webhook) -> Vec<(&'static str, &str, &'static [&'static str])> {
    let mut out = Vec::new();
    if let Some(f) = &hook.validate {
        out.push(("validate", f.as_str(), &["req"][..]));
    }
    if let Some(f) = &hook.mutate {
        out.push(("mutate", f.as_str(), &["req"][..]));
    }
    if let Some(f) = &hook.convert {
        out.push(("convert", f.as_str(), &["obj", "to_version"][..]));
    }
    out
}
