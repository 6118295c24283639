//! Turns the model's CRDs into structural CustomResourceDefinition manifests and installs them.
//!
//! The compact field schema of `operator.toml` becomes OpenAPI v3 that the API server accepts as
//! *structural*: every node has a type (or is int-or-string), maps use `additionalProperties`,
//! `required` sits on the parent. A CRD with a `schema_file` uses that file's schema as it is.
//! Every version gets the same schema, subresources and printer columns, so versions differ
//! only in being served and stored. Generation is pure (`khai generate crds` prints it without a
//! cluster); [`install`] is the only I/O here.

pub(crate) mod current;
mod defaults;
pub(crate) mod rules;

pub use defaults::default_object;

use crate::config::model::{Crd, Field, FieldType, PrinterColumn, Scale, Scope};
use indexmap::IndexMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Label put on everything khai creates.
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "khai");

/// Errors installing CRDs. Failures to talk to the API server are retryable by restarting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to apply CustomResourceDefinition {name}: {cause}")]
    Apply {
        name: String,
        cause: crate::client::ApiError,
    },
    #[error(
        "CustomResourceDefinition {name}: schema_file {path} was never read; load the config \
         with config::load"
    )]
    SchemaFileNotRead { name: String, path: String },
    #[error("CustomResourceDefinition {name} was not Established within {timeout:?}")]
    NotEstablished { name: String, timeout: Duration },
    #[error("failed to wait for CustomResourceDefinition {name}: {message}")]
    Wait { name: String, message: String },
}

pub(crate) use crate::config::kind::plural_of;

/// The CRD manifest for `crd`, as JSON ready for server-side apply or YAML output.
///
/// Fails only for a CRD with a `schema_file` that [`crate::config::load`] has not read (a model
/// from [`crate::config::parse`] alone).
pub fn crd_manifest(crd: &Crd) -> Result<Value, Error> {
    let schema = root_schema(crd)?;
    let storage = crd.storage_version();
    let subresources = subresources(crd, &schema);
    let columns: Vec<Value> = crd.printer_columns.iter().map(printer_column).collect();
    let versions: Vec<Value> = crd
        .versions
        .iter()
        .map(|v| {
            let mut ver = json!({
                "name": v.name(),
                "served": v.served(),
                "storage": v.name() == storage,
                "schema": { "openAPIV3Schema": schema },
            });
            if !subresources.is_empty() {
                ver["subresources"] = Value::Object(subresources.clone());
            }
            if !columns.is_empty() {
                ver["additionalPrinterColumns"] = json!(columns);
            }
            if !crd.selectable_fields.is_empty() {
                let paths = crd
                    .selectable_fields
                    .iter()
                    .map(|p| json!({ "jsonPath": p }));
                ver["selectableFields"] = Value::Array(paths.collect());
            }
            ver
        })
        .collect();
    let mut manifest = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": crd.crd_name(), "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
        "spec": {
            "group": crd.group,
            "names": names(crd),
            "scope": match crd.scope { Scope::Namespaced => "Namespaced", Scope::Cluster => "Cluster" },
            "versions": versions,
        }
    });
    current::stamp(&mut manifest);
    Ok(manifest)
}

fn names(crd: &Crd) -> Value {
    let mut names = json!({
        "kind": crd.kind,
        "listKind": format!("{}List", crd.kind),
        "plural": crd.plural(),
        "singular": crd.singular(),
    });
    if !crd.short_names.is_empty() {
        names["shortNames"] = json!(crd.short_names);
    }
    if !crd.categories.is_empty() {
        names["categories"] = json!(crd.categories);
    }
    names
}

/// `status` when the schema has a `.status`, `scale` when declared.
fn subresources(crd: &Crd, schema: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if schema["properties"].get("status").is_some() {
        out.insert("status".into(), json!({}));
    }
    if let Some(scale) = &crd.scale {
        out.insert("scale".into(), scale_subresource(scale));
    }
    out
}

fn scale_subresource(scale: &Scale) -> Value {
    let mut out = json!({
        "specReplicasPath": scale.spec_replicas_path,
        "statusReplicasPath": scale.status_replicas_path,
    });
    if let Some(path) = &scale.label_selector_path {
        out["labelSelectorPath"] = json!(path);
    }
    out
}

