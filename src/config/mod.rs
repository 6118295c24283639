//! Reads an operator's config (TOML or YAML) into the typed [`Model`], once.
//!
//! `load` accepts a file or a directory holding `operator.toml` / `operator.yaml`;
//! `load_memory` takes the same files held in memory (a ConfigMap's keys, see [`files`]). Parsing keeps
//! positions so that every error names the file, line, column and field path; semantic checks
//! ([`validate`]) run right after and report every problem found, not just the first. Paths in
//! the model (scripts, schema files) are relative to the config file's directory; schema files
//! are read here, once, so nothing downstream touches the file system for them.

pub(crate) mod budget;
pub(crate) mod diag;
pub(crate) mod duration;
mod field_path;
pub mod files;
pub(crate) mod handlers;
pub mod http;
pub(crate) mod kind;
pub mod model;
mod parse;
pub(crate) mod policy;
mod schema_file;
pub(crate) mod selector;
mod validate;
pub(crate) mod versions;
pub(crate) mod webhook;
mod yaml_locate;

pub(crate) use diag::Diagnostic;
pub(crate) use files::Files;
pub(crate) use model::Model;
pub use parse::parse;
pub(crate) use parse::yaml_message;
pub(crate) use validate::MAX_OPERATOR_NAME;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Names tried, in order, when `load` is given a directory.
pub(crate) const CONFIG_FILE_NAMES: [&str; 3] = ["operator.toml", "operator.yaml", "operator.yml"];

/// A loaded, validated operator config.
#[derive(Debug, Clone)]
pub struct Config {
    pub model: Model,
    /// The file the model came from.
    pub file: PathBuf,
    /// Directory that relative paths in the model are resolved against.
    pub(crate) base_dir: PathBuf,
    /// The file's text, kept so later checks (scripts) can point at the line that named them.
    pub source: String,
    /// Where the files the config names (scripts, schema files) are read from.
    pub files: Files,
    /// Which version of its source this is, when the source has versions (the ConfigMap's
    /// resourceVersion).
    pub version: Option<String>,
    /// What may be right but probably is not: `khai check` prints these, `khai run` logs them.
    pub warnings: Vec<Diagnostic>,
}

impl Config {
    /// A diagnostic about the field at `path` in the config: `controller` index `i`, key `key`
    /// becomes `operator.toml:LINE:COL: controller[i].key: message`.
    pub(crate) fn diagnostic_at(
        &self,
        section: &str,
        index: usize,
        key: &str,
        message: String,
    ) -> Diagnostic {
        use field_path::Seg;
        let path = [Seg::Key(section), Seg::Index(index), Seg::Key(key)];
        validate::diagnostic(&self.file, &self.source, &path, message)
    }

    /// A diagnostic about the field at a path of keys, as `operator.startup.function`.
    pub(crate) fn diagnostic_in(&self, keys: &[&str], message: String) -> Diagnostic {
        let path: Vec<_> = keys.iter().map(|k| field_path::Seg::Key(k)).collect();
        validate::diagnostic(&self.file, &self.source, &path, message)
    }

    /// Resolves a path written in the config relative to the config's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        self.base_dir.join(path)
    }

    /// The text of a file the config names (a script), relative to the config's directory.
    pub fn read(&self, path: &Path) -> std::io::Result<String> {
        self.files.read(&self.base_dir, path)
    }
}

/// Everything wrong with a config, each problem located.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError(pub Vec<Diagnostic>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl From<Diagnostic> for ConfigError {
    fn from(d: Diagnostic) -> Self {
        ConfigError(vec![d])
    }
}

/// Loads and validates the config at `path` (a file, or a directory holding one).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = find_config_file(path)?;
    let src = files::read_regular(&file)
        .map_err(|e| Diagnostic::new(&file, format!("cannot read config: {e}")))?;
    let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    finish(file, src, base_dir, Files::Disk, None)
}

/// Loads and validates a config held in memory: `data` maps ConfigMap keys (`operator.toml`,
/// `scripts__x.rhai`) to their text; `root` names the source in messages
/// ([`files::display_root`]); `version` is the source's version (a resourceVersion).
pub fn load_memory(
    root: &Path,
    data: BTreeMap<String, String>,
    version: Option<String>,
) -> Result<Config, ConfigError> {
    let Some(name) = CONFIG_FILE_NAMES.iter().find(|n| data.contains_key(**n)) else {
        return Err(Diagnostic::new(
            root,
            format!(
                "no config file here (looked for the keys {})",
                CONFIG_FILE_NAMES.join(", ")
            ),
        )
        .into());
    };
    let src = data[*name].clone();
    let file = root.join(name);
    finish(
        file,
        src,
        root.to_path_buf(),
        Files::from_keys(data),
        version,
    )
}

