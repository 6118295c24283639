//! `[operator.http]`: what scripts may reach with the `http` module, and how much they may read.
//!
//! Each `allow` entry is parsed here, once, into an [`AllowEntry`] (a bad one is an error at its
//! line); `effects::http` only matches against them. An entry is a host name (`api.example.com`),
//! a wildcard over the names under a domain (`*.svc.cluster.local`), an IP address (`10.0.0.5`,
//! `[fd00::1]`), each with an optional port (`127.0.0.1:8080`). No scheme, path or user.

use super::duration::Duration;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::net::IpAddr;
use std::path::PathBuf;

/// `[operator.http]`
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Hosts scripts may send requests to; nothing else is reachable.
    #[serde(default)]
    pub allow: Vec<AllowEntry>,
    /// PEM file of CA certificates trusted in addition to the system roots.
    pub ca_file: Option<PathBuf>,
    /// Bytes of a response body a script may receive; a longer body fails the request.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// Redirects followed per request, each target checked against `allow` again.
    #[serde(default = "default_max_redirects")]
    pub max_redirects: u32,
    /// Time one request may take unless it sets its own `timeout`; never more than what is left
    /// of the call's time budget.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            allow: Vec::new(),
            ca_file: None,
            max_response_bytes: default_max_response_bytes(),
            max_redirects: default_max_redirects(),
            timeout: default_timeout(),
        }
    }
}

fn default_max_response_bytes() -> u64 {
    1 << 20
}

fn default_max_redirects() -> u32 {
    3
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// What an `allow` entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowHost {
    /// One host name, lowercase, without a trailing dot.
    Name(String),
    /// Every name under this domain (`*.svc.cluster.local` holds `svc.cluster.local`), at any
    /// depth, but not the domain itself.
    Under(String),
    /// One address.
    Ip(IpAddr),
}

/// One `allow` entry: a host and, optionally, the one port it may be reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    pub host: AllowHost,
    /// `None`: any port.
    pub port: Option<u16>,
    /// As written, for messages and the `host` label of metrics.
    pub written: String,
}

/// Why an `allow` entry is not a host to allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{written:?} is not a host to allow: {problem}")]
pub struct AllowError {
    /// The entry as written.
    written: String,
    problem: AllowProblem,
}

/// What is wrong with an `allow` entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AllowProblem {
    #[error("write the host alone, without scheme or path (\"api.example.com\")")]
    SchemeOrPath,
    #[error("write the host alone, without a user")]
    User,
    #[error("{0:?} is not a port (1 to 65535)")]
    Port(String),
    #[error("an unclosed \"[\"")]
    UnclosedBracket,
    #[error("unexpected {0:?} after the address")]
    AfterAddress(String),
    #[error("a wildcard needs a domain of two labels or more")]
    ShortWildcard,
    #[error("a wildcard may only be the first label (\"*.example.com\")")]
    InnerWildcard,
    #[error(transparent)]
    Name(#[from] NameError),
}

/// Why a host name is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    #[error("a host name has 1 to 253 characters")]
    Length,
    #[error("{0:?} is not a DNS label (letters, digits and inner '-', 1 to 63)")]
    Label(String),
}

impl std::str::FromStr for AllowEntry {
    type Err = AllowError;

    fn from_str(s: &str) -> Result<Self, AllowError> {
        let host_of = |s: &str| -> Result<_, AllowProblem> {
            if s.contains("://") || s.contains('/') {
                return Err(AllowProblem::SchemeOrPath);
            }
            if s.contains('@') {
                return Err(AllowProblem::User);
            }
            let (host, port) = split_port(s)?;
            let host = if let Ok(ip) = host.parse::<IpAddr>() {
                AllowHost::Ip(ip)
            } else if let Some(domain) = host.strip_prefix("*.") {
                let d = dns_name(domain)?;
                if !d.contains('.') {
                    return Err(AllowProblem::ShortWildcard);
                }
                AllowHost::Under(d)
            } else if host.contains('*') {
                return Err(AllowProblem::InnerWildcard);
            } else {
                AllowHost::Name(dns_name(host)?)
            };
            Ok((host, port))
        };
        let (host, port) = host_of(s).map_err(|problem| AllowError {
            written: s.to_string(),
            problem,
        })?;
        Ok(AllowEntry {
            host,
            port,
            written: s.to_string(),
        })
    }
}

/// Splits `host[:port]`, `[v6]:port` or a bare IPv6 address.
fn split_port(s: &str) -> Result<(&str, Option<u16>), AllowProblem> {
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| AllowProblem::Port(p.to_string()))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return Err(AllowProblem::UnclosedBracket);
        };
        return match after.strip_prefix(':') {
            Some(p) => Ok((ip, Some(port(p)?))),
            None if after.is_empty() => Ok((ip, None)),
            None => Err(AllowProblem::AfterAddress(after.to_string())),
        };
    }
    if s.matches(':').count() > 1 {
        // A bare IPv6 address: it has no room for a port.
        return Ok((s, None));
    }
    match s.split_once(':') {
        Some((h, p)) => Ok((h, Some(port(p)?))),
        None => Ok((s, None)),
    }
}

