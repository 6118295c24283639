//! Admission and conversion webhooks in Rhai, served over HTTPS on their own port.
//!
//! Each `[[webhook]]` names a script and up to three functions: `validate(req)` and
//! `mutate(req)` answer AdmissionReviews, `convert(obj, to_version)` answers ConversionReviews.
//! They run in the same hardened engine and limits as reconcile scripts, on the blocking pool.
//! The pieces, in request order: [`tls`] (the certificate, self-signed or reloaded from files;
//! a self-signed one is made by [`ca`] and shared by every replica through [`shared_ca`]),
//! [`server`] (listener, handshakes, timeouts), [`routes`] (paths, size limit, JSON errors),
//! [`gate`] (how many reviews run and wait at once), [`admission`] and [`conversion`] (reviews
//! through scripts). [`address`] reads `--webhook-url` (its port 0 is the port bound).
//! [`install`] applies the configurations that point the API server here (rendered by
//! [`crate::manifest::webhooks`]) with the self-signed caBundle. State lives as long as `khai
//! run`; the certificate may be swapped.
//!
//! If the server task ever dies (a panic outside any one request; a request's own panic is
//! answered 500), khai logs it at `error`, shuts down gracefully and `khai run` exits 1, so the
//! Pod is restarted rather than left running without the webhooks the cluster calls.

pub(crate) mod address;
pub mod admission;
pub mod ca;
pub mod conversion;
pub(crate) mod gate;
pub(crate) mod install;
pub(crate) mod routes;
pub(crate) mod server;
pub(crate) mod shared_ca;
pub mod tls;

pub use crate::script::webhook::Handler;

use crate::config::model::Model;
use crate::config::webhook::TlsMode;
use crate::manifest::webhooks::{self as manifests, Target};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the webhook server serves from: a loaded config and its compiled webhook scripts (a
/// loaded operator is one). The server needs nothing else of it.
pub trait Served: Send + Sync + 'static {
    fn config(&self) -> &crate::config::Config;
    fn handlers(&self) -> &[Handler];
}

impl Served for crate::operator::Operator {
    fn config(&self) -> &crate::config::Config {
        &self.config
    }
    fn handlers(&self) -> &[Handler] {
        &self.webhooks
    }
}

/// Each new version to serve; the newest wins (`None` before the first).
pub(crate) type Versions<T> = tokio::sync::watch::Receiver<Option<Arc<T>>>;

/// How `khai run` serves webhooks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the HTTPS server listens.
    pub bind: SocketAddr,
    /// The base URL the API server reaches khai at; overrides `[webhook_server] service`. A
    /// port of `0` in it stands for the port `bind` bound (useful with a `bind` port of 0).
    pub url: Option<String>,
    /// khai's own namespace, where a self-signed CA shared by every replica is kept
    /// ([`shared_ca`]); `None`: this process makes a CA of its own.
    pub namespace: Option<String>,
}

/// Errors starting the webhook server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Tls(#[from] tls::Error),
    #[error("cannot listen on {addr}: {cause}")]
    Bind {
        addr: SocketAddr,
        cause: std::io::Error,
    },
    #[error("{key}: {message}")]
    Setting { key: &'static str, message: String },
    #[error("failed to serve webhooks: {0}")]
    Stopped(String),
}

