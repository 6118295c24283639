//! What the timer workload measured, reduced to ticks per object, CPU per tick and writes, with
//! khai ÷ controller-runtime and khai ÷ Kopf ratios taken within a repetition (as report.rs does
//! for cache-bench), as markdown and JSON.

use crate::cli::{Args, Contender};
use crate::report::{Environment, cell, describe, median, not_measured, percentile};
use crate::writes::{self, Writes};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The machine's load average (1, 5, 15 minutes) from /proc/loadavg; the machine may be shared.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Load(pub [f64; 3]);

impl Load {
    pub fn now() -> Load {
        let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut v = text.split_whitespace().map(|f| f.parse().unwrap_or(0.0));
        Load([
            v.next().unwrap_or(0.0),
            v.next().unwrap_or(0.0),
            v.next().unwrap_or(0.0),
        ])
    }
}

/// One contender's window.
#[derive(Debug, Clone, Serialize)]
pub struct TimerRun {
    pub contender: Contender,
    pub n: usize,
    pub rep: usize,
    pub namespace: String,
    /// Each Ticker's `status.ticks` read from the API server after the operator exited.
    pub ticks: Vec<u64>,
    /// Per Ticker that ticked: seconds from the operator's start to the bench client's watch
    /// seeing its first tick.
    pub first_tick_s: Vec<f64>,
    /// utime + stime of the operator process from its start to the end of the window.
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
    /// The operator's writes from its start until the server's counts settled after its exit.
    pub writes: Writes,
    /// The load average when the window opened and when it closed.
    pub load: [Load; 2],
}

impl TimerRun {
    pub fn total_ticks(&self) -> u64 {
        self.ticks.iter().sum()
    }

    /// Tickers whose count is more than one away from `expected`.
    pub fn outside(&self, expected: u64) -> usize {
        self.ticks
            .iter()
            .filter(|&&t| t.abs_diff(expected) > 1)
            .count()
    }

    /// Status writes the operator made: one per timer run, whether or not it raised the count
    /// (a run that read a stale copy of the object writes a count the server already has).
    pub fn status_writes(&self) -> u64 {
        self.writes
            .iter()
            .filter(|(k, _)| k.ends_with("/status"))
            .map(|(_, v)| v)
            .sum()
    }

