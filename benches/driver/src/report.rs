//! Medians, ratios and the markdown and JSON reports. Ratios are taken within a run (khai's
//! repetition r against the other contender's repetition r on the same cluster) and only then
//! reduced to their median, so every ratio compares numbers measured side by side.

use crate::cli::Contender;
use crate::run::{Outcome, RunResult};
use crate::writes::{self, Writes};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One column of the results table.
pub struct Metric {
    pub key: &'static str,
    pub label: &'static str,
    pub decimals: usize,
    pub get: fn(&RunResult) -> Option<f64>,
}

pub const METRICS: &[Metric] = &[
    Metric {
        key: "create_s",
        label: "create: all Ready (s)",
        decimals: 2,
        get: |r| Some(r.create_s),
    },
    Metric {
        key: "create_lag_s",
        label: "lag after last create (s)",
        decimals: 2,
        get: |r| Some(r.create_lag_s),
    },
    Metric {
        key: "ready_p50_ms",
        label: "create→Ready p50 (ms)",
        decimals: 0,
        get: |r| percentile(&r.ready_latency_ms, 0.50),
    },
    Metric {
        key: "ready_p99_ms",
        label: "create→Ready p99 (ms)",
        decimals: 0,
        get: |r| percentile(&r.ready_latency_ms, 0.99),
    },
    Metric {
        key: "update_s",
        label: "update→applied (s)",
        decimals: 2,
        get: |r| Some(r.update_s),
    },
    Metric {
        key: "delete_s",
        label: "delete→gone (s)",
        decimals: 2,
        get: |r| Some(r.delete_s),
    },
    Metric {
        key: "create_writes_per_cache",
        label: "writes/Cache create",
        decimals: 2,
        get: |r| Some(writes::total(&r.create.writes) as f64 / r.n as f64),
    },
    Metric {
        key: "update_writes_per_cache",
        label: "writes/Cache update",
        decimals: 2,
        get: |r| Some(writes::total(&r.update.writes) as f64 / r.n as f64),
    },
    Metric {
        key: "delete_writes_per_cache",
        label: "writes/Cache delete",
        decimals: 2,
        get: |r| Some(writes::total(&r.delete.writes) as f64 / r.n as f64),
    },
    Metric {
        key: "idle_writes",
        label: "idle writes",
        decimals: 0,
        get: |r| Some(writes::total(&r.idle.writes) as f64),
    },
    Metric {
        key: "restart_s",
        label: "restart: all confirmed (s)",
        decimals: 2,
        get: |r| r.restart.as_ref().map(|x| x.confirmed_s),
    },
    Metric {
        key: "restart_writes",
        label: "restart writes",
        decimals: 0,
        get: |r| {
            r.restart
                .as_ref()
                .map(|x| writes::total(&x.cost.writes) as f64)
        },
    },
    Metric {
        key: "restart_cpu_s",
        label: "restart CPU (s)",
        decimals: 2,
        get: |r| r.restart.as_ref().map(|x| x.cost.cpu_s),
    },
    Metric {
        key: "restart_peak_rss_mib",
        label: "restart peak RSS (MiB)",
        decimals: 1,
        get: |r| r.restart.as_ref().and_then(|x| x.peak_rss_mib),
    },
    Metric {
        key: "peak_rss_mib",
        label: "peak RSS (MiB)",
        decimals: 1,
        get: |r| r.peak_rss_mib,
    },
    Metric {
        key: "peak_heap_mib",
        label: "peak heap (MiB)",
        decimals: 1,
        get: |r| r.peak_heap_mib,
    },
    Metric {
        key: "file_at_peak_heap_mib",
        label: "code and files at that peak (MiB)",
        decimals: 1,
        get: |r| r.file_at_peak_heap_mib,
    },
    Metric {
        key: "cpu_s",
        label: "CPU (s), restart excluded",
        decimals: 2,
        get: |r| {
            (r.contender != Contender::Floor)
                .then_some(r.create.cpu_s + r.idle.cpu_s + r.update.cpu_s + r.delete.cpu_s)
        },
    },
];

