//! The cache-bench workload as the bench client drives it: create, update and delete Caches in
//! parallel, and (for the floor) do the operator's two writes itself.

use crate::writes::Own;
use anyhow::{Context, Result, anyhow};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Benchmark Caches are `c-00000`, `c-00001`, ...; anything else (the warm-up) is not counted.
pub const OBJECT_PREFIX: &str = "c-";
pub const WARMUP: &str = "warmup";
const GROUP: &str = "bench.khai.dev";
const FLOOR_MANAGER: &str = "khai-bench-floor";

pub fn object_name(i: usize) -> String {
    format!("{OBJECT_PREFIX}{i:05}")
}

pub fn configmap_name(cache: &str) -> String {
    format!("{cache}-config")
}

fn cache_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Cache"), "caches")
}

/// Installs the shared CRD (server-side apply from the `khai generate crds` manifest, one CRD) and
/// waits until it is Established, so every contender sees the identical CRD from the start.
pub async fn install_crd(client: &kube::Client, manifest: &Path) -> Result<()> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let crd: Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("parsing {} as YAML", manifest.display()))?;
    let name = crd["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("{}: no metadata.name", manifest.display()))?
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("khai-bench").force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("applying the CRD {name}"))?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(60), established)
        .await
        .with_context(|| format!("the CRD {name} was not Established within 60s"))?
        .with_context(|| format!("watching the CRD {name}"))?;
    Ok(())
}

/// One run's namespace and the bench client's handles into it.
pub struct Workload {
    pub namespace: String,
    pub caches: Api<DynamicObject>,
    pub configmaps: Api<ConfigMap>,
    /// Whether the client also does the operator's writes (the floor).
    pub floor: bool,
    pub parallelism: usize,
    /// The client's writes that belong to the workload (create, update and delete of Caches);
    /// the floor's operator writes are deliberately left out so they count as the contender's.
    pub own: Own,
}

impl Workload {
    /// A fresh namespace: namespaces never finish deleting without kube-controller-manager, so
    /// every run gets its own and leaves it behind, empty.
    pub async fn new(
        client: &kube::Client,
        namespace: String,
        floor: bool,
        parallelism: usize,
    ) -> Result<Workload> {
        let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": namespace } }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;
        Ok(Workload {
            caches: Api::namespaced_with(client.clone(), &namespace, &cache_resource()),
            configmaps: Api::namespaced(client.clone(), &namespace),
            namespace,
            floor,
            parallelism,
            own: Own::default(),
        })
    }

    /// Creates one Cache; returns when the create call returned (the latency clock's start).
    pub async fn create(&self, name: &str, size: i64) -> Result<Instant> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1"), "kind": "Cache",
            "metadata": { "name": name },
            "spec": { "size": size, "image": "redis:7" },
        }))?;
        self.own.add("POST", "caches", "");
        let created = self
            .caches
            .create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating Cache {name}"))?;
        let returned = Instant::now();
        if self.floor {
            self.reconcile_as_floor(&created).await?;
        }
        Ok(returned)
    }

    /// Sets `spec.size` (a merge patch, so the generation moves on).
    pub async fn update(&self, name: &str, size: i64) -> Result<()> {
        self.own.add("PATCH", "caches", "");
        let patch = json!({ "spec": { "size": size } });
        let updated = self
            .caches
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("updating Cache {name}"))?;
        if self.floor {
            self.reconcile_as_floor(&updated).await?;
        }
        Ok(())
    }

    pub async fn delete(&self, name: &str) -> Result<()> {
        self.own.add("DELETE", "caches", "");
        self.caches
            .delete(name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting Cache {name}"))?;
        Ok(())
    }

    /// The floor: exactly what a perfect operator must write for this Cache, one server-side
    /// apply of the ConfigMap and one status patch, sent at the same time.
    async fn reconcile_as_floor(&self, cache: &DynamicObject) -> Result<()> {
        let name = cache
            .metadata
            .name
            .clone()
            .ok_or_else(|| anyhow!("a Cache without a name"))?;
        let cm_name = configmap_name(&name);
        let spec = &cache.data["spec"];
        let configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": cm_name,
                "ownerReferences": [{
                    "apiVersion": format!("{GROUP}/v1"), "kind": "Cache", "name": name,
                    "uid": cache.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "data": { "size": spec["size"].to_string(), "image": spec["image"] },
        });
        let status = json!({ "status": {
            "phase": "Ready", "configMap": cm_name,
            "observedGeneration": cache.metadata.generation,
        }});
        let (apply_params, merge) = (
            PatchParams::apply(FLOOR_MANAGER).force(),
            PatchParams::default(),
        );
        let (cm_patch, status_patch) = (Patch::Apply(&configmap), Patch::Merge(&status));
        let apply = self.configmaps.patch(&cm_name, &apply_params, &cm_patch);
        let patch_status = self.caches.patch_status(&name, &merge, &status_patch);
        let (applied, patched) = futures::join!(apply, patch_status);
        applied.with_context(|| format!("floor: applying ConfigMap {cm_name}"))?;
        patched.with_context(|| format!("floor: patching the status of Cache {name}"))?;
        Ok(())
    }

    /// Runs `op` for object 0..n with `parallelism` requests in flight, failing on the first
    /// error; returns each object's result in no particular order.
    pub async fn for_each<T, F, Fut>(&self, n: usize, op: F) -> Result<Vec<T>>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        futures::stream::iter(0..n)
            .map(op)
            .buffer_unordered(self.parallelism)
            .try_collect()
            .await
    }

    /// Removes what a run leaves behind, outside every count: there is no garbage collector, so
    /// ConfigMaps of deleted Caches stay until deleted here; Caches remain only after a failure.
    pub async fn clean_up(&self) -> Result<()> {
        delete_all(&self.caches, "Caches").await?;
        delete_all(&self.configmaps, "ConfigMaps").await
    }

    /// Deletes one ConfigMap, which is fine to be absent.
    pub async fn delete_configmap(&self, name: &str) -> Result<()> {
        match self.configmaps.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting ConfigMap {name}")),
        }
    }
}

/// Deletes every object of `api` in the run's namespace. One deletecollection of tens of
/// thousands of objects can outlast the API server's request timeout, which closes the
/// connection while the server goes on deleting; so it is sent again until a list finds none,
/// for at most ten minutes.
async fn delete_all<K>(api: &Api<K>, what: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let sent = api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
        let left = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .with_context(|| format!("listing the run's {what} left to delete"))?;
        if left.items.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(match sent {
                Err(e) => anyhow::Error::new(e),
                Ok(_) => anyhow!("some are left after ten minutes"),
            })
            .with_context(|| format!("deleting the run's {what}"));
        }
        // The server may still be deleting what the last request listed.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
