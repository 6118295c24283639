//! The playground's routes: `GET /api/playground/<controller>` (the controller's script as the
//! running config has it) and `POST /api/playground` (an edited script run against a live object
//! from the caches: its plan, the diff from the cluster, the API server's dry-run verdicts).
//!
//! Nothing is written: the daemon's [`Playground`] runs the script the way `khai diff` does
//! (`crate::diff::object_with`), with read-only effects and only dry runs sent. The console
//! itself cannot reach the controllers (they are a layer above it), so the daemon hands it one
//! [`Playground`] per config version ([`super::playground`]).
//!
//! A POST is the console's one non-`GET` request, so it is guarded against cross-site use: its
//! body must be JSON (`Content-Type: application/json`, which a cross-site form cannot send
//! without a preflight the console never answers), an `Origin` header, when sent, must be the
//! console's own, and the body is at most [`MAX_BODY`] bytes. A run takes at most [`TIMEOUT`].

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap};
use hyper::{Request, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// The largest playground request body: a script of 256 KiB and its JSON framing.
pub(crate) const MAX_BODY: usize = 256 << 10;
/// How long one playground run may take, dry runs included.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// An edited script to run against one object of one controller.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Play {
    pub(crate) controller: String,
    /// Absent (or `-`) for a cluster-scoped object.
    #[serde(default)]
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
    pub(crate) script: String,
}

/// A controller's script as the running config has it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Source {
    /// Its path, relative to the config file.
    pub(crate) file: String,
    /// The key it has in a ConfigMap holding the config.
    pub(crate) key: String,
    pub(crate) text: String,
}

/// Why a playground request gets no run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum PlayError {
    #[error("no controller named {0:?} in the running config")]
    NoController(String),
    #[error("{0} is not in the controller's cache")]
    NoObject(String),
    #[error("the edited script does not compile: {cause}")]
    Compile { cause: String },
    #[error("the controller's script cannot be read: {cause}")]
    Source { cause: String },
    #[error("the run took more than {}s and was stopped", TIMEOUT.as_secs())]
    Timeout,
    #[error("the playground starts with the controllers: khai is not running them yet")]
    NotRunning,
    #[error("the request body is not a playground request: {cause}")]
    Body { cause: String },
    #[error("a playground request is JSON: send it with Content-Type: application/json")]
    ContentType,
    #[error("the request comes from another site ({0}); the playground only answers its own page")]
    Origin(String),
}

impl PlayError {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            PlayError::NoController(_) | PlayError::NoObject(_) => StatusCode::NOT_FOUND,
            PlayError::Compile { .. } | PlayError::Body { .. } => StatusCode::BAD_REQUEST,
            PlayError::Source { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            PlayError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            PlayError::NotRunning => StatusCode::SERVICE_UNAVAILABLE,
            PlayError::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            PlayError::Origin(_) => StatusCode::FORBIDDEN,
        }
    }
}

/// What runs playground requests against the running controllers; the daemon provides one.
pub(crate) trait Playground: Send + Sync {
    /// The script of `controller`, to start editing from.
    fn source(&self, controller: &str) -> Result<Source, PlayError>;
    /// Runs `play`: the object's plan, diff and dry-run verdicts, as JSON (docs/console.md).
    fn run(&self, play: Play) -> BoxFuture<'static, Result<Value, PlayError>>;
}

/// Whether a POST may be answered: a JSON body, from the console's own page when it says where
/// it comes from.
fn guard(headers: &HeaderMap) -> Result<(), PlayError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(PlayError::ContentType);
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or_default();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let own = ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host));
    match own && !host.is_empty() {
        true => Ok(()),
        false => Err(PlayError::Origin(origin.to_string())),
    }
}

/// `POST /api/playground`.
pub(super) async fn post(
    playground: Option<std::sync::Arc<dyn Playground>>,
    req: Request<Incoming>,
) -> Result<Value, PlayError> {
    guard(req.headers())?;
    let body = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| PlayError::Body {
            cause: format!("{e} (at most {MAX_BODY} bytes)"),
        })?
        .to_bytes();
    let mut play: Play = serde_json::from_slice(&body).map_err(|e| PlayError::Body {
        cause: e.to_string(),
    })?;
    if play.namespace.as_deref() == Some("-") {
        play.namespace = None;
    }
    let playground = playground.ok_or(PlayError::NotRunning)?;
    tokio::time::timeout(TIMEOUT, playground.run(play))
        .await
        .map_err(|_| PlayError::Timeout)?
}

/// `GET /api/playground/<controller>`.
pub(super) fn source(
    playground: Option<std::sync::Arc<dyn Playground>>,
    controller: &str,
) -> Result<Value, PlayError> {
    let source = playground
        .ok_or(PlayError::NotRunning)?
        .source(controller)?;
    serde_json::to_value(source).map_err(|e| PlayError::Source {
        cause: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_post_must_be_json_and_from_the_consoles_own_origin() {
        let json = (header::CONTENT_TYPE, "application/json; charset=utf-8");
        let host = (header::HOST, "127.0.0.1:8081");
        assert_eq!(guard(&headers(&[json.clone(), host.clone()])), Ok(()));
        assert_eq!(
            guard(&headers(&[
                json.clone(),
                host.clone(),
                (header::ORIGIN, "http://127.0.0.1:8081")
            ])),
            Ok(())
        );
        assert_eq!(
            guard(&headers(&[
                json,
                host.clone(),
                (header::ORIGIN, "http://evil.example")
            ])),
            Err(PlayError::Origin("http://evil.example".into()))
        );
        assert_eq!(
            guard(&headers(&[
                (header::CONTENT_TYPE, "text/plain"),
                host,
                (header::ORIGIN, "http://127.0.0.1:8081")
            ])),
            Err(PlayError::ContentType)
        );
        assert_eq!(PlayError::ContentType.status(), 415);
    }
}
