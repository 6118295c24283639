//! Script lookups answered from the informer caches: `ctx.get`, `ctx.list`, `ctx.owned`.
//!
//! Reading a cache costs no API call, which is what keeps a reconcile that looks around as light
//! as one that does not. Only kinds the controller watches (its own kind and its `owns`) can be
//! looked up; asking for another kind is an error that says how to fix it.

use crate::script::{Lookup, LookupError, Reads, object_view};
use crate::watch::Informer;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Lookups for one reconcile of one object.
pub(crate) struct CacheLookup {
    /// The reconciled object's uid (for `owned`) and namespace (the default for `get`/`list`).
    pub uid: String,
    pub namespace: Option<String>,
    pub informers: Vec<Arc<Informer>>,
    /// Told of every lookup ([`Reads`]).
    pub reads: Reads,
}

impl CacheLookup {
    /// The informers of `kind` this controller reads (one, or one per watched namespace).
    /// Every lookup goes through here, and so is told to [`Self::reads`].
    fn informers(&self, kind: &str) -> Result<Vec<&Arc<Informer>>, LookupError> {
        self.reads.mark();
        let written: crate::config::kind::KindRef = kind.parse()?;
        let found: Vec<_> = self
            .informers
            .iter()
            .filter(|i| i.kind.matches(&written))
            .collect();
        if found.is_empty() {
            return Err(LookupError::NotWatched(kind.into()));
        }
        Ok(found)
    }
}

/// Script views of `objs`, sorted by namespace and name: cache order is arbitrary, and a stable order keeps
/// scripts (and the children they build) stable.
///
/// An object that cannot be turned into a view fails the lookup (and so the reconcile): leaving
/// it out would let the script build its children without it and prune live ones.
fn sorted_views<'a>(
    kind: &str,
    objs: impl Iterator<Item = &'a Arc<DynamicObject>>,
) -> Result<Vec<Value>, LookupError> {
    let mut out: Vec<Value> = objs.map(|o| view(kind, o)).collect::<Result<_, _>>()?;
    let key = |v: &Value| {
        (
            v["metadata"]["namespace"].as_str().map(str::to_string),
            v["metadata"]["name"].as_str().map(str::to_string),
        )
    };
    out.sort_by_key(key);
    Ok(out)
}

/// The script view of one cached object; an error names the object.
fn view(kind: &str, obj: &DynamicObject) -> Result<Value, LookupError> {
    object_view(obj).map_err(|cause| {
        let name = match obj.namespace() {
            Some(ns) => format!("{ns}/{}", obj.name_any()),
            None => obj.name_any(),
        };
        LookupError::Unreadable {
            kind: kind.into(),
            name,
            cause,
        }
    })
}

impl Lookup for CacheLookup {
    fn get(
        &self,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<Option<Value>, LookupError> {
        let found = self.informers(kind)?;
        let namespaced = found[0].kind.namespaced;
        let ns = namespace
            .map(str::to_string)
            .or_else(|| self.namespace.clone())
            .filter(|_| namespaced);
        if namespaced && ns.is_none() {
            return Err(LookupError::NeedsNamespace {
                kind: kind.into(),
                name: name.into(),
            });
        }
        let Some(inf) = found
            .iter()
            .find(|i| i.namespace.is_none() || i.namespace == ns)
        else {
            return Err(LookupError::NamespaceNotWatched(ns.unwrap_or_default()));
        };
        let key = ObjectRef::new_with(name, inf.kind.resource.clone());
        let key = match ns {
            Some(ns) => key.within(&ns),
            None => key,
        };
        inf.store().get(&key).map(|o| view(kind, &o)).transpose()
    }

    fn list(
        &self,
        kind: &str,
        selector: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, LookupError> {
        let found = self.informers(kind)?;
        let selector = selector.map(parse_selector).transpose()?;
        let namespaced = found[0].kind.namespaced;
        // By default a namespaced object lists its own namespace; a cluster-scoped one every
        // watched one.
        let ns = match namespace {
            Some(crate::script::ALL_NAMESPACES) => None,
            Some(ns) if namespaced => {
                if !found
                    .iter()
                    .any(|i| i.namespace.is_none() || i.namespace.as_deref() == Some(ns))
                {
                    return Err(LookupError::NamespaceNotWatched(ns.into()));
                }
                Some(ns.to_string())
            }
            _ => self.namespace.clone(),
        }
        .filter(|_| namespaced);
        let states: Vec<_> = found.iter().map(|i| i.store().state()).collect();
        sorted_views(
            kind,
            states
                .iter()
                .flatten()
                .filter(|o| ns.is_none() || o.namespace() == ns)
                .filter(|o| {
                    selector
                        .as_ref()
                        .is_none_or(|s| s.iter().all(|r| r.matches(o.labels())))
                }),
        )
    }

    fn owned(&self, kind: &str) -> Result<Vec<Value>, LookupError> {
        let found = self.informers(kind)?;
        let children: Vec<_> = found
            .iter()
            .flat_map(|i| i.controlled_by(&self.uid))
            .collect();
        sorted_views(kind, children.iter())
    }
}

/// One requirement of a label selector, as `kubectl -l` writes them.
#[derive(Debug, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Req {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
        }
    }
}

