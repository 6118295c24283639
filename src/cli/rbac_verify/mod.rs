//! `khai rbac verify`: checks that every permission the config needs — the rules
//! `khai generate rbac` derives ([`crate::manifest::rbac`]) — is granted, and prints what is
//! missing. Exit status 1 if anything is.
//!
//! Each rule is checked verb by verb (and resource name by resource name) where it applies:
//! ClusterRole rules cluster-wide, the Role rules of a namespaced operator in every watched
//! namespace, the leader election rules in khai's own namespace, and the rules on a Secret that
//! `[operator] secrets` names in another namespace (`namespace/name`) in that namespace, and
//! with `--config-map` the rules on the config's ConfigMap in khai's own namespace. Live,
//! the API server answers a SelfSubjectAccessReview for each, for the current credentials. With
//! `--file`, the check is offline, against the ClusterRoles and Roles in a YAML file (as Kopf's
//! `rbac verify -f`): a ClusterRole's rules count everywhere, a Role's only in its namespace,
//! and rules match as the API server's RBAC authorizer matches them (`*` verbs, groups and
//! resources, `resource/*` and `*/subresource`, resourceNames, nonResourceURLs ending in `*`).
//! Bindings are not followed.

mod access;
mod rules_file;

use access::{Access, needed, review};
use anyhow::Context;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use kube::api::{Api, PostParams};
use rules_file::{FileError, granted, grants};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum What {
    /// Check that the current credentials (KUBECONFIG, or the in-cluster ServiceAccount) hold
    /// every permission `khai generate rbac` derives for the config; exit 1 naming what is
    /// missing.
    Verify(VerifyArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    pub scope: super::generate::RbacScope,
    /// Check offline against the ClusterRoles and Roles in this YAML file (multi-document, a
    /// `kind: List`, or a bare list of rules counted cluster-wide) instead of asking the API
    /// server about the current credentials.
    #[arg(long, short = 'f', value_name = "RULES.yaml")]
    pub file: Option<std::path::PathBuf>,
    /// The ConfigMap in khai's namespace khai reads its config from (`khai run --config
    /// configmap:NS/NAME`, as the chart and `khai generate manifests` deploy it): also check
    /// reading it by name and recording Events about it.
    #[arg(long, value_name = "NAME")]
    pub config_map: Option<String>,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Verify(args) => match &args.file {
            Some(file) => verify_file(&args, file),
            None => verify(&args),
        },
    }
}

fn verify_file(args: &VerifyArgs, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let (op, own_namespace, plan) = args.scope.plan(args.config_map.clone())?;
    let needed = needed(&plan, &own_namespace);
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(file).map_err(|cause| FileError::Read {
        file: shown.clone(),
        cause,
    })?;
    let grants = grants(&shown, &text)?;
    let missing: Vec<(Access, Option<String>)> = needed
        .iter()
        .filter(|a| !granted(&grants, a))
        .map(|a| (a.clone(), None))
        .collect();
    Ok(report(&op, &needed, &missing, &format!("by {shown}")))
}

/// Prints what is missing (or that nothing is) and returns the exit status.
fn report(
    op: &crate::operator::Operator,
    needed: &[Access],
    missing: &[(Access, Option<String>)],
    by: &str,
) -> ExitCode {
    if missing.is_empty() {
        println!(
            "ok: all {} permissions {} needs are granted{}",
            needed.len(),
            op.config.file.display(),
            if by.is_empty() {
                String::new()
            } else {
                format!(" {by}")
            }
        );
        return ExitCode::SUCCESS;
    }
    for (access, why) in missing {
        match why {
            Some(why) => println!("missing: {access} ({why})"),
            None => println!("missing: {access}"),
        }
    }
    println!(
        "{} of {} permissions {} needs are missing; `khai generate rbac` prints the rules",
        missing.len(),
        needed.len(),
        op.config.file.display()
    );
    ExitCode::FAILURE
}

fn verify(args: &VerifyArgs) -> anyhow::Result<ExitCode> {
    let (op, own_namespace, plan) = args.scope.plan(args.config_map.clone())?;
    let needed = needed(&plan, &own_namespace);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let missing = rt.block_on(async {
        let (client, _) = crate::client::connect(crate::client::Limits::default()).await?;
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client);
        let mut missing = Vec::new();
        for access in &needed {
            let answer = reviews
                .create(&PostParams::default(), &review(access))
                .await
                .with_context(|| format!("SelfSubjectAccessReview for {access} failed"))?;
            let status = answer.status.unwrap_or_default();
            if !status.allowed {
                let why = status.evaluation_error.filter(|e| !e.is_empty());
                missing.push((access.clone(), why));
            }
        }
        anyhow::Ok(missing)
    })?;
    Ok(report(&op, &needed, &missing, ""))
}
