//! Every kind the config names, checked against what khai knows offline: a kind one typo away
//! from a CRD of the file is an error; a bare kind that is neither a CRD of the file nor a
//! built-in kind khai knows gets a warning (with a did-you-mean), since `khai run` can still
//! find it through discovery.

use crate::config::diag;
use crate::config::field_path::Seg;
use crate::config::kind::{BUILTIN, KindRef};
use crate::config::model::Model;

/// A field path with owned keys.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Key(&'static str),
    Index(usize),
}

impl Step {
    pub(crate) fn seg(&self) -> Seg<'static> {
        match self {
            Step::Key(k) => Seg::Key(k),
            Step::Index(i) => Seg::Index(*i),
        }
    }
}

/// What checking one kind found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finding {
    Error(String),
    Warning(String),
}

/// Every finding, with the path of the field that names the kind.
pub(crate) fn check(model: &Model) -> Vec<(Vec<Step>, Finding)> {
    let mut named: Vec<(Vec<Step>, &KindRef)> = Vec::new();
    let at = |section, i, rest: &[Step]| {
        let mut p = vec![Step::Key(section), Step::Index(i)];
        p.extend_from_slice(rest);
        p
    };
    for (i, c) in model.controllers.iter().enumerate() {
        named.push((at("controller", i, &[Step::Key("for")]), &c.for_kind));
        for (j, o) in c.owns.iter().enumerate() {
            named.push((at("controller", i, &[Step::Key("owns"), Step::Index(j)]), o));
        }
        for (j, w) in c.watches.iter().enumerate() {
            let rest = [Step::Key("watches"), Step::Index(j), Step::Key("kind")];
            named.push((at("controller", i, &rest), &w.kind));
        }
    }
    for (i, w) in model.webhooks.iter().enumerate() {
        named.push((at("webhook", i, &[Step::Key("for")]), &w.for_kind));
    }
    for (i, p) in model.policies.iter().enumerate() {
        for (j, k) in p.for_kinds.iter().enumerate() {
            named.push((at("policy", i, &[Step::Key("for"), Step::Index(j)]), k));
        }
    }
    for (i, h) in model.handlers.iter().enumerate() {
        named.push((at("handler", i, &[Step::Key("for")]), &h.for_kind));
    }
    for (i, t) in model.timers.iter().enumerate() {
        named.push((at("timer", i, &[Step::Key("for")]), &t.for_kind));
    }
    for (i, d) in model.daemons.iter().enumerate() {
        named.push((at("daemon", i, &[Step::Key("for")]), &d.for_kind));
    }
    for (i, x) in model.indexes.iter().enumerate() {
        named.push((at("index", i, &[Step::Key("for")]), &x.for_kind));
    }
    named
        .into_iter()
        .filter_map(|(path, kind)| one(model, kind).map(|f| (path, f)))
        .collect()
}

fn one(model: &Model, kind: &KindRef) -> Option<Finding> {
    if !kind.is_bare() || model.crd_for(kind).is_some() || kind.builtin().is_some() {
        return None;
    }
    let crds = model.crds.iter().map(|c| c.kind.as_str());
    if let Some(s) = diag::did_you_mean(&kind.kind, crds) {
        return Some(Finding::Error(format!(
            "unknown kind {:?} (did you mean {s:?}?)",
            kind.kind
        )));
    }
    let builtins = BUILTIN.iter().map(|b| b.kind);
    let hint = match diag::did_you_mean(&kind.kind, builtins) {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None => String::new(),
    };
    Some(Finding::Warning(format!(
        "{:?} is neither a CRD of this file nor a built-in kind khai knows{hint}; `khai run` \
         will look it up in every API group (write Kind.group to say which)",
        kind.kind
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `owns = ["Deploymnet"]` fails `khai check`, not only the run.
    #[test]
    fn a_misspelled_kind_is_an_error_or_a_warning_with_a_suggestion() {
        let model: Model = toml::from_str(
            r#"
[[crd]]
group = "x.khai.dev"
kind = "Widget"
versions = ["v1"]

[[controller]]
for = "Widgte"
owns = ["ConfigMap", "Deploymnet", "Thing.other.io", "Gizmo"]
script = "w.rhai"
"#,
        )
        .unwrap();
        let found: Vec<(String, Finding)> = check(&model)
            .into_iter()
            .map(|(p, f)| {
                let path: Vec<String> = p
                    .iter()
                    .map(|s| match s {
                        Step::Key(k) => k.to_string(),
                        Step::Index(i) => i.to_string(),
                    })
                    .collect();
                (path.join("."), f)
            })
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(
            found[0],
            (
                "controller.0.for".into(),
                Finding::Error("unknown kind \"Widgte\" (did you mean \"Widget\"?)".into())
            )
        );
        assert!(
            matches!(&found[1], (p, Finding::Warning(m)) if p == "controller.0.owns.1" && m.contains("did you mean \"Deployment\"?")),
            "{:?}",
            found[1]
        );
        assert!(
            matches!(&found[2], (p, Finding::Warning(m)) if p == "controller.0.owns.3" && !m.contains("did you mean"))
        );
    }
}
