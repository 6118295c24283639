//! Checks across fields that types alone cannot express, reported all at once.
//!
//! Everything the API server would reject in a CRD is caught here, before khai connects to a
//! cluster, so an author sees `operator.toml:12:16: crd[0].spec.replicas.default: ...` instead
//! of a 422 from the server naming a generated manifest they never wrote.

mod crd;
mod fields;
mod handlers;
mod kinds;
mod policy;
mod rules;
mod selectable;
mod webhook;

use super::ConfigError;
use super::diag::{self, Diagnostic};
pub(crate) use super::field_path::Seg;
use super::model::Model;
use diag::shorten;
pub(super) use fields::check_pattern;
use std::path::Path;

/// Where checks send each problem: the field path it concerns and the message.
type Report<'r> = dyn FnMut(&[Seg<'_>], String) + 'r;

/// Validates `model`; `src` is the file's text, used to place each problem on its line.
/// Returns the warnings: things that may be right but probably are not.
pub(super) fn validate(
    model: &Model,
    file: &Path,
    src: &str,
) -> Result<Vec<Diagnostic>, ConfigError> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    for (path, message) in kinds::check(model) {
        let path: Vec<Seg> = path.iter().map(|p| p.seg()).collect();
        match message {
            kinds::Finding::Error(m) => problems.push(diagnostic(file, src, &path, m)),
            kinds::Finding::Warning(m) => warnings.push(diagnostic(file, src, &path, m)),
        }
    }
    let mut report =
        |path: &[Seg], message: String| problems.push(diagnostic(file, src, path, message));

    for (i, c) in model.crds.iter().enumerate() {
        crd::check(c, &model.crds[..i], i, &mut report);
        selectable::check(c, i, &mut report);
    }

    check_operator(model, &mut report);

    for (i, ctl) in model.controllers.iter().enumerate() {
        let at = |k| [Seg::Key("controller"), Seg::Index(i), Seg::Key(k)];
        if ctl.script.as_os_str().is_empty() {
            report(&at("script"), "must name a Rhai script".into());
        }
        check_controller(model, i, &mut report);
        if ctl.owns.is_empty() {
            if ctl.unowned_children {
                report(
                    &at("unowned_children"),
                    "the controller owns no kinds, so it has no children; list their kinds in \
                     `owns`"
                        .into(),
                );
            }
            if ctl.delete_children == crate::config::model::DeleteChildren::Ordered {
                report(
                    &at("delete_children"),
                    "the controller owns no kinds, so it has no children to delete in order; \
                     list their kinds in `owns`"
                        .into(),
                );
            }
        }
    }

    for (i, u) in model.operator.uses.iter().enumerate() {
        let at = |k| {
            [
                Seg::Key("operator"),
                Seg::Key("uses"),
                Seg::Index(i),
                Seg::Key(k),
            ]
        };
        if u.verbs.is_empty() {
            report(&at("verbs"), "must name at least one verb".into());
        }
        for (j, v) in u.verbs.iter().enumerate() {
            if !super::model::USES_VERBS.contains(&v.as_str()) {
                let mut path = at("verbs").to_vec();
                path.push(Seg::Index(j));
                report(
                    &path,
                    format!(
                        "unknown verb {v:?}: the k8s module's verbs are {}",
                        super::model::USES_VERBS.join(", ")
                    ),
                );
            }
        }
    }

    webhook::check(model, &mut report);
    policy::check(model, &mut report);
    handlers::check(model, &mut report);

    if problems.is_empty() {
        Ok(warnings)
    } else {
        Err(ConfigError(problems))
    }
}

/// The most characters an operator's name may have: `khai-<name>` names its ServiceAccount,
/// Service and Lease, and a Service's name is a DNS label of at most 63.
pub(crate) const MAX_OPERATOR_NAME: usize = 58;

/// `[operator]`: its name and namespaces.
fn check_operator(model: &Model, report: &mut Report) {
    use super::selector::is_dns_label;
    let op = &model.operator;
    let name = &op.name;
    let starts = name.starts_with(|c: char| c.is_ascii_lowercase());
    if !is_dns_label(name) || !starts || name.len() > MAX_OPERATOR_NAME {
        let shown = shorten(name);
        report(
            &[Seg::Key("operator"), Seg::Key("name")],
            format!(
                "{shown} is not an operator name: at most {MAX_OPERATOR_NAME} lower-case letters, \
                 digits and `-`, starting with a letter and ending with a letter or digit (it \
                 names khai's ServiceAccount, Service and Lease as khai-<name>)"
            ),
        );
    }
    for (j, ns) in op.namespaces.iter().enumerate() {
        let at = [Seg::Key("operator"), Seg::Key("namespaces"), Seg::Index(j)];
        if ns.is_empty() {
            report(
                &at,
                "an empty namespace would make khai watch every namespace; to watch the whole \
                 cluster, leave `namespaces` out"
                    .into(),
            );
        } else if !is_dns_label(ns) {
            report(
                &at,
                format!(
                    "{} is not a namespace name: at most 63 lower-case letters, digits and `-`, \
                     starting and ending with a letter or digit",
                    shorten(ns)
                ),
            );
        }
    }
}

