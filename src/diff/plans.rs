//! How two plans for one object differ: the children and status fields a candidate revision
//! would write differently from the active one, as a [`Preview`] whose `before` is the active
//! plan's and `after` the candidate's, so a divergence is reported as `khai diff` reports a
//! change. No I/O.

use crate::apply::{ChildRef, ChildWrite, Preview, StatusChange};
use crate::reconcile::Plan;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

/// What `candidate` would write differently from `active` for `parent`: children it writes
/// differently or only it writes (`children`), children only `active` writes (`pruned`), and
/// status fields on which they differ (`before` the active's value, `after` the candidate's).
pub(crate) fn between(parent: &DynamicObject, active: &Plan, candidate: &Plan) -> Preview {
    let ns = parent.namespace();
    let id = |c: &Value| ChildRef {
        api_version: text(&c["apiVersion"]),
        kind: text(&c["kind"]),
        namespace: c["metadata"]["namespace"]
            .as_str()
            .map(str::to_string)
            .or_else(|| ns.clone()),
        name: text(&c["metadata"]["name"]),
    };
    let theirs: Vec<(ChildRef, &Value)> = active.children.iter().map(|c| (id(c), c)).collect();
    let mut preview = Preview::default();
    for child in &candidate.children {
        let key = id(child);
        let before = theirs.iter().find(|(k, _)| *k == key).map(|(_, c)| *c);
        if before == Some(child) {
            preview.unchanged += 1;
            continue;
        }
        preview.children.push(ChildWrite {
            id: key,
            before: before.cloned(),
            after: child.clone(),
            refused: None,
        });
    }
    let ours: Vec<ChildRef> = candidate.children.iter().map(id).collect();
    preview.pruned = theirs
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| !ours.contains(k))
        .collect();
    let empty = serde_json::Map::new();
    let (a, c) = (
        active.status.as_ref().unwrap_or(&empty),
        candidate.status.as_ref().unwrap_or(&empty),
    );
    let fields = c.keys().chain(a.keys().filter(|k| !c.contains_key(*k)));
    for field in fields {
        let (before, after) = (a.get(field), c.get(field));
        if !same_field(field, before, after) {
            preview.status.push(StatusChange {
                field: field.clone(),
                before: before.cloned(),
                after: after.cloned().unwrap_or(Value::Null),
            });
        }
    }
    preview
}

/// Whether two plans' values of a status field are the same. Conditions are compared without
/// their `lastTransitionTime`: each plan stamps a new condition with the second it was made in,
/// which two runs of one object need not share.
fn same_field(field: &str, a: Option<&Value>, b: Option<&Value>) -> bool {
    if field != "conditions" {
        return a == b;
    }
    let unstamped = |v: Option<&Value>| {
        v.cloned().map(|mut v| {
            for c in v.as_array_mut().into_iter().flatten() {
                if let Some(c) = c.as_object_mut() {
                    c.remove("lastTransitionTime");
                }
            }
            v
        })
    };
    unstamped(a) == unstamped(b)
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parent() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Cache",
            "metadata": { "name": "c", "namespace": "ns" },
        }))
        .unwrap()
    }

    fn plan(children: Vec<Value>, status: Value) -> Plan {
        Plan {
            children,
            status: status.as_object().cloned(),
            requeue_after: None,
            events: Vec::new(),
        }
    }

    fn cm(name: &str, size: &str) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": name }, "data": { "size": size } })
    }

    #[test]
    fn equal_plans_do_not_diverge() {
        let p = plan(vec![cm("a", "1")], json!({ "phase": "Ready" }));
        let d = between(&parent(), &p, &p);
        assert!(d.children.is_empty() && d.pruned.is_empty() && d.status.is_empty());
        assert_eq!(d.unchanged, 1);
    }

    #[test]
    fn conditions_stamped_in_another_second_do_not_diverge() {
        let ready = |at: &str| json!({ "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": at }] });
        let (a, c) = (plan(vec![], ready("t1")), plan(vec![], ready("t2")));
        assert!(between(&parent(), &a, &c).status.is_empty());
        let failing = json!({ "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": "t2" }] });
        let d = between(&parent(), &a, &plan(vec![], failing));
        assert_eq!(d.status.len(), 1);
    }

    #[test]
    fn a_changed_added_and_dropped_child_and_a_status_field_are_each_named() {
        let active = plan(
            vec![cm("a", "1"), cm("b", "1")],
            json!({ "phase": "Ready" }),
        );
        let candidate = plan(vec![cm("a", "2"), cm("c", "1")], json!({ "phase": "Big" }));
        let d = between(&parent(), &active, &candidate);
        let names: Vec<(&str, bool)> = d
            .children
            .iter()
            .map(|c| (c.id.name.as_str(), c.before.is_some()))
            .collect();
        assert_eq!(names, [("a", true), ("c", false)]);
        assert_eq!(d.children[0].before, Some(cm("a", "1")));
        assert_eq!(d.children[0].id.namespace.as_deref(), Some("ns"));
        assert_eq!(d.pruned.len(), 1);
        assert_eq!(d.pruned[0].name, "b");
        assert_eq!(
            d.status,
            [StatusChange {
                field: "phase".into(),
                before: Some(json!("Ready")),
                after: json!("Big"),
            }]
        );
    }
}
