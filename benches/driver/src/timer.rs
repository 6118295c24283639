//! The timer workload: N Tickers exist before the operator starts; then each contender runs
//! alone for `--duration` with a timer every `--interval` that writes `status.ticks` one higher,
//! is stopped, and the counts are read back from the API server (docs/benchmarks.md, "The timer
//! workload"). The window opens when the operator process starts and closes when it is sent
//! SIGTERM; a tick counts when its status write reached the server before the operator exited.

use crate::cli::{Args, Contender};
use crate::contender::{self, Launch, Process, Usage};
use crate::timer_report::{Load, TimerOutcome, TimerReport, TimerRun};
use crate::writes::{self, Writes};
use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Benchmark Tickers are `t-00000`, `t-00001`, ...
const OBJECT_PREFIX: &str = "t-";
const GROUP: &str = "bench.khai.dev";
/// Where `--publish` puts the timer results.
const START_MARKER: &str = "<!-- bench-timer:start -->";
const END_MARKER: &str = "<!-- bench-timer:end -->";

fn ticker_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Ticker"), "tickers")
}

/// Runs every contender at every N and repetition, writes the report and says whether khai's
/// Tickers all ticked the expected number of times, give or take one.
pub async fn run(args: &Args, client: kube::Client) -> Result<ExitCode> {
    let khai_config = khai_config(args)?;
    let mut report = TimerReport::new(args, crate::environment(args, &client).await);
    let tag = std::process::id().to_string();
    for &n in &args.n {
        for rep in 1..=args.reps {
            for &c in &args.contenders {
                if report.skipped.contains_key(c.name()) {
                    continue;
                }
                eprintln!(
                    "bench: timer {} N={n} run {rep}/{} ...",
                    c.name(),
                    args.reps
                );
                let one = One {
                    args,
                    client: &client,
                    khai_config: &khai_config,
                    contender: c,
                    n,
                    rep,
                    namespace: format!("bench-timer-{}-n{n}-r{rep}-{tag}", c.name().to_lowercase()),
                };
                match one.run().await {
                    Err(why) => {
                        eprintln!("bench: {} skipped: {why}", c.name());
                        report.skipped.insert(c.name().to_string(), why);
                    }
                    Ok(outcome) => {
                        eprintln!("bench: {}", outcome.summary_line());
                        report.runs.push(outcome);
                    }
                }
                write_outputs(args, &report)?;
            }
        }
    }
    let md = report.markdown();
    println!("\n{md}");
    if let Some(doc) = &args.publish {
        crate::publish(doc, &md, START_MARKER, END_MARKER)?;
        eprintln!("bench: timer results published to {}", doc.display());
    }
    eprintln!("bench: wrote {}", args.out.display());
    let problems = report.khai_problems();
    for p in &problems {
        eprintln!("bench: timer check failed: {p}");
    }
    if problems.is_empty() {
        eprintln!(
            "bench: timer check passed: every khai Ticker ticked {}±1 times",
            report.expected
        );
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::FAILURE)
    }
}

fn write_outputs(args: &Args, report: &TimerReport) -> Result<()> {
    let write = |name: &str, text: &str| {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("results.md", &report.markdown())?;
    write(
        "results.json",
        &serde_json::to_string_pretty(&report.json())?,
    )
}

/// khai's config: `--khai-config` itself when its timer already has `--interval`, else a copy in
/// the output directory with the interval changed (khai reads durations only from its config).
fn khai_config(args: &Args) -> Result<PathBuf> {
    let src = &args.khai_config;
    let toml_path = src.join("operator.toml");
    let text = std::fs::read_to_string(&toml_path)
        .with_context(|| format!("reading {}", toml_path.display()))?;
    let wanted = format!("interval = \"{}ms\"", args.interval.as_millis());
    let mut found = false;
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("interval = ") {
                found = true;
                wanted.clone()
            } else {
                l.to_string()
            }
        })
        .collect();
    if !found {
        bail!("{}: no `interval = ...` line to set", toml_path.display());
    }
    if args.interval == Duration::from_secs(10) && text.contains("interval = \"10s\"") {
        return Ok(src.clone());
    }
    let dst = args.out.join("khai-timer-config");
    std::fs::create_dir_all(dst.join("scripts"))
        .with_context(|| format!("creating {}", dst.display()))?;
    std::fs::write(dst.join("operator.toml"), edited.join("\n") + "\n")
        .with_context(|| format!("writing {}", dst.display()))?;
    let scripts = src.join("scripts");
    for entry in
        std::fs::read_dir(&scripts).with_context(|| format!("reading {}", scripts.display()))?
    {
        let from = entry?.path();
        if let Some(name) = from.file_name() {
            std::fs::copy(&from, dst.join("scripts").join(name))
                .with_context(|| format!("copying {}", from.display()))?;
        }
    }
    Ok(dst)
}

