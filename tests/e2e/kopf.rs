//! The ports of Kopf's examples (`examples/kopf/`), end to end on the real API server: what
//! `khai test` cannot show offline. Filters pick the handlers that run (11); a create handler's
//! temporary, arbitrary and permanent errors come in turn (03); the walkthrough's PVC follows
//! its EphemeralVolumeClaim's labels, both ways (walkthrough-evc); a child Pod is listed by uid
//! (02); create, update, field, resume (after a restart) and delete handlers run once each (05);
//! spies, one failing (08); daemons fail, ping and stop (14); startup and cleanup hooks and a
//! daemon per Pod (13); webhooks called by the API server, a denial's own code, a dry run and
//! an object selector (17); a create handler's status, once (01); Events on the object (04);
//! timers that wait for the object to be idle (15); a timer reading two indexes over Pods (16).

use crate::support::{Khai, TestNamespace, custom_api as api, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use std::path::PathBuf;

fn port(name: &str) -> PathBuf {
    crate::support::repo_root().join("examples/kopf").join(name)
}

/// The port's KopfExamples in `ns`, once khai has installed their CRD.
async fn kopf_examples(client: &kube::Client, ns: &str, group: &str) -> Api<DynamicObject> {
    crate::support::wait_for_crd(client, &format!("kopfexamples.{group}")).await;
    api(client, ns, group, "KopfExample", "kopfexamples")
}

/// Creates the sample KopfExample of `group`.
async fn create_example(api: &Api<DynamicObject>, group: &str) {
    api.create(&PostParams::default(), &kopf_example(group))
        .await
        .unwrap();
}

/// Changes the sample KopfExample's `spec.field` from "value" to "other", as Kopf's examples do
/// with `kubectl patch`.
async fn change_field(api: &Api<DynamicObject>) {
    let patch = json!({ "spec": { "field": "other" } });
    api.patch(
        "kopf-example-1",
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .unwrap();
}

/// Deletes the sample KopfExample.
async fn delete_example(api: &Api<DynamicObject>) {
    api.delete("kopf-example-1", &Default::default())
        .await
        .unwrap();
}

/// Kopf's examples/obj.yaml in `group`.
fn kopf_example(group: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "KopfExample",
        "metadata": { "name": "kopf-example-1", "labels": { "somelabel": "somevalue" },
                      "annotations": { "someannotation": "somevalue" } },
        "spec": { "duration": "1m", "field": "value", "items": ["item1", "item2"] },
    }))
    .unwrap()
}

#[tokio::test]
async fn filtering_handlers_run_only_where_their_filters_match() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-filtering").await;
    let khai = Khai::start(&port("11-filtering-handlers"), &ns.name, &[]);
    let group = "filtering.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    for said in [
        "Label satisfied.",
        "Label exists.",
        "Annotation satisfied.",
        "Annotation exists.",
    ] {
        khai.wait_for_log(0, said, move |l| l.contains(said)).await;
    }
    // Handlers of one change run in one turn: once the last has run, none other is coming.
    let annotation = wait_for(
        &api,
        "kopf-example-1",
        "the change recorded as handled",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kopf-filtering.khai.dev/last-handled"))
            })
        },
    )
    .await;
    assert!(annotation.metadata.annotations.is_some());
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let log = khai.tail(10_000);
    assert!(
        !log.contains("not satisfied"),
        "a handler whose filter rejects the object ran:\n{log}"
    );
}

