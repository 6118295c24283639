//! The console's playground, against the khai that `console.rs` runs: an edited script gives
//! the plan expected (the Service's port changed, nothing else), a child the API server refuses
//! (a Deployment with negative replicas) shows as refused by the dry run, nothing is written,
//! and a cross-site or non-JSON POST is refused.

use http_body_util::Full;
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use serde_json::{Value, json};

/// POSTs `body` to `/api/playground` on `addr` with `headers`; the status and the JSON answer.
async fn post(addr: &str, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
    let mut req = hyper::Request::post("/api/playground").header("host", addr);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let (status, body) = super::console::send(addr, req).await;
    (status, serde_json::from_str(&body).unwrap())
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// Runs the playground checks against the console at `addr`, whose `cache` controller holds
/// the Cache `sessions` in `namespace`; returns the script text it started from.
pub(crate) async fn check(addr: &str, client: &kube::Client, namespace: &str) -> String {
    let source = super::console::get_json(addr, "/api/playground/cache").await;
    assert_eq!(source["key"], "scripts__cache.rhai", "{source}");
    let text = source["text"].as_str().unwrap().to_string();
    let edited = text.replace("port: 6379, targetPort", "port: 6380, targetPort");
    assert_ne!(
        edited, text,
        "the example's Service port moved; update the test"
    );
    let play = |script: &str| json!({"controller": "cache", "namespace": namespace, "name": "sessions", "script": script});

    let (status, answer) = post(addr, &[JSON], &play(&edited)).await;
    assert_eq!(status, 200, "{answer}");
    let children = answer["object"]["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "only the Service changes: {answer}");
    let service = &children[0];
    assert_eq!(
        (&service["kind"], &service["action"], &service["refused"]),
        (&json!("Service"), &json!("change"), &Value::Null),
        "{answer}"
    );
    assert!(
        service["diff"]
            .as_str()
            .unwrap()
            .contains("+    port: 6380"),
        "{answer}"
    );

    let invalid = text.replace("replicas: obj.spec.desired_size", "replicas: -1");
    let (status, answer) = post(addr, &[JSON], &play(&invalid)).await;
    assert_eq!(status, 200, "{answer}");
    let refused = answer["object"]["children"][0]["refused"]
        .as_str()
        .unwrap_or_else(|| panic!("the negative replicas should be refused: {answer}"));
    assert!(refused.contains("replicas"), "{refused}");

    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let live = services.get("sessions").await.unwrap();
    let port = live.spec.unwrap().ports.unwrap()[0].port;
    assert_eq!(port, 6379, "the playground wrote the Service");

    let (status, answer) = post(addr, &[JSON], &play("fn reconcile(obj, ctx) {")).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("does not compile"),
        "{answer}"
    );
    let (status, _) = post(
        addr,
        &[JSON, ("origin", "http://evil.example")],
        &play(&edited),
    )
    .await;
    assert_eq!(status, 403, "a cross-site POST is refused");
    let (status, _) = post(addr, &[("content-type", "text/plain")], &play(&edited)).await;
    assert_eq!(status, 415, "a non-JSON POST is refused");
    text
}
