//! `khai run` as a whole: installs the CRDs and admission policies, starts the informers,
//! prepares and runs the controllers ([`crate::controller`]) under leader election when asked,
//! swaps in each new version of the config, and drains in-flight reconciles on shutdown.

mod lifecycle;
mod policies;
mod running;
mod sharded;

use crate::controller::{self, Prepared};
use crate::leader::Elector;
use crate::operator::Operator;
use crate::reload::Updates;
use crate::watch::Informers;
use futures::FutureExt;
use lifecycle::{config_loaded, drain, lead, report_synced};
use running::Running;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long `khai run` waits for its CRDs to become Established.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// How long in-flight reconciles may run on after a shutdown signal, unless told otherwise.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// Settings of one run that do not come from the config file.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// Overrides `[operator] namespaces` when non-empty.
    pub namespaces: Vec<String>,
    /// Leader election; `None` reconciles at once, as the only replica.
    pub leader: Option<crate::leader::Settings>,
    /// How long in-flight reconciles may take to finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// A candidate revision of the config, run in the shadow of the active one
    /// ([`crate::revisions`]).
    pub candidate: Option<Arc<Operator>>,
    /// A canary rollout of the candidate ([`crate::revisions::rollout`]) instead of a shadow.
    pub rollout: Option<crate::revisions::rollout::Settings>,
    /// Sharding (`--shards`): this replica reconciles only the objects labelled for it.
    pub shards: Option<Arc<crate::shard::Settings>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            leader: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            candidate: None,
            rollout: None,
            shards: None,
        }
    }
}

