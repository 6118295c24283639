//! `--shards K`: the cache workload run by K khai shards (`khai run --shards`) beside one khai
//! replica in the same invocation. Per N and repetition: the single replica's usual run, then
//! the K shards over a fresh namespace through create, idle and update (each shard's peak RSS,
//! their CPU together, the sharder's own CPU and RSS, and the writes of the initial assignment),
//! then one rebalance (a shard K+1 joins; the parents it takes over and the writes until the
//! cluster is quiet), then delete. The report sets the medians side by side. Shard s0 serves
//! the assignment webhook and installs its configuration, as the chart's `webhook.enabled` does,
//! so parents are labelled as they are created; the sharder labels only what it missed.

use crate::cli::Contender;
use crate::contender::{self, Launch, Process};
use crate::report::{cell, describe, median};
use crate::run::{self, Outcome, Settings, mib};
use crate::track::Tracker;
use crate::workload::Workload;
use crate::writes::{self, Writes};
use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use serde::Serialize;
use std::time::{Duration, Instant};

/// examples/bench-cache's `[operator] name`: its labels and Leases are named after it.
const OPERATOR: &str = "bench-cache";
/// The assignment webhook's configuration, named after the operator.
const WEBHOOK: &str = "khai-bench-cache-shard";

/// One sharded run.
#[derive(Debug, Clone, Serialize)]
pub struct ShardRun {
    pub n: usize,
    pub rep: usize,
    pub shards: usize,
    /// First create request to every Cache Ready.
    pub create_s: f64,
    /// Each shard's peak RSS (VmHWM) after the update phase, MiB, by shard id.
    pub peak_rss_mib: Vec<(String, f64)>,
    /// CPU seconds of all shards together over create, idle and update.
    pub cpu_s: f64,
    /// The same, per shard, by shard id.
    pub cpu_s_by_shard: Vec<(String, f64)>,
    /// The shard holding the sharder Lease, and its CPU seconds and peak RSS over the same span.
    pub sharder: String,
    pub sharder_cpu_s: f64,
    pub sharder_peak_rss_mib: f64,
    /// Writes of the create phase (children, status, labels), Leases left out.
    pub create_writes: Writes,
    /// Of those, the label patches on the Caches: the initial assignment.
    pub assignment_patches: u64,
    /// One shard joining: parents it holds once the cluster is quiet, the writes until then
    /// (Leases left out), and how long it took.
    pub rebalance_moved: usize,
    pub rebalance_writes: Writes,
    pub rebalance_s: f64,
}

/// Runs the single replica and the K shards at every N and repetition; writes shards.md and
/// shards.json into the output directory and prints the table.
pub async fn bench(settings: &Settings<'_>, shards: usize) -> Result<()> {
    if shards < 1 {
        bail!(
            "--shards 0: at least one shard (one shard measures sharded mode's own cost, with nothing split)"
        );
    }
    let args = settings.args;
    let mut singles = Vec::new();
    let mut sharded = Vec::new();
    for &n in &args.n {
        for rep in 1..=args.reps {
            eprintln!(
                "bench: khai (one replica) N={n} run {rep}/{} ...",
                args.reps
            );
            match settings.run(Contender::Khai, n, rep).await {
                Ok(Outcome::Done(r)) => singles.push(*r),
                Ok(Outcome::Failed { error, .. }) => bail!("khai N={n} run {rep}: {error}"),
                Err(why) => bail!("khai skipped: {why}"),
            }
            eprintln!(
                "bench: khai {shards} shards N={n} run {rep}/{} ...",
                args.reps
            );
            let r = run_sharded(settings, shards, n, rep).await?;
            eprintln!(
                "bench: {shards} shards N={n} run {rep}: create {:.2}s, peak RSS {:?} MiB, CPU {:.2}s {:?}, \
                 sharder {} ({:.2}s CPU, {:.1} MiB), assignment {} label patches, rebalance moved {} with {}",
                r.create_s,
                r.peak_rss_mib,
                r.cpu_s,
                r.cpu_s_by_shard,
                r.sharder,
                r.sharder_cpu_s,
                r.sharder_peak_rss_mib,
                r.assignment_patches,
                r.rebalance_moved,
                describe(&r.rebalance_writes)
            );
            sharded.push(r);
            let md = markdown(args.command.as_str(), shards, &args.n, &singles, &sharded);
            std::fs::write(args.out.join("shards.md"), &md)?;
            let json = serde_json::json!({ "single": singles, "sharded": sharded });
            std::fs::write(
                args.out.join("shards.json"),
                serde_json::to_string_pretty(&json)?,
            )?;
        }
    }
    println!(
        "\n{}",
        markdown(args.command.as_str(), shards, &args.n, &singles, &sharded)
    );
    eprintln!("bench: wrote {}", args.out.display());
    Ok(())
}

