//! Where a config's files are read from: a directory on disk, or files held in memory (the keys
//! of a ConfigMap read through the API).
//!
//! Paths written in the config (`script`, `schema_file`) are relative to the config file. A
//! ConfigMap key cannot hold `/`, so a file `scripts/x.rhai` is stored under the key
//! `scripts__x.rhai`; both sources find it under either name, so a whole ConfigMap mounted as a
//! directory (keys as flat file names) loads the same as one read through the API.
//!
//! Every file the config names, and the config file itself, is read from disk by
//! [`read_regular`]: regular files only (through symlinks, as a mounted ConfigMap's `..data`
//! links), at most [`MAX_FILE_BYTES`]. A FIFO would block the reading thread for good (hot
//! reload, then shutdown waiting for it), and `/dev/zero` or a huge file would be read whole.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The most khai reads of a file the config names (a script, a schema file, a CA, certificate
/// or key file) or of the config file itself: 1 MiB, what a whole ConfigMap may hold.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Why a file the config names was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening, inspecting or reading it failed.
    #[error(transparent)]
    Io(std::io::Error),
    /// A FIFO, a device, a socket or a directory.
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// More than [`MAX_FILE_BYTES`].
    #[error(
        "larger than 1 MiB ({MAX_FILE_BYTES} bytes), the most khai reads from a file the config names"
    )]
    TooLarge,
    /// Not UTF-8 text.
    #[error("not UTF-8 text: {0}")]
    NotText(std::string::FromUtf8Error),
}

impl From<ReadError> for std::io::Error {
    /// Keeps an I/O error as it was (a missing file is still `NotFound`); the others carry the
    /// [`ReadError`] as their source.
    fn from(e: ReadError) -> Self {
        use std::io::ErrorKind;
        let kind = match &e {
            ReadError::Io(_) => ErrorKind::Other,
            ReadError::NotRegular(_) => ErrorKind::InvalidInput,
            ReadError::TooLarge => ErrorKind::FileTooLarge,
            ReadError::NotText(_) => ErrorKind::InvalidData,
        };
        match e {
            ReadError::Io(io) => io,
            other => std::io::Error::new(kind, other),
        }
    }
}

/// What kind of file `meta` describes, when it is not a regular file.
fn irregular(meta: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let kind = if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Some(kind)
}

/// Whether the file at `path` (symlinks followed) can be read as a file the config names,
/// without opening it: `Ok` for a regular file within [`MAX_FILE_BYTES`].
pub(crate) fn check_regular(path: &Path) -> Result<(), ReadError> {
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    if let Some(kind) = irregular(&meta) {
        return Err(ReadError::NotRegular(kind));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    Ok(())
}

/// The text of the regular file at `path` (symlinks followed), at most [`MAX_FILE_BYTES`]. Never
/// blocks on a FIFO or reads a device: the type is checked before opening, and the file is
/// opened non-blocking and checked again, in case it was replaced in between.
pub(crate) fn read_regular(path: &Path) -> Result<String, ReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    check_regular(path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if let Some(kind) = irregular(&meta) {
        return Err(ReadError::NotRegular(kind));
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells a file that grew since it was inspected.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    String::from_utf8(bytes).map_err(ReadError::NotText)
}

/// [`read_regular`] with its error as an [`std::io::Error`], for callers that report I/O errors.
pub fn read_file(path: &Path) -> std::io::Result<String> {
    read_regular(path).map_err(Into::into)
}

/// What a `/` in a file's path becomes in a ConfigMap key.
pub(crate) const KEY_SEPARATOR: &str = "__";

/// The ConfigMap key of the file at `path` (relative, `/`-separated).
pub fn key_of(path: &str) -> String {
    path.replace('/', KEY_SEPARATOR)
}

/// The file path a ConfigMap key stands for.
pub(crate) fn path_of(key: &str) -> String {
    key.replace(KEY_SEPARATOR, "/")
}

/// The files of one version of a config.
#[derive(Debug, Clone, Default)]
pub enum Files {
    /// Read from disk when asked, relative to the config's directory.
    #[default]
    Disk,
    /// Held in memory, by `/`-separated path relative to the config file.
    Memory(Arc<BTreeMap<String, String>>),
}

impl Files {
    /// Files from a ConfigMap's `data`: each key is turned back into its path.
    pub(crate) fn from_keys(data: impl IntoIterator<Item = (String, String)>) -> Self {
        Files::Memory(Arc::new(
            data.into_iter().map(|(k, v)| (path_of(&k), v)).collect(),
        ))
    }

    /// Whether the file at `rel` (relative to `base_dir`) can be read, for one that need not
    /// exist yet (a certificate mounted only where khai runs): `Err` when it exists on disk and
    /// is not a regular file within [`MAX_FILE_BYTES`]. An absolute path is on disk whatever the
    /// source; a file held in memory is text within the ConfigMap's limit.
    pub(crate) fn check_kind(&self, base_dir: &Path, rel: &Path) -> Result<(), ReadError> {
        if matches!(self, Files::Memory(_)) && !rel.is_absolute() {
            return Ok(());
        }
        match check_regular(&base_dir.join(rel)) {
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// The text of the file at `rel` (relative to `base_dir`, the config file's directory); on
    /// disk, a regular file of at most [`MAX_FILE_BYTES`] ([`read_regular`]).
    pub fn read(&self, base_dir: &Path, rel: &Path) -> std::io::Result<String> {
        match self {
            Files::Disk => {
                let full = base_dir.join(rel);
                match read_file(&full) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        // A flat ConfigMap mount holds `scripts__x.rhai` for `scripts/x.rhai`.
                        let Some(rel) = normalise(rel).filter(|r| r.contains('/')) else {
                            return Err(e);
                        };
                        read_file(&base_dir.join(key_of(&rel))).map_err(|_| e)
                    }
                    other => other,
                }
            }
            Files::Memory(files) => {
                let path = normalise(rel).ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not in the ConfigMap (only paths relative to the config file are)",
                    )
                })?;
                files.get(&path).cloned().ok_or_else(|| {
                    let msg = format!("not in the ConfigMap (no key {})", key_of(&path));
                    std::io::Error::new(std::io::ErrorKind::NotFound, msg)
                })
            }
        }
    }
}

