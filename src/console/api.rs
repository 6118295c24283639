//! The console's routes, read-only (docs/console.md describes each answer):
//!
//! - `/api/overview`: the operator, its config revision and reload history, leadership, and
//!   every controller (with its queue and recent rates), handler, timer, daemon, schedule and
//!   webhook;
//! - `/api/controllers/<controller>`: the objects it has reconciled, with phase, state and last
//!   result, its queue, rates and latency percentiles;
//! - `/api/objects/<controller>/<namespace>/<name>` (`-` for a cluster-scoped object): the
//!   object's last turns and its Events, read from the API server;
//! - `/api/stream`: Server-Sent Events ([`super::sse`]);
//! - `/api/playground/<controller>` and `POST /api/playground`: the playground
//!   ([`super::playground`]), the one request that is not a `GET`, and still writes nothing;
//! - anything else: the web page ([`super::assets`]).

use super::auth::Access;
use super::history::ObjectKey;
use super::{Console, assets, now_ms, playground, sse};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::time::Duration;

/// The body every answer has: whole (JSON, assets) or streamed (events).
pub(super) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The Events shown per object, newest first.
const EVENTS: u32 = 50;
/// How long reading an object's Events may take before the page is answered without them.
const EVENTS_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a request gets no data.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(super) enum RouteError {
    #[error("the console is read-only: GET only (and POST /api/playground, which writes nothing)")]
    Method,
    #[error("no such page: {0}")]
    NotFound(String),
    #[error("no controller named {0:?} in the running config")]
    NoController(String),
    #[error(
        "no reconcile of {0} is held: khai has not reconciled it since it started, or forgot it \
         to stay within the console's memory cap"
    )]
    NoObject(String),
}

impl RouteError {
    fn status(&self) -> StatusCode {
        match self {
            RouteError::Method => StatusCode::METHOD_NOT_ALLOWED,
            _ => StatusCode::NOT_FOUND,
        }
    }
}

/// Answers one request.
pub(super) async fn handle(console: &Console, req: Request<Incoming>) -> Response<Body> {
    if let Some(auth) = &console.auth
        && req.uri().path().starts_with("/api/")
    {
        let access = match req.method() == Method::POST {
            true => Access::Playground,
            false => Access::Read,
        };
        let operator = crate::sync::lock(&console.overview).operator.clone();
        if let Err(denied) = auth.check(req.headers(), access, &operator).await {
            let mut res = error_with(denied.status(), &denied.to_string());
            if denied.status() == StatusCode::UNAUTHORIZED {
                res.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            return res;
        }
    }
    if req.method() == Method::POST && req.uri().path() == "/api/playground" {
        return match playground::post(console.playground(), req).await {
            Ok(value) => json_reply(StatusCode::OK, &value),
            Err(e) => error_with(e.status(), &e.to_string()),
        };
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return error(&RouteError::Method);
    }
    let path = req.uri().path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let answer = match segments.as_slice() {
        ["api", "overview"] => Ok(overview(console)),
        ["api", "controllers", name] => controller(console, name),
        ["api", "objects", controller, namespace, name] => {
            let key = ObjectKey {
                controller: (*controller).to_string(),
                namespace: (*namespace != "-").then(|| (*namespace).to_string()),
                name: (*name).to_string(),
            };
            object(console, &key).await
        }
        ["api", "playground", controller] => {
            return match playground::source(console.playground(), controller) {
                Ok(value) => json_reply(StatusCode::OK, &value),
                Err(e) => error_with(e.status(), &e.to_string()),
            };
        }
        ["api", "stream"] => {
            let mut res = Response::new(sse::stream(console.feed.subscribe()));
            let headers = res.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            return res;
        }
        ["api", ..] => Err(RouteError::NotFound(path.to_string())),
        _ => {
            return match assets::get(path) {
                Some((ctype, body)) => reply(StatusCode::OK, ctype, Bytes::from_static(body)),
                None => error(&RouteError::NotFound(path.to_string())),
            };
        }
    };
    match answer {
        Ok(value) => json_reply(StatusCode::OK, &value),
        Err(e) => error(&e),
    }
}

/// `/api/overview`.
fn overview(console: &Console) -> Value {
    let now = now_ms();
    let o = crate::sync::lock(&console.overview).clone();
    let controllers: Vec<Value> = o
        .controllers
        .iter()
        .map(|c| {
            let counts = console.history.counts(&c.name, now);
            let (depth, busy) = crate::metrics::queue_now(&c.name);
            json!({
                "name": c.name,
                "kind": c.kind,
                "script": c.script,
                "reconcile": c.reconcile,
                "concurrency": c.concurrency,
                "queue_depth": depth,
                "busy": busy,
                "objects": counts.objects,
                "backoff": counts.backoff,
                "damped": counts.damped,
                "rates": console.history.rates(&c.name, now),
            })
        })
        .collect();
    let leases: Vec<Value> = crate::metrics::leases()
        .into_iter()
        .map(|(lease, leading)| json!({"lease": lease, "leading": leading}))
        .collect();
    json!({
        "operator": o.operator,
        "khai_version": env!("CARGO_PKG_VERSION"),
        "revision": o.revision,
        "reloads": o.reloads,
        "leader_election": leases,
        "controllers": controllers,
        "handlers": o.handlers,
        "timers": o.timers,
        "daemons": o.daemons,
        "schedules": o.schedules,
        "webhooks": o.webhooks,
    })
}

/// `/api/controllers/<name>`.
fn controller(console: &Console, name: &str) -> Result<Value, RouteError> {
    let info = crate::sync::lock(&console.overview)
        .controllers
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| RouteError::NoController(name.to_string()))?;
    let now = now_ms();
    let (depth, busy) = crate::metrics::queue_now(name);
    Ok(json!({
        "name": info.name,
        "kind": info.kind,
        "script": info.script,
        "reconcile": info.reconcile,
        "concurrency": info.concurrency,
        "queue_depth": depth,
        "busy": busy,
        "rates": console.history.rates(name, now),
        "objects": console.history.objects(name, now),
    }))
}