    fn ticks_f64(&self) -> Vec<f64> {
        self.ticks.iter().map(|&t| t as f64).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum TimerOutcome {
    Done(Box<TimerRun>),
    Failed {
        contender: Contender,
        n: usize,
        rep: usize,
        error: String,
    },
}

impl TimerOutcome {
    pub fn summary_line(&self) -> String {
        match self {
            TimerOutcome::Done(r) => format!(
                "{} N={} run {}: {} ticks (per Ticker {}–{}), CPU {:.2}s, writes {}",
                r.contender.name(),
                r.n,
                r.rep,
                r.total_ticks(),
                r.ticks.iter().min().unwrap_or(&0),
                r.ticks.iter().max().unwrap_or(&0),
                r.cpu_s,
                writes::total(&r.writes),
            ),
            TimerOutcome::Failed {
                contender,
                n,
                rep,
                error,
            } => format!("{} N={n} run {rep} FAILED: {error}", contender.name()),
        }
    }
}

/// One column of the timer table.
struct Metric {
    key: &'static str,
    label: &'static str,
    decimals: usize,
    /// Whether a khai ÷ other ratio means something for it.
    ratio: bool,
    get: fn(&TimerRun, u64) -> Option<f64>,
}

const METRICS: &[Metric] = &[
    Metric {
        key: "ticks_min",
        label: "ticks/Ticker min",
        decimals: 0,
        ratio: false,
        get: |r, _| r.ticks.iter().min().map(|&t| t as f64),
    },
    Metric {
        key: "ticks_median",
        label: "median",
        decimals: 1,
        ratio: false,
        get: |r, _| median(r.ticks_f64()),
    },
    Metric {
        key: "ticks_max",
        label: "max",
        decimals: 0,
        ratio: false,
        get: |r, _| r.ticks.iter().max().map(|&t| t as f64),
    },
    Metric {
        key: "outside",
        label: "Tickers outside expected±1",
        decimals: 0,
        ratio: false,
        get: |r, e| Some(r.outside(e) as f64),
    },
    Metric {
        key: "total_ticks",
        label: "ticks",
        decimals: 0,
        ratio: true,
        get: |r, _| Some(r.total_ticks() as f64),
    },
    Metric {
        key: "status_writes",
        label: "status writes",
        decimals: 0,
        ratio: true,
        get: |r, _| Some(r.status_writes() as f64),
    },
    Metric {
        key: "first_tick_p50_s",
        label: "first tick p50 (s)",
        decimals: 2,
        ratio: true,
        get: |r, _| percentile(&r.first_tick_s, 0.5),
    },
    Metric {
        key: "all_ticked_s",
        label: "all ticked once (s)",
        decimals: 2,
        ratio: true,
        get: |r, _| percentile(&r.first_tick_s, 1.0),
    },
    Metric {
        key: "cpu_s",
        label: "CPU (s)",
        decimals: 2,
        ratio: true,
        get: |r, _| Some(r.cpu_s),
    },
    Metric {
        key: "cpu_per_tick_ms",
        label: "CPU/tick (ms)",
        decimals: 3,
        ratio: true,
        get: |r, _| (r.total_ticks() > 0).then(|| r.cpu_s * 1e3 / r.total_ticks() as f64),
    },
    Metric {
        key: "cpu_per_status_write_ms",
        label: "CPU/status write (ms)",
        decimals: 3,
        ratio: true,
        get: |r, _| (r.status_writes() > 0).then(|| r.cpu_s * 1e3 / r.status_writes() as f64),
    },
    Metric {
        key: "peak_rss_mib",
        label: "peak RSS (MiB)",
        decimals: 1,
        ratio: true,
        get: |r, _| Some(r.peak_rss_mib),
    },
    Metric {
        key: "writes_per_tick",
        label: "writes/tick",
        decimals: 2,
        ratio: true,
        get: |r, _| {
            (r.total_ticks() > 0).then(|| writes::total(&r.writes) as f64 / r.total_ticks() as f64)
        },
    },
];

/// Everything the timer invocation measured.
#[derive(Debug, Serialize)]
pub struct TimerReport {
    pub environment: Environment,
    pub interval_s: f64,
    pub duration_s: f64,
    /// Ticks each Ticker should have: duration ÷ interval (the first tick comes at once).
    pub expected: u64,
    pub contenders: Vec<Contender>,
    pub counts: Vec<usize>,
    /// Contender → why it did not run.
    pub skipped: BTreeMap<String, String>,
    pub runs: Vec<TimerOutcome>,
}

impl TimerReport {
    pub fn new(args: &Args, environment: Environment) -> TimerReport {
        let (interval_s, duration_s) = (args.interval.as_secs_f64(), args.duration.as_secs_f64());
        TimerReport {
            environment,
            interval_s,
            duration_s,
            expected: expected_ticks(duration_s, interval_s),
            contenders: args.contenders.clone(),
            counts: args.n.clone(),
            skipped: BTreeMap::new(),
            runs: Vec::new(),
        }
    }

    fn done(&self, contender: Contender, n: usize) -> Vec<&TimerRun> {
        self.runs
            .iter()
            .filter_map(|o| match o {
                TimerOutcome::Done(r) if r.contender == contender && r.n == n => Some(r.as_ref()),
                _ => None,
            })
            .collect()
    }

    fn median_of(&self, c: Contender, n: usize, m: &Metric) -> Option<f64> {
        median(
            self.done(c, n)
                .iter()
                .filter_map(|r| (m.get)(r, self.expected))
                .collect(),
        )
    }

    /// The contenders khai is divided by, each that ran beside it.
    fn others(&self) -> Vec<Contender> {
        if !self.contenders.contains(&Contender::Khai) {
            return Vec::new();
        }
        [Contender::ControllerRuntime, Contender::Kopf]
            .into_iter()
            .filter(|c| self.contenders.contains(c))
            .collect()
    }

    /// Median over repetitions of khai ÷ `other` within the same repetition.
    fn ratio_of(&self, other: Contender, n: usize, m: &Metric) -> Option<f64> {
        let others = self.done(other, n);
        let ratios = self
            .done(Contender::Khai, n)
            .iter()
            .filter_map(|k| {
                let o = others.iter().find(|o| o.rep == k.rep)?;
                let (kv, ov) = ((m.get)(k, self.expected)?, (m.get)(o, self.expected)?);
                (ov != 0.0).then(|| kv / ov)
            })
            .collect();
        median(ratios)
    }

    /// Why khai failed the check: a run that failed, or Tickers outside expected±1.
    pub fn khai_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.contenders.contains(&Contender::Khai) {
            return problems;
        }
        for &n in &self.counts {
            let runs = self.done(Contender::Khai, n);
            if runs.is_empty() {
                problems.push(format!("khai has no successful timer run at N={n}"));
            }
            for r in runs {
                let outside = r.outside(self.expected);
                if outside > 0 || r.ticks.len() != n {
                    problems.push(format!(
                        "N={n} run {}: {outside} of {} Tickers ticked outside {}±1 times ({}–{})",
                        r.rep,
                        r.ticks.len(),
                        self.expected,
                        r.ticks.iter().min().unwrap_or(&0),
                        r.ticks.iter().max().unwrap_or(&0),
                    ));
                }
            }
        }
        problems
    }

    pub fn json(&self) -> serde_json::Value {
        let mut medians = BTreeMap::new();
        let mut ratios = BTreeMap::new();
        for &n in &self.counts {
            let per: BTreeMap<String, BTreeMap<&str, f64>> = self
                .contenders
                .iter()
                .map(|&c| {
                    let values = METRICS
                        .iter()
                        .filter_map(|m| Some((m.key, self.median_of(c, n, m)?)))
                        .collect();
                    (c.name().to_string(), values)
                })
                .collect();
            medians.insert(n, per);
            let per_other: BTreeMap<String, BTreeMap<&str, f64>> = self
                .others()
                .into_iter()
                .map(|o| {
                    let r = METRICS
                        .iter()
                        .filter(|m| m.ratio)
                        .filter_map(|m| Some((m.key, self.ratio_of(o, n, m)?)))
                        .collect();
                    (format!("khai/{}", o.name()), r)
                })
                .collect();
            ratios.insert(n, per_other);
        }
        serde_json::json!({
            "workload": "timer",
            "report": self,
            "summary": { "medians": medians, "ratios": ratios },
        })
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let e = &self.environment;
        let _ = writeln!(
            md,
            "Measured {} on {} CPUs ({}), kube-apiserver {} + etcd on loopback, khai {}, {}.\n\
             Command: `{}`. Timer every {}s, each contender alone for {}s, so each Ticker \
             should tick {} times (±1). Medians of {} run(s) per contender and N.\n",
            e.date,
            e.cpus,
            e.cpu_model,
            e.apiserver,
            e.khai,
            e.kopf,
            e.command,
            self.interval_s,
            self.duration_s,
            self.expected,
            e.reps,
        );
        let failed = self.runs.iter().filter_map(|o| match o {
            TimerOutcome::Failed {
                contender,
                n,
                rep,
                error,
            } => Some((*contender, *n, *rep, error.as_str())),
            TimerOutcome::Done(_) => None,
        });
        not_measured(&mut md, &self.skipped, failed);
        for &n in &self.counts {
            self.section(&mut md, n);
        }
        md
    }

    fn section(&self, md: &mut String, n: usize) {
        let _ = writeln!(md, "\n### Timer, N = {n}\n");
        let labels: Vec<&str> = METRICS.iter().map(|m| m.label).collect();
        let _ = writeln!(md, "| contender | {} |", labels.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(METRICS.len()));
        for &c in &self.contenders {
            let cells: Vec<String> = METRICS
                .iter()
                .map(|m| cell(self.median_of(c, n, m), m.decimals))
                .collect();
            let _ = writeln!(md, "| {} | {} |", c.name(), cells.join(" | "));
        }
        for o in self.others() {
            let cells: Vec<String> = METRICS
                .iter()
                .map(|m| match m.ratio {
                    true => cell(self.ratio_of(o, n, m), 2),
                    false => "".into(),
                })
                .collect();
            let _ = writeln!(md, "| khai ÷ {} | {} |", o.name(), cells.join(" | "));
        }
        let _ = writeln!(
            md,
            "\nWrites by the contender during its window, by verb and resource, and the load \
             average (1 min) when the window opened → closed, per run:\n\n\
             | contender | run | writes | load average |\n|---|---:|---|---|"
        );
        for &c in &self.contenders {
            for r in self.done(c, n) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.2} → {:.2} |",
                    c.name(),
                    r.rep,
                    describe(&r.writes),
                    r.load[0].0[0],
                    r.load[1].0[0],
                );
            }
        }
    }
}