fn printer_column(col: &PrinterColumn) -> Value {
    let mut out = json!({ "name": col.name, "type": col.ty, "jsonPath": col.json_path });
    if let Some(d) = &col.description {
        out["description"] = json!(d);
    }
    if let Some(p) = col.priority {
        out["priority"] = json!(p);
    }
    if let Some(f) = col.format {
        out["format"] = json!(f);
    }
    out
}

/// The whole `openAPIV3Schema`: the schema file's, or one built from `spec` and `status`.
fn root_schema(crd: &Crd) -> Result<Value, Error> {
    if let Some(path) = &crd.schema_file {
        return crd
            .raw_schema
            .clone()
            .ok_or_else(|| Error::SchemaFileNotRead {
                name: crd.crd_name(),
                path: path.display().to_string(),
            });
    }
    let mut props = Map::new();
    props.insert("spec".into(), object_schema(&crd.spec));
    if let Some(status) = &crd.status {
        props.insert("status".into(), status_schema(status));
    }
    let mut root = json!({ "type": "object", "properties": props });
    if crd.spec.values().any(|f| f.required) {
        root["required"] = json!(["spec"]);
    }
    if let Some(v) = rules::validations(&crd.rules) {
        root["x-kubernetes-validations"] = v;
    }
    Ok(root)
}

/// The declared status fields plus the two khai maintains itself on every CRD with a status:
/// `observedGeneration` and standard `conditions`. Declaring either explicitly wins.
fn status_schema(fields: &IndexMap<String, Field>) -> Value {
    let mut out = object_schema(fields);
    let props = out["properties"].as_object().cloned().unwrap_or_default();
    let mut props = props;
    props
        .entry("observedGeneration")
        .or_insert_with(|| json!({ "type": "integer", "format": "int64" }));
    props.entry("conditions").or_insert_with(|| {
        let s = json!({ "type": "string" });
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": s, "status": s, "reason": s, "message": s,
                    "lastTransitionTime": { "type": "string", "format": "date-time" },
                    "observedGeneration": { "type": "integer", "format": "int64" },
                },
            },
        })
    });
    out["properties"] = Value::Object(props);
    out
}

fn object_schema(fields: &IndexMap<String, Field>) -> Value {
    let mut out = json!({ "type": "object" });
    if !fields.is_empty() {
        let props: Map<String, Value> = fields
            .iter()
            .map(|(k, f)| (k.clone(), field_schema(f)))
            .collect();
        out["properties"] = Value::Object(props);
    }
    let required: Vec<&String> = fields
        .iter()
        .filter(|(_, f)| f.required)
        .map(|(k, _)| k)
        .collect();
    if !required.is_empty() {
        out["required"] = json!(required);
    }
    out
}

/// One field as structural OpenAPI v3.
pub(crate) fn field_schema(f: &Field) -> Value {
    let mut s = match f.ty {
        FieldType::String => json!({ "type": "string" }),
        FieldType::Integer => json!({ "type": "integer" }),
        FieldType::Number => json!({ "type": "number" }),
        FieldType::Boolean => json!({ "type": "boolean" }),
        FieldType::IntOrString => json!({ "x-kubernetes-int-or-string": true }),
        FieldType::Array => {
            let items = f
                .items
                .as_deref()
                .map_or_else(|| json!({ "type": "string" }), field_schema);
            json!({ "type": "array", "items": items })
        }
        FieldType::Map => {
            let values = f
                .values
                .as_deref()
                .map_or_else(|| json!({ "type": "string" }), field_schema);
            json!({ "type": "object", "additionalProperties": values })
        }
        FieldType::Object => f
            .properties
            .as_ref()
            .map_or_else(|| json!({ "type": "object" }), object_schema),
    };
    let opt = |v: Option<Value>| v.filter(|v| !v.is_null());
    let extras = [
        ("description", opt(f.description.as_ref().map(|d| json!(d)))),
        ("default", f.default.clone()),
        ("enum", opt(f.enum_values.as_ref().map(|e| json!(e)))),
        ("minimum", opt(f.minimum.map(number))),
        ("maximum", opt(f.maximum.map(number))),
        ("minLength", opt(f.min_length.map(|n| json!(n)))),
        ("maxLength", opt(f.max_length.map(|n| json!(n)))),
        ("pattern", opt(f.pattern.as_ref().map(|p| json!(p)))),
        ("format", opt(f.format.as_ref().map(|p| json!(p)))),
        ("nullable", f.nullable.then(|| json!(true))),
        (
            "x-kubernetes-preserve-unknown-fields",
            f.preserve_unknown_fields.then(|| json!(true)),
        ),
        ("x-kubernetes-validations", rules::validations(&f.rules)),
    ];
    for (k, v) in extras {
        if let Some(v) = v {
            s[k] = v;
        }
    }
    s
}

