//! The `k8s::…` functions scripts call: arguments read into an [`Op`], run through
//! [`crate::effects::request`].
//!
//! | function | returns |
//! |---|---|
//! | `get(kind, namespace, name)`, `get(kind, name)` | the object, or `()` when there is none |
//! | `list(kind)`, `list(kind, #{ namespace, labels, fields, limit })` | an array of objects |
//! | `create(obj)`, `apply(obj)` | the object as stored |
//! | `patch(obj, patch)`, `patch(kind, namespace, name, patch)` | the patched object |
//! | `patch_status(obj, patch)`, `patch_status(kind, namespace, name, patch)` | the patched object |
//! | `delete(obj)`, `delete(obj, #{ uid, resource_version })`, `delete(kind, namespace, name)`, `delete(kind, namespace, name, #{ … })` | whether it existed |
//! | `label(obj, labels)`, `annotate(obj, annotations)`, `patch_metadata(obj, #{ labels, annotations })` | the patched object |
//! | `adopt(obj, owner)` | `obj`, now controlled by `owner` |

use super::{Op, Target};
use crate::config::kind::KindRef;
use rhai::{Dynamic, EvalAltResult, ImmutableString, Map, Module, NativeCallContext, Position};
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, Box<EvalAltResult>>;

/// Registers the `k8s` module.
pub(crate) fn register(engine: &mut rhai::Engine) {
    type Str = ImmutableString;
    type Cx<'a> = NativeCallContext<'a>;
    let mut m = Module::new();
    m.set_native_fn("get", |c: Cx, kind: Str, ns: Str, name: Str| {
        at(
            &c,
            target_of(&kind, &ns, &name).and_then(|t| run(Op::Get(t))),
        )
    });
    m.set_native_fn("get", |c: Cx, kind: Str, name: Str| {
        at(
            &c,
            target_of(&kind, "", &name).and_then(|t| run(Op::Get(t))),
        )
    });
    m.set_native_fn("list", |c: Cx, kind: Str| at(&c, list(&kind, &Map::new())));
    m.set_native_fn("list", |c: Cx, kind: Str, opts: Map| {
        at(&c, list(&kind, &opts))
    });
    m.set_native_fn("create", |c: Cx, obj: Map| {
        at(&c, object(obj).and_then(|(t, o)| run(Op::Create(t, o))))
    });
    m.set_native_fn("apply", |c: Cx, obj: Map| {
        at(&c, object(obj).and_then(|(t, o)| run(Op::Apply(t, o))))
    });
    m.set_native_fn("replace", |c: Cx, obj: Map| {
        at(&c, object(obj).and_then(|(t, o)| replace(t, o)))
    });
    for (name, status) in [("patch", false), ("patch_status", true)] {
        m.set_native_fn(name, move |c: Cx, obj: Map, patch: Dynamic| {
            let op = |target| {
                run(Op::Patch {
                    target,
                    patch: json_of(&patch)?,
                    status,
                })
            };
            at(&c, object(obj).and_then(|(t, _)| op(t)))
        });
        m.set_native_fn(
            name,
            move |c: Cx, kind: Str, ns: Str, n: Str, patch: Dynamic| {
                let op = |target| {
                    run(Op::Patch {
                        target,
                        patch: json_of(&patch)?,
                        status,
                    })
                };
                at(&c, target_of(&kind, &ns, &n).and_then(op))
            },
        );
    }
    m.set_native_fn("delete", |c: Cx, obj: Map| {
        at(&c, object(obj).and_then(|(t, _)| delete(t, &Map::new())))
    });
    m.set_native_fn("delete", |c: Cx, obj: Map, opts: Map| {
        at(&c, object(obj).and_then(|(t, _)| delete(t, &opts)))
    });
    m.set_native_fn("delete", |c: Cx, kind: Str, ns: Str, name: Str| {
        at(
            &c,
            target_of(&kind, &ns, &name).and_then(|t| delete(t, &Map::new())),
        )
    });
    m.set_native_fn(
        "delete",
        |c: Cx, kind: Str, ns: Str, name: Str, opts: Map| {
            at(
                &c,
                target_of(&kind, &ns, &name).and_then(|t| delete(t, &opts)),
            )
        },
    );
    m.set_native_fn("label", |c: Cx, obj: Map, labels: Map| {
        at(&c, metadata(obj, "labels", labels))
    });
    m.set_native_fn("annotate", |c: Cx, obj: Map, annotations: Map| {
        at(&c, metadata(obj, "annotations", annotations))
    });
    m.set_native_fn("patch_metadata", |c: Cx, obj: Map, patch: Map| {
        at(&c, patch_metadata(obj, patch))
    });
    m.set_native_fn("adopt", |c: Cx, obj: Map, owner: Map| {
        at(&c, adopt(obj, owner))
    });
    engine.register_static_module("k8s", m.into());
}

