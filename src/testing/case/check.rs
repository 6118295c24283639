//! Shape checks on a parsed [`Case`] that the YAML types cannot express: every object names
//! itself, and each key fits the call the case makes.

use super::{Call, Case};
use crate::testing::Error;
use serde_json::Value;

/// Shape checks that the YAML types cannot express.
pub(super) fn check(case: &Case) -> Result<(), Error> {
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
    let unnamed = |field: String| bad(field, "must be a non-empty string");
    for (at, obj) in objects {
        missing_identity(obj, &at).map_or(Ok(()), |f| Err(unnamed(f)))?;
    }
    for (i, o) in case.cache.iter().enumerate() {
        missing_identity(o, &format!("cache[{i}]")).map_or(Ok(()), |f| Err(unnamed(f)))?;
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
    if e.runs == Some(false) && (others || e.error.is_some()) {
        return Err(bad(
            "expect.runs".into(),
            "false cannot be combined with status, events or error: an entry that does not \
             run answers nothing",
        ));
    }
    if case.call == Call::Reconcile {
        // A failed reconcile has no children or requeue, but a status and an Event.
        if e.error.is_some() && (e.children.is_some() || e.requeue_after.is_some()) {
            return Err(bad(
                "expect.error".into(),
                "cannot be combined with children or requeue_after: a failed reconcile has \
                 no plan (status and events are what khai writes and records on the failure)",
            ));
        }
    } else if e.error.is_some() && others {
        return Err(bad(
            "expect.error".into(),
            "cannot be combined with children, status, requeue_after or events: a failed \
             call has no plan",
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
        Call::Handler(_) => &["status", "events", "error", "runs"],
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

/// Every object needs `apiVersion`, `kind` and `metadata.name`: the path of the first one
/// `obj` (at `at`) lacks, if any.
fn missing_identity(obj: &Value, at: &str) -> Option<String> {
    let text = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    ["apiVersion", "kind"]
        .into_iter()
        .find(|key| !text(&obj[*key]))
        .map(|key| format!("{at}.{key}"))
        .or_else(|| (!text(&obj["metadata"]["name"])).then(|| format!("{at}.metadata.name")))
}

#[cfg(test)]
mod tests {
    use crate::testing::case::parse;
    use std::path::Path;

    const OBJ: &str = "object: { apiVersion: a/v1, kind: T, metadata: { name: x } }\n";

    fn error(src: &str) -> String {
        parse(Path::new("tests/t.yaml"), src)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn object_without_a_name_names_the_field() {
        let err = error("object: { apiVersion: a/v1, kind: T, metadata: {} }\n");
        assert_eq!(
            err,
            "tests/t.yaml: object.metadata.name: must be a non-empty string"
        );
    }

    #[test]
    fn error_cannot_be_combined_with_a_plan() {
        let err = error(&format!("{OBJ}expect:\n  error: boom\n  children: []\n"));
        assert!(err.contains("expect.error: cannot be combined"), "{err}");
    }
}