fn finish(
    file: PathBuf,
    src: String,
    base_dir: PathBuf,
    files: Files,
    version: Option<String>,
) -> Result<Config, ConfigError> {
    let mut model = parse(&file, &src)?;
    let (mut problems, warnings) = match validate::validate(&model, &file, &src) {
        Ok(warnings) => (Vec::new(), warnings),
        Err(e) => (e.0, Vec::new()),
    };
    problems.extend(schema_file::load_all(
        &mut model, &files, &base_dir, &file, &src,
    ));
    problems.extend(check_file_kinds(&model, &files, &base_dir, &file, &src));
    if !problems.is_empty() {
        return Err(ConfigError(problems));
    }
    Ok(Config {
        model,
        file,
        base_dir,
        source: src,
        files,
        version,
        warnings,
    })
}

/// Files the config names that are read only where khai runs (a certificate mounted from a
/// Secret may not exist where the config is checked), but that must be regular files within
/// [`files::MAX_FILE_BYTES`] when they exist: a FIFO or a device there would block or never end.
fn check_file_kinds(
    model: &Model,
    files: &Files,
    base_dir: &Path,
    file: &Path,
    src: &str,
) -> Vec<Diagnostic> {
    use field_path::Seg;
    let server = &model.webhook_server;
    let named = [
        (
            ["operator", "http", "ca_file"].as_slice(),
            &model.operator.http.ca_file,
        ),
        (
            ["webhook_server", "cert_file"].as_slice(),
            &server.cert_file,
        ),
        (["webhook_server", "key_file"].as_slice(), &server.key_file),
    ];
    let mut problems = Vec::new();
    for (keys, path) in named {
        let Some(rel) = path else { continue };
        if let Err(e) = files.check_kind(base_dir, rel) {
            let at: Vec<Seg> = keys.iter().map(|k| Seg::Key(k)).collect();
            let shown = base_dir.join(rel);
            let message = format!("cannot use {}: {e}", shown.display());
            problems.push(validate::diagnostic(file, src, &at, message));
        }
    }
    problems
}

/// The config file at `path`: `path` itself, or the first of [`CONFIG_FILE_NAMES`] in the
/// directory `path`.
pub(crate) fn find_config_file(path: &Path) -> Result<PathBuf, Diagnostic> {
    if path.is_dir() {
        return CONFIG_FILE_NAMES
            .iter()
            .map(|n| path.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Diagnostic::new(
                    path,
                    format!(
                        "no config file here (looked for {})",
                        CONFIG_FILE_NAMES.join(", ")
                    ),
                )
            });
    }
    if !path.exists() {
        return Err(Diagnostic::new(path, "no such file or directory"));
    }
    Ok(path.to_path_buf())
}