/// `rel` as a `/`-separated path without `.` segments; `None` for an absolute path or one that
/// climbs out with `..`.
pub(crate) fn normalise(rel: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// The name a config held in memory is shown under in messages: `configmap:NS/NAME`, so an
/// error reads `configmap:ops/khai-cache-config/scripts/cache.rhai:3:5: ...`.
pub(crate) fn display_root(namespace: &str, name: &str) -> PathBuf {
    PathBuf::from(format!("configmap:{namespace}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_paths_map_both_ways() {
        assert_eq!(key_of("scripts/a/b.rhai"), "scripts__a__b.rhai");
        assert_eq!(path_of("scripts__b.rhai"), "scripts/b.rhai");
        assert_eq!(path_of("operator.toml"), "operator.toml");
    }

    #[test]
    fn memory_files_are_found_by_relative_path_only() {
        let files = Files::from_keys([
            ("operator.toml".to_string(), "a".to_string()),
            ("scripts__x.rhai".to_string(), "b".to_string()),
        ]);
        let root = display_root("ns", "cm");
        assert_eq!(files.read(&root, Path::new("scripts/x.rhai")).unwrap(), "b");
        assert_eq!(
            files.read(&root, Path::new("./scripts/x.rhai")).unwrap(),
            "b"
        );
        let missing = files.read(&root, Path::new("scripts/y.rhai")).unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        assert!(files.read(&root, Path::new("../x.rhai")).is_err());
        assert!(files.read(&root, Path::new("/etc/passwd")).is_err());
    }

    /// `read` of `path` fails within a second (on a thread of its own, so a read that blocks
    /// fails the test instead of hanging it), with the message.
    fn refused(path: &Path) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.to_path_buf();
        std::thread::spawn(move || tx.send(read_regular(&p).map(|s| s.len())));
        match rx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(n)) => panic!("{} was read: {n} bytes", path.display()),
            Err(_) => panic!("reading {} blocked", path.display()),
        }
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("script.rhai");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(refused(&fifo), "not a regular file (a FIFO)");
        // Through a symlink, as a ConfigMap mount's names are.
        let link = dir.path().join("link.rhai");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        assert_eq!(refused(&link), "not a regular file (a FIFO)");
        // `Files` reports it with the kind callers check for a missing file.
        let e = Files::Disk
            .read(dir.path(), Path::new("script.rhai"))
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn devices_and_directories_are_refused() {
        assert_eq!(
            refused(Path::new("/dev/zero")),
            "not a regular file (a character device)"
        );
        assert_eq!(
            refused(Path::new("/dev/urandom")),
            "not a regular file (a character device)"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(refused(dir.path()), "not a regular file (a directory)");
    }

    #[test]
    fn a_file_over_1_mib_is_refused_and_one_at_1_mib_read() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        let limit = usize::try_from(MAX_FILE_BYTES).unwrap();
        std::fs::write(&big, "a".repeat(limit + 1)).unwrap();
        assert_eq!(
            refused(&big),
            "larger than 1 MiB (1048576 bytes), the most khai reads from a file the config names"
        );
        let e = Files::Disk
            .read(dir.path(), Path::new("big.json"))
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        std::fs::write(&big, "a".repeat(limit)).unwrap();
        assert_eq!(read_regular(&big).unwrap().len(), limit);
    }

    #[test]
    fn a_symlink_to_a_regular_file_is_read_as_a_configmap_mount_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("..2026_01")).unwrap();
        std::fs::write(d.join("..2026_01/x.rhai"), "fn reconcile(o, c) {}").unwrap();
        std::os::unix::fs::symlink("..2026_01", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/x.rhai", d.join("x.rhai")).unwrap();
        assert_eq!(
            Files::Disk.read(d, Path::new("x.rhai")).unwrap(),
            "fn reconcile(o, c) {}"
        );
        // A missing file is still `NotFound`, and binary content is refused as text.
        let e = Files::Disk.read(d, Path::new("none.rhai")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        std::fs::write(d.join("bin.rhai"), [0xff, 0xfe]).unwrap();
        assert!(refused(&d.join("bin.rhai")).starts_with("not UTF-8 text"));
    }

    #[test]
    fn disk_files_are_found_nested_or_flattened_as_a_configmap_mount_holds_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("scripts")).unwrap();
        std::fs::write(dir.path().join("scripts/nested.rhai"), "n").unwrap();
        std::fs::write(dir.path().join("scripts__flat.rhai"), "f").unwrap();
        let read = |p: &str| Files::Disk.read(dir.path(), Path::new(p));
        assert_eq!(read("scripts/nested.rhai").unwrap(), "n");
        assert_eq!(read("scripts/flat.rhai").unwrap(), "f");
        assert_eq!(
            read("scripts/none.rhai").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }
}
