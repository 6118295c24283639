//! `khai generate`: write out what khai would create, without a cluster.
//!
//! `khai generate crds` prints the exact CustomResourceDefinition manifests `khai run` applies,
//! so they can be reviewed, committed, or installed by other tooling (GitOps, Helm) when the
//! operator itself should not hold cluster-wide CRD rights. `khai generate rbac`,
//! `khai generate manifests` and `khai generate values` (the Helm chart's values) print what
//! [`crate::manifest`] derives; `webhooks` prints the admission configurations.

use crate::config;
use crate::schema;
use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum What {
    /// Print every CRD of the config as multi-document YAML, or write one file per CRD.
    Crds(CrdsArgs),
    /// Print the Validating/MutatingWebhookConfigurations of the config's `[[webhook]]`s.
    Webhooks(WebhooksArgs),
    /// Print the least-privilege ServiceAccount, ClusterRole/Roles and bindings khai needs.
    Rbac(RbacCommand),
    /// Print everything to deploy the operator: Namespace, CRDs, RBAC, ConfigMap, Service,
    /// Deployment and webhook configurations.
    Manifests(ManifestsArgs),
    /// Print the values for the Helm chart (charts/khai): the operator's name, its files, the
    /// RBAC rules, webhook settings and (with `install_crds = false`) its CRDs. Then:
    /// `helm install NAME charts/khai -f values.yaml`.
    Values(ValuesArgs),
}

/// What RBAC is derived for: the config and the namespaces. Shared by `generate rbac`,
/// `generate manifests` and `rbac verify`, so all three mean the same permissions.
#[derive(Debug, clap::Args)]
pub(crate) struct RbacScope {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// khai's own namespace (ServiceAccount, leader election Lease)
    /// [default: `[webhook_server] service` namespace, else `<operator>-system`].
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Namespace khai watches (repeatable), as `khai run --namespace`; overrides
    /// `[operator] namespaces`. Namespaced operators get Roles instead of a ClusterRole.
    #[arg(long = "watch-namespace", value_name = "NS")]
    pub(crate) watch_namespaces: Vec<String>,
    /// khai runs sharded (`khai run --shards`, docs/scaling.md): also the sharder's label
    /// patches, the shard Leases watched and, with a self-signed certificate, the assignment
    /// webhook's configuration.
    #[arg(long)]
    pub shards: bool,
}

impl RbacScope {
    /// Loads the config and derives its RBAC plan; also returns khai's own namespace.
    /// `config_map` is the ConfigMap in khai's own namespace that khai reads its config from
    /// (`khai run --config configmap:NS/NAME`), if it does.
    pub(crate) fn plan(
        &self,
        config_map: Option<String>,
    ) -> anyhow::Result<(
        crate::operator::Operator,
        String,
        crate::manifest::rbac::Plan,
    )> {
        let (op, finalizes) = load_operator(&self.config)?;
        let model = &op.config.model;
        let namespace = self.own_namespace(model);
        let plan = crate::manifest::rbac::plan(&crate::manifest::rbac::Input {
            model,
            finalizes,
            watch_namespaces: self.watch_namespaces.clone(),
            config_map,
            // khai serves the assignment webhook wherever the API server can reach it.
            shards: self
                .shards
                .then_some(crate::manifest::rbac::shards::Sharding {
                    assign_webhook: true,
                }),
        });
        Ok((op, namespace, plan))
    }

