//! The text of generated files. Placeholders: `__OPERATOR__`, `__KIND__`, `__GROUP__`,
//! `__VERSION__`, `__SINGULAR__` (lower-case kind) and `__PLURAL__`.

/// The top of a new `operator.toml`; a [`CRD_AND_CONTROLLER`] follows it.
pub(super) const OPERATOR_HEADER: &str = r#"# __OPERATOR__: a khai operator.
#
#   khai check .          validate this file and compile the scripts (no cluster)
#   khai test .           run the offline test cases in tests/ (no cluster)
#   khai run --config .   install the CRDs and reconcile, against the cluster in KUBECONFIG

[operator]
name = "__OPERATOR__"
"#;

/// One CRD and the controller that reconciles it; also what `khai new controller` appends.
pub(super) const CRD_AND_CONTROLLER: &str = r#"# A __KIND__ asks for a ConfigMap holding its message.
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

pub(super) const SCRIPT: &str = r#"// Level-triggered: given a __KIND__, return what should exist. khai calls this whenever the
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

// Admission webhooks (validate, mutate) live in a script of their own, declared by a
// [[webhook]] in operator.toml: `khai new operator --webhooks` writes one, with test cases.
"#;

/// A `[[webhook]]` for the kind; appended after [`CRD_AND_CONTROLLER`] with `--webhooks`.
pub(super) const WEBHOOK_CONFIG: &str = r#"
# Admission webhooks for __KIND__: khai serves them over HTTPS (`khai run --webhook-bind`) and,
# with `--webhook-url`, registers them with the API server itself.
[[webhook]]
for = "__KIND__"
script = "scripts/__SINGULAR___webhooks.rhai"
validate = "validate"
mutate = "mutate"
"#;

pub(super) const WEBHOOK_SCRIPT: &str = r#"// Admission webhooks for __KIND__: the API server calls them before it stores a __KIND__.
// `req` is the AdmissionReview request: req.operation ("CREATE", "UPDATE", ...), req.object,
// req.oldObject (on UPDATE and DELETE), req.userInfo (username, groups), req.namespace, ...
// `khai test .` runs them against the validate and mutate cases in tests/.

// Allow with nothing or allow(); refuse with deny(message), which the user sees as is.
fn validate(req) {
    let message = req.object.spec.message;
    if message.len() > 64 {
        return deny(`spec.message must be at most 64 characters, got ${message.len()}`);
    }
}

// Return the object as it should be stored; khai sends the API server the JSON Patch.
fn mutate(req) {
    let obj = req.object;
    if obj.metadata.annotations == () {
        obj.metadata.annotations = #{};
    }
    obj.metadata.annotations["__GROUP__/last-updated-by"] = req.userInfo.username;
    obj
}
"#;

pub(super) const CASE_VALIDATE: &str = r#"# A validate case: the request as the API server would send it, and the expected answer.
description: a __KIND__ with a message longer than 64 characters is denied
validate:
  operation: CREATE
  object:
    apiVersion: __GROUP__/__VERSION__
    kind: __KIND__
    metadata:
      name: first
    spec:
      message: This message is far too long to fit in the sixty-four characters allowed.
expect:
  allowed: false
  message: spec.message must be at most 64 characters, got 73
"#;

pub(super) const CASE_MUTATE: &str = r#"# A mutate case: `expect.object` is the object after khai's patch, as it would be stored.
description: a new __KIND__ records who wrote it last
mutate:
  operation: CREATE
  userInfo:
    username: alice
  object:
    apiVersion: __GROUP__/__VERSION__
    kind: __KIND__
    metadata:
      name: first
    spec: {}
expect:
  object:
    metadata:
      annotations:
        __GROUP__/last-updated-by: alice
    spec:
      message: Hello from __OPERATOR__
"#;

pub(super) const SAMPLE: &str = r#"apiVersion: __GROUP__/__VERSION__
kind: __KIND__
metadata:
  name: __SINGULAR__-sample
spec:
  message: Hello from the sample __KIND__
"#;

pub(super) const CASE_NEW: &str = r#"# `khai test .` runs this case offline: reconcile the object below and compare the answer.
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

pub(super) const CASE_READY: &str = r#"# `cache:` holds objects khai's caches would hold, visible through ctx.get/list/owned.
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

pub(super) const README: &str = r#"# __OPERATOR__

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