/// Nearest-rank percentile.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p * v.len() as f64).ceil() as usize).max(1);
    v.get(rank - 1).copied()
}

pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// What the invocation ran on, for the report's header.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub date: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub apiserver: String,
    pub khai: String,
    pub kopf: String,
    pub command: String,
    pub reps: usize,
    pub idle_s: f64,
    pub parallelism: usize,
}

/// Everything the invocation measured.
#[derive(Debug, Serialize)]
pub struct Report {
    pub environment: Environment,
    pub contenders: Vec<Contender>,
    pub counts: Vec<usize>,
    /// Contender → why it did not run.
    pub skipped: BTreeMap<String, String>,
    pub runs: Vec<Outcome>,
}

/// Medians and ratios, derived from the runs for the JSON file.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// n → contender → metric → median.
    pub medians: BTreeMap<usize, BTreeMap<String, BTreeMap<String, f64>>>,
    /// n → "khai/<other>" → metric → median of per-run ratios.
    pub ratios: BTreeMap<usize, BTreeMap<String, BTreeMap<String, f64>>>,
}

impl Report {
    fn done(&self, contender: Contender, n: usize) -> Vec<&RunResult> {
        self.runs
            .iter()
            .filter_map(|o| match o {
                Outcome::Done(r) if r.contender == contender && r.n == n => Some(r.as_ref()),
                _ => None,
            })
            .collect()
    }

    fn median_of(&self, contender: Contender, n: usize, m: &Metric) -> Option<f64> {
        median(
            self.done(contender, n)
                .iter()
                .filter_map(|r| (m.get)(r))
                .collect(),
        )
    }

    /// Median over repetitions of khai's value ÷ the other's value in the same repetition.
    fn ratio_of(&self, other: Contender, n: usize, m: &Metric) -> Option<f64> {
        let others = self.done(other, n);
        let ratios = self
            .done(Contender::Khai, n)
            .iter()
            .filter_map(|k| {
                let o = others.iter().find(|o| o.rep == k.rep)?;
                let (kv, ov) = ((m.get)(k)?, (m.get)(o)?);
                (ov != 0.0).then(|| kv / ov)
            })
            .collect();
        median(ratios)
    }

    fn others(&self) -> Vec<Contender> {
        self.contenders
            .iter()
            .copied()
            .filter(|c| *c != Contender::Khai)
            .collect()
    }

    pub fn summary(&self) -> Summary {
        let mut medians = BTreeMap::new();
        let mut ratios = BTreeMap::new();
        for &n in &self.counts {
            let per_contender = self
                .contenders
                .iter()
                .map(|&c| {
                    (
                        c.name().to_string(),
                        self.metrics(|m| self.median_of(c, n, m)),
                    )
                })
                .collect();
            medians.insert(n, per_contender);
            if self.contenders.contains(&Contender::Khai) {
                let per_other = self
                    .others()
                    .into_iter()
                    .map(|o| {
                        (
                            format!("khai/{}", o.name()),
                            self.metrics(|m| self.ratio_of(o, n, m)),
                        )
                    })
                    .collect();
                ratios.insert(n, per_other);
            }
        }
        Summary { medians, ratios }
    }

    fn metrics(&self, value: impl Fn(&Metric) -> Option<f64>) -> BTreeMap<String, f64> {
        METRICS
            .iter()
            .filter_map(|m| Some((m.key.to_string(), value(m)?)))
            .collect()
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let e = &self.environment;
        let _ = writeln!(
            md,
            "Measured {} on {} CPUs ({}), kube-apiserver {} + etcd on loopback, khai {}, {}.\n\
             Command: `{}`. Medians of {} run(s) per contender and N; idle phase {}s; \
             the bench client keeps {} requests in flight.\n",
            e.date,
            e.cpus,
            e.cpu_model,
            e.apiserver,
            e.khai,
            e.kopf,
            e.command,
            e.reps,
            e.idle_s,
            e.parallelism
        );
        let failed = self.runs.iter().filter_map(|o| match o {
            Outcome::Failed {
                contender,
                n,
                rep,
                error,
            } => Some((*contender, *n, *rep, error.as_str())),
            Outcome::Done(_) => None,
        });
        not_measured(&mut md, &self.skipped, failed);
        for &n in &self.counts {
            self.section(&mut md, n);
        }
        md
    }

