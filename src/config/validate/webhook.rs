//! Checks of `[[webhook]]` entries and `[webhook_server]`: every webhook names a function to
//! call, conversion is only asked of a multi-version CRD of this file, names are unique and fit
//! in URL paths and configuration names, match conditions are named once each and parse as CEL,
//! and `tls = "files"` names both files.

use super::{Report, Seg};
use crate::config::field_path::join;
use crate::config::model::Model;
use crate::config::webhook::{MatchCondition, TlsMode, Webhook};

/// Checks every webhook of `model` and the server settings.
pub(super) fn check(model: &Model, report: &mut Report) {
    let mut seen: Vec<String> = Vec::new();
    for (i, hook) in model.webhooks.iter().enumerate() {
        check_one(model, hook, i, report);
        let name = hook.display_name();
        if seen.contains(&name) {
            report(
                &[Seg::Key("webhook"), Seg::Index(i), Seg::Key("name")],
                format!("another webhook is already named {name:?}; set `name` to tell them apart"),
            );
        }
        seen.push(name);
    }
    check_server(model, report);
}

fn check_one(model: &Model, hook: &Webhook, i: usize, report: &mut Report) {
    let at = |k| [Seg::Key("webhook"), Seg::Index(i), Seg::Key(k)];
    if hook.script.as_os_str().is_empty() {
        report(&at("script"), "must name a Rhai script".into());
    }
    if hook.validate.is_none() && hook.mutate.is_none() && hook.convert.is_none() {
        report(
            &at("for"),
            "set at least one of `validate`, `mutate` or `convert`".into(),
        );
    }
    let name = hook.display_name();
    if !is_dns_label(&name) {
        report(
            &at("name"),
            format!(
                "{name:?} must be lower-case letters, digits and '-' (it is used in URL paths)"
            ),
        );
    }
    if !(1..=30).contains(&hook.timeout_seconds) {
        report(
            &at("timeout_seconds"),
            format!("must be between 1 and 30, got {}", hook.timeout_seconds),
        );
    }
    if hook.operations.is_empty() && (hook.validate.is_some() || hook.mutate.is_some()) {
        report(&at("operations"), "must name at least one operation".into());
    }
    check_subresources(model, hook, i, report);
    let base = [
        Seg::Key("webhook"),
        Seg::Index(i),
        Seg::Key("match_conditions"),
    ];
    check_match_conditions(&hook.match_conditions, &base, report);
    if hook.convert.is_some() {
        let crd = model.crd_for(&hook.for_kind);
        match crd {
            None => report(
                &at("convert"),
                format!(
                    "conversion needs a CRD of this file, and {:?} is not one",
                    hook.for_kind.to_string()
                ),
            ),
            Some(c) if c.versions.len() < 2 => report(
                &at("convert"),
                format!(
                    "CRD {} has one version; conversion needs two or more",
                    c.kind
                ),
            ),
            Some(_) => {}
        }
    }
}

/// At most 64 conditions, each with a unique qualified name and an expression that parses as
/// CEL, as the API server requires; `base` is the path of the list.
pub(super) fn check_match_conditions(
    conditions: &[MatchCondition],
    base: &[Seg],
    report: &mut Report,
) {
    if conditions.len() > 64 {
        report(base, "at most 64 conditions".into());
    }
    for (j, c) in conditions.iter().enumerate() {
        let at = |k| join(base, &[Seg::Index(j), Seg::Key(k)]);
        let qualified = c.name.len() <= 63
            && c.name.starts_with(|ch: char| ch.is_ascii_alphanumeric())
            && c.name.ends_with(|ch: char| ch.is_ascii_alphanumeric())
            && c.name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch));
        if !qualified {
            report(
                &at("name"),
                format!(
                    "{:?} must be at most 63 letters, digits, '-', '_' or '.', starting and \
                     ending with a letter or digit",
                    c.name
                ),
            );
        }
        if conditions[..j].iter().any(|o| o.name == c.name) {
            report(&at("name"), format!("{:?} is used twice", c.name));
        }
        if let Err(e) = super::rules::parse(&c.expression) {
            report(&at("expression"), e);
        }
    }
}

