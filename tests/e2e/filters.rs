//! Every filter key against every handler kind, on the real API server: an object a filter
//! excludes never runs the entry, and one it includes does.
//!
//! The filter keys are `labels`, `annotations` and `when` on the entry, and the operator's
//! namespaces (an object in a namespace khai does not watch). The kinds are the handlers
//! (`create`, `update`, `field`, `delete`, optional `delete`, `resume`, `event`), `[[timer]]` and
//! `[[daemon]]`. Each entry marks its run in a ConfigMap (`<entry>.<object>.<spec.size>`), so
//! what ran is read from state. Every kind also has an unfiltered entry, run in the same turn
//! (or the same watch event) as the filtered ones: once it has marked the excluded object, the
//! filtered entries have decided about that object too.

use crate::support::{Khai, TestNamespace, custom_api, wait_for, wait_until_gone};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeSet;

const GROUP: &str = "filters.khai.dev";
/// The filters of the table; `none` is the unfiltered entry (only the namespaces apply).
const FILTERS: [(&str, &str); 4] = [
    ("labels", "labels = { pick = \"yes\" }"),
    ("annotations", "annotations = { pick = \"yes\" }"),
    ("when", "when = \"picked\""),
    ("none", ""),
];

/// The kinds of entry: a name, its TOML table (`{f}` is the function) and the arguments of its
/// function.
const KINDS: [(&str, &str, &str); 9] = [
    ("create", HANDLER_CREATE, CHANGE),
    (
        "update",
        "[[handler]]\non = \"update\"\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "field",
        "[[handler]]\non = \"field\"\nfield = \"spec.size\"\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "delete",
        "[[handler]]\non = \"delete\"\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "gone",
        "[[handler]]\non = \"delete\"\noptional = true\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "resume",
        "[[handler]]\non = \"resume\"\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "event",
        "[[handler]]\non = \"event\"\nfunction = \"{f}\"",
        CHANGE,
    ),
    (
        "timer",
        "[[timer]]\nfunction = \"{f}\"\ninterval = \"1s\"",
        "obj, ctx",
    ),
    (
        "daemon",
        "[[daemon]]\ntick = \"{f}\"\ninterval = \"1s\"",
        "obj, ctx, state",
    ),
];
const HANDLER_CREATE: &str = "[[handler]]\non = \"create\"\nfunction = \"{f}\"";
const CHANGE: &str = "obj, ctx, change";

/// The operator and its script: one entry per kind and filter, each marking its runs in the
/// ConfigMap `marks` of `ns`.
fn config(ns: &str) -> (String, String) {
    let mut toml = format!(
        "[operator]\nname = \"filters\"\n\
         uses = [{{ kind = \"v1/ConfigMap\", verbs = [\"patch\"] }}]\n\n\
         [[crd]]\ngroup = \"{GROUP}\"\nkind = \"Sieve\"\nversions = [\"v1\"]\n\
         spec.message = {{ type = \"string\" }}\nspec.size = {{ type = \"integer\" }}\n"
    );
    let mut script = format!(
        "fn picked(obj) {{ obj.spec.message == \"pick\" }}\n\
         fn mark(entry, obj) {{\n\
         \x20   let data = #{{}};\n\
         \x20   data[`${{entry}}.${{obj.metadata.name}}.${{obj.spec.size}}`] = \"1\";\n\
         \x20   k8s::patch(\"v1/ConfigMap\", \"{ns}\", \"marks\", #{{ data: data }});\n\
         \x20   ()\n}}\n"
    );
    for (kind, table, args) in KINDS {
        for (filter, line) in FILTERS {
            let f = format!("{kind}_{filter}");
            let table = table.replace("{f}", &f);
            toml += &format!("\n{table}\nfor = \"Sieve\"\nscript = \"s.rhai\"\n{line}\n");
            script += &format!("fn {f}({args}) {{ mark(\"{f}\", obj); }}\n");
        }
    }
    (toml, script)
}

fn sieve(name: &str, pick: &str, message: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Sieve",
        "metadata": { "name": name, "labels": { "pick": pick }, "annotations": { "pick": pick } },
        "spec": { "message": message, "size": 1 },
    }))
    .unwrap()
}

