//! `khai new`: the files of a new operator, or of one more controller in an existing one.
//!
//! Everything here is pure: it returns file names and contents, and the edited text of an
//! existing `operator.toml`, so `cli/new.rs` only writes. The templates make an operator that
//! passes `khai check` and `khai test` as generated and reconciles its sample object on a real
//! cluster. A controller is added to `operator.toml` by appending tables to its text, never by
//! re-serialising it, so the author's comments and layout survive.

mod templates;

use crate::config::{self, model::Model};
use std::path::{Path, PathBuf};

/// A new file: its path relative to the operator folder, and its text.
pub(crate) type File = (PathBuf, String);

/// Why scaffolding refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum Error {
    #[error("{what} {value:?} {rule}")]
    Invalid {
        what: &'static str,
        value: String,
        rule: &'static str,
    },
    #[error("{file}: kind {kind:?} is already declared")]
    KindExists { file: String, kind: String },
    #[error("{file}: {message}")]
    Config { file: String, message: String },
}

/// The names one CRD and controller are generated from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The operator's name (`[operator] name`).
    pub operator: String,
    pub kind: String,
    pub group: String,
    pub version: String,
}

impl Names {
    /// Names for a new operator `name`, with `--kind`/`--group` defaults filled in.
    pub(crate) fn for_operator(
        name: &str,
        kind: Option<&str>,
        group: Option<&str>,
    ) -> Result<Self, Error> {
        check_name(name)?;
        let names = Self {
            operator: name.to_string(),
            kind: kind.map_or_else(|| pascal_case(name), str::to_string),
            group: group.map_or_else(|| format!("{name}.example.com"), str::to_string),
            version: "v1".into(),
        };
        names.check()?;
        Ok(names)
    }

    /// Checks the kind, group and version the way the API server would.
    pub(crate) fn check(&self) -> Result<(), Error> {
        check_kind(&self.kind)?;
        check_group(&self.group)?;
        check_version(&self.version)
    }

    /// Lower-case singular, used for file names: `scripts/<singular>.rhai`.
    pub(crate) fn singular(&self) -> String {
        self.kind.to_lowercase()
    }

    fn fill(&self, template: &str) -> String {
        template
            .replace("__OPERATOR__", &self.operator)
            .replace("__KIND__", &self.kind)
            .replace("__GROUP__", &self.group)
            .replace("__VERSION__", &self.version)
            .replace("__SINGULAR__", &self.singular())
            .replace("__PLURAL__", &crate::schema::plural_of(&self.kind))
    }
}

/// `my-app` becomes `MyApp`.
pub(crate) fn pascal_case(name: &str) -> String {
    name.split(['-', '_', '.'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn invalid(what: &'static str, value: &str, rule: &'static str) -> Error {
    Error::Invalid {
        what,
        value: value.into(),
        rule,
    }
}

/// An operator name is a DNS-1123 label: it names a folder, labels and the field manager; at
/// most [`crate::config::MAX_OPERATOR_NAME`] long, as `khai check` wants it.
fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= crate::config::MAX_OPERATOR_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    ok.then_some(()).ok_or_else(|| {
        invalid(
            "operator name",
            name,
            "must be at most 58 lower-case letters, digits and '-', starting with a letter (like \"my-app\")",
        )
    })
}

fn check_kind(kind: &str) -> Result<(), Error> {
    let ok = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    ok.then_some(()).ok_or_else(|| {
        invalid(
            "kind",
            kind,
            "must be PascalCase letters and digits (like \"MyApp\")",
        )
    })
}

fn check_group(group: &str) -> Result<(), Error> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let ok = group.contains('.') && group.len() <= 253 && group.split('.').all(label_ok);
    ok.then_some(()).ok_or_else(|| {
        invalid(
            "group",
            group,
            "must be a lower-case DNS name with a dot (like \"apps.example.com\")",
        )
    })
}

fn check_version(version: &str) -> Result<(), Error> {
    let ok = version.starts_with('v')
        && version[1..].starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    ok.then_some(()).ok_or_else(|| {
        invalid(
            "version",
            version,
            "must look like \"v1\", \"v2beta1\" or \"v1alpha2\"",
        )
    })
}

/// Every file of a new operator folder; with `webhooks`, admission webhooks for its kind too.
pub(crate) fn operator_files(names: &Names, webhooks: bool) -> Vec<File> {
    let mut files = vec![
        (
            PathBuf::from("operator.toml"),
            names.fill(&format!(
                "{}\n{}",
                templates::OPERATOR_HEADER,
                config_tables(webhooks)
            )),
        ),
        (PathBuf::from("README.md"), names.fill(templates::README)),
    ];
    files.extend(controller_files(names, webhooks));
    files
}

/// The tables one kind brings to `operator.toml`.
fn config_tables(webhooks: bool) -> String {
    let mut text = templates::CRD_AND_CONTROLLER.to_string();
    if webhooks {
        text.push_str(templates::WEBHOOK_CONFIG);
    }
    text
}

/// The files one more controller brings: its script, its sample object and its test cases;
/// with `webhooks`, the webhook script and its validate and mutate cases.
pub(crate) fn controller_files(names: &Names, webhooks: bool) -> Vec<File> {
    let s = names.singular();
    let mut files = vec![
        (format!("scripts/{s}.rhai"), templates::SCRIPT),
        (format!("{s}.yaml"), templates::SAMPLE),
        (format!("tests/{s}_new.yaml"), templates::CASE_NEW),
        (format!("tests/{s}_ready.yaml"), templates::CASE_READY),
    ];
    if webhooks {
        files.extend([
            (
                format!("scripts/{s}_webhooks.rhai"),
                templates::WEBHOOK_SCRIPT,
            ),
            (format!("tests/{s}_validate.yaml"), templates::CASE_VALIDATE),
            (format!("tests/{s}_mutate.yaml"), templates::CASE_MUTATE),
        ]);
    }
    files
        .into_iter()
        .map(|(path, t)| (PathBuf::from(path), names.fill(t)))
        .collect()
}

/// `src` (the text of `file`) with a `[[crd]]` and a `[[controller]]` for `names` appended (and
/// a `[[webhook]]` with `webhooks`). Refuses a kind the config already declares, and a config
/// that does not parse.
pub(crate) fn append_controller(
    file: &Path,
    src: &str,
    names: &Names,
    webhooks: bool,
) -> Result<String, Error> {
    names.check()?;
    let model: Model = config::parse(file, src).map_err(|d| Error::Config {
        file: file.display().to_string(),
        message: d.to_string(),
    })?;
    if model.crds.iter().any(|c| c.kind == names.kind) {
        return Err(Error::KindExists {
            file: file.display().to_string(),
            kind: names.kind.clone(),
        });
    }
    let mut out = src.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&names.fill(&config_tables(webhooks)));
    Ok(out)
}

