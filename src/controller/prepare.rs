//! Turns the controllers of a config into [`Prepared`] controllers: kinds resolved against the
//! cluster, informers started, a [`Ctx`] each, and a fingerprint that says across versions of
//! the config whether a controller changed.

use super::context::{Beside, Caches, Ctx, Services, Spec};
use super::{Error, beside, finalizer_names};
use crate::apply::Applier;
use crate::config::kind::KindRef;
use crate::config::model::{Controller, Model, Watch};
use crate::events::{Recorder, Reporter};
use crate::operator::Operator;
use crate::queue;
use crate::script::Script;
use crate::watch::{self, Filter, Informer, Informers, Kind};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Name of the optional cleanup function in a controller's script.
pub(crate) const FINALIZE: &str = "finalize";

/// A controller's identity across versions: a hash of everything that shapes its behaviour
/// (its config entry, its script's text, `[operator]`, `[params]`, the CRDs, its namespace).
pub(crate) type Fingerprint = u64;

/// One controller in one namespace with its informers started, waiting to be run.
pub(crate) struct Prepared {
    pub ctx: Arc<Ctx>,
    pub primary: Arc<Informer>,
    pub related: Vec<(Arc<Informer>, Watch)>,
    pub reconcile_on_status: bool,
    pub concurrency: u16,
    pub resync: Option<Duration>,
    /// Equal across versions of the config exactly when this controller is unchanged.
    pub fingerprint: Fingerprint,
}

/// Resolves every controller's kinds and starts the informers it needs. A controller of a
/// namespaced kind runs once per watched namespace (or once for all); one of a cluster-scoped
/// kind runs once, with its owned and watched kinds cached in every watched namespace.
/// `namespaces` overrides `[operator] namespaces` when not empty.
pub(crate) async fn prepare(
    op: &Operator,
    client: &kube::Client,
    namespaces: &[String],
    informers: &Informers,
) -> Result<Vec<Prepared>, Error> {
    prepare_sharded(op, client, namespaces, informers, None).await
}

