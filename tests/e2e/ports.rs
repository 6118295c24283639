//! End to end: khai picks its own ports. Started with port 0 for every server it runs (metrics
//! and probes, webhooks, the console), it serves each on the address it logs (`listening`,
//! `address`), and registers its webhooks at the port it bound (`--webhook-url` port 0), so no
//! test has to pick a port and hand it over, losing it to another process in between.

use crate::support::gadget::{wait_until_refused, write_refusing_operator};
use crate::support::metrics::http_get;
use crate::support::{JSON_LOG, Khai, TestNamespace, custom_api, wait_for_crd};
use crate::webhooks::Registered;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;
use serde_json::json;

#[tokio::test]
async fn servers_bound_to_port_0_serve_on_the_addresses_khai_logs() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "ports").await;
    let group = "ports.khai.dev";
    let dir = tempfile::tempdir().unwrap();
    write_refusing_operator(
        dir.path(),
        "ports",
        group,
        "refused on the bound port",
        false,
    );
    let _registered = Registered("khai-ports");
    let mut args = vec![
        "--metrics-bind",
        "127.0.0.1:0",
        "--webhook-bind",
        "127.0.0.1:0",
        "--webhook-url",
        "https://127.0.0.1:0",
        "--console",
        "127.0.0.1:0",
    ];
    args.extend(JSON_LOG);
    let khai = Khai::start(dir.path(), &ns.name, &args);

    let mut addrs = Vec::new();
    for server in ["metrics", "webhook", "console"] {
        let line = khai
            .wait_for_json_log(0, server, json!({ "listening": server }))
            .await;
        let addr = line["address"].as_str().unwrap().to_string();
        assert!(
            !addr.ends_with(":0"),
            "{server} logged no bound port: {line}"
        );
        addrs.push(addr);
    }
    let [metrics, webhook, console] = &addrs[..] else {
        unreachable!()
    };
    assert_eq!(
        http_get(metrics, "/healthz").await.0,
        200,
        "metrics at {metrics}"
    );
    let (status, body) = http_get(console, "/api/overview").await;
    assert_eq!(status, 200, "console at {console}: {body}");

    // The configuration khai installed names the port it bound, and the API server reaches it.
    khai.wait_for_webhooks_installed(0, "the webhook configuration")
        .await;
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let installed = configs.get("khai-ports").await.unwrap();
    let url = installed.webhooks.unwrap()[0]
        .client_config
        .url
        .clone()
        .unwrap();
    assert!(
        url.starts_with(&format!("https://{webhook}/")),
        "{url} is not at {webhook}"
    );
    wait_for_crd(&client, &format!("gadgets.{group}")).await;
    let gadgets = custom_api(&client, &ns.name, group, "Gadget", "gadgets");
    wait_until_refused(
        &gadgets,
        group,
        "refused on the bound port",
        "the API server to call the webhook on its bound port",
    )
    .await;
}
