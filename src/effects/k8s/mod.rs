//! The `k8s` module of scripts: live reads and writes of any kind through the operator's
//! client (so its rate limit applies), as opposed to `ctx.get`/`ctx.list`, which read caches.
//!
//! Kinds are written as in the config (`v1/Pod`, `apps/v1/Deployment`, a CRD's kind) and
//! resolved the way the daemon resolves them ([`crate::watch::resolve`]), once per kind. Writes
//! take objects (or references: `apiVersion`, `kind`, `metadata.name`/`namespace`), so an object
//! read with `k8s::get` can be written back. Every call goes through [`super::request`]: it
//! counts against the call's budget, is stubbed in `khai test`, and a failure is a value the
//! script can catch ([`error::Failure`]).

pub(crate) mod declared;
pub(crate) mod error;
mod script_api;

pub(crate) use error::Failure;
pub(crate) use script_api::register;

use crate::config::Model;
use crate::config::kind::KindRef;
use crate::watch::Kind;
use kube::api::{
    DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Kinds resolved so far, at most this many (kinds the server serves; unknown ones are not
/// kept).
const MAX_KINDS: usize = 256;

/// The Kubernetes API as the `k8s` module reaches it: the operator's client, field manager and
/// apply setting, and the kinds resolved so far.
pub struct Api {
    client: kube::Client,
    model: Model,
    field_manager: String,
    force: bool,
    kinds: Mutex<HashMap<KindRef, Kind>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

/// An object a call is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    pub kind: KindRef,
    /// `None` for a cluster-scoped object (or all namespaces, for `list`).
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One request of the `k8s` module.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Get(Target),
    List {
        kind: KindRef,
        namespace: Option<String>,
        labels: Option<String>,
        fields: Option<String>,
        limit: Option<u32>,
    },
    Create(Target, Value),
    Apply(Target, Value),
    /// A PUT of the whole object, on the condition that its `metadata.resourceVersion` is still
    /// the object's.
    Replace(Target, Value),
    /// A merge patch (a map) or a JSON patch (an array), of the object or its status.
    Patch {
        target: Target,
        patch: Value,
        status: bool,
    },
    Delete {
        target: Target,
        uid: Option<String>,
        resource_version: Option<String>,
    },
}

impl Op {
    /// The verb, as in `k8s::<verb>`, the metric's `verb` label and RBAC (`apply` and
    /// `patch_status` are `patch` to RBAC).
    pub(crate) fn verb(&self) -> &'static str {
        match self {
            Op::Get(_) => "get",
            Op::List { .. } => "list",
            Op::Create(..) => "create",
            Op::Apply(..) => "apply",
            Op::Replace(..) => "replace",
            Op::Patch { status: false, .. } => "patch",
            Op::Patch { status: true, .. } => "patch_status",
            Op::Delete { .. } => "delete",
        }
    }

    /// Whether the request changes anything in the API server.
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Op::Get(_) | Op::List { .. })
    }

    fn kind(&self) -> &KindRef {
        match self {
            Op::Get(t) | Op::Create(t, _) | Op::Apply(t, _) | Op::Replace(t, _) => &t.kind,
            Op::Patch { target, .. } | Op::Delete { target, .. } => &target.kind,
            Op::List { kind, .. } => kind,
        }
    }

    /// What the call is about, as messages name it: `v1/Pod default/web`.
    pub(crate) fn what(&self) -> String {
        match self {
            Op::Get(t) | Op::Create(t, _) | Op::Apply(t, _) | Op::Replace(t, _) => t.to_string(),
            Op::Patch { target, .. } | Op::Delete { target, .. } => target.to_string(),
            Op::List {
                kind, namespace, ..
            } => match namespace {
                Some(ns) => format!("{kind} in {ns}"),
                None => format!("{kind} in all namespaces"),
            },
        }
    }

    /// The request as JSON, what `khai test` stubs match on.
    pub(crate) fn describe(&self) -> Value {
        let mut d = serde_json::Map::new();
        d.insert("call".into(), format!("k8s::{}", self.verb()).into());
        d.insert("kind".into(), self.kind().to_string().into());
        let target = match self {
            Op::Get(t) | Op::Create(t, _) | Op::Apply(t, _) | Op::Replace(t, _) => Some(t),
            Op::Patch { target, .. } | Op::Delete { target, .. } => Some(target),
            Op::List { .. } => None,
        };
        if let Some(t) = target {
            if let Some(ns) = &t.namespace {
                d.insert("namespace".into(), ns.clone().into());
            }
            d.insert("name".into(), t.name.clone().into());
        }
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                d.insert(k.into(), v.clone().into());
            }
        };
        match self {
            Op::List {
                namespace,
                labels,
                fields,
                ..
            } => {
                put("namespace", namespace);
                put("labels", labels);
                put("fields", fields);
            }
            Op::Delete {
                uid,
                resource_version,
                ..
            } => {
                put("uid", uid);
                put("resourceVersion", resource_version);
            }
            _ => {}
        }
        match self {
            Op::Create(_, o) | Op::Apply(_, o) | Op::Replace(_, o) => {
                d.insert("object".into(), o.clone());
            }
            Op::Patch { patch, .. } => {
                d.insert("patch".into(), patch.clone());
            }
            _ => {}
        }
        Value::Object(d)
    }
}