/// Names a rule can use: `""` (the object), `"*"`, or a lower-case name; each once. For a CRD of
/// this file, only the subresources it has.
fn check_subresources(model: &Model, hook: &Webhook, i: usize, report: &mut Report) {
    let at = |j: usize| {
        [
            Seg::Key("webhook"),
            Seg::Index(i),
            Seg::Key("subresources"),
            Seg::Index(j),
        ]
    };
    let crd = model.crd_for(&hook.for_kind);
    for (j, name) in hook.subresources.iter().enumerate() {
        if hook.subresources[..j].contains(name) {
            report(&at(j), format!("{name:?} is listed twice"));
            continue;
        }
        if !(name.is_empty() || name == "*" || is_dns_label(name)) {
            report(
                &at(j),
                format!(
                    "{name:?} must be a subresource name such as \"status\" or \"scale\", \"*\" \
                     for all of them, or \"\" for the object itself"
                ),
            );
            continue;
        }
        if let Some(crd) = crd {
            let has = match name.as_str() {
                // A schema from a file may declare status; only the compact one is known here.
                "status" => {
                    crd.status.is_some() || crd.raw_schema.is_some() || crd.schema_file.is_some()
                }
                "scale" => crd.scale.is_some(),
                _ => true,
            };
            if !has {
                report(
                    &at(j),
                    format!("CRD {} has no {name} subresource", crd.kind),
                );
            }
        }
    }
    if hook.convert.is_some()
        && hook.validate.is_none()
        && hook.mutate.is_none()
        && !hook.subresources.is_empty()
    {
        report(
            &[Seg::Key("webhook"), Seg::Index(i), Seg::Key("subresources")],
            "only admission rules (validate, mutate) cover subresources; conversion always \
             covers the whole object"
                .into(),
        );
    }
}

fn check_server(model: &Model, report: &mut Report) {
    let server = &model.webhook_server;
    let at = |k| [Seg::Key("webhook_server"), Seg::Key(k)];
    if server.tls == TlsMode::Files {
        for (key, value) in [
            ("cert_file", &server.cert_file),
            ("key_file", &server.key_file),
        ] {
            if value.is_none() {
                report(&at(key), format!("tls = \"files\" needs `{key}`"));
            }
        }
    }
    for (key, value) in [
        ("reload_interval", &server.reload_interval),
        ("request_timeout", &server.request_timeout),
    ] {
        match crate::config::duration::parse(value) {
            Err(e) => report(&at(key), e.to_string()),
            Ok(d) if d.is_zero() => report(&at(key), "must be more than zero".into()),
            Ok(_) => {}
        }
    }
    for (key, value) in [
        ("max_connections", server.max_connections),
        ("max_concurrent_reviews", server.max_concurrent_reviews),
        (
            "max_concurrent_conversions",
            server.max_concurrent_conversions,
        ),
    ] {
        if value == 0 {
            report(&at(key), "must be at least 1".into());
        }
    }
    if server.max_body_bytes < 1024 {
        report(
            &at("max_body_bytes"),
            format!("must be at least 1024, got {}", server.max_body_bytes),
        );
    }
}

pub(super) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
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

    const CRD: &str = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Cache\"\nversions = [\"v1\"]\n\n";

    #[test]
    fn conversion_of_a_single_version_crd_is_an_error_at_its_line() {
        let src = format!(
            "{CRD}[[webhook]]\nfor = \"Cache\"\nscript = \"c.rhai\"\nconvert = \"convert\"\n"
        );
        assert_eq!(
            check(&src),
            "operator.toml:9:11: webhook[0].convert: CRD Cache has one version; conversion needs two or more"
        );
    }

    #[test]
    fn match_conditions_need_unique_qualified_names_and_cel_that_parses() {
        let src = format!(
            "{CRD}[[webhook]]\nfor = \"Cache\"\nscript = \"c.rhai\"\nvalidate = \"v\"\n\
             match_conditions = [\n  {{ name = \"ok\", expression = \"has(object.spec)\" }},\n  \
             {{ name = \"ok\", expression = \"object.spec.(\" }},\n  {{ name = \"-bad\", expression = \"true\" }},\n]\n"
        );
        let out = check(&src);
        assert!(
            out.contains("operator.toml:12:")
                && out.contains("webhook[0].match_conditions[1].name: \"ok\" is used twice"),
            "{out}"
        );
        assert!(
            out.contains("webhook[0].match_conditions[1].expression: not valid CEL at column "),
            "{out}"
        );
        assert!(
            out.contains("webhook[0].match_conditions[2].name: \"-bad\" must be at most 63"),
            "{out}"
        );
        assert!(!out.contains("match_conditions[0]"), "{out}");
    }

    #[test]
    fn webhook_without_functions_and_files_tls_without_files_are_reported() {
        let src = format!(
            "{CRD}[webhook_server]\ntls = \"files\"\n\n[[webhook]]\nfor = \"Cache\"\nscript = \"c.rhai\"\ntimeout_seconds = 31\n"
        );
        let out = check(&src);
        assert!(
            out.contains("webhook[0].for: set at least one of `validate`, `mutate` or `convert`"),
            "{out}"
        );
        assert!(
            out.contains("webhook[0].timeout_seconds: must be between 1 and 30, got 31"),
            "{out}"
        );
        assert!(
            out.contains("webhook_server.cert_file: tls = \"files\" needs `cert_file`"),
            "{out}"
        );
        assert!(out.contains("webhook_server.key_file"), "{out}");
    }
}
