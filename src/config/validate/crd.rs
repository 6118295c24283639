//! Checks of one `[[crd]]` as a whole: names, versions, printer columns, the scale
//! subresource and where its schema comes from. Field-level schema checks live in
//! [`super::fields`].

use super::{Report, Seg, fields};
use crate::config::field_path::join;
use crate::config::model::{Crd, Field, FieldType, PrinterColumn, Scale};
use indexmap::IndexMap;

/// Checks `crd`, the `index`-th CRD; `earlier` are the CRDs declared before it.
pub(super) fn check(crd: &Crd, earlier: &[Crd], index: usize, report: &mut Report) {
    let base = [Seg::Key("crd"), Seg::Index(index)];
    check_names(crd, earlier, &base, report);
    check_versions(crd, &base, report);
    check_printer_columns(&crd.printer_columns, &base, report);
    if let Some(scale) = &crd.scale {
        check_scale(crd, scale, &base, report);
    }
    if crd.schema_file.is_some() {
        if !crd.spec.is_empty() || crd.status.is_some() {
            report(
                &join(&base, &[Seg::Key("schema_file")]),
                "schema_file cannot be combined with spec or status: the file is the whole \
                 openAPIV3Schema"
                    .into(),
            );
        }
        if !crd.rules.is_empty() {
            report(
                &join(&base, &[Seg::Key("rules")]),
                "rules cannot be combined with schema_file: write them as \
                 x-kubernetes-validations in the file"
                    .into(),
            );
        }
        return;
    }
    super::rules::check(crd, &base, report);
    fields::check_object(&crd.spec, &join(&base, &[Seg::Key("spec")]), report);
    if let Some(status) = &crd.status {
        fields::check_object(status, &join(&base, &[Seg::Key("status")]), report);
    }
}

fn check_names(crd: &Crd, earlier: &[Crd], base: &[Seg], report: &mut Report) {
    let at = |k| join(base, &[Seg::Key(k)]);
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
    if earlier
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

fn check_versions(crd: &Crd, base: &[Seg], report: &mut Report) {
    let at = join(base, &[Seg::Key("versions")]);
    if crd.versions.is_empty() {
        report(&at, "at least one version is required".into());
    }
    let storage = crd.versions.iter().filter(|v| v.storage_flag()).count();
    if crd.versions.len() > 1 && storage != 1 {
        report(
            &at,
            format!("exactly one version must set storage = true, found {storage}"),
        );
    }
    if let Some(v) = crd.versions.iter().find(|v| !is_version_name(v.name())) {
        report(
            &at,
            format!(
                "version {:?} must look like v1, v1beta1 or v2alpha3",
                v.name()
            ),
        );
    }
    for (i, v) in crd.versions.iter().enumerate() {
        if crd.versions[..i].iter().any(|o| o.name() == v.name()) {
            report(
                &join(&at, &[Seg::Index(i)]),
                format!("version {:?} is declared twice", v.name()),
            );
        }
    }
}

pub(super) fn is_version_name(v: &str) -> bool {
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

fn check_printer_columns(columns: &[PrinterColumn], base: &[Seg], report: &mut Report) {
    for (i, col) in columns.iter().enumerate() {
        let at = |k| {
            join(
                base,
                &[Seg::Key("printer_columns"), Seg::Index(i), Seg::Key(k)],
            )
        };
        if col.name.trim().is_empty() {
            report(&at("name"), "must not be empty".into());
        } else if columns[..i].iter().any(|o| o.name == col.name) {
            report(
                &at("name"),
                format!("printer column {:?} is declared twice", col.name),
            );
        }
        if let Err(e) = simple_json_path(&col.json_path) {
            report(&at("json_path"), format!("{:?} {e}", col.json_path));
        }
    }
}

/// Kubernetes' rule for printer column and scale paths: a dotted path starting with `.`.
/// Returns the path without its leading dot.
fn simple_json_path(path: &str) -> Result<&str, &'static str> {
    match path.strip_prefix('.') {
        None => Err("must be a JSON path starting with \".\", e.g. \".spec.replicas\""),
        Some(rest) if rest.split('.').any(str::is_empty) => {
            Err("must be a JSON path in dot notation, e.g. \".spec.replicas\"")
        }
        Some(rest) => Ok(rest),
    }
}

/// What one scale path must point at.
struct ScaleRule {
    key: &'static str,
    roots: &'static [&'static str],
    ty: FieldType,
    example: &'static str,
}

const SCALE_RULES: [ScaleRule; 3] = [
    ScaleRule {
        key: "spec_replicas_path",
        roots: &["spec"],
        ty: FieldType::Integer,
        example: ".spec.replicas",
    },
    ScaleRule {
        key: "status_replicas_path",
        roots: &["status"],
        ty: FieldType::Integer,
        example: ".status.replicas",
    },
    ScaleRule {
        key: "label_selector_path",
        roots: &["spec", "status"],
        ty: FieldType::String,
        example: ".status.selector",
    },
];

