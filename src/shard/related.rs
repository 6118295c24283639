//! Related objects following their parent's shard: on the replica holding the sharder Lease,
//! every object of a sharded `watches` kind that names a parent by label is kept labelled for
//! the shard its parent is labelled for. This reaches what the assignment webhook cannot: objects
//! created before sharding (or while no shard answered), and those whose parent moved. Parents
//! and related objects are watched metadata only, as the sharder watches parents; a write is
//! sent only for an object whose label differs, so a steady cluster costs none.

use super::Settings;
use crate::watch::Kind;
use futures::StreamExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

type Meta = PartialObjectMeta<DynamicObject>;

/// A sharded `watches` entry: objects of `related` name a `parent` by `label`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Link {
    pub(crate) related: Kind,
    pub(crate) label: String,
    pub(crate) parent: Kind,
    /// Where both are watched (`None`: every namespace).
    pub(crate) namespace: Option<String>,
}

/// How long changes gather before the related objects are compared again.
const COALESCE: Duration = Duration::from_millis(200);

/// Keeps the related objects of every link on their parent's shard until `stop`.
pub(crate) async fn run(
    client: kube::Client,
    settings: Settings,
    links: Vec<Link>,
    stop: CancellationToken,
) {
    if links.is_empty() {
        return;
    }
    let changed = Arc::new(Notify::new());
    let mut watches = tokio::task::JoinSet::new();
    let mut watch = |kind: &Kind, ns: Option<&str>, labels: Option<&str>| -> Store<Meta> {
        let writer = Writer::new(kind.resource.clone());
        let store = writer.as_reader();
        let api: kube::Api<Meta> = match ns {
            Some(ns) if kind.namespaced => {
                kube::Api::namespaced_with(client.clone(), ns, &kind.resource)
            }
            _ => kube::Api::all_with(client.clone(), &kind.resource),
        };
        let config = labels.map_or_else(watcher::Config::default, |l| {
            watcher::Config::default().labels(l)
        });
        let changed = changed.clone();
        watches.spawn(
            reflector(writer, watcher(api, config))
                .default_backoff()
                .for_each(move |_| {
                    changed.notify_one();
                    futures::future::ready(())
                }),
        );
        store
    };
    let stores: Vec<(Link, Store<Meta>, Store<Meta>)> = links
        .into_iter()
        .map(|l| {
            let ns = l.namespace.clone();
            let parents = watch(&l.parent, ns.as_deref(), None);
            let related = watch(&l.related, ns.as_deref(), Some(&l.label));
            (l, parents, related)
        })
        .collect();
    let work = async {
        for (_, p, r) in &stores {
            p.wait_until_ready().await.ok();
            r.wait_until_ready().await.ok();
        }
        loop {
            for (link, parents, related) in &stores {
                follow(&client, &settings, link, parents, related).await;
            }
            tokio::select! {
                () = changed.notified() => tokio::time::sleep(COALESCE).await,
                () = tokio::time::sleep(settings.retry_period) => {}
            }
        }
    };
    stop.run_until_cancelled(work).await;
    watches.abort_all();
}

/// Labels each related object of `link` for its parent's shard, where they differ.
async fn follow(
    client: &kube::Client,
    s: &Settings,
    link: &Link,
    parents: &Store<Meta>,
    related: &Store<Meta>,
) {
    let label = s.label();
    let shard_of: HashMap<(Option<String>, String), String> = parents
        .state()
        .iter()
        .filter_map(|p| {
            let shard = p.metadata.labels.as_ref()?.get(&label)?.clone();
            let key = (p.metadata.namespace.clone(), p.metadata.name.clone()?);
            Some((key, shard))
        })
        .collect();
    for o in related.state() {
        let Some(labels) = o.metadata.labels.as_ref() else {
            continue;
        };
        let Some(parent) = labels.get(&link.label) else {
            continue;
        };
        let ns = o.metadata.namespace.clone();
        let key = (
            ns.clone().filter(|_| link.parent.namespaced),
            parent.clone(),
        );
        let Some(want) = shard_of.get(&key) else {
            continue;
        };
        if labels.get(&label) == Some(want) {
            continue;
        }
        let name = o.metadata.name.clone().unwrap_or_default();
        let api = crate::watch::api(client, &link.related, ns.as_deref());
        let patch = json!({ "metadata": {
            "resourceVersion": o.metadata.resource_version, "labels": { label.as_str(): want },
        } });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::debug!(object = %name, shard = %want, "labelled a related object for its parent's shard")
            }
            // Changed or gone since it was seen: the next pass decides again.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
            Err(e) => {
                tracing::warn!(object = %name, error = %crate::client::ApiError::from(e), "cannot label a related object for its parent's shard; retrying")
            }
        }
    }
}
