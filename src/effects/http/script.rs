//! The `http` module as scripts see it: `http::request(#{ method, url, headers, body | json,
//! timeout })` and the `get`/`post`/`put`/`patch`/`delete` shorthands, answering
//! `#{ status, headers, body, json }`.
//!
//! Any status is an answer. A request that gets none throws a map a script can catch
//! (`try { … } catch (e) { e.reason }`): `#{ reason, message, method, host }`; uncaught, its
//! `message` fails the call at the script's line. Header and body values never appear in it.

use super::{HttpError, HttpRequest, HttpResponse, perform};
use rhai::{Dynamic, EvalAltResult, Map, Module, NativeCallContext, Position};
use serde_json::{Value, json};

type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

/// The `http` module, registered once on every engine.
pub(crate) fn module() -> Module {
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
        Ok(res) => crate::effects::to_dynamic("http::request", &response(res)),
        Err(e) => Err(crate::effects::thrown(crate::effects::to_dynamic(
            "http::request",
            &failure(&req, e),
        )?)),
    }
}

/// An answer as scripts read it, from the server or a `khai test` case: `status` (200 when a
/// case leaves it out), `headers` (lowercase names), `body` (the `json` a case gives, as text)
/// and `json` (the body parsed when the headers say JSON).
fn response(v: Value) -> Value {
    let Value::Object(mut m) = v else {
        return json!({ "status": 200, "headers": {}, "body": "", "json": v });
    };
    m.entry("status").or_insert(json!(200));
    let headers: serde_json::Map<String, Value> = match m.remove("headers") {
        Some(Value::Object(h)) => h
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
        _ => serde_json::Map::new(),
    };
    let says_json = headers
        .get("content-type")
        .and_then(Value::as_str)
        .is_none_or(|t| t.contains("json"));
    match (m.get("body").cloned(), m.get("json").cloned()) {
        (None, Some(j)) => {
            m.insert("body".into(), j.to_string().into());
        }
        (Some(Value::String(b)), None) if says_json => {
            let parsed = serde_json::from_str(&b).unwrap_or(Value::Null);
            m.insert("json".into(), parsed);
        }
        (None, None) => {
            m.insert("body".into(), "".into());
        }
        _ => {}
    }
    m.entry("json").or_insert(Value::Null);
    m.insert("headers".into(), Value::Object(headers));
    Value::Object(m)
}

/// A failure as scripts catch it, from the client or a `khai test` case: `reason`, and
/// `method`, `host` and `message` filled in when a case leaves them out.
fn failure(req: &HttpRequest, v: Value) -> Value {
    let Value::Object(mut m) = v else {
        return v;
    };
    let reason = m
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("error")
        .to_string();
    let host = host_of(req);
    m.entry("method")
        .or_insert_with(|| req.method.clone().into());
    m.entry("host").or_insert_with(|| host.clone().into());
    m.entry("message")
        .or_insert_with(|| format!("http::request {} {host}: {reason}", req.method).into());
    Value::Object(m)
}

fn wrong(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(message.into(), Position::NONE))
}

/// Reads the options map of `http::request`.
pub(crate) fn read_request(opts: Map) -> RhaiResult<HttpRequest> {
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
                let text = if value.is_string() {
                    value.into_string()?
                } else if let Ok(n) = value.as_int() {
                    n.to_string()
                } else {
                    return Err(wrong(
                        "http::request: timeout: expected a duration like \"5s\"".into(),
                    ));
                };
                let d = crate::config::duration::parse(&text)
                    .map_err(|e| wrong(format!("http::request: timeout: {e}")))?;
                req.timeout = Some(d);
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
        crate::nesting::check(&value).map_err(|e| wrong(format!("http::request: json: {e}")))?;
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
/// and it parses, else `()`; repeated headers are joined with `, `.
pub(crate) fn response_json(res: &HttpResponse) -> Value {
    let mut headers = serde_json::Map::new();
    for (k, v) in &res.headers {
        match headers.get_mut(k.as_str()) {
            Some(Value::String(existing)) => *existing = format!("{existing}, {v}"),
            _ => {
                headers.insert(k.clone(), v.clone().into());
            }
        }
    }
    let is_json = res
        .headers
        .iter()
        .any(|(k, v)| k == "content-type" && v.contains("json"));
    let json = if is_json {
        serde_json::from_slice::<Value>(&res.body).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    json!({
        "status": res.status,
        "headers": headers,
        "body": String::from_utf8_lossy(&res.body),
        "json": json,
    })
}

fn host_of(req: &HttpRequest) -> String {
    req.url
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The map thrown for a request that got no answer: its `message` names the method, the URL's
/// host and the reason, and is what an uncaught failure reports.
pub(crate) fn failure_json(req: &HttpRequest, e: &HttpError) -> Value {
    let host = host_of(req);
    json!({
        "reason": e.reason.as_str(),
        "message": format!("http::request {} {host}: {e}", req.method),
        "method": req.method,
        "host": host,
    })
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
        let m = response_json(&res);
        assert_eq!(m["status"], 404);
        assert_eq!(m["json"]["error"], "no");
        assert_eq!(m["headers"]["set-cookie"], "a, b");
        let text = HttpResponse {
            headers: vec![],
            ..res
        };
        assert!(response_json(&text)["json"].is_null());
    }
}
