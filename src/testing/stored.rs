//! Objects as the API server stores them, for `khai test`: CRD defaults filled in, and the
//! metadata a create sets (a namespace only for the kinds that live in one).

use super::DEFAULT_NAMESPACE;
use super::lookup::KindRef;
use super::problem::Problem;
use crate::config::model::{Crd, Scope};
use crate::operator::Operator;
use serde_json::{Value, json};

/// Whether `obj`'s kind lives in a namespace, as the config's CRDs and khai's table of built-in
/// kinds tell (`None`: a kind neither knows).
pub(super) fn namespaced(op: &Operator, obj: &Value) -> Option<bool> {
    match crd_of(op, obj) {
        Some(crd) => Some(crd.scope == Scope::Namespaced),
        None => KindRef::of(obj).builtin().map(|b| b.namespaced),
    }
}

/// The CRD of this config that declares `obj`'s kind, if any.
pub(super) fn crd_of<'a>(op: &'a Operator, obj: &Value) -> Option<&'a Crd> {
    let kind = KindRef::of(obj);
    op.config.model.crds.iter().find(|c| {
        c.kind == kind.kind
            && kind.group.as_deref() == Some(c.group.as_str())
            && c.versions
                .iter()
                .any(|v| Some(v.name()) == kind.version.as_deref())
    })
}

/// `obj` as the API server would store and serve it: CRD defaults filled in, and the metadata a
/// create sets when absent (namespace `default` or `namespace`, `uid`, `generation: 1`).
pub(super) fn stored(
    op: &Operator,
    obj: &Value,
    namespace: Option<&str>,
) -> Result<Value, Problem> {
    let mut out = defaulted(op, obj, namespace)?;
    if let Some(meta) = out["metadata"].as_object_mut() {
        let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
        let uid = format!("uid-{name}");
        meta.entry("uid").or_insert_with(|| json!(uid));
        meta.entry("generation").or_insert_with(|| json!(1));
    }
    Ok(out)
}

/// `obj` as the API server decodes it, before admission: CRD defaults filled in, no
/// `managedFields`, and a namespaced object in `namespace` (else `default`) when it names none.
pub(super) fn defaulted(
    op: &Operator,
    obj: &Value,
    namespace: Option<&str>,
) -> Result<Value, Problem> {
    let mut out = obj.clone();
    let crd = crd_of(op, obj);
    if let Some(crd) = crd {
        crate::schema::default_object(crd, &mut out).map_err(Problem::Default)?;
    }
    let cluster_scoped = namespaced(op, obj) == Some(false);
    let meta = out["metadata"].as_object_mut().ok_or(Problem::NoMetadata)?;
    meta.remove("managedFields");
    if !cluster_scoped && !meta.contains_key("namespace") {
        meta.insert(
            "namespace".into(),
            json!(namespace.unwrap_or(DEFAULT_NAMESPACE)),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::testing::case;
    use crate::testing::stubbed::Stubbed;
    use crate::testing::tests::load_operator;
    use std::path::Path;

    #[test]
    fn a_cluster_scoped_object_and_the_calls_made_for_it_get_no_namespace() {
        let toml = "[operator]\nname = \"t\"\nuses = [{ kind = \"v1/Namespace\", verbs = [\"patch\"] }]\n\n\
                    [[controller]]\nfor = \"v1/Namespace\"\nscript = \"ns.rhai\"\n";
        let script = "fn reconcile(obj, ctx) {\n\
                      \x20   k8s::annotate(obj, #{ seen: \"yes\" });\n\
                      \x20   #{ status: #{ namespaced: \"namespace\" in obj.metadata, ctx: ctx.namespace == () } }\n}\n";
        let (_dir, op) = load_operator(toml, "ns.rhai", script);
        let c = case::parse(
            Path::new("tests/c.yaml"),
            "object: { apiVersion: v1, kind: Namespace, metadata: { name: team-a } }\n\
             calls:\n  - request: { call: k8s::patch, kind: v1/Namespace, name: team-a }\n\
             expect: { status: { namespaced: false, ctx: true } }\n",
        )
        .unwrap();
        let stubbed = Stubbed::new(&op, &c).unwrap();
        let found = super::super::reconcile_case::run_reconcile(&op, &c, &stubbed).unwrap();
        assert!(found.is_empty(), "{found:?}");
        let made = stubbed.stubs.made();
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].get("namespace"), None, "{}", made[0]);
    }

    #[test]
    fn a_write_whose_answer_a_reconcile_returns_by_accident_fails_as_it_does_live() {
        let toml = "[operator]\nname = \"t\"\nuses = [{ kind = \"v1/ConfigMap\", verbs = [\"apply\"] }]\n\n\
                    [[controller]]\nfor = \"v1/Namespace\"\nscript = \"ns.rhai\"\n";
        // No `;` after the call: its answer, the ConfigMap, is what reconcile returns.
        let script = "fn reconcile(obj, ctx) {\n\
                      \x20   k8s::apply(#{ apiVersion: \"v1\", kind: \"ConfigMap\", metadata: #{ name: \"seed\", namespace: obj.metadata.name } })\n}\n";
        let (_dir, op) = load_operator(toml, "ns.rhai", script);
        let c = case::parse(
            Path::new("tests/c.yaml"),
            "object: { apiVersion: v1, kind: Namespace, metadata: { name: team-a } }\n\
             calls:\n  - request: { call: k8s::apply, name: seed }\n\
             expect: { error: \"reconcile returned an invalid result\" }\n",
        )
        .unwrap();
        let found = crate::testing::run_case(&op, &c).unwrap();
        assert!(found.is_empty(), "{found:?}");
    }
}
