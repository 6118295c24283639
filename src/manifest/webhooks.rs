//! The objects that point the API server at khai: a ValidatingWebhookConfiguration, a
//! MutatingWebhookConfiguration and each converting CRD's `spec.conversion`.
//!
//! No I/O: `khai generate webhooks` prints these and `khai run` applies them (with the caBundle
//! of its self-signed CA). Rules for a CRD of this file name only its storage version with
//! `matchPolicy: Equivalent`, so scripts always see the object at the storage version, whatever
//! version the client wrote.

use crate::config::kind::KindRef;
use crate::config::model::Model;
use crate::config::webhook::{ServiceRef, Webhook};
use serde_json::{Value, json};

/// Where the API server reaches khai.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// A base URL such as `https://127.0.0.1:9443`, for local development.
    Url(String),
    /// A Service in the cluster.
    Service(ServiceRef),
}

impl Target {
    /// `clientConfig` for `path` (`/validate/cache`), with `ca_bundle` (PEM) when known.
    pub(super) fn client_config(&self, path: &str, ca_bundle: Option<&str>) -> Value {
        let mut cc = match self {
            Target::Url(base) => json!({ "url": format!("{}{path}", base.trim_end_matches('/')) }),
            Target::Service(s) => json!({ "service": {
                "name": s.name, "namespace": s.namespace, "port": s.port, "path": path,
            } }),
        };
        if let Some(ca) = ca_bundle {
            use base64::Engine as _;
            cc["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        cc
    }
}

/// Name of both webhook configurations: `khai-<operator>`.
pub(crate) fn configuration_name(model: &Model) -> String {
    format!("khai-{}", model.operator.name)
}

/// Name of the Secret in khai's own namespace holding the self-signed CA and serving
/// certificate every replica shares: `khai-<operator>-webhook-tls`.
pub(crate) fn tls_secret_name(model: &Model) -> String {
    format!("khai-{}-webhook-tls", model.operator.name)
}

/// The Validating and Mutating webhook configurations, each only when some webhook needs it.
pub(crate) fn configurations(
    model: &Model,
    target: &Target,
    ca_bundle: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, prefix) in [
        ("ValidatingWebhookConfiguration", "validate"),
        ("MutatingWebhookConfiguration", "mutate"),
    ] {
        let hooks: Vec<Value> = model
            .webhooks
            .iter()
            .filter(|h| match prefix {
                "validate" => h.validate.is_some(),
                _ => h.mutate.is_some(),
            })
            .map(|h| entry(model, h, prefix, target, ca_bundle))
            .collect();
        if !hooks.is_empty() {
            out.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {
                    "name": configuration_name(model),
                    "labels": { "app.kubernetes.io/managed-by": "khai" },
                },
                "webhooks": hooks,
            }));
        }
    }
    out
}

fn entry(model: &Model, h: &Webhook, prefix: &str, target: &Target, ca: Option<&str>) -> Value {
    let name = h.display_name();
    let mut e = json!({
        "name": format!("{prefix}-{name}.{}.khai.dev", model.operator.name),
        "admissionReviewVersions": ["v1"],
        "clientConfig": target.client_config(&format!("/{prefix}/{name}"), ca),
        "rules": [rule(model, h)],
        "failurePolicy": h.failure_policy,
        "sideEffects": h.side_effects,
        "timeoutSeconds": h.timeout_seconds,
        "matchPolicy": "Equivalent",
    });
    if prefix == "mutate" {
        e["reinvocationPolicy"] = json!("Never");
    }
    for (key, value) in [
        ("namespaceSelector", &h.namespace_selector),
        ("objectSelector", &h.object_selector),
    ] {
        if let Some(v) = value {
            e[key] = v.clone();
        }
    }
    if !h.match_conditions.is_empty() {
        e["matchConditions"] = json!(h.match_conditions);
    }
    e
}

/// The rule matching the webhook's resource: a CRD of this file, `group/version/Kind`,
/// `v1/Kind` (the core group), `Kind.group` (any version) or a bare core `Kind`; with
/// `subresources`, `<plural>/<subresource>` for each (`""` is the object itself).
fn rule(model: &Model, h: &Webhook) -> Value {
    let (group, version, plural) = resource(model, &h.for_kind);
    let resources: Vec<String> = if h.subresources.is_empty() {
        vec![plural]
    } else {
        h.subresources
            .iter()
            .map(|s| match s.as_str() {
                "" => plural.clone(),
                s => format!("{plural}/{s}"),
            })
            .collect()
    };
    json!({
        "operations": h.operations,
        "apiGroups": [group],
        "apiVersions": [version],
        "resources": resources,
        "scope": "*",
    })
}

