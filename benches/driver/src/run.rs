//! One run: one contender, one object count, one repetition. Start the operator, warm it up,
//! then the measured phases (a) create, (b) idle, (c) update, (d) restart, (e) delete, then
//! clean up.

use crate::cli::{Args, Contender};
use crate::contender::{self, Launch, Process, Usage};
use crate::memory::{Memory, Sampler};
use crate::restart::{self, Restart};
use crate::track::Tracker;
use crate::workload::{self, WARMUP, Workload};
use crate::writes::{self, Writes};
use anyhow::Result;
use serde::Serialize;
use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};

/// The operator's writes and CPU seconds in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseCost {
    /// Writes the contender made (the server's count less the bench client's own).
    pub writes: Writes,
    /// The bench client's own writes, already subtracted.
    pub client_writes: Writes,
    /// CPU seconds of the operator process; 0 for the floor.
    pub cpu_s: f64,
}

/// Everything measured in one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub contender: Contender,
    pub n: usize,
    pub rep: usize,
    pub namespace: String,
    /// First create request to every Cache Ready at generation 1.
    pub create_s: f64,
    /// The last create call's return to every Cache Ready.
    pub create_lag_s: f64,
    /// Per object: its create call returned → the client's watch saw it Ready. Milliseconds.
    pub ready_latency_ms: Vec<f64>,
    /// First update request to every ConfigMap at the new size and every Cache Ready at the new
    /// generation.
    pub update_s: f64,
    /// First delete request to every Cache gone.
    pub delete_s: f64,
    pub create: PhaseCost,
    pub idle: PhaseCost,
    pub update: PhaseCost,
    pub delete: PhaseCost,
    /// Stopping the operator and starting it again over the n Caches; None for the floor.
    pub restart: Option<Restart>,
    /// Peak RSS (VmHWM) of the operator, MiB, the larger of its two lives (before and after the
    /// restart); None for the floor.
    pub peak_rss_mib: Option<f64>,
    /// The highest `RssAnon` (heap) of the operator, MiB, sampled every 100 ms over both of its
    /// lives; None for the floor.
    pub peak_heap_mib: Option<f64>,
    /// `RssFile` (the binary's code and other file-backed pages) in the same sample as
    /// [`RunResult::peak_heap_mib`], MiB; None for the floor.
    pub file_at_peak_heap_mib: Option<f64>,
    /// The operator's resident memory (`RssAnon` + `RssFile`) after the warm-up, before the
    /// first create: the process holding no objects, MiB; None for the floor.
    pub idle_rss_mib: Option<f64>,
}

/// The outcome of one attempted run.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Outcome {
    Done(Box<RunResult>),
    Failed {
        contender: Contender,
        n: usize,
        rep: usize,
        error: String,
    },
}

/// Everything a run needs from the invocation.
pub struct Settings<'a> {
    pub args: &'a Args,
    pub client: kube::Client,
    pub clock_ticks: f64,
    /// Distinguishes this invocation's namespaces from an earlier one's on a reused cluster.
    pub tag: String,
}

