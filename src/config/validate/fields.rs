//! Checks that a compact field schema becomes a *structural* schema the API server accepts, and
//! that every `default` would pass the server's own validation.
//!
//! Kubernetes 1.20 rejects a CRD whose defaults do not validate against their schema, and
//! silently ignores keys that make no sense for a type (`items` on a string, `minimum` on an
//! object). Both are authoring mistakes, so both are reported here against the author's text.

use super::{Report, Seg};
use crate::config::field_path::join;
use crate::config::model::{Field, FieldType};
use indexmap::IndexMap;
use serde_json::Value;

/// Where a field sits: only a named field can be `required` (by its parent object).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Named,
    Item,
}

/// Checks every field of an object (`spec`, `status` or `properties`) at path `at`.
pub(super) fn check_object(fields: &IndexMap<String, Field>, at: &[Seg], report: &mut Report) {
    for (name, f) in fields {
        check_field(f, &join(at, &[Seg::Key(name)]), Place::Named, report);
    }
}

fn check_field(f: &Field, at: &[Seg], place: Place, report: &mut Report) {
    check_keys_fit_type(f, at, report);
    check_bounds(f, at, report);
    if place == Place::Item && f.required {
        report(
            &join(at, &[Seg::Key("required")]),
            "required only applies to named fields, not to array items or map values".into(),
        );
    }
    check_enum(f, at, report);
    if let Some(pattern) = &f.pattern
        && let Err(e) = check_pattern(pattern)
    {
        report(&join(at, &[Seg::Key("pattern")]), e);
    }
    if let Some(default) = &f.default
        && let Err(e) = check_value(default, f)
    {
        let at = [at, &[Seg::Key("default")], &e.path[..]].concat();
        report(&at, e.problem.to_string());
    }
    if let Some(items) = &f.items {
        check_field(items, &join(at, &[Seg::Key("items")]), Place::Item, report);
    }
    if let Some(values) = &f.values {
        check_field(
            values,
            &join(at, &[Seg::Key("values")]),
            Place::Item,
            report,
        );
    }
    if let Some(props) = &f.properties {
        check_object(props, &join(at, &[Seg::Key("properties")]), report);
    }
}

/// Keys that mean something only for some types.
fn check_keys_fit_type(f: &Field, at: &[Seg], report: &mut Report) {
    use FieldType as T;
    let strings = &[T::String, T::IntOrString][..];
    let numbers = &[T::Integer, T::Number][..];
    let keys: [(&str, bool, &[FieldType]); 9] = [
        ("items", f.items.is_some(), &[T::Array]),
        ("properties", f.properties.is_some(), &[T::Object]),
        ("values", f.values.is_some(), &[T::Map]),
        ("minimum", f.minimum.is_some(), numbers),
        ("maximum", f.maximum.is_some(), numbers),
        ("min_length", f.min_length.is_some(), strings),
        ("max_length", f.max_length.is_some(), strings),
        ("pattern", f.pattern.is_some(), strings),
        (
            "preserve_unknown_fields",
            f.preserve_unknown_fields,
            &[T::Object],
        ),
    ];
    for (key, present, types) in keys {
        if present && !types.contains(&f.ty) {
            let allowed: Vec<String> = types.iter().map(|t| format!("{:?}", t.name())).collect();
            report(
                &join(at, &[Seg::Key(key)]),
                format!(
                    "{key} is only allowed on type {}, not {:?}",
                    allowed.join(" or "),
                    f.ty.name()
                ),
            );
        }
    }
}

/// A `pattern` as the API server compiles it, with Go's `regexp` (RE2 syntax): the Rust `regex`
/// crate reads the same syntax. The API server refuses a CRD whose pattern does not compile, so
/// khai could not start. A pattern too large for `regex`'s compile budget is left to the server.
pub(in crate::config) fn check_pattern(pattern: &str) -> Result<(), String> {
    match regex::Regex::new(pattern) {
        Ok(_) | Err(regex::Error::CompiledTooBig(_)) => Ok(()),
        Err(e) => {
            // The crate's message draws the pattern with a caret on several lines; its last
            // line says what is wrong.
            let text = e.to_string();
            let why = text.lines().last().unwrap_or_default();
            let why = why.trim().trim_start_matches("error: ");
            let shown: String = pattern.chars().take(60).collect();
            let more = if shown.len() < pattern.len() {
                "…"
            } else {
                ""
            };
            Err(format!(
                "{shown:?}{more} is not a regular expression the API server accepts (RE2 syntax): {why}"
            ))
        }
    }
}

