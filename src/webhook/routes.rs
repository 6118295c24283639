//! HTTP for webhooks: which path calls which script, how many reviews run at once, and the
//! answers to bad requests.
//!
//! `POST /validate/<name>`, `/mutate/<name>` and `/convert/<name>`, where `<name>` is a
//! `[[webhook]]`'s name; with `khai run --shards`, `POST /shard/assign` labels an object for its
//! shard ([`crate::shard::assign`]). Anything else is a JSON error: 404 for an unknown path, 405
//! for a method other than POST, 413 for a body larger than `max_body_bytes`, 400 for a body that
//! is not a review, 503 when too many reviews already wait. Admission and conversion reviews take
//! turns at separate gates ([`super::gate`]), so slow conversions of long lists never hold up
//! admission. Nothing a client sends can panic the server.

use super::admission::{self, Kind};
use super::conversion;
use super::gate::{Full as GateFull, Gate};
use crate::config::webhook::WebhookServer;
use crate::script::webhook::Handler;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

type Handlers = Arc<HashMap<String, Handler>>;

/// How many reviews run and wait at once, and how large and long one may be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limits {
    pub(crate) max_body: usize,
    pub(crate) admissions: usize,
    pub conversions: usize,
    pub queued: usize,
    /// How long one request may take; a conversion stops converting past it.
    pub timeout: Duration,
}

impl Limits {
    pub(crate) fn of(server: &WebhookServer, timeout: Duration) -> Self {
        Self {
            max_body: server.max_body_bytes,
            admissions: server.max_concurrent_reviews,
            conversions: server.max_concurrent_conversions,
            queued: server.max_queued_reviews,
            timeout,
        }
    }
}

/// Every webhook by name, and the limits. The handlers can be replaced while the server runs
/// (hot reload); a request keeps the set it started with.
pub(crate) struct Routes {
    handlers: RwLock<Handlers>,
    /// The shard assignment webhook (`khai run --shards`), at [`ASSIGN_PATH`].
    assign: Option<Assign>,
    limits: Limits,
    admissions: Gate,
    conversions: Gate,
    refusals: Mutex<crate::serve::Throttle>,
}

/// What a path asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Admit(Kind),
    Convert,
}

/// The path of the shard assignment webhook.
pub(crate) const ASSIGN_PATH: &str = crate::manifest::sharding::ASSIGN_PATH;

/// What the shard assignment webhook answers from: the config's rules and the ring this
/// replica sees.
pub(crate) struct Assign {
    pub(crate) rules: crate::shard::assign::Rules,
    pub(crate) ring: crate::shard::view::RingView,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("limits", &self.limits)
            .field("assign", &self.assign.is_some())
            .finish_non_exhaustive()
    }
}

impl Routes {
    pub(crate) fn new(handlers: Vec<Handler>, limits: Limits, assign: Option<Assign>) -> Self {
        Self {
            handlers: RwLock::new(by_name(handlers)),
            assign,
            admissions: Gate::new(limits.admissions, limits.queued),
            conversions: Gate::new(limits.conversions, limits.queued),
            refusals: Mutex::new(crate::serve::Throttle::new(Duration::from_secs(10))),
            limits,
        }
    }

    /// Serves `handlers` from the next request on.
    pub(crate) fn replace(&self, handlers: Vec<Handler>) {
        let next = by_name(handlers);
        match self.handlers.write() {
            Ok(mut h) => *h = next,
            // A writer never panics while holding the lock; recover the guard regardless.
            Err(poisoned) => *poisoned.into_inner() = next,
        }
    }

