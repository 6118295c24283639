//! One hop of a request to one checked target, no redirects: resolve once, check every address,
//! connect to a checked one, TLS for `https`, HTTP/1.1 through hyper, and the body read up to
//! its cap.

use super::Client;
use super::tls::server_name;
use crate::effects::http::policy::Target;
use crate::effects::http::{HttpError, HttpResponse, Reason};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::net::{IpAddr, SocketAddr};

impl Client {
    /// One request to one checked target, no redirects.
    pub(super) async fn once(
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

#[cfg(test)]
mod tests {
    use super::*;

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
