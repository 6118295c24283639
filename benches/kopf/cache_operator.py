"""The cache-bench workload written the way Kopf's documentation teaches.

A Cache (bench.khai.dev/v1) gets a ConfigMap `<name>-config` holding its size and image, owned by
the Cache, and status {phase: Ready, configMap: <name>-config, observedGeneration: <generation>}.
The same behaviour as examples/bench-cache (khai) and benches/kube-rs-baseline, so scripts/bench
compares like with like.

Run: kopf run --standalone --all-namespaces benches/kopf/cache_operator.py
"""

import kopf
import kubernetes


def configmap_for(name, spec):
    """The child ConfigMap, as a plain dict."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config"},
        "data": {"size": str(spec["size"]), "image": spec["image"]},
    }


def set_status(patch, name, meta):
    patch.status["phase"] = "Ready"
    patch.status["configMap"] = f"{name}-config"
    patch.status["observedGeneration"] = meta["generation"]


@kopf.on.create("bench.khai.dev", "v1", "caches")
@kopf.on.resume("bench.khai.dev", "v1", "caches")
def ensure_configmap(spec, name, namespace, meta, patch, **_):
    """Create the ConfigMap (or bring it up to date when it already exists) and report Ready."""
    child = configmap_for(name, spec)
    kopf.adopt(child)
    api = kubernetes.client.CoreV1Api()
    try:
        api.create_namespaced_config_map(namespace=namespace, body=child)
    except kubernetes.client.ApiException as e:
        if e.status != 409:
            raise
        api.patch_namespaced_config_map(name=child["metadata"]["name"], namespace=namespace, body=child)
    set_status(patch, name, meta)


@kopf.on.update("bench.khai.dev", "v1", "caches")
def update_configmap(spec, name, namespace, meta, patch, **_):
    """Patch the ConfigMap with the new spec and report Ready at the new generation."""
    child = configmap_for(name, spec)
    kopf.adopt(child)
    api = kubernetes.client.CoreV1Api()
    api.patch_namespaced_config_map(name=child["metadata"]["name"], namespace=namespace, body=child)
    set_status(patch, name, meta)
