//! The config read from a file or directory on disk, polled for changes.
//!
//! Every [`POLL_INTERVAL`] what a load reads is hashed, on the blocking pool: the config file,
//! then every file it names (scripts, schema files, `[operator.http] ca_file`), reading through
//! symlinks. Polling catches what file-event APIs miss with a mounted ConfigMap, where kubelet
//! never writes a watched file but atomically swaps the `..data` symlink that the visible names
//! point through. Nothing else in the directory is read: a FIFO there would block the reading
//! thread for good (no later edit reloaded, and shutdown waiting for it), and a large file would
//! be read whole every poll. Named files are read as a load reads them
//! ([`crate::config::files::read_regular`]: regular files of at most 1 MiB), so a named FIFO or
//! device counts as its error. A change is acted on once the config has held still for one more
//! poll, so a half-written save is not loaded.

use super::{Failures, Publisher};
use crate::config::Files;
use crate::config::files::read_regular;
use crate::operator::Operator;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the config is hashed.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The directory that holds the config at `path` (a file, or a directory holding one).
pub(crate) fn watched_dir(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }
}

/// A hash of what loading the config at `path` (a file, or a directory holding one) reads: the
/// config file's name and text and the name and text of every file it names. What cannot be
/// read counts as its error, so a file appearing or disappearing changes the hash.
pub(crate) fn fingerprint(path: &Path) -> u64 {
    Fingerprinter::default().fingerprint(path)
}

/// Fingerprints a config on disk, poll after poll, remembering which files the config's text
/// names so an unchanged config is not parsed again every poll.
#[derive(Debug, Default)]
pub(crate) struct Fingerprinter {
    /// A hash of the config's text, and the files that text names.
    named: Option<(u64, Vec<PathBuf>)>,
}

impl Fingerprinter {
    /// See [`fingerprint`].
    pub(crate) fn fingerprint(&mut self, path: &Path) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let file = match crate::config::find_config_file(path) {
            Ok(file) => file,
            Err(e) => {
                e.to_string().hash(&mut h);
                return h.finish();
            }
        };
        file.hash(&mut h);
        let text = match read_regular(&file) {
            Ok(text) => text,
            Err(e) => {
                e.to_string().hash(&mut h);
                return h.finish();
            }
        };
        text.hash(&mut h);
        let text_hash = h.finish();
        let named = match &self.named {
            Some((seen, named)) if *seen == text_hash => named,
            _ => {
                // A config that does not parse names nothing; its text alone says when it changes.
                let named = crate::config::parse(&file, &text)
                    .map(|m| m.named_files())
                    .unwrap_or_default();
                &self.named.insert((text_hash, named)).1
            }
        };
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        for rel in named {
            rel.hash(&mut h);
            match Files::Disk.read(&base, rel) {
                Ok(text) => text.hash(&mut h),
                Err(e) => e.to_string().hash(&mut h),
            }
        }
        h.finish()
    }
}

/// Polls the config at `path` until `shutdown`, publishing every new version that loads to
/// `tx` (the daemon's controllers and the webhook server follow it). `current` is the
/// fingerprint of the version already running.
pub(crate) async fn watch(
    path: PathBuf,
    current: u64,
    tx: Publisher,
    failures: Failures,
    shutdown: CancellationToken,
) {
    let root = watched_dir(&path);
    tracing::info!(dir = %root.display(), interval = ?POLL_INTERVAL, "watching the config for changes");
    let mut settle = Settle::new(current);
    let mut fingerprinter = Some(Fingerprinter::default());
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let (p, mut f) = (path.clone(), fingerprinter.take().unwrap_or_default());
        let hashed = tokio::task::spawn_blocking(move || (f.fingerprint(&p), f));
        // Shutdown does not wait for a slow disk.
        let hashed = tokio::select! {
            h = hashed => h,
            () = shutdown.cancelled() => return,
        };
        let Ok((now, f)) = hashed else {
            continue;
        };
        fingerprinter = Some(f);
        if !settle.ready(now) {
            continue;
        }
        tracing::info!(dir = %root.display(), "config changed; reloading");
        let p = path.clone();
        let loaded = tokio::task::spawn_blocking(move || Operator::load(&p));
        let loaded = tokio::select! {
            l = loaded => l,
            () = shutdown.cancelled() => return,
        };
        match loaded {
            Ok(Ok(op)) => {
                tx.send_replace(Some(Arc::new(op)));
            }
            Ok(Err(e)) => failures.report(&e.to_string()).await,
            Err(e) => {
                failures
                    .report(&format!("loading the config panicked: {e}"))
                    .await
            }
        }
    }
}