/// [`prepare`] for one shard (`khai run --shards`): the parents' and children's informers watch
/// only the objects labelled for `shard`.
pub(crate) async fn prepare_sharded(
    op: &Operator,
    client: &kube::Client,
    namespaces: &[String],
    informers: &Informers,
    shard: Option<&Arc<crate::shard::Settings>>,
) -> Result<Vec<Prepared>, Error> {
    let model = &op.config.model;
    let watched: Vec<String> = if namespaces.is_empty() {
        model.operator.namespaces.clone()
    } else {
        namespaces.to_vec()
    };
    let all_or_each: Vec<Option<String>> = if watched.is_empty() {
        vec![None]
    } else {
        watched.iter().cloned().map(Some).collect()
    };
    let shared = Shared {
        applier: Arc::new(Applier::new(client.clone(), model.clone())),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: format!("khai-{}", model.operator.name),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client: client.clone(),
        watched: watched.clone(),
        effects: Arc::new(
            crate::effects::Effects {
                k8s: Some(Arc::new(crate::effects::k8s::Api::new(
                    client.clone(),
                    model,
                ))),
                ..crate::effects::Effects::new(
                    tokio::runtime::Handle::current(),
                    crate::effects::Budget::default(),
                )
            }
            .reaching(
                Arc::new(crate::effects::http::Client::new(
                    &model.operator.http,
                    &|p| op.config.read(p),
                )?),
                Arc::new(crate::effects::secrets::Secrets::start(
                    &model.operator.secrets,
                    &watched,
                    informers,
                )),
            ),
        ),
    };
    let indexes = beside::indexes(op, client, informers, &all_or_each).await?;
    let mut by_kind = beside::by_kind(op, client).await?;
    let mut resolved = Vec::new();
    for ctl in &model.controllers {
        resolved.push(Kinds::resolve(client, model, ctl).await?);
    }
    let mut synthesized = Vec::new();
    for group in &mut by_kind {
        // Handlers join the controller of their kind when it selects every object; otherwise
        // (or with no controller) the kind gets a controller of its own that runs only them.
        let joins = model.controllers.iter().zip(&resolved).position(|(c, k)| {
            c.selector.is_none()
                && c.field_selector.is_none()
                && c.annotations.is_empty()
                && c.when.is_none()
                && k.primary == group.kind
        });
        match joins {
            Some(i) => group.controller = Some(i),
            None => synthesized.extend(
                group
                    .synthesize(&op.handlers)
                    .map(|(c, s)| (c, s, group.kind.clone())),
            ),
        }
    }
    let names: Vec<String> = model
        .controllers
        .iter()
        .chain(synthesized.iter().map(|(c, _, _)| c))
        .map(Controller::display_name)
        .collect();
    // By group and kind: two versions of one kind are one kind to a finalizer.
    let kinds: Vec<_> = resolved
        .iter()
        .map(|k| &k.primary)
        .chain(synthesized.iter().map(|(_, _, k)| k))
        .map(finalizer_names::key)
        .collect();
    let consumers: Vec<_> = kinds
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (kind, name))| finalizer_names::Consumer {
            kind,
            name,
            handlers_only: i >= model.controllers.len(),
        })
        .collect();
    let mut finalizer_names = finalizer_names::assign(&model.operator.name, &consumers).into_iter();
    let mut prepared = Vec::new();
    let controllers = model
        .controllers
        .iter()
        .zip(&op.scripts)
        .enumerate()
        .map(|(i, (c, s))| (Some(i), c, s))
        .chain(synthesized.iter().map(|(c, s, _)| (None, c, s)));
    for (i, ctl, script) in controllers {
        let kinds = match i {
            Some(i) => resolved[i].clone(),
            None => Kinds::resolve(client, model, ctl).await?,
        };
        let group = by_kind.iter().find(|g| match i {
            Some(i) => g.controller == Some(i),
            None => g.controller.is_none() && g.kind == kinds.primary,
        });
        let Some(finalizers) = finalizer_names.next() else {
            break;
        };
        let env = Env {
            finalizers,
            model,
            ctl,
            script,
            kinds: &kinds,
            informers,
            shared: &shared,
            reconciles: i.is_some(),
            beside: group.map(|g| g.start(op)),
            indexes: indexes.clone(),
            extra: beside::fingerprint(op),
            all_or_each: &all_or_each,
            shard,
        };
        if kinds.primary.namespaced {
            for ns in &all_or_each {
                prepared.push(env.one(Place::Namespace(ns.as_deref())));
            }
        } else {
            prepared.push(env.one(Place::Cluster(&all_or_each)));
        }
    }
    for inf in informers.all() {
        crate::metrics::watch_started(&inf.kind.resource.kind);
    }
    Ok(prepared)
}

/// Where one prepared controller's objects live.
#[derive(Debug, Clone, Copy)]
enum Place<'a> {
    /// A namespaced kind in one namespace, or in all (`None`).
    Namespace(Option<&'a str>),
    /// A cluster-scoped kind whose children and related objects live in these namespaces
    /// (`[None]`: all of them).
    Cluster(&'a [Option<String>]),
}

impl Place<'_> {
    /// The namespaces its owned and watched kinds are cached in.
    fn spread(&self) -> Vec<Option<&str>> {
        match self {
            Place::Namespace(ns) => vec![*ns],
            Place::Cluster(all) => all.iter().map(Option::as_deref).collect(),
        }
    }
}

/// The services every controller of one config version shares.
struct Shared {
    applier: Arc<Applier>,
    recorder: Recorder,
    client: kube::Client,
    /// The namespaces khai watches; empty means all.
    watched: Vec<String>,
    /// What scripts may reach (the `k8s` module through `client`, `http::…`, `ctx.secret`); each controller's carry its
    /// own budget.
    effects: Arc<crate::effects::Effects>,
}

/// The kinds one controller names, resolved.
#[derive(Clone)]
struct Kinds {
    primary: Kind,
    owned: Vec<Kind>,
    watched: Vec<(Kind, Watch)>,
}

impl Kinds {
    async fn resolve(
        client: &kube::Client,
        model: &Model,
        ctl: &Controller,
    ) -> Result<Self, Error> {
        let resolve = |k: &KindRef| {
            let k = k.clone();
            async move {
                watch::resolve(client, model, &k)
                    .await
                    .map_err(|cause| Error::Resolve {
                        controller: ctl.display_name(),
                        cause,
                    })
            }
        };
        let primary = resolve(&ctl.for_kind).await?;
        let mut owned = Vec::new();
        for o in &ctl.owns {
            owned.push(resolve(o).await?);
        }
        let mut watched = Vec::new();
        for w in &ctl.watches {
            watched.push((resolve(&w.kind).await?, w.clone()));
        }
        Ok(Self {
            primary,
            owned,
            watched,
        })
    }
}

