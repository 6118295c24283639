//! `khai run --shards` as a ServiceAccount bound only to `khai generate rbac --shards`: two
//! shards, one serving the assignment webhook, whose configuration it installs itself
//! (self-signed). Parents and the Secrets naming them come back from their creates labelled; the
//! shard not holding the sharder Lease is killed, and the sharder takes its Lease over and
//! relabels its parents, their ConfigMaps and Secrets for its own shard, which reconciles them.
//! The API server refuses the ServiceAccount nothing: its audit log has no 403 for it.

use crate::rbac::{apply, generate_rbac_with, service_account_kubeconfig};
use crate::support::metrics::wait_for_metric;
use crate::support::shards::{self, ready};
use crate::support::{self, Khai, TestNamespace, audit, custom_api};
use crate::webhooks::Registered;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Parents labelled for the shard that is killed, at least.
const VICTIMS: usize = 2;

/// Waits until the RBAC authorizer lets `kubeconfig`'s user read a Lease (its Role) and list
/// CRDs (its ClusterRole): bindings reach the authorizer shortly after they are stored.
async fn wait_for_grants(kubeconfig: &Path, ns: &str) {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    let sa = kube::Client::try_from(config).unwrap();
    let leases: Api<Lease> = Api::namespaced(sa.clone(), ns);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(sa);
    let one = ListParams::default().limit(1);
    support::poll_until("the generated RBAC in force", || async {
        leases.get_opt("none").await.is_ok() && crds.list(&one).await.is_ok()
    })
    .await;
}