#[tokio::test]
async fn exceptions_come_temporary_then_arbitrary_then_permanent() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-exceptions").await;
    let khai = Khai::start(&port("03-exceptions"), &ns.name, &[]);
    let group = "exceptions.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    let lines = khai
        .wait_for_logs(0, "three failed attempts", 3, |l| {
            l.contains("handler failed")
        })
        .await;
    assert!(lines[0].contains("First failure."), "{}", lines[0]);
    assert!(lines[1].contains("Second failure."), "{}", lines[1]);
    assert!(
        lines[2].contains("Third failure, the final one.") && lines[2].contains("for good"),
        "{}",
        lines[2]
    );
    // The permanent failure ends it: the change counts as handled, no fourth attempt.
    wait_for(
        &api,
        "kopf-example-1",
        "the change recorded as handled",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kopf-exceptions.khai.dev/last-handled"))
            })
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let log = khai.tail(10_000);
    assert_eq!(log.matches("handler failed").count(), 3, "{log}");
}

#[tokio::test]
async fn the_walkthrough_pvc_follows_its_claim() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-evc").await;
    let _khai = Khai::start(&port("walkthrough-evc"), &ns.name, &[]);
    let group = "walkthrough.kopf.khai.dev";
    crate::support::wait_for_crd(&client, &format!("ephemeralvolumeclaims.{group}")).await;
    let evcs = api(
        &client,
        &ns.name,
        group,
        "EphemeralVolumeClaim",
        "ephemeralvolumeclaims",
    );
    let pvcs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "PersistentVolumeClaim"),
            "persistentvolumeclaims",
        ),
    );
    let evc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "EphemeralVolumeClaim",
        "metadata": { "name": "my-claim", "labels": { "application": "some-app", "owner": "me" } },
        "spec": { "size": "1G" },
    }))
    .unwrap();
    evcs.create(&PostParams::default(), &evc).await.unwrap();
    let label =
        |o: &DynamicObject, k: &str| o.metadata.labels.as_ref().and_then(|l| l.get(k).cloned());
    let pvc = wait_for(&pvcs, "my-claim", "the PVC", |o: Option<&DynamicObject>| {
        o.is_some()
    })
    .await;
    assert_eq!(pvc.data["spec"]["resources"]["requests"]["storage"], "1G");
    assert_eq!(label(&pvc, "owner").as_deref(), Some("me"));
    assert_eq!(
        pvc.metadata.owner_references.as_ref().unwrap()[0].name,
        "my-claim",
        "adopted by its EVC"
    );
    wait_for(
        &evcs,
        "my-claim",
        "status.create_fn",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["create_fn"]["pvc-name"] == "my-claim")
        },
    )
    .await;
    // Someone else's label on the PVC stays; a label removed from the EVC goes from the PVC.
    let pp = PatchParams::default();
    pvcs.patch(
        "my-claim",
        &pp,
        &Patch::Merge(json!({ "metadata": { "labels": { "mine": "yes" } } })),
    )
    .await
    .unwrap();
    evcs.patch(
        "my-claim",
        &pp,
        &Patch::Merge(json!({ "metadata": { "labels": { "owner": null, "team": "red" } } })),
    )
    .await
    .unwrap();
    let pvc = wait_for(
        &pvcs,
        "my-claim",
        "the relabelled PVC",
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| {
                let l = o.metadata.labels.clone().unwrap_or_default();
                l.get("team").map(String::as_str) == Some("red") && !l.contains_key("owner")
            })
        },
    )
    .await;
    assert_eq!(
        label(&pvc, "mine").as_deref(),
        Some("yes"),
        "labels others set are kept"
    );
    assert_eq!(label(&pvc, "application").as_deref(), Some("some-app"));
}

fn pods(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    api(client, ns, "", "Pod", "pods")
}

#[tokio::test]
async fn children_pod_is_created_owned_and_listed_by_uid() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-children").await;
    let _khai = Khai::start(&port("02-children"), &ns.name, &[]);
    let group = "children.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    let pod =
        crate::support::wait_exists(&pods(&client, &ns.name), "kopf-example-1-pod", "the Pod")
            .await;
    assert_eq!(
        pod.data["spec"]["containers"][0]["env"][0]["value"],
        "value"
    );
    let uid = pod.metadata.uid.clone().unwrap();
    wait_for(
        &api,
        "kopf-example-1",
        "status.create_fn.children",
        move |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["create_fn"]["children"] == json!([uid]))
        },
    )
    .await;
}