fn check_bounds(f: &Field, at: &[Seg], report: &mut Report) {
    if let (Some(min), Some(max)) = (f.minimum, f.maximum)
        && min > max
    {
        report(
            &join(at, &[Seg::Key("maximum")]),
            format!("maximum {max} is less than minimum {min}"),
        );
    }
    if let (Some(min), Some(max)) = (f.min_length, f.max_length)
        && min > max
    {
        report(
            &join(at, &[Seg::Key("max_length")]),
            format!("max_length {max} is less than min_length {min}"),
        );
    }
}

fn check_enum(f: &Field, at: &[Seg], report: &mut Report) {
    let Some(values) = &f.enum_values else { return };
    let at = join(at, &[Seg::Key("enum")]);
    if values.is_empty() {
        report(&at, "enum must list at least one value".into());
    }
    for (i, v) in values.iter().enumerate() {
        if let Err(problem) = check_type(v, f) {
            report(&join(&at, &[Seg::Index(i)]), problem.to_string());
        }
    }
}

/// A problem inside a value: the path below the value (e.g. `port` of a default object) and
/// what is wrong there.
struct ValueError<'a> {
    path: Vec<Seg<'a>>,
    problem: ValueProblem,
}

impl From<ValueProblem> for ValueError<'_> {
    fn from(problem: ValueProblem) -> Self {
        ValueError {
            path: Vec::new(),
            problem,
        }
    }
}

/// Why a value (a default, an enum value) does not fit its field's schema. `value` is the
/// value as JSON.
#[derive(Debug, thiserror::Error)]
enum ValueProblem {
    #[error("{value} is not {expected}")]
    Type {
        value: String,
        expected: &'static str,
    },
    #[error("{value} is not one of the enum values {allowed}")]
    Enum { value: String, allowed: String },
    #[error("{value} is less than minimum {min}")]
    Minimum { value: String, min: f64 },
    #[error("{value} is greater than maximum {max}")]
    Maximum { value: String, max: f64 },
    #[error("{value} is shorter than min_length {min}")]
    MinLength { value: String, min: u64 },
    #[error("{value} is longer than max_length {max}")]
    MaxLength { value: String, max: u64 },
    #[error("{0:?} is not a declared property, so the API server would prune it")]
    Undeclared(String),
    #[error("required property {0:?} is missing")]
    Missing(String),
}

/// Checks `v` the way the API server validates an object against the schema `f`: type, enum,
/// bounds, lengths, and recursively items, map values and properties (unknown properties would
/// be pruned, and Kubernetes rejects a default that pruning changes). `pattern` is not checked.
fn check_value<'a>(v: &'a Value, f: &Field) -> Result<(), ValueError<'a>> {
    if v.is_null() && f.nullable {
        return Ok(());
    }
    check_type(v, f)?;
    check_scalar(v, f)?;
    let string_field = Field::default();
    match (v, f.ty) {
        (Value::Array(items), FieldType::Array) => {
            let item = f.items.as_deref().unwrap_or(&string_field);
            for (i, x) in items.iter().enumerate() {
                check_value(x, item).map_err(|e| nest(Seg::Index(i), e))?;
            }
        }
        (Value::Object(map), FieldType::Map) => {
            let value = f.values.as_deref().unwrap_or(&string_field);
            for (k, x) in map {
                check_value(x, value).map_err(|e| nest(Seg::Key(k), e))?;
            }
        }
        (Value::Object(map), FieldType::Object) => check_properties(map, f)?,
        _ => {}
    }
    Ok(())
}

fn nest<'a>(seg: Seg<'a>, mut e: ValueError<'a>) -> ValueError<'a> {
    e.path.insert(0, seg);
    e
}

fn check_properties<'a>(
    map: &'a serde_json::Map<String, Value>,
    f: &Field,
) -> Result<(), ValueError<'a>> {
    let empty = IndexMap::new();
    let props = f.properties.as_ref().unwrap_or(&empty);
    for (k, x) in map {
        match props.get(k) {
            Some(p) => check_value(x, p).map_err(|e| nest(Seg::Key(k), e))?,
            None if f.preserve_unknown_fields => {}
            None => {
                return Err(ValueError {
                    path: vec![Seg::Key(k)],
                    problem: ValueProblem::Undeclared(k.clone()),
                });
            }
        }
    }
    match props
        .iter()
        .find(|(k, p)| p.required && !map.contains_key(*k))
    {
        Some((k, _)) => Err(ValueProblem::Missing(k.clone()).into()),
        None => Ok(()),
    }
}

