//! khai-bench: runs the cache-bench workload against every contender in turn on one API server
//! and writes a markdown table, a JSON file and a latency chart. `scripts/bench` builds and
//! starts everything this needs; see docs/benchmarks.md.

mod chart;
mod cli;
mod contender;
mod curve;
mod memory;
mod report;
mod restart;
mod run;
mod shards;
mod timer;
mod timer_report;
mod track;
mod workload;
mod writes;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli::{Args, Contender};
use report::{Environment, Report};
use run::{Outcome, Settings};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// Where `--publish` puts the results in the markdown file.
const START_MARKER: &str = "<!-- bench-results:start -->";
const END_MARKER: &str = "<!-- bench-results:end -->";

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode> {
    std::fs::create_dir_all(args.out.join("logs"))
        .with_context(|| format!("creating {}", args.out.display()))?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster in KUBECONFIG")?;
    workload::install_crd(&client, &args.crd).await?;
    if args.workload == cli::Workload::Timer {
        return timer::run(&args, client).await;
    }
    let mut report = Report {
        environment: environment(&args, &client).await,
        contenders: args.contenders.clone(),
        counts: args.n.clone(),
        skipped: BTreeMap::new(),
        runs: Vec::new(),
    };
    let settings = Settings {
        args: &args,
        client,
        clock_ticks: contender::clock_ticks(),
        tag: std::process::id().to_string(),
    };
    if let Some(k) = args.shards {
        shards::bench(&settings, k).await?;
        return Ok(ExitCode::SUCCESS);
    }
    for &n in &args.n {
        for rep in 1..=args.reps {
            for &c in &args.contenders {
                run_one(&settings, &mut report, c, n, rep).await;
                write_outputs(&args, &report)?;
            }
        }
    }
    let mut md = report.markdown();
    if args.curve {
        let points = curve::points(&report.runs, &report.contenders, &report.counts);
        md.push_str(&curve::markdown(&points));
    }
    println!("\n{md}");
    if let Some(doc) = &args.publish {
        publish(doc, &md, START_MARKER, END_MARKER)?;
        eprintln!("bench: results published to {}", doc.display());
    }
    eprintln!("bench: wrote {}", args.out.display());
    Ok(verdict(&args, &report))
}

/// One run, recorded in the report whatever its outcome.
async fn run_one(settings: &Settings<'_>, report: &mut Report, c: Contender, n: usize, rep: usize) {
    if report.skipped.contains_key(c.name()) {
        return;
    }
    eprintln!(
        "bench: {} N={n} run {rep}/{} ...",
        c.name(),
        settings.args.reps
    );
    let started = std::time::Instant::now();
    let result = settings.run(c, n, rep).await;
    if settings.args.curve && c == Contender::Kopf {
        stop_kopf_curve(settings.args, report, &result, n, started.elapsed());
    }
    match result {
        Err(why) => {
            eprintln!("bench: {} skipped: {why}", c.name());
            report.skipped.insert(c.name().to_string(), why);
        }
        Ok(outcome) => {
            match &outcome {
                Outcome::Done(r) => eprintln!(
                    "bench: {} N={n} run {rep}: create {:.2}s, update {:.2}s, delete {:.2}s, writes create {} idle {} update {}{}",
                    c.name(),
                    r.create_s,
                    r.update_s,
                    r.delete_s,
                    writes::total(&r.create.writes),
                    writes::total(&r.idle.writes),
                    writes::total(&r.update.writes),
                    r.restart.as_ref().map_or(String::new(), |x| format!(
                        ", restart {:.2}s with {} writes",
                        x.confirmed_s,
                        writes::total(&x.cost.writes)
                    )),
                ),
                Outcome::Failed { error, .. } => {
                    eprintln!("bench: {} N={n} run {rep} FAILED: {error}", c.name());
                }
            }
            report.runs.push(outcome);
        }
    }
}

/// In the cost curve, Kopf runs up to the largest N it finishes within `--kopf-limit`: after a
/// run that failed or took longer, it is skipped at every larger N.
fn stop_kopf_curve(
    args: &Args,
    report: &mut Report,
    result: &Result<Outcome, String>,
    n: usize,
    took: std::time::Duration,
) {
    let why = match result {
        Ok(Outcome::Failed { .. }) => format!("its run at N={n} failed"),
        Ok(Outcome::Done(_)) if took > args.kopf_limit => format!(
            "its run at N={n} took {:.0} s, more than --kopf-limit {:.0} s",
            took.as_secs_f64(),
            args.kopf_limit.as_secs_f64()
        ),
        _ => return,
    };
    let larger: Vec<String> = args
        .n
        .iter()
        .filter(|&&m| m > n)
        .map(ToString::to_string)
        .collect();
    if !larger.is_empty() {
        report.skipped.insert(
            Contender::Kopf.name().to_string(),
            format!("not run at N={} in the curve: {why}", larger.join(", ")),
        );
    }
}

