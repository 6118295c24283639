//! What the API server evaluates in CEL around an admission webhook, for `khai test`'s
//! `validate` and `mutate` cases: the CRD's validation rules, which refuse an object before any
//! webhook runs, and the webhook's `match_conditions`, which keep requests from it.

use crate::operator::Operator;
use crate::webhook::Handler;
use crate::webhook::admission::Verdict;
use serde_json::Value;

/// Whether the API server would not call the webhook: one of its `match_conditions` is false.
/// A condition the CEL crate cannot evaluate counts as true, leaving the call to the script.
pub(super) fn skipped(handler: &Handler, request: &Value) -> bool {
    let vars = [
        ("object", &request["object"]),
        ("oldObject", &request["oldObject"]),
        ("request", request),
    ];
    handler
        .hook
        .match_conditions
        .iter()
        .any(|c| crate::schema::rules::evaluate_bool(&c.expression, &vars) == Some(false))
}

/// The API server's refusal of `object` when it breaks a validation rule of its CRD.
pub(super) fn broken_rule(op: &Operator, object: &Value, old: &Value) -> Option<Verdict> {
    let kind = object["kind"].as_str()?;
    let group = object["apiVersion"].as_str()?.rsplit_once('/')?.0;
    let crd = op
        .config
        .model
        .crds
        .iter()
        .find(|c| c.kind == kind && c.group == group)?;
    let old = Some(old).filter(|o| !o.is_null());
    let v = crate::schema::rules::first_violation(crd, object, old)?;
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let path = if v.path.is_empty() { "<nil>" } else { &v.path };
    Some(Verdict::Deny {
        message: format!(
            "{kind}.{group} {name:?} is invalid: {path}: Invalid value: \"object\": {}",
            v.message
        ),
        reason: "Invalid".into(),
        code: 422,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{case, run_case};
    use std::path::Path;

    const SCRIPT: &str = r#"
fn validate(req) {
    if req.object.spec.replicas > 5 { return deny(`${req.userInfo.username} asked for too many`, "Invalid", 422); }
}
"#;

    /// An operator with one CRD and a validating webhook.
    fn operator() -> (tempfile::TempDir, crate::operator::Operator) {
        let toml = concat!(
            "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\n",
            "versions = [\"v1\"]\n",
            "spec.replicas = { type = \"integer\", default = 2 }\nspec.size = { type = \"integer\" }\n\n",
            "[[webhook]]\nfor = \"Web\"\nscript = \"w.rhai\"\nvalidate = \"validate\"\n",
        );
        super::super::tests::load_operator(toml, "w.rhai", SCRIPT)
    }

    /// The API server refuses an object that breaks a CRD rule before the webhook runs; a
    /// transition rule only on an update.
    #[test]
    fn validate_cases_are_refused_by_the_crds_rules_first() {
        let (dir, op) = operator();
        let toml = std::fs::read_to_string(dir.path().join("operator.toml")).unwrap().replace(
            "spec.size = { type = \"integer\" }",
            "spec.size = { type = \"integer\", rules = [{ rule = \"self <= 10\", message = \"size is at most 10\" }, { rule = \"self >= oldSelf\", message = \"size never shrinks\" }] }",
        );
        drop(op);
        let (_dir, op) = super::super::tests::load_operator(&toml, "w.rhai", SCRIPT);
        let run = |src: &str| {
            let c = case::parse(Path::new("tests/c.yaml"), src).unwrap();
            run_case(&op, &c)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let with = |size: u32| {
            format!(
                "{{ apiVersion: t.khai.dev/v1, kind: Web, metadata: {{ name: w }}, spec: {{ size: {size} }} }}"
            )
        };
        let refused = format!(
            "validate:\n  object: {}\nexpect:\n  message: 'Web.t.khai.dev \"w\" is invalid: spec.size: Invalid value: \"object\": size is at most 10'\n  code: 422\n",
            with(11)
        );
        assert_eq!(run(&refused), Vec::<String>::new());
        assert_eq!(
            run(&format!("validate:\n  object: {}\n", with(3))),
            Vec::<String>::new()
        );
        let shrink = format!(
            "validate:\n  operation: UPDATE\n  oldObject: {}\n  object: {}\nexpect:\n  message: size never shrinks\n",
            with(5),
            with(3)
        );
        assert_eq!(run(&shrink), Vec::<String>::new());
    }

    /// The API server does not call a webhook whose match conditions are not all true.
    #[test]
    fn validate_cases_skip_the_webhook_when_a_match_condition_is_false() {
        let (dir, _op) = operator();
        let toml = std::fs::read_to_string(dir.path().join("operator.toml"))
            .unwrap()
            .replace(
                "validate = \"validate\"\n",
                "validate = \"validate\"\nmatch_conditions = [{ name = \"labelled\", expression = \"has(object.metadata.labels)\" }]\n",
            );
        let (_dir, op) = super::super::tests::load_operator(&toml, "w.rhai", SCRIPT);
        let run = |object: &str| {
            let src = format!("validate:\n  object: {object}\nexpect:\n  allowed: true\n");
            let c = case::parse(Path::new("tests/c.yaml"), &src).unwrap();
            run_case(&op, &c)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let big = "{ apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: { replicas: 9 } }";
        assert_eq!(run(big), Vec::<String>::new());
        let labelled = big.replace("name: w }", "name: w, labels: { a: b } }");
        assert_eq!(
            run(&labelled),
            [r#"allowed: expected true, got false (Invalid 422: "khai-test asked for too many")"#]
        );
    }
}
