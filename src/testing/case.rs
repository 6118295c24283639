//! One `khai test` case: the YAML file authors write under `<operator>/tests/`.
//!
//! A case names what to call and with what, and what the answer should be: `object` (and the
//! `cache`) for a reconcile, or `validate`, `mutate` or `convert` with a request for a webhook.
//! Unknown keys are errors, so a misspelled `expect.stauts` cannot pass silently, and so is an
//! expectation that cannot apply to the case's call (`expect.children` of a `validate` case).

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
    /// Which `[[webhook]]` answers a webhook case, by name; needed only when it is ambiguous.
    pub webhook: Option<String>,
    /// The reconciled object, as a user would `kubectl apply` it; for a webhook case, the
    /// object of its request (`oldObject` for a DELETE), whose kind picks the webhook.
    pub object: Value,
    /// Other objects visible through `ctx.get`, `ctx.list` and `ctx.owned`, and (for handler,
    /// timer and daemon cases) what the config's indexes are built from.
    pub cache: Vec<Value>,
    /// The Secrets there are, for `ctx.secret` (which reads only those `[operator] secrets`
    /// lists, as at run time).
    pub secrets: Vec<Value>,
    /// What the case calls.
    pub call: Call,
    /// The side effects (`k8s::…`, `http::…`) the call must make, in order, with their
    /// answers; none when left out. Nothing leaves the process.
    pub calls: Vec<crate::effects::stub::Expected>,
    pub expect: Expect,
}

/// What a case calls.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// The controller's `reconcile(obj, ctx)` with `object`.
    Reconcile,
    /// A webhook's `validate(req)`.
    Validate(AdmissionInput),
    /// A webhook's `mutate(req)`.
    Mutate(AdmissionInput),
    /// A webhook's `convert(obj, to_version)`.
    Convert(ConvertInput),
    /// A `[[handler]]`, `[[timer]]` or `[[daemon]]` function with `object` (the object now).
    Handler(HandlerInput),
}

/// Which handler, timer or daemon function a case calls, and what it is called with besides
/// the object.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerInput {
    /// The function (or a handler's `id`).
    pub name: String,
    /// The object before the change, for update, field and delete handlers.
    pub old: Option<Value>,
    /// A daemon tick's `state`.
    pub state: Option<Value>,
    /// For a handler: the attempts before this one (`ctx.retry`; 0, the first, when absent).
    pub retry: Option<u32>,
}

impl Call {
    /// The key the case gives it under.
    pub fn key(&self) -> &'static str {
        match self {
            Call::Reconcile => "object",
            Call::Validate(_) => "validate",
            Call::Mutate(_) => "mutate",
            Call::Convert(_) => "convert",
            Call::Handler(_) => "handler",
        }
    }
}

/// The parts of an AdmissionReview request a case gives; khai fills in the rest (uid, kind,
/// resource, name, namespace) as the API server would.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionInput {
    /// `CREATE` (the default), `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default = "create")]
    pub operation: String,
    /// The object being written; absent on DELETE.
    pub object: Option<Value>,
    /// The object as it was, on UPDATE and DELETE.
    pub old_object: Option<Value>,
    /// Who asks: `username`, `uid`, `groups`, `extra`; defaults to a `khai-test` user in
    /// `system:authenticated`.
    pub user_info: Option<Value>,
    /// `status`, `scale`, ... when the request is for a subresource.
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

fn create() -> String {
    "CREATE".into()
}

/// The object a case converts and the version it converts to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertInput {
    pub object: Value,
    /// The desired version: `v1alpha1`, or `group/v1alpha1`.
    pub to: String,
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
    /// A substring of the error the reconcile or conversion must fail with.
    pub error: Option<String>,
    /// A reconcile case whose object is being deleted (`metadata.deletionTimestamp`) calls
    /// `finalize`, as khai does: whether it answered `true` (done, the finalizer may go).
    pub finalized: Option<bool>,
    /// Admission: whether the request is allowed; defaults to true unless `message`, `reason`
    /// or `code` (which describe a denial) are given.
    pub allowed: Option<bool>,
    /// Admission: a substring of the denial's message.
    pub message: Option<String>,
    /// Admission: the denial's reason (`Forbidden`, `Invalid`, ...).
    pub reason: Option<String>,
    /// Admission: the denial's HTTP code.
    pub code: Option<i64>,
    /// Admission: the warnings an allowed request carries, in order.
    pub warnings: Option<Vec<String>>,
    /// Mutate: the object as the API server would store it after khai's patch; convert: the
    /// converted object.
    pub object: Option<Value>,
    /// Mutate: the JSON Patch khai sends, operation by operation (`[]` for none).
    pub patch: Option<Vec<Value>>,
}

