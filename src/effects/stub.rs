//! Canned answers to side effects, for `khai test`: a case lists the calls it expects a script
//! to make, in order, each with the answer the script gets back, and nothing leaves the process.
//!
//! Every side effect describes its request as JSON (`{"call": "k8s::get", "kind": "v1/Pod",
//! "namespace": "default", "name": "web"}`); an expected call matches when every field it gives
//! equals the request's (fields it leaves out match anything), so the same hook serves `k8s` and
//! `http` calls alike. A call that is not the next expected one fails the case, naming it, even
//! when the script catches the error it gets.

use serde::Deserialize;
use serde_json::Value;
use std::sync::Mutex;

/// One call a case expects, and its answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// The fields of the request that must match; `call` names the function (`k8s::get`).
    pub request: Value,
    /// What the function returns; `null` (or absent) is `()`.
    #[serde(default)]
    pub response: Value,
    /// Instead of a response, the error the function throws, as the script catches it:
    /// `{ reason: "not_found", code: 404, message: "..." }`.
    #[serde(default)]
    pub error: Option<Value>,
}

/// The answers of one case's calls, and the calls made so far.
#[derive(Debug, Default)]
pub struct Stubs {
    expected: Vec<Expected>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests made, in order.
    made: Vec<Value>,
    /// The first call that did not match the next expected one.
    unexpected: Option<String>,
}

/// What a stubbed call gives the script.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Response(Value),
    /// A thrown error value.
    Error(Value),
    /// The call was not expected: the message names it.
    Unexpected(String),
}

impl Stubs {
    pub fn new(expected: Vec<Expected>) -> Self {
        Stubs {
            expected,
            state: Mutex::default(),
        }
    }

    /// Answers `request`, the next call the script makes.
    pub fn answer(&self, request: &Value) -> Answer {
        let Ok(mut state) = self.state.lock() else {
            return Answer::Unexpected("stubs unavailable".into());
        };
        let n = state.made.len();
        state.made.push(request.clone());
        let answer = match self.expected.get(n) {
            Some(e) if matches(&e.request, request) => match &e.error {
                Some(err) => Answer::Error(err.clone()),
                None => Answer::Response(served(request, &e.response)),
            },
            Some(e) => Answer::Unexpected(format!(
                "unexpected call {request} (call {} of the case expects {})",
                n + 1,
                e.request
            )),
            None => Answer::Unexpected(format!(
                "unexpected call {request} (the case expects {} call{})",
                self.expected.len(),
                if self.expected.len() == 1 { "" } else { "s" }
            )),
        };
        if let Answer::Unexpected(m) = &answer
            && state.unexpected.is_none()
        {
            state.unexpected = Some(m.clone());
        }
        answer
    }

    /// What went wrong with the calls, once the script returned: the first unexpected call, or
    /// the expected calls it did not make.
    pub(crate) fn mismatch(&self) -> Option<String> {
        let state = self.state.lock().ok()?;
        if let Some(u) = &state.unexpected {
            return Some(u.clone());
        }
        let missing: Vec<String> = self
            .expected
            .iter()
            .skip(state.made.len())
            .map(|e| e.request.to_string())
            .collect();
        (!missing.is_empty()).then(|| format!("expected calls not made: {}", missing.join(", ")))
    }

    /// The requests made, in order.
    pub fn made(&self) -> Vec<Value> {
        self.state
            .lock()
            .map(|s| s.made.clone())
            .unwrap_or_default()
    }
}

/// What the API server answers a write request (`k8s::create`, `apply`, `replace`, `patch`,
/// `patch_status`): the object as written, with the metadata the server fills in; for any other
/// call, nothing (`khai diff`, which sends no write).
pub(crate) fn as_written(request: &Value) -> Value {
    served(request, &Value::Null)
}

/// What a call answers: for a write of an object (`k8s::create`, `apply`, `replace`, `patch`,
/// `patch_status`), what the API server would, the object as written (for a patch, a merge patch
/// over the object's identity) with the metadata the server fills in, and the case's
/// `response`, if any, merged over it; for any other call, the case's `response` as it is.
fn served(request: &Value, response: &Value) -> Value {
    let written = match request["call"].as_str().unwrap_or_default() {
        "k8s::create" | "k8s::apply" | "k8s::replace" => request["object"].clone(),
        "k8s::patch" | "k8s::patch_status" => {
            let mut o = identity(request);
            if request["patch"].is_object() {
                json_patch::merge(&mut o, &request["patch"]);
            }
            o
        }
        _ => return response.clone(),
    };
    if !(response.is_null() || response.is_object()) {
        return response.clone();
    }
    let mut out = filled(written, request);
    if response.is_object() {
        json_patch::merge(&mut out, response);
    }
    out
}

/// `apiVersion`, `kind`, `metadata.name` and `namespace` of the object a request is about.
fn identity(request: &Value) -> Value {
    let mut o = serde_json::json!({ "metadata": { "name": request["name"] } });
    if let Ok(k) = request["kind"]
        .as_str()
        .unwrap_or_default()
        .parse::<crate::config::kind::KindRef>()
    {
        if let Some(v) = &k.version {
            let group = k.group.as_deref().unwrap_or_default();
            o["apiVersion"] = if group.is_empty() {
                v.clone()
            } else {
                format!("{group}/{v}")
            }
            .into();
        }
        o["kind"] = k.kind.into();
    }
    o
}

