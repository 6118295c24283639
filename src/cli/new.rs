//! `khai new`: scaffold an operator folder, or add a controller to one.
//!
//! The files come from [`crate::scaffold`]; this file checks the destination, writes them and
//! says what to run next. Nothing is overwritten: an existing file is an error named by path.

use crate::config;
use crate::scaffold::{self, Names};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum What {
    /// Create the folder <NAME> with operator.toml, a script, test cases, a sample and a README
    /// (and admission webhooks with `--webhooks`).
    Operator(OperatorArgs),
    /// Add a CRD, a controller, a script, a sample and test cases to an existing operator folder.
    // `--version` names the CRD version here, so clap's own version flag is off.
    #[command(disable_version_flag = true)]
    Controller(ControllerArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct OperatorArgs {
    /// Name of the operator and of the folder to create: lower-case letters, digits and '-'.
    pub name: String,
    /// API group of the CRD [default: <NAME>.example.com]
    #[arg(long)]
    pub group: Option<String>,
    /// Kind of the CRD [default: <NAME> in PascalCase]
    #[arg(long)]
    pub kind: Option<String>,
    /// Also write admission webhooks (validate, mutate) for the kind, with test cases.
    #[arg(long)]
    pub webhooks: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ControllerArgs {
    /// Kind of the new CRD, in PascalCase.
    #[arg(long)]
    pub kind: String,
    /// API group of the new CRD [default: the group of the folder's first CRD]
    #[arg(long)]
    pub group: Option<String>,
    /// Version of the new CRD.
    #[arg(long, default_value = "v1")]
    pub version: String,
    /// Also write admission webhooks (validate, mutate) for the kind, with test cases.
    #[arg(long)]
    pub webhooks: bool,
    /// The operator folder, holding operator.toml.
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Operator(a) => operator(&a),
        What::Controller(a) => controller(&a),
    }
}

fn operator(args: &OperatorArgs) -> anyhow::Result<ExitCode> {
    let names = Names::for_operator(&args.name, args.kind.as_deref(), args.group.as_deref())?;
    let dir = PathBuf::from(&args.name);
    if dir.exists() {
        bail!("{}: already exists; choose another name", dir.display());
    }
    write_all(&dir, &scaffold::operator_files(&names, args.webhooks))?;
    let run = if args.webhooks {
        " --webhook-bind 127.0.0.1:9443 --webhook-url https://127.0.0.1:9443"
    } else {
        ""
    };
    println!(
        "created operator {} (kind {}, group {}) in {}/\n\nnext:\n  khai check {d}\n  khai test {d}\n  khai run --config {d}{run}\n  kubectl apply -f {d}/{}.yaml",
        names.operator,
        names.kind,
        names.group,
        dir.display(),
        names.singular(),
        d = dir.display(),
    );
    Ok(ExitCode::SUCCESS)
}

fn controller(args: &ControllerArgs) -> anyhow::Result<ExitCode> {
    let file = args.dir.join("operator.toml");
    let src = crate::config::files::read_regular(&file).with_context(|| {
        format!(
            "{}: cannot read (khai new controller edits operator.toml; YAML configs are not edited)",
            file.display()
        )
    })?;
    let model = config::parse(&file, &src).map_err(|d| anyhow::anyhow!("{d}"))?;
    let names = Names {
        operator: model.operator.name.clone(),
        kind: args.kind.clone(),
        group: args
            .group
            .clone()
            .unwrap_or_else(|| scaffold::default_group(&model)),
        version: args.version.clone(),
    };
    let edited = scaffold::append_controller(&file, &src, &names, args.webhooks)?;
    let files = scaffold::controller_files(&names, args.webhooks);
    refuse_existing(&args.dir, &files)?;
    write_all(&args.dir, &files)?;
    std::fs::write(&file, edited).with_context(|| format!("{}: cannot write", file.display()))?;
    println!(
        "added kind {} ({}/{}) and its controller to {}; wrote {}",
        names.kind,
        names.group,
        names.version,
        file.display(),
        files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn refuse_existing(dir: &Path, files: &[scaffold::File]) -> anyhow::Result<()> {
    match files.iter().map(|(p, _)| dir.join(p)).find(|p| p.exists()) {
        Some(p) => bail!("{}: already exists; not overwriting it", p.display()),
        None => Ok(()),
    }
}

fn write_all(dir: &Path, files: &[scaffold::File]) -> anyhow::Result<()> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("{}: cannot create", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("{}: cannot write", path.display()))?;
    }
    Ok(())
}
