//! Grants for what khai does for itself rather than for a script: leader election, reading its
//! config from a ConfigMap, installing CRDs and admission policies, registering self-signed
//! webhooks (and the Secret of their shared CA), and discovery.

use super::Plan;
use crate::config::model::Model;
use crate::config::webhook::TlsMode;

/// Adds to `p` what khai itself calls; `config_map` is the ConfigMap khai reads its config
/// from, if it does, and `needs_discovery` whether a kind must be resolved by discovery.
pub(super) fn grant(
    model: &Model,
    config_map: Option<&String>,
    needs_discovery: bool,
    p: &mut Plan,
) {
    // khai's Deployment always runs with leader election, so no two replicas reconcile at once.
    p.own.add(
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update"],
    );
    if let Some(name) = config_map {
        p.config.add_named(
            "",
            "configmaps",
            std::slice::from_ref(name),
            &["get", "list", "watch"],
        );
        p.config
            .add("events.k8s.io", "events", &["create", "patch"]);
    }
    let crds = "apiextensions.k8s.io";
    let crd_names: Vec<String> = model.crds.iter().map(|c| c.crd_name()).collect();
    if model.operator.install_crds && !crd_names.is_empty() {
        p.cluster.add(
            crds,
            "customresourcedefinitions",
            &["create", "list", "watch"],
        );
        p.cluster.add_named(
            crds,
            "customresourcedefinitions",
            &crd_names,
            &["get", "patch"],
        );
    }
    if model.operator.install_crds && !model.policies.is_empty() {
        policies(model, p);
    }
    if model.webhook_server.tls == TlsMode::SelfSigned {
        webhooks(model, p);
        if !model.webhooks.is_empty() {
            shared_ca(model, &mut p.own);
        }
    }
    if needs_discovery {
        discovery(p);
    }
}

/// Grants the discovery URLs, to resolve kinds that are not CRDs of the config.
pub(super) fn discovery(p: &mut Plan) {
    for url in ["/api", "/api/*", "/apis", "/apis/*"] {
        p.cluster.add_url(url);
    }
}

/// `[[policy]]` with `install_crds`: khai applies each policy and its binding at start, both
/// named `khai-<operator>-<name>`.
fn policies(model: &Model, p: &mut Plan) {
    let names: Vec<String> = model
        .policies
        .iter()
        .map(|x| crate::manifest::policies::object_name(model, x))
        .collect();
    let reg = "admissionregistration.k8s.io";
    for resource in [
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
    ] {
        p.cluster.add(reg, resource, &["create"]);
        p.cluster
            .add_named(reg, resource, &names, &["get", "patch"]);
    }
}

/// Self-signed webhooks: khai writes its webhook configurations and the CRDs it converts.
fn webhooks(model: &Model, p: &mut Plan) {
    let name = vec![crate::manifest::webhooks::configuration_name(model)];
    let reg = "admissionregistration.k8s.io";
    for (resource, used) in [
        (
            "validatingwebhookconfigurations",
            model.webhooks.iter().any(|h| h.validate.is_some()),
        ),
        (
            "mutatingwebhookconfigurations",
            model.webhooks.iter().any(|h| h.mutate.is_some()),
        ),
    ] {
        if used {
            p.cluster.add(reg, resource, &["create"]);
            p.cluster
                .add_named(reg, resource, &name, &["get", "patch", "delete"]);
        } else if !model.webhooks.is_empty() {
            // khai deletes its own configuration of a kind the config stopped using (a
            // reload that removed the last `mutate`), or the API server would call a path
            // khai no longer serves.
            p.cluster
                .add_named(reg, resource, &name, &["get", "delete"]);
        }
    }
    let converted: Vec<String> = model
        .webhooks
        .iter()
        .filter(|h| h.convert.is_some())
        .filter_map(|h| model.crd_for(&h.for_kind))
        .map(|c| c.crd_name())
        .collect();
    if !converted.is_empty() {
        p.cluster.add_named(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &converted,
            &["get", "patch"],
        );
    }
}

/// Self-signed webhooks: the Secret in khai's own namespace that every replica keeps its shared
/// CA in. A create cannot be limited to a name, reading and replacing it can.
pub(super) fn shared_ca(model: &Model, own: &mut super::Rules) {
    let name = vec![crate::manifest::webhooks::tls_secret_name(model)];
    own.add("", "secrets", &["create"]);
    own.add_named("", "secrets", &name, &["get", "update"]);
}

/// Adds what khai needs to check the tokens sent to a console it serves off loopback: a
/// TokenReview and a SubjectAccessReview per token (docs/console.md, "Access off loopback").
pub(crate) fn console_reviews(p: &mut Plan) {
    p.cluster
        .add("authentication.k8s.io", "tokenreviews", &["create"]);
    p.cluster
        .add("authorization.k8s.io", "subjectaccessreviews", &["create"]);
}