#[tokio::test]
async fn handlers_run_on_create_update_field_resume_and_delete() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-handlers").await;
    let khai = Khai::start(&port("05-handlers"), &ns.name, &[]);
    let group = "handlers.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    let created = khai
        .wait_for_logs(0, "both create handlers", 2, |l| l.contains("CREATED"))
        .await;
    assert!(
        created[0].contains("CREATED 1st") && created[1].contains("CREATED 2nd"),
        "{created:?}"
    );
    change_field(&api).await;
    khai.wait_for_log(0, "the update handler", |l| {
        l.contains("UPDATED: change spec.field")
    })
    .await;
    khai.wait_for_log(0, "the field handler", |l| {
        l.contains("FIELD CHANGED: value -> other")
    })
    .await;
    let (_, log) = khai.terminate().await;
    assert!(
        !log.iter().any(|l| l.contains("RESUMED")),
        "nothing to resume on the first start"
    );
    let again = Khai::start(&port("05-handlers"), &ns.name, &[]);
    let resumed = again
        .wait_for_logs(0, "both resume handlers", 2, |l| l.contains("RESUMED"))
        .await;
    assert!(
        resumed[0].contains("RESUMED 1st") && resumed[1].contains("RESUMED 2nd"),
        "{resumed:?}"
    );
    delete_example(&api).await;
    let deleted = again
        .wait_for_logs(0, "both delete handlers", 2, |l| l.contains("DELETED"))
        .await;
    assert!(
        deleted[0].contains("DELETED 1st") && deleted[1].contains("DELETED 2nd"),
        "{deleted:?}"
    );
    crate::support::wait_until_gone(&api, "kopf-example-1", "the finalizer released").await;
    let (_, log) = again.terminate().await;
    for said in ["CREATED", "UPDATED", "FIELD CHANGED"] {
        assert!(
            !log.iter().any(|l| l.contains(said)),
            "{said} again after the restart"
        );
    }
}

/// Spies see every raw event with the whole object: ADDED, MODIFIED, DELETED, and `()` (Kopf's
/// `None`) for an object already there when khai starts watching.
#[tokio::test]
async fn spies_see_every_event_and_one_failing_does_not_stop_the_other() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-spies").await;
    let khai = Khai::start(&port("08-events"), &ns.name, &[]);
    let group = "spies.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    khai.wait_for_log(0, "the failing spy", |l| l.contains("Oops!"))
        .await;
    khai.wait_for_log(0, "the normal spy on creation", |l| {
        l.contains("Event received: ADDED kopf-example-1")
    })
    .await;
    change_field(&api).await;
    khai.wait_for_log(0, "the normal spy on a change", |l| {
        l.contains("Event received: MODIFIED kopf-example-1")
    })
    .await;
    let (_, log) = khai.terminate().await;
    assert!(
        !log.iter().any(|l| l.contains("Event received: None")),
        "an object created after the start is not listed: {log:#?}"
    );
    let khai = Khai::start(&port("08-events"), &ns.name, &[]);
    khai.wait_for_log(0, "the normal spy on the initial list", |l| {
        l.contains("Event received: None kopf-example-1")
    })
    .await;
    delete_example(&api).await;
    khai.wait_for_log(0, "the normal spy on deletion", |l| {
        l.contains("Event received: DELETED kopf-example-1")
    })
    .await;
}