impl Expect {
    /// The keys given, by name, for checking them against the case's call.
    fn given(&self) -> Vec<&'static str> {
        let present = [
            ("children", self.children.is_some()),
            ("status", self.status.is_some()),
            ("requeue_after", self.requeue_after.is_some()),
            ("events", self.events.is_some()),
            ("error", self.error.is_some()),
            ("finalized", self.finalized.is_some()),
            ("allowed", self.allowed.is_some()),
            ("message", self.message.is_some()),
            ("reason", self.reason.is_some()),
            ("code", self.code.is_some()),
            ("warnings", self.warnings.is_some()),
            ("object", self.object.is_some()),
            ("patch", self.patch.is_some()),
        ];
        present
            .into_iter()
            .filter_map(|(k, p)| p.then_some(k))
            .collect()
    }
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
            let object = admission_object(&input, "validate").map_err(|(f, m)| bad(&f, m))?;
            (Call::Validate(input), object)
        }
        (None, None, Some(input), None) => {
            let object = admission_object(&input, "mutate").map_err(|(f, m)| bad(&f, m))?;
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
    check(&case)?;
    Ok(case)
}

/// The object an admission case is about, after checking the operation has what it needs:
/// `object` for CREATE, UPDATE and CONNECT, `oldObject` for UPDATE and DELETE.
fn admission_object(input: &AdmissionInput, key: &str) -> Result<Value, (String, String)> {
    let at = |f: &str| format!("{key}.{f}");
    let needs = |f: &str, v: &Option<Value>| match v {
        Some(v) if !v.is_null() => Ok(v.clone()),
        _ => Err((at(f), format!("{} requests need it", input.operation))),
    };
    match input.operation.as_str() {
        "CREATE" | "CONNECT" => needs("object", &input.object),
        "UPDATE" => {
            needs("oldObject", &input.old_object)?;
            needs("object", &input.object)
        }
        "DELETE" => needs("oldObject", &input.old_object),
        other => Err((
            at("operation"),
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

/// Shape checks that the YAML types cannot express.
fn check(case: &Case) -> Result<(), Error> {
    let bad = |field: String, message: &str| Error::Case {
        file: case.file.clone(),
        field,
        message: message.into(),
    };
    let objects: Vec<(String, &Value)> = match &case.call {
        Call::Reconcile | Call::Handler(_) => vec![("object".into(), &case.object)],
        Call::Validate(r) | Call::Mutate(r) => {
            let key = case.call.key();
            [("object", &r.object), ("oldObject", &r.old_object)]
                .into_iter()
                .filter_map(|(k, v)| {
                    Some((format!("{key}.{k}"), v.as_ref().filter(|v| !v.is_null())?))
                })
                .collect()
        }
        Call::Convert(c) => vec![("convert.object".into(), &c.object)],
    };
    for (at, obj) in objects {
        require_identity(obj, &at).map_err(|f| bad(f, "must be a non-empty string"))?;
    }
    for (i, o) in case.cache.iter().enumerate() {
        require_identity(o, &format!("cache[{i}]"))
            .map_err(|f| bad(f, "must be a non-empty string"))?;
    }
    for (i, o) in case.secrets.iter().enumerate() {
        if o["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err(bad(
                format!("secrets[{i}].metadata.name"),
                "must be a non-empty string",
            ));
        }
    }
    check_keys_fit_the_call(case)?;
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

/// Keys that only make sense for some calls: `controller` and `cache` for a reconcile,
/// `webhook` for the others, and each `expect` key for the calls whose answer has that part.
fn check_keys_fit_the_call(case: &Case) -> Result<(), Error> {
    let bad = |field: &str, message: String| Error::Case {
        file: case.file.clone(),
        field: field.into(),
        message,
    };
    let reconcile = case.call == Call::Reconcile;
    if !reconcile {
        if case.controller.is_some() {
            return Err(bad(
                "controller",
                "only for reconcile cases (`object`); use `webhook` to name a webhook".into(),
            ));
        }
        if !case.cache.is_empty() && !matches!(case.call, Call::Handler(_)) {
            return Err(bad(
                "cache",
                "only for reconcile and handler cases (`object`): webhook scripts get no ctx"
                    .into(),
            ));
        }
        if !case.secrets.is_empty() && !matches!(case.call, Call::Handler(_)) {
            return Err(bad(
                "secrets",
                "only for reconcile and handler cases: webhook scripts get no ctx".into(),
            ));
        }
    } else if case.webhook.is_some() {
        return Err(bad(
            "webhook",
            "only for `validate`, `mutate` and `convert` cases".into(),
        ));
    }
    let allowed: &[&str] = match case.call {
        Call::Reconcile => &[
            "children",
            "status",
            "requeue_after",
            "events",
            "error",
            "finalized",
        ],
        Call::Validate(_) => &["allowed", "message", "reason", "code", "warnings"],
        Call::Mutate(_) => &[
            "allowed", "message", "reason", "code", "warnings", "object", "patch",
        ],
        Call::Convert(_) => &["object", "error"],
        Call::Handler(_) => &["status", "events", "error"],
    };
    match case
        .expect
        .given()
        .into_iter()
        .find(|k| !allowed.contains(k))
    {
        Some(key) => Err(bad(
            &format!("expect.{key}"),
            format!(
                "does not apply to a `{}` case, which can expect: {}",
                case.call.key(),
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
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
            "tests/t.yaml:3:3: unknown field `stauts`, expected one of children, status, requeue_after, events, error, finalized, allowed, message, reason, code, warnings, object, patch"
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

    #[test]
    fn error_cannot_be_combined_with_a_plan() {
        let err = case(&format!("{OBJ}expect:\n  error: boom\n  children: []\n")).unwrap_err();
        assert!(
            err.to_string().contains("expect.error: cannot be combined"),
            "{err}"
        );
    }
}
