//! The keys of the built-in kinds' list maps, which server-side apply needs in every entry.
//!
//! Server-side apply merges a list map (a Service's `spec.ports`, a container's `ports`, a Pod's
//! `containers`) entry by entry, by its keys. An entry that omits a key is refused with an
//! opaque 500 ("associative list with keys has an element that omits key field"), even where
//! the API server would default that key on a create: a Service port or a container port
//! without `protocol`. So khai fills in the keys the API server defaults (`protocol: TCP`), as
//! it would, and refuses a child whose entry lacks a key that has no default, or repeats
//! another entry's keys, naming the field in the script's words. `khai run` and `khai test`
//! both get here through [`super::parse_plan`]: a case that passes offline applies live.

use super::{InvalidAnswer, Problem};
use serde_json::{Map, Value};

/// Where a pod spec sits in each built-in kind that has one, by `apiVersion` and `kind`.
const POD_SPECS: &[(&str, &str, &[&str])] = &[
    ("v1", "Pod", &["spec"]),
    ("v1", "PodTemplate", &["template", "spec"]),
    ("v1", "ReplicationController", &["spec", "template", "spec"]),
    ("apps/v1", "Deployment", &["spec", "template", "spec"]),
    ("apps/v1", "ReplicaSet", &["spec", "template", "spec"]),
    ("apps/v1", "StatefulSet", &["spec", "template", "spec"]),
    ("apps/v1", "DaemonSet", &["spec", "template", "spec"]),
    ("batch/v1", "Job", &["spec", "template", "spec"]),
    (
        "batch/v1",
        "CronJob",
        &["spec", "jobTemplate", "spec", "template", "spec"],
    ),
];

/// One list map: its field, its keys, and the default of each key that has one.
struct ListMap {
    field: &'static str,
    keys: &'static [(&'static str, Option<&'static str>)],
}

const CONTAINERS: ListMap = ListMap {
    field: "containers",
    keys: &[("name", None)],
};
const INIT_CONTAINERS: ListMap = ListMap {
    field: "initContainers",
    keys: &[("name", None)],
};
const EPHEMERAL_CONTAINERS: ListMap = ListMap {
    field: "ephemeralContainers",
    keys: &[("name", None)],
};
const VOLUMES: ListMap = ListMap {
    field: "volumes",
    keys: &[("name", None)],
};
const CONTAINER_PORTS: ListMap = ListMap {
    field: "ports",
    keys: &[("containerPort", None), ("protocol", Some("TCP"))],
};
const ENV: ListMap = ListMap {
    field: "env",
    keys: &[("name", None)],
};
const VOLUME_MOUNTS: ListMap = ListMap {
    field: "volumeMounts",
    keys: &[("mountPath", None)],
};
const SERVICE_PORTS: ListMap = ListMap {
    field: "ports",
    keys: &[("port", None), ("protocol", Some("TCP"))],
};

/// Fills in the defaulted keys of `child`'s list maps, or says which entry cannot be applied.
/// `at` is the child's place in the answer (`children[0]`).
pub(super) fn fill(child: &mut Value, at: &str) -> Result<(), InvalidAnswer> {
    let api_version = child["apiVersion"].as_str().unwrap_or_default().to_string();
    let kind = child["kind"].as_str().unwrap_or_default().to_string();
    if (api_version.as_str(), kind.as_str()) == ("v1", "Service") {
        return fill_list(child, &format!("{at}.spec"), &["spec"], &SERVICE_PORTS);
    }
    let Some((_, _, path)) = POD_SPECS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
    else {
        return Ok(());
    };
    let Some(spec) = descend(child, path) else {
        return Ok(());
    };
    let here = format!("{at}.{}", path.join("."));
    fill_list(spec, &here, &[], &VOLUMES)?;
    for containers in [&CONTAINERS, &INIT_CONTAINERS, &EPHEMERAL_CONTAINERS] {
        fill_list(spec, &here, &[], containers)?;
        let Some(Value::Array(items)) = spec.get_mut(containers.field) else {
            continue;
        };
        for (i, c) in items.iter_mut().enumerate() {
            let place = format!("{here}.{}[{i}]", containers.field);
            for list in [&CONTAINER_PORTS, &ENV, &VOLUME_MOUNTS] {
                fill_list(c, &place, &[], list)?;
            }
        }
    }
    Ok(())
}

/// The map at `path` under `v`, if every step is a map.
fn descend<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter()
        .try_fold(v, |v, key| v.get_mut(*key).filter(|v| v.is_object()))
}

