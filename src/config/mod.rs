//! Reads an operator's config (TOML or YAML) into the typed [`Model`], once.
//!
//! `load` accepts a file or a directory holding `operator.toml` / `operator.yaml`;
//! `load_memory` takes the same files held in memory (a ConfigMap's keys, see [`files`]). Parsing keeps
//! positions so that every error names the file, line, column and field path; semantic checks
//! ([`validate`]) run right after and report every problem found, not just the first. Paths in
//! the model (scripts, schema files) are relative to the config file's directory; schema files
//! are read here, once, so nothing downstream touches the file system for them.

pub mod budget;
pub mod diag;
pub mod duration;
mod field_path;
pub mod files;
pub mod handlers;
pub mod http;
pub mod kind;
pub mod model;
mod schema_file;
mod validate;
pub mod webhook;
mod yaml_locate;

pub use diag::Diagnostic;
pub use files::Files;
pub use model::Model;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Names tried, in order, when `load` is given a directory.
pub const CONFIG_FILE_NAMES: [&str; 3] = ["operator.toml", "operator.yaml", "operator.yml"];

/// A loaded, validated operator config.
#[derive(Debug, Clone)]
pub struct Config {
    pub model: Model,
    /// The file the model came from.
    pub file: PathBuf,
    /// Directory that relative paths in the model are resolved against.
    pub base_dir: PathBuf,
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
    pub fn diagnostic_at(
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
    pub fn diagnostic_in(&self, keys: &[&str], message: String) -> Diagnostic {
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
    let src = std::fs::read_to_string(&file)
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

fn find_config_file(path: &Path) -> Result<PathBuf, Diagnostic> {
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

fn is_yaml(file: &Path) -> bool {
    matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Parses and validates config text, touching no file (a `schema_file` is not read): everything
/// [`load`] does to the bytes of a config file. Every problem is a located [`Diagnostic`].
pub fn check_source(file: &Path, src: &str) -> Result<Model, ConfigError> {
    let model = parse(file, src)?;
    validate::validate(&model, file, src)?;
    Ok(model)
}

/// Parses config text; the format is chosen by the file's extension (TOML unless .yaml/.yml).
pub fn parse(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    if is_yaml(file) {
        parse_yaml(file, src)
    } else {
        parse_toml(file, src)
    }
}

fn parse_toml(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    let locate = |e: &toml::de::Error| e.span().map(|s| diag::line_col(src, s.start));
    let de = toml::Deserializer::parse(src)
        .map_err(|e| Diagnostic::new(file, first_line(e.message())).at(locate(&e)))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = field_path(e.path());
        let inner = e.into_inner();
        Diagnostic::new(file, first_line(inner.message()))
            .at(locate(&inner))
            .field(path)
    })
}

fn parse_yaml(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    serde_saphyr::from_str::<Model>(src).map_err(|e| {
        let pos = e
            .location()
            .map(|l| (l.line() as usize, l.column() as usize));
        Diagnostic::new(file, yaml_message(&e)).at(pos)
    })
}

/// serde-saphyr's message alone, for a diagnostic that carries the position itself (its rendering
/// would add `error: line N column M:` and a snippet): control characters are escaped, and a
/// budget breach (a document too large or too deep, such as an alias bomb) is said in words.
pub fn yaml_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    use serde_saphyr::{DefaultMessageFormatter, Error, MessageFormatter};
    let mut e = e;
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = e {
        e = error;
    }
    let message = match e {
        Error::Budget { breach, .. } => match breach {
            B::Nodes { .. } => format!(
                "the document is too large: more than {} values once aliases are expanded",
                serde_saphyr::Budget::default().max_nodes
            ),
            B::Depth { .. } => format!(
                "the document is nested too deeply (more than {} levels)",
                serde_saphyr::Budget::default().max_depth
            ),
            B::Aliases { .. } | B::AliasAnchorRatio { .. } | B::MergeKeys { .. } => {
                "the document uses too many aliases or merge keys".to_string()
            }
            _ => "the document is too large".to_string(),
        },
        // Drop serde-saphyr's advice for Rust authors ("cannot deserialize null into string;
        // use Option<String>"): config authors have no Option to use.
        _ => {
            let m = DefaultMessageFormatter.format_message(e);
            m.split("; use Option<")
                .next()
                .unwrap_or_default()
                .to_string()
        }
    };
    let mut shown = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_string()
}

/// Renders serde_path_to_error's path as `controller[0].for`, the way authors index arrays.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = r#"
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
    fn toml_and_yaml_load_into_the_same_model() {
        let yaml = r#"
operator: { name: hello }
crd:
  - group: examples.khai.dev
    kind: Hello
    versions: [v1]
    spec:
      message: { type: string, required: true }
      replicas: { type: integer, default: 1, minimum: 0 }
    status:
      phase: { type: string }
controller:
  - for: Hello
    owns: [v1/ConfigMap]
    script: scripts/hello.rhai
"#;
        let t = parse(Path::new("operator.toml"), HELLO).unwrap();
        let y = parse(Path::new("operator.yaml"), yaml).unwrap();
        assert_eq!(t, y);
        assert_eq!(t.controllers[0].reconcile, "reconcile");
        assert!(t.operator.install_crds);
    }

    #[test]
    fn unknown_key_is_an_error_with_line_and_field_path() {
        let src = HELLO.replace("owns = ", "own = ");
        let err = parse(Path::new("operator.toml"), &src).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("operator.toml:15:1: controller[0].own: unknown field `own`"),
            "{text}"
        );
    }

