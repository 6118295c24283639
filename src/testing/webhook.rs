//! `khai test` cases for webhooks: `validate`, `mutate` and `convert`.
//!
//! The request is what the API server would send: the case's objects decoded as the server
//! decodes them (CRD defaults, namespace `default`), with `kind`, `resource`, `name`,
//! `namespace`, a `uid` and the caller's `userInfo` filled in, at the version the webhook's rules
//! name (a CRD's storage version). The answer comes from the functions the webhook server calls,
//! and a mutation's JSON Patch is applied to the object as the API server applies it, so
//! `expect.object` is what would be stored.

use super::case::{AdmissionInput, Case, ConvertInput, Expect};
use super::compare::{self, Mismatch};
use super::lookup::KindRef;
use super::{Error, Invalid, Problem, defaulted};
use crate::operator::Operator;
use crate::webhook::Handler;
use crate::webhook::admission::{self, Kind, Verdict};
use crate::webhook::conversion;
use serde_json::{Value, json};

/// Who asks when a case does not say.
fn default_user() -> Value {
    json!({ "username": "khai-test", "uid": "khai-test", "groups": ["system:authenticated"] })
}

/// Runs a `validate` or `mutate` case.
pub(super) fn run_admission(
    op: &Operator,
    case: &Case,
    kind: Kind,
    input: &AdmissionInput,
) -> Result<Vec<Mismatch>, Error> {
    let key = case.call.key();
    let handler = pick(op, case, key).map_err(|p| p.at("webhook").in_case(case))?;
    let decode = |field: &str, v: &Option<Value>| -> Result<Value, Error> {
        match v {
            Some(v) if !v.is_null() => {
                let at = format!("{key}.{field}");
                storage_version_only(op, v).map_err(|p| p.at(&at).in_case(case))?;
                defaulted(op, v, None).map_err(|p| p.at(at).in_case(case))
            }
            _ => Ok(Value::Null),
        }
    };
    let object = decode("object", &input.object)?;
    let old_object = decode("oldObject", &input.old_object)?;
    // The API server checks the CRD's validation rules before any validating webhook runs.
    let verdict = match super::admission_cel::broken_rule(op, &object, &old_object) {
        Some(refusal) => refusal,
        None => {
            let request = request(op, input, &case.object, object.clone(), old_object);
            if super::admission_cel::skipped(handler, &request) {
                Verdict::Allow {
                    warnings: Vec::new(),
                    patch: None,
                }
            } else {
                admission::decide_blocking(handler, kind, request)
            }
        }
    };
    compare_admission(&case.expect, &object, verdict).map_err(|i| i.in_case(case))
}

/// Runs a `convert` case.
pub(super) fn run_conversion(
    op: &Operator,
    case: &Case,
    input: &ConvertInput,
) -> Result<Vec<Mismatch>, Error> {
    let handler = pick(op, case, "convert").map_err(|p| p.at("webhook").in_case(case))?;
    let object =
        defaulted(op, &input.object, None).map_err(|p| p.at("convert.object").in_case(case))?;
    let desired = if input.to.contains('/') {
        input.to.clone()
    } else {
        let group = KindRef::of(&object).group.unwrap_or_default();
        format!("{group}/{}", input.to)
    };
    let function = handler.hook.convert.as_deref().unwrap_or("convert");
    let answer = conversion::convert_object(&handler.script, function, object, &desired)
        .map_err(|e| e.to_string());
    let expect = &case.expect;
    Ok(match (answer, &expect.error) {
        (Err(e), Some(want)) if e.contains(want.as_str()) => Vec::new(),
        (Err(e), Some(want)) => vec![Mismatch::new(
            "error",
            format!("an error containing {}", json!(want)),
            json!(e).to_string(),
        )],
        (Ok(_), Some(want)) => vec![Mismatch::new(
            "error",
            format!("an error containing {}", json!(want)),
            "success",
        )],
        (Err(e), None) => vec![Mismatch::new("convert", "success", format!("error: {e}"))],
        (Ok(converted), None) => {
            let mut out = Vec::new();
            if let Some(want) = &expect.object {
                compare::compare("object", want, Some(&converted), &mut out);
            }
            out
        }
    })
}

