//! Which URLs and addresses the `http` module may reach: the allow-list of `[operator.http]` and
//! the addresses refused whatever a name resolves to. No I/O: the client resolves, then asks.
//!
//! A request passes two checks. Its URL: the scheme is `http` or `https`, there is no user in
//! it, and its host and port match an `allow` entry. Every address its host resolves to:
//! loopback, link-local, unspecified, broadcast and multicast addresses and the cloud metadata
//! endpoints are refused, even when a listed name resolves to them (DNS an attacker controls
//! must not turn an allowed name into a way in), unless the address itself is listed, or the
//! URL's host is `localhost` and `localhost` is listed. The client connects only to addresses
//! that passed, so a second resolution cannot change the answer (no DNS rebinding).

use super::{HttpError, Reason};
use crate::config::http::{AllowEntry, AllowHost, dns_name};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Names of cloud metadata endpoints: reachable only through an entry naming them exactly,
/// never through a wildcard.
const METADATA_NAMES: [&str; 2] = ["metadata.google.internal", "metadata"];

/// Addresses of cloud metadata endpoints that no other rule covers (169.254.169.254 is
/// link-local already).
const METADATA_ADDRS: [IpAddr; 2] = [
    // AWS IMDS over IPv6.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    // Alibaba Cloud.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// Where a checked URL points: what to resolve and which entry allowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub https: bool,
    /// Lowercase, without brackets or trailing dot.
    pub host: String,
    pub port: u16,
    /// The `allow` entry that matched, as written (the `host` label of metrics).
    pub entry: String,
}

/// The allow-list of one operator.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    entries: Vec<AllowEntry>,
}

impl Policy {
    pub(crate) fn new(entries: Vec<AllowEntry>) -> Self {
        Policy { entries }
    }

    /// Reads a URL as a script or a redirect wrote it; a scheme other than http and https is
    /// refused before the rest is read (`file:///etc/passwd` is no URL to hyper).
    pub(crate) fn url(text: &str) -> Result<http::Uri, HttpError> {
        if let Some((scheme, _)) = text.split_once(':') {
            let is_scheme = !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            let lower = scheme.to_ascii_lowercase();
            if is_scheme && lower != "http" && lower != "https" && text.contains("://") {
                return Err(HttpError::new(
                    Reason::NotAllowed,
                    format!("scheme {lower:?} is not allowed: only http and https"),
                ));
            }
        }
        text.parse()
            .map_err(|e| HttpError::new(Reason::InvalidUrl, format!("cannot read the URL: {e}")))
    }