    #[test]
    fn invalid_toml_names_the_line() {
        let err = parse(Path::new("x/operator.toml"), "[operator]\nname = \n").unwrap_err();
        assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
        assert!(err.to_string().starts_with("x/operator.toml:2:"), "{err}");
    }

    #[test]
    fn invalid_yaml_names_the_line() {
        let err = parse(Path::new("operator.yaml"), "operator:\n  name: [unclosed\n").unwrap_err();
        assert!(err.position.is_some(), "{err}");
    }

    #[test]
    fn yaml_diagnostics_give_the_position_once_and_a_message_in_words() {
        // Found by fuzzing (`scripts/fuzz config_yaml`): serde-saphyr's rendering put its own
        // "error: line 2 column 9:" inside the message, after khai's "operator.yaml:2:9:", and
        // a budget breach read "budget breached: Nodes { nodes: 250001 }".
        let err = parse(Path::new("operator.yaml"), "operator:\n  name: [unclosed\n").unwrap_err();
        assert_eq!(err.to_string(), "operator.yaml:2:9: expected string scalar");
        let err = parse(Path::new("operator.yaml"), "crd: 3\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator.yaml:1:6: expected sequence start"
        );
        let err = parse(Path::new("operator.yaml"), "operator: { name: ~ }\n").unwrap_err();
        assert_eq!(err.message, "cannot deserialize null into string");
        // An alias bomb: ten levels of ten aliases each.
        let mut bomb = String::from("params:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
        }
        let err = parse(Path::new("operator.yaml"), &bomb).unwrap_err();
        assert_eq!(
            err.message,
            "the document is too large: more than 250000 values once aliases are expanded"
        );
        let deep = format!("params: {{x: {}{}}}\n", "[".repeat(300), "]".repeat(300));
        let err = parse(Path::new("operator.yaml"), &deep).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator.yaml:1:267: recursion limit exceeded"
        );
    }

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

    /// Issue 12: a `watches` entry is a label or a map function, parsed once into `Parents`.
    #[test]
    fn a_watch_names_its_parents_by_label_or_by_map_never_both() {
        let base = "[[controller]]\nfor = \"ConfigMap\"\nscript = \"w.rhai\"\n";
        let one = format!("{base}watches = [{{ kind = \"Secret\", label = \"app\" }}]\n");
        let model = parse(Path::new("operator.toml"), &one).unwrap();
        assert_eq!(
            model.controllers[0].watches[0].parents,
            model::Parents::Label("app".into())
        );
        let both =
            format!("{base}watches = [{{ kind = \"Secret\", label = \"a\", map = \"f\" }}]\n");
        let err = parse(Path::new("operator.toml"), &both)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("operator.toml:4:") && err.contains("set exactly one of `label`"),
            "{err}"
        );
    }
}
