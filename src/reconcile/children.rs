//! Where each desired child goes, and which children khai refuses to apply.
//!
//! `khai run` and `khai test` both call [`place`], so a plan that one rejects the other rejects
//! too, with the same message. A child lands in its parent's namespace unless it names one; what
//! is refused is what Kubernetes itself would not honour or what khai could not keep up to date:
//!
//! - a child of a kind the controller does not `owns`: khai would not see it change, so it could
//!   neither skip unchanged writes nor prune it;
//! - a cluster-scoped child of a namespaced parent, or a child in another namespace than its
//!   namespaced parent: the API server accepts the ownerReference but garbage collection ignores
//!   it, so the child would never be cleaned up; unless the controller sets `unowned_children`,
//!   and then khai marks such a child with its owner label instead and cleans it up itself
//!   ([`unowned`]);
//! - a namespaced child of a cluster-scoped parent that names no namespace (there is no "parent's
//!   namespace" to put it in), or one in a namespace khai does not watch;
//! - a child that is its own parent, or the same object listed twice.

use serde_json::{Value, json};

/// The object a plan is for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parent<'a> {
    /// Group of the parent's kind (`""` for the core group).
    pub group: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    /// The parent's namespace; `None` when its kind is cluster-scoped.
    pub namespace: Option<&'a str>,
}

/// What the controller knows about the kinds it may create.
pub(crate) trait Kinds {
    /// Whether objects of `api_version`/`kind` live in namespaces; `None` for a kind the cluster
    /// (or, offline, khai) does not know, which counts as namespaced.
    fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool>;
    /// Whether the controller `owns` this kind (watches it for changes and pruning).
    fn owned(&self, api_version: &str, kind: &str) -> bool;
}

/// The identity of a placed child: apiVersion, kind, namespace (`None`: cluster-scoped), name.
pub(crate) type ChildKey = (String, String, Option<String>, String);

/// A child khai refuses to apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("children[{index}] ({kind} {name}): {problem}")]
pub struct Invalid {
    pub index: usize,
    pub kind: String,
    pub name: String,
    pub problem: String,
}

/// Whether a placed child of a parent in `parent_namespace` (`None`: cluster-scoped) cannot
/// carry an ownerReference to it: a cluster-scoped child or one in another namespace than its
/// namespaced parent.
pub(crate) fn unowned(parent_namespace: Option<&str>, key: &ChildKey) -> bool {
    parent_namespace.is_some_and(|p| key.2.as_deref() != Some(p))
}

