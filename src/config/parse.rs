//! Parses config text into the [`Model`], TOML or YAML by the file's extension, keeping
//! positions: every error is a [`Diagnostic`] with the file, line, column and field path.

use super::diag::{self, Diagnostic};
use super::model::Model;
use std::path::Path;

fn is_yaml(file: &Path) -> bool {
    matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Parses config text; the format is chosen by the file's extension (TOML unless .yaml/.yml).
pub fn parse(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    if is_yaml(file) {
        parse_yaml(file, src)
    } else {
        parse_toml(file, src)
    }
}

fn parse_toml(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    let locate = |e: &toml::de::Error| e.span().map(|s| diag::line_col(src, s.start));
    let de = toml::Deserializer::parse(src)
        .map_err(|e| Diagnostic::new(file, first_line(e.message())).at(locate(&e)))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = field_path(e.path());
        let inner = e.into_inner();
        Diagnostic::new(file, first_line(&diag::tidy_unknown_field(inner.message())))
            .at(locate(&inner))
            .field(path)
    })
}

fn parse_yaml(file: &Path, src: &str) -> Result<Model, Diagnostic> {
    serde_saphyr::from_str::<Model>(src).map_err(|e| {
        let pos = e
            .location()
            .map(|l| (l.line() as usize, l.column() as usize));
        Diagnostic::new(file, yaml_message(&e)).at(pos)
    })
}

/// serde-saphyr's message alone, for a diagnostic that carries the position itself (its rendering
/// would add `error: line N column M:` and a snippet): control characters are escaped, and a
/// budget breach (a document too large or too deep, such as an alias bomb) is said in words.
pub(crate) fn yaml_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    use serde_saphyr::{DefaultMessageFormatter, Error, MessageFormatter};
    let mut e = e;
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = e {
        e = error;
    }
    let message = match e {
        Error::Budget { breach, .. } => match breach {
            B::Nodes { .. } => format!(
                "the document is too large: more than {} values once aliases are expanded",
                serde_saphyr::Budget::default().max_nodes
            ),
            B::Depth { .. } => format!(
                "the document is nested too deeply (more than {} levels)",
                serde_saphyr::Budget::default().max_depth
            ),
            B::Aliases { .. } | B::AliasAnchorRatio { .. } | B::MergeKeys { .. } => {
                "the document uses too many aliases or merge keys".to_string()
            }
            _ => "the document is too large".to_string(),
        },
        // Drop serde-saphyr's advice for Rust authors ("cannot deserialize null into string;
        // use Option<String>"): config authors have no Option to use.
        _ => {
            let m = DefaultMessageFormatter.format_message(e);
            m.split("; use Option<")
                .next()
                .unwrap_or_default()
                .to_string()
        }
    };
    let message = diag::tidy_unknown_field(&message);
    let mut shown = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_string()
}

/// Renders serde_path_to_error's path as `controller[0].for`, the way authors index arrays.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model;
    use crate::config::tests::HELLO;

    #[test]
    fn toml_and_yaml_load_into_the_same_model() {
        let yaml = r#"
operator: { name: hello }
crd:
  - group: examples.khai.dev
    kind: Hello
    versions: [v1]
    spec:
      message: { type: string, required: true }
      replicas: { type: integer, default: 1, minimum: 0 }
    status:
      phase: { type: string }
controller:
  - for: Hello
    owns: [v1/ConfigMap]
    script: scripts/hello.rhai
"#;
        let t = parse(Path::new("operator.toml"), HELLO).unwrap();
        let y = parse(Path::new("operator.yaml"), yaml).unwrap();
        assert_eq!(t, y);
        assert_eq!(t.controllers[0].reconcile, "reconcile");
        assert!(t.operator.install_crds);
    }

    #[test]
    fn unknown_key_is_an_error_with_line_and_field_path() {
        let src = HELLO.replace("owns = ", "own = ");
        let err = parse(Path::new("operator.toml"), &src).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("operator.toml:15:1: controller[0].own: unknown field `own`"),
            "{text}"
        );
    }

    #[test]
    fn invalid_toml_names_the_line() {
        let err = parse(Path::new("x/operator.toml"), "[operator]\nname = \n").unwrap_err();
        assert_eq!(err.position.map(|p| p.0), Some(2), "{err}");
        assert!(err.to_string().starts_with("x/operator.toml:2:"), "{err}");
    }

    #[test]
    fn invalid_yaml_names_the_line() {
        let err = parse(Path::new("operator.yaml"), "operator:\n  name: [unclosed\n").unwrap_err();
        assert!(err.position.is_some(), "{err}");
    }

    #[test]
    fn yaml_diagnostics_give_the_position_once_and_a_message_in_words() {
        // Found by fuzzing (`scripts/fuzz config_yaml`): serde-saphyr's rendering put its own
        // "error: line 2 column 9:" inside the message, after khai's "operator.yaml:2:9:", and
        // a budget breach read "budget breached: Nodes { nodes: 250001 }".
        let err = parse(Path::new("operator.yaml"), "operator:\n  name: [unclosed\n").unwrap_err();
        assert_eq!(err.to_string(), "operator.yaml:2:9: expected string scalar");
        let err = parse(Path::new("operator.yaml"), "crd: 3\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator.yaml:1:6: expected sequence start"
        );
        let err = parse(Path::new("operator.yaml"), "operator: { name: ~ }\n").unwrap_err();
        assert_eq!(err.message, "cannot deserialize null into string");
        // An alias bomb: ten levels of ten aliases each.
        let mut bomb = String::from("params:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
        }
        let err = parse(Path::new("operator.yaml"), &bomb).unwrap_err();
        assert_eq!(
            err.message,
            "the document is too large: more than 250000 values once aliases are expanded"
        );
        let deep = format!("params: {{x: {}{}}}\n", "[".repeat(300), "]".repeat(300));
        let err = parse(Path::new("operator.yaml"), &deep).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator.yaml:1:267: recursion limit exceeded"
        );
    }

    /// A `watches` entry is a label or a map function, parsed once into `Parents`.
    #[test]
    fn a_watch_names_its_parents_by_label_or_by_map_never_both() {
        let base = "[[controller]]\nfor = \"ConfigMap\"\nscript = \"w.rhai\"\n";
        let one = format!("{base}watches = [{{ kind = \"Secret\", label = \"app\" }}]\n");
        let model = parse(Path::new("operator.toml"), &one).unwrap();
        assert_eq!(
            model.controllers[0].watches[0].parents,
            model::Parents::Label("app".into())
        );
        let both =
            format!("{base}watches = [{{ kind = \"Secret\", label = \"a\", map = \"f\" }}]\n");
        let err = parse(Path::new("operator.toml"), &both)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("operator.toml:4:") && err.contains("set exactly one of `label`"),
            "{err}"
        );
    }
}