/// `r`, its error placed at the script's call (errors raised in a function have no position).
fn at(c: &NativeCallContext, r: Result<Dynamic>) -> Result<Dynamic> {
    r.map_err(|mut e| {
        if e.position().is_none() {
            e.set_position(c.call_position());
        }
        e
    })
}

fn run(op: Op) -> Result<Dynamic> {
    let description = op.describe();
    let what = format!("k8s::{}", op.verb());
    crate::effects::request(&what, description, |fx, left| {
        let Some(api) = &fx.k8s else {
            return Err(
                super::Failure::new("unavailable", 0, "no Kubernetes client here")
                    .value(op.verb(), &op.what()),
            );
        };
        if op.writes() {
            fx.reads.mark_write();
        }
        match fx.block_on(left, api.perform(&op)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(f)) => Err(f.value(op.verb(), &op.what())),
            Err(_) => Err(super::Failure::new(
                "timeout",
                0,
                format!(
                    "no answer within the call's time budget of {} (budget.time)",
                    fx.budget.time
                ),
            )
            .value(op.verb(), &op.what())),
        }
    })
}

fn bad(message: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(message.into(), Position::NONE))
}

fn kind_of(written: &str) -> Result<KindRef> {
    written
        .parse()
        .map_err(|e: crate::config::kind::ParseError| bad(format!("k8s: {e}")))
}

fn target_of(kind: &str, namespace: &str, name: &str) -> Result<Target> {
    if name.is_empty() {
        return Err(bad(format!("k8s: {kind}: the name is empty")));
    }
    Ok(Target {
        kind: kind_of(kind)?,
        namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
        name: name.to_string(),
    })
}

fn json_of(v: &Dynamic) -> Result<Value> {
    crate::nesting::check(v).map_err(|e| bad(format!("k8s: {e}")))?;
    rhai::serde::from_dynamic(v).map_err(|e| bad(format!("k8s: {e}")))
}

/// An object (or a reference to one: `apiVersion`, `kind`, `metadata.name`, and
/// `metadata.namespace` when namespaced), as JSON, and what it names.
fn object(obj: Map) -> Result<(Target, Value)> {
    let v = json_of(&Dynamic::from(obj))?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let (api_version, kind) = (text(&v["apiVersion"]), text(&v["kind"]));
    if api_version.is_empty() || kind.is_empty() {
        return Err(bad(
            "k8s: the object has no apiVersion and kind (give an object read with k8s::get, or \
             #{ apiVersion, kind, metadata: #{ name, namespace } })"
                .into(),
        ));
    }
    let name = text(&v["metadata"]["name"]);
    if name.is_empty() {
        return Err(bad(format!("k8s: the {kind} has no metadata.name")));
    }
    let target = Target {
        kind: KindRef::from_api_version(&api_version, &kind),
        namespace: v["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        name,
    };
    Ok((target, v))
}

/// `k8s::replace(obj)`: the whole object, written only if it is unchanged since it was read,
/// so it must carry the `metadata.resourceVersion` it was read with.
fn replace(target: Target, obj: Value) -> Result<Dynamic> {
    if obj["metadata"]["resourceVersion"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        return Err(bad(format!(
            "k8s::replace: the {} has no metadata.resourceVersion (replace an object read with \
             k8s::get, or use k8s::apply)",
            target
        )));
    }
    run(Op::Replace(target, obj))
}

fn list(kind: &str, opts: &Map) -> Result<Dynamic> {
    let mut namespace = None;
    let (mut labels, mut fields, mut limit) = (None, None, None);
    for (k, v) in opts {
        match k.as_str() {
            "namespace" => namespace = Some(v.to_string()).filter(|n| !n.is_empty()),
            "labels" => labels = Some(selector(v)?),
            "fields" => fields = Some(selector(v)?),
            "limit" => {
                limit = Some(
                    v.as_int()
                        .ok()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| bad("k8s::list: limit is a positive number".into()))?,
                )
            }
            other => {
                return Err(bad(format!(
                    "k8s::list: unknown option {other:?} (namespace, labels, fields, limit)"
                )));
            }
        }
    }
    run(Op::List {
        kind: kind_of(kind)?,
        namespace,
        labels,
        fields,
        limit,
    })
}