/// A host name in lowercase without its trailing dot, if it is one.
pub(crate) fn dns_name(s: &str) -> Result<String, NameError> {
    let s = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    if s.is_empty() || s.len() > 253 {
        return Err(NameError::Length);
    }
    for label in s.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(NameError::Label(label.to_string()));
        }
    }
    Ok(s)
}

impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for AllowEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.written)
    }
}

/// One entry of `[operator] secrets`: `name` (in the namespace of the object a call is about,
/// in every watched namespace) or `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretName {
    pub namespace: Option<String>,
    pub name: String,
}

/// The name of an `[operator] secrets` entry that stands for every Secret (of the watched
/// namespaces, or of one namespace: `"team-a/*"`), named by the script at read time.
pub(crate) const ANY_SECRET: &str = "*";

impl SecretName {
    /// Whether this entry lets scripts read Secret `name` of `namespace`.
    pub(crate) fn covers(&self, namespace: &str, name: &str) -> bool {
        (self.name == name || self.name == ANY_SECRET)
            && self.namespace.as_deref().is_none_or(|q| q == namespace)
    }
}

/// Why an `[operator] secrets` entry is not a Secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{written:?} is not a Secret: {what} {part:?} must be a lowercase DNS name; write \"name\", \
     \"namespace/name\", or \"*\" for every Secret"
)]
pub struct SecretNameError {
    /// The entry as written.
    written: String,
    /// `namespace` or `name`.
    what: &'static str,
    /// The part that is not a DNS name.
    part: String,
}

impl std::str::FromStr for SecretName {
    type Err = SecretNameError;

    fn from_str(s: &str) -> Result<Self, SecretNameError> {
        let (namespace, name) = match s.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, s),
        };
        let check = |part: &str, what: &'static str| {
            let ok = !part.is_empty()
                && part.len() <= 253
                && part.split('.').all(|l| {
                    !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                });
            if ok {
                Ok(part.to_string())
            } else {
                Err(SecretNameError {
                    written: s.to_string(),
                    what,
                    part: part.to_string(),
                })
            }
        };
        Ok(SecretName {
            namespace: namespace.map(|ns| check(ns, "namespace")).transpose()?,
            name: match name {
                ANY_SECRET => name.to_string(),
                _ => check(name, "name")?,
            },
        })
    }
}

impl std::fmt::Display for SecretName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl<'de> Deserialize<'de> for SecretName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for SecretName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(s: &str) -> Result<AllowEntry, String> {
        s.parse().map_err(|e: AllowError| e.to_string())
    }

    #[test]
    fn every_way_of_writing_a_host_is_read() {
        let e = entry("API.Example.com.").unwrap();
        assert_eq!(e.host, AllowHost::Name("api.example.com".into()));
        assert_eq!(e.port, None);
        let e = entry("*.svc.cluster.local").unwrap();
        assert_eq!(e.host, AllowHost::Under("svc.cluster.local".into()));
        let e = entry("127.0.0.1:8080").unwrap();
        assert_eq!(e.host, AllowHost::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(e.port, Some(8080));
        let e = entry("[fd00::1]:443").unwrap();
        assert_eq!(e.host, AllowHost::Ip("fd00::1".parse().unwrap()));
        assert_eq!(e.port, Some(443));
        assert_eq!(
            entry("fd00:ec2::254").unwrap().host,
            AllowHost::Ip("fd00:ec2::254".parse().unwrap())
        );
        assert_eq!(
            entry("localhost:9").unwrap().host,
            AllowHost::Name("localhost".into())
        );
    }

    #[test]
    fn entries_that_are_not_hosts_are_refused_with_the_reason() {
        assert_eq!(
            entry("https://api.example.com").unwrap_err(),
            "\"https://api.example.com\" is not a host to allow: write the host alone, without \
             scheme or path (\"api.example.com\")"
        );
        assert!(entry("api.*.com").unwrap_err().contains("first label"));
        assert!(entry("*.com").unwrap_err().contains("two labels"));
        assert!(entry("a.com:0").unwrap_err().contains("not a port"));
        assert!(entry("a.com:99999").unwrap_err().contains("not a port"));
        assert!(entry("under_score.com").unwrap_err().contains("DNS label"));
        assert!(entry("").is_err());
        assert!(entry("user@a.com").is_err());
    }

    #[test]
    fn secret_names_are_a_name_or_namespace_slash_name() {
        let s: SecretName = "billing/api-token".parse().unwrap();
        assert_eq!(s.namespace.as_deref(), Some("billing"));
        assert_eq!(s.name, "api-token");
        assert_eq!(s.to_string(), "billing/api-token");
        let s: SecretName = "db-credentials".parse().unwrap();
        assert_eq!(s.namespace, None);
        assert!(
            "Db/x"
                .parse::<SecretName>()
                .unwrap_err()
                .to_string()
                .contains("namespace \"Db\" must be a lowercase DNS name")
        );
        assert!("a/b/c".parse::<SecretName>().is_err());
    }
}