/// The K shards' run in a namespace of its own; processes and objects are cleaned up whatever
/// the outcome.
async fn run_sharded(settings: &Settings<'_>, k: usize, n: usize, rep: usize) -> Result<ShardRun> {
    let ns = format!("bench-shards{k}-n{n}-r{rep}-{}", settings.tag);
    let wl = Workload::new(&settings.client, ns, false, settings.args.parallelism).await?;
    let mut procs = Vec::new();
    let result = phases(settings, &wl, &mut procs, k, n, rep).await;
    let cleaned = wl.clean_up().await;
    for (id, p) in procs {
        if let Err(e) = p.stop().await {
            eprintln!("bench: stopping shard {id}: {e:#}");
        }
    }
    // The assignment webhook's configuration is cluster-wide: left behind, it would send the
    // next run's single replica's creates to a port nobody serves.
    let hooks: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(settings.client.clone());
    let removed = match hooks.delete(WEBHOOK, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).context(format!("deleting MutatingWebhookConfiguration {WEBHOOK}")),
    };
    let r = result?;
    cleaned?;
    removed?;
    Ok(r)
}

/// The port shard s0's webhook server bound, from the fields it logs it with
/// (`listening="webhook" address=127.0.0.1:PORT`); s0 binds port 0, so no port is picked here
/// and lost to another process before khai binds it.
async fn webhook_port(s0: &Process, timeout: Duration) -> Result<u16> {
    let logged = async {
        loop {
            let text = std::fs::read_to_string(s0.log()).unwrap_or_default();
            if let Some(port) = logged_webhook_port(&text) {
                return port;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        port = tokio::time::timeout(timeout, logged) => port
            .map_err(|_| anyhow!("shard s0 did not log its webhook address within {timeout:?}")),
        died = s0.exit().died() => Err(died),
    }
}

/// The port of the first line of khai's text log with `listening="webhook"`, from its
/// `address=HOST:PORT` field.
fn logged_webhook_port(log: &str) -> Option<u16> {
    log.lines()
        .filter(|l| l.split_whitespace().any(|t| t == "listening=\"webhook\""))
        .flat_map(str::split_whitespace)
        .find_map(|t| t.strip_prefix("address=")?.rsplit_once(':')?.1.parse().ok())
}

/// Waits until the assignment webhook's configuration points at shard s0's `port`.
async fn installed(settings: &Settings<'_>, port: u16, timeout: Duration) -> Result<()> {
    let hooks: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(settings.client.clone());
    let url = format!("https://127.0.0.1:{port}");
    let deadline = Instant::now() + timeout;
    loop {
        let points = hooks
            .get_opt(WEBHOOK)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.webhooks.unwrap_or_default().iter().any(|w| {
                    w.client_config
                        .url
                        .as_deref()
                        .is_some_and(|u| u.starts_with(&url))
                })
            });
        if points {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("shard s0 did not install {WEBHOOK} pointing at {url} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts shard `id` with its Lease in the workload's namespace. With `webhook`, the shard
/// serves its webhooks on a loopback port it picks and points the API server at it (its
/// `--webhook-url` port 0 stands for the port bound), as the chart's `webhook.enabled` does:
/// its assignment webhook labels each parent as it is created.
fn start(
    settings: &Settings<'_>,
    wl: &Workload,
    id: &str,
    webhook: bool,
    (n, rep): (usize, usize),
) -> Result<Process> {
    let Launch::Run(mut cmd) = contender::launch(Contender::Khai, settings.args) else {
        bail!("khai is not built");
    };
    cmd.args(["--shards", "--leader-elect-namespace", &wl.namespace])
        .env("POD_NAME", id);
    if webhook {
        cmd.args([
            "--webhook-bind",
            "127.0.0.1:0",
            "--webhook-url",
            "https://127.0.0.1:0",
        ]);
    }
    let log = settings
        .args
        .out
        .join("logs")
        .join(format!("khai-shard-{id}-n{n}-r{rep}.log"));
    Process::spawn(cmd, log)
}

/// Waits until shard `id` holds its Lease.
async fn holding(
    wl: &Workload,
    leases: &kube::Api<Lease>,
    id: &str,
    timeout: Duration,
) -> Result<()> {
    let name = format!("khai-{OPERATOR}-shard-{id}");
    let deadline = Instant::now() + timeout;
    loop {
        if holder(leases, &name).await.as_deref() == Some(id) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "shard {id} did not take its Lease {name} in {} within {timeout:?}",
                wl.namespace
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn holder(leases: &kube::Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

fn cpu(settings: &Settings<'_>, procs: &[(String, Process)]) -> Result<Vec<f64>> {
    procs
        .iter()
        .map(|(_, p)| contender::usage(p.pid(), settings.clock_ticks).map(|u| u.cpu))
        .collect()
}

/// Writes that grew from `before` to `after`, less the bench client's own and the Leases.
fn cost(before: &Writes, after: &Writes, wl: &Workload) -> Writes {
    let mut w = writes::delta(before, after, &wl.own.take());
    w.retain(|k, _| !k.contains("leases"));
    w
}

async fn phases(
    settings: &Settings<'_>,
    wl: &Workload,
    procs: &mut Vec<(String, Process)>,
    k: usize,
    n: usize,
    rep: usize,
) -> Result<ShardRun> {
    let args = settings.args;
    let timeout = args.phase_timeout;
    let leases: kube::Api<Lease> = kube::Api::namespaced(settings.client.clone(), &wl.namespace);
    let first = procs.len();
    for i in 0..k {
        let id = format!("s{i}");
        procs.push((id.clone(), start(settings, wl, &id, i == 0, (n, rep))?));
    }
    for (id, _) in procs.iter() {
        holding(wl, &leases, id, args.startup_timeout).await?;
    }
    let port = webhook_port(&procs[first].1, args.startup_timeout).await?;
    installed(settings, port, args.startup_timeout).await?;
    let tracker = Tracker::start(wl.caches.clone(), wl.configmaps.clone());
    tracker
        .wait("the bench client's watches", timeout, |s| s.synced >= 2)
        .await?;
    run::warm_up(wl, &tracker, args.startup_timeout).await?;
    let before = writes::settle(&settings.client).await?;
    let cpu0 = cpu(settings, procs)?;

    let created = run::create_phase(wl, &tracker, n, timeout).await?;
    let after_create = writes::settle(&settings.client).await?;
    let create_writes = cost(&before, &after_create, wl);
    tokio::time::sleep(args.idle).await; // the idle phase is a span of time
    run::update_phase(wl, &tracker, n, timeout).await?;
    let cpu1 = cpu(settings, procs)?;
    let sharder = holder(&leases, &format!("khai-{OPERATOR}-sharder"))
        .await
        .ok_or_else(|| anyhow!("nobody holds the sharder Lease"))?;
    let (mut peak_rss_mib, mut cpu_s_by_shard) = (Vec::new(), Vec::new());
    let (mut sharder_cpu_s, mut sharder_peak_rss_mib) = (0.0, 0.0);
    for ((id, p), (c0, c1)) in procs.iter().zip(cpu0.iter().zip(&cpu1)) {
        let rss = mib(contender::usage(p.pid(), settings.clock_ticks)?.peak_rss);
        if *id == sharder {
            (sharder_cpu_s, sharder_peak_rss_mib) = (c1 - c0, rss);
        }
        peak_rss_mib.push((id.clone(), rss));
        cpu_s_by_shard.push((id.clone(), c1 - c0));
    }

    // One rebalance: shard K joins; done when every Cache is labelled, none is draining, and
    // the API server has seen no write for a while.
    let mark = writes::settle(&settings.client).await?;
    wl.own.take();
    let joined = Instant::now();
    let id = format!("s{k}");
    procs.push((id.clone(), start(settings, wl, &id, false, (n, rep))?));
    holding(wl, &leases, &id, args.startup_timeout).await?;
    let rebalance_moved = settled(wl, &id, timeout).await?;
    let rebalance_s = joined.elapsed().as_secs_f64();
    let rebalance_writes = cost(&mark, &writes::settle(&settings.client).await?, wl);

    run::delete_phase(wl, &tracker, n, timeout).await?;
    let assignment_patches = create_writes.get("PATCH caches").copied().unwrap_or(0);
    Ok(ShardRun {
        n,
        rep,
        shards: k,
        create_s: created.all_ready_s,
        peak_rss_mib,
        cpu_s: cpu_s_by_shard.iter().map(|(_, c)| c).sum(),
        cpu_s_by_shard,
        sharder,
        sharder_cpu_s,
        sharder_peak_rss_mib,
        create_writes,
        assignment_patches,
        rebalance_moved,
        rebalance_writes,
        rebalance_s,
    })
}

/// Polls (every second, until `timeout`) until every Cache has a shard label and none a drain
/// label, twice in a row with `joiner` holding the same number; that number.
async fn settled(wl: &Workload, joiner: &str, timeout: Duration) -> Result<usize> {
    let label = format!("shard.khai.dev/{OPERATOR}");
    let drain = format!("drain.shard.khai.dev/{OPERATOR}");
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        let listed = wl
            .caches
            .list_metadata(&ListParams::default())
            .await
            .context("listing the Caches' labels")?;
        let labels =
            |o: &kube::core::PartialObjectMeta<_>| o.metadata.labels.clone().unwrap_or_default();
        let placed = listed
            .items
            .iter()
            .all(|o| labels(o).contains_key(&label) && !labels(o).contains_key(&drain));
        let theirs = listed
            .items
            .iter()
            .filter(|o| labels(o).get(&label).map(String::as_str) == Some(joiner))
            .count();
        if placed && theirs > 0 && last == Some(theirs) {
            return Ok(theirs);
        }
        last = placed.then_some(theirs);
        if Instant::now() >= deadline {
            bail!("the Caches did not settle on the shards within {timeout:?} of {joiner} joining");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The table: medians per N of the single replica's and the shards' figures.
fn markdown(
    command: &str,
    k: usize,
    counts: &[usize],
    singles: &[run::RunResult],
    sharded: &[ShardRun],
) -> String {
    let mut md = format!(
        "### {k} shards against one replica\n\n`{command}`. Medians over the runs. Peak RSS: VmHWM \
         after the update phase (the single replica's: over its whole run). CPU: create, idle \
         and update, all shards together. The sharder is the shard holding the sharder Lease; \
         its figures are part of the shards'. Writes leave out Lease renewals.\n\n\
         | N | peak RSS, one replica (MiB) | peak RSS per shard, largest (MiB) | ratio | CPU, one replica (s) | CPU, {k} shards (s) | ratio | sharder CPU (s) | sharder peak RSS (MiB) | initial assignment: label patches | rebalance to {}: parents moved | rebalance writes | rebalance (s) |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n",
        k + 1
    );
    for &n in counts {
        let one: Vec<&run::RunResult> = singles.iter().filter(|r| r.n == n).collect();
        let many: Vec<&ShardRun> = sharded.iter().filter(|r| r.n == n).collect();
        if many.is_empty() {
            continue;
        }
        let m = |f: &dyn Fn(&ShardRun) -> f64| median(many.iter().map(|r| f(r)).collect());
        let rss1 = median(one.iter().filter_map(|r| r.peak_rss_mib).collect());
        let cpu1 = median(
            one.iter()
                .map(|r| r.create.cpu_s + r.idle.cpu_s + r.update.cpu_s)
                .collect(),
        );
        let rss_k = m(&|r| r.peak_rss_mib.iter().map(|(_, v)| *v).fold(0.0, f64::max));
        let cpu_k = m(&|r| r.cpu_s);
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        let writes = many
            .iter()
            .map(|r| describe(&r.rebalance_writes))
            .collect::<Vec<_>>()
            .join("; ");
        md.push_str(&format!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {writes} | {} |\n",
            cell(rss1, 1),
            cell(rss_k, 1),
            cell(ratio(rss_k, rss1), 2),
            cell(cpu1, 2),
            cell(cpu_k, 2),
            cell(ratio(cpu_k, cpu1), 2),
            cell(m(&|r| r.sharder_cpu_s), 2),
            cell(m(&|r| r.sharder_peak_rss_mib), 1),
            cell(m(&|r| r.assignment_patches as f64), 0),
            cell(m(&|r| r.rebalance_moved as f64), 0),
            cell(m(&|r| r.rebalance_s), 1),
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_port_is_read_from_the_fields_of_khais_line() {
        let log = "2026-11-27T10:00:00Z  INFO khai::serve::listen: serving /metrics, /healthz and \
                   /readyz on 127.0.0.1:41000 listening=\"metrics\" address=127.0.0.1:41000\n\
                   2026-11-27T10:00:01Z  INFO khai::serve::listen: serving webhooks over HTTPS on \
                   127.0.0.1:42000 listening=\"webhook\" address=127.0.0.1:42000\n";
        assert_eq!(logged_webhook_port(log), Some(42000));
        assert_eq!(logged_webhook_port(log.lines().next().unwrap()), None);
    }

    #[test]
    fn the_table_has_a_row_per_n_with_the_largest_shard_and_the_rebalance_writes() {
        let run = ShardRun {
            n: 3000,
            rep: 1,
            shards: 3,
            create_s: 1.0,
            peak_rss_mib: vec![("s0".into(), 80.0), ("s1".into(), 60.0)],
            cpu_s: 5.0,
            cpu_s_by_shard: vec![("s0".into(), 3.0), ("s1".into(), 2.0)],
            sharder: "s0".into(),
            sharder_cpu_s: 3.0,
            sharder_peak_rss_mib: 80.0,
            create_writes: Writes::new(),
            assignment_patches: 3000,
            rebalance_moved: 755,
            rebalance_writes: Writes::from([("PATCH caches".into(), 2265)]),
            rebalance_s: 36.7,
        };
        let md = markdown("c", 3, &[100, 3000], &[], &[run]);
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| 3")).collect();
        assert_eq!(rows.len(), 1, "{md}");
        assert!(
            rows[0].starts_with("| 3000 | — | 80.0 | — |"),
            "{}",
            rows[0]
        );
        assert!(
            rows[0].ends_with("| 3000 | 755 | PATCH caches 2265 | 36.7 |"),
            "{}",
            rows[0]
        );
        assert!(
            !md.contains("| 100 |"),
            "no row for an N without runs: {md}"
        );
    }
}
