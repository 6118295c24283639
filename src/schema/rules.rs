//! Evaluates a CRD's CEL validation rules on an object offline, as the API server does before
//! it stores the object, for `khai test`.
//!
//! Each rule runs with `self` bound to its node's value (and `oldSelf` to the node's value in the
//! old object, for a transition rule on an update). A rule runs only where its node has a value,
//! as on the server. What the CEL crate cannot evaluate (Kubernetes' own CEL libraries such as
//! `quantity()` or `isSorted()`) is skipped, never reported as a violation.

use crate::config::model::{Crd, Field, Rule};
use indexmap::IndexMap;
use serde_json::{Value, json};

/// `x-kubernetes-validations` of a node: its CEL rules, in the API server's spelling; `None`
/// without rules.
pub(super) fn validations(rules: &[Rule]) -> Option<Value> {
    if rules.is_empty() {
        return None;
    }
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| {
            let mut v = json!({ "rule": r.rule });
            let opt = [
                ("message", r.message.as_ref().map(|m| json!(m))),
                (
                    "messageExpression",
                    r.message_expression.as_ref().map(|m| json!(m)),
                ),
                ("reason", r.reason.map(|m| json!(m))),
                ("fieldPath", r.field_path.as_ref().map(|m| json!(m))),
                ("optionalOldSelf", r.optional_old_self.map(|m| json!(m))),
            ];
            for (k, x) in opt {
                if let Some(x) = x {
                    v[k] = x;
                }
            }
            v
        })
        .collect();
    Some(Value::Array(rules))
}

/// A rule the object breaks: where, and the API server's message for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Violation {
    /// The node's path in the object, as the API server writes it (`spec.range`).
    pub(crate) path: String,
    pub(crate) message: String,
}

/// The first rule of `crd` that `object` breaks, given the `old` object of an update.
pub(crate) fn first_violation(crd: &Crd, object: &Value, old: Option<&Value>) -> Option<Violation> {
    let mut out = None;
    let root = Node {
        path: String::new(),
        new: object,
        old,
    };
    check_rules(&crd.rules, &root, &mut out);
    let parts = [("spec", Some(&crd.spec)), ("status", crd.status.as_ref())];
    for (name, fields) in parts {
        if let Some(fields) = fields {
            walk_object(fields, &root.child(name), &mut out);
        }
    }
    out
}

/// A node of the object being checked, with its value in the old object if any.
struct Node<'a> {
    path: String,
    new: &'a Value,
    old: Option<&'a Value>,
}

impl<'a> Node<'a> {
    fn child(&self, key: &str) -> Node<'a> {
        Node {
            path: if self.path.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.path)
            },
            new: &self.new[key],
            old: self.old.map(|o| &o[key]).filter(|o| !o.is_null()),
        }
    }
}

fn walk_object(fields: &IndexMap<String, Field>, node: &Node, out: &mut Option<Violation>) {
    for (name, f) in fields {
        walk(f, &node.child(name), out);
    }
}

fn walk(f: &Field, node: &Node, out: &mut Option<Violation>) {
    if out.is_some() || node.new.is_null() {
        return;
    }
    check_rules(&f.rules, node, out);
    if let Some(props) = &f.properties {
        walk_object(props, node, out);
    }
    if let (Some(items), Some(list)) = (&f.items, node.new.as_array()) {
        for (i, v) in list.iter().enumerate() {
            // An item has no old value to compare with: lists are not correlated by position.
            let item = Node {
                path: format!("{}[{i}]", node.path),
                new: v,
                old: None,
            };
            walk(items, &item, out);
        }
    }
    if let (Some(values), Some(map)) = (&f.values, node.new.as_object()) {
        for key in map.keys() {
            walk(values, &node.child(key), out);
        }
    }
}

fn check_rules(rules: &[Rule], node: &Node, out: &mut Option<Violation>) {
    for r in rules {
        if out.is_some() {
            return;
        }
        if let Some(message) = broken(r, node) {
            *out = Some(Violation {
                path: node.path.clone(),
                message,
            });
        }
    }
}

/// The message of `r` when it is false on `node`; `None` when it holds or cannot be evaluated.
fn broken(r: &Rule, node: &Node) -> Option<String> {
    let program = cel::Program::compile(&r.rule).ok()?;
    let transition = program.references().has_variable("oldSelf");
    if transition && node.old.is_none() {
        // A transition rule runs on updates only (unless optional_old_self, which khai does
        // not evaluate offline).
        return None;
    }
    let mut ctx = cel::Context::default();
    ctx.add_variable("self", to_cel(node.new)).ok()?;
    if let Some(old) = node.old {
        ctx.add_variable("oldSelf", to_cel(old)).ok()?;
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(false)) => {}
        _ => return None,
    }
    let from_expression =
        r.message_expression.as_deref().and_then(|e| {
            match cel::Program::compile(e).ok()?.execute(&ctx).ok()? {
                cel::Value::String(s) => Some(s.to_string()),
                _ => None,
            }
        });
    Some(
        from_expression
            .or_else(|| r.message.clone())
            .unwrap_or_else(|| format!("failed rule: {}", r.rule)),
    )
}