/// Parses and validates config text, touching no file (a `schema_file` is not read): everything
/// [`load`] does to the bytes of a config file. Every problem is a located [`Diagnostic`].
pub fn check_source(file: &Path, src: &str) -> Result<Model, ConfigError> {
    let model = parse(file, src)?;
    validate::validate(&model, file, src)?;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small config every test of this module and its children can start from.
    pub(super) const HELLO: &str = r#"
[operator]
name = "hello"

[[crd]]
group = "examples.khai.dev"
kind = "Hello"
versions = ["v1"]
spec.message = { type = "string", required = true }
spec.replicas = { type = "integer", default = 1, minimum = 0 }
status.phase = { type = "string" }

[[controller]]
for = "Hello"
owns = ["v1/ConfigMap"]
script = "scripts/hello.rhai"
"#;

    #[test]
    fn load_of_a_missing_path_names_it() {
        let err = load(Path::new("/nonexistent/operator.toml")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/nonexistent/operator.toml: no such file or directory"
        );
    }

    #[test]
    fn load_reads_schema_files_relative_to_the_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("schemas")).unwrap();
        std::fs::write(
            dir.path().join("schemas/raw.json"),
            r#"{"type":"object","properties":{"spec":{"type":"object"}}}"#,
        )
        .unwrap();
        let toml = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Raw\"\nversions = [\"v1\"]\nschema_file = \"schemas/raw.json\"\n\n[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Gone\"\nversions = [\"v1\"]\nschema_file = \"schemas/gone.yaml\"\n";
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        let err = load(dir.path()).unwrap_err();
        let file = dir.path().join("operator.toml");
        let gone = dir.path().join("schemas/gone.yaml");
        assert_eq!(
            err.to_string(),
            format!(
                "{}:11:15: crd[1].schema_file: cannot read {}: No such file or directory (os error 2)",
                file.display(),
                gone.display()
            )
        );
        std::fs::write(&file, &toml[..toml.find("\n\n").unwrap()]).unwrap();
        let config = load(dir.path()).unwrap();
        assert_eq!(
            config.model.crds[0].raw_schema.as_ref().unwrap()["properties"]["spec"]["type"],
            "object"
        );
    }

    #[test]
    fn check_refuses_a_ca_file_or_cert_file_that_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let made = std::process::Command::new("mkfifo")
            .arg(d.join("ca.pem"))
            .status()
            .unwrap();
        assert!(made.success());
        let toml = "[operator.http]\nallow = [\"api.example.com\"]\nca_file = \"ca.pem\"\n\n\
                    [webhook_server]\ntls = \"files\"\ncert_file = \"/dev/zero\"\nkey_file = \"tls.key\"\n";
        std::fs::write(d.join("operator.toml"), toml).unwrap();
        let err = load(d).unwrap_err().to_string();
        let file = d.join("operator.toml");
        assert_eq!(
            err,
            format!(
                "{f}:3:11: operator.http.ca_file: cannot use {ca}: not a regular file (a FIFO)\n\
                 {f}:7:13: webhook_server.cert_file: cannot use /dev/zero: not a regular file (a \
                 character device)",
                f = file.display(),
                ca = d.join("ca.pem").display()
            )
        );
        // Missing files are for `khai run` to find: they may be mounted only where it runs.
        std::fs::remove_file(d.join("ca.pem")).unwrap();
        std::fs::write(&file, toml.replace("/dev/zero", "/nonexistent/tls.crt")).unwrap();
        load(d).unwrap();
    }

    #[test]
    fn a_config_file_that_is_a_fifo_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("operator.toml");
        let made = std::process::Command::new("mkfifo")
            .arg(&file)
            .status()
            .unwrap();
        assert!(made.success());
        assert_eq!(
            load(&file).unwrap_err().to_string(),
            format!(
                "{}: cannot read config: not a regular file (a FIFO)",
                file.display()
            )
        );
    }

    #[test]
    fn a_config_in_memory_reads_files_by_configmap_key_and_names_them_in_errors() {
        let root = files::display_root("ops", "cfg");
        let mut data = BTreeMap::from([("operator.toml".to_string(), HELLO.to_string())]);
        let config = load_memory(&root, data.clone(), Some("7".into())).unwrap();
        assert_eq!(config.file, Path::new("configmap:ops/cfg/operator.toml"));
        assert_eq!(config.version.as_deref(), Some("7"));
        let script = Path::new("scripts/hello.rhai");
        assert_eq!(
            config.read(script).unwrap_err().to_string(),
            "not in the ConfigMap (no key scripts__hello.rhai)"
        );
        data.insert("scripts__hello.rhai".into(), "fn reconcile(o, c) {}".into());
        let config = load_memory(&root, data, None).unwrap();
        assert_eq!(config.read(script).unwrap(), "fn reconcile(o, c) {}");
        assert_eq!(
            config.resolve(script),
            Path::new("configmap:ops/cfg/scripts/hello.rhai")
        );
        let bad = BTreeMap::from([("operator.toml".to_string(), "[operator]\nname = \n".into())]);
        assert!(
            load_memory(&root, bad, None)
                .unwrap_err()
                .to_string()
                .starts_with("configmap:ops/cfg/operator.toml:2:"),
        );
        assert_eq!(
            load_memory(&root, BTreeMap::new(), None)
                .unwrap_err()
                .to_string(),
            "configmap:ops/cfg: no config file here (looked for the keys operator.toml, operator.yaml, operator.yml)"
        );
    }
}