/// A selector written as a string (`app=web,tier!=db`) or a map of equalities.
fn selector(v: &Dynamic) -> Result<String> {
    if let Some(m) = v.read_lock::<Map>() {
        let mut parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.sort();
        return Ok(parts.join(","));
    }
    v.clone()
        .into_immutable_string()
        .map(|s| s.to_string())
        .map_err(|t| {
            bad(format!(
                "k8s::list: a selector is a string or a map, not {t}"
            ))
        })
}

fn delete(target: Target, opts: &Map) -> Result<Dynamic> {
    let (mut uid, mut resource_version) = (None, None);
    for (k, v) in opts {
        match k.as_str() {
            "uid" => uid = Some(v.to_string()),
            "resource_version" | "resourceVersion" => resource_version = Some(v.to_string()),
            other => {
                return Err(bad(format!(
                    "k8s::delete: unknown option {other:?} (uid, resource_version)"
                )));
            }
        }
    }
    run(Op::Delete {
        target,
        uid,
        resource_version,
    })
}

fn metadata(obj: Map, field: &str, values: Map) -> Result<Dynamic> {
    let patch = json!({ field: json_of(&Dynamic::from(values))? });
    patch_object_metadata(obj, patch)
}

fn patch_metadata(obj: Map, patch: Map) -> Result<Dynamic> {
    let patch = json_of(&Dynamic::from(patch))?;
    if let Some(k) = patch
        .as_object()
        .and_then(|p| p.keys().find(|k| *k != "labels" && *k != "annotations"))
    {
        return Err(bad(format!(
            "k8s::patch_metadata: patches only labels and annotations, not {k:?}"
        )));
    }
    patch_object_metadata(obj, patch)
}

fn patch_object_metadata(obj: Map, patch: Value) -> Result<Dynamic> {
    let (target, _) = object(obj)?;
    run(Op::Patch {
        target,
        patch: json!({ "metadata": patch }),
        status: false,
    })
}

/// Makes `owner` the controller of `obj`: its ownerReferences as they are plus one to `owner`,
/// written only if `obj` has not changed since it was read (its resourceVersion).
fn adopt(obj: Map, owner: Map) -> Result<Dynamic> {
    let (target, current) = object(obj)?;
    let (owner_target, o) = object(owner)?;
    if owner_target.namespace.is_some() && owner_target.namespace != target.namespace {
        return Err(bad(format!(
            "k8s::adopt: {owner_target} cannot own {target}: an owner must be in the same \
             namespace or cluster-scoped"
        )));
    }
    let uid = o["metadata"]["uid"].as_str().unwrap_or_default();
    if uid.is_empty() {
        return Err(bad(format!(
            "k8s::adopt: the owner {owner_target} has no metadata.uid"
        )));
    }
    let mut refs: Vec<Value> = current["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(other) = refs
        .iter()
        .find(|r| r["controller"] == true && r["uid"] != uid)
    {
        return Err(bad(format!(
            "k8s::adopt: {target} is already controlled by {} {}",
            other["kind"].as_str().unwrap_or_default(),
            other["name"].as_str().unwrap_or_default()
        )));
    }
    refs.retain(|r| r["uid"] != uid);
    refs.push(json!({
        "apiVersion": o["apiVersion"],
        "kind": o["kind"],
        "name": o["metadata"]["name"],
        "uid": uid,
        "controller": true,
        "blockOwnerDeletion": true,
    }));
    let mut meta = json!({ "ownerReferences": refs });
    if let Some(rv) = current["metadata"]["resourceVersion"].as_str() {
        meta["resourceVersion"] = rv.into();
    }
    run(Op::Patch {
        target,
        patch: json!({ "metadata": meta }),
        status: false,
    })
}