/// Binds, makes or reads the certificate, and spawns the server (plus the certificate reloader
/// and, for a self-signed certificate, the install of khai's own configurations). Returns the
/// server task, which ends when `shutdown` is cancelled, or with an error when the server
/// failed (after cancelling `shutdown`).
pub(crate) async fn start<T: Served>(
    op: &T,
    client: kube::Client,
    settings: Settings,
    reloads: Option<Versions<T>>,
    assign: Option<routes::Assign>,
    shutdown: CancellationToken,
    tasks: &crate::tasks::Tasks,
) -> Result<JoinHandle<Result<(), Error>>, Error> {
    let model = &op.config().model;
    let server = &model.webhook_server;
    let duration = |key: &'static str, value: &str| {
        crate::config::duration::parse(value).map_err(|e| Error::Setting {
            key,
            message: e.to_string(),
        })
    };
    let timeout = duration("webhook_server.request_timeout", &server.request_timeout)?;
    let (resolver, ca) = match server.tls {
        TlsMode::SelfSigned => {
            let made = self_signed(&client, model, &settings, &dns_names(op, &settings)).await?;
            (
                tls::Resolver::new(tls::certified_key(&made.pair, self_signed_files())?),
                Some(made.ca_cert),
            )
        }
        TlsMode::Files => {
            let interval = duration("webhook_server.reload_interval", &server.reload_interval)?;
            let (cert, key) = cert_files(op)?;
            let pair = tls::load_pair(&cert, &key).await?;
            let resolver = tls::Resolver::new(tls::certified_key(&pair, (&cert, &key))?);
            let reload = tls::watch_files(
                resolver.clone(),
                (cert, key),
                pair,
                interval,
                shutdown.clone(),
            );
            tasks.spawn("webhook certificate reload", reload);
            (resolver, None)
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(resolver)?));
    let (listener, bound) = crate::serve::listen(settings.bind, "webhook", "webhooks over HTTPS")
        .await
        .map_err(|cause| Error::Bind {
            addr: settings.bind,
            cause,
        })?;
    let target = target(op, &settings, bound.port());
    let installer = match (ca, target) {
        (Some(ca), Some(target)) => Some(Installer {
            client,
            target,
            ca,
            shard_label: assign.as_ref().map(|a| a.rules.label().to_string()),
        }),
        (Some(_), None) => {
            tracing::warn!(
                "not installing webhook configurations: pass --webhook-url or set [webhook_server] service"
            );
            None
        }
        (None, _) => None,
    };
    if let Some(i) = &installer {
        tasks.spawn(
            "webhook configuration install",
            i.install(model.clone(), shutdown.clone()),
        );
    }
    let routes = Arc::new(routes::Routes::new(
        op.handlers().to_vec(),
        routes::Limits::of(server, timeout),
        assign,
    ));
    if let Some(versions) = reloads {
        let follow = follow(
            routes.clone(),
            versions,
            installer,
            model.clone(),
            shutdown.clone(),
            tasks.clone(),
        );
        let stop = shutdown.clone();
        tasks.spawn("webhook reload", async move {
            stop.run_until_cancelled(follow).await;
        });
    }
    let options = server::Options {
        timeout,
        max_connections: server.max_connections,
    };
    let serving = tasks.spawn(
        "webhook server",
        server::serve_on_own_thread(listener, acceptor, routes, options, shutdown.clone()),
    );
    Ok(tasks.spawn("webhook supervisor", supervise(serving, shutdown)))
}

/// What names a self-signed pair in errors, as the files of a pair read from files.
fn self_signed_files() -> (&'static std::path::Path, &'static std::path::Path) {
    (
        std::path::Path::new("<self-signed>"),
        std::path::Path::new("<key>"),
    )
}

/// How long to wait before each further try at the shared CA after a transient failure.
const SHARED_CA_RETRIES: [std::time::Duration; 3] = [
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(2),
    std::time::Duration::from_secs(4),
];

/// The self-signed CA and serving certificate for `names`: the one every replica shares
/// through its Secret in khai's own namespace, or, when that Secret cannot be used (no
/// namespace, no permission), one of this process's own, with one warning saying why.
async fn self_signed(
    client: &kube::Client,
    model: &Model,
    settings: &Settings,
    names: &[String],
) -> Result<ca::Material, Error> {
    if let Some(namespace) = &settings.namespace {
        let place = shared_ca::Place {
            namespace: namespace.clone(),
            name: manifests::tls_secret_name(model),
        };
        let secret = format!("{}/{}", place.namespace, place.name);
        // A replica that falls back installs a caBundle the others do not serve, so a
        // transient failure is worth a few seconds of waiting first.
        let mut obtained = shared_ca::obtain(client, &place, names).await;
        for wait in SHARED_CA_RETRIES {
            match &obtained {
                Err(e) if e.is_transient() => {
                    tracing::info!(%secret, error = %e, "cannot read the shared webhook CA yet; trying again");
                    tokio::time::sleep(wait).await;
                    obtained = shared_ca::obtain(client, &place, names).await;
                }
                _ => break,
            }
        }
        match obtained {
            Ok(made) => match tls::certified_key(&made.pair, self_signed_files()) {
                Ok(_) => return Ok(made),
                Err(e) => tracing::warn!(
                    %secret, error = %e,
                    "the shared webhook certificate does not load; this replica uses a CA of its own, so with more than one replica the API server trusts only the last one started"
                ),
            },
            Err(e) if e.is_forbidden() => tracing::warn!(
                %secret, error = %e,
                "cannot share the self-signed webhook CA: khai needs get, create and update on the Secret {secret} (khai generate rbac grants them); this replica uses a CA of its own, so with more than one replica the API server trusts only the last one started"
            ),
            Err(e) => tracing::warn!(
                %secret, error = %e,
                "cannot share the self-signed webhook CA; this replica uses a CA of its own, so with more than one replica the API server trusts only the last one started"
            ),
        }
    }
    Ok(ca::Material::new(names, jiff::Timestamp::now())?)
}