/// Decides from successive fingerprints of the directory when to load it: once it has held
/// still for a poll (a `kubectl cp` or an editor's save in several writes is loaded once, whole),
/// and only a version not tried yet (one that failed to load is reported once, not every poll).
#[derive(Debug)]
struct Settle {
    tried: u64,
    seen: u64,
}

impl Settle {
    /// Starts from the running version's fingerprint.
    fn new(current: u64) -> Self {
        Settle {
            tried: current,
            seen: current,
        }
    }

    /// Whether the directory, fingerprinted `now`, should be loaded.
    fn ready(&mut self, now: u64) -> bool {
        let settled = now == self.seen;
        self.seen = now;
        if !settled || now == self.tried {
            return false;
        }
        self.tried = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_change_is_loaded_once_after_it_held_still_for_a_poll() {
        let mut s = Settle::new(1);
        assert!(!s.ready(1), "the running version is not reloaded");
        assert!(!s.ready(2), "a change still being written waits a poll");
        assert!(!s.ready(3), "a change that keeps changing keeps waiting");
        assert!(s.ready(3), "held still for a poll: loaded");
        assert!(!s.ready(3), "and loaded once, even if it failed to load");
        // Back to an earlier version: that is a change too.
        assert!(!s.ready(1));
        assert!(s.ready(1));
    }

    #[tokio::test(start_paused = true)]
    async fn the_watch_loads_an_edited_config_once_after_it_settles() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.toml");
        std::fs::write(&file, "[operator]\nname = \"a\"\n").unwrap();
        let (tx, mut versions) = crate::reload::versions();
        let failures = crate::reload::Failures { event: None };
        let stop = CancellationToken::new();
        let current = fingerprint(dir.path());
        let task = tokio::spawn(watch(
            dir.path().into(),
            current,
            tx,
            failures,
            stop.clone(),
        ));
        // Two polls see nothing new.
        tokio::time::sleep(POLL_INTERVAL * 2).await;
        assert!(!versions.has_changed().unwrap());
        std::fs::write(&file, "[operator]\nname = \"b\"\n").unwrap();
        tokio::time::timeout(POLL_INTERVAL * 4, versions.changed())
            .await
            .expect("the edit was not loaded within two polls")
            .unwrap();
        let loaded = versions.borrow_and_update().clone().unwrap();
        assert_eq!(loaded.config.model.operator.name, "b");
        // Nothing more while the directory stays as it is.
        tokio::time::sleep(POLL_INTERVAL * 3).await;
        assert!(!versions.has_changed().unwrap());
        stop.cancel();
        task.await.unwrap();
    }

    /// A config naming one script, `scripts/x.rhai`.
    const NAMES_X: &str = "[[controller]]\nfor = \"v1/ConfigMap\"\nscript = \"scripts/x.rhai\"\n";