impl Settings<'_> {
    /// Runs `contender` at `n` objects; Err only when the contender is skipped.
    pub async fn run(&self, contender: Contender, n: usize, rep: usize) -> Result<Outcome, String> {
        let process = match self.spawn(contender, n, rep, "") {
            Err(why) => return Err(why),
            Ok(Err(e)) => return Ok(failed(contender, n, rep, &e)),
            Ok(Ok(p)) => p,
        };
        let namespace = format!(
            "bench-{}-n{n}-r{rep}-{}",
            contender.name().to_lowercase(),
            self.tag
        );
        let guard = Guard(RefCell::new(process));
        let outcome = match self.measure(contender, n, rep, &namespace, &guard).await {
            Ok(r) => Outcome::Done(Box::new(r)),
            Err(e) => failed(contender, n, rep, &e),
        };
        if let Some(p) = guard.0.into_inner()
            && let Err(e) = p.stop().await
        {
            eprintln!("bench: stopping {}: {e:#}", contender.name());
        }
        Ok(outcome)
    }

    /// Starts `contender`'s process, logging to `<name>-n<n>-r<rep><suffix>.log`: Err when the
    /// contender is skipped, Ok(Err) when it failed to start, Ok(Ok(None)) for the floor.
    pub fn spawn(
        &self,
        contender: Contender,
        n: usize,
        rep: usize,
        suffix: &str,
    ) -> Result<Result<Option<Process>>, String> {
        match contender::launch(contender, self.args) {
            Launch::Skip(why) => Err(why),
            Launch::Nothing => Ok(Ok(None)),
            Launch::Run(cmd) => {
                let log = self.args.out.join("logs").join(format!(
                    "{}-n{n}-r{rep}{suffix}.log",
                    contender.name().to_lowercase()
                ));
                Ok(Process::spawn(cmd, log).map(|p| Some(p.sample_memory())))
            }
        }
    }

    async fn measure(
        &self,
        contender: Contender,
        n: usize,
        rep: usize,
        namespace: &str,
        guard: &Guard,
    ) -> Result<RunResult> {
        let floor = contender == Contender::Floor;
        let wl = Workload::new(
            &self.client,
            namespace.to_string(),
            floor,
            self.args.parallelism,
        )
        .await?;
        let result = self.phases(contender, n, rep, &wl, guard).await;
        // Clean up even after a failure, so the next contender starts with an empty cluster;
        // the first error is the one reported.
        let cleaned = wl.clean_up().await;
        let result = result?;
        cleaned?;
        Ok(result)
    }

    async fn phases(
        &self,
        contender: Contender,
        n: usize,
        rep: usize,
        wl: &Workload,
        guard: &Guard,
    ) -> Result<RunResult> {
        let timeout = self.args.phase_timeout;
        let tracker = Tracker::start(wl.caches.clone(), wl.configmaps.clone());
        guard
            .watch(tracker.wait("the bench client's watches", timeout, |s| s.synced >= 2))
            .await?;
        guard
            .watch(warm_up(wl, &tracker, self.args.startup_timeout))
            .await?;
        let mut meter = Meter::start(self, guard).await?;
        let idle_rss = guard.rss_now()?;

        let create = guard.watch(create_phase(wl, &tracker, n, timeout)).await?;
        let create_cost = meter.close(wl).await?;
        tokio::time::sleep(self.args.idle).await; // the idle phase is a span of time
        let idle_cost = meter.close(wl).await?;
        let update_s = guard.watch(update_phase(wl, &tracker, n, timeout)).await?;
        let update_cost = meter.close(wl).await?;
        let first_peak = guard.usage(self.clock_ticks)?.map(|u| u.peak_rss);
        let first_memory = guard.memory()?;
        let restart = restart::phase(self, contender, n, rep, wl, guard, &mut meter).await?;
        let delete_s = guard.watch(delete_phase(wl, &tracker, n, timeout)).await?;
        let delete_cost = meter.close(wl).await?;
        let second_peak = guard.usage(self.clock_ticks)?.map(|u| u.peak_rss);
        let peak = first_peak.max(second_peak);
        // The life with more heap, and its file-backed pages in that same sample.
        let memory = first_memory.max(guard.memory()?);

        Ok(RunResult {
            contender,
            n,
            rep,
            namespace: wl.namespace.clone(),
            create_s: create.all_ready_s,
            create_lag_s: create.lag_s,
            ready_latency_ms: create.latencies_ms,
            update_s,
            delete_s,
            create: create_cost,
            idle: idle_cost,
            update: update_cost,
            delete: delete_cost,
            restart,
            peak_rss_mib: peak.map(mib),
            peak_heap_mib: memory.map(|m| mib(m.anon)),
            file_at_peak_heap_mib: memory.map(|m| mib(m.file)),
            idle_rss_mib: idle_rss.map(|m| mib(m.anon + m.file)),
        })
    }
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn failed(contender: Contender, n: usize, rep: usize, e: &anyhow::Error) -> Outcome {
    Outcome::Failed {
        contender,
        n,
        rep,
        error: format!("{e:#}"),
    }
}

/// The operator process, if any: phases race its exit, and its /proc entry gives its usage. The
/// restart phase swaps it for a new one.
pub struct Guard(RefCell<Option<Process>>);

impl Guard {
    /// `fut`, or an error as soon as the operator exits.
    pub async fn watch<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let exit = self.0.borrow().as_ref().map(Process::exit);
        match exit {
            None => fut.await,
            Some(exit) => tokio::select! {
                r = fut => r,
                e = exit.died() => Err(e),
            },
        }
    }

    pub fn usage(&self, clock_ticks: f64) -> Result<Option<Usage>> {
        self.0
            .borrow()
            .as_ref()
            .map(|p| contender::usage(p.pid(), clock_ticks))
            .transpose()
    }

    /// The current process's sample with the most heap so far; None for the floor.
    pub fn memory(&self) -> Result<Option<Memory>> {
        self.0
            .borrow()
            .as_ref()
            .and_then(Process::memory)
            .map(Sampler::peak)
            .transpose()
    }

    /// The current process's resident memory now; None for the floor.
    pub fn rss_now(&self) -> Result<Option<Memory>> {
        self.0
            .borrow()
            .as_ref()
            .map(|p| crate::memory::read(p.pid()))
            .transpose()
    }

    /// Takes the process out (to stop it); the guard watches nothing until [`Guard::put`].
    pub fn take(&self) -> Option<Process> {
        self.0.borrow_mut().take()
    }

    pub fn put(&self, process: Process) {
        *self.0.borrow_mut() = Some(process);
    }
}

/// Phase boundaries: the server's write counts and the operator's CPU time at the last one.
pub struct Meter<'a> {
    client: kube::Client,
    clock_ticks: f64,
    guard: &'a Guard,
    writes: Writes,
    cpu: f64,
}

