//! What the console says about the operator as a whole: the config running now (its revision),
//! the last [`RELOADS`] loads and failed reloads with their errors, and what the config runs:
//! controllers, handlers, timers, daemons, schedules and webhooks. Replaced on every config
//! load; lives as long as the process.

use crate::operator::Operator;
use serde::Serialize;
use std::collections::VecDeque;

/// Loads and failed reloads kept, newest last.
pub(crate) const RELOADS: usize = 20;
/// The longest reload error kept, in characters.
const MAX_ERROR_CHARS: usize = 4096;

/// The config running now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Revision {
    /// As `khai_config_info`'s `hash`: the lower 52 bits of a hash of the model and scripts, in hex.
    pub(crate) hash: String,
    pub(crate) source: String,
    /// The source's version (a ConfigMap's resourceVersion); empty for files.
    pub(crate) version: String,
    pub(crate) loaded_at_ms: u64,
}

/// One attempt to load a config version.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Reload {
    pub(crate) at_ms: u64,
    /// `loaded` (the first version), `reloaded` or `failed` (the last good one kept running).
    pub(crate) result: &'static str,
    pub(crate) hash: Option<String>,
    /// Why it failed, as logged and put in the ConfigMap's Event: starts with file:line.
    pub(crate) error: Option<String>,
}

/// One `[[controller]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ControllerInfo {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) script: String,
    pub(crate) reconcile: String,
    pub(crate) concurrency: u16,
}

/// A handler, timer, daemon, schedule or webhook: its kind (or name), its script and function,
/// and when it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Entry {
    /// The kind it is for, or a schedule's or webhook's name.
    pub(crate) target: String,
    pub(crate) script: String,
    pub(crate) function: String,
    /// `on create`, `every 30s`, `cron 0 * * * *`, `validate, mutate`, ...
    pub(crate) when: String,
}

/// The whole overview but for what is read live (leadership, queues, rates).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Overview {
    pub(crate) operator: String,
    pub(crate) revision: Revision,
    pub(crate) reloads: VecDeque<Reload>,
    pub(crate) controllers: Vec<ControllerInfo>,
    pub(crate) handlers: Vec<Entry>,
    pub(crate) timers: Vec<Entry>,
    pub(crate) daemons: Vec<Entry>,
    pub(crate) schedules: Vec<Entry>,
    pub(crate) webhooks: Vec<Entry>,
}

impl Overview {
    /// `op` is running now, loaded at `now_ms` with the hash `hash`.
    pub(crate) fn loaded(&mut self, op: &Operator, hash: u64, now_ms: u64) {
        let model = &op.config.model;
        let hash = format!("{:x}", hash & ((1u64 << 52) - 1));
        let result = if self.revision.hash.is_empty() {
            "loaded"
        } else {
            "reloaded"
        };
        self.push(Reload {
            at_ms: now_ms,
            result,
            hash: Some(hash.clone()),
            error: None,
        });
        self.operator.clone_from(&model.operator.name);
        self.revision = Revision {
            hash,
            source: op.config.file.display().to_string(),
            version: op.config.version.clone().unwrap_or_default(),
            loaded_at_ms: now_ms,
        };
        let path = |p: &std::path::Path| p.display().to_string();
        self.controllers = model
            .controllers
            .iter()
            .map(|c| ControllerInfo {
                name: c.display_name(),
                kind: c.for_kind.kind.clone(),
                script: path(&c.script),
                reconcile: c.reconcile.clone(),
                concurrency: c.concurrency,
            })
            .collect();
        self.handlers = model
            .handlers
            .iter()
            .map(|h| Entry {
                target: h.for_kind.kind.clone(),
                script: path(&h.script),
                function: h.function.clone().unwrap_or_default(),
                when: match &h.field {
                    Some(field) => format!("on {} of {field}", h.on.name()),
                    None => format!("on {}", h.on.name()),
                },
            })
            .collect();
        self.timers = model
            .timers
            .iter()
            .map(|t| Entry {
                target: t.for_kind.kind.clone(),
                script: path(&t.script),
                function: t.function.clone(),
                when: format!("every {}", t.interval),
            })
            .collect();
        self.daemons = model
            .daemons
            .iter()
            .map(|d| Entry {
                target: d.for_kind.kind.clone(),
                script: path(&d.script),
                function: d.tick.clone(),
                when: format!("every {}", d.interval),
            })
            .collect();
        self.schedules = model
            .schedules
            .iter()
            .map(|s| Entry {
                target: s.name.clone(),
                script: path(&s.script),
                function: s.function.clone(),
                when: match (&s.cron, &s.interval) {
                    (Some(cron), _) => format!("cron {cron}"),
                    (None, Some(every)) => format!("every {every}"),
                    (None, None) => String::new(),
                },
            })
            .collect();
        self.webhooks = model
            .webhooks
            .iter()
            .map(|w| {
                let functions: Vec<&str> = [&w.validate, &w.mutate, &w.convert]
                    .into_iter()
                    .filter_map(Option::as_deref)
                    .collect();
                Entry {
                    target: w
                        .name
                        .clone()
                        .unwrap_or_else(|| w.for_kind.kind.to_lowercase()),
                    script: path(&w.script),
                    function: functions.join(", "),
                    when: w.for_kind.kind.clone(),
                }
            })
            .collect();
    }

    /// A new version failed to load with `error`; the running one stays.
    pub(crate) fn failed(&mut self, error: &str, now_ms: u64) {
        let mut kept: String = error.chars().take(MAX_ERROR_CHARS).collect();
        if kept.len() < error.len() {
            kept.push('…');
        }
        self.push(Reload {
            at_ms: now_ms,
            result: "failed",
            hash: None,
            error: Some(kept),
        });
    }

    fn push(&mut self, reload: Reload) {
        if self.reloads.len() == RELOADS {
            self.reloads.pop_front();
        }
        self.reloads.push_back(reload);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reload_history_keeps_the_last_loads_and_failures_in_order() {
        let mut o = Overview::default();
        for i in 0..(RELOADS as u64 + 3) {
            o.failed(&format!("operator.toml:{i}: bad"), i);
        }
        assert_eq!(o.reloads.len(), RELOADS);
        assert_eq!(o.reloads[0].at_ms, 3);
        let last = o.reloads.back().unwrap();
        assert_eq!(last.result, "failed");
        assert_eq!(
            last.error.as_deref(),
            Some(format!("operator.toml:{}: bad", RELOADS + 2).as_str())
        );
    }
}
