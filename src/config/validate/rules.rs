//! Checks of CRD validation rules (`rules = [{ rule = "…" }]`, emitted as
//! `x-kubernetes-validations`): each rule and `message_expression` parses as CEL, and each
//! message is one line, as the API server requires.

use super::{Report, Seg};
use crate::config::field_path::join;
use crate::config::model::{Crd, Field, Rule};
use indexmap::IndexMap;

/// Checks the rules on `crd`'s whole object and on every node of its `spec` and `status`.
pub(super) fn check(crd: &Crd, base: &[Seg], report: &mut Report) {
    check_rules(&crd.rules, &join(base, &[Seg::Key("rules")]), report);
    check_object(&crd.spec, &join(base, &[Seg::Key("spec")]), report);
    if let Some(status) = &crd.status {
        check_object(status, &join(base, &[Seg::Key("status")]), report);
    }
}

fn check_object(fields: &IndexMap<String, Field>, at: &[Seg], report: &mut Report) {
    for (name, f) in fields {
        check_field(f, &join(at, &[Seg::Key(name)]), report);
    }
}

fn check_field(f: &Field, at: &[Seg], report: &mut Report) {
    check_rules(&f.rules, &join(at, &[Seg::Key("rules")]), report);
    if let Some(items) = &f.items {
        check_field(items, &join(at, &[Seg::Key("items")]), report);
    }
    if let Some(values) = &f.values {
        check_field(values, &join(at, &[Seg::Key("values")]), report);
    }
    if let Some(props) = &f.properties {
        check_object(props, &join(at, &[Seg::Key("properties")]), report);
    }
}

fn check_rules(rules: &[Rule], at: &[Seg], report: &mut Report) {
    for (i, r) in rules.iter().enumerate() {
        let at = join(at, &[Seg::Index(i)]);
        let key = |k| join(&at, &[Seg::Key(k)]);
        if let Err(e) = parse(&r.rule) {
            report(&key("rule"), e);
        }
        if let Some(expr) = &r.message_expression
            && let Err(e) = parse(expr)
        {
            report(&key("message_expression"), e);
        }
        if let Some(m) = &r.message
            && (m.trim().is_empty() || m.contains(['\n', '\r']))
        {
            report(&key("message"), "must be one line of text".into());
        }
        if let Some(p) = &r.field_path
            && !p.starts_with('.')
        {
            report(
                &key("field_path"),
                format!(
                    "{p:?} must be a path from the rule's node starting with '.', e.g. \".spec.max\""
                ),
            );
        }
    }
}

/// Parses `expr` as CEL; the error names the column in the expression and the parser's words.
pub(crate) fn parse(expr: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expr).map_err(|errors| {
        let first = errors.errors.first();
        let (line, column) = first.map_or((0, 0), |e| e.pos);
        let msg = first.map_or_else(|| errors.to_string(), |e| e.msg.clone());
        if line > 1 {
            format!("not valid CEL at line {line}, column {column}: {msg}")
        } else {
            format!("not valid CEL at column {column}: {msg}")
        }
    })
}
