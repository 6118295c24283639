//! The `http` module of scripts: requests to the hosts `[operator.http] allow` lists, and only
//! those, each bounded in time and size.
//!
//! - [`policy`] decides what may be reached (no I/O);
//! - [`client`] sends one [`HttpRequest`] and reads its [`HttpResponse`]: resolves once, checks
//!   every address, connects to a checked one, TLS with the system roots plus `ca_file`, follows
//!   redirects re-checking each, caps the body;
//! - [`script`] is the Rhai side: maps in, maps out, failures thrown as maps scripts can catch.
//!
//! Requests and responses are plain values and [`perform`] is the one function between a
//! script and the network, so `khai test` can answer requests from a case instead.

pub(crate) mod client;
pub(crate) mod policy;
pub(crate) mod script;

pub use client::Client;

use std::time::Duration;

/// One request, as a script asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Uppercase: `GET`, `POST`, ...
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    /// The request's own timeout, bounded by the call's time left; `None`: `[operator.http]
    /// timeout`.
    pub timeout: Option<Duration>,
}

/// The answer: any status, 2xx or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    /// Lowercase names, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a request got no answer: the `reason` scripts read from a caught error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The URL's scheme or host is not allowed by `[operator.http]`.
    NotAllowed,
    /// The host resolved to an address that is refused unless listed (loopback, metadata...).
    AddressRefused,
    /// The URL cannot be read.
    InvalidUrl,
    /// The method or a header cannot be sent.
    InvalidRequest,
    /// The host name did not resolve.
    Dns,
    /// No connection could be made.
    Connect,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// No complete answer within the timeout.
    Timeout,
    /// The body is longer than `max_response_bytes`.
    TooLarge,
    /// More redirects than `max_redirects`.
    TooManyRedirects,
    /// The server's answer is not HTTP/1.1 as hyper reads it, or the connection dropped.
    Protocol,
}

impl Reason {
    /// As scripts and metrics see it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllowed => "not_allowed",
            Reason::AddressRefused => "address_refused",
            Reason::InvalidUrl => "invalid_url",
            Reason::InvalidRequest => "invalid_request",
            Reason::Dns => "dns",
            Reason::Connect => "connect",
            Reason::Tls => "tls",
            Reason::Timeout => "timeout",
            Reason::TooLarge => "too_large",
            Reason::TooManyRedirects => "too_many_redirects",
            Reason::Protocol => "protocol",
        }
    }
}

/// A request that got no answer; the message never holds header or body values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", reason.as_str())]
pub struct HttpError {
    pub reason: Reason,
    pub message: String,
}

impl HttpError {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        HttpError {
            reason,
            message: message.into(),
        }
    }
}

impl HttpRequest {
    /// The request as JSON, what `khai test` stubs match on: `call` (`http::request`, for the
    /// shorthands too), `method`, `url`, `headers` (lowercase names), `body` as text, and
    /// `json`, the body parsed, when it is JSON.
    pub(crate) fn describe(&self) -> serde_json::Value {
        let mut headers = serde_json::Map::new();
        for (k, v) in &self.headers {
            headers.insert(k.to_ascii_lowercase(), v.clone().into());
        }
        let mut d = serde_json::json!({
            "call": "http::request",
            "method": self.method,
            "url": self.url,
            "headers": headers,
        });
        if let Some(body) = &self.body {
            d["body"] = String::from_utf8_lossy(body).into_owned().into();
            if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
                d["json"] = json;
            }
        }
        d
    }
}

/// Sends `req` for the call running on this thread, through its budget and, in `khai test`,
/// the case's stubs (see [`crate::effects::answer`]): the one place a script's request leaves
/// the process. The outer error is a refusal of the call itself (no effects here, budget used
/// up, a call the case does not expect); the inner result is the answer as JSON
/// (`{status, headers, body, json}`, see [`script::response_json`]) or the failure thrown
/// (`{reason, message, method, host}`, see [`script::failure_json`]).
pub(crate) fn perform(
    req: &HttpRequest,
) -> Result<Result<serde_json::Value, serde_json::Value>, Box<rhai::EvalAltResult>> {
    crate::effects::answer("http::request", req.describe(), |fx, left| {
        let client = fx.http.clone();
        fx.block_on(left, async move { client.send(req, left).await })
            .unwrap_or_else(|_| {
                Err(HttpError::new(
                    Reason::Timeout,
                    "no answer before the call's time budget ran out",
                ))
            })
            .map(|res| script::response_json(&res))
            .map_err(|e| script::failure_json(req, &e))
    })
}