pub(super) fn resource(model: &Model, kind: &KindRef) -> (String, String, String) {
    if let Some(crd) = model.crd_for(kind) {
        let version = crd.storage_version().to_string();
        return (crd.group.clone(), version, crd.plural());
    }
    let offline = model.resolve_kind(kind);
    // `Kind.group` names no version: the rule matches any.
    let version = match (&kind.version, offline.known) {
        (Some(v), _) => v.clone(),
        (None, true) if kind.is_bare() => offline.kind.version.unwrap_or_else(|| "*".into()),
        (None, _) => "*".into(),
    };
    (
        offline.kind.group.unwrap_or_default(),
        version,
        offline.plural,
    )
}

/// A partial CRD, for server-side apply, that turns on webhook conversion through `h`.
pub(crate) fn crd_conversion(
    model: &Model,
    h: &Webhook,
    target: &Target,
    ca: Option<&str>,
) -> Option<Value> {
    let crd = model.crd_for(&h.for_kind)?;
    let path = format!("/convert/{}", h.display_name());
    Some(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": crd.crd_name() },
        "spec": { "conversion": {
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": target.client_config(&path, ca),
            },
        } },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    const SRC: &str = r#"
[operator]
name = "shop"

[[crd]]
group = "shop.khai.dev"
kind = "Order"
versions = [{ name = "v1alpha1" }, { name = "v1", storage = true }]

[[webhook]]
for = "Order"
script = "o.rhai"
validate = "validate"
convert = "convert"

[[webhook]]
for = "apps/v1/Deployment"
script = "d.rhai"
mutate = "mutate"
operations = ["CREATE"]
failure_policy = "Ignore"
namespace_selector = { matchLabels = { team = "a" } }
"#;

    #[test]
    fn configurations_name_rules_paths_and_policies() {
        let model = parse(Path::new("operator.toml"), SRC).unwrap();
        let target = Target::Url("https://127.0.0.1:9443/".into());
        let out = configurations(&model, &target, None);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["metadata"]["name"], "khai-shop");
        let v = &out[0]["webhooks"][0];
        assert_eq!(v["name"], "validate-order.shop.khai.dev");
        assert_eq!(
            v["clientConfig"],
            json!({ "url": "https://127.0.0.1:9443/validate/order" })
        );
        assert_eq!(
            v["rules"][0],
            json!({ "operations": ["CREATE", "UPDATE"], "apiGroups": ["shop.khai.dev"],
                    "apiVersions": ["v1"], "resources": ["orders"], "scope": "*" })
        );
        let m = &out[1]["webhooks"][0];
        assert_eq!(out[1]["kind"], "MutatingWebhookConfiguration");
        assert_eq!(m["rules"][0]["apiGroups"], json!(["apps"]));
        assert_eq!(m["rules"][0]["resources"], json!(["deployments"]));
        assert_eq!(m["failurePolicy"], "Ignore");
        assert_eq!(
            m["namespaceSelector"],
            json!({ "matchLabels": { "team": "a" } })
        );
        assert!(v.get("matchConditions").is_none());
        let src = SRC.replace(
            "validate = \"validate\"\n",
            "validate = \"validate\"\nmatch_conditions = [{ name = \"big\", expression = \"object.spec.size > 3\" }]\n",
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let out = configurations(&model, &target, None);
        assert_eq!(
            out[0]["webhooks"][0]["matchConditions"],
            json!([{ "name": "big", "expression": "object.spec.size > 3" }])
        );
    }

    #[test]
    fn subresources_become_plural_slash_name_and_empty_names_the_object() {
        let src = SRC.replace(
            "validate = \"validate\"\n",
            "validate = \"validate\"\nsubresources = [\"\", \"status\", \"*\"]\n",
        );
        let model = parse(Path::new("operator.toml"), &src).unwrap();
        let out = configurations(&model, &Target::Url("https://h".into()), None);
        assert_eq!(
            out[0]["webhooks"][0]["rules"][0]["resources"],
            json!(["orders", "orders/status", "orders/*"])
        );
        assert_eq!(
            out[1]["webhooks"][0]["rules"][0]["resources"],
            json!(["deployments"])
        );
    }

    #[test]
    fn service_target_and_ca_bundle_and_conversion() {
        let model = parse(Path::new("operator.toml"), SRC).unwrap();
        let svc = ServiceRef {
            name: "shop".into(),
            namespace: "ops".into(),
            port: 443,
        };
        let conv = crd_conversion(
            &model,
            &model.webhooks[0],
            &Target::Service(svc),
            Some("PEM"),
        )
        .unwrap();
        assert_eq!(conv["metadata"]["name"], "orders.shop.khai.dev");
        assert_eq!(
            conv["spec"]["conversion"]["webhook"]["clientConfig"],
            json!({ "service": { "name": "shop", "namespace": "ops", "port": 443, "path": "/convert/order" },
                    "caBundle": "UEVN" })
        );
    }
}
