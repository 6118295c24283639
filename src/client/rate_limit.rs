//! Client-side rate limiting of every request khai sends: a token bucket of `qps` tokens a
//! second holding at most `burst`, as client-go's. Off by default, as in controller-runtime
//! (whose `GetConfig` sets QPS to -1) and kube-rs: the API server's Priority and Fairness (on
//! by default since v1.20) is what protects a healthy server, and a fixed client-side rate only
//! slows a burst of work (1,000 new objects: 99 s at 20 a second against 4–8 s without).
//!
//! A write takes a token; when none is left it reserves the next one and waits for it, so writes
//! leave in the order they asked (golang.org/x/time/rate's reservations, which client-go's
//! limiter uses). Waiting happens inside the request's own future, never in the service's
//! `poll_ready`, so a request held back holds up nothing else.
//!
//! Reads (GET: the informers' lists and watches, discovery) take a token too, so they count
//! against the rate and push later writes back, but they never wait: a watch restarted behind a
//! backlog of a thousand queued writes would leave its cache stale for as long, and every
//! reconcile meanwhile would act on old objects and write their intermediate states (seen in
//! the chaos suite at 1,000 objects: an object updated twice during an API server restart was
//! written for both versions). khai's reads are bounded without the limiter: informers list and
//! watch only when they start or their watch fails (at most once per backoff step), and scripts
//! read from the caches. Lease requests are not limited at all (controller-runtime gives leader
//! election a client and limiter of its own for the same reason: a leader whose renewal queues
//! behind a thousand writes loses its lease).
//!
//! Every request is counted in `rest_client_requests_total{code,method}` and the time spent
//! waiting for a token in `rest_client_rate_limiter_duration_seconds{verb}`.
//!
//! The bucket is hand-written (30 lines) rather than taken from `governor`: governor's async
//! wait runs on `futures-timer`'s own timer thread, outside tokio's clock, so it could not be
//! tested under tokio's paused time, and it would add a dozen crates for one subtraction.

use futures::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// How fast khai may send requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    /// Requests a second on average; 0 turns the limit off.
    pub qps: f64,
    /// Requests that may leave at once after a quiet spell.
    pub burst: u32,
}

impl Default for Limits {
    /// No limit; `burst` applies once a `qps` is set.
    fn default() -> Self {
        Self {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

use crate::config::model::{DEFAULT_BURST, DEFAULT_QPS};

impl From<&crate::config::model::OperatorSettings> for Limits {
    /// The client-side rate limit a config asks for.
    fn from(s: &crate::config::model::OperatorSettings) -> Self {
        Self {
            qps: s.qps,
            burst: s.burst,
        }
    }
}

/// The token bucket every request of one client draws from; its limits can be changed while
/// requests flow (the config, read after connecting, sets them).
#[derive(Debug)]
pub(crate) struct Bucket {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limits: Limits,
    /// Tokens left at `at`; negative when later requests have reserved tokens not yet there.
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub(crate) fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                limits,
                tokens: f64::from(limits.burst),
                at: Instant::now(),
            }),
        })
    }

    /// Changes the limits from now on.
    pub(crate) fn set(&self, limits: Limits) {
        let mut s = crate::sync::lock(&self.state);
        let now = Instant::now();
        s.refill(now);
        s.limits = limits;
        s.tokens = s.tokens.min(f64::from(limits.burst));
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> Limits {
        crate::sync::lock(&self.state).limits
    }

    /// Takes a token, reserving the next one when none is left; returns how long the caller
    /// must wait before sending.
    pub(crate) fn reserve(&self) -> Duration {
        let mut s = crate::sync::lock(&self.state);
        if s.limits.qps <= 0.0 {
            return Duration::ZERO;
        }
        s.refill(Instant::now());
        s.tokens -= 1.0;
        if s.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.tokens / s.limits.qps)
        }
    }
}

impl Bucket {
    /// Takes a token without waiting for it, even when none is left: later reservations wait
    /// the longer.
    pub(crate) fn charge(&self) {
        let mut s = crate::sync::lock(&self.state);
        if s.limits.qps > 0.0 {
            s.refill(Instant::now());
            s.tokens -= 1.0;
        }
    }
}

impl State {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limits.qps).min(f64::from(self.limits.burst));
        self.at = now;
    }
}

/// A tower layer that limits and counts the requests of the service it wraps.
#[derive(Clone)]
pub(crate) struct RateLimitLayer {
    bucket: Arc<Bucket>,
}

impl RateLimitLayer {
    pub(crate) fn new(bucket: Arc<Bucket>) -> Self {
        Self { bucket }
    }
}

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
        }
    }
}

/// See [`RateLimitLayer`]. The inner service must be cheap to clone (a tower `Buffer`): each
/// request calls its own clone once its token is there.
#[derive(Clone)]
pub(crate) struct RateLimit<S> {
    inner: S,
    bucket: Arc<Bucket>,
}