/// Whether `v` has the JSON type of `f`.
fn check_type(v: &Value, f: &Field) -> Result<(), ValueProblem> {
    let ok = match f.ty {
        FieldType::String => v.is_string(),
        FieldType::Integer => v.is_i64() || v.is_u64(),
        FieldType::Number => v.is_number(),
        FieldType::Boolean => v.is_boolean(),
        FieldType::Object | FieldType::Map => v.is_object(),
        FieldType::Array => v.is_array(),
        FieldType::IntOrString => v.is_i64() || v.is_u64() || v.is_string(),
    };
    if ok {
        Ok(())
    } else {
        Err(ValueProblem::Type {
            value: v.to_string(),
            expected: described(f.ty),
        })
    }
}

/// A type as a noun phrase for messages.
fn described(ty: FieldType) -> &'static str {
    match ty {
        FieldType::String => "a string",
        FieldType::Integer => "an integer",
        FieldType::Number => "a number",
        FieldType::Boolean => "a boolean",
        FieldType::Object => "an object",
        FieldType::Array => "an array",
        FieldType::Map => "a map",
        FieldType::IntOrString => "an integer or a string",
    }
}

/// Enum membership, numeric bounds and string lengths of one value.
fn check_scalar(v: &Value, f: &Field) -> Result<(), ValueProblem> {
    let value = || v.to_string();
    if let Some(allowed) = &f.enum_values
        && !allowed.contains(v)
    {
        let list: Vec<_> = allowed.iter().map(Value::to_string).collect();
        return Err(ValueProblem::Enum {
            value: value(),
            allowed: list.join(", "),
        });
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = f.minimum.filter(|min| n < *min) {
            return Err(ValueProblem::Minimum {
                value: value(),
                min,
            });
        }
        if let Some(max) = f.maximum.filter(|max| n > *max) {
            return Err(ValueProblem::Maximum {
                value: value(),
                max,
            });
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = f.min_length.filter(|min| len < *min) {
            return Err(ValueProblem::MinLength {
                value: value(),
                min,
            });
        }
        if let Some(max) = f.max_length.filter(|max| len > *max) {
            return Err(ValueProblem::MaxLength {
                value: value(),
                max,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use std::path::Path;

    const HEAD: &str = "[[crd]]\ngroup = \"a.b\"\nkind = \"Cache\"\nversions = [\"v1\"]\n";

    /// Validates HEAD followed by `fields` and returns every message, one per line.
    fn check(fields: &str) -> String {
        let src = format!("{HEAD}{fields}");
        let file = Path::new("operator.toml");
        let model = parse(file, &src).unwrap();
        crate::config::validate::validate(&model, file, &src)
            .map_or_else(|e| e.to_string(), |_| String::new())
    }

    #[test]
    fn a_valid_schema_with_every_type_passes() {
        let fields = r#"spec.name = { type = "string", min_length = 1, max_length = 9, pattern = "^a", default = "abc" }
spec.replicas = { type = "integer", minimum = 0, maximum = 5, default = 1 }
spec.ratio = { type = "number", default = 0.5 }
spec.on = { type = "boolean", default = true }
spec.mode = { type = "string", enum = ["a", "b"], default = "b" }
spec.size = { type = "int-or-string", default = "50%" }
spec.ports = { type = "array", items = { type = "integer", minimum = 1 }, default = [80] }
spec.labels = { type = "map", values = { type = "string" }, default = { app = "x" } }
spec.tls = { type = "object", properties = { port = { type = "integer", required = true } }, default = { port = 443 } }
spec.extra = { type = "object", preserve_unknown_fields = true, default = { anything = 1 } }
"#;
        assert_eq!(check(fields), "");
    }

    #[test]
    fn default_must_match_the_type() {
        assert_eq!(
            check("spec.replicas = { type = \"integer\", default = \"three\" }\n"),
            "operator.toml:5:47: crd[0].spec.replicas.default: \"three\" is not an integer"
        );
        assert_eq!(
            check("spec.size = { type = \"int-or-string\", default = true }\n"),
            "operator.toml:5:49: crd[0].spec.size.default: true is not an integer or a string"
        );
    }

    #[test]
    fn default_must_be_in_the_enum_and_within_bounds() {
        let out = check(
            "spec.mode = { type = \"string\", enum = [\"a\", \"b\"], default = \"c\" }\n\
             spec.replicas = { type = \"integer\", minimum = 1, default = 0 }\n\
             spec.name = { type = \"string\", max_length = 2, default = \"abc\" }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:61: crd[0].spec.mode.default: \"c\" is not one of the enum values \"a\", \"b\"",
                "operator.toml:6:60: crd[0].spec.replicas.default: 0 is less than minimum 1",
                "operator.toml:7:58: crd[0].spec.name.default: \"abc\" is longer than max_length 2",
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_default_object_is_checked_property_by_property() {
        let out = check(
            "spec.tls = { type = \"object\", properties = { port = { type = \"integer\" } }, default = { port = \"x\" } }\n\
             spec.ports = { type = \"array\", items = { type = \"integer\" }, default = [1, \"two\"] }\n\
             spec.peer = { type = \"object\", properties = { host = { type = \"string\", required = true } }, default = { hots = \"a\" } }\n\
             spec.req = { type = \"object\", properties = { host = { type = \"string\", required = true } }, default = {} }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:96: crd[0].spec.tls.default.port: \"x\" is not an integer",
                "operator.toml:6:76: crd[0].spec.ports.default[1]: \"two\" is not an integer",
                "operator.toml:7:113: crd[0].spec.peer.default.hots: \"hots\" is not a declared \
                 property, so the API server would prune it",
                "operator.toml:8:103: crd[0].spec.req.default: required property \"host\" is missing",
            ]
            .join("\n")
        );
    }

    #[test]
    fn keys_must_fit_the_type() {
        let out = check(
            "spec.a = { type = \"string\", items = { type = \"string\" } }\n\
             spec.b = { type = \"map\", properties = { x = { type = \"string\" } } }\n\
             spec.c = { type = \"object\", values = { type = \"string\" } }\n\
             spec.d = { type = \"string\", minimum = 1 }\n\
             spec.e = { type = \"integer\", max_length = 3, pattern = \"^1\" }\n\
             spec.f = { type = \"array\", preserve_unknown_fields = true }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:37: crd[0].spec.a.items: items is only allowed on type \"array\", not \"string\"",
                "operator.toml:6:39: crd[0].spec.b.properties: properties is only allowed on type \"object\", not \"map\"",
                "operator.toml:7:38: crd[0].spec.c.values: values is only allowed on type \"map\", not \"object\"",
                "operator.toml:8:39: crd[0].spec.d.minimum: minimum is only allowed on type \"integer\" or \"number\", not \"string\"",
                "operator.toml:9:43: crd[0].spec.e.max_length: max_length is only allowed on type \"string\" or \"int-or-string\", not \"integer\"",
                "operator.toml:9:56: crd[0].spec.e.pattern: pattern is only allowed on type \"string\" or \"int-or-string\", not \"integer\"",
                "operator.toml:10:54: crd[0].spec.f.preserve_unknown_fields: preserve_unknown_fields is only allowed on type \"object\", not \"array\"",
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_pattern_must_be_a_regular_expression_the_api_server_compiles() {
        let out = check(
            "spec.a = { type = \"string\", pattern = \"^[a-z]+(\" }\n\
             spec.b = { type = \"string\", pattern = \"^(?=x)\" }\n\
             spec.c = { type = \"string\", pattern = \"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$\" }\n",
        );
        assert_eq!(
            out,
            "operator.toml:5:39: crd[0].spec.a.pattern: \"^[a-z]+(\" is not a regular expression \
             the API server accepts (RE2 syntax): unclosed group\n\
             operator.toml:6:39: crd[0].spec.b.pattern: \"^(?=x)\" is not a regular expression \
             the API server accepts (RE2 syntax): look-around, including look-ahead and \
             look-behind, is not supported"
        );
    }

    #[test]
    fn bounds_must_be_ordered() {
        let out = check(
            "spec.n = { type = \"number\", minimum = 5, maximum = 1.5 }\n\
             spec.s = { type = \"string\", min_length = 4, max_length = 2 }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:52: crd[0].spec.n.maximum: maximum 1.5 is less than minimum 5",
                "operator.toml:6:58: crd[0].spec.s.max_length: max_length 2 is less than min_length 4",
            ]
            .join("\n")
        );
    }

    #[test]
    fn enum_values_must_match_the_type_and_not_be_empty() {
        let out = check(
            "spec.mode = { type = \"string\", enum = [\"a\", 3] }\n\
             status.none = { type = \"integer\", enum = [] }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:45: crd[0].spec.mode.enum[1]: 3 is not a string",
                "operator.toml:6:42: crd[0].status.none.enum: enum must list at least one value",
            ]
            .join("\n")
        );
    }

    #[test]
    fn nested_problems_name_the_nested_path() {
        let out = check(
            "spec.pool = { type = \"object\", properties = { nodes = { type = \"array\", items = { type = \"integer\", required = true, default = \"x\" } } } }\n\
             spec.tags = { type = \"map\", values = { type = \"string\", minimum = 1 } }\n",
        );
        assert_eq!(
            out,
            [
                "operator.toml:5:112: crd[0].spec.pool.properties.nodes.items.required: required only applies to named fields, not to array items or map values",
                "operator.toml:5:128: crd[0].spec.pool.properties.nodes.items.default: \"x\" is not an integer",
                "operator.toml:6:67: crd[0].spec.tags.values.minimum: minimum is only allowed on type \"integer\" or \"number\", not \"string\"",
            ]
            .join("\n")
        );
    }
}
