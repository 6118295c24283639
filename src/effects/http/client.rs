//! Sends one script's request: resolve once, check every address, connect to a checked one,
//! TLS for `https`, HTTP/1.1 through hyper, redirects re-checked hop by hop, the body read up to
//! its cap, all within one timeout.
//!
//! TLS trusts the system's roots (`rustls-native-certs`: the CA bundle of khai's image, which
//! the cluster's admin controls, as kube's own client does) plus `[operator.http] ca_file`.

use super::policy::{Policy, Target};
use super::{HttpError, HttpRequest, HttpResponse, Reason};
use crate::config::http::HttpSettings;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the client of `[operator.http]` could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("[operator.http] ca_file {}: failed to read: {source}", path.display())]
    ReadCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("[operator.http] ca_file {}: no PEM certificate in it", path.display())]
    NoCa { path: PathBuf },
    #[error("[operator.http] ca_file {}: failed to add certificate: {source}", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("failed to set up TLS for scripts' HTTP requests: {0}")]
    Tls(#[source] rustls::Error),
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
                        std::fs::read_to_string(path)
                    } else {
                        read(path)
                    };
                    let pem = pem.map_err(|source| Error::ReadCa {
                        path: path.clone(),
                        source,
                    })?;
                    Some((path.clone(), pem))
                }
                None => None,
            };
            Some(Arc::new(tls_config(ca)?))
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

    /// One request to one checked target, no redirects.
    async fn once(
        &self,
        target: &Target,
        url: &http::Uri,
        method: &hyper::Method,
        headers: &[(String, String)],
        body: Option<Vec<u8>>,
    ) -> Result<HttpResponse, HttpError> {
        let tcp = self.connect(target).await?;
        let mut request = hyper::Request::builder()
            .method(method.clone())
            .uri(url.path_and_query().map_or("/", |p| p.as_str()))
            .header(hyper::header::HOST, host_header(target));
        for (k, v) in headers {
            if k.eq_ignore_ascii_case("host") {
                return Err(HttpError::new(
                    Reason::InvalidRequest,
                    "the Host header is set from the URL",
                ));
            }
            request = request.header(k.as_str(), v.as_str());
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| {
                // The error names a header, never its value.
                HttpError::new(
                    Reason::InvalidRequest,
                    format!("cannot send the request: {e}"),
                )
            })?;
        let (response, _conn) = match (&self.tls, target.https) {
            (Some(tls), true) => {
                let name = server_name(&target.host)?;
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| {
                        HttpError::new(Reason::Tls, format!("TLS with {}: {e}", target.host))
                    })?;
                exchange(stream, request).await?
            }
            (None, true) => {
                return Err(HttpError::new(Reason::Tls, "TLS is not set up"));
            }
            (_, false) => exchange(tcp, request).await?,
        };
        self.read(response).await
    }

    /// Resolves the target once, checks every address, and connects to the first checked one
    /// that answers.
    async fn connect(&self, target: &Target) -> Result<tokio::net::TcpStream, HttpError> {
        let pinned: Vec<SocketAddr> = self
            .hosts
            .iter()
            .filter(|(n, _)| *n == target.host)
            .map(|(_, ip)| SocketAddr::new(*ip, target.port))
            .collect();
        let addrs: Vec<SocketAddr> = match target.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, target.port)],
            Err(_) if !pinned.is_empty() => pinned,
            Err(_) => tokio::net::lookup_host((target.host.as_str(), target.port))
                .await
                .map_err(|e| {
                    HttpError::new(Reason::Dns, format!("cannot resolve {}: {e}", target.host))
                })?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(HttpError::new(
                Reason::Dns,
                format!("{} resolves to no address", target.host),
            ));
        }
        let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
        self.policy.addresses(target, &ips)?;
        let mut last = None;
        for addr in addrs {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(HttpError::new(
            Reason::Connect,
            format!(
                "cannot connect to {}:{}: {}",
                target.host,
                target.port,
                last.map(|e| e.to_string()).unwrap_or_default()
            ),
        ))
    }

    /// Reads a response, its body up to the cap.
    async fn read(
        &self,
        response: hyper::Response<hyper::body::Incoming>,
    ) -> Result<HttpResponse, HttpError> {
        let (parts, mut incoming) = response.into_parts();
        let too_large = || {
            HttpError::new(
                Reason::TooLarge,
                format!(
                    "the response body is longer than max_response_bytes ({})",
                    self.max_response_bytes
                ),
            )
        };
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_response_bytes) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(frame) = incoming.frame().await {
            let frame = frame.map_err(|e| {
                HttpError::new(Reason::Protocol, format!("reading the response body: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                if body.len() as u64 + data.len() as u64 > self.max_response_bytes {
                    return Err(too_large());
                }
                body.extend_from_slice(&data);
            }
        }
        let headers = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        Ok(HttpResponse {
            status: parts.status.as_u16(),
            headers,
            body,
        })
    }
}

