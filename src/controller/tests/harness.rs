//! The one place these tests build a controller: from an operator's files (`operator.toml` and
//! its scripts), over a [`FakeApi`] whose objects are what the controller's caches hold.
//!
//! Tests drive it through [`Harness::reconcile`] (kube-runtime's reconcile function) and
//! [`Harness::retry_after`] (its error policy), and assert on what reaches the API: objects,
//! writes and Events. A cache that has caught up with the writes is a new [`Harness::ctx`]; the
//! same `Ctx` again is a cache that has not.

use crate::controller::context::{Beside, Caches, Ctx, Services, Spec};
use crate::controller::finalizer_names::{self, Consumer};
use crate::controller::reconcile::reconcile_one;
use crate::controller::report::{ReconcileError, error_policy};
use crate::fake_api::FakeApi;
use crate::handler::Handlers;
use crate::handler::clock::Clock;
use crate::operator::Operator;
use crate::watch::{Informer, Kind};
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The namespace every test object lives in.
pub(super) const NS: &str = "ns";
/// Where the fake keeps Widgets, the kind every test controller is for.
pub(super) const WIDGETS: &str = "/apis/x.dev/v1/namespaces/ns/widgets";
/// Where the fake keeps ConfigMaps, the kind test controllers own.
pub(super) const CONFIGMAPS: &str = "/api/v1/namespaces/ns/configmaps";
/// Where the fake keeps Events.
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

/// `[operator]` and the Widget CRD, to which a test appends its `[[controller]]` and the rest.
pub(super) const WIDGET_CRD: &str = r#"
[operator]
name = "op"

[[crd]]
group = "x.dev"
kind = "Widget"
versions = ["v1"]
spec.size = { type = "integer" }
status.phase = { type = "string" }
status.seen = { type = "integer" }
"#;

/// A `[[controller]]` of Widgets running `w.rhai`, with nothing else set.
pub(super) const CONTROLLER: &str = r#"
[[controller]]
for = "Widget"
script = "w.rhai"
"#;

/// A `reconcile` that asks for nothing, beside the handlers, timers or daemons under test.
pub(super) const NOTHING: &str = "fn reconcile(obj, ctx) { #{} }";

/// An operator, the fake API server it talks to, and the objects the test created there.
pub(super) struct Harness {
    pub(super) api: FakeApi,
    op: Operator,
}

