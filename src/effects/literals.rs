//! What `khai check` compares with `[operator.http] allow` and `[operator] secrets`: the
//! `http::…("<url>", …)` calls and `ctx.secret("<name>", …)` reads of a script whose URL or
//! name is a string literal, found in its compiled AST. Computed URLs and names cannot be
//! checked; they are refused at run time all the same.

use crate::config::Model;
use rhai::{AST, ASTNode, Expr, FnCallExpr, Position, Stmt};

/// The `http` functions whose first argument is the URL (`request` takes a map).
const URL_FIRST: &[&str] = &["get", "post", "put", "patch", "delete"];

/// One problem, at its place in the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// The literal `http::…` URLs and `ctx.secret` names in `ast` that the config does not allow,
/// in the order they appear.
pub(crate) fn refused(model: &Model, ast: &AST) -> Vec<Finding> {
    let policy = super::http::policy::Policy::new(model.operator.http.allow.clone());
    let secrets = &model.operator.secrets;
    let mut out = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        let (f, pos, method): (&FnCallExpr, &Position, bool) = match path.last() {
            Some(ASTNode::Expr(Expr::FnCall(f, pos))) => (f, pos, false),
            Some(ASTNode::Stmt(Stmt::FnCall(f, pos))) => (f, pos, false),
            Some(ASTNode::Expr(Expr::MethodCall(f, pos))) => (f, pos, true),
            _ => return true,
        };
        let literal = |i: usize| match f.args.get(i) {
            Some(Expr::StringConstant(s, _)) => Some(s.to_string()),
            _ => None,
        };
        let message =
            if !method && f.namespace.to_string() == "http" && URL_FIRST.contains(&f.name.as_str())
            {
                literal(0).and_then(|url| {
                    let checked = super::http::policy::Policy::url(&url)
                        .and_then(|u| policy.target(&u).map(|_| ()));
                    checked
                        .err()
                        .map(|e| format!("http::{}(\"{url}\", …): {}", f.name, e.message))
                })
            } else if method && f.name.as_str() == "secret" {
                match f.args.len() {
                2 => literal(0).filter(|name| {
                    !secrets
                        .iter()
                        .any(|s| s.name == *name || s.name == crate::config::http::ANY_SECRET)
                }).map(
                    |name| {
                        format!(
                            "ctx.secret(\"{name}\", …): [operator] secrets does not name it (add \
                             \"{name}\"), so scripts cannot read it"
                        )
                    },
                ),
                3 => match (literal(0), literal(1)) {
                    (Some(ns), Some(name))
                        if !super::secrets::Secrets::lists(secrets, &ns, &name) =>
                    {
                        Some(format!(
                            "ctx.secret(\"{ns}\", \"{name}\", …): [operator] secrets does not \
                             name it (add \"{ns}/{name}\"), so scripts cannot read it"
                        ))
                    }
                    _ => None,
                },
                _ => None,
            }
            } else {
                None
            };
        if let Some(message) = message {
            out.push(Finding {
                line: pos.line().unwrap_or(0),
                column: pos.position().unwrap_or(0),
                message,
            });
        }
        true
    });
    out.sort_by_key(|c| (c.line, c.column));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn literal_urls_outside_the_allow_list_and_unnamed_secrets_are_found_at_their_lines() {
        let model = crate::config::parse(
            Path::new("operator.toml"),
            "[operator]\nsecrets = [\"creds\", \"shop/stripe\"]\n\n[operator.http]\nallow = [\"api.example.com\"]\n",
        )
        .unwrap();
        let src = concat!(
            "fn reconcile(obj, ctx) {\n",
            "  http::get(\"https://api.example.com/a\");\n",
            "  http::post(\"https://evil.example.net/x\", #{});\n",
            "  let u = \"http://169.254.169.254/\"; http::get(u);\n",
            "  http::delete(`https://other.example.org/${obj.id}`);\n",
            "  ctx.secret(\"creds\", \"t\"); ctx.secret(\"nope\", \"t\");\n",
            "  ctx.secret(\"shop\", \"stripe\", \"k\"); ctx.secret(\"other\", \"stripe\", \"k\");\n",
            "}\n",
        );
        let ast = rhai::Engine::new().compile(src).unwrap();
        let found: Vec<String> = refused(&model, &ast)
            .into_iter()
            .map(|f| format!("{}: {}", f.line, f.message))
            .collect();
        assert_eq!(
            found,
            [
                "3: http::post(\"https://evil.example.net/x\", …): evil.example.net:443 is not in [operator.http] allow",
                "6: ctx.secret(\"nope\", …): [operator] secrets does not name it (add \"nope\"), so scripts cannot read it",
                "7: ctx.secret(\"other\", \"stripe\", …): [operator] secrets does not name it (add \"other/stripe\"), so scripts cannot read it",
            ]
        );
    }
}
