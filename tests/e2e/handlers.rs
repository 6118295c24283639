//! Kopf's handler model on khai, end to end on the real API server with
//! `examples/notes`: create, field and delete handlers with change records, a spy, a timer
//! reading an index, a daemon with state and a stop, the startup hook filling the memo; and the
//! bookkeeping's cost in writes, across a restart too.

use crate::support::metrics::wait_for_reloads;
use crate::support::{Khai, TestNamespace, audit, wait_for, wait_until_gone};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::path::PathBuf;

fn example() -> PathBuf {
    crate::support::repo_root().join("examples/notes")
}

fn notes(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.khai.dev", "v1", "Note"),
        "notes",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn note(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "examples.khai.dev/v1", "kind": "Note",
        "metadata": { "name": name }, "spec": spec,
    }))
    .unwrap()
}

fn status<'a>(o: &'a DynamicObject, field: &str) -> &'a serde_json::Value {
    &o.data["status"][field]
}

async fn patch(api: &Api<DynamicObject>, name: &str, p: serde_json::Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_kind_of_handler_timer_daemon_and_index_runs_on_notes() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "notes").await;
    let khai = Khai::start(&example(), &ns.name, &[]);
    crate::support::wait_for_crd(&client, "notes.examples.khai.dev").await;
    let api = notes(&client, &ns.name);
    let pp = PostParams::default();
    api.create(
        &pp,
        &note(
            "a",
            json!({ "text": "buy milk", "priority": 1, "team": "red" }),
        ),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &note("b", json!({ "text": "call bob", "team": "red" })),
    )
    .await
    .unwrap();

    // on create, with the change record's `new` and the memo the startup hook filled.
    let a = wait_for(
        &api,
        "a",
        "the create handler's status",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| status(o, "created") == "created saying buy milk")
        },
    )
    .await;
    assert_eq!(status(&a, "region"), "eu-west", "startup filled the memo");
    // The timer reads the index: two Notes of team red.
    wait_for(
        &api,
        "a",
        "the timer's team size from the index",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "team_size") == 2),
    )
    .await;
    api.create(&pp, &note("c", json!({ "text": "x", "team": "red" })))
        .await
        .unwrap();
    wait_for(
        &api,
        "a",
        "the index following a new Note",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "team_size") == 3),
    )
    .await;

    // on field spec.priority: old and new are the field's.
    patch(&api, "a", json!({ "spec": { "priority": 5 } })).await;
    wait_for(
        &api,
        "a",
        "the field handler's old -> new",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "priority_change") == "1 -> 5"),
    )
    .await;
    // A change of another field does not call it again.
    patch(&api, "a", json!({ "spec": { "text": "buy oat milk" } })).await;

    // The spy saw the Notes.
    khai.wait_for_log(0, "the spy's line for b", |l| {
        l.contains("spied") && l.contains(" b")
    })
    .await;

    // A daemon runs while the label is there, with its own state, and stops when it goes.
    patch(
        &api,
        "b",
        json!({ "metadata": { "labels": { "beating": "yes" } } }),
    )
    .await;
    wait_for(
        &api,
        "b",
        "the daemon's third beat",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| status(o, "beats").as_i64().is_some_and(|n| n >= 3))
        },
    )
    .await;
    patch(
        &api,
        "b",
        json!({ "metadata": { "labels": { "beating": null } } }),
    )
    .await;
    khai.wait_for_log(0, "the daemon's stop", |l| {
        l.contains("daemon of b stopped after") && l.contains("beats")
    })
    .await;

    // on delete holds the Note with a finalizer until the handler succeeds (on its retry).
    let from = khai.log_len();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let held = api.get("a").await.unwrap();
    assert!(
        held.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "khai.dev/notes"),
        "the delete handler holds the Note: {:?}",
        held.metadata.finalizers
    );
    wait_until_gone(&api, "a", "the Note after its delete handler succeeded").await;
    khai.wait_for_log(from, "the delete handler's retry", |l| {
        l.contains("deleted a on attempt 2")
    })
    .await;
    let log = khai.tail(400);
    assert!(
        !log.contains("two reconciles of this object at once"),
        "{log}"
    );
    // The index forgets a deleted Note.
    wait_for(
        &api,
        "c",
        "the index after a Note went",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "team_size") == 2),
    )
    .await;
}

/// A kind with only an update handler that returns nothing: one write per handled change (the
/// `last-handled` annotation), none while idle, none on a restart, and the resume handler runs
/// once per object after it.
#[tokio::test]
async fn handlers_cost_one_write_per_change_and_nothing_idle_or_on_restart() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "handler-writes").await;
    let dir = tempfile::tempdir().unwrap();
    let toml = r#"
[[handler]]
for = "Note"
on = "update"
script = "scripts/s.rhai"
function = "updated"

[[handler]]
for = "Note"
on = "create"
script = "scripts/s.rhai"
function = "created"

[[handler]]
for = "Note"
on = "resume"
script = "scripts/s.rhai"
function = "resumed"
"#;
    let script = r#"