fn check_scale(crd: &Crd, scale: &Scale, base: &[Seg], report: &mut Report) {
    let paths = [
        Some(&scale.spec_replicas_path),
        Some(&scale.status_replicas_path),
        scale.label_selector_path.as_ref(),
    ];
    for (rule, path) in SCALE_RULES.iter().zip(paths) {
        let Some(path) = path else { continue };
        let problem = scale_path(path, rule.roots, rule.example).and_then(|segs| {
            // A raw schema_file is the API server's to check; a compact schema is ours.
            if crd.schema_file.is_some() {
                Ok(())
            } else {
                declared_as(crd, &segs, rule.ty)
            }
        });
        if let Err(e) = problem {
            let at = join(base, &[Seg::Key("scale"), Seg::Key(rule.key)]);
            report(&at, format!("{path:?} {e}"));
        }
    }
}

/// What is wrong with a scale path; the message follows the path as written.
#[derive(Debug, thiserror::Error)]
pub(super) enum ScaleProblem {
    #[error("{0}")]
    Syntax(&'static str),
    #[error("must not use array notation")]
    Array,
    #[error("must be a JSON path under {under}, e.g. {example:?}")]
    Outside {
        under: String,
        example: &'static str,
    },
    #[error("is empty")]
    Empty,
    #[error("needs a {0} field, but this CRD declares no {0}")]
    NoRoot(String),
    #[error("names a field of type {found:?}; it must be {wanted:?}")]
    WrongType {
        found: &'static str,
        wanted: &'static str,
    },
    #[error("names no field declared in {0}")]
    Undeclared(String),
}

/// Splits a scale path into segments, checking it lies under one of `roots`.
pub(super) fn scale_path<'p>(
    path: &'p str,
    roots: &[&str],
    example: &'static str,
) -> Result<Vec<&'p str>, ScaleProblem> {
    let rest = simple_json_path(path).map_err(ScaleProblem::Syntax)?;
    if rest.contains('[') {
        return Err(ScaleProblem::Array);
    }
    let segs: Vec<&str> = rest.split('.').collect();
    if segs.len() < 2 || !roots.contains(&segs[0]) {
        let under = roots
            .iter()
            .map(|r| format!(".{r}"))
            .collect::<Vec<_>>()
            .join(" or ");
        return Err(ScaleProblem::Outside { under, example });
    }
    Ok(segs)
}

/// Checks that the compact schema declares `segs` (e.g. `["spec", "replicas"]`) with type `ty`;
/// an undeclared field would be pruned by the API server, so scaling could never stick.
fn declared_as(crd: &Crd, segs: &[&str], ty: FieldType) -> Result<(), ScaleProblem> {
    let (root, rest) = segs.split_first().ok_or(ScaleProblem::Empty)?;
    let top = if *root == "spec" {
        Some(&crd.spec)
    } else {
        crd.status.as_ref()
    };
    let Some(top) = top else {
        return Err(ScaleProblem::NoRoot(root.to_string()));
    };
    match lookup(top, rest) {
        Lookup::Found(found) if found == ty => Ok(()),
        Lookup::Found(found) => Err(ScaleProblem::WrongType {
            found: found.name(),
            wanted: ty.name(),
        }),
        Lookup::Free => Ok(()),
        Lookup::Missing => Err(ScaleProblem::Undeclared(root.to_string())),
    }
}

pub(super) enum Lookup {
    Found(FieldType),
    /// Inside an object that keeps unknown fields: anything may be there.
    Free,
    Missing,
}

/// Follows `segs` through properties and map values.
pub(super) fn lookup(fields: &IndexMap<String, Field>, segs: &[&str]) -> Lookup {
    let Some((first, rest)) = segs.split_first() else {
        return Lookup::Missing;
    };
    let Some(mut field) = fields.get(*first) else {
        return Lookup::Missing;
    };
    for (i, seg) in rest.iter().enumerate() {
        let next = match field.ty {
            // A map without `values` holds strings.
            FieldType::Map if field.values.is_none() && i + 1 == rest.len() => {
                return Lookup::Found(FieldType::String);
            }
            FieldType::Map => field.values.as_deref(),
            FieldType::Object => field.properties.as_ref().and_then(|p| p.get(*seg)),
            _ => None,
        };
        match next {
            Some(f) => field = f,
            None if field.ty == FieldType::Object && field.preserve_unknown_fields => {
                return Lookup::Free;
            }
            None => return Lookup::Missing,
        }
    }
    Lookup::Found(field.ty)
}

#[cfg(test)]
mod tests {
    use super::is_version_name;
    use crate::config::parse;
    use std::path::Path;