    fn section(&self, md: &mut String, n: usize) {
        let _ = writeln!(md, "\n### N = {n}\n");
        table_header(md, "contender");
        for &c in &self.contenders {
            let cells = METRICS
                .iter()
                .map(|m| cell(self.median_of(c, n, m), m.decimals))
                .collect::<Vec<_>>();
            let _ = writeln!(md, "| {} | {} |", c.name(), cells.join(" | "));
        }
        if self.contenders.contains(&Contender::Khai) && !self.others().is_empty() {
            let _ = writeln!(
                md,
                "\nkhai ÷ other, per run, median (below 1: khai is lower):\n"
            );
            table_header(md, "ratio");
            for o in self.others() {
                let cells = METRICS
                    .iter()
                    .map(|m| cell(self.ratio_of(o, n, m), 2))
                    .collect::<Vec<_>>();
                let _ = writeln!(md, "| khai / {} | {} |", o.name(), cells.join(" | "));
            }
        }
        self.writes_table(md, n);
    }

    /// Which writes each contender made, so a count can be explained.
    fn writes_table(&self, md: &mut String, n: usize) {
        let _ = writeln!(
            md,
            "\nWrites by the contender, by verb and resource (median over runs):\n\n\
             | contender | create | idle | update | restart | delete |\n|---|---|---|---|---|---|"
        );
        for &c in &self.contenders {
            let runs = self.done(c, n);
            if runs.is_empty() {
                continue;
            }
            let phases: [fn(&RunResult) -> Option<&Writes>; 5] = [
                |r| Some(&r.create.writes),
                |r| Some(&r.idle.writes),
                |r| Some(&r.update.writes),
                |r| r.restart.as_ref().map(|x| &x.cost.writes),
                |r| Some(&r.delete.writes),
            ];
            let cells: Vec<String> = phases
                .iter()
                .map(|phase| {
                    let measured: Vec<&Writes> = runs.iter().filter_map(|r| phase(r)).collect();
                    if measured.is_empty() {
                        "—".into()
                    } else {
                        describe(&median_writes(measured.into_iter()))
                    }
                })
                .collect();
            let _ = writeln!(md, "| {} | {} |", c.name(), cells.join(" | "));
        }
    }

    /// The smoke check's verdict on the writes of khai and the controller-runtime baseline (each
    /// that was asked for): every problem found.
    pub fn smoke_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for c in self.smoke_checked_contenders() {
            for &n in &self.counts {
                problems.extend(self.smoke_problems_of(c, n));
            }
        }
        problems
    }

    /// The contenders the smoke check holds to exactly 2 writes: khai and controller-runtime,
    /// each that was asked for.
    fn smoke_checked_contenders(&self) -> Vec<Contender> {
        [Contender::Khai, Contender::ControllerRuntime]
            .into_iter()
            .filter(|c| self.contenders.contains(c))
            .collect()
    }

    /// Their names, for the verdict.
    pub fn smoke_checked(&self) -> Vec<&'static str> {
        self.smoke_checked_contenders()
            .into_iter()
            .map(Contender::name)
            .collect()
    }

    /// Exactly 2 writes per Cache on create and on update, none while idle or on restart.
    fn smoke_problems_of(&self, c: Contender, n: usize) -> Vec<String> {
        let mut problems = Vec::new();
        let name = c.name();
        let runs = self.done(c, n);
        if runs.is_empty() {
            problems.push(format!("{name} has no successful run at N={n}"));
        }
        for r in runs {
            let per = |w: &Writes| writes::total(w) as f64 / n as f64;
            if per(&r.create.writes) != 2.0 {
                problems.push(format!(
                    "N={n}: {name} create writes {:?}, want 2 per Cache",
                    r.create.writes
                ));
            }
            if per(&r.update.writes) != 2.0 {
                problems.push(format!(
                    "N={n}: {name} update writes {:?}, want 2 per Cache",
                    r.update.writes
                ));
            }
            if !r.idle.writes.is_empty() {
                problems.push(format!(
                    "N={n}: {name} idle writes {:?}, want none",
                    r.idle.writes
                ));
            }
            match &r.restart {
                None => problems.push(format!("N={n}: {name} was not restarted")),
                Some(x) if !x.cost.writes.is_empty() => problems.push(format!(
                    "N={n}: {name} restart writes {:?}, want none",
                    x.cost.writes
                )),
                Some(_) => {}
            }
        }
        problems
    }
}

