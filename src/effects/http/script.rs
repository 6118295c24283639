//! The `http` module as scripts see it: `http::request(#{ method, url, headers, body | json,
//! timeout })` and the `get`/`post`/`put`/`patch`/`delete` shorthands, answering
//! `#{ status, headers, body, json }`.
//!
//! Any status is an answer. A request that gets none throws a map a script can catch
//! (`try { … } catch (e) { e.reason }`): `#{ reason, message, method, host }`; uncaught, its
//! `message` fails the call at the script's line. Header and body values never appear in it.

use super::{HttpError, HttpRequest, HttpResponse, perform};
use rhai::{Dynamic, EvalAltResult, Map, Module, NativeCallContext, Position};

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

/// The `http` module, registered once on every engine.
pub fn module() -> Module {
    let mut m = Module::new();
    m.set_native_fn("request", |c: NativeCallContext, opts: Map| {
        at(&c, request(opts))
    });
    for (name, method) in [
        ("get", "GET"),
        ("post", "POST"),
        ("put", "PUT"),
        ("patch", "PATCH"),
        ("delete", "DELETE"),
    ] {
        m.set_native_fn(name, move |c: NativeCallContext, url: &str| {
            at(&c, shorthand(method, url, Map::new()))
        });
        m.set_native_fn(name, move |c: NativeCallContext, url: &str, opts: Map| {
            at(&c, shorthand(method, url, opts))
        });
    }
    m
}

/// Places an error at the script's call, so an uncaught one names its line.
fn at(c: &NativeCallContext, r: RhaiResult<Dynamic>) -> RhaiResult<Dynamic> {
    r.map_err(|mut e| {
        if e.position().is_none() {
            e.set_position(c.call_position());
        }
        e
    })
}

fn shorthand(method: &str, url: &str, mut opts: Map) -> RhaiResult<Dynamic> {
    for key in ["method", "url"] {
        if opts.contains_key(key) {
            return Err(wrong(format!(
                "http::{}(url, options): options must not set {key}; use http::request",
                method.to_lowercase()
            )));
        }
    }
    opts.insert("method".into(), method.into());
    opts.insert("url".into(), url.into());
    request(opts)
}

fn request(opts: Map) -> RhaiResult<Dynamic> {
    let req = read_request(opts)?;
    match perform(&req)? {
        Ok(res) => answer(&res),
        Err(e) => Err(thrown(&req, &e)),
    }
}

fn wrong(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(message.into(), Position::NONE))
}

/// Reads the options map of `http::request`.
pub fn read_request(opts: Map) -> RhaiResult<HttpRequest> {
    let mut req = HttpRequest {
        method: "GET".into(),
        url: String::new(),
        headers: Vec::new(),
        body: None,
        timeout: None,
    };
    let mut json = None;
    for (key, value) in opts {
        match key.as_str() {
            "method" => req.method = text("method", value)?.to_ascii_uppercase(),
            "url" => req.url = text("url", value)?,
            "headers" => {
                let Some(headers) = value.try_cast::<Map>() else {
                    return Err(wrong(
                        "http::request: headers must be a map of names to values".into(),
                    ));
                };
                for (name, v) in headers {
                    let v = if v.is_string() {
                        v.into_string()?
                    } else {
                        v.to_string()
                    };
                    req.headers.push((name.to_string(), v));
                }
            }
            "body" => req.body = Some(text("body", value)?.into_bytes()),
            "json" => json = Some(value),
            "timeout" => {
                let d = if value.is_string() {
                    crate::config::duration::parse(&value.into_string()?)
                } else if let Ok(n) = value.as_int() {
                    crate::config::duration::parse(&n.to_string())
                } else {
                    Err("expected a duration like \"5s\"".into())
                };
                req.timeout = Some(d.map_err(|e| wrong(format!("http::request: timeout: {e}")))?);
            }
            other => {
                return Err(wrong(format!(
                    "http::request: unknown option {other:?}; options are method, url, headers, \
                     body, json, timeout"
                )));
            }
        }
    }
    if req.url.is_empty() {
        return Err(wrong("http::request: url is required".into()));
    }
    if let Some(value) = json {
        if req.body.is_some() {
            return Err(wrong("http::request: give body or json, not both".into()));
        }
        let v: serde_json::Value = rhai::serde::from_dynamic(&value)?;
        req.body = Some(v.to_string().into_bytes());
        if !req
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            req.headers
                .push(("content-type".into(), "application/json".into()));
        }
    }
    Ok(req)
}

