//! `khai check`: validate a config and compile its scripts, offline.

use crate::operator::Operator;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let op = Operator::load(&args.config)?;
    for w in &op.config.warnings {
        eprintln!("warning: {w}");
    }
    let m = &op.config.model;
    println!(
        "{}: ok ({} CRD{}, {} controller{})",
        op.config.file.display(),
        m.crds.len(),
        if m.crds.len() == 1 { "" } else { "s" },
        m.controllers.len(),
        if m.controllers.len() == 1 { "" } else { "s" },
    );
    Ok(ExitCode::SUCCESS)
}