impl Api {
    pub fn new(client: kube::Client, model: &Model) -> Self {
        Api {
            client,
            field_manager: model.operator.field_manager().to_string(),
            force: model.operator.force_apply,
            model: model.clone(),
            kinds: Mutex::default(),
        }
    }

    /// The kinds resolved so far. A panic while the lock was held cannot leave the map half
    /// written (each change is one insert), so a poisoned lock still holds good kinds.
    fn kinds(&self) -> MutexGuard<'_, HashMap<KindRef, Kind>> {
        self.kinds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn resolve(&self, written: &KindRef) -> Result<Kind, Failure> {
        if let Some(k) = self.kinds().get(written).cloned() {
            return Ok(k);
        }
        let kind = crate::watch::resolve(&self.client, &self.model, written)
            .await
            .map_err(|e| match e {
                crate::watch::Error::Unknown(_) => Failure::new("unknown_kind", 0, e.to_string()),
                crate::watch::Error::Discovery { cause, .. } => match cause {
                    crate::client::ApiError::Status {
                        code,
                        reason,
                        message,
                    } => Failure::new(&reason.to_lowercase(), code, message),
                    other => Failure::new("unavailable", 0, other.to_string()),
                },
            })?;
        let mut kinds = self.kinds();
        if kinds.len() < MAX_KINDS {
            kinds.insert(written.clone(), kind.clone());
        }
        Ok(kind)
    }

    /// Carries out `op`; `Ok(Value::Null)` is a `get` of an object that does not exist.
    pub(crate) async fn perform(&self, op: &Op) -> Result<Value, Failure> {
        let started = Instant::now();
        let kind = match self.resolve(op.kind()).await {
            Ok(k) => k,
            Err(f) => {
                crate::metrics::script_api_call(op.verb(), "unknown", f.code, started.elapsed());
                return Err(f);
            }
        };
        let result = self.send(op, &kind).await;
        let code = match &result {
            // A `get` or `delete` of nothing is an answer, not a failure, to the script.
            Ok(Value::Null | Value::Bool(false)) => 404,
            Ok(_) => 200,
            Err(f) => f.code,
        };
        let label = format!(
            "{}",
            KindRef::from_api_version(&kind.resource.api_version, &kind.resource.kind)
        );
        crate::metrics::script_api_call(op.verb(), &label, code, started.elapsed());
        result
    }

