//! The config read from a file or directory on disk, polled for changes.
//!
//! Every [`POLL_INTERVAL`] the content of every file under the directory is hashed (reading
//! through symlinks), on the blocking pool. Polling catches what file-event APIs miss with a
//! mounted ConfigMap, where kubelet never writes a watched file but atomically swaps the `..data`
//! symlink that the visible names point through. Entries whose names start with `.` are skipped
//! as names (kubelet's `..data` and `..<timestamp>` directories, editor swap files); their
//! content still counts through the visible symlinks. A change is acted on once the directory
//! has held still for one more poll, so a half-written save is not loaded.

use super::{Failures, Publisher};
use crate::operator::Operator;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the config directory is hashed.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How deep below the config directory files are hashed.
const MAX_DEPTH: usize = 4;

/// How many files are hashed at most, so pointing `--config` at a large tree stays cheap.
const MAX_FILES: usize = 2_000;

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

/// A hash of the name and content of every file under `root`, following symlinks. Unreadable
/// entries count as their error, so a file appearing or disappearing changes the hash.
pub(crate) fn fingerprint(root: &Path) -> u64 {
    let mut files = Vec::new();
    collect(root, Path::new(""), 0, &mut files);
    files.sort();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for rel in &files {
        rel.hash(&mut h);
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => bytes.hash(&mut h),
            Err(e) => e.kind().to_string().hash(&mut h),
        }
    }
    h.finish()
}

fn collect(root: &Path, rel: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_FILES {
            return;
        }
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let rel = rel.join(&name);
        // `metadata` follows symlinks: a ConfigMap key is a symlink to `..data/<key>`.
        match std::fs::metadata(root.join(&rel)) {
            Ok(m) if m.is_dir() => {
                if depth < MAX_DEPTH {
                    collect(root, &rel, depth + 1, out);
                }
            }
            _ => out.push(rel),
        }
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
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let r = root.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || fingerprint(&r)).await else {
            continue;
        };
        if !settle.ready(now) {
            continue;
        }
        tracing::info!(dir = %root.display(), "config changed; reloading");
        let p = path.clone();
        let loaded = tokio::task::spawn_blocking(move || Operator::load(&p)).await;
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

    #[test]
    fn fingerprint_changes_with_content_and_with_new_files_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("operator.toml"), "a").unwrap();
        let first = fingerprint(dir.path());
        assert_eq!(
            fingerprint(dir.path()),
            first,
            "unchanged directory hashed differently"
        );
        std::fs::write(dir.path().join("operator.toml"), "b").unwrap();
        let second = fingerprint(dir.path());
        assert_ne!(second, first);
        std::fs::create_dir(dir.path().join("scripts")).unwrap();
        std::fs::write(dir.path().join("scripts/x.rhai"), "").unwrap();
        assert_ne!(fingerprint(dir.path()), second);
    }

    #[test]
    fn fingerprint_sees_a_configmap_style_data_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("..2026_01")).unwrap();
        std::fs::write(d.join("..2026_01/operator.toml"), "old").unwrap();
        symlink("..2026_01", d.join("..data")).unwrap();
        symlink("..data/operator.toml", d.join("operator.toml")).unwrap();
        let before = fingerprint(d);
        std::fs::create_dir(d.join("..2026_02")).unwrap();
        std::fs::write(d.join("..2026_02/operator.toml"), "new").unwrap();
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
