//! What `khai check` compares with `[operator] uses`: the `k8s::<verb>("<kind>", …)` calls of
//! a script whose kind is a string literal, and the `k8s::<verb>(#{ apiVersion, kind, … })`
//! calls whose object is a map literal with both as strings, found in its compiled AST.

use crate::config::Model;
use crate::config::kind::KindRef;
use rhai::{AST, ASTNode, Expr, FnCallExpr, Position, Stmt};

/// The verbs whose first argument is a kind.
const KIND_FIRST: &[&str] = &["get", "list", "patch", "patch_status", "delete"];

/// The verbs whose first argument is an object.
const OBJECT_FIRST: &[&str] = &[
    "create",
    "apply",
    "replace",
    "patch",
    "patch_status",
    "delete",
];

/// One `k8s::<verb>("<kind>", …)` call in a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub verb: String,
    pub kind: String,
    pub line: usize,
    pub column: usize,
}

/// The `k8s::<verb>("<kind>", …)` calls in `ast`, in the order they appear.
pub(crate) fn calls(ast: &AST) -> Vec<Call> {
    let mut out = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        let call: Option<(&FnCallExpr, &Position)> = match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(f, pos))) => Some((f, pos)),
            Some(ASTNode::Stmt(Stmt::FnCall(f, pos))) => Some((f, pos)),
            _ => None,
        };
        if let Some((f, pos)) = call
            && f.namespace.to_string() == "k8s"
            && let Some(kind) = literal_kind(f)
        {
            out.push(Call {
                verb: f.name.to_string(),
                kind,
                line: pos.line().unwrap_or(0),
                column: pos.position().unwrap_or(0),
            });
        }
        true
    });
    out.sort_by_key(|c| (c.line, c.column));
    out
}

/// The kind a `k8s::` call names in literals: its first argument, a string, or an object
/// written as a map literal whose `apiVersion` and `kind` are strings (`v1/ConfigMap`).
fn literal_kind(f: &FnCallExpr) -> Option<String> {
    let verb = f.name.as_str();
    match f.args.first()? {
        Expr::StringConstant(kind, _) if KIND_FIRST.contains(&verb) => Some(kind.to_string()),
        Expr::Map(m, _) if OBJECT_FIRST.contains(&verb) => {
            let text = |key: &str| {
                m.0.iter()
                    .find(|(k, _)| k.as_str() == key)
                    .and_then(|(_, v)| match v {
                        Expr::StringConstant(s, _) => Some(s.to_string()),
                        _ => None,
                    })
            };
            Some(format!("{}/{}", text("apiVersion")?, text("kind")?))
        }
        Expr::DynamicConstant(v, _) if OBJECT_FIRST.contains(&verb) => {
            let m = v.read_lock::<rhai::Map>()?;
            let text = |key: &str| m.get(key)?.clone().into_immutable_string().ok();
            Some(format!("{}/{}", text("apiVersion")?, text("kind")?))
        }
        _ => None,
    }
}

/// Why `call` is not covered by `[operator] uses`, if it is not.
pub(crate) fn undeclared(model: &Model, call: &Call) -> Option<String> {
    let Ok(written) = call.kind.parse::<KindRef>() else {
        return Some(format!("{:?} is not a kind", call.kind));
    };
    let written = model.complete_kind(&written);
    let declared =
        model.operator.uses.iter().any(|u| {
            model.complete_kind(&u.kind).compatible(&written) && u.verbs.contains(&call.verb)
        });
    (!declared).then(|| {
        format!(
            "k8s::{}(\"{}\", …): [operator] uses does not declare {} on {} (add {{ kind = \"{}\", \
             verbs = [\"{}\"] }}), so the generated RBAC does not grant it",
            call.verb, call.kind, call.verb, call.kind, call.kind, call.verb
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_kinds_of_k8s_calls_are_found_with_their_lines() {
        let engine = crate::script::engine(&crate::script::Limits::default());
        let ast = engine
            .compile(
                "fn reconcile(obj, ctx) {\n  let k = \"v1/Secret\";\n  k8s::get(\"v1/Pod\", \"a\", \"b\");\n  k8s::list(k);\n  k8s::patch(\"ConfigMap\", \"a\", \"b\", #{});\n  k8s::replace(#{ apiVersion: \"apps/v1\", kind: \"Deployment\", metadata: obj.metadata });\n  k8s::create(#{ apiVersion: \"v1\", kind: \"Secret\", metadata: #{ name: \"x\" } });\n  k8s::apply(obj);\n}\n",
            )
            .unwrap();
        let found: Vec<_> = calls(&ast)
            .into_iter()
            .map(|c| (c.verb, c.kind, c.line))
            .collect();
        assert_eq!(
            found,
            [
                ("get".to_string(), "v1/Pod".to_string(), 3),
                ("patch".to_string(), "ConfigMap".to_string(), 5),
                ("replace".to_string(), "apps/v1/Deployment".to_string(), 6),
                ("create".to_string(), "v1/Secret".to_string(), 7),
            ]
        );
    }

    #[test]
    fn a_call_is_declared_by_a_compatible_kind_and_its_verb() {
        let src = "[operator]\nuses = [{ kind = \"v1/Pod\", verbs = [\"get\"] }]\n";
        let model = crate::config::parse(std::path::Path::new("operator.toml"), src).unwrap();
        let call = |verb: &str, kind: &str| Call {
            verb: verb.into(),
            kind: kind.into(),
            line: 1,
            column: 1,
        };
        assert_eq!(undeclared(&model, &call("get", "Pod")), None);
        assert_eq!(undeclared(&model, &call("get", "v1/Pod")), None);
        let m = undeclared(&model, &call("delete", "v1/Pod")).unwrap();
        assert!(
            m.starts_with(
                "k8s::delete(\"v1/Pod\", …): [operator] uses does not declare delete on v1/Pod"
            ),
            "{m}"
        );
        assert!(undeclared(&model, &call("get", "v1/Secret")).is_some());
    }
}