    /// Checks a URL before anything is resolved.
    pub(crate) fn target(&self, url: &http::Uri) -> Result<Target, HttpError> {
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            Some(other) => {
                return Err(HttpError::new(
                    Reason::NotAllowed,
                    format!("scheme {other:?} is not allowed: only http and https"),
                ));
            }
            None => {
                return Err(HttpError::new(
                    Reason::InvalidUrl,
                    "the URL needs a scheme and a host (\"https://api.example.com/...\")",
                ));
            }
        };
        let Some(authority) = url.authority() else {
            return Err(HttpError::new(Reason::InvalidUrl, "the URL has no host"));
        };
        if authority.as_str().contains('@') {
            return Err(HttpError::new(
                Reason::InvalidUrl,
                "credentials in the URL are not allowed: send them in a header",
            ));
        }
        let raw = authority.host();
        let raw = raw
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(raw);
        let host = match raw.parse::<IpAddr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => dns_name(raw).map_err(|why| {
                HttpError::new(Reason::InvalidUrl, format!("host {raw:?}: {why}"))
            })?,
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let Some(entry) = self.entries.iter().find(|e| matches(e, &host, port)) else {
            return Err(HttpError::new(
                Reason::NotAllowed,
                format!("{host}:{port} is not in [operator.http] allow"),
            ));
        };
        Ok(Target {
            https,
            host,
            port,
            entry: entry.written.clone(),
        })
    }

    /// Checks every address `target`'s host resolved to; all must pass.
    pub(crate) fn addresses(&self, target: &Target, addrs: &[IpAddr]) -> Result<(), HttpError> {
        for addr in addrs {
            let addr = canonical(*addr);
            if !is_special(addr) {
                continue;
            }
            let listed = self.entries.iter().any(|e| {
                e.port.is_none_or(|p| p == target.port)
                    && match &e.host {
                        AllowHost::Ip(ip) => canonical(*ip) == addr,
                        AllowHost::Name(n) => n == "localhost" && target.host == "localhost",
                        AllowHost::Under(_) => false,
                    }
            });
            if !listed {
                return Err(HttpError::new(
                    Reason::AddressRefused,
                    format!(
                        "{} resolves to {addr}, a loopback, link-local or metadata address; \
                         list the address itself in [operator.http] allow to reach it",
                        target.host
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn matches(e: &AllowEntry, host: &str, port: u16) -> bool {
    if e.port.is_some_and(|p| p != port) {
        return false;
    }
    match &e.host {
        AllowHost::Name(n) => n == host,
        AllowHost::Under(domain) => {
            !METADATA_NAMES.contains(&host)
                && host
                    .strip_suffix(domain.as_str())
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.'))
        }
        AllowHost::Ip(ip) => host.parse::<IpAddr>().is_ok_and(|h| canonical(h) == *ip),
    }
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Addresses no listed name may lead to.
fn is_special(ip: IpAddr) -> bool {
    if METADATA_ADDRS.contains(&ip) {
        return true;
    }
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                // 0.0.0.0/8 reaches the local host on Linux.
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> Policy {
        Policy::new(entries.iter().map(|e| e.parse().unwrap()).collect())
    }

    fn target(p: &Policy, url: &str) -> Result<Target, HttpError> {
        p.target(&Policy::url(url)?)
    }

    fn reason(r: Result<impl std::fmt::Debug, HttpError>) -> Reason {
        r.unwrap_err().reason
    }

    #[test]
    fn only_listed_hosts_and_ports_pass() {
        let p = policy(&["api.example.com", "*.svc.cluster.local", "127.0.0.1:8080"]);
        let t = target(&p, "https://API.example.com/v1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.https),
            ("api.example.com", 443, true)
        );
        assert_eq!(t.entry, "api.example.com");
        assert!(target(&p, "http://db.ns.svc.cluster.local:5432/").is_ok());
        assert_eq!(
            reason(target(&p, "http://svc.cluster.local/")),
            Reason::NotAllowed
        );
        assert_eq!(
            reason(target(&p, "http://evilsvc.cluster.local/")),
            Reason::NotAllowed
        );
        assert_eq!(
            reason(target(&p, "http://example.com/")),
            Reason::NotAllowed
        );
        assert!(target(&p, "http://127.0.0.1:8080/").is_ok());
        assert_eq!(
            reason(target(&p, "http://127.0.0.1:8081/")),
            Reason::NotAllowed
        );
        assert_eq!(reason(target(&p, "http://127.0.0.1/")), Reason::NotAllowed);
    }

    #[test]
    fn other_schemes_and_credentials_in_urls_are_refused() {
        let p = policy(&["api.example.com"]);
        assert_eq!(reason(target(&p, "file:///etc/passwd")), Reason::NotAllowed);
        assert_eq!(
            reason(target(&p, "ftp://api.example.com/")),
            Reason::NotAllowed
        );
        assert_eq!(reason(target(&p, "/relative")), Reason::InvalidUrl);
        assert_eq!(
            reason(target(&p, "http://api.example.com@evil.com/")),
            Reason::InvalidUrl
        );
    }

    #[test]
    fn metadata_names_are_never_reached_through_a_wildcard() {
        let p = policy(&["*.google.internal"]);
        assert_eq!(
            reason(target(&p, "http://metadata.google.internal/")),
            Reason::NotAllowed
        );
        assert!(target(&p, "http://other.google.internal/").is_ok());
    }

    #[test]
    fn a_listed_name_resolving_to_loopback_link_local_or_metadata_is_refused() {
        let p = policy(&["api.example.com", "*.svc.cluster.local"]);
        let t = target(&p, "http://api.example.com/").unwrap();
        for bad in [
            "127.0.0.1",
            "::1",
            "169.254.169.254",
            "fd00:ec2::254",
            "0.0.0.0",
            "::ffff:127.0.0.1",
            "fe80::1",
            "100.100.100.200",
        ] {
            let addrs = ["10.0.0.1".parse().unwrap(), bad.parse().unwrap()];
            assert_eq!(
                reason(p.addresses(&t, &addrs)),
                Reason::AddressRefused,
                "{bad}"
            );
        }
        assert!(p.addresses(&t, &["10.0.0.1".parse().unwrap()]).is_ok());
    }

    #[test]
    fn a_listed_address_or_localhost_may_be_special() {
        let p = policy(&["127.0.0.1:8080", "localhost", "169.254.169.254"]);
        let t = target(&p, "http://127.0.0.1:8080/").unwrap();
        assert!(p.addresses(&t, &["127.0.0.1".parse().unwrap()]).is_ok());
        let t = target(&p, "http://localhost:9000/").unwrap();
        assert!(p.addresses(&t, &["127.0.0.1".parse().unwrap()]).is_ok());
        let t = target(&p, "http://169.254.169.254/").unwrap();
        assert!(
            p.addresses(&t, &["169.254.169.254".parse().unwrap()])
                .is_ok()
        );
    }
}
