//! The RBAC of `khai diff`: it reads what `khai run` reads and writes nothing, but for the
//! server-side apply dry runs that validate the children it would write.
//!
//! The API server authorises a dry run as the request it stands for, before it gets to the dry
//! run: a server-side apply is a `patch`, and one of an object that does not exist yet is also
//! authorised as a `create` (a dry run without `create` is refused with 403). So the write verbs
//! are `create` and `patch` on the owned kinds, for dry runs only; everything else is `get`,
//! `list` and `watch` of what the controllers, handlers, indexes and `[operator] uses` read,
//! the Secrets scripts may read, and discovery. Objects are named `khai-<operator>-diff`, apart
//! from `khai run`'s.

use super::{Input, Plan, Rules, named, own, resolve, workloads};
use serde_json::Value;

/// The verbs that only read.
const READ: [&str; 3] = ["get", "list", "watch"];

/// Derives what `khai diff` needs for `input`.
pub(crate) fn plan(input: &Input<'_>) -> Plan {
    let model = input.model;
    let mut p = Plan {
        namespaces: if input.watch_namespaces.is_empty() {
            model.operator.namespaces.clone()
        } else {
            input.watch_namespaces.clone()
        },
        ..Plan::default()
    };
    if workloads::grant(model, &input.finalizes, &mut p) {
        own::discovery(&mut p);
    }
    named::grant(model, &mut p);
    let read = |r: &Rules| r.only(&READ);
    p.cluster = read(&p.cluster);
    p.namespaced = read(&p.namespaced);
    p.secrets = p
        .secrets
        .iter()
        .map(|(ns, r)| (ns.clone(), read(r)))
        .collect();
    for o in model.controllers.iter().flat_map(|c| &c.owns) {
        let r = resolve(model, o);
        p.grant(&r, &r.plural, &["create", "patch"]);
    }
    p
}

/// `khai run`'s RBAC objects for `plan`, renamed `khai-<operator>-diff…`.
pub(crate) fn manifests(model: &crate::config::Model, namespace: &str, plan: &Plan) -> Vec<Value> {
    let name = super::name(model);
    let rename = |v: &mut Value| {
        if let Some(rest) = v.as_str().and_then(|s| s.strip_prefix(&name)) {
            *v = format!("{name}-diff{rest}").into();
        }
    };
    let mut docs = super::manifests(model, namespace, plan);
    for doc in &mut docs {
        rename(&mut doc["metadata"]["name"]);
        if let Some(role) = doc.get_mut("roleRef").and_then(|r| r.get_mut("name")) {
            rename(role);
        }
        let subjects = doc.get_mut("subjects").and_then(Value::as_array_mut);
        for name in subjects
            .into_iter()
            .flatten()
            .filter_map(|s| s.get_mut("name"))
        {
            rename(name);
        }
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    const CACHE: &str = r#"
[operator]
name = "cache"
uses = [{ kind = "v1/Pod", verbs = ["get", "delete"] }]

[[crd]]
group = "x.dev"
kind = "Cache"
versions = ["v1"]
status.phase = { type = "string" }

[[controller]]
for = "Cache"
owns = ["v1/ConfigMap"]
script = "c.rhai"
"#;

    #[test]
    fn diff_reads_everything_run_reads_and_applies_only_owned_kinds() {
        let model = parse(Path::new("operator.toml"), CACHE).unwrap();
        let p = plan(&Input {
            model: &model,
            finalizes: vec![true],
            watch_namespaces: vec![],
            config_map: None,
            shards: None,
        });
        assert_eq!(p.cluster.verbs("x.dev", "caches"), ["get", "list", "watch"]);
        assert!(p.cluster.verbs("x.dev", "caches/status").is_empty());
        assert!(p.cluster.verbs("x.dev", "caches/finalizers").is_empty());
        assert_eq!(
            p.cluster.verbs("", "configmaps"),
            ["create", "get", "list", "patch", "watch"]
        );
        assert_eq!(
            p.cluster.verbs("", "pods"),
            ["get"],
            "a script's read, not its delete"
        );
        assert!(p.cluster.verbs("events.k8s.io", "events").is_empty());
        assert!(p.own.is_empty(), "no leader election");
        let docs = manifests(&model, "ops", &p);
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["khai-cache-diff"; 3]);
        assert_eq!(
            docs[0].get("subjects"),
            None,
            "a ServiceAccount gains no fields"
        );
        assert_eq!(docs[2]["roleRef"]["name"], "khai-cache-diff");
        assert_eq!(docs[2]["subjects"][0]["name"], "khai-cache-diff");
    }
}
