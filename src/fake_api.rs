//! An in-memory stand-in for the Kubernetes API, for unit tests of code that talks to it.
//!
//! It keeps objects by their path and answers what khai's API-facing code sends: get, create
//! (POST), replace (PUT), JSON patches, JSON merge patches and server-side apply (both applied
//! as a merge), a resourceVersion sent with a replace or a merge patch as a precondition (409
//! when it is not the current one), and deletes with uid preconditions; an object
//! on its way out goes once its last finalizer does. Every write bumps one global
//! resourceVersion and is logged ([`FakeApi::writes`]). Anything else gets a 404 or 405 in the
//! API server's shape. End-to-end behaviour is proven against a real API server in
//! `tests/e2e`; this exists to control time and failures in unit tests.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

/// The fake server's state, shared by every client made from it.
#[derive(Clone, Default)]
pub(crate) struct FakeApi {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    version: u64,
    /// Answers forced for the next requests to a path: (path, code, message, whether reads
    /// pass through untouched).
    failures: Vec<(String, u16, String, bool)>,
    /// Every request but a read, as `METHOD path`, in the order received.
    writes: Vec<String>,
}

impl FakeApi {
    /// A client whose every request this fake answers.
    pub(crate) fn client(&self) -> kube::Client {
        let api = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.handle(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// The object at `path` (as `/api/v1/namespaces/ns/configmaps/name`), if any.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        crate::sync::lock(&self.inner).objects.get(path).cloned()
    }

    /// Puts `obj` at `path`, as if someone else had created it.
    pub(crate) fn put(&self, path: &str, mut obj: Value) {
        let mut s = crate::sync::lock(&self.inner);
        s.version += 1;
        obj["metadata"]["resourceVersion"] = json!(s.version.to_string());
        s.objects.insert(path.to_string(), obj);
    }

    /// Every object whose path starts with `prefix`, in path order.
    pub(crate) fn under(&self, prefix: &str) -> Vec<Value> {
        let s = crate::sync::lock(&self.inner);
        s.objects
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Every request but a read received so far (refused ones too), as `METHOD path` (`PATCH
    /// /apis/x.dev/v1/namespaces/ns/widgets/w/status`), in the order received.
    pub(crate) fn writes(&self) -> Vec<String> {
        crate::sync::lock(&self.inner).writes.clone()
    }

    /// The next `times` requests to `path` are answered with `code` and nothing else happens.
    pub(crate) fn fail(&self, path: &str, code: u16, times: usize) {
        self.refuse(path, code, "forced by the test", times);
    }

    /// As [`FakeApi::fail`], with the API server's `message` (and the `reason` it gives with
    /// `code`: `Forbidden` for 403).
    pub(crate) fn refuse(&self, path: &str, code: u16, message: &str, times: usize) {
        let mut s = crate::sync::lock(&self.inner);
        for _ in 0..times {
            s.failures
                .push((path.to_string(), code, message.to_string(), false));
        }
    }

    /// The next `times` writes (any request but a GET) to `path` are answered with `code`;
    /// reads are answered as usual.
    pub(crate) fn fail_writes(&self, path: &str, code: u16, times: usize) {
        let mut s = crate::sync::lock(&self.inner);
        for _ in 0..times {
            s.failures
                .push((path.to_string(), code, "forced by the test".into(), true));
        }
    }

    async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap_or_default();
        let path = parts.uri.path().trim_end_matches('/').to_string();
        let content_type = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let mut s = crate::sync::lock(&self.inner);
        if parts.method != Method::GET {
            s.writes.push(format!("{} {path}", parts.method));
        }
        let read = parts.method == Method::GET;
        let forced = s
            .failures
            .iter()
            .position(|(p, _, _, writes_only)| *p == path && !(read && *writes_only));
        if let Some(i) = forced {
            let (_, code, message, _) = s.failures.remove(i);
            return status(code, reason_for(code), &message);
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match parts.method {
            Method::GET => match s.objects.get(&path) {
                Some(o) => ok(StatusCode::OK, o),
                None => not_found(&path),
            },
            Method::POST => {
                let name = body["metadata"]["name"].as_str().unwrap_or_default();
                let at = format!("{path}/{name}");
                if s.objects.contains_key(&at) {
                    return status(409, "AlreadyExists", &format!("{name} already exists"));
                }
                let stored = s.store(&at, body);
                ok(StatusCode::CREATED, &stored)
            }
            Method::PUT => {
                let Some(current) = s.objects.get(&path) else {
                    return not_found(&path);
                };
                let sent_rv = body["metadata"]["resourceVersion"].as_str();
                if sent_rv
                    .is_some_and(|rv| Some(rv) != current["metadata"]["resourceVersion"].as_str())
                {
                    return status(409, "Conflict", "the object has been modified");
                }
                let stored = s.store(&path, body);
                ok(StatusCode::OK, &stored)
            }
            Method::PATCH => {
                let (target, sub) = match path.strip_suffix("/status") {
                    Some(p) => (p.to_string(), Some("status")),
                    None => (path.clone(), None),
                };
                let apply = content_type.contains("apply-patch");
                let mut current = match s.objects.get(&target) {
                    Some(o) => o.clone(),
                    None if apply => json!({}),
                    None => return not_found(&path),
                };
                // A resourceVersion in a merge patch is a precondition, as on the API server.
                let sent_rv = body["metadata"]["resourceVersion"].as_str();
                if !apply
                    && sent_rv.is_some_and(|rv| {
                        Some(rv) != current["metadata"]["resourceVersion"].as_str()
                    })
                {
                    return status(409, "Conflict", "the object has been modified");
                }
                if content_type.contains("json-patch") {
                    if let Err(e) = json_patch_as_server(&mut current, body) {
                        return status(422, "Invalid", &e);
                    }
                } else {
                    match sub {
                        Some(field) => json_patch::merge(&mut current[field], &body[field]),
                        None => json_patch::merge(&mut current, &body),
                    }
                }
                let stored = s.store(&target, current);
                ok(StatusCode::OK, &stored)
            }
            Method::DELETE => {
                let Some(current) = s.objects.get(&path) else {
                    return not_found(&path);
                };
                let want_uid = body["preconditions"]["uid"].as_str();
                if want_uid.is_some_and(|u| Some(u) != current["metadata"]["uid"].as_str()) {
                    return status(409, "Conflict", "Precondition failed: UID in precondition");
                }
                let gone = s.objects.remove(&path).unwrap_or_default();
                ok(StatusCode::OK, &gone)
            }
            _ => status(405, "MethodNotAllowed", "not supported by the fake API"),
        }
    }
}

impl State {
    /// Stores `obj` at `path`; an object on its way out whose last finalizer went is deleted,
    /// as the API server does, and an empty list of finalizers is left out.
    fn store(&mut self, path: &str, mut obj: Value) -> Value {
        self.version += 1;
        obj["metadata"]["resourceVersion"] = json!(self.version.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{}", self.version));
        }
        let held = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        // The API server leaves an empty list out of what it returns.
        if !held && let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("finalizers");
        }
        if obj["metadata"]["deletionTimestamp"].is_null() || held {
            self.objects.insert(path.to_string(), obj.clone());
        } else {
            self.objects.remove(path);
        }
        obj
    }
}

/// Applies the JSON patch `ops` to `doc` as the API server does: a `test` for `null` passes on
/// a field that is absent (kube-runtime's finalizer helper sends one before adding the first
/// finalizer).
fn json_patch_as_server(doc: &mut Value, ops: Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON patch is an array".into());
    };
    let ops: Vec<Value> = ops
        .into_iter()
        .filter(|op| {
            let absent = op["path"]
                .as_str()
                .is_some_and(|p| doc.pointer(p).is_none());
            !(op["op"] == "test" && op["value"].is_null() && absent)
        })
        .collect();
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(|e| e.to_string())?;
    json_patch::patch(doc, &patch).map_err(|e| e.to_string())
}

