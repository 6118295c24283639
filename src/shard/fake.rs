//! A stand-in API server for the sharder's unit tests: paged, label-selected lists of metadata,
//! reads of one object's metadata and merge patches of labels, each logged in the order
//! received, so a test can check what the sharder read and wrote, and in which order.

use crate::watch::Kind;
use http::{Request, Response};
use kube::client::Body;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub(super) struct Fake {
    inner: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Objects by collection path (`/api/v1/namespaces/ns/configmaps`), in name order.
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// `LIST <collection> <selector> <continue>`, `GET <collection>/<name>` and
    /// `PATCH <collection>/<name> <labels>`.
    log: Vec<String>,
    /// The next list carrying a continue token is answered 410 Gone, as the API server answers
    /// a token older than etcd's compaction.
    expire_next_continue: bool,
}

impl Fake {
    pub(super) fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.handle(req).await) }
        });
        kube::Client::new(service, "default")
    }

    /// Adds an object named `name` labelled `labels` to `collection`, with `extra` metadata.
    pub(super) fn add(&self, collection: &str, name: &str, labels: Value, extra: Value) {
        let mut meta = json!({ "name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "resourceVersion": "1", "labels": labels });
        if let (Some(m), Value::Object(e)) = (meta.as_object_mut(), extra) {
            m.extend(e);
        }
        let obj = json!({ "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta });
        let mut s = crate::sync::lock(&self.inner);
        s.objects
            .entry(collection.into())
            .or_default()
            .insert(name.into(), obj);
    }

    /// Answers the next list that carries a continue token with 410 Gone, once.
    pub(super) fn expire_next_continue(&self) {
        crate::sync::lock(&self.inner).expire_next_continue = true;
    }

    pub(super) fn log(&self) -> Vec<String> {
        crate::sync::lock(&self.inner).log.clone()
    }

    async fn handle(&self, req: Request<Body>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        let body = body.collect_bytes().await.unwrap_or_default();
        let path = parts.uri.path().to_string();
        let query: BTreeMap<String, String> = parts
            .uri
            .query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), decode(v)))
            .collect();
        let mut s = crate::sync::lock(&self.inner);
        let answer = if parts.method == http::Method::PATCH {
            let (collection, name) = path.rsplit_once('/').unwrap_or_default();
            let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
            let labels = &patch["metadata"]["labels"];
            s.log.push(format!("PATCH {path} {labels}"));
            match s.objects.get_mut(collection).and_then(|c| c.get_mut(name)) {
                Some(o) => {
                    if let Some(l) = labels.as_object() {
                        for (k, v) in l {
                            match v {
                                Value::Null => {
                                    o["metadata"]["labels"].as_object_mut().map(|m| m.remove(k));
                                }
                                v => o["metadata"]["labels"][k] = v.clone(),
                            }
                        }
                    }
                    o.clone()
                }
                None => json!({}),
            }
        } else if !query.contains_key("limit") {
            // The sharder's lists are all paged: a request without a limit reads one object.
            s.log.push(format!("GET {path}"));
            let (collection, name) = path.rsplit_once('/').unwrap_or_default();
            match s.objects.get(collection).and_then(|c| c.get(name)) {
                Some(o) => o.clone(),
                None => {
                    let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": format!("{name} not found") });
                    let mut r =
                        Response::new(Body::from(serde_json::to_vec(&status).unwrap_or_default()));
                    *r.status_mut() = http::StatusCode::NOT_FOUND;
                    return r;
                }
            }
        } else {
            let selector = query.get("labelSelector").cloned().unwrap_or_default();
            // As the API server's, the continue token names where the last page ended, so
            // objects changed meanwhile neither shift nor repeat the pages.
            let after = query.get("continue").cloned().unwrap_or_default();
            let limit: usize = query
                .get("limit")
                .and_then(|c| c.parse().ok())
                .unwrap_or(usize::MAX);
            s.log.push(format!("LIST {path} {selector} {after}"));
            if !after.is_empty() && std::mem::take(&mut s.expire_next_continue) {
                let status = json!({ "apiVersion": "v1", "kind": "Status", "status": "Failure",
                    "reason": "Expired", "code": 410,
                    "message": "The provided continue parameter is too old to display a consistent list result." });
                let mut r =
                    Response::new(Body::from(serde_json::to_vec(&status).unwrap_or_default()));
                *r.status_mut() = http::StatusCode::GONE;
                return r;
            }
            let mut items: Vec<Value> = s
                .objects
                .get(&path)
                .map(|c| {
                    c.iter()
                        .filter(|(name, o)| **name > after && matches(&selector, o))
                        .map(|(_, o)| o.clone())
                        .take(limit.saturating_add(1))
                        .collect()
                })
                .unwrap_or_default();
            let cont = if items.len() > limit {
                items.truncate(limit);
                items
                    .last()
                    .and_then(|o| o["metadata"]["name"].as_str())
                    .unwrap_or_default()
                    .to_string()
            } else {
                String::new()
            };
            json!({ "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                "metadata": { "continue": cont, "resourceVersion": "1" }, "items": items })
        };
        Response::new(Body::from(serde_json::to_vec(&answer).unwrap_or_default()))
    }
}

pub(super) const PARTS: &str = "/apis/x.dev/v1/namespaces/ns/parts";
pub(super) const CMS: &str = "/api/v1/namespaces/ns/configmaps";
pub(super) const SECRETS: &str = "/api/v1/namespaces/ns/secrets";

/// `x.dev/v1` `Part`, namespaced: the parent kind of the tests.
pub(super) fn part() -> Kind {
    kind("x.dev", "Part", "parts")
}

/// `v1` `Secret`: the related kind of the tests, naming its Part by `x.dev/part`.
pub(super) fn secret() -> Kind {
    kind("", "Secret", "secrets")
}

fn kind(group: &str, kind: &str, plural: &str) -> Kind {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    Kind {
        resource: ApiResource::from_gvk_with_plural(&gvk, plural),
        namespaced: true,
    }
}

/// The labels of a Secret naming `parent`, labelled for `shard` if any.
pub(super) fn naming(parent: &str, shard: Option<&str>) -> Value {
    let mut labels = json!({ "x.dev/part": parent });
    if let Some(s) = shard {
        labels["shard.khai.dev/op"] = json!(s);
    }
    labels
}

/// The label patches `fake` received, in order.
pub(super) fn patches(fake: &Fake) -> Vec<String> {
    fake.log()
        .into_iter()
        .filter(|l| l.starts_with("PATCH"))
        .collect()
}

/// Whether `o`'s labels match `selector` (`k=v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
/// `k notin (a,b)`, comma-separated).
fn matches(selector: &str, o: &Value) -> bool {
    let labels = &o["metadata"]["labels"];
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|t| {
            let set = |k: &str, rest: &str| {
                let values = rest.trim().trim_start_matches('(').trim_end_matches(')');
                let value = labels[k.trim()].as_str();
                value.is_some_and(|v| values.split(',').any(|w| w.trim() == v))
            };
            if let Some((k, rest)) = t.split_once(" notin ") {
                !set(k, rest)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                set(k, rest)
            } else if let Some((k, v)) = t.split_once("!=") {
                labels[k].as_str() != Some(v)
            } else if let Some((k, v)) = t.split_once('=') {
                labels[k].as_str() == Some(v)
            } else if let Some(k) = t.strip_prefix('!') {
                labels.get(k).is_none()
            } else {
                labels.get(t).is_some()
            }
        })
}

/// Percent-decodes a query value.
fn decode(v: &str) -> String {
    let mut out = Vec::new();
    let b = v.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1..i + 3)) {
            (b'%', Some(h)) => {
                let hex = std::str::from_utf8(h).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
