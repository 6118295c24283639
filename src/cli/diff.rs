//! `khai diff`: the writes `khai run` would make with a config, against the cluster in
//! KUBECONFIG, read-only. Exit codes follow `kubectl diff`: 0 no changes, 1 changes, 2 when
//! `khai run` would fail somewhere or the diff could not be made. The work is in
//! [`crate::diff`]; this file only parses and prints. With `--running HOST:PORT` it prints
//! what a running `khai run --candidate` serves about its candidate revision instead.

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
    #[arg(
        long,
        short = 'c',
        value_name = "FILE|DIR",
        required_unless_present = "running"
    )]
    pub config: Option<PathBuf>,
    /// Instead of diffing a config: the objects a `khai run --candidate` diverges on now, read
    /// from its metrics port (`HOST:PORT`).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "config")]
    pub running: Option<String>,
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
    if let Some(addr) = &args.running {
        return running(addr, args.output);
    }
    let Some(config) = &args.config else {
        anyhow::bail!("give --config or --running");
    };
    let op = Operator::load(config)?;
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

/// How long `--running` waits for the daemon's answer.
const RUNNING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest answer `--running` reads.
const RUNNING_MAX: u64 = 64 << 20;

/// Prints the divergences `khai run --candidate` serves at `addr`; exits 1 when some object
/// diverges, 0 when none does.
fn running(addr: &str, output: Format) -> anyhow::Result<u8> {
    let json = fetch(addr, "/candidate/divergent")?;
    let text = match output {
        Format::Text => Some(fetch(addr, "/candidate/divergent.txt")?),
        Format::Json => None,
    };
    let doc: serde_json::Value = serde_json::from_str(&json)
        .with_context(|| format!("{addr} answered no JSON at /candidate/divergent"))?;
    let divergent: u64 = doc["divergent"]
        .as_object()
        .map(|m| m.values().filter_map(serde_json::Value::as_u64).sum())
        .unwrap_or_default();
    print!("{}", text.unwrap_or(json));
    Ok(u8::from(divergent > 0))
}

/// The body of `GET path` from the plain HTTP server at `addr`, which must answer 200.
fn fetch(addr: &str, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let url = format!("http://{addr}{path}");
    let read = || {
        let mut conn = std::net::TcpStream::connect(addr)?;
        conn.set_read_timeout(Some(RUNNING_TIMEOUT))?;
        conn.set_write_timeout(Some(RUNNING_TIMEOUT))?;
        write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut raw = Vec::new();
        conn.take(RUNNING_MAX).read_to_end(&mut raw)?;
        std::io::Result::Ok(raw)
    };
    let raw = read().with_context(|| format!("failed to read {url}"))?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        anyhow::bail!("{url} answered {status}: {}", body.trim());
    }
    Ok(body.to_string())
}