fn created(obj, ctx, change) { log_info(`created ${obj.metadata.name}`); }
fn updated(obj, ctx, change) {
    log_info(`updated ${obj.metadata.name}: ${change.diff[0].path} ${change.old.spec.text} -> ${change.new.spec.text}`);
}
fn resumed(obj, ctx, change) { log_info(`resumed ${obj.metadata.name}`); }
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, "tally", toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, "notes.tally.khai.dev").await;
    const N: usize = 5;
    let names: Vec<String> = (0..N).map(|i| format!("n{i}")).collect();
    let handled = "tally.khai.dev/last-handled";
    let mark = audit::mark();
    for n in &names {
        let o = note_of("tally", n, json!({ "text": "one" }));
        api.create(&PostParams::default(), &o).await.unwrap();
    }
    for n in &names {
        wait_for(
            &api,
            n,
            "the create handled",
            |o: Option<&DynamicObject>| {
                o.is_some_and(|o| {
                    o.metadata
                        .annotations
                        .iter()
                        .flatten()
                        .any(|(k, _)| k == handled)
                })
            },
        )
        .await;
    }
    khai.wait_for_logs(0, "each create", N, |l| l.contains("created n"))
        .await;
    for n in &names {
        patch(&api, n, json!({ "spec": { "text": "two" } })).await;
    }
    khai.wait_for_logs(0, "each update with its diff", N, |l| {
        l.contains("updated n") && l.contains(r#"["spec", "text"] one -> two"#)
    })
    .await;
    for n in &names {
        wait_for(
            &api,
            n,
            "the update recorded",
            |o: Option<&DynamicObject>| {
                o.is_some_and(|o| {
                    o.metadata
                        .annotations
                        .iter()
                        .flatten()
                        .any(|(k, v)| k == handled && v.contains("two"))
                })
            },
        )
        .await;
    }
    let writes = audit::khai_writes(mark, &ns.name);
    assert_eq!(
        audit::total(&writes),
        2 * N as u64,
        "one write per handled change (create and update of {N} Notes): {writes:?}"
    );
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));

    let mark = audit::mark();
    let again = Khai::start(&config, &ns.name, &[]);
    again
        .wait_for_logs(0, "each Note resumed", N, |l| l.contains("resumed n"))
        .await;
    let (code, log) = again.terminate().await;
    assert_eq!(code, Some(0));
    let writes = audit::khai_writes(mark, &ns.name);
    assert!(writes.is_empty(), "a restart wrote {writes:?}");
    assert!(
        !log.iter()
            .any(|l| l.contains("created n") || l.contains("updated n")),
        "handlers that succeeded ran again after the restart"
    );
}

/// A delete handler's progress survives a crash: khai is killed (SIGKILL) after the first
/// attempt failed and was recorded; the next khai goes on with the second attempt (`ctx.retry`
/// is 1), never repeats the first, and lets the object go.
#[tokio::test]
async fn a_handlers_progress_survives_a_crash() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "handler-crash").await;
    let dir = tempfile::tempdir().unwrap();
    let toml = r#"
[[handler]]
for = "Note"
on = "delete"
script = "scripts/s.rhai"
function = "deleting"
backoff = "2s"
"#;
    let script = r#"
fn deleting(obj, ctx, change) {
    log_info(`attempt ${ctx.retry} for ${obj.metadata.name}`);
    if ctx.retry == 0 { retry("the first attempt fails", "2s"); }
}
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, "crashy", toml, script).await;
    let mut first = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, "notes.crashy.khai.dev").await;
    create_note(&api, "crashy", "n", false).await;
    wait_for(
        &api,
        "n",
        "khai's finalizer",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == "khai.dev/crashy")
            })
        },
    )
    .await;
    api.delete("n", &DeleteParams::default()).await.unwrap();
    wait_for(
        &api,
        "n",
        "the first attempt recorded",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .iter()
                    .flatten()
                    .any(|(k, v)| k == "crashy.khai.dev/progress" && v.contains("\"attempts\":1"))
            })
        },
    )
    .await;
    first.kill();
    let second = Khai::start(&config, &ns.name, &[]);
    wait_until_gone(&api, "n", "the Note, after the second attempt").await;
    let (_, log) = second.terminate().await;
    assert!(
        log.iter().any(|l| l.contains("attempt 1 for n")),
        "the second khai went on with attempt 1:\n{}",
        log.join("\n")
    );
    assert!(
        !log.iter().any(|l| l.contains("attempt 0 for n")),
        "the second khai repeated the first attempt:\n{}",
        log.join("\n")
    );
}

