//! End to end: replicas of one self-signed webhook operator share one CA through the Secret
//! `khai-<operator>-webhook-tls` in khai's own namespace, so the caBundle installed is the same
//! whichever replica installed last, the API server trusts every replica, and a restart over
//! that steady state writes nothing: not the configuration, the CRD's conversion or the Secret.

use crate::support::audit;
use crate::support::gadget::{wait_until_refused, write_refusing_operator};
use crate::support::{JSON_LOG, Khai, TestNamespace, custom_api, wait_for_crd};
use crate::webhooks::Registered;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const NAME: &str = "khai-sharedca";
const REFUSED: &str = "refused by a replica";

#[tokio::test]
async fn replicas_share_one_self_signed_ca_and_a_restart_writes_nothing() {
    let client = crate::support::client().await;
    let ns = TestNamespace::new(&client, "sharedca").await;
    let group = "sharedca.khai.dev";
    let dir = tempfile::tempdir().unwrap();
    // The CRD converts through the webhook too, so its `spec.conversion` is installed as well.
    write_refusing_operator(dir.path(), "sharedca", group, REFUSED, true);
    let _registered = Registered(NAME);
    // Each replica binds a port of its own; the test namespace is khai's own (the Secret's).
    let start = |port: u16| {
        let (bind, url) = (
            format!("127.0.0.1:{port}"),
            format!("https://127.0.0.1:{port}"),
        );
        let mut args = vec!["--webhook-bind", &bind, "--webhook-url", &url];
        args.extend(["--leader-elect-namespace", &ns.name]);
        args.extend(JSON_LOG);
        Khai::start(dir.path(), &ns.name, &args)
    };
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let installed = || async {
        let c = configs.get(NAME).await.unwrap();
        let cc = c.webhooks.unwrap()[0].client_config.clone();
        (
            String::from_utf8(cc.ca_bundle.unwrap().0).unwrap(),
            cc.url.unwrap(),
        )
    };
    let gadgets = custom_api(&client, &ns.name, group, "Gadget", "gadgets");
    let refused = |what: &'static str| wait_until_refused(&gadgets, group, REFUSED, what);

    let one = start(0);
    one.wait_for_webhooks_installed(0, "the first replica's install")
        .await;
    let port_one = one.listening_port("webhook").await;
    wait_for_crd(&client, &format!("gadgets.{group}")).await;
    let (bundle, _) = installed().await;

    let two = start(0);
    two.wait_for_webhooks_installed(0, "the second replica's install")
        .await;
    let port_two = two.listening_port("webhook").await;
    let (bundle_two, url_two) = installed().await;
    assert!(url_two.contains(&format!(":{port_two}/")), "{url_two}");
    assert_eq!(
        bundle_two, bundle,
        "the second replica installed another caBundle"
    );
    refused("the API server to call the second replica").await;

    // With the second replica gone, the configuration pointed at the first: the API server
    // trusts its certificate too.
    two.terminate().await;
    let point = |url: String| {
        let patch =
            json!([{ "op": "replace", "path": "/webhooks/0/clientConfig/url", "value": url }]);
        let configs = configs.clone();
        async move {
            let patch = Patch::Json::<()>(serde_json::from_value(patch).unwrap());
            configs
                .patch(NAME, &PatchParams::default(), &patch)
                .await
                .unwrap();
        }
    };
    let url_one = url_two.replace(&format!(":{port_two}/"), &format!(":{port_one}/"));
    point(url_one).await;
    refused("the API server to call the first replica").await;

    // Back to what the second replica installed; it restarts on its port (free since it
    // exited) and finds the Secret and the configuration as it would make them.
    point(url_two).await;
    one.terminate().await;
    let mark = audit::mark();
    let three = start(port_two);
    let done = json!({ "message": "webhook configurations installed", "written": 0 });
    three
        .wait_for_json_log(0, "the restart to find nothing to install", done)
        .await;
    refused("the API server to call the restarted replica").await;
    let test_write = |e: &serde_json::Value| {
        e["objectRef"]["resource"] == "gadgets" && e["objectRef"]["namespace"] == ns.name.as_str()
    };
    // The dry runs after the install, logged after its writes would have been.
    audit::wait_for_entry(mark, "the test's dry-run create", test_write).await;
    let crd = format!("gadgets.{group}");
    let writes = audit::writes(mark, |e| {
        let by_khai = e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("khai/"));
        let r = &e["objectRef"];
        let ours = [NAME, "khai-sharedca-webhook-tls", crd.as_str()];
        by_khai && ours.iter().any(|n| r["name"] == *n)
    });
    assert!(
        writes.is_empty(),
        "a restart over the steady state wrote {writes:?}"
    );
}