    /// `--namespace`, else the `[webhook_server] service` namespace, else `<operator>-system`.
    pub(crate) fn own_namespace(&self, model: &config::model::Model) -> String {
        self.namespace.clone().unwrap_or_else(|| {
            model.webhook_server.service.as_ref().map_or_else(
                || format!("{}-system", model.operator.name),
                |s| s.namespace.clone(),
            )
        })
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct RbacArgs {
    #[command(flatten)]
    pub scope: RbacScope,
    /// Write one file per object into this directory instead of printing.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

/// `khai generate rbac`: [`RbacArgs`] and the command the RBAC is for.
#[derive(Debug, clap::Args)]
pub(crate) struct RbacCommand {
    #[command(flatten)]
    pub rbac: RbacArgs,
    /// Which command the RBAC is for: `khai run`, or `khai diff` (read-only but for `create` and
    /// `patch` on the owned kinds, which its server-side apply dry runs need; named
    /// `khai-<operator>-diff`).
    #[arg(long = "for", value_enum, default_value_t = Purpose::Run)]
    pub purpose: Purpose,
    /// khai serves its console off loopback (`--console 0.0.0.0:8081`): it may then create
    /// TokenReviews and SubjectAccessReviews, to check the tokens sent to it.
    #[arg(long)]
    pub console_off_loopback: bool,
}

/// The command generated RBAC is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Purpose {
    Run,
    Diff,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ManifestsArgs {
    #[command(flatten)]
    pub rbac: RbacArgs,
    /// The khai container image.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Replicas of the Deployment. Each runs with `--leader-elect` (one leads, the others stand
    /// by), or with `--shards` as a shard of its own.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ValuesArgs {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// Namespace khai watches (repeatable), as `khai run --namespace`; overrides
    /// `[operator] namespaces`. Namespaced operators get Roles instead of a ClusterRole.
    #[arg(long = "watch-namespace", value_name = "NS")]
    pub(crate) watch_namespaces: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WebhooksArgs {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// Point the configurations at this base URL (local development) instead of
    /// `[webhook_server] service`.
    #[arg(long, value_name = "URL", value_parser = fixed_port_url)]
    pub url: Option<String>,
    /// A PEM CA certificate file to put in every caBundle.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Also the shard assignment webhook's configuration, for `khai run --shards`.
    #[arg(long)]
    pub shards: bool,
    /// Write `<kind>.yaml` per configuration into this directory instead of printing.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CrdsArgs {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// Write `<plural>.<group>.yaml` per CRD into this directory (created if missing) instead
    /// of printing to stdout.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Crds(args) => crds(&args),
        What::Webhooks(args) => webhooks(&args),
        What::Rbac(args) => rbac(&args),
        What::Manifests(args) => deploy(&args),
        What::Values(args) => values(&args),
    }
}

/// Loads the operator with its scripts compiled: whether a script defines `finalize` decides
/// whether khai needs to patch the primary.
fn load_operator(path: &Path) -> anyhow::Result<(crate::operator::Operator, Vec<bool>)> {
    let op = crate::operator::Operator::load(path)?;
    let finalizes = op
        .scripts
        .iter()
        .map(|s| s.has_function("finalize", crate::operator::RECONCILE_ARITY))
        .collect();
    Ok((op, finalizes))
}

/// `<kind>[-<namespace>]-<name>`, lower-case: a file name unique per object.
fn file_name(m: &Value) -> String {
    let kind = m["kind"].as_str().unwrap_or_default().to_lowercase();
    let name = m["metadata"]["name"].as_str().unwrap_or_default();
    match m["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind}-{ns}-{name}"),
        None => format!("{kind}-{name}"),
    }
}

fn emit(output: Option<&Path>, docs: Vec<Value>) -> anyhow::Result<ExitCode> {
    match output {
        None => print!("{}", to_yaml(&docs)?),
        Some(dir) => {
            let named: Vec<(String, Value)> =
                docs.into_iter().map(|d| (file_name(&d), d)).collect();
            write_files(dir, &named)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rbac(command: &RbacCommand) -> anyhow::Result<ExitCode> {
    let args = &command.rbac;
    let (op, namespace, mut plan) = args.scope.plan(None)?;
    if command.console_off_loopback {
        crate::manifest::rbac::console_reviews(&mut plan);
    }
    let model = &op.config.model;
    let docs = match command.purpose {
        Purpose::Run => crate::manifest::rbac::manifests(model, &namespace, &plan),
        Purpose::Diff => {
            use crate::manifest::rbac::diff;
            let plan = diff::plan(&crate::manifest::rbac::Input {
                model,
                // A finalizer only adds writes, which a diff does not make.
                finalizes: Vec::new(),
                watch_namespaces: args.scope.watch_namespaces.clone(),
                config_map: None,
                shards: None,
            });
            diff::manifests(model, &namespace, &plan)
        }
    };
    emit(args.output.as_deref(), docs)
}

/// The config file and every file it names ([`config::model::Model::files`]), by path relative
/// to the config file, as the ConfigMap holds them.
fn config_files(config: &config::Config) -> anyhow::Result<Vec<crate::manifest::deploy::File>> {
    use crate::manifest::deploy::File;
    let config_name = config
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "operator.toml".into());
    let mut files = vec![File {
        path: config_name,
        content: config.source.clone(),
    }];
    for p in config.model.files() {
        // Stored under the path a ConfigMap lookup normalises to (`./x.rhai` is `x.rhai`).
        let path = config::files::normalise(p).with_context(|| {
            format!(
                "{}: cannot be shipped with the config: only paths inside the config's \
                 directory can (no `..`, not absolute)",
                p.display()
            )
        })?;
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        let content = config
            .read(p)
            .with_context(|| format!("cannot read {}", config.resolve(p).display()))?;
        files.push(File { path, content });
    }
    Ok(files)
}

fn deploy(args: &ManifestsArgs) -> anyhow::Result<ExitCode> {
    use crate::manifest::deploy;
    let (op, finalizes) = load_operator(&args.rbac.scope.config)?;
    let config = &op.config;
    let model = &config.model;
    let files = config_files(config)?;
    let crds = model
        .crds
        .iter()
        .map(schema::crd_manifest)
        .collect::<Result<Vec<Value>, schema::Error>>()?;
    let settings = deploy::Settings {
        namespace: args.rbac.scope.own_namespace(model),
        image: args.image.clone().unwrap_or_else(deploy::default_image),
        replicas: args.replicas,
        finalizes,
        watch_namespaces: args.rbac.scope.watch_namespaces.clone(),
        shards: args.rbac.scope.shards,
    };
    emit(
        args.rbac.output.as_deref(),
        deploy::manifests(model, &settings, &files, crds),
    )
}

fn values(args: &ValuesArgs) -> anyhow::Result<ExitCode> {
    let scope = RbacScope {
        config: args.config.clone(),
        namespace: None,
        watch_namespaces: args.watch_namespaces.clone(),
        shards: false,
    };
    let (op, _, plan) = scope.plan(None)?;
    let config = &op.config;
    let files = config_files(config)?;
    let crds = if config.model.operator.install_crds {
        None
    } else {
        let docs = config
            .model
            .crds
            .iter()
            .map(schema::crd_manifest)
            .collect::<Result<Vec<Value>, schema::Error>>()?;
        Some(to_yaml(&docs)?)
    };
    let policy_docs = crate::manifest::policies::manifests(&config.model);
    let policies = if config.model.operator.install_crds || policy_docs.is_empty() {
        None
    } else {
        Some(to_yaml(&policy_docs)?)
    };
    let configurations = crate::manifest::values::webhook_configurations(&config.model);
    let webhooks = if configurations.is_empty() {
        None
    } else {
        Some(to_yaml(&configurations)?)
    };
    // The chart serves the assignment webhook with `webhook.enabled`, and grants its rules then.
    let sharding = crate::manifest::rbac::shards::extra(
        &config.model,
        &plan.namespaces,
        crate::manifest::rbac::shards::Sharding {
            assign_webhook: true,
        },
    );
    let values = crate::manifest::values::values(&crate::manifest::values::Input {
        model: &config.model,
        files: &files,
        plan: &plan,
        sharding: &sharding,
        crds,
        policies,
        webhook_configurations: webhooks,
    });
    print!(
        "# Values for the khai chart, from `khai generate values {}`. Install with\n\
         #   helm install NAME charts/khai -f values.yaml\n{}",
        args.config.display(),
        serde_saphyr::to_string(&values).context("failed to render YAML")?
    );
    Ok(ExitCode::SUCCESS)
}

fn webhooks(args: &WebhooksArgs) -> anyhow::Result<ExitCode> {
    use crate::manifest::webhooks::{self as manifests, Target};
    let config = config::load(&args.config)?;
    let model = &config.model;
    let target = match (&args.url, &model.webhook_server.service) {
        (Some(url), _) => Target::Url(url.clone()),
        (None, Some(svc)) => Target::Service(svc.clone()),
        (None, None) => anyhow::bail!(
            "{}: no [webhook_server] service to point at; set one or pass --url",
            config.file.display()
        ),
    };
    let ca = match &args.ca_file {
        Some(f) => Some(
            crate::config::files::read_regular(f)
                .with_context(|| format!("cannot read {}", f.display()))?,
        ),
        None => None,
    };
    let mut docs = manifests::configurations(model, &target, ca.as_deref());
    if args.shards {
        let label = crate::shard::label_of(&model.operator.name);
        let drain = crate::shard::drain_label_of(&model.operator.name);
        docs.push(crate::manifest::sharding::configuration(
            model,
            &label,
            &drain,
            &target,
            ca.as_deref(),
        ));
    }
    if docs.is_empty() {
        anyhow::bail!(
            "{}: no [[webhook]] declares validate or mutate",
            config.file.display()
        );
    }
    let named = docs
        .into_iter()
        .map(|d| {
            let kind = d["kind"].as_str().unwrap_or_default().to_lowercase();
            match d["metadata"]["name"].as_str() {
                Some(n) if n.ends_with("-shard") => (format!("{kind}-shard"), d),
                _ => (kind, d),
            }
        })
        .collect::<Vec<_>>();
    match &args.output {
        None => print!("{}", to_yaml(named.iter().map(|(_, m)| m))?),
        Some(dir) => write_files(dir, &named)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn crds(args: &CrdsArgs) -> anyhow::Result<ExitCode> {
    let config = config::load(&args.config)?;
    let manifests = config
        .model
        .crds
        .iter()
        .map(|crd| Ok((crd.crd_name(), schema::crd_manifest(crd)?)))
        .collect::<Result<Vec<(String, Value)>, schema::Error>>()?;
    match &args.output {
        None => print!("{}", to_yaml(manifests.iter().map(|(_, m)| m))?),
        Some(dir) => write_files(dir, &manifests)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Manifests as YAML documents, each starting with `---` so the output concatenates safely.
pub(super) fn to_yaml<'a>(
    manifests: impl IntoIterator<Item = &'a Value>,
) -> anyhow::Result<String> {
    let mut out = String::new();
    for m in manifests {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(m).context("failed to render YAML")?);
    }
    Ok(out)
}

fn write_files(dir: &Path, manifests: &[(String, Value)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    for (name, manifest) in manifests {
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, to_yaml([manifest])?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// A `--url` of `khai generate webhooks` naming port 0, which only `khai run` can fill.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} names port 0, which stands for the port `khai run --webhook-bind` binds and is not \
     known here; give the port the API server calls"
)]
struct PortZeroUrl(String);

fn fixed_port_url(s: &str) -> Result<String, PortZeroUrl> {
    if crate::webhook::address::port_is_zero(s) {
        Err(PortZeroUrl(s.to_string()))
    } else {
        Ok(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn generate_refuses_a_url_with_port_0_and_keeps_any_other() {
        let err = fixed_port_url("https://127.0.0.1:0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"https://127.0.0.1:0\" names port 0, which stands for the port `khai run \
             --webhook-bind` binds and is not known here; give the port the API server calls"
        );
        assert_eq!(
            fixed_port_url("https://127.0.0.1:9443").unwrap(),
            "https://127.0.0.1:9443"
        );
    }

    #[test]
    fn yaml_round_trips_values_that_look_like_other_types() {
        let docs = [
            json!({ "a": "true", "b": "1", "c": "v1", "d": "", "e": "- x", "f": 1, "g": 0.5 }),
            json!({ "pattern": "^(\\d+|\\d+%)$", "list": ["on", "null", "~"], "nested": { "x": false } }),
        ];
        let yaml = to_yaml(&docs).unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        let back: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
        assert_eq!(back, docs);
    }
}