/// The exit code: with `--smoke-check`, 1 when khai's or controller-runtime's writes are not
/// what they must be.
fn verdict(args: &Args, report: &Report) -> ExitCode {
    if !args.smoke_check {
        return ExitCode::SUCCESS;
    }
    let problems = report.smoke_problems();
    for p in &problems {
        eprintln!("bench: smoke check failed: {p}");
    }
    if problems.is_empty() {
        eprintln!(
            "bench: smoke check passed: {} write 2 per Cache on create and update, 0 idle, 0 on restart",
            report.smoke_checked().join(" and ")
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// results.md, results.json and latency-cdf.svg in the output directory; rewritten after every
/// run so an interrupted invocation still leaves what it measured.
fn write_outputs(args: &Args, report: &Report) -> Result<()> {
    let out = &args.out;
    let points = args
        .curve
        .then(|| curve::points(&report.runs, &report.contenders, &report.counts));
    let mut md = report.markdown();
    if let Some(points) = &points {
        md.push_str(&curve::markdown(points));
        write(
            &out.join("cost-curve.svg"),
            &curve::svg("cache-bench: cost against N (log-log)", points),
        )?;
    }
    write(&out.join("results.md"), &md)?;
    let json = serde_json::json!({
        "environment": report.environment,
        "contenders": report.contenders,
        "counts": report.counts,
        "skipped": report.skipped,
        "summary": report.summary(),
        "runs": report.runs,
        "curve": points,
    });
    write(
        &out.join("results.json"),
        &serde_json::to_string_pretty(&json)?,
    )?;
    if let Some(svg) = latency_chart(report) {
        write(&out.join("latency-cdf.svg"), &svg)?;
    }
    Ok(())
}

/// The CDF of create→Ready latency per contender at the largest N, all runs pooled.
fn latency_chart(report: &Report) -> Option<String> {
    let n = report.counts.iter().copied().max()?;
    let series: Vec<chart::Series> = report
        .contenders
        .iter()
        .map(|&c| chart::Series {
            name: c.name().to_string(),
            latencies_ms: report
                .runs
                .iter()
                .filter_map(|o| match o {
                    Outcome::Done(r) if r.contender == c && r.n == n => {
                        Some(r.ready_latency_ms.clone())
                    }
                    _ => None,
                })
                .flatten()
                .collect(),
        })
        .filter(|s| !s.latencies_ms.is_empty())
        .collect();
    (!series.is_empty()).then(|| {
        chart::cdf_svg(
            &format!("cache-bench: create → Ready per Cache, N = {n}, all runs"),
            &series,
        )
    })
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Replaces what lies between the markers `open` and `close` in `doc` with `md`.
fn publish(doc: &Path, md: &str, open: &str, close: &str) -> Result<()> {
    let text =
        std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    let spliced = splice(&text, md, open, close)
        .with_context(|| format!("publishing to {}", doc.display()))?;
    write(doc, &spliced)
}

fn splice(text: &str, md: &str, open: &str, close: &str) -> Result<String> {
    let (Some(start), Some(end)) = (text.find(open), text.find(close)) else {
        bail!("no {open} ... {close} section");
    };
    if end < start {
        bail!("{close} comes before {open}");
    }
    let head = &text[..start + open.len()];
    Ok(format!("{head}\n{md}\n{}", &text[end..]))
}

async fn environment(args: &Args, client: &kube::Client) -> Environment {
    let apiserver = client
        .apiserver_version()
        .await
        .map_or_else(|e| format!("unknown ({e})"), |v| v.git_version);
    let kopf = match &args.kopf_bin {
        Some(kopf) if args.contenders.contains(&Contender::Kopf) => kopf_versions(kopf),
        _ => "Kopf not run".into(),
    };
    Environment {
        date: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpu_model(),
        apiserver,
        // `khai version` prints "khai X.Y.Z".
        khai: output(&args.khai_bin.to_string_lossy(), &["version"])
            .trim_start_matches("khai ")
            .to_string(),
        kopf,
        command: args.command.clone(),
        reps: args.reps,
        idle_s: args.idle.as_secs_f64(),
        parallelism: args.parallelism,
    }
}

/// `kopf, version X` and the official client's version, from the same virtualenv.
fn kopf_versions(kopf: &Path) -> String {
    // `kopf --version` prints "kopf, version X.Y.Z".
    let kopf_version = output(&kopf.to_string_lossy(), &["--version"]);
    let kopf_version = kopf_version.trim_start_matches("kopf, version ");
    let python = kopf.with_file_name("python");
    let client = output(
        &python.to_string_lossy(),
        &["-c", "import kubernetes; print(kubernetes.__version__)"],
    );
    format!("Kopf {kopf_version} with the kubernetes Python client {client}")
}

/// A command's trimmed stdout, or "unknown".
fn output(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_replaces_only_the_marked_section() {
        let doc = format!("# B\n\n{START_MARKER}\nold\n{END_MARKER}\nafter\n");
        let out = splice(&doc, "new table", START_MARKER, END_MARKER).ok();
        assert_eq!(
            out,
            Some(format!(
                "# B\n\n{START_MARKER}\nnew table\n{END_MARKER}\nafter\n"
            ))
        );
        assert!(splice("# no markers", "x", START_MARKER, END_MARKER).is_err());
    }
}