/// Sends one request over `io` with HTTP/1.1. The connection is driven by its own task; the
/// returned guard ends it, so the caller holds it until the body is read (a timeout that drops
/// the caller's future ends the connection too).
async fn exchange<T>(
    io: T,
    request: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::Response<hyper::body::Incoming>, AbortOnDrop), HttpError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let protocol = |e: hyper::Error| HttpError::new(Reason::Protocol, e.to_string());
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(protocol)?;
    let conn = AbortOnDrop(tokio::spawn(conn));
    let response = sender.send_request(request).await.map_err(protocol)?;
    Ok((response, conn))
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn tls_config(ca_file: Option<(PathBuf, String)>) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped, as kube's client does; `ca_file` may be all
    // there is.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some((path, pem)) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .filter_map(Result::ok)
            .collect();
        if certs.is_empty() {
            return Err(Error::NoCa { path });
        }
        for c in certs {
            roots.add(c).map_err(|source| Error::BadCa {
                path: path.clone(),
                source,
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| HttpError::new(Reason::Tls, format!("{host:?} as a TLS name: {e}")))
}

fn host_header(t: &Target) -> String {
    let host = match t.host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => t.host.clone(),
    };
    let default = if t.https { 443 } else { 80 };
    if t.port == default {
        host
    } else {
        format!("{host}:{}", t.port)
    }
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// `location` read against `base`: absolute, scheme-relative, absolute-path or relative-path.
fn join(base: &http::Uri, location: &str) -> Result<http::Uri, HttpError> {
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    let absolute = if location.contains("://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    };
    Policy::url(&absolute)
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
        let (pair, ca) = crate::webhook::tls::self_signed(&["127.0.0.1".into()]).unwrap();
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

    #[test]
    fn redirect_locations_are_read_against_the_current_url() {
        let base: http::Uri = "http://a.example.com:8080/v1/buckets?x=1".parse().unwrap();
        let j = |l: &str| join(&base, l).unwrap().to_string();
        assert_eq!(
            join(&base, "file:///etc/passwd").unwrap_err().reason,
            Reason::NotAllowed
        );
        assert_eq!(j("https://b.example.com/x"), "https://b.example.com/x");
        assert_eq!(j("//c.example.com/y"), "http://c.example.com/y");
        assert_eq!(j("/z"), "http://a.example.com:8080/z");
        assert_eq!(j("other"), "http://a.example.com:8080/v1/other");
    }

    #[test]
    fn the_host_header_carries_a_port_only_when_it_is_not_the_default() {
        let t = |host: &str, port, https| Target {
            https,
            host: host.into(),
            port,
            entry: String::new(),
        };
        assert_eq!(host_header(&t("a.com", 443, true)), "a.com");
        assert_eq!(host_header(&t("a.com", 443, false)), "a.com:443");
        assert_eq!(host_header(&t("::1", 80, false)), "[::1]");
    }
}