/// A config of one kind, Note of `group`, for operator `operator`: `toml` after the CRD, and the
/// script `scripts/s.rhai`. Returns the config's directory and the Notes' API.
async fn one_kind(
    dir: &std::path::Path,
    client: &kube::Client,
    ns: &str,
    operator: &str,
    toml: &str,
    script: &str,
) -> (PathBuf, Api<DynamicObject>) {
    let group = format!("{operator}.khai.dev");
    let config = crate::support::example_copy("notes", dir, operator, &group);
    std::fs::write(config.join("operator.toml"), one_kind_toml(operator, toml)).unwrap();
    std::fs::write(config.join("scripts/s.rhai"), script).unwrap();
    (config, notes_of(client, ns, operator))
}

/// The Notes of `operator`'s group in `ns`.
fn notes_of(client: &kube::Client, ns: &str, operator: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&format!("{operator}.khai.dev"), "v1", "Note");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "notes");
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn one_kind_toml(operator: &str, rest: &str) -> String {
    format!(
        "[operator]\nname = \"{operator}\"\n\n[[crd]]\ngroup = \"{operator}.khai.dev\"\nkind = \"Note\"\n\
         versions = [\"v1\"]\nspec.text = {{ type = \"string\" }}\n\n{rest}"
    )
}

/// A Note of `operator`'s group (`<operator>.khai.dev`, as [`one_kind`] makes it).
fn note_of(operator: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
    let mut o = note(name, spec);
    o.types = Some(kube::core::TypeMeta {
        api_version: format!("{operator}.khai.dev/v1"),
        kind: "Note".into(),
    });
    o
}

async fn create_note(api: &Api<DynamicObject>, operator: &str, name: &str, annotate: bool) {
    let mut o = note_of(operator, name, json!({ "text": "x" }));
    if annotate {
        o.metadata.annotations =
            Some([(format!("{operator}.khai.dev/managed"), "yes".into())].into());
    }
    api.create(&PostParams::default(), &o).await.unwrap();
}

/// The operator's finalizers on `o`.
fn khai_finalizers(o: &DynamicObject, operator: &str) -> Vec<String> {
    o.metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.ends_with(&format!("khai.dev/{operator}")))
        .cloned()
        .collect()
}

/// A filtered `[[controller]]` (annotations) and the handlers of its kind, which run in a
/// controller of their own; `finalize` says whether the controller's script defines it.
fn filtered_and_delete_handler(operator: &str) -> String {
    format!(
        r#"
[[controller]]
for = "Note"
script = "scripts/s.rhai"
annotations = ["{operator}.khai.dev/managed"]

[[handler]]
for = "Note"
on = "delete"
script = "scripts/s.rhai"
function = "deleting"
backoff = "1s"
"#
    )
}

const RECONCILE_AND_DELETING: &str = r#"
fn reconcile(obj, ctx) { log_info(`reconciled ${obj.metadata.name}`); #{} }
fn deleting(obj, ctx, change) {
    log_info(`deleting ${obj.metadata.name} attempt ${ctx.retry}`);
    if ctx.retry == 0 { retry("once more", "1s"); }
}
"#;

/// Audit: a filtered controller without `finalize` and the kind's delete handler (in a
/// controller of its own) shared one finalizer: the controller removed it as unneeded, the
/// handlers' controller added it again, for ever. Now each keeps its own: the delete handler's
/// finalizer stays, the object costs no write once handled, and its deletion waits for the
/// handler.
#[tokio::test]
async fn a_filtered_controller_does_not_take_the_delete_handlers_finalizer_away() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fight-loop").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "fightloop";
    let (config, api) = one_kind(
        dir.path(),
        &client,
        &ns.name,
        op,
        &filtered_and_delete_handler(op),
        RECONCILE_AND_DELETING,
    )
    .await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "w", true).await;
    wait_for(
        &api,
        "w",
        "the delete handler's finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(|o| !khai_finalizers(o, op).is_empty()),
    )
    .await;
    khai.wait_for_log(0, "the controller's reconcile of w", |l| {
        l.contains("reconciled w")
    })
    .await;
    // A second Note, handled from start to end, is the barrier: w, already handled, must see no
    // write of khai's meanwhile.
    let mark = audit::mark();
    create_note(&api, op, "x", true).await;
    wait_for(&api, "x", "x's finalizer", |o: Option<&DynamicObject>| {
        o.is_some_and(|o| !khai_finalizers(o, op).is_empty())
    })
    .await;
    khai.wait_for_log(0, "the controller's reconcile of x", |l| {
        l.contains("reconciled x")
    })
    .await;
    audit::wait_for_entry(mark, "x's finalizer added", |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["name"] == "x"
    })
    .await;
    let on_w = audit::writes(mark, |e| {
        e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"))
            && e["objectRef"]["namespace"] == ns.name.as_str()
            && e["objectRef"]["name"] == "w"
    });
    assert!(
        on_w.is_empty(),
        "khai kept writing to a Note it had handled: {on_w:?}\n{}",
        khai.tail(40)
    );
    let w = api.get("w").await.unwrap();
    assert_eq!(
        khai_finalizers(&w, op).len(),
        1,
        "{:?}",
        w.metadata.finalizers
    );

    let from = khai.log_len();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&api, "w", "w, after its delete handler").await;
    let (_, log) = khai.terminate().await;
    let log = &log[from..];
    let count = |s: &str| log.iter().filter(|l| l.contains(s)).count();
    assert_eq!(count("deleting w attempt 0"), 1, "{}", log.join("\n"));
    assert_eq!(count("deleting w attempt 1"), 1, "{}", log.join("\n"));
}

