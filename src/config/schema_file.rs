//! Reads each CRD's `schema_file`: a raw OpenAPI v3 schema, for what the compact form cannot
//! express (`oneOf`, `x-kubernetes-list-type`, an existing CRD's schema).
//!
//! The files are read while the config loads, not when CRDs are generated, so that generating
//! and installing stay pure and a missing or malformed file is reported with the config's
//! other problems, at the `schema_file` line that names it. khai checks the shape the API
//! server needs at the root and that every `pattern` compiles (a CRD whose pattern does not is
//! refused, and khai could not start); the rest of the schema is the server's to judge.

use super::Diagnostic;
use super::field_path::Seg;
use super::files::Files;
use super::model::Model;
use super::validate::diagnostic;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Reads and parses every `schema_file` of `model` from `files` relative to `base_dir`,
/// storing each schema in its CRD's `raw_schema`; returns one diagnostic per file that could not
/// be used.
pub(super) fn load_all(
    model: &mut Model,
    files: &Files,
    base_dir: &Path,
    file: &Path,
    src: &str,
) -> Vec<Diagnostic> {
    let mut problems = Vec::new();
    for (i, crd) in model.crds.iter_mut().enumerate() {
        let Some(rel) = &crd.schema_file else {
            continue;
        };
        let text = files.read(base_dir, rel);
        match read(&base_dir.join(rel), text) {
            Ok(schema) => crd.raw_schema = Some(schema),
            Err(e) => {
                let at = [Seg::Key("crd"), Seg::Index(i), Seg::Key("schema_file")];
                problems.push(diagnostic(file, src, &at, e.to_string()));
            }
        }
    }
    problems
}

/// Why a `schema_file` cannot be used; each names the file as the config resolves it.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: {cause}", path.display())]
    Json {
        path: PathBuf,
        cause: serde_json::Error,
    },
    /// `at` is `:line:column`, or empty when serde-saphyr knows no position.
    #[error("{}{at}: {message}", path.display())]
    Yaml {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error("{}: {at}: {message}", path.display())]
    Pattern {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error("{}: {problem}", path.display())]
    Root {
        path: PathBuf,
        problem: &'static str,
    },
}

/// The schema read from `path` (JSON when it ends in `.json`, YAML otherwise), checked at the
/// root.
fn read(path: &Path, text: std::io::Result<String>) -> Result<Value, Error> {
    let path = path.to_path_buf();
    let text = match text {
        Ok(t) => t,
        Err(cause) => return Err(Error::Read { path, cause }),
    };
    let schema: Value = if path.extension().is_some_and(|e| e == "json") {
        match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(cause) => return Err(Error::Json { path, cause }),
        }
    } else {
        match serde_saphyr::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                let at = e
                    .location()
                    .map_or_else(String::new, |l| format!(":{}:{}", l.line(), l.column()));
                let message = super::yaml_message(&e);
                return Err(Error::Yaml { path, at, message });
            }
        }
    };
    if let Err(problem) = check_root(&schema) {
        return Err(Error::Root { path, problem });
    }
    if let Some((at, message)) = bad_pattern(&schema, &mut Vec::new()) {
        return Err(Error::Pattern { path, at, message });
    }
    Ok(schema)
}

/// The first `pattern` of `schema` or its subschemas that the API server would not compile:
/// where it is (`properties.spec.properties.name.pattern`) and why. Only subschemas are walked,
/// so a `default` or `enum` value holding a `pattern` key is not taken for one.
fn bad_pattern(schema: &Value, at: &mut Vec<String>) -> Option<(String, String)> {
    let obj = schema.as_object()?;
    if let Some(Value::String(p)) = obj.get("pattern")
        && let Err(why) = super::validate::check_pattern(p)
    {
        at.push("pattern".into());
        return Some((at.join("."), why));
    }
    let inside = |at: &mut Vec<String>, step: String, sub: &Value| {
        at.push(step);
        let found = bad_pattern(sub, at);
        at.pop();
        found
    };
    for key in ["items", "additionalProperties", "not"] {
        if let Some(sub) = obj.get(key)
            && let Some(found) = inside(at, key.into(), sub)
        {
            return Some(found);
        }
    }
    for key in ["properties", "patternProperties", "definitions"] {
        for (name, sub) in obj
            .get(key)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(found) = inside(at, format!("{key}.{name}"), sub) {
                return Some(found);
            }
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in obj
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(found) = inside(at, format!("{key}[{i}]"), sub) {
                return Some(found);
            }
        }
    }
    None
}

