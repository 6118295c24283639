//! Compiling what runs beside the controllers: `[[handler]]`, `[[timer]]`, `[[daemon]]`,
//! `[[index]]`, `[[schedule]]` and the `[operator] startup`/`cleanup` hooks. Each script file is compiled once,
//! and every function an entry names is checked to exist with the parameters khai calls it
//! with; a problem points at the config line that names the function.

use super::Entry;
use super::clock::{DaemonEntry, TimerEntry};
use super::index::IndexEntry;
use crate::config::Config;
use crate::config::handlers::Hook;
use crate::script::{self, Limits, Problem, Script, ScriptError};
use rhai::Engine;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Everything beside the controllers, compiled.
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    pub handlers: Vec<Entry>,
    pub timers: Vec<TimerEntry>,
    pub daemons: Vec<DaemonEntry>,
    pub indexes: Vec<IndexEntry>,
    pub startup: Option<HookEntry>,
    pub cleanup: Option<HookEntry>,
    pub schedules: Vec<ScheduleEntry>,
}

/// One `[[schedule]]` with its compiled script.
#[derive(Debug, Clone)]
pub struct ScheduleEntry {
    pub spec: crate::config::handlers::Schedule,
    pub script: Script,
}

/// `startup` or `cleanup` with its compiled script.
#[derive(Debug, Clone)]
pub struct HookEntry {
    pub spec: Hook,
    pub script: Script,
}

impl Compiled {
    /// Whether the config declares nothing beside its controllers.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
            && self.timers.is_empty()
            && self.daemons.is_empty()
            && self.indexes.is_empty()
            && self.startup.is_none()
            && self.cleanup.is_none()
            && self.schedules.is_empty()
    }
}

/// Compiles the entries of `config`, reporting every problem found.
pub(crate) fn load(
    config: &Config,
    engine: &Arc<Engine>,
    limits: &Limits,
) -> (Compiled, Vec<Problem>) {
    let mut l = Loader {
        config,
        engine,
        limits,
        compiled: HashMap::new(),
        problems: Vec::new(),
    };
    let model = &config.model;
    let mut out = Compiled::default();
    for (i, h) in model.handlers.iter().enumerate() {
        let function = h.function();
        let mut wanted = vec![("function", function.as_str(), CHANGE)];
        wanted.extend(h.when.as_deref().map(|w| ("when", w, WHEN)));
        if let Some(script) = l.script("handler", i, &h.script, &wanted) {
            out.handlers.push(Entry {
                spec: h.clone(),
                script,
            });
        }
    }
    for (i, t) in model.timers.iter().enumerate() {
        let mut wanted = vec![("function", t.function.as_str(), OBJ_CTX)];
        wanted.extend(t.when.as_deref().map(|w| ("when", w, WHEN)));
        if let Some(script) = l.script("timer", i, &t.script, &wanted) {
            out.timers.push(TimerEntry {
                spec: t.clone(),
                script,
            });
        }
    }
    for (i, d) in model.daemons.iter().enumerate() {
        let mut wanted = vec![("tick", d.tick.as_str(), STATE)];
        wanted.extend(d.stop.as_deref().map(|s| ("stop", s, STATE)));
        wanted.extend(d.when.as_deref().map(|w| ("when", w, WHEN)));
        if let Some(script) = l.script("daemon", i, &d.script, &wanted) {
            out.daemons.push(DaemonEntry {
                spec: d.clone(),
                script,
            });
        }
    }
    for (i, x) in model.indexes.iter().enumerate() {
        let wanted = [("function", x.function.as_str(), OBJ)];
        if let Some(script) = l.script("index", i, &x.script, &wanted) {
            out.indexes.push(IndexEntry {
                spec: x.clone(),
                script,
            });
        }
    }
    for (i, x) in model.schedules.iter().enumerate() {
        let wanted = [("function", x.function.as_str(), CTX)];
        if let Some(script) = l.script("schedule", i, &x.script, &wanted) {
            out.schedules.push(ScheduleEntry {
                spec: x.clone(),
                script,
            });
        }
    }
    out.startup = l.hook("startup", model.operator.startup.as_ref());
    out.cleanup = l.hook("cleanup", model.operator.cleanup.as_ref());
    (out, l.problems)
}

