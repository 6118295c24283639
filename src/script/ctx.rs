//! The `ctx` value scripts receive: facts about the run and read-only, cache-backed lookups.
//!
//! Lookups go through the [`Lookup`] trait, so the daemon can answer from its informer caches
//! (no API call) and `khai test` from objects listed in a test case. Scripts never reach the
//! API client, the file system, the network or the environment.

use super::inline;
use crate::config::duration::Duration;
use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Position};
use serde_json::Value;
use std::sync::Arc;
use tracing::Level;

/// Why a lookup failed. The message is for the script's author: it becomes the script's error
/// at the line of the `ctx` call.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(transparent)]
    Kind(#[from] crate::config::kind::ParseError),
    #[error("kind {0:?} is not watched by this controller; add it to `owns` to look it up")]
    NotWatched(String),
    #[error("{kind} is namespaced: name the namespace, ctx.get({kind:?}, {name:?}, namespace)")]
    NeedsNamespace { kind: String, name: String },
    #[error("namespace {0:?} is not watched by khai")]
    NamespaceNotWatched(String),
    #[error("invalid label selector {0:?}")]
    InvalidSelector(String),
    /// A cached object has no script view (see [`super::object_view`]).
    #[error("cannot read {kind} {name} from khai's cache: {cause}")]
    Unreadable {
        kind: String,
        name: String,
        cause: serde_json::Error,
    },
}

/// Answers a script's lookups. Kinds are written as in the config (`ConfigMap`, `v1/ConfigMap`,
/// `apps/v1/Deployment`, `Deployment.apps`).
pub trait Lookup: Send + Sync {
    /// One object by name; `namespace` defaults to the reconciled object's.
    fn get(
        &self,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<Option<Value>, LookupError>;
    /// Objects of a kind, optionally by label selector, in `namespace`: `None` for the
    /// reconciled object's (every watched one for a cluster-scoped object), [`ALL_NAMESPACES`]
    /// for every watched namespace, or one namespace by name (an error if khai does not watch
    /// it). A cluster-scoped kind ignores it.
    fn list(
        &self,
        kind: &str,
        selector: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, LookupError>;
    /// Objects of a kind that the reconciled object controls (its observed children).
    fn owned(&self, kind: &str) -> Result<Vec<Value>, LookupError>;
}

/// `ctx.list(kind, #{ namespace: "*" })`: every namespace khai watches.
pub(crate) const ALL_NAMESPACES: &str = "*";

/// A lookup that knows no objects: every `get` is empty, every list too.
#[derive(Debug, Default, Clone)]
pub(crate) struct NoLookup;

impl Lookup for NoLookup {
    fn get(&self, _: &str, _: &str, _: Option<&str>) -> Result<Option<Value>, LookupError> {
        Ok(None)
    }
    fn list(&self, _: &str, _: Option<&str>, _: Option<&str>) -> Result<Vec<Value>, LookupError> {
        Ok(Vec::new())
    }
    fn owned(&self, _: &str) -> Result<Vec<Value>, LookupError> {
        Ok(Vec::new())
    }
}

/// The `ctx` argument of every function khai calls about an object.
#[derive(Clone)]
pub struct ScriptCtx {
    pub operator: String,
    pub controller: String,
    pub namespace: Option<String>,
    /// `[params]` of the config, as a map.
    pub params: Value,
    pub lookup: Arc<dyn Lookup>,
    /// The object's memo (`ctx.memo`), shared by every call about it.
    pub memo: Option<super::memo::Memo>,
    /// For a handler: how far its attempts on the current change have come.
    pub attempt: Option<Attempt>,
    /// The config's indexes (`ctx.index`).
    pub indexes: Option<Arc<dyn Indexes>>,
    /// What the call may do beyond computing (`k8s::…`, `http::…`); `None` refuses all of it.
    pub effects: Option<Arc<crate::effects::Effects>>,
}

/// How far a handler's attempts on one change have come: `ctx.retry`, `ctx.started`,
/// `ctx.runtime`.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// Attempts before this one (0 on the first).
    pub retry: u32,
    /// When the first attempt began (RFC 3339).
    pub started: String,
    /// Seconds since the first attempt began.
    pub runtime: f64,
}

/// Answers `ctx.index(name, key)`: the values the index holds under `key`, and `ctx.index(name)`:
/// every key with its values.
pub trait Indexes: Send + Sync {
    fn get(&self, index: &str, key: &str) -> Result<Vec<Value>, NoIndex>;
    fn all(&self, index: &str) -> Result<serde_json::Map<String, Value>, NoIndex>;
}

/// `ctx.index` named an index the config does not declare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no index named {0:?} in this config")]
pub struct NoIndex(pub String);

impl ScriptCtx {
    /// A context with no lookups, for tests and tools.
    pub fn detached(operator: &str, controller: &str, namespace: Option<&str>) -> Self {
        Self {
            operator: operator.into(),
            controller: controller.into(),
            namespace: namespace.map(str::to_string),
            params: Value::Object(serde_json::Map::new()),
            lookup: Arc::new(NoLookup),
            memo: None,
            attempt: None,
            indexes: None,
            effects: None,
        }
    }
}

type RhaiResult<T> = std::result::Result<T, Box<EvalAltResult>>;

fn to_dyn(v: &Value) -> RhaiResult<Dynamic> {
    Ok(super::convert::to_dynamic(v))
}

fn fail_with(message: impl std::fmt::Display) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        message.to_string().into(),
        Position::NONE,
    ))
}