/// The webhook a case calls: the one named by `webhook:`, else the only one that defines the
/// function and whose `for` matches the object's kind.
fn pick<'o>(op: &'o Operator, case: &Case, function: &str) -> Result<&'o Handler, Problem> {
    let defines = |h: &Handler| match function {
        "validate" => h.hook.validate.is_some(),
        "mutate" => h.hook.mutate.is_some(),
        _ => h.hook.convert.is_some(),
    };
    let names = || {
        op.webhooks
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(name) = &case.webhook {
        let handler = op
            .webhooks
            .iter()
            .find(|h| h.name == *name)
            .ok_or_else(|| Problem::NoSuchWebhook {
                name: name.clone(),
                names: names(),
            })?;
        return if defines(handler) {
            Ok(handler)
        } else {
            Err(Problem::NoFunction {
                name: name.clone(),
                function: function.to_string(),
            })
        };
    }
    let kind = KindRef::of(&case.object);
    let model = &op.config.model;
    // Any version: a conversion starts from one the rules do not name.
    let for_kind = |h: &Handler| KindRef {
        version: None,
        ..model.complete_kind(&h.hook.for_kind)
    };
    let matching: Vec<&Handler> = op
        .webhooks
        .iter()
        .filter(|h| defines(h) && for_kind(h).compatible(&kind))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(Problem::NoWebhook {
            function: function.to_string(),
            kind: kind.kind,
            names: names(),
        }),
        _ => Err(Problem::SeveralWebhooks {
            function: function.to_string(),
            kind: kind.kind,
            names: matching
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Admission scripts see a CRD of this config at its storage version (the rules ask for it with
/// `matchPolicy: Equivalent`); a case written at another version would show scripts an object
/// they never get.
fn storage_version_only(op: &Operator, obj: &Value) -> Result<(), Problem> {
    let kind = KindRef::of(obj);
    let Some(crd) = op
        .config
        .model
        .crds
        .iter()
        .find(|c| c.kind == kind.kind && kind.group.as_deref() == Some(c.group.as_str()))
    else {
        return Ok(());
    };
    let storage = crd.storage_version();
    if kind.version.as_deref() == Some(storage) {
        Ok(())
    } else {
        Err(Problem::NotStorageVersion {
            kind: crd.kind.clone(),
            group: crd.group.clone(),
            storage: storage.to_string(),
        })
    }
}

/// The AdmissionReview `request` the API server would send for `input`; `about` is the object
/// (or old object) that names the kind and the name.
fn request(
    op: &Operator,
    input: &AdmissionInput,
    about: &Value,
    object: Value,
    old_object: Value,
) -> Value {
    let kind = KindRef::of(about);
    let group = kind.group.clone().unwrap_or_default();
    let version = kind.version.clone().unwrap_or_default();
    let plural = op
        .config
        .model
        .crds
        .iter()
        .find(|c| c.kind == kind.kind && c.group == group)
        .map_or_else(|| crate::schema::plural_of(&kind.kind), |c| c.plural());
    let meta = if object.is_null() {
        &old_object["metadata"]
    } else {
        &object["metadata"]
    };
    let gvk = json!({ "group": group, "version": version, "kind": kind.kind });
    let gvr = json!({ "group": group, "version": version, "resource": plural });
    let mut request = json!({
        "uid": "khai-test",
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": meta["name"],
        "operation": input.operation,
        "userInfo": input.user_info.clone().unwrap_or_else(default_user),
        "object": object,
        "oldObject": old_object,
        "dryRun": input.dry_run,
    });
    if let Some(ns) = meta["namespace"].as_str() {
        request["namespace"] = json!(ns);
    }
    if let Some(sub) = &input.sub_resource {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    request
}

/// Every way `verdict` misses `expect`; `object` is what a mutation is patched onto.
fn compare_admission(
    expect: &Expect,
    object: &Value,
    verdict: Verdict,
) -> Result<Vec<Mismatch>, Invalid> {
    let mut out = Vec::new();
    let describes_denial =
        expect.message.is_some() || expect.reason.is_some() || expect.code.is_some();
    let want_allowed = expect.allowed.unwrap_or(!describes_denial);
    match verdict {
        Verdict::Deny {
            message,
            reason,
            code,
        } => {
            if want_allowed {
                out.push(Mismatch::new(
                    "allowed",
                    "true",
                    format!("false ({reason} {code}: {})", json!(message)),
                ));
                return Ok(out);
            }
            if let Some(want) = &expect.message
                && !message.contains(want.as_str())
            {
                out.push(Mismatch::new(
                    "message",
                    format!("a message containing {}", json!(want)),
                    json!(message).to_string(),
                ));
            }
            if let Some(want) = &expect.reason
                && *want != reason
            {
                out.push(Mismatch::new(
                    "reason",
                    json!(want).to_string(),
                    json!(reason).to_string(),
                ));
            }
            if let Some(want) = expect.code
                && want != code
            {
                out.push(Mismatch::new("code", want.to_string(), code.to_string()));
            }
        }
        Verdict::Allow { warnings, patch } => {
            if !want_allowed {
                out.push(Mismatch::new("allowed", "false", "true"));
                return Ok(out);
            }
            if let Some(want) = &expect.warnings
                && *want != warnings
            {
                out.push(Mismatch::new(
                    "warnings",
                    json!(want).to_string(),
                    json!(warnings).to_string(),
                ));
            }
            let ops = patch.map(|p| p.0).unwrap_or_default();
            if let Some(want) = &expect.patch {
                let got = serde_json::to_value(&ops).map_err(|e| Problem::Patch(e).at("patch"))?;
                compare::compare("patch", &Value::Array(want.clone()), Some(&got), &mut out);
            }
            if let Some(want) = &expect.object {
                let mut stored = object.clone();
                json_patch::patch(&mut stored, &ops)
                    .map_err(|e| Problem::PatchDoesNotApply(e).at("expect.object"))?;
                compare::compare("object", want, Some(&stored), &mut out);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{case, run_case};
    use crate::operator::Operator;
    use std::path::Path;

    /// An operator with one two-version CRD and a webhook with all three functions.
    fn operator(script: &str) -> (tempfile::TempDir, Operator) {
        let toml = concat!(
            "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\n",
            "versions = [{ name = \"v1alpha1\" }, { name = \"v1\", storage = true }]\n",
            "spec.replicas = { type = \"integer\", default = 2 }\nspec.size = { type = \"integer\" }\n\n",
            "[[webhook]]\nfor = \"Web\"\nscript = \"w.rhai\"\nvalidate = \"validate\"\nmutate = \"mutate\"\nconvert = \"convert\"\n",
        );
        super::super::tests::load_operator(toml, "w.rhai", script)
    }

    const SCRIPT: &str = r#"
fn validate(req) {
    if req.object.spec.replicas > 5 { return deny(`${req.userInfo.username} asked for too many`, "Invalid", 422); }
    if req.operation == "UPDATE" && req.oldObject.spec.replicas > req.object.spec.replicas { return allow(["scaling down"]); }
}
fn mutate(req) {
    let o = req.object;
    o.metadata.labels = #{ team: req.userInfo.groups[0], ns: req.namespace, kind: req.kind.kind, res: req.resource.resource };
    o
}
fn convert(obj, to) {
    if to == "v1alpha1" { obj.spec.size = obj.spec.replicas; obj.spec.remove("replicas"); }
    obj
}
"#;

    const WEB: &str = "{ apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: {} }";

    fn run(src: &str) -> Vec<String> {
        let (_dir, op) = operator(SCRIPT);
        let c = case::parse(Path::new("tests/c.yaml"), src).unwrap();
        match run_case(&op, &c) {
            Ok(found) => found.iter().map(ToString::to_string).collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn validate_cases_check_the_verdict_with_defaults_and_user_info_applied() {
        let big = "{ apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: { replicas: 9 } }";
        let denied = format!(
            "validate:\n  object: {big}\n  userInfo: {{ username: alice }}\nexpect:\n  message: alice asked for too many\n  reason: Invalid\n  code: 422\n"
        );
        assert_eq!(run(&denied), Vec::<String>::new());
        // The default replicas (2) is filled in, so this is allowed.
        assert_eq!(
            run(&format!("validate:\n  object: {WEB}\n")),
            Vec::<String>::new()
        );
        let wrong = format!("validate:\n  object: {big}\nexpect:\n  allowed: true\n");
        assert_eq!(
            run(&wrong),
            [r#"allowed: expected true, got false (Invalid 422: "khai-test asked for too many")"#]
        );
        let down = format!(
            "validate:\n  operation: UPDATE\n  oldObject: {big}\n  object: {WEB}\nexpect:\n  warnings: [scaling down]\n"
        );
        assert_eq!(run(&down), Vec::<String>::new());
    }

    #[test]
    fn mutate_cases_compare_the_stored_object_after_the_patch_and_the_patch_itself() {
        let src = format!(
            "mutate:\n  object: {WEB}\n  userInfo: {{ username: a, groups: [storage] }}\nexpect:\n  object: {{ metadata: {{ labels: {{ team: storage, ns: default, kind: Web, res: webs }} }}, spec: {{ replicas: 2 }} }}\n  patch: [{{ op: add, path: /metadata/labels }}]\n"
        );
        assert_eq!(run(&src), Vec::<String>::new());
        let wrong = format!(
            "mutate:\n  object: {WEB}\nexpect:\n  object: {{ metadata: {{ labels: {{ team: x }} }} }}\n"
        );
        assert_eq!(
            run(&wrong),
            [r#"object.metadata.labels.team: expected "x", got "system:authenticated""#]
        );
    }

    #[test]
    fn convert_cases_compare_the_converted_object() {
        let src = format!(
            "convert:\n  object: {WEB}\n  to: v1alpha1\nexpect:\n  object: {{ apiVersion: t.khai.dev/v1alpha1, spec: {{ size: 2, replicas: null }} }}\n"
        );
        assert_eq!(run(&src), Vec::<String>::new());
    }

    #[test]
    fn admission_objects_must_be_at_the_storage_version() {
        let old = "{ apiVersion: t.khai.dev/v1alpha1, kind: Web, metadata: { name: w } }";
        assert_eq!(
            run(&format!("validate:\n  object: {old}\n")),
            [
                "tests/c.yaml: validate.object: admission scripts see Web at its storage version; write apiVersion t.khai.dev/v1"
            ]
        );
    }
}