    #[test]
    fn fingerprint_changes_with_the_config_and_the_files_it_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("operator.toml"), "a").unwrap();
        let first = fingerprint(d);
        assert_eq!(fingerprint(d), first, "unchanged config hashed differently");
        std::fs::write(d.join("operator.toml"), NAMES_X).unwrap();
        let second = fingerprint(d);
        assert_ne!(second, first);
        std::fs::create_dir(d.join("scripts")).unwrap();
        std::fs::write(d.join("scripts/x.rhai"), "").unwrap();
        let third = fingerprint(d);
        assert_ne!(third, second, "the named script appeared");
        std::fs::write(d.join("scripts/x.rhai"), "fn reconcile(o, c) {}").unwrap();
        let fourth = fingerprint(d);
        assert_ne!(fourth, third, "the named script changed");
        std::fs::write(d.join("scripts/other.rhai"), "x").unwrap();
        std::fs::write(d.join("notes.txt"), "x").unwrap();
        assert_eq!(fingerprint(d), fourth, "files the config does not name");
        // The same config as a file rather than a directory.
        let mut f = Fingerprinter::default();
        assert_eq!(f.fingerprint(&d.join("operator.toml")), fourth);
        assert_eq!(f.fingerprint(&d.join("operator.toml")), fourth, "cached");
    }

    /// `fingerprint(dir)` on a thread of its own; panics if it takes more than 5 s (blocked).
    fn fingerprint_in_time(dir: &Path) -> u64 {
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.to_path_buf();
        std::thread::spawn(move || tx.send(fingerprint(&d)));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("fingerprinting the config blocked")
    }

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(made.success());
    }

    #[test]
    fn a_fifo_or_a_large_file_beside_the_config_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("operator.toml"), NAMES_X).unwrap();
        let before = fingerprint_in_time(d);
        mkfifo(&d.join("pipe"));
        // Sparse: 200 MB that a read would have to go through, in no disk space.
        let big = std::fs::File::create(d.join("big.bin")).unwrap();
        big.set_len(200 << 20).unwrap();
        assert_eq!(fingerprint_in_time(d), before);
    }

    #[test]
    fn a_named_fifo_or_device_counts_as_its_error_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("scripts")).unwrap();
        std::fs::write(d.join("operator.toml"), NAMES_X).unwrap();
        let missing = fingerprint_in_time(d);
        mkfifo(&d.join("scripts/x.rhai"));
        let fifo = fingerprint_in_time(d);
        assert_ne!(fifo, missing);
        std::fs::remove_file(d.join("scripts/x.rhai")).unwrap();
        symlink("/dev/zero", d.join("scripts/x.rhai")).unwrap();
        assert_ne!(fingerprint_in_time(d), fifo);
        // The config itself a FIFO.
        std::fs::remove_file(d.join("operator.toml")).unwrap();
        mkfifo(&d.join("operator.toml"));
        fingerprint_in_time(&d.join("operator.toml"));
    }

    #[tokio::test]
    async fn a_fifo_in_the_directory_blocks_neither_reload_nor_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.toml");
        std::fs::write(&file, "[operator]\nname = \"a\"\n").unwrap();
        mkfifo(&dir.path().join("fifo"));
        let (tx, mut versions) = crate::reload::versions();
        let failures = crate::reload::Failures { event: None };
        let stop = CancellationToken::new();
        let current = fingerprint_in_time(dir.path());
        let task = tokio::spawn(watch(
            dir.path().into(),
            current,
            tx,
            failures,
            stop.clone(),
        ));
        std::fs::write(&file, "[operator]\nname = \"b\"\n").unwrap();
        tokio::time::timeout(Duration::from_secs(10), versions.changed())
            .await
            .expect("an edit beside a FIFO was not reloaded")
            .unwrap();
        let loaded = versions.borrow_and_update().clone().unwrap();
        assert_eq!(loaded.config.model.operator.name, "b");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the watch did not stop")
            .unwrap();
    }

    #[test]
    fn fingerprint_sees_a_configmap_style_data_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("..2026_01")).unwrap();
        std::fs::write(d.join("..2026_01/operator.toml"), NAMES_X).unwrap();
        std::fs::write(d.join("..2026_01/scripts__x.rhai"), "old").unwrap();
        symlink("..2026_01", d.join("..data")).unwrap();
        symlink("..data/operator.toml", d.join("operator.toml")).unwrap();
        symlink("..data/scripts__x.rhai", d.join("scripts__x.rhai")).unwrap();
        let before = fingerprint(d);
        std::fs::create_dir(d.join("..2026_02")).unwrap();
        std::fs::write(d.join("..2026_02/operator.toml"), NAMES_X).unwrap();
        std::fs::write(d.join("..2026_02/scripts__x.rhai"), "new").unwrap();
        symlink("..2026_02", d.join("..data_tmp")).unwrap();
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        assert_ne!(fingerprint(d), before);
    }

    #[test]
    fn the_watched_dir_of_a_file_is_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.toml");
        std::fs::write(&file, "").unwrap();
        assert_eq!(watched_dir(&file), dir.path());
        assert_eq!(watched_dir(dir.path()), dir.path());
        assert_eq!(watched_dir(Path::new("operator.toml")), Path::new("."));
    }
}
