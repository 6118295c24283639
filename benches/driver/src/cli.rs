//! Command-line flags of the driver. `scripts/bench` fills in the paths; the defaults are what a
//! run from the repository root after `cargo build --release` needs.

use std::path::PathBuf;
use std::time::Duration;

/// One implementation of the cache-bench workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
pub enum Contender {
    /// `khai run` on examples/bench-cache.
    #[value(name = "khai")]
    #[serde(rename = "khai")]
    Khai,
    /// `khai run` of another revision of khai (`--khai-base-bin`; `scripts/bench --base REV`
    /// builds it), on the same config: khai's own regression check, side by side in one run.
    #[value(name = "khai-base")]
    #[serde(rename = "khai-base")]
    KhaiBase,
    /// The hand-written kube-rs controller in benches/kube-rs-baseline.
    #[value(name = "kube-rs")]
    #[serde(rename = "kube-rs")]
    KubeRs,
    /// The Go controller on controller-runtime in benches/controller-runtime-baseline.
    #[value(name = "controller-runtime")]
    #[serde(rename = "controller-runtime")]
    ControllerRuntime,
    /// benches/kopf/cache_operator.py under `kopf run`.
    #[value(name = "kopf")]
    #[serde(rename = "kopf")]
    Kopf,
    /// No operator: the bench client writes the ConfigMap and status itself.
    #[value(name = "floor")]
    #[serde(rename = "floor")]
    Floor,
}

impl Contender {
    pub fn name(self) -> &'static str {
        match self {
            Contender::Khai => "khai",
            Contender::KhaiBase => "khai-base",
            Contender::KubeRs => "kube-rs",
            Contender::ControllerRuntime => "controller-runtime",
            Contender::Kopf => "Kopf",
            Contender::Floor => "floor",
        }
    }
}

/// Which workload the driver runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// cache-bench: create, idle, update and delete Caches (`--n`, `--reps`, `--idle`).
    Cache,
    /// N Tickers whose timer counts its ticks in status, each contender alone for `--duration`.
    Timer,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "khai-bench",
    about = "Runs the cache-bench workload against khai, kube-rs, controller-runtime, Kopf and the API server's floor"
)]
pub struct Args {
    /// The workload (docs/benchmarks.md describes both).
    #[arg(long, value_enum, default_value = "cache")]
    pub workload: Workload,
    /// Timer workload: the timer's interval.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub interval: Duration,
    /// Timer workload: how long each contender runs with its timers.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub duration: Duration,
    /// Object counts, comma-separated; every contender runs every count.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    pub n: Vec<usize>,
    /// Repetitions per contender and count; the report shows medians.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Length of the idle phase (`20s`, `500ms`, `1m`).
    #[arg(long, default_value = "20s", value_parser = duration)]
    pub idle: Duration,
    /// Contenders, run in turn in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "khai,kube-rs,controller-runtime,kopf,floor"
    )]
    pub contenders: Vec<Contender>,
    /// Where the markdown, JSON, chart and contender logs go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// Requests the bench client keeps in flight.
    #[arg(long, default_value_t = 16)]
    pub parallelism: usize,
    /// Longest a phase may take before the run counts as failed.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub phase_timeout: Duration,
    /// Longest a contender may take to reconcile the warm-up object after it starts.
    #[arg(long, default_value = "2m", value_parser = duration)]
    pub startup_timeout: Duration,
    /// The CRD manifest (YAML) every contender shares, from `khai generate crds`.
    #[arg(long)]
    pub crd: PathBuf,
    #[arg(long, default_value = "target/release/khai")]
    pub khai_bin: PathBuf,
    /// The `khai-base` contender's binary: khai built from another revision.
    #[arg(long, default_value = "target/bench-base/khai")]
    pub khai_base_bin: PathBuf,
    #[arg(long, default_value = "examples/bench-cache")]
    pub khai_config: PathBuf,
    #[arg(long, default_value = "target/release/kube-rs-baseline")]
    pub kube_rs_bin: PathBuf,
    /// The Go controller-runtime baseline (scripts/bench builds it with the pinned Go).
    #[arg(long, default_value = "target/go/controller-runtime-baseline")]
    pub controller_runtime_bin: PathBuf,
    /// The `kopf` executable of the Kopf virtualenv.
    #[arg(long)]
    pub kopf_bin: Option<PathBuf>,
    #[arg(long, default_value = "benches/kopf/cache_operator.py")]
    pub kopf_script: PathBuf,
    /// Also replace the results section of this markdown file (docs/benchmarks.md).
    #[arg(long)]
    pub publish: Option<PathBuf>,
    /// The cost curve: also report, per contender and N, CPU per object, peak RSS, RSS per
    /// 1,000 objects above the idle figure, lag and writes, and draw them against N.
    #[arg(long)]
    pub curve: bool,
    /// With `--curve`: Kopf stops at the first N whose run fails or takes longer than this.
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub kopf_limit: Duration,
    /// Exit 1 unless khai and the controller-runtime baseline (each that runs) wrote exactly 2
    /// times per Cache on create and on update and 0 times while idle and on restart (CI's
    /// regression check).
    #[arg(long)]
    pub smoke_check: bool,
    /// Run the cache workload with this many khai shards (`khai run --shards`) beside one khai
    /// replica, and report each side's memory and CPU, the sharder's, and the label writes of
    /// the initial assignment and of one rebalance (shards.md, shards.json).
    #[arg(long)]
    pub shards: Option<usize>,
    /// The command line to print in the report (scripts/bench passes its own).
    #[arg(long, default_value = "khai-bench")]
    pub command: String,
}

/// `20s`, `500ms`, `2m`, or plain seconds.
fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let value: f64 = num.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("unknown unit in {s:?}: use ms, s or m")),
    };
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m"), Ok(Duration::from_secs(60)));
        assert!(duration("1h").is_err());
    }
}
