//! Finding, reading and parsing case files: `<operator>/tests/*.yaml`, read as YAML into a
//! [`Case`], with positions in errors and unknown keys refused.

use super::{AdmissionInput, Call, Case, ConvertInput, Expect, HandlerInput};
use crate::testing::Error;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A case file as written, before its call is worked out and its shape checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    description: Option<String>,
    controller: Option<String>,
    webhook: Option<String>,
    object: Option<Value>,
    #[serde(default)]
    cache: Vec<Value>,
    #[serde(default)]
    secrets: Vec<Value>,
    validate: Option<AdmissionInput>,
    mutate: Option<AdmissionInput>,
    convert: Option<ConvertInput>,
    /// A handler, timer or daemon function to call with `object`.
    handler: Option<String>,
    /// For a handler case: the object before the change.
    old: Option<Value>,
    /// For a daemon tick case: its state.
    state: Option<Value>,
    /// For a handler case: `ctx.retry`, the attempts before this one.
    retry: Option<u32>,
    #[serde(default)]
    calls: Vec<crate::effects::stub::Expected>,
    #[serde(default)]
    expect: Expect,
}

/// The case files of an operator: `<dir>/tests/*.yaml` (and `.yml`), sorted by name.
pub(crate) fn find(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let tests = dir.join("tests");
    let entries = std::fs::read_dir(&tests).map_err(|cause| Error::Read {
        file: tests.clone(),
        cause,
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
pub(crate) fn load(file: &Path) -> Result<Case, Error> {
    let src = std::fs::read_to_string(file).map_err(|cause| Error::Read {
        file: file.to_path_buf(),
        cause,
    })?;
    parse(file, &src)
}

/// Parses case text; `file` names it in errors.
pub(crate) fn parse(file: &Path, src: &str) -> Result<Case, Error> {
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
    let bad = |field: &str, message: String| Error::Case {
        file: file.to_path_buf(),
        field: field.into(),
        message,
    };
    let given: Vec<&str> = [
        raw.object.as_ref().map(|_| "object"),
        raw.validate.as_ref().map(|_| "validate"),
        raw.mutate.as_ref().map(|_| "mutate"),
        raw.convert.as_ref().map(|_| "convert"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let one_call = || {
        bad(
            given.get(1).copied().unwrap_or("object"),
            "give exactly one of `object` (a reconcile), `validate`, `mutate` or `convert`".into(),
        )
    };
    if raw.handler.is_none() {
        for (key, given) in [
            ("old", raw.old.is_some()),
            ("state", raw.state.is_some()),
            ("retry", raw.retry.is_some()),
        ] {
            if given {
                return Err(bad(
                    key,
                    "only for handler cases (`handler` with `object`)".into(),
                ));
            }
        }
    }
    let (call, object) = match (raw.object, raw.validate, raw.mutate, raw.convert) {
        (Some(object), None, None, None) => match raw.handler {
            Some(name) => (
                Call::Handler(HandlerInput {
                    name,
                    old: raw.old,
                    state: raw.state,
                    retry: raw.retry,
                }),
                object,
            ),
            None => (Call::Reconcile, object),
        },
        (None, Some(input), None, None) => {
            let object = admission_object(file, &input, "validate")?;
            (Call::Validate(input), object)
        }
        (None, None, Some(input), None) => {
            let object = admission_object(file, &input, "mutate")?;
            (Call::Mutate(input), object)
        }
        (None, None, None, Some(input)) => {
            let object = input.object.clone();
            (Call::Convert(input), object)
        }
        _ => return Err(one_call()),
    };
    let case = Case {
        file: file.to_path_buf(),
        description: raw.description,
        controller: raw.controller,
        webhook: raw.webhook,
        object,
        cache: raw.cache,
        secrets: raw.secrets,
        call,
        calls: raw.calls,
        expect: raw.expect,
    };
    super::check::check(&case)?;
    Ok(case)
}

/// The object an admission case is about, after checking the operation has what it needs:
/// `object` for CREATE, UPDATE and CONNECT, `oldObject` for UPDATE and DELETE.
fn admission_object(file: &Path, input: &AdmissionInput, key: &str) -> Result<Value, Error> {
    let bad = |f: &str, message: String| Error::Case {
        file: file.to_path_buf(),
        field: format!("{key}.{f}"),
        message,
    };
    let needs = |f: &str, v: &Option<Value>| match v {
        Some(v) if !v.is_null() => Ok(v.clone()),
        _ => Err(bad(f, format!("{} requests need it", input.operation))),
    };
    match input.operation.as_str() {
        "CREATE" | "CONNECT" => needs("object", &input.object),
        "UPDATE" => {
            needs("oldObject", &input.old_object)?;
            needs("object", &input.object)
        }
        "DELETE" => needs("oldObject", &input.old_object),
        other => Err(bad(
            "operation",
            format!("must be CREATE, UPDATE, DELETE or CONNECT, got {other:?}"),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::case::Call;
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
            "tests/t.yaml:3:3: unknown field `stauts`, expected one of children, status, requeue_after, events, error, finalized, allowed, message, reason, code, warnings, object, patch, runs"
        );
    }

    #[test]
    fn a_webhook_case_names_one_call_and_only_expectations_its_answer_has() {
        let obj = "{ apiVersion: a/v1, kind: T, metadata: { name: x } }";
        let c = case(&format!(
            "validate:\n  object: {obj}\nexpect:\n  allowed: false\n"
        ))
        .unwrap();
        assert!(matches!(c.call, Call::Validate(ref r) if r.operation == "CREATE"));
        assert_eq!(c.object["metadata"]["name"], "x");
        let err = case(&format!(
            "validate:\n  object: {obj}\nexpect:\n  children: []\n"
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/t.yaml: expect.children: does not apply to a `validate` case, which can expect: allowed, message, reason, code, warnings"
        );
        let err = case(&format!("{OBJ}mutate:\n  object: {obj}\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/t.yaml: mutate: give exactly one of `object` (a reconcile), `validate`, `mutate` or `convert`"
        );
        let err = case(&format!("mutate:\n  operation: UPDATE\n  object: {obj}\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/t.yaml: mutate.oldObject: UPDATE requests need it"
        );
        let c = case(&format!(
            "convert:\n  object: {obj}\n  to: v2\nexpect:\n  object: {{}}\n"
        ))
        .unwrap();
        assert!(matches!(c.call, Call::Convert(ref r) if r.to == "v2"));
    }
}
