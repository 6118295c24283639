//! Defaulting of objects from a structural schema, as the API server does on create and read.
//!
//! `khai test` runs scripts offline, so the object a script sees must already carry the schema's
//! `default`s, exactly as it would after the API server stored it. The algorithm follows
//! apiextensions-apiserver's structural defaulting (Kubernetes 1.20): for every property of an
//! object that is absent, or `null` where the schema is not `nullable`, a deep copy of its
//! `default` is set; then every present value, defaulted or not, is defaulted recursively through
//! `properties`, `additionalProperties` (maps) and `items` (arrays). A `null` in a non-nullable
//! field without a default is pruned, as the API server prunes it. Pure: no I/O.

use crate::config::model::Crd;
use serde_json::Value;

/// Fills `schema`'s defaults into `value`, recursively. `schema` is structural OpenAPI v3 as
/// [`super::crd_manifest`] emits it (or a raw `schema_file`).
pub(crate) fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (key, prop) in props {
                    let absent = map.get(key).is_none_or(|v| is_non_nullable_null(v, prop));
                    match prop.get("default") {
                        Some(default) if absent => {
                            map.insert(key.clone(), default.clone());
                        }
                        None if absent && map.contains_key(key) => {
                            map.remove(key);
                        }
                        _ => {}
                    }
                }
            }
            for (key, v) in map.iter_mut() {
                if let Some(sub) = property_schema(schema, key) {
                    apply_defaults(sub, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                items.iter_mut().for_each(|v| apply_defaults(sub, v));
            }
        }
        _ => {}
    }
}

/// The schema of `key` in an object: a named property, else the map's value schema.
fn property_schema<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn is_non_nullable_null(v: &Value, schema: &Value) -> bool {
    v.is_null() && schema.get("nullable") != Some(&Value::Bool(true))
}

/// Defaults a whole custom object of `crd` (its `spec`, `status` and anything else the schema
/// declares). Fails only for a `schema_file` CRD whose file was never read.
pub fn default_object(crd: &Crd, obj: &mut Value) -> Result<(), super::Error> {
    let schema = super::root_schema(crd)?;
    apply_defaults(&schema, obj);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use serde_json::json;
    use std::path::Path;

    fn crd(fields: &str) -> Crd {
        let src =
            format!("[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"T\"\nversions = [\"v1\"]\n{fields}");
        parse(Path::new("operator.toml"), &src)
            .unwrap()
            .crds
            .remove(0)
    }

    fn defaulted(crd: &Crd, obj: Value) -> Value {
        let mut obj = obj;
        default_object(crd, &mut obj).unwrap();
        obj
    }

    #[test]
    fn absent_fields_get_their_defaults_and_present_ones_are_kept() {
        let c = crd(
            "spec.replicas = { type = \"integer\", default = 1 }\nspec.image = { type = \"string\", default = \"nginx\" }\nspec.name = { type = \"string\" }",
        );
        let out = defaulted(&c, json!({ "spec": { "image": "redis" } }));
        assert_eq!(out, json!({ "spec": { "image": "redis", "replicas": 1 } }));
    }

    #[test]
    fn an_absent_parent_object_is_not_created() {
        let c = crd("spec.replicas = { type = \"integer\", default = 1 }");
        let out = defaulted(&c, json!({ "metadata": { "name": "x" } }));
        assert_eq!(out, json!({ "metadata": { "name": "x" } }));
    }

    #[test]
    fn defaults_nest_through_objects_maps_and_arrays() {
        let c = crd(concat!(
            "spec.db = { type = \"object\", properties = { port = { type = \"integer\", default = 5432 } } }\n",
            "spec.pools = { type = \"map\", values = { type = \"object\", properties = { size = { type = \"integer\", default = 2 } } } }\n",
            "spec.ports = { type = \"array\", items = { type = \"object\", properties = { protocol = { type = \"string\", default = \"TCP\" } } } }\n",
        ));
        let out = defaulted(
            &c,
            json!({ "spec": { "db": {}, "pools": { "a": {}, "b": { "size": 5 } }, "ports": [{ "port": 80 }] } }),
        );
        assert_eq!(
            out["spec"],
            json!({
                "db": { "port": 5432 },
                "pools": { "a": { "size": 2 }, "b": { "size": 5 } },
                "ports": [{ "port": 80, "protocol": "TCP" }],
            })
        );
    }

    #[test]
    fn a_defaulted_object_is_itself_defaulted() {
        let c = crd(
            "spec.db = { type = \"object\", default = {}, properties = { port = { type = \"integer\", default = 5432 } } }",
        );
        let out = defaulted(&c, json!({ "spec": {} }));
        assert_eq!(out["spec"], json!({ "db": { "port": 5432 } }));
    }

    #[test]
    fn null_is_defaulted_unless_nullable_and_pruned_without_a_default() {
        let c = crd(concat!(
            "spec.a = { type = \"integer\", default = 1 }\n",
            "spec.b = { type = \"integer\", default = 1, nullable = true }\n",
            "spec.c = { type = \"integer\" }\n",
        ));
        let out = defaulted(&c, json!({ "spec": { "a": null, "b": null, "c": null } }));
        assert_eq!(out["spec"], json!({ "a": 1, "b": null }));
    }

    #[test]
    fn status_fields_are_defaulted_too() {
        let c = crd(
            "spec.x = { type = \"string\" }\nstatus.phase = { type = \"string\", default = \"Pending\" }",
        );
        let out = defaulted(&c, json!({ "spec": {}, "status": {} }));
        assert_eq!(out["status"], json!({ "phase": "Pending" }));
    }

    #[test]
    fn raw_schemas_are_defaulted_the_same_way() {
        let schema = json!({
            "type": "object",
            "properties": { "spec": { "type": "object", "properties": {
                "size": { "type": "integer", "default": 3 },
            } } },
        });
        let mut obj = json!({ "spec": {} });
        apply_defaults(&schema, &mut obj);
        assert_eq!(obj, json!({ "spec": { "size": 3 } }));
    }
}
