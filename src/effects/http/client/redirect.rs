//! Redirects: which statuses redirect, and where a `location` leads from the current URL.

use crate::effects::http::HttpError;
use crate::effects::http::policy::Policy;

pub(super) fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// `location` read against `base`: absolute, scheme-relative, absolute-path or relative-path.
pub(super) fn join(base: &http::Uri, location: &str) -> Result<http::Uri, HttpError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::http::Reason;

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
}