/// Fills the defaulted keys of the list `list.field` at `path` under `parent` (`at` names
/// `parent`'s place at `path`), and checks every entry has every key, once.
fn fill_list(
    parent: &mut Value,
    at: &str,
    path: &[&str],
    list: &ListMap,
) -> Result<(), InvalidAnswer> {
    let Some(Value::Array(items)) = descend(parent, path).and_then(|p| p.get_mut(list.field))
    else {
        return Ok(());
    };
    let mut seen: Vec<(usize, Vec<Value>)> = Vec::with_capacity(items.len());
    for (i, entry) in items.iter_mut().enumerate() {
        let field = format!("{at}.{}[{i}]", list.field);
        let Value::Object(fields) = entry else {
            continue;
        };
        let keys = keys_of(fields, list).map_err(|key| {
            Problem::MissingListKey {
                key,
                list: list.field,
            }
            .at(field.clone())
        })?;
        if let Some((first, _)) = seen.iter().find(|(_, k)| *k == keys) {
            return Err(Problem::RepeatedListKeys {
                keys: describe(list, &keys),
                first: format!("{at}.{}[{first}]", list.field),
            }
            .at(field));
        }
        seen.push((i, keys));
    }
    Ok(())
}

/// The values of `list`'s keys in `fields`, defaulted ones filled in; the first key that is
/// missing and has no default, if any.
fn keys_of(fields: &mut Map<String, Value>, list: &ListMap) -> Result<Vec<Value>, &'static str> {
    list.keys
        .iter()
        .map(|(key, default)| match (fields.get(*key), default) {
            (Some(v), _) => Ok(v.clone()),
            (None, Some(d)) => {
                let v = Value::String((*d).into());
                fields.insert((*key).into(), v.clone());
                Ok(v)
            }
            (None, None) => Err(*key),
        })
        .collect()
}

/// `port 80, protocol "TCP"`.
fn describe(list: &ListMap, keys: &[Value]) -> String {
    list.keys
        .iter()
        .zip(keys)
        .map(|((k, _), v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filled(mut child: Value) -> Result<Value, String> {
        fill(&mut child, "children[0]").map_err(|e| e.to_string())?;
        Ok(child)
    }

    #[test]
    fn a_service_port_and_a_container_port_get_the_protocol_the_server_defaults() {
        let svc = filled(
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "a" },
            "spec": { "ports": [{ "port": 80 }, { "port": 53, "protocol": "UDP" }] } }),
        )
        .unwrap();
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
        let cron = filled(json!({ "apiVersion": "batch/v1", "kind": "CronJob",
            "spec": { "jobTemplate": { "spec": { "template": { "spec": {
                "containers": [{ "name": "c", "ports": [{ "containerPort": 8080 }] }] } } } } } }))
        .unwrap();
        let port =
            &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["ports"][0];
        assert_eq!(port["protocol"], "TCP");
    }

    #[test]
    fn an_entry_without_a_key_that_has_no_default_is_refused_where_it_is() {
        let err = filled(json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "spec": { "template": { "spec": { "containers": [
                { "name": "web", "env": [{ "name": "A", "value": "1" }, { "value": "2" }] }] } } } }))
        .unwrap_err();
        assert_eq!(
            err,
            "children[0].spec.template.spec.containers[0].env[1]: has no `name`, which the API \
             server needs to tell the entries of `env` apart"
        );
        let err = filled(json!({ "apiVersion": "v1", "kind": "Service",
            "spec": { "ports": [{ "targetPort": 80 }] } }))
        .unwrap_err();
        assert!(
            err.starts_with("children[0].spec.ports[0]: has no `port`"),
            "{err}"
        );
    }

    #[test]
    fn two_entries_with_the_same_keys_are_refused_naming_both() {
        let err = filled(json!({ "apiVersion": "v1", "kind": "Service",
            "spec": { "ports": [{ "port": 80, "name": "a" }, { "port": 80, "protocol": "TCP", "name": "b" }] } }))
        .unwrap_err();
        assert_eq!(
            err,
            "children[0].spec.ports[1]: repeats port 80, protocol \"TCP\" of \
             children[0].spec.ports[0]; each entry of the list needs its own"
        );
    }

    #[test]
    fn other_kinds_and_odd_shapes_are_left_alone() {
        let cm = json!({ "apiVersion": "v1", "kind": "ConfigMap", "data": { "ports": "x" } });
        assert_eq!(filled(cm.clone()).unwrap(), cm);
        let odd = json!({ "apiVersion": "v1", "kind": "Pod", "spec": { "containers": "x" } });
        assert_eq!(filled(odd.clone()).unwrap(), odd);
        let custom = json!({ "apiVersion": "x.dev/v1", "kind": "Service",
            "spec": { "ports": [{ "name": "a" }] } });
        assert_eq!(filled(custom.clone()).unwrap(), custom);
    }
}