#[tokio::test]
async fn daemons_fail_three_times_then_ping_and_stop_with_their_object() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-daemons").await;
    let khai = Khai::start(&port("14-daemons"), &ns.name, &[]);
    let group = "daemons.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    wait_for(
        &api,
        "kopf-example-1",
        "the third failure",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["message"] == "Failed 3 times.")
        },
    )
    .await;
    khai.wait_for_log(0, "a ping from the sync daemon", |l| {
        l.contains("=> Ping from a sync daemon")
    })
    .await;
    khai.wait_for_log(0, "a ping from the async daemon", |l| {
        l.contains("=> Ping from an async daemon")
    })
    .await;
    delete_example(&api).await;
    khai.wait_for_log(0, "the async daemon's stop", |l| {
        l.contains("'background_async' is cancelled")
    })
    .await;
    khai.wait_for_log(0, "the sync daemon's stop", |l| {
        l.contains("'background_sync' is cancelled")
    })
    .await;
}

#[tokio::test]
async fn hooks_run_at_start_and_stop_and_a_daemon_serves_each_pod() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-hooks").await;
    let khai = Khai::start(&port("13-hooks"), &ns.name, &[]);
    // The startup hook fails twice, 1 s apart; khai is not ready until it succeeds.
    khai.wait_for_log(0, "the startup hook's first failure", |l| {
        l.contains("startup hook failed; not ready") && l.contains("Going to succeed")
    })
    .await;
    let addr = khai.metrics_addr().await;
    let (code, _) = crate::support::metrics::http_get(&addr, "/readyz").await;
    assert_ne!(code, 200, "ready while the startup hook was failing");
    khai.wait_for_log(0, "the startup hook", |l| l.contains("Initialising..."))
        .await;
    let failures = khai
        .tail(10_000)
        .matches("startup hook failed; not ready")
        .count();
    assert_eq!(failures, 2, "{}", khai.tail(40));
    crate::operations::readyz_until(&addr, 200).await;
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "kopf-hooks-demo" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] },
    }))
    .unwrap();
    let pods = pods(&client, &ns.name);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    khai.wait_for_log(0, "the spy", |l| {
        l.contains("ADDED pod") && l.contains("kopf-hooks-demo")
    })
    .await;
    khai.wait_for_log(0, "the per-Pod task", |l| {
        l.contains("Served by the background task.")
    })
    .await;
    pods.delete(
        "kopf-hooks-demo",
        &kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    khai.wait_for_log(0, "the per-Pod task's stop", |l| {
        l.contains("Serving is finished by request")
    })
    .await;
    let (_, log) = khai.terminate().await;
    assert!(
        log.iter().any(|l| l.contains("Cleaning up...")),
        "the cleanup hook ran"
    );
}

#[tokio::test]
async fn admission_warns_denies_with_its_code_and_mutates_labelled_objects() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-admission").await;
    let _registered = crate::webhooks::Registered("khai-kopf-admission");
    let (_khai, _port) = crate::webhooks::start(&port("17-admission"), &ns.name, true).await;
    let group = "admission.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    let with_field = |name: &str, field: &str| -> DynamicObject {
        let mut o = kopf_example(group);
        o.metadata.name = Some(name.into());
        o.data["spec"]["field"] = json!(field);
        o
    };
    let stored = api
        .create(&PostParams::default(), &with_field("ok", "value"))
        .await
        .unwrap();
    assert_eq!(
        stored.data["spec"]["injected"], 123,
        "mutated: it carries somelabel=somevalue"
    );
    let mut unlabelled = with_field("plain", "value");
    unlabelled.metadata.labels = None;
    let stored = api
        .create(&PostParams::default(), &unlabelled)
        .await
        .unwrap();
    assert!(
        stored.data["spec"].get("injected").is_none(),
        "not selected, not mutated"
    );
    match api
        .create(&PostParams::default(), &with_field("wrong", "wrong"))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert!(
                e.message
                    .ends_with("Meh! I don't like it. Change the field."),
                "{}",
                e.message
            )
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &with_field("wrong", "wrong"))
        .await
        .expect("a dry run of spec.field=wrong is allowed");
    match api
        .create(&PostParams::default(), &with_field("lazy", "not-allowed"))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert!(
                e.message.ends_with("I'm too lazy anyway. Go away!"),
                "{}",
                e.message
            );
            assert_eq!(e.code, 555, "{e:?}");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test]
