//! Starting, watching and stopping a contender's operator process, and reading its peak memory
//! and CPU time from /proc.

use crate::cli::{Args, Contender};
use crate::memory::Sampler;
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::watch;

/// How long a contender gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Why a contender cannot run in this invocation, or the command that runs it.
pub enum Launch {
    Skip(String),
    Run(tokio::process::Command),
    /// The floor: no process at all.
    Nothing,
}

/// The command for `contender`, or why it is skipped (a binary that is not built).
pub fn launch(contender: Contender, args: &Args) -> Launch {
    let cmd = match contender {
        Contender::Floor => return Launch::Nothing,
        Contender::Khai => khai(&args.khai_bin, args),
        Contender::KhaiBase => khai(&args.khai_base_bin, args),
        Contender::KubeRs => {
            let mut c = tokio::process::Command::new(&args.kube_rs_bin);
            // Its `reconciled` line at info, as khai's; everything else at its default, warn.
            c.env("RUST_LOG", "warn,kube_rs_baseline=info");
            (c, args.kube_rs_bin.clone())
        }
        Contender::ControllerRuntime => {
            // Kubebuilder's scaffold logger (zap in development mode: console lines on stderr,
            // never sampled) at info, as khai and kube-rs run: one `reconciled` line per
            // finished reconcile; metrics and probes off, as the scaffold leaves them.
            let mut c = tokio::process::Command::new(&args.controller_runtime_bin);
            c.arg("--zap-log-level=info");
            (c, args.controller_runtime_bin.clone())
        }
        Contender::Kopf => {
            let Some(kopf) = &args.kopf_bin else {
                return Launch::Skip("no --kopf-bin given".into());
            };
            let mut c = tokio::process::Command::new(kopf);
            c.args(["run", "--standalone", "--all-namespaces"])
                .arg(&args.kopf_script)
                .env("PYTHONUNBUFFERED", "1");
            (c, kopf.clone())
        }
    };
    let (command, bin) = cmd;
    if !is_executable(&bin) {
        return Launch::Skip(format!("{} is not built", bin.display()));
    }
    Launch::Run(command)
}

/// `khai run` of the binary `bin` on the bench config.
fn khai(bin: &Path, args: &Args) -> (tokio::process::Command, PathBuf) {
    let mut c = tokio::process::Command::new(bin);
    c.arg("run")
        .arg("--config")
        .arg(&args.khai_config)
        // Any free port: contenders run one after another and must not clash.
        .args(["--metrics-bind", "127.0.0.1:0"])
        // One `reconciled` line per finished reconcile: the restart phase counts them.
        .args(["--log-level", "info"])
        .env_remove("RUST_LOG");
    (c, bin.to_path_buf())
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// A running operator. Its exit is noticed at once, so a crash fails the phase instead of
/// waiting for the phase timeout.
pub struct Process {
    pid: u32,
    log: PathBuf,
    exited: watch::Receiver<Option<String>>,
    /// Its heap and file-backed memory, once [`Process::sample_memory`] started sampling; the
    /// sampling ends when the process does or when this is dropped (with the process, by
    /// [`Process::stop`]).
    memory: Option<Sampler>,
}

impl Process {
    /// Starts `command` with stdout and stderr to `log`.
    pub fn spawn(mut command: tokio::process::Command, log: PathBuf) -> Result<Process> {
        let file = std::fs::File::create(&log)
            .with_context(|| format!("creating the log file {}", log.display()))?;
        let err = file.try_clone().context("duplicating the log file")?;
        let mut child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("the contender exited at once"))?;
        let (tx, exited) = watch::channel(None);
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("unknown status ({e})"),
            };
            let _ = tx.send(Some(status));
        });
        Ok(Process {
            pid,
            log,
            exited,
            memory: None,
        })
    }

    /// Samples its memory from now until it is stopped.
    pub fn sample_memory(mut self) -> Process {
        self.memory = Some(Sampler::start(self.pid));
        self
    }

    pub fn memory(&self) -> Option<&Sampler> {
        self.memory.as_ref()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// A handle that notices the exit without borrowing the process.
    pub fn exit(&self) -> Exit {
        Exit {
            exited: self.exited.clone(),
            log: self.log.clone(),
        }
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`].
    pub async fn stop(self) -> Result<()> {
        if self.exited.borrow().is_some() {
            return Ok(());
        }
        // std has no signal API and this crate forbids unsafe code: kill(1) sends SIGTERM.
        let status = tokio::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await
            .context("running kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.pid);
        }
        let mut rx = self.exited.clone();
        if tokio::time::timeout(STOP_GRACE, rx.wait_for(Option::is_some))
            .await
            .is_err()
        {
            let _ = tokio::process::Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status()
                .await;
            bail!("did not exit within {STOP_GRACE:?} of SIGTERM; killed");
        }
        Ok(())
    }
}

/// Watches one process for its exit.
pub struct Exit {
    exited: watch::Receiver<Option<String>>,
    log: PathBuf,
}

impl Exit {
    /// Resolves (with a description) when the process has exited; never while it runs.
    pub async fn died(mut self) -> anyhow::Error {
        let status = match self.exited.wait_for(Option::is_some).await {
            Ok(s) => s.clone().unwrap_or_default(),
            Err(_) => "unknown status".into(),
        };
        anyhow!(
            "the operator exited ({status}); last lines of {}:\n{}",
            self.log.display(),
            tail(&self.log, 15)
        )
    }
}

/// The last `n` lines of a file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Resource use of a process so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Peak resident set size (VmHWM), bytes.
    pub peak_rss: u64,
    /// User plus system CPU time, seconds.
    pub cpu: f64,
}

/// Reads VmHWM from /proc/<pid>/status and utime+stime from /proc/<pid>/stat.
pub fn usage(pid: u32, clock_ticks: f64) -> Result<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmHWM in /proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok(Usage {
        peak_rss: peak_kib * 1024,
        cpu: cpu_ticks(&stat)? as f64 / clock_ticks,
    })
}

/// utime + stime: fields 14 and 15 of /proc/<pid>/stat. The command name (field 2) may hold
/// spaces, so fields are counted from after its closing parenthesis (field 3 is index 0).
fn cpu_ticks(stat: &str) -> Result<u64> {
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("malformed /proc stat line"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("malformed /proc stat line: field {}", i + 3))
    };
    Ok(field(11)? + field(12)?)
}

/// Clock ticks per second for /proc times (`getconf CLK_TCK`; 100 on every Linux we know).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_skip_a_command_name_with_spaces() {
        let stat = "42 (kopf run x) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_ticks(stat).ok(), Some(300));
    }

    #[test]
    fn usage_of_this_process_is_readable() {
        let u = usage(std::process::id(), clock_ticks());
        assert!(u.is_ok_and(|u| u.peak_rss > 0));
    }
}