/// Audit: a filtered controller with `finalize` and the kind's delete handler shared one
/// finalizer, so whichever finished first removed it and the object went before the other had
/// run. Now both hold it: `finalize` and the delete handler (which succeeds on its retry) each
/// run exactly once before the Note goes.
#[tokio::test]
async fn finalize_and_a_delete_handler_of_one_kind_both_run_once_before_the_object_goes() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "fight-delete").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "fightdel";
    let script = format!(
        "{RECONCILE_AND_DELETING}\nfn finalize(obj, ctx) {{ log_info(`finalized ${{obj.metadata.name}}`); true }}\n"
    );
    let (config, api) = one_kind(
        dir.path(),
        &client,
        &ns.name,
        op,
        &filtered_and_delete_handler(op),
        &script,
    )
    .await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "w", true).await;
    let w = wait_for(
        &api,
        "w",
        "a finalizer for each",
        |o: Option<&DynamicObject>| o.is_some_and(|o| khai_finalizers(o, op).len() == 2),
    )
    .await;
    assert!(
        khai_finalizers(&w, op).contains(&format!("khai.dev/{op}")),
        "the controller keeps the operator's finalizer: {:?}",
        w.metadata.finalizers
    );
    khai.wait_for_log(0, "the controller's reconcile of w", |l| {
        l.contains("reconciled w")
    })
    .await;
    let from = khai.log_len();
    api.delete("w", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&api, "w", "w, after finalize and its delete handler").await;
    let (_, log) = khai.terminate().await;
    let log = &log[from..];
    let count = |s: &str| log.iter().filter(|l| l.contains(s)).count();
    let all = log.join("\n");
    assert_eq!(count("finalized w"), 1, "{all}");
    assert_eq!(count("deleting w attempt 0"), 1, "{all}");
    assert_eq!(count("deleting w attempt 1"), 1, "{all}");
}

/// For handlers: a hot reload takes away a kind's only delete handler (and the kind has
/// no `[[controller]]`, so nothing runs for it any more); khai removes its finalizer from the
/// kind's objects, and their deletion completes.
#[tokio::test]
async fn a_finalizer_no_handler_needs_after_a_reload_is_removed_and_deletion_completes() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "unhandle").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "unhandle";
    let delete = "[[handler]]\nfor = \"Note\"\non = \"delete\"\nscript = \"scripts/s.rhai\"\nfunction = \"deleting\"\n";
    let (config, api) = one_kind(
        dir.path(),
        &client,
        &ns.name,
        op,
        delete,
        "fn deleting(obj, ctx, change) { false }\nfn spied(obj, ctx, event) { }\n",
    )
    .await;
    let khai = Khai::start(&config, &ns.name, &["--watch"]);
    let addr = khai.metrics_addr().await;
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "n", false).await;
    wait_for(
        &api,
        "n",
        "the delete handler's finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(|o| !khai_finalizers(o, op).is_empty()),
    )
    .await;
    // The new version has no handler for Notes at all (only a spy on ConfigMaps).
    let spy = "[[handler]]\nfor = \"ConfigMap\"\non = \"event\"\nscript = \"scripts/s.rhai\"\nfunction = \"spied\"\n";
    std::fs::write(config.join("operator.toml"), one_kind_toml(op, spy)).unwrap();
    wait_for_reloads(&addr, "success", 1.0).await;
    wait_for(
        &api,
        "n",
        "khai to remove its finalizer",
        |o: Option<&DynamicObject>| o.is_some_and(|o| khai_finalizers(o, op).is_empty()),
    )
    .await;
    api.delete("n", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&api, "n", "the Note, with nothing holding it").await;
}

/// An optional delete handler takes no finalizer and runs once, when the object is seen gone.
#[tokio::test]
async fn an_optional_delete_handler_adds_no_finalizer_and_runs_once_when_the_object_is_gone() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "optional-delete").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "optdel";
    let toml = r#"
[[handler]]
for = "Note"
on = "create"
script = "scripts/s.rhai"
function = "created"

[[handler]]
for = "Note"
on = "delete"
optional = true
script = "scripts/s.rhai"
function = "gone"
"#;
    let script = r#"
