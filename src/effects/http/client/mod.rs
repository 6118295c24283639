//! Sends one script's request: resolve once, check every address, connect to a checked one,
//! TLS for `https`, HTTP/1.1 through hyper, redirects re-checked hop by hop, the body read up to
//! its cap, all within one timeout.
//!
//! This module holds the client and the redirect loop; [`hop`] sends one request to one
//! checked target, [`redirect`] reads where a redirect leads, [`tls`] sets up what `https`
//! trusts.

mod hop;
mod redirect;
mod tls;

use super::policy::Policy;
use super::{HttpError, HttpRequest, HttpResponse, Reason};
use crate::config::http::HttpSettings;
use redirect::{is_redirect, join};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the client of `[operator.http]` could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("[operator.http] ca_file {}: failed to read: {cause}", path.display())]
    ReadCa {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("[operator.http] ca_file {}: no PEM certificate in it", path.display())]
    NoCa { path: PathBuf },
    #[error("[operator.http] ca_file {}: failed to add certificate: {cause}", path.display())]
    BadCa { path: PathBuf, cause: rustls::Error },
    #[error("failed to set up TLS for scripts' HTTP requests: {0}")]
    Tls(rustls::Error),
}

/// The client scripts' requests go through: one per operator, built from `[operator.http]`.
pub struct Client {
    policy: Policy,
    /// `None` when nothing is allowed (no TLS set up for nothing).
    tls: Option<Arc<rustls::ClientConfig>>,
    max_response_bytes: u64,
    max_redirects: u32,
    timeout: Duration,
    /// Names answered without DNS ([`Client::resolve_as`]).
    hosts: Vec<(String, IpAddr)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Default for Client {
    /// A client that reaches nothing.
    fn default() -> Self {
        let s = HttpSettings::default();
        Client {
            policy: Policy::default(),
            tls: None,
            max_response_bytes: s.max_response_bytes,
            max_redirects: s.max_redirects,
            timeout: s.timeout.get(),
            hosts: Vec::new(),
        }
    }
}

impl Client {
    /// Builds the client of `settings`; `read` reads `ca_file` as the config's other files are
    /// read (from its directory or its ConfigMap); an absolute `ca_file` is a file on disk.
    pub fn new(
        settings: &HttpSettings,
        read: &dyn Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Self, Error> {
        let tls = if settings.allow.is_empty() {
            None
        } else {
            let ca = match &settings.ca_file {
                Some(path) => {
                    let pem = if path.is_absolute() {
                        crate::config::files::read_file(path)
                    } else {
                        read(path)
                    };
                    let pem = pem.map_err(|cause| Error::ReadCa {
                        path: path.clone(),
                        cause,
                    })?;
                    Some((path.clone(), pem))
                }
                None => None,
            };
            Some(Arc::new(tls::config(ca)?))
        };
        Ok(Client {
            policy: Policy::new(settings.allow.clone()),
            tls,
            max_response_bytes: settings.max_response_bytes,
            max_redirects: settings.max_redirects,
            timeout: settings.timeout.get(),
            hosts: Vec::new(),
        })
    }

    /// Answers `name` with `ip` instead of asking DNS, as `curl --resolve` does: for tests of
    /// what a name resolving to a refused address gets (the address is checked all the same).
    #[must_use]
    pub fn resolve_as(mut self, name: &str, ip: IpAddr) -> Self {
        self.hosts.push((name.to_ascii_lowercase(), ip));
        self
    }

    /// Sends `req`, following redirects, within its timeout and `time_left` of the call.
    pub async fn send(
        &self,
        req: &HttpRequest,
        time_left: Duration,
    ) -> Result<HttpResponse, HttpError> {
        let timeout = req.timeout.unwrap_or(self.timeout).min(time_left);
        let started = Instant::now();
        let mut host_label = None;
        let result = match tokio::time::timeout(timeout, self.follow(req, &mut host_label)).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::new(
                Reason::Timeout,
                format!("no answer within {}", describe(timeout)),
            )),
        };
        let code = match &result {
            Ok(r) => r.status.to_string(),
            Err(e) => e.reason.as_str().to_string(),
        };
        let host = host_label.as_deref().unwrap_or("<refused>");
        crate::metrics::http_request(host, &code, started.elapsed());
        tracing::debug!(method = %req.method, host, code, "script HTTP request");
        result
    }