struct Loader<'a> {
    config: &'a Config,
    engine: &'a Arc<Engine>,
    limits: &'a Limits,
    /// Each script file compiled once, whatever number of entries name it.
    compiled: HashMap<PathBuf, Option<Script>>,
    problems: Vec<Problem>,
}

impl Loader<'_> {
    /// The script of entry `i` of `section`, compiled, with each of `wanted` (config key,
    /// function, parameters) checked.
    fn script(
        &mut self,
        section: &str,
        i: usize,
        rel: &Path,
        wanted: &[(&str, &str, Params)],
    ) -> Option<Script> {
        let script = self.compile(rel, |c, m| c.diagnostic_at(section, i, "script", m))?;
        for (key, function, params) in wanted {
            if let Some(msg) = missing(&script, function, params) {
                let d = self.config.diagnostic_at(section, i, key, msg);
                self.problems.push(Problem::Config(d));
            }
        }
        Some(script)
    }

    fn hook(&mut self, which: &str, hook: Option<&Hook>) -> Option<HookEntry> {
        let hook = hook?;
        let script = self.compile(&hook.script, |c, m| {
            c.diagnostic_in(&["operator", which, "script"], m)
        })?;
        if let Some(msg) = missing(&script, &hook.function, CTX) {
            let d = self
                .config
                .diagnostic_in(&["operator", which, "function"], msg);
            self.problems.push(Problem::Config(d));
        }
        Some(HookEntry {
            spec: hook.clone(),
            script,
        })
    }

    fn compile(
        &mut self,
        rel: &Path,
        unreadable: impl Fn(&Config, String) -> crate::config::Diagnostic,
    ) -> Option<Script> {
        if let Some(done) = self.compiled.get(rel) {
            return done.clone();
        }
        let result = script::read_script(self.config, rel)
            .and_then(|(file, src)| Script::compile(self.engine.clone(), self.limits, &file, &src));
        let script = match result {
            Ok(s) => Some(s),
            Err(e @ ScriptError::Read { .. }) => {
                let d = unreadable(self.config, e.to_string());
                self.problems.push(Problem::Config(d));
                None
            }
            Err(e) => {
                self.problems.push(e.into());
                None
            }
        };
        self.compiled.insert(rel.to_path_buf(), script.clone());
        script
    }
}

/// The parameters khai calls a function with; [`WHEN`] takes `obj` and optionally `ctx`.
type Params = &'static [&'static str];
const CHANGE: Params = &["obj", "ctx", "change"];
const OBJ_CTX: Params = &["obj", "ctx"];
const STATE: Params = &["obj", "ctx", "state"];
const OBJ: Params = &["obj"];
const CTX: Params = &["ctx"];
const WHEN: Params = &[];

/// Why `function` cannot be called with `params`, if it cannot.
fn missing(script: &Script, function: &str, params: Params) -> Option<String> {
    let ok = if params.is_empty() {
        script.has_function(function, 1) || script.has_function(function, 2)
    } else {
        script.has_function(function, params.len())
    };
    if ok {
        return None;
    }
    let file = script.file().display();
    let wanted = if params.is_empty() {
        "obj".to_string()
    } else {
        params.join(", ")
    };
    let names = script.function_names();
    let mut msg = format!("function {function}({wanted}) is not defined in {file}");
    if names.iter().any(|n| n == function) {
        msg = format!(
            "{function} in {file} takes the wrong number of parameters: {function}({wanted})"
        );
    } else if let Some(s) =
        crate::config::diag::did_you_mean(function, names.iter().map(String::as_str))
    {
        msg.push_str(&format!(" (did you mean {s:?}?)"));
    }
    Some(msg)
}