    fn check(src: &str) -> String {
        let file = Path::new("operator.toml");
        let model = parse(file, src).unwrap();
        crate::config::validate::validate(&model, file, src)
            .map_or_else(|e| e.to_string(), |_| String::new())
    }

    const HEAD: &str = "[[crd]]\ngroup = \"a.b\"\nkind = \"Cache\"\nversions = [\"v1\"]\n";

    #[test]
    fn version_names_follow_kubernetes_rules() {
        for ok in ["v1", "v1beta1", "v2alpha3"] {
            assert!(is_version_name(ok), "{ok}");
        }
        for bad in ["1", "v", "v1gamma1", "v1beta", "V1"] {
            assert!(!is_version_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_version_declared_twice_is_named() {
        let src = "[[crd]]\ngroup = \"a.b\"\nkind = \"Cache\"\nversions = [\"v1\", { name = \"v1\", storage = true }]\n";
        assert_eq!(
            check(src),
            "operator.toml:4:19: crd[0].versions[1]: version \"v1\" is declared twice"
        );
    }

    #[test]
    fn schema_file_with_spec_is_an_error() {
        let src = format!("{HEAD}schema_file = \"s.yaml\"\nspec.size = {{ type = \"integer\" }}\n");
        assert_eq!(
            check(&src),
            "operator.toml:5:15: crd[0].schema_file: schema_file cannot be combined with spec or \
             status: the file is the whole openAPIV3Schema"
        );
    }

    #[test]
    fn printer_columns_need_dotted_paths_and_unique_names() {
        let src = format!(
            "{HEAD}printer_columns = [\n  {{ name = \"Size\", type = \"integer\", json_path = \"spec.size\" }},\n  {{ name = \"Size\", type = \"integer\", json_path = \".spec..size\" }},\n]\n"
        );
        assert_eq!(
            check(&src),
            [
                "operator.toml:6:50: crd[0].printer_columns[0].json_path: \"spec.size\" must be a \
                 JSON path starting with \".\", e.g. \".spec.replicas\"",
                "operator.toml:7:12: crd[0].printer_columns[1].name: printer column \"Size\" is \
                 declared twice",
                "operator.toml:7:50: crd[0].printer_columns[1].json_path: \".spec..size\" must be \
                 a JSON path in dot notation, e.g. \".spec.replicas\"",
            ]
            .join("\n")
        );
    }

    #[test]
    fn scale_paths_must_sit_under_spec_and_status() {
        let src = format!(
            "{HEAD}scale = {{ spec_replicas_path = \".status.replicas\", status_replicas_path = \".status.items[0]\", label_selector_path = \".metadata.x\" }}\n"
        );
        assert_eq!(
            check(&src),
            [
                "operator.toml:5:32: crd[0].scale.spec_replicas_path: \".status.replicas\" must \
                 be a JSON path under .spec, e.g. \".spec.replicas\"",
                "operator.toml:5:75: crd[0].scale.status_replicas_path: \".status.items[0]\" \
                 must not use array notation",
                "operator.toml:5:117: crd[0].scale.label_selector_path: \".metadata.x\" must be \
                 a JSON path under .spec or .status, e.g. \".status.selector\"",
            ]
            .join("\n")
        );
    }

    #[test]
    fn scale_paths_must_name_declared_fields_of_the_right_type() {
        let src = format!(
            "{HEAD}scale = {{ spec_replicas_path = \".spec.replicas\", status_replicas_path = \".status.replicas\" }}\nspec.replicas = {{ type = \"string\" }}\n"
        );
        assert_eq!(
            check(&src),
            [
                "operator.toml:5:32: crd[0].scale.spec_replicas_path: \".spec.replicas\" names a \
                 field of type \"string\"; it must be \"integer\"",
                "operator.toml:5:73: crd[0].scale.status_replicas_path: \".status.replicas\" \
                 needs a status field, but this CRD declares no status",
            ]
            .join("\n")
        );
    }

    #[test]
    fn scale_paths_resolve_through_objects_maps_and_free_objects() {
        let src = format!(
            "{HEAD}scale = {{ spec_replicas_path = \".spec.pool.size\", status_replicas_path = \".status.extra.count\", label_selector_path = \".status.selectors.main\" }}\n\
             spec.pool = {{ type = \"object\", properties = {{ size = {{ type = \"integer\" }} }} }}\n\
             status.extra = {{ type = \"object\", preserve_unknown_fields = true }}\n\
             status.selectors = {{ type = \"map\" }}\n"
        );
        assert_eq!(check(&src), "");
        let missing = src.replace("pool.size", "pool.count");
        assert_eq!(
            check(&missing),
            "operator.toml:5:32: crd[0].scale.spec_replicas_path: \".spec.pool.count\" names no \
             field declared in spec"
        );
    }
}
