//! `khai check`: validate a config and compile its scripts, offline; flag the scripts'
//! `k8s::<verb>("<kind>", …)` calls that `[operator] uses` does not declare (the generated
//! RBAC would not grant them), `http::…("<url>", …)` calls `[operator.http] allow` refuses and
//! `ctx.secret("<name>", …)` reads of Secrets `[operator] secrets` does not name, and calls of
//! the standard library that name no function of it (or give one the wrong number of
//! arguments), which Rhai would only find when they run; and, given `--kubernetes-version`, what
//! the config uses that that version lacks.

use crate::operator::Operator;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The operator config: a file, or a directory holding operator.toml or operator.yaml.
    #[arg(value_name = "FILE|DIR", default_value = ".")]
    pub config: PathBuf,
    /// The oldest Kubernetes the operator is meant to run on (`v1.20`, `1.30.2`): what the
    /// config uses that it lacks is an error.
    #[arg(long, value_name = "VERSION")]
    pub(crate) kubernetes_version: Option<crate::config::versions::Version>,
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let op = Operator::load(&args.config)?;
    for w in &op.config.warnings {
        eprintln!("warning: {w}");
    }
    let m = &op.config.model;
    let mut undeclared = undeclared_calls(&op);
    if let Some(v) = args.kubernetes_version {
        let too_new = crate::config::versions::too_new_for(&op.config, v);
        undeclared.extend(too_new.iter().map(ToString::to_string));
    }
    for line in &undeclared {
        eprintln!("error: {line}");
    }
    if !undeclared.is_empty() {
        return Ok(ExitCode::FAILURE);
    }
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

/// `file:line:col: message` for each `k8s` call of a script that `[operator] uses` does not
/// declare, then each unknown call of the standard library, then each literal URL or Secret the
/// config does not allow, each script once, in file order.
fn undeclared_calls(op: &Operator) -> Vec<String> {
    use crate::effects::k8s::declared;
    let h = &op.handlers;
    let scripts = op
        .scripts
        .iter()
        .chain(h.handlers.iter().map(|e| &e.script))
        .chain(h.timers.iter().map(|e| &e.script))
        .chain(h.daemons.iter().map(|e| &e.script));
    let mut seen = std::collections::BTreeMap::new();
    for s in scripts {
        seen.entry(s.file().to_path_buf()).or_insert(s);
    }
    let mut out = Vec::new();
    for (file, script) in seen {
        for call in declared::calls(script.ast()) {
            if let Some(why) = declared::undeclared(&op.config.model, &call) {
                out.push(format!(
                    "{}:{}:{}: {why}",
                    file.display(),
                    call.line,
                    call.column
                ));
            }
        }
        for c in crate::script::stdlib::unknown_calls(script.ast()) {
            out.push(format!(
                "{}:{}:{}: {}",
                file.display(),
                c.line,
                c.column,
                c.message
            ));
        }
        for f in crate::effects::literals::refused(&op.config.model, script.ast()) {
            out.push(format!(
                "{}:{}:{}: {}",
                file.display(),
                f.line,
                f.column,
                f.message
            ));
        }
    }
    out
}