/// The marks of `marks`.
fn marks_of(o: &DynamicObject) -> BTreeSet<String> {
    o.data["data"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Waits until every mark of `want` is there.
async fn wait_marks(api: &Api<DynamicObject>, what: &str, want: &[String]) {
    let want: Vec<String> = want.to_vec();
    wait_for(api, "marks", what, move |o: Option<&DynamicObject>| {
        o.is_some_and(|o| {
            let have = marks_of(o);
            want.iter().all(|w| have.contains(w))
        })
    })
    .await;
}

/// The marks of every filter of `kind` for `object` at `size`.
fn all_of(kind: &str, object: &str, size: u32) -> Vec<String> {
    FILTERS
        .iter()
        .map(|(f, _)| format!("{kind}_{f}.{object}.{size}"))
        .collect()
}

#[tokio::test]
async fn every_filter_key_holds_for_every_handler_timer_and_daemon() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "filters").await;
    let away = TestNamespace::new(&client, "filters-away").await;
    let dir = tempfile::tempdir().unwrap();
    let (toml, script) = config(&ns.name);
    std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
    std::fs::write(dir.path().join("s.rhai"), script).unwrap();
    let cms: Api<DynamicObject> = crate::support::configmaps(&client, &ns.name);
    let marks: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "marks" }, "data": {},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &marks).await.unwrap();

    let khai = Khai::start(dir.path(), &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("sieves.{GROUP}")).await;
    let api = custom_api(&client, &ns.name, GROUP, "Sieve", "sieves");
    let away_api = custom_api(&client, &away.name, GROUP, "Sieve", "sieves");
    let pp = PostParams::default();
    // `out` fails every entry filter; `away` passes them all, in a namespace khai does not watch.
    api.create(&pp, &sieve("out", "no", "no")).await.unwrap();
    away_api
        .create(&pp, &sieve("away", "yes", "pick"))
        .await
        .unwrap();
    api.create(&pp, &sieve("in", "yes", "pick")).await.unwrap();

    // Created: create, field (the field appears), event, timer and daemon.
    let mut want = Vec::new();
    for kind in ["create", "field", "event", "timer", "daemon"] {
        want.extend(all_of(kind, "in", 1));
        want.push(format!("{kind}_none.out.1"));
    }
    wait_marks(&cms, "every entry run for the created objects", &want).await;

    // Updated: update and field.
    for (a, name) in [(&api, "out"), (&away_api, "away"), (&api, "in")] {
        let p = json!({ "spec": { "size": 2 } });
        a.patch(name, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap();
    }
    let mut want = Vec::new();
    for kind in ["update", "field", "event", "timer", "daemon"] {
        want.extend(all_of(kind, "in", 2));
        want.push(format!("{kind}_none.out.2"));
    }
    wait_marks(&cms, "every entry run for the updated objects", &want).await;

    // Restarted: resume.
    khai.terminate().await;
    let khai = Khai::start(dir.path(), &ns.name, &[]);
    let mut want = all_of("resume", "in", 2);
    want.push("resume_none.out.2".into());
    wait_marks(&cms, "the resume handlers after a restart", &want).await;

    // Deleted: delete, optional delete, and the spies' DELETED event.
    for (a, name) in [(&api, "out"), (&away_api, "away"), (&api, "in")] {
        a.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let mut want = Vec::new();
    for kind in ["delete", "gone"] {
        want.extend(all_of(kind, "in", 2));
        want.push(format!("{kind}_none.out.2"));
    }
    wait_marks(&cms, "the delete handlers", &want).await;
    wait_until_gone(&api, "out", "out's finalizer released").await;
    wait_until_gone(&api, "in", "in's finalizer released").await;
    // The last spy and optional delete handler calls, about the deletion of `in`, are over.
    khai.terminate().await;

    let have = marks_of(&cms.get("marks").await.unwrap());
    let wrong: Vec<&String> = have
        .iter()
        .filter(|m| m.contains(".away.") || (m.contains(".out.") && !m.contains("_none.")))
        .collect();
    assert!(
        wrong.is_empty(),
        "entries ran for objects their filters exclude: {wrong:?} (all marks: {have:?})"
    );
}
