//! Where a config's files are read from: a directory on disk, or files held in memory (the keys
//! of a ConfigMap read through the API).
//!
//! Paths written in the config (`script`, `schema_file`) are relative to the config file. A
//! ConfigMap key cannot hold `/`, so a file `scripts/x.rhai` is stored under the key
//! `scripts__x.rhai`; both sources find it under either name, so a whole ConfigMap mounted as a
//! directory (keys as flat file names) loads the same as one read through the API.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// What a `/` in a file's path becomes in a ConfigMap key.
pub const KEY_SEPARATOR: &str = "__";

/// The ConfigMap key of the file at `path` (relative, `/`-separated).
pub fn key_of(path: &str) -> String {
    path.replace('/', KEY_SEPARATOR)
}

/// The file path a ConfigMap key stands for.
pub fn path_of(key: &str) -> String {
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
    pub fn from_keys(data: impl IntoIterator<Item = (String, String)>) -> Self {
        Files::Memory(Arc::new(
            data.into_iter().map(|(k, v)| (path_of(&k), v)).collect(),
        ))
    }

    /// The text of the file at `rel` (relative to `base_dir`, the config file's directory).
    pub fn read(&self, base_dir: &Path, rel: &Path) -> std::io::Result<String> {
        match self {
            Files::Disk => {
                let full = base_dir.join(rel);
                match std::fs::read_to_string(&full) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        // A flat ConfigMap mount holds `scripts__x.rhai` for `scripts/x.rhai`.
                        let Some(rel) = normalise(rel).filter(|r| r.contains('/')) else {
                            return Err(e);
                        };
                        std::fs::read_to_string(base_dir.join(key_of(&rel))).map_err(|_| e)
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
pub fn display_root(namespace: &str, name: &str) -> PathBuf {
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
