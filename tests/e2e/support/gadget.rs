//! An operator whose one webhook refuses every Gadget, for tests of how the API server reaches
//! khai's webhook server: writing its files, and waiting until a dry-run create is refused.

use super::poll_until;
use kube::api::{Api, DynamicObject, PostParams};

/// Writes into `dir` an operator `name` with a Gadget CRD of `group` (`spec.n`) and a
/// `validate` webhook that refuses every Gadget with `message`; with `convert`, the CRD has
/// versions v1 and v2 and the webhook converts between them too (returning the object as is).
pub fn write_refusing_operator(
    dir: &std::path::Path,
    name: &str,
    group: &str,
    message: &str,
    convert: bool,
) {
    let (versions, converts) = if convert {
        (
            "{ name = \"v1\", storage = true }, { name = \"v2\" }",
            "convert = \"convert\"\n",
        )
    } else {
        ("\"v1\"", "")
    };
    let toml = format!(
        "[operator]\nname = \"{name}\"\n\n[[crd]]\ngroup = \"{group}\"\nkind = \"Gadget\"\n\
         versions = [{versions}]\nspec.n = {{ type = \"integer\" }}\n\n[[webhook]]\nfor = \"Gadget\"\n\
         script = \"w.rhai\"\nvalidate = \"validate\"\n{converts}"
    );
    std::fs::write(dir.join("operator.toml"), toml).unwrap();
    let script = format!(
        "fn validate(req) {{ deny({message:?}) }}\nfn convert(obj, to_version) {{ obj }}\n"
    );
    std::fs::write(dir.join("w.rhai"), script).unwrap();
}

/// Waits until a dry-run create of a Gadget of `group` through `gadgets` is refused with
/// `message`: the API server called the webhook over TLS its caBundle vouches for. The API
/// server reads webhook configurations from a watch, so a create may pass before it sees the
/// latest one: the dry run is repeated until refused.
pub async fn wait_until_refused(
    gadgets: &Api<DynamicObject>,
    group: &str,
    message: &str,
    what: &str,
) {
    let gadget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": { "name": "g" }, "spec": { "n": 1 },
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    poll_until(what, || async {
        match gadgets.create(&dry_run, &gadget).await {
            Err(kube::Error::Api(e)) => e.message.contains(message),
            _ => false,
        }
    })
    .await;
}