/// Waits for the server task. If it ends other than by `shutdown` (it panicked), logs why at
/// `error`, cancels `shutdown` so khai stops gracefully (in-flight reconciles finish, the lease
/// is released), and returns the error so `khai run` exits non-zero and the Pod restarts:
/// running on without the webhooks would leave the API server failing or skipping every call.
async fn supervise(
    server: JoinHandle<Result<(), String>>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let why = match server.await {
        Ok(Ok(())) if shutdown.is_cancelled() => return Ok(()),
        Ok(Ok(())) => "it stopped serving".to_string(),
        Ok(Err(why)) => why,
        Err(e) if e.is_panic() => format!(
            "panicked: {}",
            crate::tasks::panic_message(&*e.into_panic())
        ),
        Err(e) => e.to_string(),
    };
    tracing::error!(reason = %why, "the webhook server failed; shutting khai down");
    shutdown.cancel();
    Err(Error::Stopped(why))
}

/// What khai needs to keep its own webhook configurations applied (self-signed mode).
struct Installer {
    client: kube::Client,
    target: Target,
    ca: String,
    /// The shard label, when khai serves the shard assignment webhook.
    shard_label: Option<String>,
}

impl Installer {
    fn install(
        &self,
        model: Model,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + use<> {
        install::run(
            self.client.clone(),
            model,
            self.target.clone(),
            self.ca.clone(),
            self.shard_label.clone(),
            shutdown,
        )
    }
}

/// Hot reload: serves each new version's webhook scripts from the next request on (requests in
/// flight finish on the old ones) and, when khai installs its own configurations, re-applies
/// them if the new version registers different ones. The listener, the certificate and
/// `[webhook_server]` stay as started: changing those takes a restart, which is logged.
async fn follow<T: Served>(
    routes: Arc<routes::Routes>,
    mut versions: Versions<T>,
    installer: Option<Installer>,
    mut model: Model,
    shutdown: CancellationToken,
    tasks: crate::tasks::Tasks,
) {
    let mut installing: Option<CancellationToken> = None;
    while versions.changed().await.is_ok() {
        let Some(op) = versions.borrow_and_update().clone() else {
            continue;
        };
        routes.replace(op.handlers().to_vec());
        let next = &op.config().model;
        tracing::info!(webhooks = op.handlers().len(), "webhook scripts reloaded");
        if next.webhook_server != model.webhook_server {
            tracing::warn!(
                "[webhook_server] changed; the webhook server keeps its listener and certificate until khai restarts"
            );
        }
        if let Some(i) = &installer
            && registrations(next, &i.target) != registrations(&model, &i.target)
        {
            let token = shutdown.child_token();
            if let Some(previous) = installing.replace(token.clone()) {
                previous.cancel();
            }
            tasks.spawn(
                "webhook configuration install",
                i.install(next.clone(), token),
            );
        }
        model = next.clone();
    }
}

/// The configurations and CRD conversion settings `model` registers, for comparing versions.
fn registrations(model: &Model, target: &Target) -> Vec<serde_json::Value> {
    let mut all = manifests::configurations(model, target, None);
    all.extend(
        model
            .webhooks
            .iter()
            .filter_map(|h| manifests::crd_conversion(model, h, target, None)),
    );
    all
}

/// Where the API server calls khai: `--webhook-url` (its port 0 replaced by `port`, the one
/// bound), else `[webhook_server] service`.
fn target<T: Served>(op: &T, settings: &Settings, port: u16) -> Option<Target> {
    let url = settings.url.as_deref();
    url.map(|u| Target::Url(address::with_bound_port(u, port)))
        .or_else(|| {
            op.config()
                .model
                .webhook_server
                .service
                .clone()
                .map(Target::Service)
        })
}

/// Names the self-signed certificate is valid for: the Service's DNS names, the host of
/// `--webhook-url`, `localhost` and 127.0.0.1.
fn dns_names<T: Served>(op: &T, settings: &Settings) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(s) = &op.config().model.webhook_server.service {
        let (n, ns) = (&s.name, &s.namespace);
        names.extend([
            format!("{n}.{ns}.svc"),
            format!("{n}.{ns}.svc.cluster.local"),
            format!("{n}.{ns}"),
            n.clone(),
        ]);
    }
    if let Some(host) = settings.url.as_deref().and_then(address::url_host) {
        names.push(host);
    }
    names.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

fn cert_files<T: Served>(op: &T) -> Result<(std::path::PathBuf, std::path::PathBuf), Error> {
    let server = &op.config().model.webhook_server;
    let missing = |key| Error::Setting {
        key,
        message: "tls = \"files\" needs it".into(),
    };
    let cert = server
        .cert_file
        .as_ref()
        .ok_or_else(|| missing("webhook_server.cert_file"))?;
    let key = server
        .key_file
        .as_ref()
        .ok_or_else(|| missing("webhook_server.key_file"))?;
    Ok((op.config().resolve(cert), op.config().resolve(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in the webhook server task is an error, not a silent end of webhooks.
    #[tokio::test]
    async fn a_panicking_server_task_is_reported_and_shuts_khai_down() {
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(async { panic!("boom") });
        let err = supervise(server, shutdown.clone()).await.unwrap_err();
        assert_eq!(err.to_string(), "failed to serve webhooks: panicked: boom");
        assert!(shutdown.is_cancelled(), "khai is told to shut down");
    }

    /// The shared Secret of operator `x` in namespace `khai`.
    const SECRET: &str = "/api/v1/namespaces/khai/secrets/khai-x-webhook-tls";

    /// [`self_signed`] for operator `x` with khai's namespace `khai`, against `api`; what it
    /// returned and what it logged.
    async fn self_signed_in_namespace_khai(
        api: &crate::fake_api::FakeApi,
    ) -> (Result<ca::Material, Error>, String) {
        let src = "[operator]\nname = \"x\"\n";
        let model = crate::config::parse(std::path::Path::new("operator.toml"), src).unwrap();
        let settings = Settings {
            bind: "127.0.0.1:0".parse().unwrap(),
            url: None,
            namespace: Some("khai".into()),
        };
        let names = ["127.0.0.1".to_string()];
        let client = api.client();
        crate::test_logs::capture(self_signed(&client, &model, &settings, &names)).await
    }

    /// A 403 on the shared Secret is no reason to stop: this replica makes a CA of its own and
    /// says once which Secret it could not use and what khai needs on it.
    #[tokio::test]
    async fn without_the_right_to_the_secret_a_replica_makes_a_ca_of_its_own_and_says_why() {
        let api = crate::fake_api::FakeApi::default();
        api.refuse(
            SECRET,
            403,
            "secrets \"khai-x-webhook-tls\" is forbidden",
            1,
        );
        let (made, logs) = self_signed_in_namespace_khai(&api).await;
        let made = made.unwrap();
        assert!(made.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(logs.matches(" WARN ").count(), 1, "{logs}");
        assert!(
            logs.contains("secret=khai/khai-x-webhook-tls")
                && logs.contains("no permission to get the Secret khai/khai-x-webhook-tls")
                && logs.contains("khai needs get, create and update on the Secret"),
            "{logs}"
        );
        assert!(api.writes().is_empty());
    }

    /// An API server failing for a moment (503) is waited out: the replica then shares the
    /// CA, rather than installing one the others do not serve.
    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_on_the_secret_is_retried_before_falling_back() {
        let api = crate::fake_api::FakeApi::default();
        api.fail(SECRET, 503, 2);
        let (made, logs) = self_signed_in_namespace_khai(&api).await;
        let made = made.unwrap();
        assert_eq!(logs.matches(" WARN ").count(), 0, "{logs}");
        let stored = api.get(SECRET).expect("the shared Secret was created");
        let ca = stored["data"]["ca.crt"].as_str().unwrap();
        let ca = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, ca).unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), made.ca_cert);
    }

    #[tokio::test]
    async fn a_server_that_stops_on_shutdown_is_fine() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let server = tokio::spawn(async { Ok(()) });
        assert!(supervise(server, shutdown).await.is_ok());
    }
}