fn ok(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = code;
    r
}

/// The `reason` the API server gives with `code`.
fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Failure",
    }
}

fn not_found(path: &str) -> Response<Body> {
    status(404, "NotFound", &format!("{path} not found"))
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let v = json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": message, "reason": reason, "code": code });
    let mut r = Response::new(Body::from(serde_json::to_vec(&v).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::{Api, DynamicObject, Patch, PatchParams};

    /// kube-runtime's finalizer helper and khai's release both send JSON patches; the API server
    /// deletes an object on its way out once its last finalizer goes.
    #[tokio::test]
    async fn json_patches_add_and_remove_finalizers_as_the_api_server_does() {
        let api = FakeApi::default();
        let path = "/api/v1/namespaces/ns/configmaps/c";
        api.put(
            path,
            json!({ "metadata": { "name": "c", "namespace": "ns" } }),
        );
        let cms: Api<DynamicObject> = Api::namespaced_with(
            api.client(),
            "ns",
            &crate::watch::Kind::configmaps().resource,
        );
        let patch = |ops: Value| Patch::<()>::Json(serde_json::from_value(ops).unwrap());
        let add = json!([{ "op": "test", "path": "/metadata/finalizers", "value": null },
                         { "op": "add", "path": "/metadata/finalizers", "value": ["f"] }]);
        cms.patch("c", &PatchParams::default(), &patch(add))
            .await
            .unwrap();
        assert_eq!(
            api.get(path).unwrap()["metadata"]["finalizers"],
            json!(["f"])
        );
        let wrong = json!([{ "op": "test", "path": "/metadata/finalizers/0", "value": "g" }]);
        assert!(
            cms.patch("c", &PatchParams::default(), &patch(wrong))
                .await
                .is_err()
        );
        let mut held = api.get(path).unwrap();
        held["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        api.put(path, held);
        let remove = json!([{ "op": "test", "path": "/metadata/finalizers/0", "value": "f" },
                            { "op": "remove", "path": "/metadata/finalizers/0" }]);
        cms.patch("c", &PatchParams::default(), &patch(remove))
            .await
            .unwrap();
        assert!(
            api.get(path).is_none(),
            "its last finalizer gone, the object goes"
        );
        assert_eq!(
            api.writes(),
            [
                format!("PATCH {path}"),
                format!("PATCH {path}"),
                format!("PATCH {path}")
            ]
        );
    }
}