/// `[[controller]]` `i`: its name against the others', its selectors, its backoff.
fn check_controller(model: &Model, i: usize, report: &mut Report) {
    use super::selector::{check_field_selector, check_label_selector};
    let ctl = &model.controllers[i];
    let at = |k| [Seg::Key("controller"), Seg::Index(i), Seg::Key(k)];
    let name = ctl.display_name();
    if let Some(first) = model.controllers[..i]
        .iter()
        .position(|c| c.display_name() == name)
    {
        let key = if ctl.name.is_some() { "name" } else { "for" };
        report(
            &at(key),
            format!(
                "controller[{first}] is also named {name:?}: names tell controllers apart in logs, \
                 metrics and finalizers; give one of them its own name = \"...\""
            ),
        );
    }
    if let Some(s) = &ctl.selector
        && let Err(e) = check_label_selector(s)
    {
        let s = shorten(s);
        report(&at("selector"), format!("{s} is not a label selector: {e}"));
    }
    if let Some(s) = &ctl.field_selector {
        match check_field_selector(s) {
            Err(e) => {
                let s = shorten(s);
                report(
                    &at("field_selector"),
                    format!("{s} is not a field selector: {e}"),
                );
            }
            Ok(fields) => {
                let crd = model.crd_for(&ctl.for_kind);
                if let Some(m) = crd.and_then(|c| selectable::unselectable(c, &fields)) {
                    report(&at("field_selector"), m);
                }
            }
        }
    }
    let (base, cap) = (ctl.backoff.base, ctl.backoff.cap);
    if base > cap {
        report(
            &[
                Seg::Key("controller"),
                Seg::Index(i),
                Seg::Key("backoff"),
                Seg::Key("base"),
            ],
            format!("base {base} is longer than cap {cap}, the longest a retry waits"),
        );
    }
}

/// A problem at `path`, placed on its line when the format allows.
pub(crate) fn diagnostic(file: &Path, src: &str, path: &[Seg], message: String) -> Diagnostic {
    Diagnostic::new(file, message)
        .at(locate(file, src, path))
        .field(render(path))
}

fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