fn created(obj, ctx, change) { log_info(`created ${obj.metadata.name}`); }
fn gone(obj, ctx, change) { log_info(`gone ${obj.metadata.name} was ${change.old.spec.text}`); }
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "n", false).await;
    khai.wait_for_log(0, "the create handler", |l| l.contains("created n"))
        .await;
    let handled = format!("{op}.khai.dev/last-handled");
    let n = wait_for(
        &api,
        "n",
        "the create recorded",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .iter()
                    .flatten()
                    .any(|(k, _)| *k == handled)
            })
        },
    )
    .await;
    assert!(
        n.metadata.finalizers.iter().flatten().next().is_none(),
        "an optional delete handler holds nothing: {:?}",
        n.metadata.finalizers
    );
    api.delete("n", &DeleteParams::default()).await.unwrap();
    wait_until_gone(&api, "n", "the Note, held by nothing").await;
    khai.wait_for_log(0, "the optional delete handler", |l| {
        l.contains("gone n was x")
    })
    .await;
    // A second Note deleted after it is the barrier: n's handler must not run again meanwhile.
    create_note(&api, op, "m", false).await;
    khai.wait_for_log(0, "the create handler of m", |l| l.contains("created m"))
        .await;
    api.delete("m", &DeleteParams::default()).await.unwrap();
    khai.wait_for_log(0, "m's optional delete handler", |l| {
        l.contains("gone m was x")
    })
    .await;
    let (_, log) = khai.terminate().await;
    let runs = log.iter().filter(|l| l.contains("gone n was")).count();
    assert_eq!(runs, 1, "{}", log.join("\n"));
}

/// `ctx.retry`, `ctx.started` and `ctx.runtime` follow a handler's attempts on one change: an
/// update handler that asks twice to be retried sees retry 0, 1, 2, one `started` for all
/// three, and a runtime that grows by the delays it asked for.
#[tokio::test]
async fn a_retried_handler_sees_its_attempt_count_start_and_runtime() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "handler-retry").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "retrycount";
    // The CRD's status (after one_kind's spec.text).
    let toml = r#"status.retries = { type = "integer" }
status.started = { type = "string" }
status.runtime = { type = "number" }

[[handler]]
for = "Note"
on = "create"
script = "scripts/s.rhai"
function = "changed"

[[handler]]
for = "Note"
on = "update"
script = "scripts/s.rhai"
function = "changed"
"#;
    let script = r#"
fn changed(obj, ctx, change) {
    log_info(`attempt ${change.type} ${obj.spec.text} retry=${ctx.retry} started=${ctx.started} runtime=${ctx.runtime}`);
    if ctx.retry < 2 { retry("not yet", "1s"); }
    #{ status: #{ retries: ctx.retry, started: ctx.started, runtime: ctx.runtime } }
}
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "n", false).await;
    khai.wait_for_logs(0, "three attempts of the create handler", 3, |l| {
        l.contains("attempt create x")
    })
    .await;
    let created = wait_for(
        &api,
        "n",
        "the create handler's third attempt",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "retries") == 2),
    )
    .await;
    assert!(
        status(&created, "runtime").as_f64().unwrap() >= 2.0,
        "two retries 1 s apart: {:?}",
        created.data["status"]
    );
    let from = khai.log_len();
    patch(&api, "n", json!({ "spec": { "text": "y" } })).await;
    let lines = khai
        .wait_for_logs(from, "three attempts of the update handler", 3, |l| {
            l.contains("attempt update y")
        })
        .await;
    let field = |l: &str, k: &str| {
        let at = l.find(&format!("{k}=")).unwrap() + k.len() + 1;
        l[at..].split_whitespace().next().unwrap().to_string()
    };
    let retries: Vec<String> = lines.iter().map(|l| field(l, "retry")).collect();
    assert_eq!(retries, ["0", "1", "2"], "{lines:#?}");
    let started: Vec<String> = lines.iter().map(|l| field(l, "started")).collect();
    assert!(
        started.iter().all(|s| *s == started[0] && s.len() > 10),
        "one start for every attempt: {lines:#?}"
    );
    let runtime: Vec<f64> = lines
        .iter()
        .map(|l| field(l, "runtime").trim_end_matches('"').parse().unwrap())
        .collect();
    assert!(
        runtime[0] < 1.0 && runtime[1] >= 1.0 && runtime[2] >= 2.0,
        "{lines:#?}"
    );
    let updated = wait_for(
        &api,
        "n",
        "the update handler's status",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                status(o, "retries") == 2 && status(o, "started") != status(&created, "started")
            })
        },
    )
    .await;
    assert_eq!(status(&updated, "started"), started[0].as_str());
}

/// A failing daemon tick backs off like a handler: ticks again after `backoff` (not its long
/// `interval`) with `ctx.retry` counting the failures in a row, reported as `DaemonRetrying`
/// Events; with `retries` it gives up (a `DaemonFailed` Event) and is not ticked again.
#[tokio::test]
async fn a_failing_daemon_tick_backs_off_and_gives_up_after_its_retries() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "daemon-backoff").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "daemonbackoff";
    // `doomed` comes first: in the turn where `flaky` succeeds, `doomed`'s next tick would be
    // due too, had it not given up.
    let toml = r#"status.ticked = { type = "integer" }

[[daemon]]
for = "Note"
script = "scripts/s.rhai"
tick = "doomed"
interval = "1h"
backoff = "1s"
retries = 1