fn table_header(md: &mut String, first: &str) {
    let labels: Vec<&str> = METRICS.iter().map(|m| m.label).collect();
    let _ = writeln!(md, "| {first} | {} |", labels.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(METRICS.len()));
}

/// The list above the tables: contenders skipped, and runs that failed (first line of the error).
pub fn not_measured<'a>(
    md: &mut String,
    skipped: &BTreeMap<String, String>,
    failed: impl Iterator<Item = (Contender, usize, usize, &'a str)>,
) {
    for (c, why) in skipped {
        let _ = writeln!(md, "- **{c} skipped**: {why}");
    }
    for (contender, n, rep, error) in failed {
        let first = error.lines().next().unwrap_or_default();
        let _ = writeln!(
            md,
            "- **{} failed** (N={n}, run {rep}): {first}",
            contender.name()
        );
    }
}

pub fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.decimals$}"))
}

/// Per key, the median count over runs (a run without the key counts 0).
fn median_writes<'a>(runs: impl Iterator<Item = &'a Writes>) -> Writes {
    let runs: Vec<&Writes> = runs.collect();
    let keys: std::collections::BTreeSet<&String> = runs.iter().flat_map(|w| w.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let m = median(
                runs.iter()
                    .map(|w| w.get(k).copied().unwrap_or(0) as f64)
                    .collect(),
            )?;
            (m > 0.0).then(|| (k.clone(), m.round() as u64))
        })
        .collect()
}