fn get(ctx: &mut ScriptCtx, kind: &str, name: &str, ns: Option<&str>) -> RhaiResult<Dynamic> {
    match ctx.lookup.get(kind, name, ns).map_err(fail_with)? {
        Some(v) => to_dyn(&v),
        None => Ok(Dynamic::UNIT),
    }
}

fn array(items: Vec<Value>) -> RhaiResult<Array> {
    items.iter().map(to_dyn).collect()
}

/// `ctx.secret([namespace,] name, key)`: through the call's effects, which hold the Secrets the
/// config names; `()` when the Secret or key is missing.
fn secret(c: &ScriptCtx, namespace: Option<&str>, name: &str, key: &str) -> RhaiResult<Dynamic> {
    let Some(effects) = &c.effects else {
        return Err(fail_with(
            "ctx.secret is not available here: only reconcile, finalize, handlers, timers and \
             daemons may read Secrets",
        ));
    };
    effects.reads.mark();
    let namespace = namespace.or(c.namespace.as_deref());
    match effects.secrets.read(namespace, name, key) {
        Ok(Some(v)) => Ok(v.into()),
        Ok(None) => Ok(Dynamic::UNIT),
        Err(e) => Err(fail_with(e)),
    }
}

/// Marker key of the map thrown by `retry()` and `fail()`.
pub(crate) const CONTROL_KEY: &str = "__khai_control";

fn control(
    kind: &str,
    message: &str,
    delay: Option<Duration>,
    status: Option<Value>,
) -> Box<EvalAltResult> {
    let mut m = Map::new();
    m.insert(CONTROL_KEY.into(), kind.into());
    m.insert("message".into(), message.into());
    if let Some(d) = delay {
        m.insert("delay".into(), Dynamic::from(d));
    }
    if let Some(s) = status {
        m.insert("status".into(), Dynamic::from(s));
    }
    Box::new(EvalAltResult::ErrorRuntime(m.into(), Position::NONE))
}

/// `retry(message, delay)`: the delay is read here, so a bad one is an error at the script's
/// line that names it, not a retry that quietly falls back to backoff.
fn retry(message: &str, delay: &str, status: Option<Value>) -> RhaiResult<()> {
    let d: Duration = delay
        .parse()
        .map_err(|e| fail_with(format!("retry: cannot read '{delay}' as a duration: {e}")))?;
    Err(control("retry", message, Some(d), status))
}

