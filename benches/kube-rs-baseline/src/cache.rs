//! The `Cache` custom resource (`caches.bench.khai.dev/v1`), typed by hand.
//!
//! `#[derive(CustomResource)]` would need kube's `derive` feature and pull schemars into the
//! lockfile only to generate a schema this binary never uses: the benchmark driver installs the
//! CRD from `khai generate crds examples/bench-cache`. A plain serde struct plus a four-line
//! `Resource` impl is all `Api`, `Controller` and the reflector need.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use kube::core::ObjectMeta;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "bench.khai.dev";
pub const VERSION: &str = "v1";
pub const KIND: &str = "Cache";
pub const PLURAL: &str = "caches";

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Cache {
    pub metadata: ObjectMeta,
    // The CRD requires size and image inside spec, but not spec itself; a Cache without one must
    // not break deserialising the whole watch list, so it reads as an empty spec instead.
    #[serde(default)]
    pub spec: CacheSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CacheStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct CacheSpec {
    pub size: i64,
    pub image: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct CacheStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl kube::Resource for Cache {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn reads_the_api_servers_json_and_builds_the_right_url() {
        let c: Cache = serde_json::from_value(serde_json::json!({
            "apiVersion": "bench.khai.dev/v1", "kind": "Cache",
            "metadata": { "name": "a", "namespace": "ns", "generation": 2 },
            "spec": { "size": 3, "image": "redis:7" },
            "status": { "phase": "Ready", "configMap": "a-config", "observedGeneration": 2 }
        }))
        .unwrap();
        assert_eq!(c.spec.size, 3);
        assert_eq!(c.status.unwrap().config_map.as_deref(), Some("a-config"));
        assert_eq!(
            Cache::url_path(&(), Some("ns")),
            "/apis/bench.khai.dev/v1/namespaces/ns/caches"
        );
        assert_eq!(Cache::api_version(&()), "bench.khai.dev/v1");
    }
}