[[daemon]]
for = "Note"
script = "scripts/s.rhai"
tick = "flaky"
interval = "1h"
backoff = "1s"
"#;
    let script = r#"
fn doomed(obj, ctx, state) { log_info(`doomed retry=${ctx.retry}`); throw "never"; }
fn flaky(obj, ctx, state) {
    log_info(`flaky retry=${ctx.retry}`);
    if ctx.retry < 2 { throw "not yet"; }
    #{ status: #{ ticked: ctx.retry } }
}
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "n", false).await;
    wait_for(
        &api,
        "n",
        "flaky's third tick, 1 s apart, not 1 h",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "ticked") == 2),
    )
    .await;
    let (_, log) = khai.terminate().await;
    let lines = |p: &str| -> Vec<&String> { log.iter().filter(|l| l.contains(p)).collect() };
    let flaky = lines("flaky retry=");
    assert_eq!(flaky.len(), 3, "{flaky:#?}");
    for (i, l) in flaky.iter().enumerate() {
        assert!(l.contains(&format!("flaky retry={i}")), "{flaky:#?}");
    }
    let doomed = lines("doomed retry=");
    assert_eq!(
        doomed.len(),
        2,
        "one try and one retry, then no more: {doomed:#?}"
    );
    assert_eq!(lines("daemon tick failed for good").len(), 1, "{log:#?}");
    let events: Api<kube::api::DynamicObject> =
        crate::support::custom_api(&client, &ns.name, "", "Event", "events");
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|e| e.data["reason"].as_str().map(str::to_string))
        .collect();
    assert!(
        reasons.iter().any(|r| r == "DaemonRetrying")
            && reasons.iter().any(|r| r == "DaemonFailed"),
        "{reasons:?}"
    );
}

/// The seconds since the Unix epoch of a khai log line (its RFC 3339 timestamp).
fn logged_at(line: &str) -> f64 {
    let stamp = line.split_whitespace().next().unwrap();
    let t: jiff::Timestamp = stamp.parse().unwrap();
    t.as_millisecond() as f64 / 1000.0
}

/// Timer options change when a timer runs, as documented: `initial_delay` holds the first run
/// back; `idle` waits until the object has been left unchanged that long (again after each
/// change); `sharp` keeps a fixed schedule where a plain timer counts its interval from the end
/// of each run (so a slow run pushes the next one later).
#[tokio::test]
async fn timer_initial_delay_idle_and_sharp_change_when_timers_run() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "timer-options").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "timeropts";
    let timer = |f: &str, t: &str, extra: &str| {
        format!(
            "[[timer]]\nfor = \"Note\"\nscript = \"scripts/s.rhai\"\nfunction = \"{f}\"\nlabels = {{ t = \"{t}\" }}\n{extra}\n"
        )
    };
    let toml = [
        timer(
            "delayed",
            "delay",
            "interval = \"1h\"\ninitial_delay = \"3s\"",
        ),
        timer("idled", "idle", "interval = \"1s\"\nidle = \"3s\""),
        timer("sharp", "sharp", "interval = \"1s\"\nsharp = true"),
        timer("plain", "plain", "interval = \"1s\""),
    ]
    .join("\n");
    // `slow` takes a while, the same for both: a plain timer's period grows by it, a sharp one's
    // does not.
    let script = r#"
fn slow() { let n = 0; for i in 0..100000 { n += i; } n }
fn delayed(obj, ctx) { log_info(`delayed ran`); }
fn idled(obj, ctx) { log_info(`idled ran seeing ${obj.spec.text}`); }
fn sharp(obj, ctx) { log_info(`sharp ran`); slow(); }
fn plain(obj, ctx) { log_info(`plain ran`); slow(); }
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, &toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    // Taken before the writes: khai sees each one after it is made.
    let created = std::time::Instant::now();
    for t in ["delay", "idle", "sharp", "plain"] {
        let mut o = note_of(op, t, json!({ "text": "one" }));
        o.metadata.labels = Some([("t".to_string(), t.to_string())].into());
        api.create(&PostParams::default(), &o).await.unwrap();
    }
    khai.wait_for_log(0, "the delayed timer", |l| l.contains("delayed ran"))
        .await;
    assert!(
        created.elapsed() >= std::time::Duration::from_secs(3),
        "initial_delay = 3s, but the first run came after {:?}",
        created.elapsed()
    );
    khai.wait_for_log(0, "the idle timer", |l| l.contains("idled ran seeing one"))
        .await;
    assert!(created.elapsed() >= std::time::Duration::from_secs(3));
    let from = khai.log_len();
    let changed = std::time::Instant::now();
    patch(&api, "idle", json!({ "spec": { "text": "two" } })).await;
    khai.wait_for_log(from, "the idle timer after a change", |l| {
        l.contains("idled ran seeing two")
    })
    .await;
    assert!(
        changed.elapsed() >= std::time::Duration::from_secs(3),
        "idle = 3s, but it ran {:?} after a change",
        changed.elapsed()
    );
    let period = |what: &'static str| {
        // Over six periods after the first runs, whose times vary most on a busy machine.
        let lines = khai.wait_for_logs(0, what, 10, move |l| l.contains(what));
        async move {
            let at: Vec<f64> = lines.await.iter().map(|l| logged_at(l)).collect();
            (at[9] - at[3]) / 6.0
        }
    };
    let (sharp, plain) = (period("sharp ran").await, period("plain ran").await);
    // Logged as each run starts (a long call logs from the blocking pool as it goes), so how
    // long a run takes on a busy machine does not move the times compared.
    assert!(
        (0.85..1.15).contains(&sharp),
        "a sharp timer of 1 s runs every second, not every {sharp:.3} s (plain: {plain:.3} s)"
    );
    assert!(
        plain > sharp + 0.1,
        "a plain timer's period adds its run's time: {plain:.3} s against sharp's {sharp:.3} s"
    );
}