fn text(key: &str, value: Dynamic) -> RhaiResult<String> {
    value
        .into_string()
        .map_err(|t| wrong(format!("http::request: {key} must be a string, not {t}")))
}

/// The answer as scripts read it: `json` is the parsed body when the server says it is JSON
/// and it parses, else `()`.
pub fn answer(res: &HttpResponse) -> RhaiResult<Dynamic> {
    let mut headers = Map::new();
    for (k, v) in &res.headers {
        match headers.get_mut(k.as_str()) {
            Some(existing) => *existing = format!("{existing}, {v}").into(),
            None => {
                headers.insert(k.as_str().into(), v.clone().into());
            }
        }
    }
    let is_json = res
        .headers
        .iter()
        .any(|(k, v)| k == "content-type" && v.contains("json"));
    let json = if is_json {
        match serde_json::from_slice::<serde_json::Value>(&res.body) {
            Ok(v) => rhai::serde::to_dynamic(v)?,
            Err(_) => Dynamic::UNIT,
        }
    } else {
        Dynamic::UNIT
    };
    let mut m = Map::new();
    m.insert("status".into(), i64::from(res.status).into());
    m.insert("headers".into(), headers.into());
    m.insert(
        "body".into(),
        String::from_utf8_lossy(&res.body).into_owned().into(),
    );
    m.insert("json".into(), json);
    Ok(m.into())
}

/// The map thrown for a request that got no answer: its `message` names the method, the URL's
/// host and the reason, and is what an uncaught failure reports.
pub fn thrown(req: &HttpRequest, e: &HttpError) -> Box<EvalAltResult> {
    let host = req
        .url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    let mut m = Map::new();
    m.insert("reason".into(), e.reason.as_str().into());
    m.insert(
        "message".into(),
        format!("http::request {} {host}: {e}", req.method).into(),
    );
    m.insert("method".into(), req.method.clone().into());
    m.insert("host".into(), host.into());
    Box::new(EvalAltResult::ErrorRuntime(m.into(), Position::NONE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(src: &str) -> Map {
        rhai::Engine::new().eval::<Map>(src).unwrap()
    }

    #[test]
    fn a_json_option_becomes_the_body_with_its_content_type() {
        let req = read_request(opts(
            r#"#{ method: "post", url: "http://a/b", json: #{ name: "x", n: 1 }, timeout: "2s",
                 headers: #{ "x-token": "t" } }"#,
        ))
        .unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(
            req.body.as_deref(),
            Some(br#"{"n":1,"name":"x"}"#.as_slice())
        );
        assert_eq!(
            req.headers,
            [
                ("x-token".to_string(), "t".to_string()),
                ("content-type".into(), "application/json".into())
            ]
        );
        assert_eq!(req.timeout, Some(std::time::Duration::from_secs(2)));
    }

    #[test]
    fn unknown_options_and_body_with_json_are_errors() {
        let err = read_request(opts(r#"#{ url: "http://a", bdy: "x" }"#)).unwrap_err();
        assert!(err.to_string().contains("unknown option \"bdy\""), "{err}");
        let err = read_request(opts(r#"#{ url: "http://a", body: "x", json: 1 }"#)).unwrap_err();
        assert!(err.to_string().contains("body or json, not both"), "{err}");
        assert!(read_request(opts(r#"#{ method: "GET" }"#)).is_err());
    }

    #[test]
    fn an_answer_parses_json_only_when_the_server_says_json() {
        let res = HttpResponse {
            status: 404,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("set-cookie".into(), "a".into()),
                ("set-cookie".into(), "b".into()),
            ],
            body: br#"{"error":"no"}"#.to_vec(),
        };
        let m = answer(&res).unwrap().cast::<Map>();
        assert_eq!(m["status"].as_int().unwrap(), 404);
        assert_eq!(m["json"].clone().cast::<Map>()["error"].to_string(), "no");
        assert_eq!(
            m["headers"].clone().cast::<Map>()["set-cookie"].to_string(),
            "a, b"
        );
        let text = HttpResponse {
            headers: vec![],
            ..res
        };
        assert!(answer(&text).unwrap().cast::<Map>()["json"].is_unit());
    }
}