/// What preparing one controller needs.
struct Env<'a> {
    /// Its finalizer and those of the other controllers of its kind.
    finalizers: finalizer_names::Names,
    model: &'a Model,
    ctl: &'a Controller,
    script: &'a Script,
    kinds: &'a Kinds,
    informers: &'a Informers,
    shared: &'a Shared,
    /// Whether the controller runs `reconcile` (not only handlers, timers or daemons).
    reconciles: bool,
    /// The handlers, timers and daemons of its kind, if any.
    beside: Option<beside::Started>,
    indexes: Option<Arc<crate::handler::index::IndexSet>>,
    /// What else the fingerprint covers: the handler, timer, daemon and index entries.
    extra: u64,
    /// Every watched namespace (`[None]`: all of them).
    all_or_each: &'a [Option<String>],
    /// The shard this replica is, with `--shards`.
    shard: Option<&'a Arc<crate::shard::Settings>>,
}

impl Env<'_> {
    /// Prepares the controller for the objects at `place`.
    fn one(&self, place: Place<'_>) -> Prepared {
        let Env {
            model,
            ctl,
            script,
            kinds,
            informers,
            shared,
            ..
        } = self;
        let name = ctl.display_name();
        let kind = &kinds.primary;
        let manage_status = model.crds.iter().any(|c| {
            c.status.is_some() && c.kind == kind.resource.kind && c.group == kind.resource.group
        });
        let finalize = (self.reconciles
            && script.has_function(FINALIZE, crate::operator::RECONCILE_ARITY))
        .then(|| FINALIZE.to_string());
        let filter = Filter {
            labels: ctl.selector.clone(),
            fields: ctl.field_selector.clone(),
        };
        let primary_ns = match place {
            Place::Namespace(ns) => ns,
            Place::Cluster(_) => None,
        };
        let spread = place.spread();
        // A shard caches its own parents and their children only.
        let (watch_filter, owned_filter) = match self.shard {
            Some(s) => (s.narrow(&filter), s.narrow(&Filter::default())),
            None => (filter.clone(), Filter::default()),
        };
        let primary = informers.filtered(kind, primary_ns, &watch_filter);
        // Unowned children may live in any watched namespace, not only their parent's.
        let children_spread = if ctl.unowned_children {
            self.all_or_each.iter().map(Option::as_deref).collect()
        } else {
            spread.clone()
        };
        let mut owned: Vec<Arc<Informer>> = Vec::new();
        for inf in kinds.owned.iter().flat_map(|o| {
            children_spread
                .iter()
                .map(|ns| informers.filtered(o, *ns, &owned_filter))
        }) {
            // A cluster-scoped kind has one informer, whatever the namespace asked for.
            if !owned.iter().any(|o| Arc::ptr_eq(o, &inf)) {
                owned.push(inf);
            }
        }
        // A watched kind whose objects name their parent by a label is cached per shard too;
        // the assignment webhook labels them for their parent's shard (docs/scaling.md).
        let watched = |k: &Kind, w: &Watch, ns: Option<&str>| match self.shard {
            Some(_) if w.sharded() => informers.filtered(k, ns, &owned_filter),
            _ => informers.informer(k, ns),
        };
        let related: Vec<_> = kinds
            .watched
            .iter()
            .flat_map(|(k, w)| spread.iter().map(|ns| (watched(k, w, *ns), w.clone())))
            .collect();
        let mut visible: Vec<_> = std::iter::once(primary.clone())
            .chain(owned.iter().cloned())
            .chain(related.iter().map(|(i, _)| i.clone()))
            .collect();
        // A controller of one namespace among several watched ones: its scripts may also read
        // the other namespaces (`ctx.list(kind, #{ namespace })`), through the informers the
        // controllers of those namespaces share with it.
        if let Place::Namespace(Some(own)) = place {
            for other in shared.watched.iter().filter(|ns| ns.as_str() != own) {
                let ns = Some(other.as_str());
                visible.push(informers.filtered(kind, ns, &watch_filter));
                visible.extend(
                    kinds
                        .owned
                        .iter()
                        .map(|k| informers.filtered(k, ns, &owned_filter)),
                );
                visible.extend(kinds.watched.iter().map(|(k, w)| watched(k, w, ns)));
            }
        }
        let mut unique: Vec<Arc<Informer>> = Vec::with_capacity(visible.len());
        for i in visible {
            if !unique.iter().any(|u| Arc::ptr_eq(u, &i)) {
                unique.push(i);
            }
        }
        let visible = unique;
        let ctx = Arc::new(Ctx {
            spec: Spec {
                controller: name.clone(),
                operator: model.operator.name.clone(),
                function: self.reconciles.then(|| ctl.reconcile.clone()),
                finalize,
                finalizer_name: self.finalizers.own.clone(),
                finalizers: self.finalizers.clone(),
                when: ctl.when.clone(),
                annotations: ctl.annotations.clone(),
                filter: filter.clone(),
                script: (*script).clone(),
                kind: kind.clone(),
                manage_status,
                params: Value::Object(model.params.clone()),
                children: crate::apply::Policy::of(ctl),
                effects: shared.effects.with_budget(ctl.budget),
                shard: self.shard.cloned(),
            },
            caches: Caches {
                primary: primary.clone(),
                owned,
                visible,
                namespaces: shared.watched.clone(),
            },
            services: Services {
                applier: shared.applier.clone(),
                client: shared.client.clone(),
                recorder: shared.recorder.clone(),
            },
            backoff: queue::Backoff::new(ctl.backoff.base.get(), ctl.backoff.cap.get()),
            objects: Default::default(),
            pending: queue::Pending::new(&name),
            beside: Beside {
                handlers: self.beside.as_ref().and_then(|(h, _)| h.clone()),
                clock: self.beside.as_ref().and_then(|(_, c)| c.clone()),
                indexes: self.indexes.clone(),
            },
            revisions: Default::default(),
        });
        Prepared {
            ctx,
            primary,
            related,
            reconcile_on_status: ctl.reconcile_on_status,
            concurrency: ctl.concurrency,
            resync: ctl.resync.map(crate::config::duration::Duration::get),
            fingerprint: fingerprint(model, ctl, script, primary_ns)
                ^ self.extra
                ^ finalizers_fingerprint(&self.finalizers),
        }
    }
}

