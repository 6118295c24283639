//! Checks of a CRD's `selectable_fields` and of the field selectors controllers use on it.

use super::crd::{Lookup, ScaleProblem, lookup, scale_path};
use super::{Report, Seg};
use crate::config::field_path::join;
use crate::config::model::{Crd, FieldType};

/// `selectable_fields`: at most 8, each once, each a declared string, integer or boolean field
/// under `.spec` or `.status`, as the API server requires.
pub(super) fn check(crd: &Crd, index: usize, report: &mut Report) {
    let base = [Seg::Key("crd"), Seg::Index(index)];
    use FieldType as T;
    let at = join(&base, &[Seg::Key("selectable_fields")]);
    if crd.selectable_fields.len() > 8 {
        report(&at, "at most 8 selectable fields".into());
    }
    for (i, path) in crd.selectable_fields.iter().enumerate() {
        let at = join(&at, &[Seg::Index(i)]);
        if crd.selectable_fields[..i].contains(path) {
            report(&at, format!("{path:?} is declared twice"));
            continue;
        }
        let problem = scale_path(path, &["spec", "status"], ".spec.color").and_then(|segs| {
            let top = match segs[0] {
                _ if crd.schema_file.is_some() => return Ok(()),
                "spec" => Some(&crd.spec),
                _ => crd.status.as_ref(),
            };
            match top.map_or(Lookup::Missing, |t| lookup(t, &segs[1..])) {
                Lookup::Found(T::String | T::Integer | T::Boolean) | Lookup::Free => Ok(()),
                Lookup::Found(found) => Err(ScaleProblem::WrongType {
                    found: found.name(),
                    wanted: "string, integer or boolean",
                }),
                Lookup::Missing => Err(ScaleProblem::Undeclared(segs[0].to_string())),
            }
        });
        if let Err(e) = problem {
            report(&at, format!("{path:?} {e}"));
        }
    }
}

/// Why a controller's field selector cannot select `crd` by the first of `fields` it names
/// that is neither `metadata.name`, `metadata.namespace` nor one of its `selectable_fields`.
pub(super) fn unselectable(crd: &Crd, fields: &[String]) -> Option<String> {
    let f = fields.iter().find(|f| {
        !matches!(f.as_str(), "metadata.name" | "metadata.namespace")
            && !crd
                .selectable_fields
                .iter()
                .any(|s| s.strip_prefix('.') == Some(f.as_str()))
    })?;
    Some(format!(
        "custom resources can be selected by metadata.name, metadata.namespace and the CRD's \
         selectable_fields only, not {}; declare it in selectable_fields = [\".{f}\"]",
        super::shorten(f)
    ))
}

#[cfg(test)]
mod tests {
    /// A controller may select a CRD by its selectable fields, which must be declared strings,
    /// integers or booleans.
    #[test]
    fn selectable_fields_are_declared_scalars_and_selectable_by_controllers() {
        let check = |src: &str| {
            let file = std::path::Path::new("operator.toml");
            let model = crate::config::parse(file, src).unwrap();
            super::super::validate(&model, file, src)
                .map_or_else(|e| e.to_string(), |_| String::new())
        };
        let src = "[[crd]]\ngroup = \"a.b\"\nkind = \"Note\"\nversions = [\"v1\"]\n\
                   spec.x = { type = \"integer\" }\nspec.o = { type = \"object\" }\nselectable_fields = [\".spec.x\"]\n\n\
                   [[controller]]\nfor = \"Note\"\nscript = \"n.rhai\"\nfield_selector = \"spec.x=1\"\n";
        assert_eq!(check(src), "");
        let out = check(&src.replace("[\".spec.x\"]", "[\".spec.y\", \".spec\", \".spec.o\"]"));
        for want in [
            "operator.toml:7:22: crd[0].selectable_fields[0]: \".spec.y\" names no field declared in spec",
            "crd[0].selectable_fields[1]: \".spec\" must be a JSON path under .spec or .status",
            "crd[0].selectable_fields[2]: \".spec.o\" names a field of type \"object\"; it must be \"string, integer or boolean\"",
            "controller[0].field_selector: custom resources can be selected by metadata.name",
        ] {
            assert!(out.contains(want), "{want:?} not in {out}");
        }
    }
}
