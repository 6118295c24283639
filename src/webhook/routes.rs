//! HTTP for webhooks: which path calls which script, and the answers to bad requests.
//!
//! `POST /validate/<name>`, `/mutate/<name>` and `/convert/<name>`, where `<name>` is a
//! `[[webhook]]`'s name. Anything else is a JSON error: 404 for an unknown path, 405 for a
//! method other than POST, 400 for a body that is too large or is not a review. Nothing a client
//! sends can panic the server.

use super::admission::{self, Kind};
use super::conversion;
use super::script_api::Handler;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Handlers = Arc<HashMap<String, Handler>>;

/// Every webhook by name, and the body size limit. The handlers can be replaced while the
/// server runs (hot reload); a request keeps the set it started with.
#[derive(Debug)]
pub struct Routes {
    handlers: RwLock<Handlers>,
    max_body: usize,
}

/// What a path asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Admit(Kind),
    Convert,
}

impl Routes {
    pub fn new(handlers: Vec<Handler>, max_body: usize) -> Self {
        Self {
            handlers: RwLock::new(by_name(handlers)),
            max_body,
        }
    }

    /// Serves `handlers` from the next request on.
    pub fn replace(&self, handlers: Vec<Handler>) {
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

    /// The handler and call for `path`, if the webhook exists and defines that function.
    fn route<'h>(
        handlers: &'h HashMap<String, Handler>,
        path: &str,
    ) -> Option<(&'h Handler, Call)> {
        let (prefix, name) = path.strip_prefix('/')?.split_once('/')?;
        let handler = handlers.get(name)?;
        let hook = &handler.hook;
        let call = match prefix {
            "validate" if hook.validate.is_some() => Call::Admit(Kind::Validate),
            "mutate" if hook.mutate.is_some() => Call::Admit(Kind::Mutate),
            "convert" if hook.convert.is_some() => Call::Convert,
            _ => return None,
        };
        Some((handler, call))
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_string();
        let handlers = self.current();
        let Some((handler, call)) = Self::route(&handlers, &path) else {
            return error(StatusCode::NOT_FOUND, format!("no webhook at {path}"));
        };
        if req.method() != Method::POST {
            return error(StatusCode::METHOD_NOT_ALLOWED, "POST only".into());
        }
        let body = match Limited::new(req.into_body(), self.max_body).collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                let msg = format!("request body is larger than {} bytes", self.max_body);
                return error(StatusCode::BAD_REQUEST, msg);
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("cannot read body: {e}")),
        };
        let answer = match call {
            Call::Admit(kind) => match admission::parse(&body) {
                Ok(r) => admission::review(handler, kind, r).await,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.0),
            },
            Call::Convert => match conversion::parse(&body) {
                Ok(r) => conversion::review(handler, r).await,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.0),
            },
        };
        reply(StatusCode::OK, &answer)
    }
}

fn by_name(handlers: Vec<Handler>) -> Handlers {
    Arc::new(handlers.into_iter().map(|h| (h.name.clone(), h)).collect())
}

/// A JSON error body `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: String) -> Response<Full<Bytes>> {
    tracing::debug!(status = status.as_u16(), %message, "webhook: bad request");
    reply(status, &json!({ "error": message }))
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut res = Response::new(Full::new(Bytes::from(bytes)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}