/// Finds the line and column of the value at `path`, walking up to the nearest ancestor that
/// exists. TOML keeps spans through parsing; YAML is walked by indentation
/// ([`super::yaml_locate`]).
fn locate(file: &Path, src: &str, path: &[Seg]) -> Option<(usize, usize)> {
    if matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    ) {
        return super::yaml_locate::locate(src, path);
    }
    let root = toml::de::DeTable::parse(src).ok()?;
    let mut span = root.span();
    let mut node = toml::de::DeValue::Table(root.into_inner());
    for seg in path {
        let next = match (seg, &node) {
            (Seg::Key(k), toml::de::DeValue::Table(t)) => t
                .iter()
                .find(|(key, _)| key.get_ref().as_ref() == *k)
                .map(|(_, v)| v.clone()),
            (Seg::Index(i), toml::de::DeValue::Array(a)) => a.get(*i).cloned(),
            _ => None,
        };
        let Some(next) = next else { break };
        span = next.span();
        node = next.into_inner();
    }
    Some(diag::line_col(src, span.start))
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    #[test]
    fn an_unknown_verb_in_uses_is_named_at_its_line() {
        let src = "[operator]\nuses = [{ kind = \"v1/Pod\", verbs = [\"get\", \"watch\"] }]\n";
        assert_eq!(
            check(src),
            "operator.toml:2:44: operator.uses[0].verbs[1]: unknown verb \"watch\": the k8s \
             module's verbs are get, list, create, apply, patch, patch_status, replace, delete"
        );
    }

    fn check(src: &str) -> String {
        let file = Path::new("operator.toml");
        let model = parse(file, src).unwrap();
        super::validate(&model, file, src).map_or_else(|e| e.to_string(), |_| String::new())
    }

    #[test]
    fn an_operator_name_must_be_a_short_dns_label() {
        let name = |n: &str| check(&format!("[operator]\nname = \"{n}\"\n"));
        assert_eq!(name("cache-2"), "");
        assert_eq!(name(&"a".repeat(super::MAX_OPERATOR_NAME)), "");
        let rule = "is not an operator name: at most 58 lower-case letters, digits and `-`, \
                    starting with a letter and ending with a letter or digit (it names khai's \
                    ServiceAccount, Service and Lease as khai-<name>)";
        assert_eq!(
            name("Bad_Name"),
            format!("operator.toml:2:8: operator.name: \"Bad_Name\" {rule}")
        );
        for bad in ["", "2fast", "ends-", "a.b"] {
            assert!(name(bad).contains(rule), "{bad:?}: {}", name(bad));
        }
        let huge = "a".repeat(100_000);
        assert_eq!(
            name(&huge),
            format!(
                "operator.toml:2:8: operator.name: \"{}\"… (100000 characters) {rule}",
                "a".repeat(60)
            )
        );
        assert!(name(&"a".repeat(super::MAX_OPERATOR_NAME + 1)).contains(rule));
    }

    #[test]
    fn namespaces_must_be_namespace_names() {
        let src = "[operator]\nnamespaces = [\"team-a\", \"\", \"Bad_NS\"]\n";
        assert_eq!(
            check(src),
            "operator.toml:2:25: operator.namespaces[1]: an empty namespace would make khai \
             watch every namespace; to watch the whole cluster, leave `namespaces` out\n\
             operator.toml:2:29: operator.namespaces[2]: \"Bad_NS\" is not a namespace name: at \
             most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit"
        );
    }

    const CM: &str = "[[controller]]\nfor = \"v1/ConfigMap\"\nscript = \"c.rhai\"\n";

    #[test]
    fn selectors_the_api_server_cannot_parse_are_errors_at_their_line() {
        let src = format!("{CM}selector = \"app=web,,tier\"\nfield_selector = \"metadata.name\"\n");
        assert_eq!(
            check(&src),
            "operator.toml:4:12: controller[0].selector: \"app=web,,tier\" is not a label \
             selector: expected a label key before \",\"\n\
             operator.toml:5:18: controller[0].field_selector: \"metadata.name\" is not a field \
             selector: \"metadata.name\" has no `=`, `==` or `!=`"
        );
        let good = format!(
            "{CM}selector = \"app in (a, b),!canary\"\nfield_selector = \"status.phase!=x\"\n"
        );
        assert_eq!(check(&good), "");
        // A custom resource can be selected by name and namespace only.
        let crd = format!(
            "{NOTE}\n[[controller]]\nfor = \"Note\"\nscript = \"n.rhai\"\nfield_selector = \"spec.x=1\"\n"
        );
        assert_eq!(
            check(&crd),
            "operator.toml:9:18: controller[0].field_selector: custom resources can be selected by \
             metadata.name, metadata.namespace and the CRD's selectable_fields only, not \"spec.x\"; \
             declare it in selectable_fields = [\".spec.x\"]"
        );
        assert_eq!(check(&crd.replace("spec.x=1", "metadata.name!=a")), "");
    }

    #[test]
    fn controller_names_are_unique_and_backoff_base_at_most_cap() {
        let src = format!("{CM}\n{CM}");
        assert_eq!(
            check(&src),
            "operator.toml:6:7: controller[1].for: controller[0] is also named \"configmap\": \
             names tell controllers apart in logs, metrics and finalizers; give one of them its \
             own name = \"...\""
        );
        let named = format!("{CM}name = \"a\"\n\n{CM}name = \"a\"\n");
        assert!(
            check(&named).starts_with("operator.toml:9:8: controller[1].name: controller[0]"),
            "{}",
            check(&named)
        );
        assert_eq!(check(&format!("{CM}\n{CM}name = \"b\"\n")), "");
        let backoff = format!("{CM}backoff = {{ base = \"10m\", cap = \"5m\" }}\n");
        assert_eq!(
            check(&backoff),
            "operator.toml:4:20: controller[0].backoff.base: base 10m is longer than cap 5m, the \
             longest a retry waits"
        );
    }

    #[test]
    fn yaml_problems_are_placed_on_their_line_too() {
        let src = "crd:\n  - group: a.b\n    kind: Cache\n    versions: [v1]\ncontroller:\n  - for: Cahce\n    script: c.rhai\n";
        let file = Path::new("operator.yaml");
        let model = parse(file, src).unwrap();
        let err = super::validate(&model, file, src).unwrap_err().to_string();
        assert_eq!(
            err,
            "operator.yaml:6:5: controller[0].for: unknown kind \"Cahce\" (did you mean \"Cache\"?)"
        );
    }

    #[test]
    fn misspelled_controller_kind_gets_a_suggestion_at_its_line() {
        let src = "[[crd]]\ngroup = \"a.b\"\nkind = \"Cache\"\nversions = [\"v1\"]\n\n[[controller]]\nfor = \"Cahce\"\nscript = \"c.rhai\"\n";
        assert_eq!(
            check(src),
            "operator.toml:7:7: controller[0].for: unknown kind \"Cahce\" (did you mean \"Cache\"?)"
        );
    }

    const NOTE: &str = "[[crd]]\ngroup = \"a.b\"\nkind = \"Note\"\nversions = [\"v1\"]\n";

    #[test]
    fn a_field_handler_without_its_field_is_an_error_at_its_on() {
        let src =
            format!("{NOTE}\n[[handler]]\nfor = \"Note\"\non = \"field\"\nscript = \"h.rhai\"\n");
        assert_eq!(
            check(&src),
            "operator.toml:8:6: handler[0].on: on = \"field\" needs the field to watch: add \
             field = \"spec.<name>\" (a dotted path), or use on = \"update\" for any change"
        );
        let with = src.replace("on = \"field\"", "on = \"field\"\nfield = \"spec.size\"");
        assert_eq!(check(&with), "");
    }

    #[test]
    fn two_handlers_of_one_kind_with_one_id_are_an_error_at_the_second() {
        let handler = |on: &str, extra: &str| {
            format!("\n[[handler]]\nfor = \"Note\"\non = \"{on}\"\nscript = \"h.rhai\"\n{extra}")
        };
        // The same function for a field and an update: both run for one update.
        let src = format!(
            "{NOTE}{}{}",
            handler("field", "field = \"spec.a\"\nfunction = \"f\"\n"),
            handler("update", "function = \"f\"\n")
        );
        assert_eq!(
            check(&src),
            "operator.toml:17:12: handler[1].function: handler[0] for Note records its progress \
             under the same id \"f\", and both can run for one change: the second would be \
             skipped as already done; give one of them its own id = \"...\""
        );
        // Two field handlers on the default function name, the second with an explicit id: fine.
        let distinct = format!(
            "{NOTE}{}{}",
            handler("field", "field = \"spec.a\"\nfunction = \"f\"\n"),
            handler(
                "field",
                "field = \"spec.b\"\nfunction = \"f\"\nid = \"f-b\"\n"
            )
        );
        assert_eq!(check(&distinct), "");
        // One id given twice: the error is at the second's id.
        let ids = format!(
            "{NOTE}{}{}",
            handler("create", "id = \"x\"\n"),
            handler("field", "field = \"spec.b\"\nid = \"x\"\n")
        );
        assert!(
            check(&ids).starts_with("operator.toml:17:6: handler[1].id: "),
            "{}",
            check(&ids)
        );
        // Create and update never run for one change, so one function may serve both; nor do
        // handlers of different kinds, or a spy, share anything.
        let apart = format!(
            "{NOTE}{}{}{}",
            handler("create", "function = \"f\"\n"),
            handler("update", "function = \"f\"\n"),
            handler("event", "function = \"f\"\n")
        );
        assert_eq!(check(&apart), "");
    }

    /// The children options of a controller that owns nothing are errors at their line.
    #[test]
    fn children_options_without_owned_kinds_are_errors_at_their_line() {
        let src = "[[controller]]\nfor = \"v1/ConfigMap\"\nscript = \"c.rhai\"\nunowned_children = true\ndelete_children = \"ordered\"\n";
        assert_eq!(
            check(src),
            "operator.toml:4:20: controller[0].unowned_children: the controller owns no kinds, so \
             it has no children; list their kinds in `owns`\n\
             operator.toml:5:19: controller[0].delete_children: the controller owns no kinds, so \
             it has no children to delete in order; list their kinds in `owns`"
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let src = "[[crd]]\ngroup = \"nodot\"\nkind = \"lower\"\nversions = [\"v1\", \"v2\"]\n";
        let out = check(src);
        assert_eq!(out.lines().count(), 3, "{out}");
        assert!(out.contains("operator.toml:2:9: crd[0].group"), "{out}");
        assert!(out.contains("crd[0].kind"), "{out}");
        assert!(
            out.contains("exactly one version must set storage = true, found 0"),
            "{out}"
        );
    }
}