/// Exactly-once bookkeeping across kill -9: (a) a change made while khai is dead (killed after
/// the create was handled, before the update could run) is handled once by the next khai, with
/// the `old`, `new` and `diff` of the change; (b) once that update is recorded, a khai killed
/// with -9 and started again resumes the object and does not run the update again.
#[tokio::test]
async fn a_kill_9_neither_loses_a_change_nor_repeats_a_handled_one() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "handler-kill9").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "killnine";
    let toml = r#"
[[handler]]
for = "Note"
on = "create"
script = "scripts/s.rhai"
function = "created"

[[handler]]
for = "Note"
on = "update"
script = "scripts/s.rhai"
function = "updated"

[[handler]]
for = "Note"
on = "resume"
script = "scripts/s.rhai"
function = "resumed"
"#;
    let script = r#"
fn created(obj, ctx, change) { log_info(`created ${obj.metadata.name}`); }
fn updated(obj, ctx, change) {
    log_info(`updated ${obj.metadata.name}: ${change.old.spec.text} -> ${change.new.spec.text} diff ${change.diff}`);
}
fn resumed(obj, ctx, change) { log_info(`resumed ${obj.metadata.name}`); }
"#;
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, toml, script).await;
    let handled = format!("{op}.khai.dev/last-handled");
    let recorded = |text: &'static str| {
        let handled = handled.clone();
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .iter()
                    .flatten()
                    .any(|(k, v)| *k == handled && v.contains(text))
            })
        }
    };
    let mut first = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api, op, "n", false).await;
    wait_for(&api, "n", "the create recorded", recorded("\"x\"")).await;
    first.kill();

    // (a) The change happens while khai is dead.
    patch(&api, "n", json!({ "spec": { "text": "y" } })).await;
    let mut second = Khai::start(&config, &ns.name, &[]);
    wait_for(&api, "n", "the update recorded", recorded("\"y\"")).await;
    let lines = second
        .wait_for_logs(0, "the update handler", 1, |l| l.contains("updated n"))
        .await;
    assert!(
        lines[0].contains(r#"updated n: x -> y diff [#{"new": "y", "old": "x", "op": "change", "path": ["spec", "text"]}]"#),
        "{}",
        lines[0]
    );
    // The resume of the same turn is the barrier: nothing of n is left to run.
    second
        .wait_for_log(0, "n resumed", |l| l.contains("resumed n"))
        .await;
    let log = second.tail(10_000);
    assert_eq!(log.matches("updated n").count(), 1, "{log}");
    assert_eq!(log.matches("created n").count(), 0, "{log}");
    second.kill();

    // (b) A handled change is not handled again after a kill -9.
    let third = Khai::start(&config, &ns.name, &[]);
    third
        .wait_for_log(0, "n resumed again", |l| l.contains("resumed n"))
        .await;
    let (_, log) = third.terminate().await;
    assert!(
        !log.iter()
            .any(|l| l.contains("updated n") || l.contains("created n")),
        "a handled change ran again after kill -9:\n{}",
        log.join("\n")
    );
}

