//! Which Kubernetes version each feature of a config needs, so that an older server is named
//! before anything is installed: by `khai check --kubernetes-version`, and by `khai run` against
//! the server it connects to (docs/kubernetes-versions.md has the table).

use super::Config;
use super::diag::Diagnostic;
use super::field_path::Seg;
use super::model::{Field, Model};
use indexmap::IndexMap;
use std::fmt;

/// A Kubernetes minor release, as `v1.20`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for Version {
    type Err = String;

    /// `v1.20.2`, `1.20` or `v1.37`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a Kubernetes version like v1.30 or v1.30.2");
        let mut parts = s.strip_prefix('v').unwrap_or(s).split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        match parts.next() {
            Some(patch) if patch.parse::<u32>().is_err() => Err(bad()),
            _ if parts.next().is_some() => Err(bad()),
            _ => Ok(Version { major, minor }),
        }
    }
}

impl Version {
    const fn v1(minor: u32) -> Self {
        Version { major: 1, minor }
    }

    /// The version a server reports (`/version`'s `major` and `minor`; a minor such as `"30+"`
    /// counts as 30).
    pub(crate) fn reported(major: &str, minor: &str) -> Option<Self> {
        let digits = |s: &str| {
            s.trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        };
        Some(Version {
            major: digits(major)?,
            minor: digits(minor)?,
        })
    }
}

/// A feature a config uses, where, and the first version that has it.
struct Need {
    path: Vec<Part>,
    feature: &'static str,
    since: Version,
    /// What an older server does with it.
    otherwise: &'static str,
}

enum Part {
    Key(String),
    Index(usize),
}

const RULES: (&str, Version, &str) = (
    "CRD validation rules (x-kubernetes-validations)",
    Version::v1(25),
    "it drops them from the CRD and accepts every object",
);

const MATCH_CONDITIONS: (&str, Version, &str) = (
    "webhook match conditions (matchConditions)",
    Version::v1(28),
    "it drops them and calls the webhook for every request its rules match",
);

const SELECTABLE_FIELDS: (&str, Version, &str) = (
    "CRD selectable fields (selectableFields)",
    Version::v1(31),
    "it drops them and refuses field selectors on them",
);

const POLICIES: (&str, Version, &str) = (
    "ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1)",
    Version::v1(30),
    "it has no such API: khai cannot install the policy, and nothing would enforce its rules",
);

/// Every feature `model` uses that not every supported server has.
fn needs(model: &Model) -> Vec<Need> {
    let mut out = Vec::new();
    for (i, hook) in model.webhooks.iter().enumerate() {
        if !hook.match_conditions.is_empty() {
            let at = [Part::Key("webhook".into()), Part::Index(i)];
            out.push(need(&at, &["match_conditions"], MATCH_CONDITIONS));
        }
    }
    for i in 0..model.policies.len() {
        let at = [Part::Key("policy".into()), Part::Index(i)];
        out.push(need(&at, &[], POLICIES));
    }
    for (i, crd) in model.crds.iter().enumerate() {
        let base = vec![Part::Key("crd".into()), Part::Index(i)];
        if !crd.rules.is_empty() {
            out.push(need(&base, &["rules"], RULES));
        }
        if !crd.selectable_fields.is_empty() {
            out.push(need(&base, &["selectable_fields"], SELECTABLE_FIELDS));
        }
        let mut fields = vec![("spec", &crd.spec)];
        fields.extend(crd.status.as_ref().map(|s| ("status", s)));
        for (key, fields) in fields {
            walk(fields, &extend(&base, &[key]), &mut out);
        }
    }
    out
}

fn walk(fields: &IndexMap<String, Field>, at: &[Part], out: &mut Vec<Need>) {
    for (name, f) in fields {
        walk_one(f, &extend(at, &[name]), out);
    }
}

fn walk_one(f: &Field, at: &[Part], out: &mut Vec<Need>) {
    if !f.rules.is_empty() {
        out.push(need(at, &["rules"], RULES));
    }
    if let Some(props) = &f.properties {
        walk(props, &extend(at, &["properties"]), out);
    }
    if let Some(items) = &f.items {
        walk_one(items, &extend(at, &["items"]), out);
    }
    if let Some(values) = &f.values {
        walk_one(values, &extend(at, &["values"]), out);
    }
}

fn extend(at: &[Part], keys: &[&str]) -> Vec<Part> {
    let mut out: Vec<Part> = at
        .iter()
        .map(|p| match p {
            Part::Key(k) => Part::Key(k.clone()),
            Part::Index(i) => Part::Index(*i),
        })
        .collect();
    out.extend(keys.iter().map(|k| Part::Key(k.to_string())));
    out
}

fn need(
    at: &[Part],
    keys: &[&str],
    (feature, since, otherwise): (&'static str, Version, &'static str),
) -> Need {
    Need {
        path: extend(at, keys),
        feature,
        since,
        otherwise,
    }
}

/// One diagnostic, placed on its line, for each feature of `config` that `server` lacks.
pub(crate) fn too_new_for(config: &Config, server: Version) -> Vec<Diagnostic> {
    needs(&config.model)
        .into_iter()
        .filter(|n| server < n.since)
        .map(|n| {
            let path: Vec<Seg> = n
                .path
                .iter()
                .map(|p| match p {
                    Part::Key(k) => Seg::Key(k),
                    Part::Index(i) => Seg::Index(*i),
                })
                .collect();
            let message = format!(
                "{} need Kubernetes {} or newer; on {server} {}",
                n.feature, n.since, n.otherwise
            );
            super::validate::diagnostic(&config.file, &config.source, &path, message)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_people_write_them() {
        assert_eq!("v1.20.2".parse(), Ok(Version::v1(20)));
        assert_eq!("1.37".parse(), Ok(Version::v1(37)));
        assert!("1".parse::<Version>().is_err());
        assert!("v1.x".parse::<Version>().is_err());
        assert!("v1.2.3.4".parse::<Version>().is_err());
        assert_eq!(Version::reported("1", "30+"), Some(Version::v1(30)));
        assert!(Version::v1(20) < Version::v1(25));
    }

    #[test]
    fn rules_on_any_node_need_v1_25_and_are_placed_on_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let toml = "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"R\"\nversions = [\"v1\"]\n\
                    spec.list = { type = \"array\", items = { type = \"object\", properties = { a = { type = \"integer\", rules = [{ rule = \"self > 0\" }] } } } }\n";
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        let config = crate::config::load(dir.path()).unwrap();
        assert!(too_new_for(&config, Version::v1(25)).is_empty());
        let found: Vec<String> = too_new_for(&config, Version::v1(20))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("operator.toml:8:")
                && found[0].contains("crd[0].spec.list.items.properties.a.rules")
                && found[0].contains("need Kubernetes v1.25 or newer; on v1.20 it drops them"),
            "{found:?}"
        );
    }

    #[test]
    fn a_policy_needs_v1_30_and_is_named_at_its_table() {
        let dir = tempfile::tempdir().unwrap();
        let toml = "[operator]\nname = \"t\"\n\n[[policy]]\nname = \"few\"\nfor = [\"apps/v1/Deployment\"]\n\
                    rules = [{ rule = \"object.spec.replicas <= 5\" }]\n";
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        let config = crate::config::load(dir.path()).unwrap();
        assert!(too_new_for(&config, Version::v1(30)).is_empty());
        let found: Vec<String> = too_new_for(&config, Version::v1(29))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("operator.toml:")
                && found[0].contains(": policy[0]: ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) need Kubernetes v1.30 or newer; on v1.29 it has no such API"),
            "{found:?}"
        );
    }
}