/// One run: one contender, one N, one repetition, in its own namespace.
struct One<'a> {
    args: &'a Args,
    client: &'a kube::Client,
    khai_config: &'a Path,
    contender: Contender,
    n: usize,
    rep: usize,
    namespace: String,
}

impl One<'_> {
    /// The outcome, or Err with why the contender cannot run at all.
    async fn run(&self) -> Result<TimerOutcome, String> {
        let command = match self.launch() {
            Ok(c) => c,
            Err(why) => return Err(why),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.namespace, &ticker_resource());
        let result = self.measure(command, &api).await;
        // Clean up even after a failure: every contender watches all namespaces, so Tickers left
        // behind would tick under the next one.
        let cleaned = clean_up(&api).await;
        let outcome = match (result, cleaned) {
            (Ok(r), Ok(())) => TimerOutcome::Done(Box::new(r)),
            (Err(e), _) | (Ok(_), Err(e)) => TimerOutcome::Failed {
                contender: self.contender,
                n: self.n,
                rep: self.rep,
                error: format!("{e:#}"),
            },
        };
        Ok(outcome)
    }

    fn launch(&self) -> Result<tokio::process::Command, String> {
        if !matches!(
            self.contender,
            Contender::Khai | Contender::KhaiBase | Contender::Kopf | Contender::ControllerRuntime
        ) {
            return Err(
                "the timer workload is implemented for khai, controller-runtime and Kopf only"
                    .into(),
            );
        }
        let mut args = self.args.clone();
        args.khai_config = self.khai_config.to_path_buf();
        match contender::launch(self.contender, &args) {
            Launch::Skip(why) => Err(why),
            Launch::Nothing => Err("no operator process".into()),
            Launch::Run(mut cmd) => {
                if self.contender == Contender::ControllerRuntime {
                    // The same binary, its Ticker controller (a RequeueAfter reconcile).
                    cmd.arg("--workload=timer");
                }
                cmd.env(
                    "BENCH_TIMER_INTERVAL",
                    self.args.interval.as_secs_f64().to_string(),
                );
                Ok(cmd)
            }
        }
    }

    async fn measure(
        &self,
        command: tokio::process::Command,
        api: &Api<DynamicObject>,
    ) -> Result<TimerRun> {
        let ns: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": self.namespace } }))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {}", self.namespace))?;
        create_tickers(api, self.n, self.args.parallelism).await?;
        let firsts = FirstTicks::start(api.clone());
        firsts.synced(self.args.startup_timeout).await?;
        let before = writes::settle(self.client).await?;
        let load_before = Load::now();

        let log = self.args.out.join("logs").join(format!(
            "timer-{}-n{}-r{}.log",
            self.contender.name().to_lowercase(),
            self.n,
            self.rep
        ));
        let start = Instant::now();
        let process = Process::spawn(command, log)?;
        let usage = tokio::select! {
            () = tokio::time::sleep(self.args.duration) => {
                contender::usage(process.pid(), contender::clock_ticks())
            }
            e = process.exit().died() => Err(e),
        };
        let load_after = Load::now();
        let stopped = process.stop().await;
        let usage: Usage = usage?;
        stopped.context("stopping the operator")?;
        let after = writes::settle(self.client).await?;

        let ticks = read_ticks(api).await?;
        let first_tick_s = firsts.seconds_after(start);
        Ok(TimerRun {
            contender: self.contender,
            n: self.n,
            rep: self.rep,
            namespace: self.namespace.clone(),
            ticks,
            first_tick_s,
            cpu_s: usage.cpu,
            peak_rss_mib: usage.peak_rss as f64 / (1024.0 * 1024.0),
            writes: writes::delta(&before, &after, &Writes::new()),
            load: [load_before, load_after],
        })
    }
}