fn check_root(schema: &Value) -> Result<(), &'static str> {
    let Some(root) = schema.as_object() else {
        return Err("must hold an OpenAPI v3 schema object");
    };
    if root.contains_key("openAPIV3Schema") {
        return Err("must hold the schema itself, not an `openAPIV3Schema:` key around it");
    }
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the root schema must have `type: object`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn yaml_and_json_schemas_read_alike() {
        let dir = tempfile::tempdir().unwrap();
        let y = write(
            dir.path(),
            "s.yaml",
            "type: object\nproperties:\n  spec:\n    type: object\n    x-kubernetes-preserve-unknown-fields: true\n",
        );
        let j = write(
            dir.path(),
            "s.json",
            r#"{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}"#,
        );
        assert_eq!(
            read(&y, std::fs::read_to_string(&y)).unwrap(),
            read(&j, std::fs::read_to_string(&j)).unwrap()
        );
        assert_eq!(
            read(&y, std::fs::read_to_string(&y)).unwrap()["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
    }

    #[test]
    fn a_wrapped_or_untyped_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wrapped = write(dir.path(), "w.yaml", "openAPIV3Schema:\n  type: object\n");
        assert_eq!(
            read(&wrapped, std::fs::read_to_string(&wrapped))
                .unwrap_err()
                .to_string(),
            format!(
                "{}: must hold the schema itself, not an `openAPIV3Schema:` key around it",
                wrapped.display()
            )
        );
        let untyped = write(dir.path(), "u.json", r#"{"properties":{}}"#);
        assert_eq!(
            read(&untyped, std::fs::read_to_string(&untyped))
                .unwrap_err()
                .to_string(),
            format!(
                "{}: the root schema must have `type: object`",
                untyped.display()
            )
        );
        let list = write(dir.path(), "l.yaml", "- type: object\n");
        assert_eq!(
            read(&list, std::fs::read_to_string(&list))
                .unwrap_err()
                .to_string(),
            format!("{}: must hold an OpenAPI v3 schema object", list.display())
        );
    }

    #[test]
    fn a_pattern_the_api_server_cannot_compile_is_named_by_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let bad = write(
            dir.path(),
            "s.yaml",
            "type: object\nproperties:\n  spec:\n    type: object\n    default: { pattern: \"(\" }\n    \
             properties:\n      tags:\n        type: array\n        items: { type: string, pattern: \"^[a-z\" }\n",
        );
        assert_eq!(
            read(&bad, std::fs::read_to_string(&bad))
                .unwrap_err()
                .to_string(),
            format!(
                "{}: properties.spec.properties.tags.items.pattern: \"^[a-z\" is not a regular \
                 expression the API server accepts (RE2 syntax): unclosed character class",
                bad.display()
            )
        );
        std::fs::write(
            &bad,
            "type: object\nproperties:\n  a: { type: string, pattern: \"^[a-z]+$\" }\n",
        )
        .unwrap();
        assert!(read(&bad, std::fs::read_to_string(&bad)).is_ok());
    }

    #[test]
    fn malformed_yaml_is_located_once() {
        // It read "s.yaml: error: line 2 column 13: …", the position inside the message.
        let dir = tempfile::tempdir().unwrap();
        let bad = write(dir.path(), "s.yaml", "type: object\nproperties: [a\n");
        assert_eq!(
            read(&bad, std::fs::read_to_string(&bad))
                .unwrap_err()
                .to_string(),
            format!("{}:2:13: unclosed bracket '['", bad.display())
        );
    }
}
