//! The restart phase: stop the operator, start it again over the n Caches it already reconciled,
//! and measure how long until it has confirmed every one of them, what it wrote meanwhile (a
//! correct operator writes nothing: nothing changed), its CPU time and its peak memory.
//!
//! "Confirmed" means the same for every contender: the operator finished a reconcile of that
//! Cache in its new life, as its own log says. khai and the kube-rs baseline log one
//! `reconciled` line per finished reconcile at info (tracing's format, with `name=<Cache>`), the
//! controller-runtime baseline the same line through zap (`\treconciled\t`, then `"name"`);
//! Kopf logs `[<ns>/<name>] Handler '…' succeeded.` when its resume handler has run. The driver
//! reads the new log as it grows; the time is taken when the last Cache's line is seen.

use crate::cli::Contender;
use crate::run::{Guard, Meter, PhaseCost, Settings, mib};
use crate::workload::{OBJECT_PREFIX, Workload};
use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the new log is read for confirmations; the resolution of [`Restart::confirmed_s`].
const POLL: Duration = Duration::from_millis(20);

/// What the restart phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct Restart {
    /// The new process started → its log confirmed the last of the n Caches.
    pub confirmed_s: f64,
    /// Writes from just before the stop until they settled after every Cache was confirmed, and
    /// the new process's CPU seconds over that span (start-up included).
    pub cost: PhaseCost,
    /// Peak RSS (VmHWM) of the new process once every Cache was confirmed, MiB.
    pub peak_rss_mib: Option<f64>,
}

/// (d) Restarts the operator in `guard`; None for the floor, which has no process.
pub async fn phase(
    settings: &Settings<'_>,
    contender: Contender,
    n: usize,
    rep: usize,
    wl: &Workload,
    guard: &Guard,
    meter: &mut Meter<'_>,
) -> Result<Option<Restart>> {
    let Some(old) = guard.take() else {
        return Ok(None);
    };
    old.stop()
        .await
        .context("stopping the operator for the restart")?;
    let started = Instant::now();
    let new = match settings.spawn(contender, n, rep, "-restart") {
        Ok(Ok(Some(p))) => p,
        Ok(Err(e)) => return Err(e.context("starting the operator again")),
        Ok(Ok(None)) | Err(_) => return Err(anyhow!("the operator cannot be started again")),
    };
    let log = new.log().to_path_buf();
    guard.put(new);
    meter.restarted();
    let timeout = settings.args.phase_timeout;
    let confirmed = guard
        .watch(wait_confirmed(&log, contender, n, timeout))
        .await?;
    let cost = meter.close(wl).await?;
    let peak = guard.usage(settings.clock_ticks)?.map(|u| mib(u.peak_rss));
    Ok(Some(Restart {
        confirmed_s: confirmed.saturating_duration_since(started).as_secs_f64(),
        cost,
        peak_rss_mib: peak,
    }))
}

