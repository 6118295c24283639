//! Reading `--webhook-url`, the base URL the API server calls khai at: its host (a name the
//! self-signed certificate must hold) and its port, where `0` stands for the port the webhook
//! server bound. With `--webhook-bind 127.0.0.1:0 --webhook-url https://127.0.0.1:0` khai picks
//! a free port and registers its webhook configurations at that port, so nothing has to pick one
//! before khai starts (and lose it to another process in between).

/// The host of `https://host:port/path`.
pub(super) fn url_host(url: &str) -> Option<String> {
    let authority = &url[authority(url)];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// `url` with its port `0` replaced by `port` (`https://127.0.0.1:0/x` becomes
/// `https://127.0.0.1:9443/x` for 9443); a URL naming any other port, or none, as it is.
pub(super) fn with_bound_port(url: &str, port: u16) -> String {
    let range = authority(url);
    if port_is_zero(url) {
        format!("{}{port}{}", &url[..range.end - 1], &url[range.end..])
    } else {
        url.to_string()
    }
}

/// Whether `url` names port 0, the port the webhook server binds.
pub(crate) fn port_is_zero(url: &str) -> bool {
    url[authority(url)]
        .rsplit_once(':')
        .is_some_and(|(_, p)| p == "0")
}

/// Where the authority (`user@host:port`) of `url` lies: after `scheme://`, up to the path,
/// query or fragment.
fn authority(url: &str) -> std::ops::Range<usize> {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_host_handles_ports_paths_and_ipv6() {
        assert_eq!(
            url_host("https://127.0.0.1:9443/x").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            url_host("https://khai.local").as_deref(),
            Some("khai.local")
        );
        assert_eq!(url_host("https://[::1]:9443").as_deref(), Some("::1"));
    }

    #[test]
    fn port_0_becomes_the_bound_port_and_any_other_url_stays() {
        let bound = |url| with_bound_port(url, 40123);
        assert_eq!(bound("https://127.0.0.1:0"), "https://127.0.0.1:40123");
        assert_eq!(
            bound("https://127.0.0.1:0/base"),
            "https://127.0.0.1:40123/base"
        );
        assert_eq!(bound("https://[::1]:0?x=1"), "https://[::1]:40123?x=1");
        assert_eq!(
            bound("https://khai.local:0#f"),
            "https://khai.local:40123#f"
        );
        // A proxy's port, the scheme's default, and an IPv6 host ending in 0 are kept.
        for kept in [
            "https://127.0.0.1:9443",
            "https://khai.local",
            "https://[::0]",
            "https://127.0.0.1:10/a:0",
        ] {
            assert_eq!(bound(kept), kept);
        }
    }
}