/// Ticks in a window of `duration_s` with the first tick at its start and one every
/// `interval_s` after: duration ÷ interval, rounded.
pub fn expected_ticks(duration_s: f64, interval_s: f64) -> u64 {
    if interval_s <= 0.0 {
        return 0;
    }
    (duration_s / interval_s).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ticks: Vec<u64>) -> TimerRun {
        TimerRun {
            contender: Contender::Khai,
            n: ticks.len(),
            rep: 1,
            namespace: "ns".into(),
            ticks,
            first_tick_s: vec![0.2, 0.4],
            cpu_s: 1.5,
            peak_rss_mib: 20.0,
            writes: Writes::from([("PATCH tickers/status".into(), 18)]),
            load: [Load::default(); 2],
        }
    }

    #[test]
    fn expected_ticks_count_the_first_tick_at_the_start() {
        assert_eq!(expected_ticks(60.0, 10.0), 6);
        assert_eq!(expected_ticks(10.0, 2.0), 5);
        assert_eq!(expected_ticks(10.0, 0.0), 0);
    }

    #[test]
    fn tickers_more_than_one_tick_off_are_outside() {
        let r = run(vec![4, 5, 6, 7, 8]);
        assert_eq!(r.outside(6), 2);
        assert_eq!(r.total_ticks(), 30);
    }

    #[test]
    fn cpu_per_tick_is_cpu_over_all_ticks() {
        let r = run(vec![6, 6, 6]);
        let m = METRICS.iter().find(|m| m.key == "cpu_per_tick_ms");
        assert_eq!(m.and_then(|m| (m.get)(&r, 6)), Some(1.5e3 / 18.0));
        let w = METRICS.iter().find(|m| m.key == "writes_per_tick");
        assert_eq!(w.and_then(|m| (m.get)(&r, 6)), Some(1.0));
    }

    #[test]
    fn status_writes_count_runs_that_did_not_raise_the_count() {
        let mut r = run(vec![3, 3]);
        r.writes.insert("PATCH tickers".into(), 2);
        r.writes.insert("PATCH tickers/status".into(), 9);
        assert_eq!(r.total_ticks(), 6);
        assert_eq!(r.status_writes(), 9);
        let m = METRICS.iter().find(|m| m.key == "cpu_per_status_write_ms");
        assert_eq!(m.and_then(|m| (m.get)(&r, 6)), Some(1.5e3 / 9.0));
    }

    #[test]
    fn khai_fails_the_check_when_a_ticker_is_off_by_two() {
        let env = Environment {
            date: String::new(),
            cpus: 2,
            cpu_model: String::new(),
            apiserver: String::new(),
            khai: String::new(),
            kopf: String::new(),
            command: String::new(),
            reps: 1,
            idle_s: 0.0,
            parallelism: 16,
        };
        let mut report = TimerReport {
            environment: env,
            interval_s: 10.0,
            duration_s: 60.0,
            expected: 6,
            contenders: vec![Contender::Khai],
            counts: vec![3],
            skipped: BTreeMap::new(),
            runs: vec![TimerOutcome::Done(Box::new(run(vec![5, 6, 7])))],
        };
        assert!(report.khai_problems().is_empty());
        report.runs = vec![TimerOutcome::Done(Box::new(run(vec![4, 6, 7])))];
        assert_eq!(report.khai_problems().len(), 1);
        report.runs.clear();
        assert_eq!(report.khai_problems().len(), 1);
    }
}
