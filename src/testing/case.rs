//! One `khai test` case: the YAML file authors write under `<operator>/tests/`.
//!
//! A case names the input object, what khai's caches hold, and what the reconcile should
//! answer. Unknown keys are errors, so a misspelled `expect.stauts` cannot pass silently.

use super::Error;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A parsed case file.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The file, as found (relative to where `khai test` was pointed).
    pub file: PathBuf,
    pub description: Option<String>,
    /// Which controller reconciles `object`, by name; needed only when it is ambiguous.
    pub controller: Option<String>,
    /// The reconciled object, as a user would `kubectl apply` it.
    pub object: Value,
    /// Other objects visible through `ctx.get`, `ctx.list` and `ctx.owned`.
    pub cache: Vec<Value>,
    pub expect: Expect,
}

/// What the reconcile should answer. Every part is optional; a part left out is not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Desired children, in order, as the script returns them (before khai adds its
    /// ownerReference, labels and annotation).
    pub children: Option<Vec<Value>>,
    /// The desired status as the script returns it; `null` means no status at all.
    #[serde(default, deserialize_with = "present")]
    pub status: Option<Value>,
    /// `"30s"`, `"5m"` or seconds; `null` means no requeue.
    #[serde(default, deserialize_with = "present")]
    pub requeue_after: Option<Value>,
    /// Events, in order: maps of `type`, `reason`, `message`.
    pub events: Option<Vec<Value>>,
    /// A substring of the error the reconcile must fail with.
    pub error: Option<String>,
}

/// Keeps an explicit `null` apart from an absent key: `Some(Value::Null)` versus `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    description: Option<String>,
    controller: Option<String>,
    object: Value,
    #[serde(default)]
    cache: Vec<Value>,
    #[serde(default)]
    expect: Expect,
}

/// The case files of an operator: `<dir>/tests/*.yaml` (and `.yml`), sorted by name.
pub fn find(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let tests = dir.join("tests");
    let entries = std::fs::read_dir(&tests).map_err(|e| Error::Read {
        file: tests.clone(),
        message: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::NoCases { dir: tests });
    }
    Ok(files)
}

/// Reads and parses one case file.
pub fn load(file: &Path) -> Result<Case, Error> {
    let src = std::fs::read_to_string(file).map_err(|e| Error::Read {
        file: file.to_path_buf(),
        message: e.to_string(),
    })?;
    parse(file, &src)
}

/// Parses case text; `file` names it in errors.
pub fn parse(file: &Path, src: &str) -> Result<Case, Error> {
    let raw: CaseFile = serde_saphyr::from_str(src).map_err(|e| {
        let pos = e
            .location()
            .map(|l| (l.line() as usize, l.column() as usize));
        Error::Parse {
            file: file.to_path_buf(),
            pos,
            message: yaml_message(&e.to_string()),
        }
    })?;
    let case = Case {
        file: file.to_path_buf(),
        description: raw.description,
        controller: raw.controller,
        object: raw.object,
        cache: raw.cache,
        expect: raw.expect,
    };
    check(&case)?;
    Ok(case)
}

/// serde-saphyr's message without the location it repeats (`error: line 3 column 3: ...`,
/// `... at line 3 column 3`) or the source snippet it may append; the position is kept apart.
fn yaml_message(text: &str) -> String {
    let msg = text.lines().next().unwrap_or_default();
    let msg = msg.strip_prefix("error: ").unwrap_or(msg);
    let msg = match msg.split_once(": ") {
        Some((loc, rest)) if loc.starts_with("line ") && loc.contains(" column ") => rest,
        _ => msg,
    };
    let msg = msg.rsplit_once(" at line ").map_or(msg, |(m, _)| m);
    msg.trim().to_string()
}

/// Shape checks that the YAML types cannot express.
fn check(case: &Case) -> Result<(), Error> {
    let bad = |field: String, message: &str| Error::Case {
        file: case.file.clone(),
        field,
        message: message.into(),
    };
    require_identity(&case.object, "object").map_err(|f| bad(f, "must be a non-empty string"))?;
    for (i, o) in case.cache.iter().enumerate() {
        require_identity(o, &format!("cache[{i}]"))
            .map_err(|f| bad(f, "must be a non-empty string"))?;
    }
    let e = &case.expect;
    let others = e.children.is_some()
        || e.status.is_some()
        || e.requeue_after.is_some()
        || e.events.is_some();
    if e.error.is_some() && others {
        return Err(bad(
            "expect.error".into(),
            "cannot be combined with children, status, requeue_after or events: a failed \
             reconcile has no plan",
        ));
    }
    Ok(())
}

/// Every object needs `apiVersion`, `kind` and `metadata.name`; the error is the missing path.
fn require_identity(obj: &Value, at: &str) -> Result<(), String> {
    let text = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    for key in ["apiVersion", "kind"] {
        if !text(&obj[key]) {
            return Err(format!("{at}.{key}"));
        }
    }
    if !text(&obj["metadata"]["name"]) {
        return Err(format!("{at}.metadata.name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn case(src: &str) -> Result<Case, Error> {
        parse(Path::new("tests/t.yaml"), src)
    }

    const OBJ: &str = "object: { apiVersion: a/v1, kind: T, metadata: { name: x } }\n";

    #[test]
    fn explicit_null_is_kept_apart_from_absent() {
        let c = case(&format!("{OBJ}expect:\n  status: null\n")).unwrap();
        assert_eq!(c.expect.status, Some(Value::Null));
        assert_eq!(c.expect.requeue_after, None);
        let c = case(&format!("{OBJ}expect:\n  requeue_after: 30s\n")).unwrap();
        assert_eq!(c.expect.requeue_after, Some(json!("30s")));
    }

    #[test]
    fn misspelled_expectation_is_an_error_with_its_line() {
        let err = case(&format!("{OBJ}expect:\n  stauts: {{}}\n")).unwrap_err();
        let text = err.to_string();
        assert_eq!(
            text,
            "tests/t.yaml:3:3: unknown field `stauts`, expected one of children, status, requeue_after, events, error"
        );
    }

    #[test]
    fn object_without_a_name_names_the_field() {
        let err = case("object: { apiVersion: a/v1, kind: T, metadata: {} }\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/t.yaml: object.metadata.name: must be a non-empty string"
        );
    }

    #[test]
    fn error_cannot_be_combined_with_a_plan() {
        let err = case(&format!("{OBJ}expect:\n  error: boom\n  children: []\n")).unwrap_err();
        assert!(
            err.to_string().contains("expect.error: cannot be combined"),
            "{err}"
        );
    }
}
