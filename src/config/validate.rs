//! Checks across fields that types alone cannot express, reported all at once.

use super::ConfigError;
use super::diag::{self, Diagnostic};
use super::model::Model;
use std::path::Path;

/// One segment of a field path.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// Validates `model`; `src` is the file's text, used to place each problem on its line.
pub fn validate(model: &Model, file: &Path, src: &str) -> Result<(), ConfigError> {
    let mut problems = Vec::new();
    let mut report = |path: &[Seg], message: String| {
        problems.push(
            Diagnostic::new(file, message)
                .at(locate(file, src, path))
                .field(render(path)),
        );
    };

    for (i, crd) in model.crds.iter().enumerate() {
        let at = |k| [Seg::Key("crd"), Seg::Index(i), Seg::Key(k)];
        if !crd.group.contains('.') {
            report(
                &at("group"),
                format!(
                    "group {:?} must be a DNS subdomain with a dot, e.g. \"example.com\"",
                    crd.group
                ),
            );
        }
        if !crd.kind.starts_with(|c: char| c.is_ascii_uppercase())
            || !crd.kind.chars().all(|c| c.is_ascii_alphanumeric())
        {
            report(
                &at("kind"),
                format!(
                    "kind {:?} must be alphanumeric and start with an upper-case letter",
                    crd.kind
                ),
            );
        }
        if crd.versions.is_empty() {
            report(&at("versions"), "at least one version is required".into());
        }
        let storage = crd.versions.iter().filter(|v| v.storage_flag()).count();
        if crd.versions.len() > 1 && storage != 1 {
            report(
                &at("versions"),
                format!("exactly one version must set storage = true, found {storage}"),
            );
        }
        if let Some(v) = crd.versions.iter().find(|v| !is_version_name(v.name())) {
            report(
                &at("versions"),
                format!(
                    "version {:?} must look like v1, v1beta1 or v2alpha3",
                    v.name()
                ),
            );
        }
        if model.crds[..i]
            .iter()
            .any(|o| o.kind == crd.kind && o.group == crd.group)
        {
            report(
                &at("kind"),
                format!(
                    "kind {:?} in group {:?} is declared twice",
                    crd.kind, crd.group
                ),
            );
        }
    }

    let kinds: Vec<&str> = model.crds.iter().map(|c| c.kind.as_str()).collect();
    for (i, ctl) in model.controllers.iter().enumerate() {
        let at = |k| [Seg::Key("controller"), Seg::Index(i), Seg::Key(k)];
        let bare = !ctl.for_kind.contains('/') && !ctl.for_kind.contains('.');
        // A bare kind that matches no CRD here may still be built in (resolved by discovery),
        // but one that is one typo away from a declared CRD almost certainly is not.
        if bare
            && !kinds.contains(&ctl.for_kind.as_str())
            && let Some(s) = diag::did_you_mean(&ctl.for_kind, kinds.iter().copied())
        {
            report(
                &at("for"),
                format!("unknown kind {:?} (did you mean {s:?}?)", ctl.for_kind),
            );
        }
        if ctl.for_kind.is_empty() {
            report(&at("for"), "must name a kind".into());
        }
        if ctl.script.as_os_str().is_empty() {
            report(&at("script"), "must name a Rhai script".into());
        }
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError(problems))
    }
}

fn is_version_name(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let tail = &rest[digits..];
    digits > 0
        && (tail.is_empty()
            || ["alpha", "beta"].iter().any(|p| {
                tail.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            }))
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
/// exists. Only TOML keeps spans through parsing; YAML problems are reported without a line.
fn locate(file: &Path, src: &str, path: &[Seg]) -> Option<(usize, usize)> {
    if matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    ) {
        return None;
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

    fn check(src: &str) -> String {
        let file = Path::new("operator.toml");
        let model = parse(file, src).unwrap();
        super::validate(&model, file, src).map_or_else(|e| e.to_string(), |()| String::new())
    }

    #[test]
    fn misspelled_controller_kind_gets_a_suggestion_at_its_line() {
        let src = "[[crd]]\ngroup = \"a.b\"\nkind = \"Cache\"\nversions = [\"v1\"]\n\n[[controller]]\nfor = \"Cahce\"\nscript = \"c.rhai\"\n";
        assert_eq!(
            check(src),
            "operator.toml:7:7: controller[0].for: unknown kind \"Cahce\" (did you mean \"Cache\"?)"
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

    #[test]
    fn version_names_follow_kubernetes_rules() {
        for ok in ["v1", "v1beta1", "v2alpha3"] {
            assert!(super::is_version_name(ok), "{ok}");
        }
        for bad in ["1", "v", "v1gamma1", "v1beta", "V1"] {
            assert!(!super::is_version_name(bad), "{bad}");
        }
    }
}