/// Decides the namespace of every child of `parent` (setting `metadata.namespace` on namespaced
/// children that name none) and refuses the children khai must not apply. `namespaces` are the
/// namespaces khai watches; empty means all. `allow_unowned` (the controller's
/// `unowned_children`) lets through the children that cannot carry an ownerReference.
/// Children must already have `apiVersion`, `kind` and `metadata.name` (see
/// [`super::parse_plan`]).
pub(crate) fn place(
    children: &mut [Value],
    parent: Parent<'_>,
    kinds: &dyn Kinds,
    namespaces: &[String],
    allow_unowned: bool,
) -> Result<Vec<ChildKey>, Invalid> {
    let mut placed: Vec<ChildKey> = Vec::with_capacity(children.len());
    for (index, child) in children.iter_mut().enumerate() {
        let api_version = child["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = child["kind"].as_str().unwrap_or_default().to_string();
        let name = child["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let refuse = |problem: String| Invalid {
            index,
            kind: kind.clone(),
            name: name.clone(),
            problem,
        };
        if !kinds.owned(&api_version, &kind) {
            return Err(refuse(format!(
                "the controller does not own {api_version}/{kind}, so khai cannot tell whether \
                 the child is up to date or prune it; add \"{api_version}/{kind}\" to its `owns`"
            )));
        }
        let written_ns = child["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .map(str::to_string);
        let namespace = match (
            kinds.namespaced(&api_version, &kind).unwrap_or(true),
            parent.namespace,
        ) {
            (false, Some(_)) if !allow_unowned => {
                return Err(refuse(format!(
                    "a namespaced {} cannot own a cluster-scoped object: Kubernetes never \
                     garbage-collects it through such an ownerReference; set \
                     `unowned_children = true` on the controller to have khai track and delete \
                     it itself",
                    parent.kind
                )));
            }
            (false, _) => {
                if written_ns.is_some() {
                    return Err(refuse(format!(
                        "{kind} is cluster-scoped; remove metadata.namespace"
                    )));
                }
                None
            }
            (true, Some(parent_ns)) => {
                let ns = written_ns.unwrap_or_else(|| parent_ns.to_string());
                if ns != parent_ns && !allow_unowned {
                    return Err(refuse(format!(
                        "namespace {ns:?} differs from its owner's {parent_ns:?}; \
                         ownerReferences cannot cross namespaces; set \
                         `unowned_children = true` on the controller to have khai track and \
                         delete it itself"
                    )));
                }
                if ns != parent_ns && !namespaces.is_empty() && !namespaces.contains(&ns) {
                    return Err(refuse(format!(
                        "namespace {ns:?} is not watched by khai (it watches {})",
                        namespaces.join(", ")
                    )));
                }
                Some(ns)
            }
            (true, None) => {
                let Some(ns) = written_ns else {
                    return Err(refuse(format!(
                        "its parent {} is cluster-scoped, so the child must name its namespace \
                         (metadata.namespace)",
                        parent.kind
                    )));
                };
                if !namespaces.is_empty() && !namespaces.contains(&ns) {
                    return Err(refuse(format!(
                        "namespace {ns:?} is not watched by khai (it watches {})",
                        namespaces.join(", ")
                    )));
                }
                Some(ns)
            }
        };
        if let Some(ns) = &namespace {
            child["metadata"]["namespace"] = json!(ns);
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        if group == parent.group
            && kind == parent.kind
            && name == parent.name
            && namespace.as_deref() == parent.namespace
        {
            return Err(refuse(
                "a child cannot be its own parent (it would own itself)".into(),
            ));
        }
        let key = (api_version, kind.clone(), namespace, name.clone());
        if let Some(first) = placed.iter().position(|k| same_object(k, &key)) {
            return Err(refuse(format!(
                "the same object as children[{first}]; list each child once"
            )));
        }
        placed.push(key);
    }
    Ok(placed)
}

/// Whether two children name the same object (any version of the same group and kind).
fn same_object(a: &ChildKey, b: &ChildKey) -> bool {
    let group = |k: &ChildKey| {
        k.0.rsplit_once('/')
            .map_or(String::new(), |(g, _)| g.to_string())
    };
    group(a) == group(b) && a.1 == b.1 && a.2 == b.2 && a.3 == b.3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ConfigMap (namespaced) and ClusterRole (cluster-scoped) are owned; Secret is not.
    struct Table;

    impl Kinds for Table {
        fn namespaced(&self, _: &str, kind: &str) -> Option<bool> {
            match kind {
                "ClusterRole" | "Widget" => Some(false),
                "ConfigMap" | "Secret" => Some(true),
                _ => None,
            }
        }
        fn owned(&self, _: &str, kind: &str) -> bool {
            kind != "Secret"
        }
    }

    fn child(kind: &str, name: &str, ns: Option<&str>) -> Value {
        let api = if kind == "ClusterRole" {
            "rbac.authorization.k8s.io/v1"
        } else {
            "v1"
        };
        let mut c = json!({ "apiVersion": api, "kind": kind, "metadata": { "name": name } });
        if let Some(ns) = ns {
            c["metadata"]["namespace"] = json!(ns);
        }
        c
    }

    const NAMESPACED: Parent<'static> = Parent {
        group: "x.dev",
        kind: "App",
        name: "a",
        namespace: Some("team"),
    };
    const CLUSTER: Parent<'static> = Parent {
        group: "x.dev",
        kind: "Widget",
        name: "w",
        namespace: None,
    };

    fn problem(children: Vec<Value>, parent: Parent<'_>, namespaces: &[&str]) -> String {
        let ns: Vec<String> = namespaces.iter().map(|s| s.to_string()).collect();
        let mut children = children;
        place(&mut children, parent, &Table, &ns, false)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn children_of_a_namespaced_parent_land_in_its_namespace() {
        let mut c = vec![
            child("ConfigMap", "a", None),
            child("ConfigMap", "b", Some("team")),
        ];
        let keys = place(&mut c, NAMESPACED, &Table, &[], false).unwrap();
        assert_eq!(c[0]["metadata"]["namespace"], "team");
        assert_eq!(keys[1].2.as_deref(), Some("team"));
    }

    #[test]
    fn children_of_a_cluster_scoped_parent_name_their_namespace_or_are_cluster_scoped() {
        let mut c = vec![
            child("ConfigMap", "a", Some("one")),
            child("ConfigMap", "a", Some("two")),
            child("ClusterRole", "r", None),
        ];
        let keys = place(&mut c, CLUSTER, &Table, &[], false).unwrap();
        assert_eq!(
            keys.iter().map(|k| k.2.clone()).collect::<Vec<_>>(),
            [Some("one".into()), Some("two".into()), None]
        );
    }

    /// With `unowned_children`, a namespaced parent's cluster-scoped children and
    /// children in other (watched) namespaces are placed, and known as unowned.
    #[test]
    fn unowned_children_are_placed_when_the_controller_allows_them() {
        let mut c = vec![
            child("ClusterRole", "r", None),
            child("ConfigMap", "c", Some("other")),
            child("ConfigMap", "c", None),
        ];
        let keys = place(&mut c, NAMESPACED, &Table, &[], true).unwrap();
        let unowned: Vec<bool> = keys.iter().map(|k| unowned(Some("team"), k)).collect();
        assert_eq!(unowned, [true, true, false]);
        assert_eq!(keys[0].2, None);
        assert!(keys.iter().all(|k| !super::unowned(None, k)));
        let mut c = vec![child("ConfigMap", "c", Some("elsewhere"))];
        let err = place(&mut c, NAMESPACED, &Table, &["team".into()], true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "children[0] (ConfigMap c): namespace \"elsewhere\" is not watched by khai (it watches team)"
        );
        let mut c = vec![child("ClusterRole", "r", Some("team"))];
        let err = place(&mut c, NAMESPACED, &Table, &[], true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "children[0] (ClusterRole r): ClusterRole is cluster-scoped; remove metadata.namespace"
        );
    }

    /// Every refusal, as `khai run` and `khai test` both report it.
    #[test]
    fn each_refusal_names_the_child_and_says_why() {
        let cases: Vec<(Vec<Value>, Parent<'_>, &[&str], &str)> = vec![
            (
                vec![child("Secret", "s", None)],
                NAMESPACED,
                &[],
                "children[0] (Secret s): the controller does not own v1/Secret",
            ),
            (
                vec![child("ClusterRole", "r", None)],
                NAMESPACED,
                &[],
                "children[0] (ClusterRole r): a namespaced App cannot own a cluster-scoped object: \
                 Kubernetes never garbage-collects it through such an ownerReference; set \
                 `unowned_children = true` on the controller",
            ),
            (
                vec![child("ConfigMap", "c", Some("other"))],
                NAMESPACED,
                &[],
                "children[0] (ConfigMap c): namespace \"other\" differs from its owner's \"team\"; \
                 ownerReferences cannot cross namespaces; set `unowned_children = true`",
            ),
            (
                vec![child("ConfigMap", "c", None)],
                CLUSTER,
                &[],
                "children[0] (ConfigMap c): its parent Widget is cluster-scoped, so the child must name its namespace",
            ),
            (
                vec![child("ConfigMap", "c", Some("elsewhere"))],
                CLUSTER,
                &["one", "two"],
                "children[0] (ConfigMap c): namespace \"elsewhere\" is not watched by khai (it watches one, two)",
            ),
            (
                vec![child("ClusterRole", "r", Some("one"))],
                CLUSTER,
                &[],
                "children[0] (ClusterRole r): ClusterRole is cluster-scoped; remove metadata.namespace",
            ),
            (
                vec![
                    json!({ "apiVersion": "x.dev/v1", "kind": "Widget", "metadata": { "name": "w" } }),
                ],
                CLUSTER,
                &[],
                "children[0] (Widget w): a child cannot be its own parent",
            ),
            (
                vec![
                    child("ConfigMap", "c", None),
                    child("ConfigMap", "c", Some("team")),
                ],
                NAMESPACED,
                &[],
                "children[1] (ConfigMap c): the same object as children[0]",
            ),
        ];
        for (children, parent, namespaces, want) in cases {
            let got = problem(children, parent, namespaces);
            assert!(got.starts_with(want), "got {got:?}\nwant {want:?}");
        }
    }
}
