//! The text of generated files. Placeholders: `__OPERATOR__`, `__KIND__`, `__GROUP__`,
//! `__VERSION__`, `__SINGULAR__` (lower-case kind) and `__PLURAL__`.

/// The top of a new `operator.toml`; a [`CRD_AND_CONTROLLER`] follows it.
pub const OPERATOR_HEADER: &str = r#"# __OPERATOR__: a khai operator.
#
#   khai check .          validate this file and compile the scripts (no cluster)
#   khai test .           run the offline test cases in tests/ (no cluster)
#   khai run --config .   install the CRDs and reconcile, against the cluster in KUBECONFIG

[operator]
name = "__OPERATOR__"
"#;

/// One CRD and the controller that reconciles it; also what `khai new controller` appends.
pub const CRD_AND_CONTROLLER: &str = r#"# A __KIND__ asks for a ConfigMap holding its message.
[[crd]]
group = "__GROUP__"
kind = "__KIND__"
versions = ["__VERSION__"]
spec.message = { type = "string", default = "Hello from __OPERATOR__", description = "What the ConfigMap says" }
status.phase = { type = "string", enum = ["Pending", "Ready"] }
status.configMap = { type = "string" }

[[controller]]
for = "__KIND__"
owns = ["v1/ConfigMap"]
script = "scripts/__SINGULAR__.rhai"
"#;

pub const SCRIPT: &str = r#"// Level-triggered: given a __KIND__, return what should exist. khai calls this whenever the
// __KIND__ or a ConfigMap it owns changes; it applies the children with server-side apply, makes
// the __KIND__ their owner, deletes children no longer returned, and writes status only when it
// changed. `khai test .` runs it against the cases in tests/ without a cluster.
fn reconcile(obj, ctx) {
    let name = obj.metadata.name + "-__SINGULAR__";
    let config_map = #{
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: #{ name: name },
        data: #{ message: obj.spec.message },
    };
    // ctx.get reads khai's cache (no API call); () until the ConfigMap exists.
    let phase = if ctx.get("ConfigMap", name) == () { "Pending" } else { "Ready" };
    #{
        children: [config_map],
        status: #{ phase: phase, configMap: name },
    }
}

// Admission webhooks: uncomment and declare them in operator.toml once you need them.
//
// // Refuse an invalid __KIND__: return () to allow it, or a message saying what is wrong.
// fn validate(obj, ctx) {
//     if obj.spec.message == "" { return "spec.message must not be empty"; }
// }
//
// // Change a __KIND__ before it is stored: return the object as it should be stored.
// fn mutate(obj, ctx) {
//     obj
// }
"#;

pub const SAMPLE: &str = r#"apiVersion: __GROUP__/__VERSION__
kind: __KIND__
metadata:
  name: __SINGULAR__-sample
spec:
  message: Hello from the sample __KIND__
"#;

pub const CASE_NEW: &str = r#"# `khai test .` runs this case offline: reconcile the object below and compare the answer.
# Expectations are partial: keys left out are not checked, and `key: null` means absent.
description: a new __KIND__ gets a ConfigMap with the default message and is Pending
object:
  apiVersion: __GROUP__/__VERSION__
  kind: __KIND__
  metadata:
    name: first
  spec: {}
expect:
  children:
    - apiVersion: v1
      kind: ConfigMap
      metadata:
        name: first-__SINGULAR__
      data:
        message: Hello from __OPERATOR__
  status:
    phase: Pending
    configMap: first-__SINGULAR__
"#;

pub const CASE_READY: &str = r#"# `cache:` holds objects khai's caches would hold, visible through ctx.get/list/owned.
description: a __KIND__ whose ConfigMap exists is Ready
object:
  apiVersion: __GROUP__/__VERSION__
  kind: __KIND__
  metadata:
    name: first
  spec:
    message: hi
cache:
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: first-__SINGULAR__
    data:
      message: hi
expect:
  children:
    - data:
        message: hi
  status:
    phase: Ready
"#;

pub const README: &str = r#"# __OPERATOR__

A Kubernetes operator run by [khai](https://github.com/khai-dev/khai): `operator.toml` declares
the `__KIND__` custom resource (`__GROUP__/__VERSION__`) and its controller, and
`scripts/__SINGULAR__.rhai` says what should exist for each `__KIND__`.

## Next steps

```sh
khai check .                    # validate operator.toml and compile the scripts
khai test .                     # run the offline cases in tests/, no cluster needed
khai run --config .             # install the CRD and reconcile (uses KUBECONFIG)
kubectl apply -f __SINGULAR__.yaml
kubectl get __PLURAL__ -o yaml  # status.phase becomes Ready
kubectl get configmap __SINGULAR__-sample-__SINGULAR__ -o yaml
```

- Change the schema in `operator.toml` (`spec.*`, `status.*`), then the script.
- Add a case to `tests/` for every behaviour you care about: an `object`, optional `cache`
  contents, and what you `expect` (`children`, `status`, `requeue_after`, `events` or `error`).
- `khai new controller --kind Other` adds another CRD, controller and script to this folder.
- `khai generate crds .` prints the CRD for GitOps or review.
"#;
