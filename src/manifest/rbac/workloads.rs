//! Grants for what the config's controllers, handlers, timers, daemons and scripts call on the
//! kinds they work on: watching them (and the kinds of `[[index]]`es), applying and pruning
//! children, writing status and finalizers, calls through `[operator] uses`, and Events.

use super::{Plan, Resource, resolve};
use crate::config::kind::KindRef;
use crate::config::model::Model;

/// Adds to `p` every grant on the config's kinds; returns whether one of them is not a CRD of
/// the config, so khai needs discovery to resolve it.
pub(super) fn grant(model: &Model, finalizes: &[bool], p: &mut Plan) -> bool {
    let mut needs_discovery = false;
    let is_crd = |written: &KindRef| {
        let r = resolve(model, written);
        model
            .crds
            .iter()
            .any(|c| c.group == r.group && c.plural() == r.plural)
    };
    for (i, ctl) in model.controllers.iter().enumerate() {
        let primary = resolve(model, &ctl.for_kind);
        p.grant(&primary, &primary.plural, &["get", "list", "watch"]);
        if primary.status {
            p.grant(&primary, &format!("{}/status", primary.plural), &["patch"]);
        }
        if finalizes.get(i).copied().unwrap_or(false) || ctl.deletes_children() {
            p.grant(&primary, &primary.plural, &["patch"]);
        }
        if !ctl.owns.is_empty() {
            p.grant(
                &primary,
                &format!("{}/finalizers", primary.plural),
                &["update"],
            );
        }
        for o in &ctl.owns {
            let r = resolve(model, o);
            p.grant(
                &r,
                &r.plural,
                &["get", "list", "watch", "create", "patch", "delete"],
            );
        }
        for w in &ctl.watches {
            let r = resolve(model, &w.kind);
            p.grant(&r, &r.plural, &["get", "list", "watch"]);
        }
        let kinds = std::iter::once(&ctl.for_kind)
            .chain(&ctl.owns)
            .chain(ctl.watches.iter().map(|w| &w.kind));
        for k in kinds {
            needs_discovery |= !is_crd(k);
        }
    }
    // Handlers record their progress in annotations of the object (a merge patch); handlers,
    // timers and daemons all watch their kind and may write its status.
    let beside = model
        .handlers
        .iter()
        .map(|h| (&h.for_kind, true))
        .chain(model.timers.iter().map(|t| (&t.for_kind, false)))
        .chain(model.daemons.iter().map(|d| (&d.for_kind, false)));
    for (kind, records) in beside {
        let r = resolve(model, kind);
        p.grant(&r, &r.plural, &["get", "list", "watch"]);
        if records {
            p.grant(&r, &r.plural, &["patch"]);
        }
        if r.status {
            p.grant(&r, &format!("{}/status", r.plural), &["patch"]);
        }
        needs_discovery |= !is_crd(kind);
    }
    // An index lists and watches every object of its kind, whether or not anything else in
    // the config names that kind.
    for index in &model.indexes {
        let r = resolve(model, &index.for_kind);
        p.grant(&r, &r.plural, &["get", "list", "watch"]);
        needs_discovery |= !is_crd(&index.for_kind);
    }
    // What scripts call through the `k8s` module (`[operator] uses`).
    for u in &model.operator.uses {
        let r = resolve(model, &u.kind);
        needs_discovery |= !is_crd(&u.kind);
        for verb in &u.verbs {
            match verb.as_str() {
                // Server-side apply creates what does not exist yet.
                "apply" => p.grant(&r, &r.plural, &["create", "patch"]),
                "patch_status" => p.grant(&r, &format!("{}/status", r.plural), &["patch"]),
                // A PUT of the whole object.
                "replace" => p.grant(&r, &r.plural, &["update"]),
                v => p.grant(&r, &r.plural, &[v]),
            }
        }
    }
    // Controllers, handlers, timers and daemons all record Events (the events a script
    // returns, failures); an index or a hook alone records none.
    let records_events = !(model.controllers.is_empty()
        && model.handlers.is_empty()
        && model.timers.is_empty()
        && model.daemons.is_empty());
    if records_events {
        // Events are recorded in the namespace of the object they are about.
        let events = Resource {
            group: "events.k8s.io".into(),
            plural: "events".into(),
            namespaced: true,
            status: false,
        };
        p.grant(&events, "events", &["create", "patch"]);
        // Events about cluster-scoped objects go in `default` (`kube-system` before v1.22),
        // which a namespaced operator's Roles do not cover.
        let cluster_scoped = model
            .controllers
            .iter()
            .map(|c| &c.for_kind)
            .chain(model.handlers.iter().map(|h| &h.for_kind))
            .chain(model.timers.iter().map(|t| &t.for_kind))
            .chain(model.daemons.iter().map(|d| &d.for_kind))
            .any(|k| !resolve(model, k).namespaced);
        if cluster_scoped {
            p.cluster
                .add("events.k8s.io", "events", &["create", "patch"]);
        }
    }
    needs_discovery
}
