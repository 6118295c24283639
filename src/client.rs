//! The Kubernetes client khai runs with, and API errors in the API server's own words.
//!
//! kube's error type prints a failed request as `ApiError: <message> (Status { ... })`, a Rust
//! debug dump that ends up in Events, conditions and logs. [`ApiError`] keeps what the server
//! said (message, reason, code) and prints only that; every module that reports a failed request
//! to a person goes through it.
//!
//! Every request goes through [`rate_limit`]: a client-side token bucket (QPS and burst, as
//! controller-runtime's), counted in khai's metrics.

pub(crate) mod rate_limit;
pub(crate) mod write;

pub(crate) use rate_limit::{Bucket, Limits};
use std::sync::Arc;

/// The user agent prefix of every request khai sends, so audit logs and the API server's
/// metrics say which requests came from khai.
pub(crate) const USER_AGENT: &str = concat!("khai/", env!("CARGO_PKG_VERSION"));

/// The user agent of this process: [`USER_AGENT`] and this replica's identity (`POD_NAME`, or
/// host and pid, as its leader election identity), e.g. `khai/0.1.0 (cache-khai-7d9f-x2x)`, so
/// an audit log tells replicas apart.
pub(crate) fn user_agent() -> String {
    format!("{USER_AGENT} ({})", identity())
}

/// This replica's identity: `POD_NAME` when set (the downward API), else hostname and pid.
pub(crate) fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "khai".into());
    format!("{host}_{}", std::process::id())
}

/// A client for the cluster `KUBECONFIG` (or the Pod's service account) points at, sending
/// [`user_agent`], its requests limited by the returned bucket (whose limits may change later).
pub(crate) async fn connect(limits: Limits) -> anyhow::Result<(kube::Client, Arc<Bucket>)> {
    use anyhow::Context;
    let mut config = kube::Config::infer()
        .await
        .context("failed to load the cluster credentials (set KUBECONFIG or run in a pod)")?;
    let agent = http::HeaderValue::from_str(&user_agent())
        .unwrap_or_else(|_| http::HeaderValue::from_static(USER_AGENT));
    config.headers.push((http::header::USER_AGENT, agent));
    // kube retries 429, 503 and 504 after the server's Retry-After when it sends one. A starting
    // API server answers 503 "Retry-After: 10" for custom resources until its CRD handlers are
    // up, so every watch of a custom resource slept 10 s and resumed ~9 s after the server was
    // ready. khai retries those answers itself, 3 times after 0.5, 1 and 2 s (kube's
    // `RetryPolicy::default()`, which does not follow Retry-After), each retry drawing on the
    // rate limit like any request; past that the watch backoff or the object's backoff applies.
    config.default_retry = false;
    let bucket = Bucket::new(limits);
    // The limiter waits inside each request's future and calls a clone of the stack below it,
    // so that stack is a buffer (kube's own `Client` buffers the same way in front of it).
    let client = kube::client::ClientBuilder::try_from(config)
        .context("failed to build the Kubernetes client")?
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&rate_limit::RateLimitLayer::new(bucket.clone()))
        .with_layer(&tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::default(),
        ))
        .build();
    Ok((client, bucket))
}

/// A failed request, as a person should read it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API server answered with an error status.
    #[error("{message} ({reason}, {code})")]
    Status {
        code: u16,
        /// `NotFound`, `Conflict`, `Forbidden`, `Invalid`...
        reason: String,
        message: String,
    },
    /// The request did not get an answer from the API server (connection, TLS, decoding).
    #[error(transparent)]
    Request(kube::Error),
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => ApiError::Status {
                code: s.code,
                reason: if s.reason.is_empty() {
                    "Unknown".into()
                } else {
                    s.reason.clone()
                },
                message: if s.message.is_empty() {
                    format!("the API server answered {}", s.code)
                } else {
                    s.message.clone()
                },
            },
            other => ApiError::Request(other),
        }
    }
}

impl ApiError {
    /// The HTTP status code the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            ApiError::Request(_) => None,
        }
    }
}

/// A watch failure in the API server's words (kube-runtime's message embeds a debug dump).
pub(crate) fn watch_error(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error as W;
    let api = |e: &kube::Error| match e {
        kube::Error::Api(s) => ApiError::from(kube::Error::Api(s.clone())).to_string(),
        other => other.to_string(),
    };
    match e {
        W::InitialListFailed(e) => format!("failed to list: {}", api(e)),
        W::WatchStartFailed(e) => format!("failed to start watching: {}", api(e)),
        W::WatchFailed(e) => format!("watch failed: {}", api(e)),
        W::WatchError(s) => format!(
            "the API server ended the watch: {}",
            api(&kube::Error::Api(s.clone()))
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_error_reads_as_the_server_worded_it() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "configmaps \"x\" is forbidden: User \"bob\" cannot patch resource \"configmaps\"",
            "metadata": {},
        }))
        .unwrap();
        let e = ApiError::from(kube::Error::Api(Box::new(status)));
        assert_eq!(
            e.to_string(),
            "configmaps \"x\" is forbidden: User \"bob\" cannot patch resource \"configmaps\" (Forbidden, 403)"
        );
        assert_eq!(e.code(), Some(403));
    }
}