    async fn send(&self, op: &Op, kind: &Kind) -> Result<Value, Failure> {
        let api = |ns: &Option<String>| crate::watch::api(&self.client, kind, ns.as_deref());
        let object = |o: DynamicObject| view(&o);
        let pp = || PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        match op {
            Op::Get(t) => match api(&t.namespace).get_opt(&t.name).await? {
                Some(o) => object(o),
                None => Ok(Value::Null),
            },
            Op::List {
                namespace,
                labels,
                fields,
                limit,
                ..
            } => {
                let lp = ListParams {
                    label_selector: labels.clone(),
                    field_selector: fields.clone(),
                    limit: *limit,
                    ..ListParams::default()
                };
                let list = api(namespace).list(&lp).await?;
                // Items of a list come without apiVersion and kind; scripts write them back.
                let mut items = Vec::with_capacity(list.items.len());
                for item in &list.items {
                    let mut v = view(item)?;
                    v["apiVersion"] = kind.resource.api_version.clone().into();
                    v["kind"] = kind.resource.kind.clone().into();
                    items.push(v);
                }
                Ok(Value::Array(items))
            }
            Op::Create(t, o) | Op::Replace(t, o) => {
                let obj: DynamicObject = serde_json::from_value(o.clone())
                    .map_err(|e| Failure::new("invalid", 0, e.to_string()))?;
                let pp = PostParams {
                    field_manager: Some(self.field_manager.clone()),
                    ..PostParams::default()
                };
                let api = api(&t.namespace);
                object(match op {
                    Op::Replace(..) => api.replace(&t.name, &pp, &obj).await?,
                    _ => api.create(&pp, &obj).await?,
                })
            }
            Op::Apply(t, o) => {
                let mut params = PatchParams::apply(&self.field_manager);
                params.force = self.force;
                object(
                    api(&t.namespace)
                        .patch(&t.name, &params, &Patch::Apply(o))
                        .await?,
                )
            }
            Op::Patch {
                target,
                patch,
                status,
            } => {
                let api = api(&target.namespace);
                let patch = match patch {
                    Value::Array(_) => {
                        Patch::Json::<Value>(serde_json::from_value(patch.clone()).map_err(
                            |e| Failure::new("invalid", 0, format!("not a JSON patch: {e}")),
                        )?)
                    }
                    other => Patch::Merge(other.clone()),
                };
                let done = if *status {
                    api.patch_status(&target.name, &pp(), &patch).await?
                } else {
                    api.patch(&target.name, &pp(), &patch).await?
                };
                object(done)
            }
            Op::Delete {
                target,
                uid,
                resource_version,
            } => {
                let mut dp = DeleteParams::default();
                if uid.is_some() || resource_version.is_some() {
                    dp.preconditions = Some(Preconditions {
                        uid: uid.clone(),
                        resource_version: resource_version.clone(),
                    });
                }
                match api(&target.namespace).delete(&target.name, &dp).await {
                    Ok(_) => Ok(Value::Bool(true)),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Value::Bool(false)),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}

/// An object as scripts see it: without `metadata.managedFields`.
fn view(o: &DynamicObject) -> Result<Value, Failure> {
    let mut v = serde_json::to_value(o).map_err(|e| Failure::new("invalid", 0, e.to_string()))?;
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kind_resolved_before_a_panic_is_still_known_after_it() {
        // The fake API serves no discovery, so only the cache can resolve the kind.
        let api = Api::new(
            crate::fake_api::FakeApi::default().client(),
            &Model::default(),
        );
        let written = KindRef {
            group: Some(String::new()),
            version: Some("v1".into()),
            kind: "ConfigMap".into(),
        };
        api.kinds().insert(written.clone(), Kind::configmaps());
        let poison = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = api.kinds.lock();
            panic!("a panic while the kinds are locked");
        }));
        assert!(poison.is_err() && api.kinds.is_poisoned());
        let kind = api
            .resolve(&written)
            .await
            .expect("the kind resolved before the panic");
        assert_eq!(kind.resource.plural, "configmaps");
    }
}