/// Integral bounds are written as integers so `minimum: 0` does not become `0.0`.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

/// Applies every CRD with server-side apply, unless the cluster already holds it as khai would
/// apply it (see [`current`]), and waits until each is Established.
pub async fn install(
    client: &kube::Client,
    crds: &[Crd],
    field_manager: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(field_manager).force();
    for crd in crds {
        let name = crd.crd_name();
        let manifest = crd_manifest(crd)?;
        // A failed read just means applying, as before.
        if let Ok(Some(live)) = api.get_opt(&name).await
            && serde_json::to_value(&live).is_ok_and(|l| current::is_current(&l, &manifest))
        {
            tracing::info!(crd = %name, "CustomResourceDefinition is up to date");
            continue;
        }
        api.patch(&name, &params, &Patch::Apply(manifest))
            .await
            .map_err(|cause| Error::Apply {
                name: name.clone(),
                cause: cause.into(),
            })?;
        tracing::info!(crd = %name, "applied CustomResourceDefinition");
    }
    for crd in crds {
        let name = crd.crd_name();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(timeout, established).await {
            Ok(Ok(_)) => tracing::debug!(crd = %name, "CustomResourceDefinition established"),
            Ok(Err(kube::runtime::wait::Error::ProbeFailed(e))) => {
                let message = crate::client::watch_error(&e);
                return Err(Error::Wait { name, message });
            }
            Err(_) => return Err(Error::NotEstablished { name, timeout }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    #[test]
    fn plural_follows_english_rules_kubernetes_uses() {
        assert_eq!(plural_of("Hello"), "hellos");
        assert_eq!(plural_of("Policy"), "policies");
        assert_eq!(plural_of("Gateway"), "gateways");
        assert_eq!(plural_of("Ingress"), "ingresses");
        assert_eq!(plural_of("Box"), "boxes");
    }

    #[test]
    fn hello_crd_is_structural_with_defaults_bounds_and_status() {
        let src = r#"
[[crd]]
group = "examples.khai.dev"
kind = "Hello"
versions = ["v1"]
short_names = ["hi"]
spec.message = { type = "string", required = true, max_length = 64 }
spec.replicas = { type = "integer", default = 1, minimum = 0, maximum = 10 }
spec.labels = { type = "map" }
spec.ports = { type = "array", items = { type = "integer" } }
spec.size = { type = "int-or-string" }
status.phase = { type = "string", enum = ["Pending", "Ready"] }
"#;
        let model = parse(Path::new("operator.toml"), src).unwrap();
        let m = crd_manifest(&model.crds[0]).unwrap();
        assert_eq!(m["metadata"]["name"], "hellos.examples.khai.dev");
        assert_eq!(m["spec"]["names"]["shortNames"], json!(["hi"]));
        let v = &m["spec"]["versions"][0];
        assert_eq!(v["storage"], true);
        assert_eq!(v["subresources"], json!({ "status": {} }));
        let schema = &v["schema"]["openAPIV3Schema"];
        assert_eq!(schema["required"], json!(["spec"]));
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["required"], json!(["message"]));
        assert_eq!(
            spec["properties"]["message"],
            json!({ "type": "string", "maxLength": 64 })
        );
        assert_eq!(
            spec["properties"]["replicas"],
            json!({ "type": "integer", "default": 1, "minimum": 0, "maximum": 10 })
        );
        assert_eq!(
            spec["properties"]["labels"],
            json!({ "type": "object", "additionalProperties": { "type": "string" } })
        );
        assert_eq!(
            spec["properties"]["ports"]["items"],
            json!({ "type": "integer" })
        );
        assert_eq!(
            spec["properties"]["size"],
            json!({ "x-kubernetes-int-or-string": true })
        );
        assert_eq!(
            schema["properties"]["status"]["properties"]["phase"]["enum"],
            json!(["Pending", "Ready"])
        );
    }

    const WIDGET: &str = r#"
[[crd]]
group = "widgets.khai.dev"
kind = "Widget"
versions = [{ name = "v1alpha1", served = false }, { name = "v1beta1" }, { name = "v1", storage = true }]
printer_columns = [
  { name = "Replicas", type = "integer", json_path = ".spec.replicas" },
  { name = "Since", type = "date", json_path = ".metadata.creationTimestamp", description = "Age", priority = 1, format = "date-time" },
]
scale = { spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas", label_selector_path = ".status.selector" }
spec.replicas = { type = "integer" }
status.replicas = { type = "integer" }
status.selector = { type = "string" }
"#;

    fn widget() -> Value {
        let model = parse(Path::new("operator.toml"), WIDGET).unwrap();
        crd_manifest(&model.crds[0]).unwrap()
    }

    #[test]
    fn each_version_is_emitted_with_its_own_served_and_storage_flags() {
        let m = widget();
        let flags: Vec<_> = m["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].clone(), v["served"].clone(), v["storage"].clone()))
            .collect();
        assert_eq!(
            flags,
            [
                (json!("v1alpha1"), json!(false), json!(false)),
                (json!("v1beta1"), json!(true), json!(false)),
                (json!("v1"), json!(true), json!(true)),
            ]
        );
        let v = &m["spec"]["versions"];
        assert_eq!(v[0]["schema"], v[2]["schema"]);
        assert_eq!(v[0]["subresources"], v[2]["subresources"]);
    }

    #[test]
    fn printer_columns_and_scale_are_emitted_in_every_version() {
        let m = widget();
        for v in m["spec"]["versions"].as_array().unwrap() {
            assert_eq!(
                v["additionalPrinterColumns"],
                json!([
                    { "name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas" },
                    { "name": "Since", "type": "date", "jsonPath": ".metadata.creationTimestamp",
                      "description": "Age", "priority": 1, "format": "date-time" },
                ])
            );
            assert_eq!(
                v["subresources"],
                json!({
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                })
            );
        }
    }

    #[test]
    fn a_crd_without_extras_has_no_subresources_or_columns() {
        let src = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Plain\"\nversions = [\"v1\"]\n";
        let model = parse(Path::new("operator.toml"), src).unwrap();
        let v = &crd_manifest(&model.crds[0]).unwrap()["spec"]["versions"][0];
        assert!(v.get("subresources").is_none(), "{v}");
        assert!(v.get("additionalPrinterColumns").is_none(), "{v}");
    }

    #[test]
    fn a_schema_file_is_used_as_the_whole_schema_and_its_status_turns_on_the_subresource() {
        let src = "[[crd]]\ngroup = \"a.khai.dev\"\nkind = \"Raw\"\nversions = [\"v1\"]\nschema_file = \"raw.yaml\"\n";
        let mut model = parse(Path::new("operator.toml"), src).unwrap();
        let err = crd_manifest(&model.crds[0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CustomResourceDefinition raws.a.khai.dev: schema_file raw.yaml was never read; load \
             the config with config::load"
        );
        let raw = json!({
            "type": "object",
            "properties": {
                "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "status": { "type": "object" },
            },
        });
        model.crds[0].raw_schema = Some(raw.clone());
        let m = crd_manifest(&model.crds[0]).unwrap();
        let v = &m["spec"]["versions"][0];
        assert_eq!(v["schema"]["openAPIV3Schema"], raw);
        assert_eq!(v["subresources"], json!({ "status": {} }));
    }
}