/// The options of a failing answer, `fail(msg, #{ status })` or `retry(msg, delay, #{ status })`:
/// the status to write with khai's `Ready=False`, read here so a mistake is an error at the
/// script's line.
fn failing_options(function: &str, options: &Map) -> RhaiResult<Option<Value>> {
    let mut status = None;
    for (key, value) in options {
        match key.as_str() {
            "status" => {
                let json = super::convert::to_json(value)
                    .map_err(|e| fail_with(format!("{function}: status: {e}")))?;
                if !json.is_object() {
                    return Err(fail_with(format!(
                        "{function}: status must be a map, got {}",
                        value.type_name()
                    )));
                }
                status = Some(json);
            }
            other => {
                return Err(fail_with(format!(
                    "{function}: unknown option {other:?}; the only option is status"
                )));
            }
        }
    }
    Ok(status)
}

/// The options of `ctx.list(kind, #{ selector, namespace })`: each a string, nothing else.
fn list_options(options: &Map) -> Result<(Option<String>, Option<String>), String> {
    let mut out = (None, None);
    for (key, value) in options {
        let text = value
            .clone()
            .into_string()
            .map_err(|t| format!("ctx.list: option {key} must be a string, got {t}"))?;
        match key.as_str() {
            "selector" => out.0 = Some(text),
            "namespace" => out.1 = Some(text),
            other => {
                return Err(format!(
                    "ctx.list: unknown option {other:?}; the options are selector and namespace (\"*\" for all)"
                ));
            }
        }
    }
    Ok(out)
}

/// Registers the `ctx` type, logging functions and `retry`/`fail` on an engine.
pub(crate) fn register(engine: &mut Engine) {
    engine
        .register_type_with_name::<ScriptCtx>("Ctx")
        .register_get("operator", |c: &mut ScriptCtx| c.operator.clone())
        .register_get("controller", |c: &mut ScriptCtx| c.controller.clone())
        .register_get("namespace", |c: &mut ScriptCtx| {
            c.namespace.clone().map_or(Dynamic::UNIT, Dynamic::from)
        })
        .register_get("params", |c: &mut ScriptCtx| to_dyn(&c.params))
        .register_get("memo", |c: &mut ScriptCtx| match &c.memo {
            Some(m) => Dynamic::from(m.clone()),
            None => Dynamic::UNIT,
        })
        .register_get("retry", |c: &mut ScriptCtx| {
            i64::from(c.attempt.as_ref().map_or(0, |a| a.retry))
        })
        .register_get("started", |c: &mut ScriptCtx| match &c.attempt {
            Some(a) => Dynamic::from(a.started.clone()),
            None => Dynamic::UNIT,
        })
        .register_get("runtime", |c: &mut ScriptCtx| {
            c.attempt.as_ref().map_or(0.0, |a| a.runtime)
        })
        .register_fn("index", |c: &mut ScriptCtx, name: &str, key: &str| {
            let Some(idx) = &c.indexes else {
                return Err(fail_with(format!("no index named {name:?} in this config")));
            };
            array(idx.get(name, key).map_err(fail_with)?)
        })
        .register_fn("index", |c: &mut ScriptCtx, name: &str| {
            let Some(idx) = &c.indexes else {
                return Err(fail_with(format!("no index named {name:?} in this config")));
            };
            to_dyn(&Value::Object(idx.all(name).map_err(fail_with)?))
        })
        .register_fn("get", |c: &mut ScriptCtx, kind: &str, name: &str| {
            get(c, kind, name, None)
        })
        .register_fn(
            "get",
            |c: &mut ScriptCtx, kind: &str, name: &str, ns: &str| get(c, kind, name, Some(ns)),
        )
        .register_fn("secret", |c: &mut ScriptCtx, name: &str, key: &str| {
            secret(c, None, name, key)
        })
        .register_fn(
            "secret",
            |c: &mut ScriptCtx, ns: &str, name: &str, key: &str| secret(c, Some(ns), name, key),
        )
        .register_fn("list", |c: &mut ScriptCtx, kind: &str| {
            array(c.lookup.list(kind, None, None).map_err(fail_with)?)
        })
        .register_fn("list", |c: &mut ScriptCtx, kind: &str, selector: &str| {
            array(
                c.lookup
                    .list(kind, Some(selector), None)
                    .map_err(fail_with)?,
            )
        })
        .register_fn("list", |c: &mut ScriptCtx, kind: &str, options: Map| {
            let (selector, namespace) = list_options(&options).map_err(fail_with)?;
            let found = c
                .lookup
                .list(kind, selector.as_deref(), namespace.as_deref());
            array(found.map_err(fail_with)?)
        })
        .register_fn("owned", |c: &mut ScriptCtx, kind: &str| {
            array(c.lookup.owned(kind).map_err(fail_with)?)
        })
        .register_fn("now", |_: &mut ScriptCtx| {
            jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
        })
        // Held back like `print` while a call runs inline (see `inline`), so a call that moves
        // to the blocking pool logs each line once.
        .register_fn("log_debug", |msg: &str| inline::log(Level::DEBUG, msg))
        .register_fn("log_info", |msg: &str| inline::log(Level::INFO, msg))
        .register_fn("log_warn", |msg: &str| inline::log(Level::WARN, msg))
        .register_fn("log_error", |msg: &str| inline::log(Level::ERROR, msg))
        .register_fn("retry", |msg: &str, delay: &str| retry(msg, delay, None))
        .register_fn("retry", |msg: &str, delay: &str, options: Map| {
            retry(msg, delay, failing_options("retry", &options)?)
        })
        .register_fn("fail", |msg: &str| -> RhaiResult<()> {
            Err(control("fail", msg, None, None))
        })
        .register_fn("fail", |msg: &str, options: Map| -> RhaiResult<()> {
            let status = failing_options("fail", &options)?;
            Err(control("fail", msg, None, status))
        });
}

