//! The `khai` command line: flags, logging setup and dispatch to one file per command.

mod check;
mod diff;
mod generate;
mod json_log;
mod new;
mod operations;
mod rbac_verify;
mod release;
mod run;
mod status;
mod test;
mod webhook_flags;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

/// khai turns a declarative config plus Rhai scripts into a Kubernetes operator.
#[derive(Debug, Parser)]
#[command(name = "khai", version, about, long_about = None, propagate_version = true)]
pub(crate) struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "KHAI_LOG_FORMAT")]
    pub(crate) log_format: LogFormat,
    /// Log filter: a level (info, debug) or RUST_LOG-style directives (khai=debug,kube=info).
    #[arg(long, global = true, env = "KHAI_LOG_LEVEL")]
    pub(crate) log_level: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the operator: install its CRDs and reconcile until SIGTERM or SIGINT.
    // Boxed: its flags make it much larger than the other commands.
    Run(Box<run::Args>),
    /// Validate a config and compile its scripts without touching a cluster.
    Check(check::Args),
    /// Show the writes `khai run` would make with a config, against the cluster, read-only.
    Diff(diff::Args),
    /// Generate manifests from a config without touching a cluster.
    Generate(generate::Args),
    /// Check the current credentials against the RBAC the config needs.
    Rbac(rbac_verify::Args),
    /// Strip every finalizer and annotation of an operator from the objects of its kinds,
    /// running no script (before an uninstall).
    Release(release::Args),
    /// Run an operator's offline test cases (tests/*.yaml) without a cluster.
    Test(test::Args),
    /// Scaffold a new operator folder, or add a controller to one.
    New(new::Args),
    /// Show what a running khai is doing, from its console (`khai run --console`).
    Status(status::Args),
    /// Print the version of khai.
    Version,
}

/// Parses arguments, runs the command and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, cli.log_level.as_deref());
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Check(args) => check::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Rbac(args) => rbac_verify::run(args),
        Command::Test(args) => test::run(args),
        Command::Release(args) => release::run(args),
        Command::New(args) => new::run(args),
        Command::Status(args) => status::run(args),
        Command::Version => {
            println!("khai {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Sets up `tracing`: RUST_LOG wins, then `--log-level`, then `info`. Logs go to stderr.
fn init_logging(format: LogFormat, level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| level.map(str::to_string))
        .unwrap_or_else(|| "info".into());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("warning: ignoring log filter {filter:?}: {e}");
        EnvFilter::new("info")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json_log::FlatJson)
            .try_init(),
    };
}
