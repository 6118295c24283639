//! What runs beside the controllers of a config: the handlers, timers and daemons of each kind
//! (grouped by resolved kind, joined to the kind's controller or given one of their own that
//! runs only them) and the config's indexes.

use super::Error;
use crate::config::kind::KindRef;
use crate::config::model::Controller;
use crate::handler::clock::Clock;
use crate::handler::index::IndexSet;
use crate::handler::{Handlers, load::Compiled};
use crate::operator::Operator;
use crate::script::Script;
use crate::watch::{self, Informers, Kind};
use std::sync::Arc;

/// The handlers, timers and daemons of one kind (indexes into the compiled entries).
pub(super) struct Group {
    pub kind: Kind,
    written: KindRef,
    /// The config's controller they join, if any.
    pub controller: Option<usize>,
    handlers: Vec<usize>,
    timers: Vec<usize>,
    daemons: Vec<usize>,
}

/// A group's handlers and clock, ready to run.
pub(super) type Started = (Option<Arc<Handlers>>, Option<Arc<Clock>>);

/// The handler, timer and daemon entries of `op`, grouped by the kind they are for.
pub(super) async fn by_kind(op: &Operator, client: &kube::Client) -> Result<Vec<Group>, Error> {
    let c = &op.handlers;
    let named = c
        .handlers
        .iter()
        .map(|e| (0, &e.spec.for_kind))
        .chain(c.timers.iter().map(|e| (1, &e.spec.for_kind)))
        .chain(c.daemons.iter().map(|e| (2, &e.spec.for_kind)));
    let mut groups: Vec<Group> = Vec::new();
    let mut counters = [0usize; 3];
    for (what, written) in named {
        let kind = resolve(op, client, written, what).await?;
        let i = counters[what];
        counters[what] += 1;
        let group = match groups.iter_mut().position(|g| g.kind == kind) {
            Some(g) => &mut groups[g],
            None => {
                groups.push(Group {
                    kind,
                    written: written.clone(),
                    controller: None,
                    handlers: Vec::new(),
                    timers: Vec::new(),
                    daemons: Vec::new(),
                });
                let last = groups.len() - 1;
                &mut groups[last]
            }
        };
        [&mut group.handlers, &mut group.timers, &mut group.daemons][what].push(i);
    }
    Ok(groups)
}

async fn resolve(
    op: &Operator,
    client: &kube::Client,
    written: &KindRef,
    what: usize,
) -> Result<Kind, Error> {
    watch::resolve(client, &op.config.model, written)
        .await
        .map_err(|cause| Error::Resolve {
            controller: format!("{} for {written}", ["handler", "timer", "daemon"][what]),
            cause,
        })
}

impl Group {
    /// A controller of the group's kind that runs only its handlers, timers and daemons, with
    /// the script of its first entry (which `when` filters read).
    pub(super) fn synthesize(&self, compiled: &Compiled) -> Option<(Controller, Script)> {
        let script = self
            .handlers
            .first()
            .map(|&i| &compiled.handlers[i].script)
            .or_else(|| self.timers.first().map(|&i| &compiled.timers[i].script))
            .or_else(|| self.daemons.first().map(|&i| &compiled.daemons[i].script));
        let controller = serde_json::from_value::<Controller>(serde_json::json!({
            "name": format!("{}-handlers", self.kind.resource.kind.to_lowercase()),
            "for": self.written.to_string(),
            "script": script.map(|s| s.file().display().to_string()).unwrap_or_default(),
        }));
        match (controller, script) {
            (Ok(c), Some(s)) => Some((c, s.clone())),
            (Err(e), _) => {
                tracing::error!(error = %e, kind = %self.written, "cannot run the handlers of this kind; this is a bug in khai");
                None
            }
            (_, None) => None,
        }
    }

    /// Its handlers and clock, ready to run.
    pub(super) fn start(&self, op: &Operator) -> Started {
        let c = &op.handlers;
        let name = &op.config.model.operator.name;
        let handlers = (!self.handlers.is_empty()).then(|| {
            let entries = self.handlers.iter().map(|&i| c.handlers[i].clone());
            Arc::new(Handlers::new(name, entries.collect()))
        });
        let clock = (!self.timers.is_empty() || !self.daemons.is_empty()).then(|| {
            Arc::new(Clock::new(
                name,
                self.timers.iter().map(|&i| c.timers[i].clone()).collect(),
                self.daemons.iter().map(|&i| c.daemons[i].clone()).collect(),
            ))
        });
        (handlers, clock)
    }
}

/// Starts the config's indexes over the kinds they name, each cached in every watched
/// namespace (`[None]`: all of them).
pub(super) async fn indexes(
    op: &Operator,
    client: &kube::Client,
    informers: &Informers,
    spread: &[Option<String>],
) -> Result<Option<Arc<IndexSet>>, Error> {
    let entries = &op.handlers.indexes;
    if entries.is_empty() {
        return Ok(None);
    }
    let mut caches = Vec::new();
    for e in entries {
        let kind = watch::resolve(client, &op.config.model, &e.spec.for_kind)
            .await
            .map_err(|cause| Error::Resolve {
                controller: format!("index {}", e.spec.name),
                cause,
            })?;
        caches.push(if kind.namespaced {
            spread
                .iter()
                .map(|ns| informers.informer(&kind, ns.as_deref()))
                .collect()
        } else {
            vec![informers.informer(&kind, None)]
        });
    }
    Ok(Some(IndexSet::start(entries, caches)))
}

/// What identifies the handlers, timers, daemons, indexes and hooks of a config across
/// versions: their entries and the text of their scripts.
pub(super) fn fingerprint(op: &Operator) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let m = &op.config.model;
    let shape = (
        &m.handlers,
        &m.timers,
        &m.daemons,
        &m.indexes,
        &m.operator.startup,
        &m.operator.cleanup,
    );
    serde_json::to_string(&shape)
        .unwrap_or_default()
        .hash(&mut h);
    let c = &op.handlers;
    let scripts = c
        .handlers
        .iter()
        .map(|e| &e.script)
        .chain(c.timers.iter().map(|e| &e.script))
        .chain(c.daemons.iter().map(|e| &e.script))
        .chain(c.indexes.iter().map(|e| &e.script));
    for s in scripts {
        s.source_hash().hash(&mut h);
    }
    h.finish()
}