#[cfg(test)]
mod tests {
    use super::super::ScriptError;
    use super::super::tests::compile;
    use super::ScriptCtx;
    use serde_json::json;

    #[test]
    fn retry_and_fail_carry_the_status_their_options_give() {
        let s = compile(
            "fn a(obj, ctx) { retry(\"not yet\", \"10s\", #{ status: #{ phase: \"Waiting\" } }) }\n\
             fn b(obj, ctx) { fail(\"bad\", #{ status: #{ conditions: [#{ type: \"Valid\", status: \"False\" }] } }) }\n\
             fn c(obj, ctx) {\n  fail(\"bad\", #{ stauts: #{} })\n}\n\
             fn d(obj, ctx) {\n  fail(\"bad\", #{ status: 1 })\n}",
        )
        .unwrap();
        let ctx = || ScriptCtx::detached("op", "c", None);
        let a = s.call_with_ctx("a", &json!({}), ctx()).unwrap_err();
        assert_eq!(
            a.failing_status()
                .map(|m| serde_json::Value::Object(m.clone())),
            Some(json!({ "phase": "Waiting" }))
        );
        assert_eq!(
            a.to_string(),
            "scripts/t.rhai: in a: not yet (retry in 10s)"
        );
        let b = s.call_with_ctx("b", &json!({}), ctx()).unwrap_err();
        assert!(matches!(b, ScriptError::Fail { .. }), "{b:?}");
        assert_eq!(
            b.failing_status().unwrap()["conditions"][0]["type"],
            "Valid"
        );
        let c = s.call_with_ctx("c", &json!({}), ctx()).unwrap_err();
        assert_eq!(
            c.to_string(),
            "scripts/t.rhai:4:3: in c: fail: unknown option \"stauts\"; the only option is status"
        );
        let d = s.call_with_ctx("d", &json!({}), ctx()).unwrap_err();
        assert_eq!(
            d.to_string(),
            "scripts/t.rhai:7:3: in d: fail: status must be a map, got i64"
        );
    }
}
