//! The Widget several e2e tests reconcile: its `[[crd]]` table, its API, and creating one.

use super::{custom_api, wait_for_crd};
use kube::api::{Api, DynamicObject, PostParams};

/// The `[[crd]]` table of the Widget several tests reconcile: namespaced, `group`/v1, with
/// `spec.message` (default "ok") and `status.phase`.
pub fn widget_crd(group: &str) -> String {
    format!(
        "[[crd]]\ngroup = \"{group}\"\nkind = \"Widget\"\nversions = [\"v1\"]\n\
         spec.message = {{ type = \"string\", default = \"ok\" }}\n\
         status.phase = {{ type = \"string\" }}\n"
    )
}

/// The Widgets ([`widget_crd`]) of `group` in `ns`.
pub fn widgets(client: &kube::Client, group: &str, ns: &str) -> Api<DynamicObject> {
    custom_api(client, ns, group, "Widget", "widgets")
}

/// Creates Widget `name` of `group` with `spec.message = message`, once its CRD is established.
pub async fn create_widget(api: &Api<DynamicObject>, group: &str, name: &str, message: &str) {
    wait_for_crd(&api.clone().into_client(), &format!("widgets.{group}")).await;
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": name }, "spec": { "message": message },
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create widget {name}: {e}"));
}