/// What identifies a controller's finalizers across versions: another controller of its kind
/// coming or going changes which finalizers it must leave alone.
fn finalizers_fingerprint(names: &finalizer_names::Names) -> Fingerprint {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&names.own, &names.kind, names.sweeps).hash(&mut h);
    h.finish()
}

/// What identifies one controller in one namespace across versions of the config. `[operator]`
/// and the CRDs are included because they change what every controller writes; the script is
/// hashed by the text it was compiled from (scripts cannot import other files), never by the
/// file as it is now, which may already hold the next version.
fn fingerprint(
    model: &Model,
    ctl: &Controller,
    script: &Script,
    namespace: Option<&str>,
) -> Fingerprint {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let shape = (ctl, &model.operator, &model.crds, &model.params);
    serde_json::to_string(&shape)
        .unwrap_or_default()
        .hash(&mut h);
    script.source_hash().hash(&mut h);
    namespace.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script saved between loading the config and fingerprinting its controller must not run
    /// stale with the next reload (with the new text) looking unchanged.
    #[test]
    fn a_controller_is_fingerprinted_by_the_script_it_runs_not_the_file_now() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.rhai");
        std::fs::write(&file, "fn reconcile(obj, ctx) { 2 }").unwrap();
        let limits = crate::script::Limits::default();
        let engine = Arc::new(crate::script::engine(&limits));
        let compile = |src: &str| Script::compile(engine.clone(), &limits, &file, src).unwrap();
        let (v1, v2) = (
            compile("fn reconcile(obj, ctx) { 1 }"),
            compile("fn reconcile(obj, ctx) { 2 }"),
        );
        let model: Model =
            toml::from_str("[[controller]]\nfor = \"X\"\nscript = \"s.rhai\"").unwrap();
        let ctl = &model.controllers[0];
        assert_ne!(
            fingerprint(&model, ctl, &v1, None),
            fingerprint(&model, ctl, &v2, None),
            "the file holds v2's text, yet v1 was compiled from other text"
        );
        assert_eq!(
            fingerprint(&model, ctl, &v2, None),
            fingerprint(&model, ctl, &v2, None)
        );
    }
}
