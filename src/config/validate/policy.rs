//! Checks of `[[policy]]` entries: names that fit the policy's and binding's object names and
//! are unique, at least one kind, operation and rule, every rule and match condition parses as
//! CEL, and `validation_actions` the API server accepts.

use super::webhook::{check_match_conditions, is_dns_label};
use super::{Report, Seg};
use crate::config::field_path::join;
use crate::config::model::Model;
use crate::config::policy::{Policy, ValidationAction};

/// Checks every policy of `model`.
pub(super) fn check(model: &Model, report: &mut Report) {
    for (i, policy) in model.policies.iter().enumerate() {
        let base = [Seg::Key("policy"), Seg::Index(i)];
        let at = |k| join(&base, &[Seg::Key(k)]);
        if !is_dns_label(&policy.name) {
            report(
                &at("name"),
                format!(
                    "{:?} must be lower-case letters, digits and '-', at most 63 (it names the \
                     ValidatingAdmissionPolicy khai-<operator>-<name>)",
                    policy.name
                ),
            );
        } else if model.policies[..i].iter().any(|p| p.name == policy.name) {
            report(
                &at("name"),
                format!("another policy is already named {:?}", policy.name),
            );
        }
        for (key, empty) in [
            ("for", policy.for_kinds.is_empty()),
            ("operations", policy.operations.is_empty()),
            ("rules", policy.rules.is_empty()),
        ] {
            if empty {
                report(&at(key), "needs at least one entry".into());
            }
        }
        check_rules(policy, &base, report);
        check_match_conditions(&policy.match_conditions, &at("match_conditions"), report);
        check_actions(policy, &at("validation_actions"), report);
    }
}

fn check_rules(policy: &Policy, base: &[Seg], report: &mut Report) {
    for (j, r) in policy.rules.iter().enumerate() {
        let at = |k| join(base, &[Seg::Key("rules"), Seg::Index(j), Seg::Key(k)]);
        if let Err(e) = super::rules::parse(&r.rule) {
            report(&at("rule"), e);
        }
        if let Some(expr) = &r.message_expression
            && let Err(e) = super::rules::parse(expr)
        {
            report(&at("message_expression"), e);
        }
        if let Some(m) = &r.message
            && (m.trim().is_empty() || m.contains(['\n', '\r']))
        {
            report(&at("message"), "must be one line of text".into());
        }
    }
}

/// At least one action, each once, and never `Deny` with `Warn` (the API server refuses that:
/// a denied request has nothing to warn about).
fn check_actions(policy: &Policy, at: &[Seg], report: &mut Report) {
    let actions = &policy.validation_actions;
    if actions.is_empty() {
        report(at, "must name at least one of Deny, Warn or Audit".into());
    }
    for (j, a) in actions.iter().enumerate() {
        if actions[..j].contains(a) {
            report(
                &join(at, &[Seg::Index(j)]),
                format!("{a:?} is listed twice"),
            );
        }
    }
    if actions.contains(&ValidationAction::Deny) && actions.contains(&ValidationAction::Warn) {
        report(
            at,
            "Deny and Warn cannot be used together; use Deny, or Warn with Audit".into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    fn check(src: &str) -> String {
        let file = Path::new("operator.toml");
        let model = parse(file, src).unwrap();
        super::super::validate(&model, file, src).map_or_else(|e| e.to_string(), |_| String::new())
    }

    #[test]
    fn a_valid_policy_passes() {
        let src = "[[policy]]\nname = \"replicas\"\nfor = [\"apps/v1/Deployment\"]\n\
                   rules = [{ rule = \"object.spec.replicas <= 5\", message = \"at most 5\" }]\n";
        assert_eq!(check(src), "");
    }

    #[test]
    fn bad_cel_names_and_actions_are_errors_at_their_line() {
        let src = "[[policy]]\nname = \"r\"\nfor = [\"apps/v1/Deployment\"]\nrules = []\n\n\
                   [[policy]]\nname = \"r\"\nfor = [\"apps/v1/Deployment\"]\n\
                   rules = [\n  { rule = \"object.spec.(\" },\n  { rule = \"true\", message_expression = \"'a' +\" },\n]\n\
                   match_conditions = [{ name = \"x\", expression = \"has(\" }]\n\
                   validation_actions = [\"Deny\", \"Warn\"]\n";
        let out = check(src);
        for want in [
            "operator.toml:4:9: policy[0].rules: needs at least one entry",
            "operator.toml:7:8: policy[1].name: another policy is already named \"r\"",
            "operator.toml:10:12: policy[1].rules[0].rule: not valid CEL at column ",
            "policy[1].rules[1].message_expression: not valid CEL",
            "operator.toml:13:",
            "policy[1].match_conditions[0].expression: not valid CEL",
            "operator.toml:14:22: policy[1].validation_actions: Deny and Warn cannot be used together",
        ] {
            assert!(out.contains(want), "missing {want:?} in:\n{out}");
        }
    }

    #[test]
    fn a_misspelled_kind_of_the_config_is_an_error_at_its_line() {
        let src = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Widget\"\nversions = [\"v1\"]\n\n\
                   [[policy]]\nname = \"w\"\nfor = [\"Widget\", \"Widgte\"]\nrules = [{ rule = \"true\" }]\n";
        assert_eq!(
            check(src),
            "operator.toml:8:18: policy[0].for[1]: unknown kind \"Widgte\" (did you mean \"Widget\"?)"
        );
    }
}