impl Harness {
    /// An operator whose `operator.toml` is [`WIDGET_CRD`] followed by `config`, with the
    /// scripts `scripts` (file name, text).
    pub(super) fn new(config: &str, scripts: &[(&str, &str)]) -> Self {
        let mut files =
            BTreeMap::from([("operator.toml".to_string(), format!("{WIDGET_CRD}{config}"))]);
        for (name, text) in scripts {
            files.insert((*name).to_string(), (*text).to_string());
        }
        let op = Operator::load_memory(Path::new("/op"), files, None)
            .unwrap_or_else(|e| panic!("the test's operator does not load: {e}"));
        let api = FakeApi::default();
        // Discovery of the core group, which resolving `v1/ConfigMap` reads.
        api.put(
            "/api/v1",
            json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                "resources": [{ "name": "configmaps", "singularName": "configmap",
                                "namespaced": true, "kind": "ConfigMap",
                                "verbs": ["create", "delete", "get", "list", "patch", "watch"] }],
            }),
        );
        Self { api, op }
    }

    /// Creates the Widget `name` with `spec` (and `extra` merged into it, for metadata a test
    /// needs), as a user would; its uid is unique in the whole test run, because some state of
    /// khai is per process and keyed by uid.
    pub(super) fn create(&self, name: &str, spec: Value, extra: Value) {
        static UIDS: AtomicU64 = AtomicU64::new(0);
        let uid = format!("uid-{}", UIDS.fetch_add(1, Ordering::Relaxed));
        let mut obj = json!({
            "apiVersion": "x.dev/v1", "kind": "Widget",
            "metadata": { "name": name, "namespace": NS, "uid": uid, "generation": 1,
                          "creationTimestamp": jiff::Timestamp::now().to_string() },
            "spec": spec,
        });
        json_patch::merge(&mut obj, &extra);
        self.api.put(&format!("{WIDGETS}/{name}"), obj);
    }

    /// Changes the Widget `name` as a user would: `patch` merged into it.
    pub(super) fn edit(&self, name: &str, patch: &Value) {
        let path = format!("{WIDGETS}/{name}");
        let mut obj = self.api.get(&path).expect("the widget exists");
        json_patch::merge(&mut obj, patch);
        self.api.put(&path, obj);
    }

    /// Deletes the Widget `name` as the API server does while finalizers hold it: it gets a
    /// `deletionTimestamp`.
    pub(super) fn delete(&self, name: &str) {
        let now = jiff::Timestamp::now().to_string();
        self.edit(name, &json!({ "metadata": { "deletionTimestamp": now } }));
    }

    /// The Widget `name` as the API server holds it now.
    pub(super) fn widget(&self, name: &str) -> Option<Value> {
        self.api.get(&format!("{WIDGETS}/{name}"))
    }

    /// The ConfigMaps the API server holds, by name.
    pub(super) fn configmaps(&self) -> BTreeMap<String, Value> {
        self.api
            .under(&format!("{CONFIGMAPS}/"))
            .into_iter()
            .map(|o| (o["metadata"]["name"].as_str().unwrap_or_default().into(), o))
            .collect()
    }

    /// The writes that reached the API server, Events left out: `METHOD path`.
    pub(super) fn writes(&self) -> Vec<String> {
        self.api
            .writes()
            .into_iter()
            .filter(|w| !w.contains("/apis/events.k8s.io/"))
            .collect()
    }

    /// The Events recorded, as (reason, how many times: the series count).
    pub(super) fn events(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for e in self.api.under(&format!("{EVENTS}/")) {
            let reason = e["reason"].as_str().unwrap_or_default().to_string();
            *out.entry(reason).or_default() += e["series"]["count"].as_i64().unwrap_or(1);
        }
        out
    }

    /// How many times Events with `reason` were recorded.
    pub(super) fn events_of(&self, reason: &str) -> i64 {
        self.events().get(reason).copied().unwrap_or(0)
    }

    /// One reconcile of the Widget `name` as the API server holds it now (kube-runtime's
    /// reconcile function, called as kube-runtime calls it).
    pub(super) async fn reconcile(
        &self,
        ctx: &Arc<Ctx>,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        finishes(reconcile_one(self.object(name), ctx.clone())).await
    }

    /// One reconcile of `obj`, the Widget as a cache that has not caught up still shows it.
    pub(super) async fn reconcile_stale(
        &self,
        ctx: &Arc<Ctx>,
        obj: Value,
    ) -> Result<Action, ReconcileError> {
        let obj = serde_json::from_value(obj).expect("a widget is an object");
        finishes(reconcile_one(Arc::new(obj), ctx.clone())).await
    }

    /// A reconcile of the Widget `name` that fails, then what kube-runtime is told to do next
    /// (its error policy); panics if the reconcile succeeds.
    pub(super) async fn retry_after(&self, ctx: &Arc<Ctx>, name: &str) -> Action {
        let obj = self.object(name);
        match finishes(reconcile_one(obj.clone(), ctx.clone())).await {
            Ok(a) => panic!("the reconcile was to fail; it returned {a:?}"),
            Err(e) => error_policy(obj, &e, ctx.clone()),
        }
    }

    fn object(&self, name: &str) -> Arc<DynamicObject> {
        let obj = self.widget(name).expect("the widget exists");
        Arc::new(serde_json::from_value(obj).expect("a widget is an object"))
    }

    /// The operator's first `[[controller]]`, with the handlers, timers and daemons of the
    /// config beside it, over caches holding what the API server holds now (a watch that has
    /// caught up). Per-object state (backoff, spin, handler progress not yet seen) lives in the
    /// returned `Ctx`: keep it across reconciles for a controller that keeps running.
    pub(super) async fn ctx(&self) -> Arc<Ctx> {
        self.ctx_of_shard(None).await
    }

    /// [`Harness::ctx`] for one shard of a sharded operator (`khai run --shards`).
    pub(super) async fn ctx_of_shard(&self, shard: Option<crate::shard::Settings>) -> Arc<Ctx> {
        let model = &self.op.config.model;
        let ctl = &model.controllers[0];
        let script = &self.op.scripts[0];
        let client = self.api.client();
        let resolve = async |k| {
            crate::watch::resolve(&client, model, k)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let kind = resolve(&ctl.for_kind).await;
        let mut owned = Vec::new();
        for k in &ctl.owns {
            let k = resolve(k).await;
            owned.push(self.cache(k, CONFIGMAPS));
        }
        let primary = self.cache(kind.clone(), WIDGETS);
        let name = ctl.display_name();
        let consumer = Consumer {
            kind: &finalizer_names::key(&kind),
            name: &name,
            handlers_only: false,
        };
        let finalizers = finalizer_names::assign(&model.operator.name, &[consumer])
            .pop()
            .expect("one controller, one name");
        let compiled = &self.op.handlers;
        let operator = &model.operator.name;
        let handlers = (!compiled.handlers.is_empty())
            .then(|| Arc::new(Handlers::new(operator, compiled.handlers.clone())));
        let clock = (!compiled.timers.is_empty() || !compiled.daemons.is_empty()).then(|| {
            Arc::new(Clock::new(
                operator,
                compiled.timers.clone(),
                compiled.daemons.clone(),
            ))
        });
        let effects = crate::effects::Effects {
            k8s: Some(Arc::new(crate::effects::k8s::Api::new(
                client.clone(),
                model,
            ))),
            ..crate::effects::Effects::new(
                tokio::runtime::Handle::current(),
                crate::effects::Budget::default(),
            )
        };
        // khai owns the status of a CRD of the config that has one.
        let manage_status = model.crds.iter().any(|c| {
            let r = &kind.resource;
            c.status.is_some() && c.kind == r.kind && c.group == r.group
        });
        let finalize = crate::controller::prepare::FINALIZE;
        Arc::new(Ctx {
            spec: Spec {
                controller: name.clone(),
                operator: operator.clone(),
                function: Some(ctl.reconcile.clone()),
                finalize: script
                    .has_function(finalize, crate::operator::RECONCILE_ARITY)
                    .then(|| finalize.to_string()),
                finalizer_name: finalizers.own.clone(),
                finalizers,
                script: script.clone(),
                kind,
                when: ctl.when.clone(),
                annotations: ctl.annotations.clone(),
                filter: crate::watch::Filter::default(),
                manage_status,
                params: Value::Object(model.params.clone()),
                children: crate::apply::Policy::of(ctl),
                effects: effects.with_budget(ctl.budget),
                shard: shard.map(Arc::new),
            },
            caches: Caches {
                visible: std::iter::once(primary.clone())
                    .chain(owned.iter().cloned())
                    .collect(),
                primary,
                owned,
                namespaces: vec![NS.into()],
            },
            services: Services {
                applier: Arc::new(crate::apply::Applier::new(client.clone(), model.clone())),
                recorder: crate::events::Recorder::new(
                    client.clone(),
                    crate::events::Reporter {
                        controller: format!("khai-{operator}"),
                        instance: None,
                    },
                ),
                client,
            },
            backoff: crate::queue::Backoff::new(ctl.backoff.base.get(), ctl.backoff.cap.get()),
            objects: Default::default(),
            pending: crate::queue::Pending::new(&name),
            beside: Beside {
                handlers,
                clock,
                indexes: None,
            },
            revisions: Default::default(),
        })
    }

    /// A cache of `kind` holding the objects the fake keeps under `path`.
    fn cache(&self, kind: Kind, path: &str) -> Arc<Informer> {
        let objects = self
            .api
            .under(&format!("{path}/"))
            .into_iter()
            .map(|o| serde_json::from_value(o).expect("the fake holds objects"))
            .collect();
        Informer::with_objects(kind, Some(NS), objects)
    }
}

/// Waits for one reconcile, failing the test if it never finishes. On the paused clock time
/// moves only while every task waits (script calls on the blocking pool hold it), so this
/// deadline passes only when the reconcile hangs.
async fn finishes<T>(reconcile: impl Future<Output = T>) -> T {
    const HANG: std::time::Duration = std::time::Duration::from_secs(3600);
    tokio::time::timeout(HANG, reconcile)
        .await
        .expect("the reconcile never finished: a request to the fake API or a script call hung")
}