#[tokio::test]
async fn two_shards_run_as_the_generated_sharded_rbac_through_a_takeover_without_a_403() {
    let _heavy = crate::support::heavy().await;
    let started = Instant::now();
    let client = support::client().await;
    let ns = TestNamespace::new(&client, "shardrbac").await;
    let dir = tempfile::tempdir().unwrap();
    let id = support::nanos_u64() % 0xffff_ffff;
    let (name, group) = (format!("srbac{id:x}"), format!("srbac{id:x}.khai.dev"));
    let watches = format!("watches = [{{ kind = \"v1/Secret\", label = \"{group}/part\" }}]\n");
    let config = shards::operator_with(dir.path(), &name, &group, &watches);
    let label = format!("shard.khai.dev/{name}");
    let _registered = Registered(Box::leak(format!("khai-{name}-shard").into_boxed_str()));
    let rbac = generate_rbac_with(&config, &ns.name, &["--shards"]);
    apply(&client, &ns.name, &rbac).await;
    let sa = format!("khai-{name}");
    let kubeconfig = service_account_kubeconfig(&client, &ns.name, &sa).await;
    wait_for_grants(&kubeconfig, &ns.name).await;
    let mark = audit::mark();

    // The shortest Lease a shard renewing on a busy machine keeps (a 4 s one lapsed beside the
    // other sharding tests, and the ring the webhook hashed with changed between a parent and
    // its Secret).
    let common = shards::flags(&ns.name, shards::LEASE, Duration::from_secs(7));
    let ids = ["s0", "s1"];
    let mut shards: Vec<Khai> = ids
        .iter()
        .map(|s| {
            let mut flags: Vec<&str> = common.iter().map(String::as_str).collect();
            flags.extend(["--shard-id", s]);
            // Only s0 is reachable: it installs the configuration pointing at the port it
            // bound.
            if *s == "s0" {
                flags.extend(["--webhook-url", "https://127.0.0.1:0"]);
            }
            Khai::start_with_kubeconfig(&config, &ns.name, &flags, &kubeconfig)
        })
        .collect();
    shards[0]
        .wait_for_webhooks_installed(0, "the assignment webhook's configuration")
        .await;
    support::wait_for_crd(&client, &format!("parts.{group}")).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let holder = |lease: String| {
        let leases = leases.clone();
        async move {
            let l = leases.get_opt(&lease).await.ok().flatten();
            l.and_then(|l| l.spec?.holder_identity)
        }
    };
    let sharder_lease = format!("khai-{name}-sharder");
    support::poll_until("a shard holding the sharder Lease", || async {
        holder(sharder_lease.clone()).await.is_some()
    })
    .await;
    // The webhook (s0's) hashes with s0's view of the ring: both shards in it before the first
    // create, or a shard joining between a parent's create and its Secret's sends them apart.
    let webhook_metrics = shards[0].metrics_addr().await;
    let both = "s0's ring holding both shards";
    wait_for_metric(&webhook_metrics, both, "khai_shard_ring_shards", &[], |n| {
        n >= 2.0
    })
    .await;
    let survivor = holder(sharder_lease.clone()).await.unwrap();
    let victim = if survivor == "s0" { "s1" } else { "s0" };

    // Parents until the webhook has labelled some for the victim at their create (the API
    // server reads webhook configurations from a watch: the first creates may pass unlabelled,
    // and the sharder labels them), each with a Secret naming it.
    let parts = custom_api(&client, &ns.name, &group, "Part", "parts");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let (mut made, mut on_victim) = (0, 0);
    while on_victim < VICTIMS {
        assert!(
            made < 40,
            "no {VICTIMS} of {made} parents labelled for {victim} at admission"
        );
        let part = json!({ "apiVersion": format!("{group}/v1"), "kind": "Part",
                           "metadata": { "name": format!("p{made}") }, "spec": { "n": made } });
        let part: DynamicObject = serde_json::from_value(part).unwrap();
        let part = parts.create(&PostParams::default(), &part).await.unwrap();
        let shard = part.labels().get(&label).cloned();
        on_victim += usize::from(shard.as_deref() == Some(victim));
        let secret = json!({ "metadata": { "name": format!("p{made}"),
                                           "labels": { format!("{group}/part"): format!("p{made}") } } });
        let secret = serde_json::from_value(secret).unwrap();
        let secret = secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        if shard.is_some() {
            assert_eq!(
                secret.labels().get(&label),
                shard.as_ref(),
                "p{made}'s Secret not labelled at admission for its parent's shard"
            );
        }
        made += 1;
    }
    // Every parent Ready and labelled (for `shard`, if given).
    let all_on = |shard: Option<String>| {
        let (parts, label) = (parts.clone(), label.clone());
        async move {
            let list = parts.list(&ListParams::default()).await.unwrap().items;
            list.len() == made
                && list.iter().all(|p| {
                    let on = p.labels().get(&label);
                    ready(p) && on.is_some_and(|on| shard.as_ref().is_none_or(|s| s == on))
                })
        }
    };
    support::poll_until("every parent assigned and Ready", || all_on(None)).await;

    let at = ids.iter().position(|s| *s == victim).unwrap();
    shards[at].kill();
    support::poll_until("the sharder holding the killed shard's Lease", || async {
        holder(format!("khai-{name}-shard-{victim}"))
            .await
            .as_deref()
            == Some(&survivor)
    })
    .await;
    if survivor == "s0" {
        // The killed shard leaves s0's ring, the one its webhook labels new objects with.
        let left = "s0's ring without the killed shard";
        wait_for_metric(&webhook_metrics, left, "khai_shard_ring_shards", &[], |n| {
            n == 1.0
        })
        .await;
    }
    support::poll_until("every parent on the sharder's shard and Ready", || {
        all_on(Some(survivor.clone()))
    })
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let selector = ListParams::default().labels(&format!("{group}/part"));
    let on_survivor =
        |labels: &std::collections::BTreeMap<String, String>| labels.get(&label) == Some(&survivor);
    support::poll_until(
        "every Secret and ConfigMap moved with its parent",
        || async {
            let s = secrets.list(&selector).await.unwrap().items;
            let c = config_maps
                .list(&ListParams::default())
                .await
                .unwrap()
                .items;
            let children = c.iter().filter(|c| c.name_any().starts_with('p'));
            s.len() == made
                && s.iter().all(|s| on_survivor(s.labels()))
                && children.clone().count() == made
                && children.into_iter().all(|c| on_survivor(c.labels()))
        },
    )
    .await;
    // The survivor reconciles a moved parent: the last one made was the victim's.
    let moved = format!("p{}", made - 1);
    let patch = json!({ "spec": { "n": 100 } });
    parts
        .patch(&moved, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    support::poll_until("the moved parent reconciled on the survivor", || async {
        let c = config_maps.get_opt(&moved).await.ok().flatten();
        c.and_then(|c| c.data?.get("n").cloned()).as_deref() == Some("100")
    })
    .await;

    shards.remove(1 - at).terminate().await;
    let user = format!("system:serviceaccount:{}:{sa}", ns.name);
    let refused = audit::forbidden(mark, &user);
    assert!(
        refused.is_empty(),
        "the generated RBAC refused: {refused:#?}"
    );
    eprintln!(
        "sharding_rbac: {:?}, survivor {survivor}",
        started.elapsed()
    );
}