/// Whether `labels` satisfy the label selector `selector` (as `kubectl -l` writes it); shared
/// with `khai test`'s in-memory lookups so both read selectors the same way.
pub(crate) fn selector_matches(
    selector: &str,
    labels: &BTreeMap<String, String>,
) -> Result<bool, LookupError> {
    Ok(parse_selector(selector)?.iter().all(|r| r.matches(labels)))
}

/// Parses `a=b,c!=d,e,!f,g in (x,y),h notin (z)`.
fn parse_selector(s: &str) -> Result<Vec<Req>, LookupError> {
    let bad = || LookupError::InvalidSelector(s.into());
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or_else(bad)?,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    let set = |rest: &str| -> Result<Vec<String>, LookupError> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(bad)?;
        Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
    };
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            if let Some((k, v)) = p.split_once("!=") {
                Ok(Req::NotEq(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Ok(Req::Eq(k.trim().into(), v.trim().into()))
            } else if let Some((k, rest)) = p.split_once(" notin ") {
                Ok(Req::NotIn(k.trim().into(), set(rest)?))
            } else if let Some((k, rest)) = p.split_once(" in ") {
                Ok(Req::In(k.trim().into(), set(rest)?))
            } else if let Some(k) = p.strip_prefix('!') {
                Ok(Req::NotExists(k.trim().into()))
            } else if p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Ok(Req::Exists(p.into()))
            } else {
                Err(bad())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sel(s: &str, l: &BTreeMap<String, String>) -> bool {
        parse_selector(s).unwrap().iter().all(|r| r.matches(l))
    }

    fn configmaps() -> crate::watch::Kind {
        crate::watch::Kind::configmaps()
    }

    fn configmap(name: &str, data: Value) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns", "uid": format!("u-{name}"),
                "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "App", "name": "p",
                    "uid": "p1", "controller": true }] },
        }))
        .unwrap();
        o.data = data;
        o
    }

    /// `ctx.list` and `ctx.get` must not leave out objects that fail to serialise: a script
    /// would compute its children without them and prune live ones.
    #[test]
    fn an_object_that_cannot_be_read_fails_the_lookup_and_is_named() {
        // A DynamicObject whose body is not a map cannot be serialised (flattened).
        let broken = configmap("broken", Value::String("not a map".into()));
        let fine = configmap("fine", serde_json::json!({ "data": { "k": "v" } }));
        let lookup = CacheLookup {
            uid: "p1".into(),
            namespace: Some("ns".into()),
            informers: vec![crate::watch::Informer::with_objects(
                configmaps(),
                Some("ns"),
                vec![broken, fine],
            )],
            reads: Reads::tracked(),
        };
        let expected = "cannot read ConfigMap ns/broken from khai's cache: \
                        can only flatten structs and maps (got a string)";
        assert_eq!(
            lookup
                .list("ConfigMap", None, None)
                .unwrap_err()
                .to_string(),
            expected
        );
        assert_eq!(lookup.owned("ConfigMap").unwrap_err().to_string(), expected);
        assert_eq!(
            lookup
                .get("ConfigMap", "broken", None)
                .unwrap_err()
                .to_string(),
            expected
        );
        assert_eq!(
            lookup.get("ConfigMap", "fine", None).unwrap().unwrap()["data"]["k"],
            "v"
        );
    }

    #[test]
    fn label_selectors_match_as_kubectl_does() {
        let l = labels(&[("app", "web"), ("tier", "gold")]);
        assert!(sel("app=web", &l));
        assert!(sel("app==web,tier!=silver", &l));
        assert!(sel("tier in (gold, silver),!missing", &l));
        assert!(sel("app", &l));
        assert!(!sel("tier notin (gold)", &l));
        assert!(!sel("app=db", &l));
        assert!(parse_selector("a in (b").is_err());
        assert!(parse_selector("a b").is_err());
    }

    fn configmap_in(ns: &str, name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": ns, "uid": format!("u-{ns}-{name}") },
        }))
        .unwrap()
    }

    #[test]
    fn list_reads_its_own_namespace_by_default_another_by_name_or_every_watched_one() {
        let informer = |ns: &str, names: &[&str]| {
            let objects = names.iter().map(|n| configmap_in(ns, n)).collect();
            crate::watch::Informer::with_objects(configmaps(), Some(ns), objects)
        };
        let lookup = CacheLookup {
            uid: "p1".into(),
            namespace: Some("a".into()),
            informers: vec![informer("a", &["one"]), informer("b", &["two", "three"])],
            reads: Reads::tracked(),
        };
        assert!(!lookup.reads.any());
        let names = |ns: Option<&str>| -> Vec<String> {
            let found = lookup.list("ConfigMap", None, ns).unwrap();
            found
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o["metadata"]["namespace"].as_str().unwrap(),
                        o["metadata"]["name"].as_str().unwrap()
                    )
                })
                .collect()
        };
        assert_eq!(names(None), ["a/one"]);
        assert!(lookup.reads.any(), "a lookup is a read");
        assert_eq!(names(Some("b")), ["b/three", "b/two"]);
        assert_eq!(names(Some("*")), ["a/one", "b/three", "b/two"]);
        assert_eq!(
            lookup
                .list("ConfigMap", None, Some("c"))
                .unwrap_err()
                .to_string(),
            "namespace \"c\" is not watched by khai"
        );
    }
}
