//! What a sharded replica (`khai run --shards`) hands the sharder's side, from the prepared
//! controllers: the kinds it assigns, the watched kinds among them that follow their parents.

use crate::controller::Prepared;

/// The parent kinds of the prepared controllers, where they are watched and what their
/// controllers select, and the owned and sharded watched kinds, each once: what the sharder
/// assigns to shards.
pub(super) fn parent_kinds(prepared: &[Prepared]) -> crate::shard::Sharded {
    let mut kinds = crate::shard::Sharded::default();
    for p in prepared {
        kinds.add_parent(crate::shard::Parent {
            kind: p.primary.kind.clone(),
            namespace: p.primary.namespace.clone(),
            filter: p.ctx.spec.filter.clone(),
        });
        for o in &p.ctx.caches.owned {
            let k = (o.kind.clone(), o.namespace.clone());
            if !kinds.children.contains(&k) {
                kinds.children.push(k);
            }
        }
    }
    kinds.related = related_links(prepared);
    kinds
}

/// The sharded `watches` entries of the prepared controllers, each once: their objects follow
/// the parent their label names.
fn related_links(prepared: &[Prepared]) -> Vec<crate::shard::related::Link> {
    let mut links = Vec::new();
    for p in prepared {
        for (informer, w) in p.related.iter().filter(|(_, w)| w.sharded()) {
            let crate::config::model::Parents::Label(label) = &w.parents else {
                continue;
            };
            let link = crate::shard::related::Link {
                related: informer.kind.clone(),
                label: label.clone(),
                parent: p.primary.kind.clone(),
                namespace: informer.namespace.clone(),
            };
            if !links.contains(&link) {
                links.push(link);
            }
        }
    }
    links
}
