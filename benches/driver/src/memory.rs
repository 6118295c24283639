//! An operator's heap and file-backed memory over its life. Peak RSS (`VmHWM`) counts the pages
//! mapped from the operator's own executable (its code: shared, clean page cache the kernel can
//! drop and read again) together with its heap, so a large binary looks like a large heap. A
//! [`Sampler`] reads `RssAnon` (heap, stacks) and `RssFile` (file-backed pages, mostly the
//! binary's code) from /proc/<pid>/status every 100 ms and keeps the sample with the most heap.

use anyhow::{Context, Result, anyhow};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often a [`Sampler`] reads /proc/<pid>/status.
const EVERY: Duration = Duration::from_millis(100);

/// Resident memory of a process at one moment, bytes. Ordered by heap first, so the larger of
/// two samples is the one with more heap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Memory {
    /// `RssAnon`: anonymous pages, what grows with the objects the operator holds.
    pub anon: u64,
    /// `RssFile`: file-backed pages, mostly the executable's code and its shared libraries.
    pub file: u64,
}

/// `RssAnon` and `RssFile` from the text of /proc/<pid>/status; None when either is missing (a
/// zombie's status has neither).
fn parse(status: &str) -> Option<Memory> {
    let kib = |key: &str| -> Option<u64> {
        let value = status.lines().find_map(|l| l.strip_prefix(key))?;
        value.trim().trim_end_matches("kB").trim().parse().ok()
    };
    Some(Memory {
        anon: kib("RssAnon:")? * 1024,
        file: kib("RssFile:")? * 1024,
    })
}

/// The memory of process `pid` now.
pub fn read(pid: u32) -> Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse(&status).ok_or_else(|| anyhow!("no RssAnon or RssFile in /proc/{pid}/status"))
}

/// A background task that samples one process's memory until the sampler is dropped or the
/// process is gone, whichever comes first.
pub struct Sampler {
    pid: u32,
    peak: Arc<Mutex<Memory>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    /// Starts sampling `pid`; needs a tokio runtime.
    pub fn start(pid: u32) -> Sampler {
        let peak = Arc::new(Mutex::new(Memory::default()));
        let shared = Arc::clone(&peak);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            loop {
                tick.tick().await;
                // An unreadable status means the process is gone: sampling ends quietly.
                let Ok(now) = read(pid) else { break };
                observe(&shared, now);
            }
        });
        Sampler { pid, peak, task }
    }

    /// The sample with the most heap so far, this moment's included.
    pub fn peak(&self) -> Result<Memory> {
        Ok(observe(&self.peak, read(self.pid)?))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps `now` if it has more heap than the peak so far; returns the peak.
fn observe(peak: &Mutex<Memory>, now: Memory) -> Memory {
    let mut peak = peak.lock().unwrap_or_else(PoisonError::into_inner);
    *peak = (*peak).max(now);
    *peak
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tkhai\nState:\tS (sleeping)\nVmPeak:\t  120000 kB\n\
                          VmHWM:\t   34816 kB\nVmRSS:\t   30000 kB\nRssAnon:\t   18739 kB\n\
                          RssFile:\t   15974 kB\nRssShmem:\t       0 kB\nThreads:\t3\n";

    #[test]
    fn rss_anon_and_rss_file_are_read_from_a_status_text() {
        assert_eq!(
            parse(STATUS),
            Some(Memory {
                anon: 18739 * 1024,
                file: 15974 * 1024,
            })
        );
        let zombie = "Name:\tkhai\nState:\tZ (zombie)\nThreads:\t1\n";
        assert_eq!(parse(zombie), None);
    }

    #[test]
    fn the_peak_is_the_sample_with_the_most_heap_and_its_files() {
        let peak = Mutex::new(Memory::default());
        observe(&peak, Memory { anon: 10, file: 7 });
        observe(&peak, Memory { anon: 20, file: 3 });
        let last = observe(&peak, Memory { anon: 15, file: 9 });
        assert_eq!(last, Memory { anon: 20, file: 3 });
    }

    #[test]
    fn memory_of_this_process_is_readable() {
        let m = read(std::process::id());
        assert!(m.is_ok_and(|m| m.anon > 0 && m.file > 0));
    }

    #[tokio::test]
    async fn a_sampler_reports_this_process_at_once() {
        let sampler = Sampler::start(std::process::id());
        let peak = sampler.peak();
        assert!(peak.is_ok_and(|m| m.anon > 0 && m.file > 0));
    }
}
