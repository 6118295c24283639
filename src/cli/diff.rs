//! `khai diff`: the writes `khai run` would make with a config, against the cluster in
//! KUBECONFIG, read-only. Exit codes follow `kubectl diff`: 0 no changes, 1 changes, 2 when
//! `khai run` would fail somewhere or the diff could not be made. The work is in
//! [`crate::diff`]; this file only parses and prints.

use crate::diff::Format;
use crate::operator::Operator;
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 nothing would change, 1 something would change, \
    2 a reconcile would fail or the API server would refuse a child, or the diff could not \
    be made."
)]
pub(crate) struct Args {
    /// The candidate config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(long, short = 'c', value_name = "FILE|DIR")]
    pub config: PathBuf,
    /// Only this namespace (repeatable); overrides `[operator] namespaces`.
    #[arg(long = "namespace", short = 'n', value_name = "NS", value_parser = super::run::namespace_name)]
    pub namespaces: Vec<String>,
    /// Output: text (unified diffs) or one JSON document.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    pub(crate) output: Format,
    /// How long to wait for the first list of every kind the controllers read.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub sync_timeout: crate::config::duration::Duration,
}

/// Exit code of a diff that could not be made, as `kubectl diff`'s "> 1".
const ERROR: u8 = 2;

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match diff(args) {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(ERROR))
        }
    }
}

fn diff(args: Args) -> anyhow::Result<u8> {
    let op = Operator::load(&args.config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(crate::script::stack::THREAD_STACK)
        .build()
        .context("failed to start the async runtime")?;
    let report = rt.block_on(async {
        let (client, _) =
            crate::client::connect(crate::client::Limits::from(&op.config.model.operator)).await?;
        let sync = args.sync_timeout.get();
        anyhow::Ok(crate::diff::diff(&op, &client, &args.namespaces, sync).await?)
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    let report = report?;
    print!("{}", report.render(args.output));
    Ok(report.exit_code())
}
