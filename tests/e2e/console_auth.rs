//! End to end: `khai run --console` off loopback (`0.0.0.0`) asks for a bearer token on every API
//! request and has the API server review it, with real ServiceAccount tokens from the TokenRequest
//! API: none is 401, an unknown one 401, a ServiceAccount with no grant 403, one granted `get` on
//! the console's non-resource URL reads it but may not run the playground (403). The page itself
//! is served to anyone, and in a real headless browser asks for a token and then works with it
//! (tests/e2e/console_token.js).

use crate::support::{DEADLINE, Khai, TestNamespace, example_copy, poll_until};
use http_body_util::{Empty, Full};
use hyper::body::Bytes;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut req = hyper::Request::get(path).header("host", addr);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    super::console::send(addr, req.body(Empty::<Bytes>::new()).unwrap()).await
}

async fn token(client: &kube::Client, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let made = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    made.status.unwrap().token
}

#[tokio::test]
async fn off_loopback_the_console_needs_a_token_the_api_server_authorizes() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "console-auth").await;
    let dir = tempfile::tempdir().unwrap();
    let config = example_copy("hello", dir.path(), "consoleauth", "consoleauth.khai.dev");
    let khai = Khai::start(&config, &ns.name, &["--console", "0.0.0.0:0"]);
    let logged = khai.listening("console").await;
    let addr = logged.replace("0.0.0.0", "127.0.0.1");

    let (status, page) = get(&addr, "/", None).await;
    assert_eq!(status, 200, "the page holds no data and needs no token");
    assert!(page.contains("app.js"));
    let (status, body) = get(&addr, "/api/overview", None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let (status, _) = get(&addr, "/api/overview", Some("not-a-token")).await;
    assert_eq!(status, 401);

    let viewer = token(&client, &ns.name, "viewer").await;
    let stranger = token(&client, &ns.name, "stranger").await;
    let role_name = format!("khai-console-{}", ns.name);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "rules": [{"nonResourceURLs": ["/khai/consoleauth/console"], "verbs": ["get"]}],
    }))
    .unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": role_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": ns.name}],
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The API server's authorizer follows RBAC through its own cache: wait until it allows.
    let user = format!("system:serviceaccount:{}:viewer", ns.name);
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    poll_until("the viewer's grant to reach the authorizer", || async {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/khai/consoleauth/console".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let r = reviews.create(&PostParams::default(), &sar).await.unwrap();
        r.status.is_some_and(|s| s.allowed)
    })
    .await;

    let (status, body) = get(&addr, "/api/overview", Some(&viewer)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("consoleauth"), "{body}");
    let (status, body) = get(&addr, "/api/overview", Some(&stranger)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(&format!(
            "system:serviceaccount:{}:stranger may not get /khai/consoleauth/console",
            ns.name
        )),
        "{body}"
    );
    let play = hyper::Request::post("/api/playground")
        .header("host", &addr)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {viewer}"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let (status, body) = super::console::send(&addr, play).await;
    assert_eq!(status, 403, "reading does not grant the playground: {body}");
    assert!(
        body.contains("may not post /khai/consoleauth/console/playground"),
        "{body}"
    );

    if let Some((playwright, chromium)) = super::console::browser() {
        let out = std::process::Command::new("node")
            .arg(crate::support::repo_root().join("tests/e2e/console_token.js"))
            .env("PLAYWRIGHT", &playwright)
            .env("CHROMIUM", &chromium)
            .env("URL", format!("http://{addr}/"))
            .env("TOKEN", &viewer)
            .env("OPERATOR", "consoleauth")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the page did not take the token: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen["problems"], json!([]), "the page logged errors");
    }

    let gone = DeleteParams::default();
    let _ = tokio::time::timeout(DEADLINE, async {
        bindings.delete(&role_name, &gone).await.unwrap();
        roles.delete(&role_name, &gone).await.unwrap();
    })
    .await;
}