/// What `expr` gives with `vars` bound, when it is a boolean the CEL crate can compute; `None`
/// when it does not parse, fails, or is not a boolean.
pub(crate) fn evaluate_bool(expr: &str, vars: &[(&str, &Value)]) -> Option<bool> {
    let program = cel::Program::compile(expr).ok()?;
    let mut ctx = cel::Context::default();
    for (name, v) in vars {
        ctx.add_variable(*name, to_cel(v)).ok()?;
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Some(b),
        _ => None,
    }
}

/// A JSON value as the API server hands it to CEL: integers are `int` (int64), which
/// serde's own mapping would make `uint` when positive, so `self.max * 2` would not type.
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(std::sync::Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(std::sync::Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: std::collections::HashMap<String, cel::Value> =
                m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::Map(map.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(toml: &str) -> Crd {
        toml::from_str(toml).unwrap()
    }

    const RANGE: &str = r#"
group = "t.khai.dev"
kind = "Range"
versions = ["v1"]
rules = [{ rule = "self.metadata.name != 'forbidden'", message = "that name is taken" }]
spec.range = { type = "object", properties = { min = { type = "integer" }, max = { type = "integer" } }, rules = [
  { rule = "self.min <= self.max", message = "min must not exceed max" },
  { rule = "self.max <= oldSelf.max * 2", message_expression = "'max may at most double, to ' + string(oldSelf.max * 2)" },
] }
spec.tags = { type = "array", items = { type = "string", rules = [{ rule = "self.size() < 4" }] } }
"#;

    fn obj(name: &str, min: i64, max: i64, tags: Value) -> Value {
        json!({ "metadata": { "name": name }, "spec": { "range": { "min": min, "max": max }, "tags": tags } })
    }

    #[test]
    fn each_node_rule_is_evaluated_with_its_message() {
        let c = crd(RANGE);
        assert_eq!(first_violation(&c, &obj("a", 1, 2, json!([])), None), None);
        let v = first_violation(&c, &obj("a", 3, 2, json!([])), None).unwrap();
        assert_eq!(v.path, "spec.range");
        assert_eq!(v.message, "min must not exceed max");
        let v = first_violation(&c, &obj("forbidden", 1, 2, json!([])), None).unwrap();
        assert_eq!(
            (v.path.as_str(), v.message.as_str()),
            ("", "that name is taken")
        );
        let v = first_violation(&c, &obj("a", 1, 2, json!(["ok", "long"])), None).unwrap();
        assert_eq!(v.path, "spec.tags[1]");
        assert_eq!(v.message, "failed rule: self.size() < 4");
    }

    #[test]
    fn transition_rules_run_on_updates_only() {
        let c = crd(RANGE);
        let old = obj("a", 1, 2, json!([]));
        assert_eq!(first_violation(&c, &obj("a", 1, 9, json!([])), None), None);
        assert_eq!(
            first_violation(&c, &obj("a", 1, 4, json!([])), Some(&old)),
            None
        );
        let v = first_violation(&c, &obj("a", 1, 9, json!([])), Some(&old)).unwrap();
        assert_eq!(v.message, "max may at most double, to 4");
    }

    #[test]
    fn rules_and_selectable_fields_are_emitted_in_the_api_servers_spelling() {
        let mut c = crd(RANGE);
        c.selectable_fields = vec![".spec.range.min".into()];
        let m = crate::schema::crd_manifest(&c).unwrap();
        let v = &m["spec"]["versions"][0];
        let schema = &v["schema"]["openAPIV3Schema"];
        assert_eq!(
            schema["x-kubernetes-validations"],
            json!([{ "rule": "self.metadata.name != 'forbidden'", "message": "that name is taken" }])
        );
        assert_eq!(
            schema["properties"]["spec"]["properties"]["range"]["x-kubernetes-validations"][1],
            json!({ "rule": "self.max <= oldSelf.max * 2",
                    "messageExpression": "'max may at most double, to ' + string(oldSelf.max * 2)" })
        );
        assert_eq!(
            v["selectableFields"],
            json!([{ "jsonPath": ".spec.range.min" }])
        );
    }

    #[test]
    fn what_the_crate_cannot_evaluate_is_skipped() {
        let c = crd(
            "group = \"t.khai.dev\"\nkind = \"Q\"\nversions = [\"v1\"]\n\
             spec.size = { type = \"string\", rules = [{ rule = \"quantity(self).isGreaterThan(quantity('1Gi'))\" }] }\n",
        );
        let o = json!({ "spec": { "size": "1Mi" } });
        assert_eq!(first_violation(&c, &o, None), None);
    }
}