/// Creates `t-00000` .. in parallel, outside the measured window.
async fn create_tickers(api: &Api<DynamicObject>, n: usize, parallelism: usize) -> Result<()> {
    futures::stream::iter(0..n)
        .map(|i| async move {
            let name = format!("{OBJECT_PREFIX}{i:05}");
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "Ticker",
                "metadata": { "name": name },
                "spec": { "note": "scripts/bench timer" },
            }))?;
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating Ticker {name}"))?;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(parallelism.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Each benchmark Ticker's `status.ticks` as the API server holds it (0 without a status).
async fn read_ticks(api: &Api<DynamicObject>) -> Result<Vec<u64>> {
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing the run's Tickers")?;
    Ok(list
        .items
        .iter()
        .filter(|o| {
            o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(OBJECT_PREFIX))
        })
        .map(|o| o.data["status"]["ticks"].as_u64().unwrap_or(0))
        .collect())
}

/// Deletes the run's Tickers, first removing any finalizer an operator left (it is stopped, so
/// nothing else would).
async fn clean_up(api: &Api<DynamicObject>) -> Result<()> {
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing the run's Tickers for clean-up")?;
    let unfinalize = json!({ "metadata": { "finalizers": null } });
    for o in &list.items {
        if o.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty())
            && let Some(name) = &o.metadata.name
        {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&unfinalize))
                .await
                .with_context(|| format!("removing the finalizers of Ticker {name}"))?;
        }
    }
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .context("deleting the run's Tickers")?;
    Ok(())
}

/// When the bench client's own watch first saw each Ticker with a tick: how long the contender
/// took to get every timer going.
struct FirstTicks {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    synced: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FirstTicks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FirstTicks {
    fn start(api: Api<DynamicObject>) -> FirstTicks {
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let (tx, synced) = watch::channel(false);
        let map = seen.clone();
        let task = tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default()).default_backoff();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                // Watch errors are retried with backoff by the stream itself.
                let Ok(event) = event else { continue };
                match event {
                    watcher::Event::InitDone => {
                        let _ = tx.send(true);
                    }
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        let ticked = o.data["status"]["ticks"].as_u64().is_some_and(|t| t > 0);
                        if let (true, Some(name)) = (ticked, o.metadata.name) {
                            map.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .entry(name)
                                .or_insert_with(Instant::now);
                        }
                    }
                    watcher::Event::Init | watcher::Event::Delete(_) => {}
                }
            }
        });
        FirstTicks { seen, synced, task }
    }

    /// Waits until the watch has listed the namespace, so no first tick goes unseen.
    async fn synced(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.synced.clone();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s))
            .await
            .map_err(|_| {
                anyhow!("the bench client's watch on Tickers did not sync in {timeout:?}")
            })?
            .map_err(|_| anyhow!("the bench client's watch on Tickers stopped"))?;
        Ok(())
    }

    /// Seconds from `start` to each Ticker's first tick, in no particular order.
    fn seconds_after(&self, start: Instant) -> Vec<f64> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(name, _)| name.starts_with(OBJECT_PREFIX))
            .map(|(_, at)| at.saturating_duration_since(start).as_secs_f64())
            .collect()
    }
}