/// `/api/objects/<controller>/<namespace>/<name>`.
async fn object(console: &Console, key: &ObjectKey) -> Result<Value, RouteError> {
    let kind = crate::sync::lock(&console.overview)
        .controllers
        .iter()
        .find(|c| c.name == key.controller)
        .map(|c| c.kind.clone())
        .ok_or_else(|| RouteError::NoController(key.controller.clone()))?;
    let shown = match &key.namespace {
        Some(ns) => format!("{kind} {ns}/{}", key.name),
        None => format!("{kind} {}", key.name),
    };
    let turns = console
        .history
        .object(key, now_ms())
        .ok_or(RouteError::NoObject(shown))?;
    let (events, events_error) = match events(
        &console.client,
        key.namespace.as_deref(),
        &turns.summary.uid,
    )
    .await
    {
        Ok(events) => (events, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut value = json!({"controller": key.controller, "kind": kind});
    if let (Value::Object(out), Ok(Value::Object(more))) =
        (&mut value, serde_json::to_value(&turns))
    {
        out.extend(more);
        out.insert("events".into(), Value::Array(events));
        out.insert("events_error".into(), json!(events_error));
    }
    Ok(value)
}

/// The object's Events, newest first, or why they could not be read (RBAC without `list` on
/// events, a slow API server).
async fn events(
    client: &kube::Client,
    namespace: Option<&str>,
    uid: &str,
) -> Result<Vec<Value>, String> {
    let api: Api<Event> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default()
        .fields(&format!("involvedObject.uid={uid}"))
        .limit(EVENTS);
    let list = tokio::time::timeout(EVENTS_TIMEOUT, api.list(&params))
        .await
        .map_err(|_| format!("reading the Events took more than {EVENTS_TIMEOUT:?}"))?
        .map_err(|e| {
            format!(
                "failed to read the Events: {}",
                crate::client::ApiError::from(e)
            )
        })?;
    let mut out: Vec<Value> = list
        .items
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap_or_default();
            let at = [&v["lastTimestamp"], &v["eventTime"], &v["firstTimestamp"]]
                .into_iter()
                .find(|t| t.is_string())
                .cloned()
                .unwrap_or(Value::Null);
            json!({
                "type": v["type"],
                "reason": v["reason"],
                "message": v["message"],
                "count": v["count"],
                "at": at,
            })
        })
        .collect();
    out.sort_by(|a, b| b["at"].as_str().cmp(&a["at"].as_str()));
    Ok(out)
}

fn reply(status: StatusCode, ctype: &'static str, body: Bytes) -> Response<Body> {
    let mut res = Response::new(Full::new(body).boxed_unsync());
    *res.status_mut() = status;
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The page loads only its own script and style, and nothing may frame it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    res
}

fn json_reply(status: StatusCode, value: &Value) -> Response<Body> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    reply(status, "application/json", Bytes::from(body))
}

fn error(e: &RouteError) -> Response<Body> {
    error_with(e.status(), &e.to_string())
}

/// An error answer: `{"error": message}` with `status`.
fn error_with(status: StatusCode, message: &str) -> Response<Body> {
    json_reply(status, &json!({"error": message}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_is_missing_with_their_status() {
        let e = RouteError::NoObject("Cache default/x".into());
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert!(
            e.to_string()
                .starts_with("no reconcile of Cache default/x is held")
        );
        assert_eq!(RouteError::Method.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