/// Why a run ended in failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The config's CRDs could not be installed.
    #[error(transparent)]
    Schema(#[from] crate::schema::Error),
    /// The config's admission policies could not be installed.
    #[error(transparent)]
    Policy(#[from] policies::Error),
    /// The API server lacks what the config uses.
    #[error("the API server is Kubernetes {server}, older than this config needs:\n{missing}")]
    ServerTooOld {
        server: String,
        missing: crate::config::ConfigError,
    },
    /// A controller's kinds could not be resolved.
    #[error(transparent)]
    Prepare(#[from] controller::Error),
    /// Another replica took the lease over while this one led.
    #[error("lost the leader lease {lease}: {reason}")]
    LostLease { lease: String, reason: String },
}

/// Runs the operator until `shutdown` is cancelled; in-flight reconciles finish first (within
/// the grace period). With leader election, informers start at once (so standby replicas are
/// ready and take over with warm caches) but controllers run only while this replica leads.
///
/// With `updates`, each new version of the config is swapped in as a whole: it is prepared
/// (kinds resolved, CRDs installed, informers started or reused) while the running version keeps
/// reconciling, then the running controllers stop taking work, finish their in-flight
/// reconciles on the old version, and the new controllers start and reconcile every object. A
/// version that cannot be prepared is reported and the running one is kept.
pub(crate) async fn run(
    op: Operator,
    client: kube::Client,
    opts: RunOptions,
    updates: Option<Updates>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    config_loaded(&op);
    tokio::select! {
        res = install_crds(&op, &client) => res?,
        // A signal during start-up ends the run at once; nothing has been reconciled yet.
        () = shutdown.cancelled() => return Ok(()),
    }
    let informers = Informers::new(client.clone());
    let prepared = controller::prepare_sharded(
        &op,
        &client,
        &opts.namespaces,
        &informers,
        opts.shards.as_ref(),
    )
    .await?;
    let parents = sharded::parent_kinds(&prepared);
    let candidate = match &opts.candidate {
        Some(c) => match Candidate::prepare(c, &op, &client, &opts, &informers).await {
            Ok(c) => Some(c),
            // The active revision runs as it would without a candidate.
            Err(e) => {
                tracing::error!(error = %e, "the candidate revision cannot be prepared, so nothing runs in the shadow");
                None
            }
        },
        None => None,
    };
    if let Some(c) = &candidate {
        c.attach(&prepared);
    }
    offer_playground(&op, prepared.iter().map(|p| p.ctx.clone()).collect());
    let operator = op.config.model.operator.name.clone();
    if let Some(hook) = &op.handlers.startup {
        // Not ready (`report_synced` is not started) until the hook has succeeded.
        crate::handler::run_startup(hook, &operator, &shutdown).await;
        if shutdown.is_cancelled() {
            return Ok(());
        }
    }
    let cleanup = op.handlers.cleanup.clone();
    // Owned: aborted when the run ends, should the caches never all sync.
    let synced = tokio::spawn(tracing::Instrument::instrument(
        report_synced(informers.all()),
        tracing::info_span!("task", task = "cache sync report"),
    ));
    let env = Env {
        client: &client,
        opts: &opts,
        informers: &informers,
        candidate: candidate.as_ref(),
    };
    // Schedules run beside the controllers, so on the leader only, and stop with them;
    // sharded, on the replica holding the sharder Lease only, so each runs once per time.
    let (holding, held) = tokio::sync::watch::channel(false);
    let (entries, effects) = (
        op.handlers.schedules.clone(),
        schedule_effects(&op, &client),
    );
    let run_schedules = |stop: CancellationToken| {
        let (entries, effects) = (entries.clone(), effects.clone());
        crate::handler::schedule::run_all(entries, operator.clone(), effects, stop)
    };
    let schedules = async {
        match &opts.shards {
            Some(_) => {
                crate::shard::single::while_holding(held, &shutdown, run_schedules).await;
            }
            None => run_schedules(shutdown.clone()).await,
        }
    };
    let rollout = candidate.as_ref().and_then(|c| c.rollout.clone());
    let controllers = async {
        // Where the rollout stands is read before any object is reconciled, on the leader.
        let started = match &rollout {
            Some(r) => Some(r.resume().await),
            None => None,
        };
        let deciding = async {
            if let (Some(r), Some(resumed)) = (&rollout, started) {
                shutdown.run_until_cancelled(r.run(resumed)).await;
            }
        };
        futures::join!(
            supervise(prepared, updates, &env, &shutdown),
            schedules,
            deciding
        );
    };
    let result = match (&opts.leader, &opts.shards) {
        (_, Some(shard)) => {
            // Every shard may become the sharder; each reconciles while it holds its own Lease.
            let sharder = crate::shard::sharder::run(
                client.clone(),
                (**shard).clone(),
                parents,
                holding,
                shutdown.clone(),
            );
            let cached = count_cached(&informers);
            let elector = Elector::new(client.clone(), shard.member_lease());
            let shard = lead(elector, controllers, &shutdown, opts.shutdown_grace);
            let (result, (), ()) = futures::join!(
                shard,
                sharder,
                shutdown.run_until_cancelled(cached).map(|_| ())
            );
            result
        }
        (None, None) => {
            drain(controllers, &shutdown, opts.shutdown_grace).await;
            Ok(())
        }
        (Some(settings), None) => {
            let elector = Elector::new(client.clone(), settings.clone());
            lead(elector, controllers, &shutdown, opts.shutdown_grace).await
        }
    };
    synced.abort();
    if let Some(hook) = &cleanup {
        crate::handler::run_hook(hook, &operator, "cleanup").await;
    }
    informers.shutdown();
    tracing::info!("all controllers stopped");
    result
}

/// Exports how many objects the caches of each kind hold (`khai_cached_objects`), every
/// second, for as long as it is polled.
async fn count_cached(informers: &Informers) {
    loop {
        let mut by_kind: std::collections::BTreeMap<String, usize> = Default::default();
        for i in informers.all() {
            *by_kind.entry(i.kind.resource.kind.clone()).or_default() += i.store().len();
        }
        for (kind, n) in by_kind {
            crate::metrics::cached_objects(&kind, n);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What `[[schedule]]` calls may reach: the `k8s` module through the operator's client.
fn schedule_effects(op: &Operator, client: &kube::Client) -> Option<Arc<crate::effects::Effects>> {
    (!op.handlers.schedules.is_empty()).then(|| {
        let api = crate::effects::k8s::Api::new(client.clone(), &op.config.model);
        Arc::new(crate::effects::Effects {
            k8s: Some(Arc::new(api)),
            ..crate::effects::Effects::new(
                tokio::runtime::Handle::current(),
                crate::effects::Budget::default(),
            )
        })
    })
}

/// Installs the config's CRDs and waits for them to be Established, then its admission
/// policies, when it asks for that; first makes sure the API server has what the config uses.
async fn install_crds(op: &Operator, client: &kube::Client) -> Result<(), Error> {
    server_has_what_it_needs(op, client).await?;
    let model = &op.config.model;
    if model.operator.install_crds && !model.crds.is_empty() {
        crate::schema::install(
            client,
            &model.crds,
            model.operator.field_manager(),
            CRD_ESTABLISH_TIMEOUT,
        )
        .await?;
    }
    if model.operator.install_crds && !model.policies.is_empty() {
        policies::install(client, model, model.operator.field_manager()).await?;
    }
    Ok(())
}

/// Fails naming each feature of the config the API server is too old for. A server whose
/// version cannot be read is not held against the config.
async fn server_has_what_it_needs(op: &Operator, client: &kube::Client) -> Result<(), Error> {
    use crate::config::versions::{Version, too_new_for};
    let info = match client.apiserver_version().await {
        Ok(info) => info,
        Err(e) => {
            let e = crate::client::ApiError::from(e);
            tracing::debug!(error = %e, "cannot read the API server's version");
            return Ok(());
        }
    };
    let Some(server) = Version::reported(&info.major, &info.minor) else {
        return Ok(());
    };
    let missing = too_new_for(&op.config, server);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::ServerTooOld {
        server: info.git_version,
        missing: crate::config::ConfigError(missing),
    })
}

/// What preparing a new version of the config needs; lives as long as the run.
struct Env<'a> {
    client: &'a kube::Client,
    opts: &'a RunOptions,
    informers: &'a Informers,
    candidate: Option<&'a Candidate>,
}

/// The candidate revision's controllers, prepared over the run's informers and never started,
/// the book of where they diverge, and its canary rollout when one is asked for.
struct Candidate {
    prepared: Vec<Prepared>,
    book: Arc<crate::revisions::Book>,
    rollout: Option<Arc<crate::revisions::Rollout>>,
}

impl Candidate {
    /// Prepares `op`'s controllers, the candidate of `active`, and serves their divergences on
    /// the metrics port.
    async fn prepare(
        op: &Operator,
        active: &Operator,
        client: &kube::Client,
        opts: &RunOptions,
        informers: &Informers,
    ) -> Result<Self, Error> {
        // Sharded, the candidate sees this shard's objects, from the same caches.
        let prepared = controller::prepare_sharded(
            op,
            client,
            &opts.namespaces,
            informers,
            opts.shards.as_ref(),
        )
        .await?;
        let book = Arc::new(crate::revisions::Book::default());
        let page = book.clone();
        crate::metrics::server::serve_candidate(Box::new(move |text| page.page(text)));
        tracing::info!(
            candidate = %op.config.file.display(),
            controllers = prepared.len(),
            "candidate revision loaded; it runs in the shadow of the active one and writes nothing"
        );
        let rollout = opts.rollout.clone().map(|settings| {
            crate::revisions::Rollout::new(
                settings,
                active.content_hash(),
                op.content_hash(),
                client,
                &active.config.model.operator.name,
            )
        });
        Ok(Self {
            prepared,
            book,
            rollout,
        })
    }

    /// Shadows the controllers of `active` that the candidate has too, and routes them in a
    /// canary rollout.
    fn attach(&self, active: &[Prepared]) {
        let shadowed = crate::revisions::attach(active, &self.prepared, &self.book);
        let routed = self
            .rollout
            .as_ref()
            .map_or(0, |r| r.attach(active, &self.prepared));
        tracing::info!(
            shadowed,
            routed,
            "controllers shadowed by the candidate revision"
        );
    }
}

/// Runs `prepared` until `shutdown`, replacing it with each new version from `updates`: the
/// controllers that changed are restarted (reconciling all their objects with the new version),
/// the others keep running.
async fn supervise(
    prepared: Vec<Prepared>,
    mut updates: Option<Updates>,
    env: &Env<'_>,
    shutdown: &CancellationToken,
) {
    let start: running::Start<Prepared> = Box::new(|p, stop| Box::pin(controller::start(p, stop)));
    let ctxs = |p: &[Prepared]| p.iter().map(|p| p.ctx.clone()).collect::<Vec<_>>();
    let mut current = ctxs(&prepared);
    let mut running = Running::new(prepared, shutdown, start);
    loop {
        let (op, next) = tokio::select! {
            () = running.run() => return,
            next = next_version(&mut updates, env) => next,
        };
        let started = std::time::Instant::now();
        let old = std::mem::replace(&mut current, ctxs(&next));
        let swap = running.replace(next).await;
        if shutdown.is_cancelled() {
            running.run().await;
            return;
        }
        controller::release_abandoned(&old, &current).await;
        config_loaded(&op);
        offer_playground(&op, current.clone());
        crate::metrics::config_reloaded(true);
        let unwatched = env.informers.retain(|i| running.uses(i));
        tracing::info!(
            unwatched,
            config = %op.config.file.display(),
            restarted = swap.restarted,
            kept = swap.kept,
            stopped = swap.stopped,
            swapped_ms = started.elapsed().as_millis(),
            "config reloaded; changed controllers reconcile every object with the new version"
        );
    }
}

/// Hands the console (when it is on) the playground over `controllers`, those of `op`.
fn offer_playground(op: &Operator, controllers: Vec<Arc<controller::Ctx>>) {
    if crate::console::enabled() {
        let running = crate::playground::Running::new(&op.config, controllers);
        crate::console::playground(Arc::new(running));
    }
}

/// Waits for the next version from `updates` that can be prepared; reports those that cannot.
/// Pends forever without updates.
async fn next_version(
    updates: &mut Option<Updates>,
    env: &Env<'_>,
) -> (Arc<Operator>, Vec<Prepared>) {
    let Some(u) = updates else {
        return futures::future::pending().await;
    };
    loop {
        if u.versions.changed().await.is_err() {
            return futures::future::pending().await;
        }
        let Some(op) = u.versions.borrow_and_update().clone() else {
            continue;
        };
        let ready = async {
            install_crds(&op, env.client).await?;
            Ok::<_, Error>(
                controller::prepare_sharded(
                    &op,
                    env.client,
                    &env.opts.namespaces,
                    env.informers,
                    env.opts.shards.as_ref(),
                )
                .await?,
            )
        };
        match ready.await {
            Ok(prepared) => {
                if let Some(c) = env.candidate {
                    c.attach(&prepared);
                }
                return (op, prepared);
            }
            Err(e) => u.failures.report(&e.to_string()).await,
        }
    }
}