pub fn describe(w: &Writes) -> String {
    if w.is_empty() {
        return "0".into();
    }
    w.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(50.0));
        assert_eq!(percentile(&v, 0.99), Some(99.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    fn run(contender: Contender, heap: Option<f64>, file: Option<f64>) -> Outcome {
        Outcome::Done(Box::new(RunResult {
            contender,
            n: 10,
            rep: 1,
            namespace: "bench".into(),
            create_s: 1.0,
            create_lag_s: 0.5,
            ready_latency_ms: vec![10.0],
            update_s: 1.0,
            delete_s: 1.0,
            create: Default::default(),
            idle: Default::default(),
            update: Default::default(),
            delete: Default::default(),
            restart: None,
            peak_rss_mib: heap.zip(file).map(|(h, f)| h + f),
            peak_heap_mib: heap,
            file_at_peak_heap_mib: file,
            idle_rss_mib: None,
        }))
    }

    fn report() -> Report {
        Report {
            environment: Environment {
                date: "today".into(),
                cpus: 2,
                cpu_model: "cpu".into(),
                apiserver: "v1".into(),
                khai: "0".into(),
                kopf: "Kopf not run".into(),
                command: "scripts/bench".into(),
                reps: 1,
                idle_s: 1.0,
                parallelism: 1,
            },
            contenders: vec![Contender::Khai, Contender::KubeRs, Contender::Floor],
            counts: vec![10],
            skipped: BTreeMap::new(),
            runs: vec![
                run(Contender::Khai, Some(18.0), Some(16.0)),
                run(Contender::KubeRs, Some(12.0), Some(8.0)),
                run(Contender::Floor, None, None),
            ],
        }
    }

    #[test]
    fn the_smoke_check_holds_khai_and_controller_runtime_to_two_writes() {
        let mut r = report();
        r.contenders.push(Contender::ControllerRuntime);
        r.runs
            .push(run(Contender::ControllerRuntime, Some(9.0), Some(4.0)));
        // No writes at all and no restart: create, update and restart are wrong for both.
        let problems = r.smoke_problems();
        let about = |name: &str| problems.iter().filter(|p| p.contains(name)).count();
        assert_eq!(about("khai"), 3, "{problems:?}");
        assert_eq!(about("controller-runtime"), 3, "{problems:?}");
        assert_eq!(about("kube-rs"), 0, "{problems:?}");
        r.contenders.pop();
        assert_eq!(r.smoke_problems().len(), 3);
    }

    #[test]
    fn heap_and_file_columns_have_medians_and_ratios() {
        let summary = report().summary();
        let khai = &summary.medians[&10]["khai"];
        assert_eq!(khai.get("peak_heap_mib"), Some(&18.0));
        assert_eq!(khai.get("file_at_peak_heap_mib"), Some(&16.0));
        let floor = &summary.medians[&10]["floor"];
        assert_eq!(floor.get("peak_heap_mib"), None);
        let ratios = &summary.ratios[&10]["khai/kube-rs"];
        assert_eq!(ratios.get("peak_heap_mib"), Some(&1.5));
        assert_eq!(ratios.get("file_at_peak_heap_mib"), Some(&2.0));
        assert_eq!(ratios.get("peak_rss_mib"), Some(&1.7));
    }

    #[test]
    fn khai_at_another_revision_gets_its_own_ratio_row() {
        let mut r = report();
        r.contenders.insert(1, Contender::KhaiBase);
        r.runs
            .push(run(Contender::KhaiBase, Some(20.0), Some(16.0)));
        let ratios = &r.summary().ratios[&10]["khai/khai-base"];
        assert_eq!(ratios.get("peak_heap_mib"), Some(&0.9));
        assert!(r.markdown().contains("| khai / khai-base |"));
    }

    #[test]
    fn tables_keep_one_cell_per_column() {
        let md = report().markdown();
        let heap = METRICS.iter().position(|m| m.key == "peak_heap_mib");
        let file = METRICS
            .iter()
            .position(|m| m.key == "file_at_peak_heap_mib");
        let rss = METRICS.iter().position(|m| m.key == "peak_rss_mib");
        assert_eq!(heap, rss.map(|i| i + 1));
        assert_eq!(file, rss.map(|i| i + 2));
        // The main table and the ratio table, separator rows included; not the writes table.
        let tables = md
            .split("Writes by the contender")
            .next()
            .unwrap_or_default();
        let rows: Vec<Vec<&str>> = tables
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        assert_eq!(rows.len(), 9, "{md}");
        assert!(rows.iter().all(|r| r.len() == METRICS.len() + 1), "{md}");
        assert!(rows[0].contains(&"peak heap (MiB)"));
        assert!(rows[0].contains(&"code and files at that peak (MiB)"));
        let cells = |first: &str| rows.iter().find(|r| r[0] == first).cloned();
        let at = |row: Option<Vec<&str>>, i: Option<usize>| {
            row.zip(i).map(|(r, i)| r[i + 1].to_string())
        };
        assert_eq!(at(cells("khai"), heap).as_deref(), Some("18.0"));
        assert_eq!(at(cells("khai"), file).as_deref(), Some("16.0"));
        assert_eq!(at(cells("floor"), heap).as_deref(), Some("—"));
        assert_eq!(at(cells("floor"), file).as_deref(), Some("—"));
        assert_eq!(at(cells("khai / kube-rs"), heap).as_deref(), Some("1.50"));
        assert_eq!(at(cells("khai / floor"), heap).as_deref(), Some("—"));
    }

    #[test]
    fn runs_carry_heap_and_file_in_json() {
        let json = serde_json::to_value(&report().runs).unwrap_or_default();
        assert_eq!(json[0]["peak_heap_mib"], 18.0);
        assert_eq!(json[0]["file_at_peak_heap_mib"], 16.0);
        assert!(json[2]["peak_heap_mib"].is_null());
    }
}
