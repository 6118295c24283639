//! A cluster-scoped parent with children in several namespaces: `examples/propagate`.
//!
//! The child → parent mapping gave a cluster-scoped parent its child's namespace, so
//! one SharedConfig with copies in three namespaces was queued as three objects, reconciled
//! concurrently under each key, applied its children more than once and let a stale status win
//! ("3/1" copies where "3/3" was true). With several watched namespaces, khai also started one
//! controller per namespace for a cluster-scoped kind, each reconciling every object.

use crate::support::metrics::{metrics_until, sum};
use crate::support::{Khai, TestNamespace, audit, configmaps, reconciled, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn shared_configs(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.khai.dev", "v1", "SharedConfig"),
        "sharedconfigs",
    );
    Api::all_with(client.clone(), &ar)
}

/// Writes since `from` to the copies in `namespaces` and to the SharedConfig `name`, by anyone:
/// only khai writes ConfigMaps and the status there, and the test's own spec changes count
/// under their own key (`patch sharedconfigs`).
fn writes(from: audit::Mark, namespaces: &[String], name: &str) -> audit::Writes {
    audit::writes(from, |e| {
        let r = &e["objectRef"];
        r["namespace"]
            .as_str()
            .is_some_and(|ns| namespaces.iter().any(|n| n == ns))
            || (r["resource"] == "sharedconfigs" && r["name"] == name)
    })
}

fn count(w: &audit::Writes, key: &str) -> u64 {
    w.get(key).copied().unwrap_or(0)
}

#[tokio::test]
async fn a_cluster_scoped_parent_is_reconciled_once_for_all_its_namespaces() {
    let client = crate::support::client().await;
    let mut spaces = Vec::new();
    for team in ["team-a", "team-b", "team-c"] {
        spaces.push(TestNamespace::new(&client, team).await);
    }
    let names: Vec<String> = spaces.iter().map(|n| n.name.clone()).collect();
    let config = crate::support::repo_root().join("examples/propagate");
    let extra = [
        "--namespace",
        names[1].as_str(),
        "--namespace",
        names[2].as_str(),
        "--log-format",
        "json",
    ];
    let khai = Khai::start(&config, &names[0], &extra);
    crate::support::wait_for_crd(&client, "sharedconfigs.examples.khai.dev").await;
    let parents = shared_configs(&client);
    let name = format!("shared-{}", &names[0]);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.khai.dev/v1", "kind": "SharedConfig",
        "metadata": { "name": name },
        "spec": { "namespaces": names, "data": { "region": "eu-west-1" } },
    }))
    .unwrap();

    let created = audit::mark();
    parents.create(&PostParams::default(), &obj).await.unwrap();
    let copies = |want: &'static str| {
        move |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["status"]["copies"] == want)
    };
    wait_for(&parents, &name, "3/3 copies", copies("3/3")).await;
    for ns in &names {
        let cm = crate::support::wait_exists(&configmaps(&client, ns), &name, "a copy").await;
        assert_eq!(cm.data["data"]["region"], "eu-west-1");
    }
    let addr = khai.metrics_addr().await;
    let idle = |b: &str| {
        sum(b, "workqueue_depth") == 0.0 && sum(b, "controller_runtime_active_workers") == 0.0
    };
    metrics_until(&addr, "an idle work queue", idle).await;
    let w = writes(created, &names, &name);
    eprintln!("writes to create a SharedConfig with 3 copies: {w:?}");
    assert_eq!(
        count(&w, "patch configmaps"),
        3,
        "one apply per copy: {w:?}"
    );
    assert!(
        count(&w, "patch sharedconfigs/status") <= 2,
        "status 0/3 then 3/3 at most: {w:?}"
    );

    // A change reaches every copy with one write each.
    let updated = audit::mark();
    parents
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "data": { "region": "us-east-2" } } })),
        )
        .await
        .unwrap();
    for ns in &names {
        wait_for(
            &configmaps(&client, ns),
            &name,
            "the copy to follow the change",
            |o: Option<&DynamicObject>| o.is_some_and(|o| o.data["data"]["region"] == "us-east-2"),
        )
        .await;
    }
    wait_for(&parents, &name, "3/3 copies again", copies("3/3")).await;
    let body = metrics_until(&addr, "an idle work queue", idle).await;
    let w = writes(updated, &names, &name);
    assert_eq!(
        count(&w, "patch configmaps"),
        3,
        "one apply per copy: {w:?}"
    );
    assert_eq!(
        sum(&body, "khai_reconcile_overlaps_total"),
        0.0,
        "two reconciles of the SharedConfig ran at once"
    );

    // Dropping a namespace from the list prunes its copy and only that one.
    parents
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "namespaces": [names[0], names[1]] } })),
        )
        .await
        .unwrap();
    crate::support::wait_until_gone(&configmaps(&client, &names[2]), &name, "the dropped copy")
        .await;
    wait_for(&parents, &name, "2/2 copies", copies("2/2")).await;
    crate::support::wait_exists(&configmaps(&client, &names[0]), &name, "a kept copy").await;

    // A child of a cluster-scoped parent must name its namespace; the refusal reaches the
    // object as a condition in the API server's and khai's words, not as a debug dump.
    let bad = format!("nowhere-{}", &names[0]);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.khai.dev/v1", "kind": "SharedConfig",
        "metadata": { "name": bad }, "spec": { "namespaces": [""] },
    }))
    .unwrap();
    parents.create(&PostParams::default(), &obj).await.unwrap();
    let failed = wait_for(
        &parents,
        &bad,
        "the Failed condition",
        |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data["status"]["conditions"].as_array().cloned())
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"))
        },
    )
    .await;
    let message = failed.data["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("children[0] (ConfigMap") && message.contains("must name its namespace"),
        "{message}"
    );
    parents.delete(&bad, &Default::default()).await.unwrap();

    // Restarting over the steady SharedConfig writes nothing.
    metrics_until(&addr, "an idle work queue", idle).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let restarted = audit::mark();
    let khai = Khai::start(&config, &names[0], &extra);
    khai.wait_for_json_log(0, "the reconcile after the restart", reconciled(&name))
        .await;
    let addr = khai.metrics_addr().await;
    metrics_until(&addr, "an idle work queue", idle).await;
    let (code, _) = khai.terminate().await;
    assert_eq!(code, Some(0));
    let w = writes(restarted, &names, &name);
    assert!(
        w.is_empty(),
        "restarting over a steady SharedConfig wrote {w:?}"
    );
    parents.delete(&name, &Default::default()).await.unwrap();
}