/// The bookkeeping's cost, measured: N Notes (`KHAI_HANDLER_COST_N`, 200 by default) with an
/// update handler that writes nothing itself, each updated once, cost at most one write each
/// (the `last-handled` annotation), and nothing while idle afterwards
/// (`KHAI_HANDLER_COST_IDLE_SECS`, 5 by default). By hand at 1,000 Notes:
/// `KHAI_HANDLER_COST_N=1000 KHAI_HANDLER_COST_IDLE_SECS=20 cargo test --test e2e
/// handlers::an_update_handler_costs -- --nocapture`.
#[tokio::test]
async fn an_update_handler_costs_at_most_one_write_per_change_and_none_idle() {
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = env("KHAI_HANDLER_COST_N", 200) as usize;
    let idle = std::time::Duration::from_secs(env("KHAI_HANDLER_COST_IDLE_SECS", 5));
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "handler-cost").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "handlercost";
    let toml = "[[handler]]\nfor = \"Note\"\non = \"update\"\nscript = \"scripts/s.rhai\"\nfunction = \"updated\"\n";
    let script = "fn updated(obj, ctx, change) { }\n";
    let (config, api) = one_kind(dir.path(), &client, &ns.name, op, toml, script).await;
    let khai = Khai::start(&config, &ns.name, &[]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    let handled = format!("{op}.khai.dev/last-handled");
    // Every Note recorded as handled with `text` in its essence.
    let all_recorded = async |text: &str, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let list = api.list(&Default::default()).await.unwrap();
            let done = list
                .items
                .iter()
                .filter(|o| {
                    o.metadata
                        .annotations
                        .iter()
                        .flatten()
                        .any(|(k, v)| *k == handled && v.contains(text))
                })
                .count();
            if done == n {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: {done} of {n}\n{}",
                khai.tail(20)
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    for i in 0..n {
        let o = note_of(op, &format!("n{i}"), json!({ "text": "one" }));
        api.create(&PostParams::default(), &o).await.unwrap();
    }
    all_recorded("\"one\"", "every Note first seen").await;
    let mark = audit::mark();
    let started = std::time::Instant::now();
    for i in 0..n {
        patch(&api, &format!("n{i}"), json!({ "spec": { "text": "two" } })).await;
    }
    all_recorded("\"two\"", "every update handled").await;
    let took = started.elapsed();
    let writes = audit::khai_writes(mark, &ns.name);
    let total = audit::total(&writes);
    println!(
        "handler bookkeeping: {n} updates handled in {took:?} with {total} writes: {writes:?}"
    );
    assert!(
        total <= n as u64,
        "at most one write per handled change ({n}): {writes:?}"
    );
    let mark = audit::mark();
    tokio::time::sleep(idle).await;
    let writes = audit::khai_writes(mark, &ns.name);
    println!(
        "handler bookkeeping: {idle:?} idle with {} writes",
        audit::total(&writes)
    );
    assert!(writes.is_empty(), "idle wrote {writes:?}");
}

/// `ctx.list(kind, #{ namespace })` on the informer caches of a khai watching two namespaces: a
/// Note's handler sees the Notes of its own namespace by default, of the other by name, and of
/// both with `"*"`.
#[tokio::test]
async fn ctx_list_reads_another_watched_namespace_or_all_of_them() {
    let client = crate::support::client().await;
    let a = TestNamespace::new(&client, "list-a").await;
    let b = TestNamespace::new(&client, "list-b").await;
    let dir = tempfile::tempdir().unwrap();
    let op = "listall";
    let toml = "status.seen = { type = \"string\" }\n\n[[handler]]\nfor = \"Note\"\non = \"update\"\nscript = \"scripts/s.rhai\"\nfunction = \"look\"\n";
    let script = format!(
        r#"
fn names(l) {{
    let s = "";
    for o in l {{ s += ` ${{o.metadata.namespace}}/${{o.metadata.name}}`; }}
    s.trim();
    s
}}
fn look(obj, ctx, change) {{
    let own = names(ctx.list("Note"));
    let other = names(ctx.list("Note", #{{ namespace: "{b}" }}));
    let all = names(ctx.list("Note", #{{ namespace: "*" }}));
    let seen = `own=[${{own}}] other=[${{other}}] all=[${{all}}]`;
    log_info(`seen ${{seen}}`);
    #{{ status: #{{ seen: seen }} }}
}}
"#,
        b = b.name
    );
    let (config, api_a) = one_kind(dir.path(), &client, &a.name, op, toml, &script).await;
    let api_b = notes_of(&client, &b.name, op);
    let khai = Khai::start(&config, &a.name, &["--namespace", &b.name]);
    crate::support::wait_for_crd(&client, &format!("notes.{op}.khai.dev")).await;
    create_note(&api_b, op, "in-b", false).await;
    create_note(&api_a, op, "in-a", false).await;
    wait_for(
        &api_a,
        "in-a",
        "the create recorded",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .iter()
                    .flatten()
                    .any(|(k, _)| k.ends_with("last-handled"))
            })
        },
    )
    .await;
    patch(&api_a, "in-a", json!({ "spec": { "text": "y" } })).await;
    let want = format!(
        "own=[{a}/in-a] other=[{b}/in-b] all=[{first} {second}]",
        a = a.name,
        b = b.name,
        first = std::cmp::min(format!("{}/in-a", a.name), format!("{}/in-b", b.name)),
        second = std::cmp::max(format!("{}/in-a", a.name), format!("{}/in-b", b.name)),
    );
    let line = khai
        .wait_for_log(0, "the handler's lookups", |l| l.contains("seen own="))
        .await;
    assert!(line.ends_with(&want), "{line}\nwanted {want}");
    wait_for(
        &api_a,
        "in-a",
        "the handler's lookups in both namespaces",
        |o: Option<&DynamicObject>| o.is_some_and(|o| status(o, "seen") == want.as_str()),
    )
    .await;
}