impl<'a> Meter<'a> {
    /// Opens the first phase once the warm-up's writes have settled.
    async fn start(settings: &Settings<'_>, guard: &'a Guard) -> Result<Meter<'a>> {
        let writes = writes::settle(&settings.client).await?;
        let cpu = guard.usage(settings.clock_ticks)?.map_or(0.0, |u| u.cpu);
        Ok(Meter {
            client: settings.client.clone(),
            clock_ticks: settings.clock_ticks,
            guard,
            writes,
            cpu,
        })
    }

    /// The operator process was replaced: its CPU time starts again from zero.
    pub fn restarted(&mut self) {
        self.cpu = 0.0;
    }

    /// Closes the current phase once its writes have settled and opens the next.
    pub async fn close(&mut self, wl: &Workload) -> Result<PhaseCost> {
        let now = writes::settle(&self.client).await?;
        let cpu = self.guard.usage(self.clock_ticks)?.map_or(0.0, |u| u.cpu);
        let own = wl.own.take();
        let cost = PhaseCost {
            writes: writes::delta(&self.writes, &now, &own),
            client_writes: own,
            cpu_s: cpu - self.cpu,
        };
        self.writes = now;
        self.cpu = cpu;
        Ok(cost)
    }
}

/// Proves the contender works before anything is counted: one Cache reconciled and deleted,
/// and its ConfigMap removed (no garbage collector would).
pub async fn warm_up(wl: &Workload, tracker: &Tracker, timeout: Duration) -> Result<()> {
    wl.create(WARMUP, 1).await?;
    let key = (WARMUP.to_string(), 1);
    tracker
        .wait("the warm-up Cache to be Ready", timeout, |s| {
            s.ready_at.contains_key(&key)
        })
        .await?;
    wl.delete(WARMUP).await?;
    tracker
        .wait("the warm-up Cache to be gone", timeout, |s| {
            s.gone_at.contains_key(WARMUP)
        })
        .await?;
    wl.delete_configmap(&workload::configmap_name(WARMUP))
        .await?;
    wl.own.take();
    Ok(())
}

pub struct Created {
    pub all_ready_s: f64,
    pub lag_s: f64,
    pub latencies_ms: Vec<f64>,
}

/// (a) Creates n Caches (size 1) and waits until every one is Ready at generation 1.
pub async fn create_phase(
    wl: &Workload,
    tracker: &Tracker,
    n: usize,
    timeout: Duration,
) -> Result<Created> {
    let start = Instant::now();
    let returned = wl
        .for_each(n, |i| async move {
            let name = workload::object_name(i);
            let at = wl.create(&name, 1).await?;
            Ok((name, at))
        })
        .await?;
    let last_create = returned.iter().map(|(_, at)| *at).max().unwrap_or(start);
    tracker
        .wait(&format!("{n} Caches to be Ready"), timeout, |s| {
            s.ready_count(1) >= n
        })
        .await?;
    let state = tracker.lock();
    let ready_at = |name: &str| state.ready_at.get(&(name.to_string(), 1)).copied();
    let latencies_ms = returned
        .iter()
        .map(|(name, at)| {
            // The watch can see Ready before the create call's response is processed; that
            // counts as no latency rather than a negative one.
            ready_at(name).map_or(0.0, |r| {
                r.saturating_duration_since(*at).as_secs_f64() * 1e3
            })
        })
        .collect();
    let all_ready = returned
        .iter()
        .filter_map(|(name, _)| ready_at(name))
        .max()
        .unwrap_or(start);
    Ok(Created {
        all_ready_s: all_ready.saturating_duration_since(start).as_secs_f64(),
        lag_s: all_ready
            .saturating_duration_since(last_create)
            .as_secs_f64(),
        latencies_ms,
    })
}

/// (c) Sets every size to 2 and waits until every ConfigMap shows it and every Cache is Ready at
/// generation 2 (so the status writes belong to this phase too).
pub async fn update_phase(
    wl: &Workload,
    tracker: &Tracker,
    n: usize,
    timeout: Duration,
) -> Result<f64> {
    let start = Instant::now();
    wl.for_each(n, |i| async move {
        wl.update(&workload::object_name(i), 2).await
    })
    .await?;
    tracker
        .wait(&format!("{n} ConfigMaps to show size 2"), timeout, |s| {
            s.size_count("2") >= n && s.ready_count(2) >= n
        })
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

/// (d) Deletes every Cache and waits until the watch saw each one go.
pub async fn delete_phase(
    wl: &Workload,
    tracker: &Tracker,
    n: usize,
    timeout: Duration,
) -> Result<f64> {
    let start = Instant::now();
    wl.for_each(
        n,
        |i| async move { wl.delete(&workload::object_name(i)).await },
    )
    .await?;
    tracker
        .wait(&format!("{n} Caches to be gone"), timeout, |s| s.gone >= n)
        .await?;
    Ok(start.elapsed().as_secs_f64())
}