/// Reads `log` as it grows until n benchmark Caches are confirmed; returns when the last was.
async fn wait_confirmed(
    log: &Path,
    contender: Contender,
    n: usize,
    timeout: Duration,
) -> Result<Instant> {
    let mut follow = Follow::default();
    let deadline = Instant::now() + timeout;
    loop {
        follow.read(log, contender)?;
        if follow.names.len() >= n {
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err(anyhow!(
                "timed out after {timeout:?} waiting for the restarted operator to confirm {n} \
                 Caches ({} confirmed in {})",
                follow.names.len(),
                log.display()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// How far a growing log has been read, and the Caches it confirmed so far (at most the run's n
/// benchmark names, as only those count).
#[derive(Default)]
struct Follow {
    offset: u64,
    partial: String,
    names: HashSet<String>,
}

impl Follow {
    /// Reads what was appended since the last call; a trailing unfinished line waits for the next.
    fn read(&mut self, log: &Path, contender: Contender) -> Result<()> {
        let mut file = std::fs::File::open(log)
            .with_context(|| format!("opening the operator's log {}", log.display()))?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        let read = file
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", log.display()))?;
        self.offset += read as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.partial.rfind('\n') else {
            return Ok(());
        };
        let complete: String = self.partial.drain(..=end).collect();
        for line in complete.lines() {
            let line = strip_colours(line);
            if let Some(name) = confirmed_name(&line, contender)
                && name.starts_with(OBJECT_PREFIX)
            {
                self.names.insert(name.to_string());
            }
        }
        Ok(())
    }
}

/// `line` without ANSI colour sequences (`ESC [ … m`), which a logger may write even to a file.
fn strip_colours(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('\u{1b}') {
        return line.into();
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip to the sequence's final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// The Cache a log line says the operator finished reconciling, if it says so.
fn confirmed_name(line: &str, contender: Contender) -> Option<&str> {
    match contender {
        Contender::Khai | Contender::KhaiBase | Contender::KubeRs => {
            // tracing's text format: `… target: reconciled field=…`, the object's name among
            // the span's or the event's fields.
            let (_, fields) = line.split_once(": reconciled")?;
            if !(fields.is_empty() || fields.starts_with(' ')) {
                return None;
            }
            line.split([' ', '{', '}', ':'])
                .find_map(|t| t.strip_prefix("name="))
        }
        Contender::ControllerRuntime => {
            // zap's console line, as Kubebuilder's scaffold logs (development mode, never
            // sampled): `<time>\tINFO\treconciled\t{"controller": "cache", …,
            // "Cache": {"name":"c-00007","namespace":"…"}, "namespace": "…", "name": "c-00007", …}`.
            if !line.contains("\treconciled\t") {
                return None;
            }
            let (_, rest) = line.split_once(r#""name":"#)?;
            let rest = rest.trim_start().strip_prefix('"')?;
            rest.split_once('"').map(|(name, _)| name)
        }
        Contender::Kopf => {
            // `[date] kopf.objects [INFO ] [ns/name] Handler 'ensure_configmap' succeeded.`
            if !(line.contains("Handler '") && line.ends_with("succeeded.")) {
                return None;
            }
            let (_, object) = line.split_once("] [")?;
            let (object, _) = object.split_once(']')?;
            object.split_once('/').map(|(_, name)| name)
        }
        Contender::Floor => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_runtime_reconciled_lines_name_their_cache() {
        let console = "2026-11-26T18:27:00Z\tINFO\treconciled\t{\"controller\": \"cache\", \
                       \"controllerGroup\": \"bench.khai.dev\", \"controllerKind\": \"Cache\", \
                       \"Cache\": {\"name\":\"c-00012\",\"namespace\":\"t1\"}, \"namespace\": \"t1\", \
                       \"name\": \"c-00012\", \"reconcileID\": \"b25c\"}";
        assert_eq!(
            confirmed_name(console, Contender::ControllerRuntime),
            Some("c-00012")
        );
        let workers = "2026-11-26T18:27:00Z\tINFO\tStarting workers\t{\"controller\": \"cache\", \
                       \"worker count\": 1}";
        assert_eq!(confirmed_name(workers, Contender::ControllerRuntime), None);
    }

    #[test]
    fn khai_and_kube_rs_reconciled_lines_name_their_cache() {
        let khai = "2026-11-25T14:01:02.123456Z  INFO reconcile{controller=cache kind=Cache \
                    namespace=bench-khai name=c-00007 uid=1b2c}: khai::controller::reconcile: \
                    reconciled applied=0 unchanged=1 pruned=0 status_written=false";
        assert_eq!(confirmed_name(khai, Contender::Khai), Some("c-00007"));
        let kube_rs = "2026-11-25T14:01:02.123456Z  INFO kube_rs_baseline::reconcile: \
                       reconciled ns=bench-kube-rs name=c-00008";
        assert_eq!(confirmed_name(kube_rs, Contender::KubeRs), Some("c-00008"));
    }

    #[test]
    fn coloured_lines_are_read_without_their_colours() {
        let line = "\u{1b}[2m2026-11-25T14:10:40.108389Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \
                    \u{1b}[2mkube_rs_baseline::reconcile\u{1b}[0m\u{1b}[2m:\u{1b}[0m reconciled \
                    \u{1b}[3mname\u{1b}[0m\u{1b}[2m=\u{1b}[0mc-00017";
        let plain = strip_colours(line);
        assert_eq!(confirmed_name(&plain, Contender::KubeRs), Some("c-00017"));
    }

    #[test]
    fn other_lines_confirm_nothing() {
        let applying = "2026-11-25T14:01:02Z DEBUG kube_rs_baseline::reconcile: applying \
                        ConfigMap ns=x name=c-00001-config";
        assert_eq!(confirmed_name(applying, Contender::KubeRs), None);
        let failed = "2026-11-25T14:01:02Z  WARN reconcile{name=c-00001}: khai: reconciled_badly";
        assert_eq!(confirmed_name(failed, Contender::Khai), None);
        assert_eq!(
            confirmed_name("reconciled name=c-1", Contender::Floor),
            None
        );
    }

    #[test]
    fn kopf_handler_success_names_its_cache() {
        let line = "[2026-11-25 14:01:02,123] kopf.objects         [INFO    ] [bench-kopf/c-00009] \
                    Handler 'ensure_configmap' succeeded.";
        assert_eq!(confirmed_name(line, Contender::Kopf), Some("c-00009"));
        let resumed = "[2026-11-25 14:01:02,123] kopf.objects [INFO    ] [bench-kopf/c-00009] \
                       Resuming is processed: 1 succeeded; 0 failed.";
        assert_eq!(confirmed_name(resumed, Contender::Kopf), None);
    }

    #[test]
    fn a_growing_log_is_read_once_and_partial_lines_wait() {
        let dir = std::env::temp_dir().join(format!("khai-bench-restart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let log = dir.join("khai.log");
        let line = |name: &str| format!("t  INFO reconcile{{name={name}}}: k: reconciled\n");
        std::fs::write(
            &log,
            format!("{}{}", line("c-00000"), "t  INFO reconcile{name=c-0"),
        )
        .ok();
        let mut follow = Follow::default();
        assert!(follow.read(&log, Contender::Khai).is_ok());
        assert_eq!(follow.names.len(), 1);
        let rest = format!(
            "0001}}: k: reconciled\n{}{}",
            line("c-00000"),
            line("warmup")
        );
        let mut text = std::fs::read_to_string(&log).unwrap_or_default();
        text.push_str(&rest);
        std::fs::write(&log, text).ok();
        assert!(follow.read(&log, Contender::Khai).is_ok());
        let mut names: Vec<&String> = follow.names.iter().collect();
        names.sort();
        assert_eq!(names, ["c-00000", "c-00001"]);
        std::fs::remove_dir_all(&dir).ok();
    }
}