    /// Sends `req` and each redirect it leads to; `entry` is set to the allow entry of the
    /// first URL that passed the policy.
    async fn follow(
        &self,
        req: &HttpRequest,
        entry: &mut Option<String>,
    ) -> Result<HttpResponse, HttpError> {
        let method = hyper::Method::from_bytes(req.method.as_bytes()).map_err(|_| {
            HttpError::new(
                Reason::InvalidRequest,
                format!("{:?} is not an HTTP method", req.method),
            )
        })?;
        let mut method = method;
        let mut body = req.body.clone();
        let mut headers = req.headers.clone();
        let mut url = Policy::url(&req.url)?;
        let mut hops = 0;
        loop {
            let target = self.policy.target(&url)?;
            entry.get_or_insert_with(|| target.entry.clone());
            let res = self
                .once(&target, &url, &method, &headers, body.clone())
                .await?;
            let location = res
                .headers
                .iter()
                .find(|(k, _)| k == "location")
                .map(|(_, v)| v.clone());
            let (Some(location), true) = (location, is_redirect(res.status)) else {
                return Ok(res);
            };
            hops += 1;
            if hops > self.max_redirects {
                return Err(HttpError::new(
                    Reason::TooManyRedirects,
                    format!("more than {} redirects", self.max_redirects),
                ));
            }
            let next = join(&url, &location)?;
            if next.host() != url.host() {
                // Credentials meant for one host are not handed to another.
                headers.retain(|(k, _)| {
                    !k.eq_ignore_ascii_case("authorization") && !k.eq_ignore_ascii_case("cookie")
                });
            }
            if res.status == 303 || (matches!(res.status, 301 | 302) && method == "POST") {
                method = hyper::Method::GET;
                body = None;
                headers.retain(|(k, _)| {
                    !k.eq_ignore_ascii_case("content-type")
                        && !k.eq_ignore_ascii_case("content-length")
                });
            }
            url = next;
        }
    }
}

fn describe(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback server that reads a request head and writes `answer` (nothing when `None`,
    /// holding the connection open), over TLS when `tls` is given.
    async fn server(
        answer: Option<&'static [u8]>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let mut io: Box<dyn Io> = match tls {
                        Some(c) => Box::new(
                            tokio_rustls::TlsAcceptor::from(c)
                                .accept(tcp)
                                .await
                                .unwrap(),
                        ),
                        None => Box::new(tcp),
                    };
                    let mut buf = vec![0; 4096];
                    let mut head = Vec::new();
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let n = io.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    match answer {
                        Some(a) => io.write_all(a).await.unwrap(),
                        None => std::future::pending::<()>().await,
                    }
                    io.flush().await.unwrap();
                });
            }
        });
        addr
    }

    trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
    impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

    fn client(allow: &str, ca_file: Option<PathBuf>, max: u64) -> Client {
        let settings = HttpSettings {
            allow: vec![allow.parse().unwrap()],
            ca_file,
            max_response_bytes: max,
            ..HttpSettings::default()
        };
        Client::new(&settings, &|p| std::fs::read_to_string(p)).unwrap()
    }

    fn get(url: String) -> HttpRequest {
        HttpRequest {
            method: "GET".into(),
            url,
            headers: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    #[tokio::test]
    async fn a_body_past_the_cap_fails_whether_or_not_its_length_is_declared() {
        let chunked: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n";
        let declared: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n";
        for answer in [chunked, declared] {
            let addr = server(Some(answer), None).await;
            let c = client(&addr.to_string(), None, 10);
            let err = c
                .send(&get(format!("http://{addr}/")), Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(err.reason, Reason::TooLarge, "{err}");
        }
        let addr = server(Some(chunked), None).await;
        let res = client(&addr.to_string(), None, 16)
            .send(&get(format!("http://{addr}/")), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(res.body, b"1234567812345678");
    }

    #[tokio::test]
    async fn a_request_ends_at_the_time_left_of_its_call_when_that_is_shorter() {
        let addr = server(None, None).await;
        let c = client(&addr.to_string(), None, 10);
        let started = Instant::now();
        let err = c
            .send(&get(format!("http://{addr}/")), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "timeout: no answer within 200ms");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn https_trusts_the_ca_file_and_refuses_a_certificate_it_does_not_sign() {
        let (pair, ca) = crate::webhook::ca::self_signed(&["127.0.0.1".into()]).unwrap();
        let key =
            crate::webhook::tls::certified_key(&pair, (Path::new("c"), Path::new("k"))).unwrap();
        let config =
            crate::webhook::tls::server_config(crate::webhook::tls::Resolver::new(key)).unwrap();
        let ok: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let addr = server(Some(ok), Some(Arc::new(config))).await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
        let with_ca = client(&addr.to_string(), Some(dir.path().join("ca.pem")), 10);
        let res = with_ca
            .send(&get(format!("https://{addr}/")), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((res.status, res.body.as_slice()), (200, b"ok".as_slice()));
        let err = client(&addr.to_string(), None, 10)
            .send(&get(format!("https://{addr}/")), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::Tls, "{err}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "not pem").unwrap();
        let settings = HttpSettings {
            allow: vec!["a.com".parse().unwrap()],
            ca_file: Some("ca.pem".into()),
            ..HttpSettings::default()
        };
        let read = |p: &Path| std::fs::read_to_string(dir.path().join(p));
        let err = Client::new(&settings, &read).unwrap_err().to_string();
        assert!(err.starts_with("[operator.http] ca_file "), "{err}");
        assert_eq!(
            err,
            "[operator.http] ca_file ca.pem: no PEM certificate in it"
        );
    }
}