/// `obj` with the metadata the API server sets when absent: the request's namespace (none for
/// a cluster-scoped object), `uid`, `resourceVersion`, `generation`, `creationTimestamp`.
fn filled(mut obj: Value, request: &Value) -> Value {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return obj;
    };
    let name = request["name"].as_str().unwrap_or_default();
    if let Some(ns) = request["namespace"].as_str() {
        meta.insert("namespace".into(), ns.into());
    }
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    for (key, value) in [
        ("uid", Value::from(format!("uid-{name}"))),
        ("resourceVersion", "1".into()),
        ("generation", 1.into()),
        ("creationTimestamp", now.into()),
    ] {
        meta.entry(key).or_insert(value);
    }
    obj
}

/// Whether every field `want` gives equals `got`'s (maps recursively; anything else exactly).
fn matches(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| matches(v, gv))),
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stubs() -> Stubs {
        Stubs::new(vec![
            Expected {
                request: json!({"call": "k8s::get", "kind": "v1/Pod", "name": "a"}),
                response: json!({"metadata": {"name": "a"}}),
                error: None,
            },
            Expected {
                request: json!({"call": "k8s::delete"}),
                response: Value::Null,
                error: Some(json!({"reason": "forbidden", "code": 403})),
            },
        ])
    }

    #[test]
    fn calls_in_order_get_their_answers_and_fields_left_out_match_anything() {
        let s = stubs();
        let get = json!({"call": "k8s::get", "kind": "v1/Pod", "namespace": "d", "name": "a"});
        assert_eq!(
            s.answer(&get),
            Answer::Response(json!({"metadata": {"name": "a"}}))
        );
        assert!(matches!(
            s.answer(&json!({"call": "k8s::delete", "name": "b"})),
            Answer::Error(_)
        ));
        assert_eq!(s.mismatch(), None);
        assert_eq!(s.made().len(), 2);
    }

    #[test]
    fn an_unexpected_call_is_named_and_fails_the_case_even_if_caught() {
        let s = stubs();
        let Answer::Unexpected(m) = s.answer(&json!({"call": "k8s::list", "kind": "v1/Pod"}))
        else {
            panic!("expected a refusal");
        };
        assert!(
            m.starts_with(r#"unexpected call {"call":"k8s::list","kind":"v1/Pod"}"#),
            "{m}"
        );
        assert_eq!(s.mismatch(), Some(m));
    }

    #[test]
    fn a_write_answers_the_object_as_the_server_stores_it_and_the_response_goes_over_it() {
        let expected = |response: Value| Expected {
            request: json!({"call": "k8s::create"}),
            response,
            error: None,
        };
        let create = json!({"call": "k8s::create", "kind": "v1/ConfigMap", "namespace": "d",
            "name": "c", "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d"}, "data": {"k": "v"}}});
        let s = Stubs::new(vec![
            expected(Value::Null),
            expected(json!({"data": {"k": "w"}})),
        ]);
        let Answer::Response(got) = s.answer(&create) else {
            panic!("expected a response");
        };
        assert_eq!(got["data"], json!({"k": "v"}), "the object as written");
        assert_eq!(got["kind"], "ConfigMap");
        let meta = &got["metadata"];
        assert_eq!(
            (&meta["name"], &meta["namespace"]),
            (&json!("c"), &json!("d"))
        );
        assert_eq!(
            (&meta["uid"], &meta["resourceVersion"]),
            (&json!("uid-c"), &json!("1"))
        );
        assert!(meta["creationTimestamp"].is_string(), "{got}");
        let Answer::Response(got) = s.answer(&create) else {
            panic!("expected a response");
        };
        assert_eq!(got["data"], json!({"k": "w"}), "the case's response wins");
        assert_eq!(got["metadata"]["uid"], "uid-c");

        // A patch of a cluster-scoped object: its identity and the patch, with no namespace.
        let patch = json!({"call": "k8s::patch", "kind": "v1/Namespace", "name": "team-a",
            "patch": {"metadata": {"labels": {"x": "y"}}}});
        let s = Stubs::new(vec![Expected {
            request: json!({"call": "k8s::patch"}),
            response: Value::Null,
            error: None,
        }]);
        let Answer::Response(got) = s.answer(&patch) else {
            panic!("expected a response");
        };
        assert_eq!(got["apiVersion"], "v1");
        assert_eq!(got["metadata"]["labels"], json!({"x": "y"}));
        assert_eq!(got["metadata"].get("namespace"), None);
        // A read answers what the case says, nothing more.
        let s = stubs();
        let get = json!({"call": "k8s::get", "kind": "v1/Pod", "name": "a"});
        assert_eq!(
            s.answer(&get),
            Answer::Response(json!({"metadata": {"name": "a"}}))
        );
    }

    #[test]
    fn expected_calls_not_made_are_listed() {
        let s = stubs();
        s.answer(&json!({"call": "k8s::get", "kind": "v1/Pod", "name": "a"}));
        assert_eq!(
            s.mismatch().unwrap(),
            r#"expected calls not made: {"call":"k8s::delete"}"#
        );
    }
}
