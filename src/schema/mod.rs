//! Turns the model's CRDs into structural CustomResourceDefinition manifests and installs them.
//!
//! The compact field schema of `operator.toml` becomes OpenAPI v3 that the API server accepts as
//! *structural*: every node has a type (or is int-or-string), maps use `additionalProperties`,
//! `required` sits on the parent. Generation is pure; [`install`] is the only I/O here.

use crate::config::model::{Crd, Field, FieldType, Scope};
use indexmap::IndexMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// Label put on everything khai creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "khai");

/// Errors installing CRDs. Failures to talk to the API server are retryable by restarting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to apply CustomResourceDefinition {name}: {source}")]
    Apply {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CustomResourceDefinition {name} was not Established within {timeout:?}")]
    NotEstablished { name: String, timeout: Duration },
    #[error("failed to wait for CustomResourceDefinition {name}: {source}")]
    Wait {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
}

/// Lower-case plural of a kind, as Kubernetes tooling derives it.
pub fn plural_of(kind: &str) -> String {
    let k = kind.to_lowercase();
    if k.ends_with('s')
        || k.ends_with('x')
        || k.ends_with("ch")
        || k.ends_with("sh")
        || k.ends_with('z')
    {
        format!("{k}es")
    } else if let Some(stem) = k
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'i', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

impl Crd {
    pub fn plural(&self) -> String {
        self.plural.clone().unwrap_or_else(|| plural_of(&self.kind))
    }
    pub fn singular(&self) -> String {
        self.singular
            .clone()
            .unwrap_or_else(|| self.kind.to_lowercase())
    }
    /// `<plural>.<group>`, the CRD's object name.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural(), self.group)
    }
    /// The stored version: the one flagged `storage`, else the only (first) one.
    pub fn storage_version(&self) -> &str {
        self.versions
            .iter()
            .find(|v| v.storage_flag())
            .or(self.versions.first())
            .map_or("v1", |v| v.name())
    }
    /// The API resource khai watches and writes: the storage version.
    pub fn api_resource(&self) -> ApiResource {
        let version = self.storage_version().to_string();
        ApiResource {
            api_version: format!("{}/{}", self.group, version),
            group: self.group.clone(),
            version,
            kind: self.kind.clone(),
            plural: self.plural(),
        }
    }
}

/// The CRD manifest for `crd`, as JSON ready for server-side apply or YAML output.
pub fn crd_manifest(crd: &Crd) -> Value {
    let storage = crd.storage_version();
    let schema = root_schema(crd);
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
            if crd.status.is_some() {
                ver["subresources"] = json!({ "status": {} });
            }
            ver
        })
        .collect();
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
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": crd.crd_name(), "labels": { MANAGED_BY.0: MANAGED_BY.1 } },
        "spec": {
            "group": crd.group,
            "names": names,
            "scope": match crd.scope { Scope::Namespaced => "Namespaced", Scope::Cluster => "Cluster" },
            "versions": versions,
        }
    })
}

fn root_schema(crd: &Crd) -> Value {
    let mut props = Map::new();
    props.insert("spec".into(), object_schema(&crd.spec));
    if let Some(status) = &crd.status {
        props.insert("status".into(), object_schema(status));
    }
    let mut root = json!({ "type": "object", "properties": props });
    if crd.spec.values().any(|f| f.required) {
        root["required"] = json!(["spec"]);
    }
    root
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
pub fn field_schema(f: &Field) -> Value {
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

/// Applies every CRD with server-side apply and waits until each is Established.
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
        api.patch(&name, &params, &Patch::Apply(crd_manifest(crd)))
            .await
            .map_err(|source| Error::Apply {
                name: name.clone(),
                source,
            })?;
        tracing::info!(crd = %name, "applied CustomResourceDefinition");
    }
    for crd in crds {
        let name = crd.crd_name();
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        match tokio::time::timeout(timeout, established).await {
            Ok(Ok(_)) => tracing::debug!(crd = %name, "CustomResourceDefinition established"),
            Ok(Err(source)) => return Err(Error::Wait { name, source }),
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
        let m = crd_manifest(&model.crds[0]);
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
}
