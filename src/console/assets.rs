//! The web page of the console: one HTML file, one script, one style sheet and an icon, hand-written and
//! compiled into the binary, so the page needs nothing from the network (no CDN) and always
//! matches the API it reads. The page reads only the JSON API and the event stream.

/// The content type and bytes of the asset at `path`.
pub(super) fn get(path: &str) -> Option<(&'static str, &'static [u8])> {
    match path {
        "/" | "/index.html" => Some(("text/html; charset=utf-8", include_bytes!("web/index.html"))),
        "/app.js" => Some((
            "text/javascript; charset=utf-8",
            include_bytes!("web/app.js"),
        )),
        "/app.css" => Some(("text/css; charset=utf-8", include_bytes!("web/app.css"))),
        "/favicon.svg" => Some(("image/svg+xml", include_bytes!("web/favicon.svg"))),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_script_and_style() {
        let html = std::str::from_utf8(get("/").unwrap().1).unwrap();
        assert!(html.contains("src=\"/app.js\""), "{html}");
        assert!(html.contains("href=\"/app.css\""), "{html}");
        assert!(
            !html.contains("http"),
            "the page must not load from the network"
        );
        assert!(get("/nope.js").is_none());
    }
}