async fn minimal_create_handler_sets_the_status_once() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-minimal").await;
    let khai = Khai::start(&port("01-minimal"), &ns.name, &[]);
    let group = "minimal.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    wait_for(
        &api,
        "kopf-example-1",
        "status.create_fn.message",
        |o: Option<&DynamicObject>| {
            o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello world")
        },
    )
    .await;
    // An edit is not a creation: the handler does not run again.
    change_field(&api).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let (_, log) = khai.terminate().await;
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("And here we are! Creating"))
            .count(),
        1,
        "{log:?}"
    );
}

#[tokio::test]
async fn events_are_recorded_on_the_created_object() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-events").await;
    let _khai = Khai::start(&port("04-events"), &ns.name, &[]);
    let group = "events.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns.name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let list = events.list(&Default::default()).await.unwrap();
        let ours: Vec<_> = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("SomeReason"))
            .collect();
        let has = |t: &str, m: &str| {
            ours.iter()
                .any(|e| e.type_.as_deref() == Some(t) && e.message.as_deref() == Some(m))
        };
        // The two identical Normal Events are one Event counted twice; the Warnings of one
        // reason keep their own messages. See examples/kopf/04-events/README.md.
        if has("Normal", "Some message")
            && has("Warning", "Some message")
            && has("Warning", "Some exception: Exception text.")
        {
            assert!(
                ours.iter()
                    .all(|e| e.involved_object.name.as_deref() == Some("kopf-example-1"))
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Events never came: {ours:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn timers_wait_for_the_object_to_be_idle() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-timers").await;
    let khai = Khai::start(&port("15-timers"), &ns.name, &[]);
    let group = "timers.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    let created = std::time::Instant::now();
    create_example(&api, group).await;
    khai.wait_for_log(0, "the sync timer", |l| {
        l.contains("Ping from a sync timer: field=value")
    })
    .await;
    assert!(
        created.elapsed() >= std::time::Duration::from_secs(5),
        "idle = 5s: no tick before, came after {:?}",
        created.elapsed()
    );
    khai.wait_for_log(0, "the async timer", |l| {
        l.contains("Ping from an async timer: field=value")
    })
    .await;
    assert!(
        created.elapsed() >= std::time::Duration::from_secs(10),
        "idle = 10s"
    );
}

/// 16-indexing: the timer's status lists the running Pods of its namespace, read from the
/// `is_running` index, and follows a Pod whose phase turns `Running`.
#[tokio::test]
async fn a_timer_reads_the_running_pods_from_an_index() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "kopf-indexing").await;
    let khai = Khai::start(&port("16-indexing"), &ns.name, &[]);
    let pods = pods(&client, &ns.name);
    let running = async |name: &str| {
        let phase = json!({ "status": { "phase": "Running" } });
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&phase))
            .await
            .unwrap();
    };
    for name in ["web-0", "web-1"] {
        let pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "main", "image": "busybox" }] },
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    running("web-0").await;
    let group = "indexing.kopf.khai.dev";
    let api = kopf_examples(&client, &ns.name, group).await;
    create_example(&api, group).await;
    let one = json!([format!("{}::web-0", ns.name)]);
    wait_for(
        &api,
        "kopf-example-1",
        "the running Pod in the status",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["running-pods"] == one),
    )
    .await;
    khai.wait_for_log(0, "the by_label index logged", |l| {
        // Values come in the order of the Pods' uids.
        l.contains(r#"by_label: #{"app=web": ["#) && l.contains("web-0") && l.contains("web-1")
    })
    .await;
    running("web-1").await;
    let both = json!([format!("{}::web-0", ns.name), format!("{}::web-1", ns.name)]);
    wait_for(
        &api,
        "kopf-example-1",
        "the index following the second Pod",
        |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["running-pods"] == both),
    )
    .await;
}
