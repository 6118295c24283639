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

    /// Runs a case (YAML) on an operator with one CRD, whose `size` field has `size_rules`, and
    /// a validating webhook with `hook_extra` lines; returns the mismatches.
    fn runner(size_rules: &str, hook_extra: &str) -> impl Fn(&str) -> Vec<String> {
        let toml = format!(
            "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\n\
             versions = [\"v1\"]\nspec.replicas = {{ type = \"integer\", default = 2 }}\n\
             spec.size = {{ type = \"integer\", rules = [{size_rules}] }}\n\n\
             [[webhook]]\nfor = \"Web\"\nscript = \"w.rhai\"\nvalidate = \"validate\"\n{hook_extra}"
        );
        let (dir, op) = super::super::tests::load_operator(&toml, "w.rhai", SCRIPT);
        move |src: &str| {
            let _dir = &dir;
            let c = case::parse(Path::new("tests/c.yaml"), src).unwrap();
            let found = run_case(&op, &c).unwrap();
            found.iter().map(ToString::to_string).collect()
        }
    }

    /// The API server refuses an object that breaks a CRD rule before the webhook runs; a
    /// transition rule only on an update.
    #[test]
    fn validate_cases_are_refused_by_the_crds_rules_first() {
        let run = runner(
            "{ rule = \"self <= 10\", message = \"size is at most 10\" }, { rule = \"self >= oldSelf\", message = \"size never shrinks\" }",
            "",
        );
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
        let fine = format!("validate:\n  object: {}\n", with(3));
        assert_eq!(run(&fine), Vec::<String>::new());
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
        let run = runner(
            "",
            "match_conditions = [{ name = \"labelled\", expression = \"has(object.metadata.labels)\" }]\n",
        );
        let case =
            |object: &str| format!("validate:\n  object: {object}\nexpect:\n  allowed: true\n");
        let big = "{ apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: { replicas: 9 } }";
        assert_eq!(run(&case(big)), Vec::<String>::new());
        let labelled = big.replace("name: w }", "name: w, labels: { a: b } }");
        assert_eq!(
            run(&case(&labelled)),
            [r#"allowed: expected true, got false (Invalid 422: "khai-test asked for too many")"#]
        );
    }
}
