//! `khai generate`: write out what khai would create, without a cluster.
//!
//! `khai generate crds` prints the exact CustomResourceDefinition manifests `khai run` applies,
//! so they can be reviewed, committed, or installed by other tooling (GitOps, Helm) when the
//! operator itself should not hold cluster-wide CRD rights. Further `generate` targets (RBAC,
//! a Helm chart) become further subcommands here.

use crate::config;
use crate::schema;
use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Print every CRD of the config as multi-document YAML, or write one file per CRD.
    Crds(CrdsArgs),
    /// Print the Validating/MutatingWebhookConfigurations of the config's `[[webhook]]`s.
    Webhooks(WebhooksArgs),
}

#[derive(Debug, clap::Args)]
pub struct WebhooksArgs {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// Point the configurations at this base URL (local development) instead of
    /// `[webhook_server] service`.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A PEM CA certificate file to put in every caBundle.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Write `<kind>.yaml` per configuration into this directory instead of printing.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// Write `<plural>.<group>.yaml` per CRD into this directory (created if missing) instead
    /// of printing to stdout.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Crds(args) => crds(&args),
        What::Webhooks(args) => webhooks(&args),
    }
}

fn webhooks(args: &WebhooksArgs) -> anyhow::Result<ExitCode> {
    use crate::webhook::manifests::{self, Target};
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
            std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?,
        ),
        None => None,
    };
    let docs = manifests::configurations(model, &target, ca.as_deref());
    if docs.is_empty() {
        anyhow::bail!(
            "{}: no [[webhook]] declares validate or mutate",
            config.file.display()
        );
    }
    let named = docs
        .into_iter()
        .map(|d| (d["kind"].as_str().unwrap_or_default().to_lowercase(), d))
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
pub fn to_yaml<'a>(manifests: impl IntoIterator<Item = &'a Value>) -> anyhow::Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