    /// The handlers in force now.
    fn current(&self) -> Handlers {
        match self.handlers.read() {
            Ok(h) => h.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The webhook's name and the call for `path`, if the webhook exists and defines that
    /// function.
    fn route<'p>(handlers: &HashMap<String, Handler>, path: &'p str) -> Option<(&'p str, Call)> {
        let (prefix, name) = path.strip_prefix('/')?.split_once('/')?;
        let hook = &handlers.get(name)?.hook;
        let call = match prefix {
            "validate" if hook.validate.is_some() => Call::Admit(Kind::Validate),
            "mutate" if hook.mutate.is_some() => Call::Admit(Kind::Mutate),
            "convert" if hook.convert.is_some() => Call::Convert,
            _ => return None,
        };
        Some((name, call))
    }

    /// Answers one request, and counts it with its time when the path names a webhook that is
    /// loaded or is the shard assignment webhook's (other paths are not counted, so a client
    /// cannot grow the label set).
    pub(crate) async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let started = std::time::Instant::now();
        let path = req.uri().path().to_string();
        let res = self.answer(req).await;
        let code = || res.status().as_u16().to_string();
        if self.assign.is_some() && path == ASSIGN_PATH {
            crate::metrics::webhook_request("shard", "assign", &code(), started.elapsed());
        } else if let Some((name, call)) = Self::route(&self.current(), &path) {
            let sort = match call {
                Call::Admit(Kind::Validate) => "validate",
                Call::Admit(Kind::Mutate) => "mutate",
                Call::Convert => "convert",
            };
            crate::metrics::webhook_request(name, sort, &code(), started.elapsed());
        }
        res
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        // The caller gives up on the request after the timeout; a conversion stops then too.
        let deadline = std::time::Instant::now() + self.limits.timeout;
        let path = req.uri().path().to_string();
        let handlers = self.current();
        if let Some(assign) = self.assign.as_ref().filter(|_| path == ASSIGN_PATH) {
            return self.assign(assign, req).await;
        }
        let Some((name, call)) = Self::route(&handlers, &path) else {
            return error(StatusCode::NOT_FOUND, format!("no webhook at {path}"));
        };
        let name = name.to_string();
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "POST only".into());
        }
        let max = self.limits.max_body;
        if declared_length(&req).is_some_and(|n| n > max) {
            return too_large(max);
        }
        let (gate, sort) = match call {
            Call::Admit(_) => (&self.admissions, "admission"),
            Call::Convert => (&self.conversions, "conversion"),
        };
        // The turn is taken before the body is read: a review in line holds no memory.
        let turn = match gate.enter().await {
            Ok(turn) => turn,
            Err(GateFull) => {
                let now = tokio::time::Instant::now();
                let mut refusals = self.refusals.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(suppressed) = refusals.ready(now) {
                    tracing::warn!(
                        sort,
                        waiting = self.limits.queued,
                        suppressed,
                        "too many reviews waiting; answering 503 (see max_queued_reviews)"
                    );
                }
                drop(refusals);
                let msg = format!("too many {sort} reviews in progress; try again");
                return error(StatusCode::SERVICE_UNAVAILABLE, msg);
            }
        };
        let body = match read_body(req.into_body(), max).await {
            Ok(body) => body,
            Err(res) => return res,
        };
        match call {
            Call::Admit(kind) => {
                let review = match admission::parse(&body) {
                    Ok(r) => r,
                    Err(e) => return error(StatusCode::BAD_REQUEST, e.0),
                };
                drop(body);
                let Some(handler) = handlers.get(&name) else {
                    return error(StatusCode::NOT_FOUND, format!("no webhook at {path}"));
                };
                let answer = admission::review(handler, kind, review).await;
                drop(turn);
                reply(StatusCode::OK, &answer)
            }
            Call::Convert => {
                let job = move || {
                    // The turn ends when the work does, even if the client has gone.
                    let _turn = turn;
                    match handlers.get(&name) {
                        Some(handler) => conversion::answer(handler, &body, deadline),
                        None => Err(admission::BadReview(format!("no webhook named {name}"))),
                    }
                };
                match tokio::task::spawn_blocking(job).await {
                    Ok(Ok(bytes)) => json_response(StatusCode::OK, bytes),
                    Ok(Err(e)) => error(StatusCode::BAD_REQUEST, e.0),
                    Err(e) => {
                        tracing::error!(error = %e, "webhook: conversion task failed");
                        error(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!("conversion task failed: {e}"),
                        )
                    }
                }
            }
        }
    }
}

impl Routes {
    /// Labels the object of an AdmissionReview for its shard; never refuses it.
    async fn assign(&self, assign: &Assign, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "POST only".into());
        }
        let max = self.limits.max_body;
        if declared_length(&req).is_some_and(|n| n > max) {
            return too_large(max);
        }
        let Ok(turn) = self.admissions.enter().await else {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many admission reviews in progress; try again".into(),
            );
        };
        let body = match read_body(req.into_body(), max).await {
            Ok(body) => body,
            Err(res) => return res,
        };
        let review = match crate::shard::assign::Review::parse(&body) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        };
        // Read in place: the ring is a few thousand points, too many to copy per review.
        let patch = assign.rules.patch(review.request(), &assign.ring.borrow());
        if let Some(p) = &patch {
            tracing::debug!(patch = ?p, "labelled an object for its shard at admission");
        }
        let verdict = admission::Verdict::Allow {
            warnings: Vec::new(),
            patch,
        };
        let answer = admission::respond(review.api_version(), review.uid().into(), verdict);
        drop(turn);
        reply(StatusCode::OK, &answer)
    }
}

/// The `Content-Length` the client declared, if any.
fn declared_length(req: &Request<Incoming>) -> Option<usize> {
    req.headers()
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Reads the body into one buffer of at most `max` bytes, sized up front when the client
/// declared the length, so the body is held once.
async fn read_body(mut body: Incoming, max: usize) -> Result<Vec<u8>, Response<Full<Bytes>>> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| error(StatusCode::BAD_REQUEST, format!("cannot read body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(too_large(max));
            }
            if buf.is_empty() {
                let hint = hyper::body::Body::size_hint(&body).lower() as usize;
                buf.reserve_exact((data.len() + hint).min(max));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

fn too_large(max: usize) -> Response<Full<Bytes>> {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body is larger than {max} bytes (max_body_bytes)"),
    )
}

fn by_name(handlers: Vec<Handler>) -> Handlers {
    Arc::new(handlers.into_iter().map(|h| (h.name.clone(), h)).collect())
}

/// A JSON error body `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: String) -> Response<Full<Bytes>> {
    tracing::debug!(status = status.as_u16(), %message, "webhook: bad request");
    reply(status, &json!({ "error": message }))
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    json_response(status, serde_json::to_vec(body).unwrap_or_default())
}

fn json_response(status: StatusCode, bytes: Vec<u8>) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(bytes)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}