/// The group new controllers default to: the first CRD's, else `<operator>.example.com`.
pub(crate) fn default_group(model: &Model) -> String {
    model.crds.first().map_or_else(
        || format!("{}.example.com", model.operator.name),
        |c| c.group.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names::for_operator("my-app", None, None).unwrap()
    }

    #[test]
    fn defaults_come_from_the_operator_name() {
        let n = names();
        assert_eq!(n.kind, "MyApp");
        assert_eq!(n.group, "my-app.example.com");
        assert_eq!(n.version, "v1");
        assert_eq!(n.singular(), "myapp");
    }

    #[test]
    fn bad_names_are_refused_with_the_rule() {
        let err = Names::for_operator("My App", None, None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("operator name \"My App\" must be"),
            "{err}"
        );
        let long = "a".repeat(crate::config::MAX_OPERATOR_NAME + 1);
        assert!(
            Names::for_operator(&long, None, None).is_err(),
            "khai check refuses it"
        );
        assert!(Names::for_operator("ok", Some("lower"), None).is_err());
        assert!(Names::for_operator("ok", None, Some("nodot")).is_err());
    }

    #[test]
    fn generated_config_parses_and_names_the_kind() {
        let files = operator_files(&names(), false);
        let (_, toml) = files
            .iter()
            .find(|(p, _)| p == Path::new("operator.toml"))
            .unwrap();
        let model = config::parse(Path::new("operator.toml"), toml).unwrap();
        assert_eq!(model.crds[0].kind, "MyApp");
        assert_eq!(model.crds[0].group, "my-app.example.com");
        assert_eq!(model.controllers[0].script, Path::new("scripts/myapp.rhai"));
        assert!(
            files.iter().all(|(_, text)| !text.contains("__")),
            "unfilled placeholder"
        );
    }

    /// `khai new` writes webhook stubs with the webhook contract, `validate(req)`, not
    /// `validate(obj, ctx)`. What `--webhooks` writes loads, as `khai check` loads it, and its
    /// cases pass, as `khai test` runs them.
    #[test]
    fn webhook_files_load_with_the_webhook_contract_and_their_cases_pass() {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in operator_files(&names(), true) {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let op = crate::operator::Operator::load(dir.path()).unwrap();
        assert_eq!(op.webhooks.len(), 1);
        assert!(op.webhooks[0].script.has_function("validate", 1));
        assert!(op.webhooks[0].script.has_function("mutate", 1));
        let cases = crate::testing::case::find(dir.path()).unwrap();
        assert_eq!(cases.len(), 4);
        for file in cases {
            let case = crate::testing::case::load(&file).unwrap();
            let found = crate::testing::run_case(&op, &case).unwrap();
            assert!(found.is_empty(), "{}: {found:?}", file.display());
        }
    }

    #[test]
    fn appending_a_controller_keeps_comments_and_refuses_duplicates() {
        let (_, toml) = operator_files(&names(), false).remove(0);
        let src = format!("# my notes\n{toml}");
        let more = Names {
            kind: "Backup".into(),
            ..names()
        };
        let out = append_controller(Path::new("operator.toml"), &src, &more, true).unwrap();
        assert!(
            out.starts_with(&src),
            "the original text must be kept as is"
        );
        let model = config::parse(Path::new("operator.toml"), &out).unwrap();
        assert_eq!(model.crds.len(), 2);
        assert_eq!(model.controllers[1].for_kind.to_string(), "Backup");
        assert_eq!(model.webhooks[0].for_kind.to_string(), "Backup");
        let err = append_controller(Path::new("operator.toml"), &out, &more, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operator.toml: kind \"Backup\" is already declared"
        );
    }
}