/// Whether `path` is a Lease request, which is never held back (see the module doc).
fn exempt(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for RateLimit<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the inner service's business, checked when the request is sent.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        use tower::ServiceExt;
        let wait = if exempt(req.uri().path()) {
            Duration::ZERO
        } else if req.method() == http::Method::GET {
            self.bucket.charge();
            Duration::ZERO
        } else {
            self.bucket.reserve()
        };
        let method = req.method().as_str().to_string();
        let verb = verb(&req);
        let inner = self.inner.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            crate::metrics::rate_limited(verb, wait);
            let res = inner.oneshot(req).await;
            let code = match &res {
                Ok(r) => r.status().as_u16().to_string(),
                // client-go's label for a request that got no answer.
                Err(_) => "<error>".to_string(),
            };
            crate::metrics::request_sent(&code, &method);
            res
        })
    }
}

/// The Kubernetes verb of a request, as client-go labels its limiter metric.
fn verb<B>(req: &http::Request<B>) -> &'static str {
    let query = req.uri().query().unwrap_or_default();
    match *req.method() {
        http::Method::GET if query.split('&').any(|kv| kv == "watch=true") => "WATCH",
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn limits(qps: f64, burst: u32) -> Limits {
        Limits { qps, burst }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_lets_a_burst_through_then_paces_requests_at_qps() {
        let b = Bucket::new(limits(20.0, 30));
        for i in 0..30 {
            assert_eq!(b.reserve(), Duration::ZERO, "request {i} of the burst");
        }
        // The next requests reserve tokens 50 ms apart, in the order they asked.
        assert_eq!(b.reserve(), Duration::from_millis(50));
        assert_eq!(b.reserve(), Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(b.reserve(), Duration::from_millis(50));
        // A quiet second refills 20 tokens, never more than the burst.
        tokio::time::advance(Duration::from_secs(60)).await;
        let free = (0..40).take_while(|_| b.reserve().is_zero()).count();
        assert_eq!(free, 30);
    }

    #[tokio::test(start_paused = true)]
    async fn qps_zero_turns_the_limit_off_and_limits_change_on_the_fly() {
        let b = Bucket::new(limits(0.0, 1));
        assert!((0..1000).all(|_| b.reserve().is_zero()));
        b.set(limits(2.0, 1));
        assert_eq!(b.reserve(), Duration::ZERO);
        assert_eq!(b.reserve(), Duration::from_millis(500));
        assert_eq!(b.limits(), limits(2.0, 1));
    }

    /// Counts requests and answers 200 at once.
    #[derive(Clone, Default)]
    struct Counting(Arc<std::sync::atomic::AtomicUsize>);

    impl tower::Service<http::Request<()>> for Counting {
        type Response = http::Response<()>;
        type Error = std::convert::Infallible;
        type Future = futures::future::Ready<Result<Self::Response, Self::Error>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            futures::future::ready(Ok(http::Response::new(())))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_back_request_holds_up_no_lease_renewal() {
        use tower::{Layer, ServiceExt};
        let sent = Counting::default();
        let svc = RateLimitLayer::new(Bucket::new(limits(1.0, 1))).layer(sent.clone());
        let req = |path: &str| http::Request::patch(path).body(()).unwrap();
        svc.clone()
            .oneshot(req("/api/v1/namespaces/a/configmaps/a"))
            .await
            .unwrap();
        // The bucket is empty: this one waits a second.
        let held = tokio::spawn(
            svc.clone()
                .oneshot(req("/api/v1/namespaces/a/configmaps/b")),
        );
        tokio::task::yield_now().await;
        assert_eq!(sent.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A renewal goes through at once, ahead of it.
        svc.clone()
            .oneshot(
                http::Request::put("/apis/coordination.k8s.io/v1/namespaces/a/leases/khai-x")
                    .body(())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(sent.0.load(std::sync::atomic::Ordering::SeqCst), 2);
        held.await.unwrap().unwrap();
        assert_eq!(sent.0.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_goes_at_once_and_pushes_the_next_write_back() {
        use tower::{Layer, ServiceExt};
        let sent = Counting::default();
        let bucket = Bucket::new(limits(1.0, 1));
        let svc = RateLimitLayer::new(bucket.clone()).layer(sent.clone());
        let get = |path: &str| http::Request::get(path).body(()).unwrap();
        let patch = |path: &str| http::Request::patch(path).body(()).unwrap();
        svc.clone()
            .oneshot(patch("/api/v1/namespaces/a/configmaps/x"))
            .await
            .unwrap();
        // The bucket is empty; a watch goes through at once all the same...
        svc.clone()
            .oneshot(get("/api/v1/namespaces/a/configmaps?watch=true"))
            .await
            .unwrap();
        assert_eq!(sent.0.load(std::sync::atomic::Ordering::SeqCst), 2);
        // ...and the next write waits for the token it took as well as its own.
        assert_eq!(bucket.reserve(), Duration::from_secs(2));
    }

    #[test]
    fn verbs_are_named_as_client_go_names_them() {
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        assert_eq!(
            verb(&get("/api/v1/pods?watch=true&resourceVersion=1")),
            "WATCH"
        );
        assert_eq!(verb(&get("/api/v1/pods?limit=500")), "GET");
        assert_eq!(verb(&http::Request::patch("/x").body(()).unwrap()), "PATCH");
    }
}
