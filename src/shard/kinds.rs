//! What the sharder assigns to shards (`khai run --shards`): the controllers' parent kinds,
//! where they are watched and what their controllers select on the server, and the kinds they
//! own, whose children follow their parent.

use crate::watch::{Filter, Kind};

/// What the sharder assigns to shards, and where it looks for it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sharded {
    /// The controllers' parent kinds; see [`Sharded::add_parent`].
    pub parents: Vec<Parent>,
    /// The kinds the controllers own, each with the namespace it is watched in (`None`: all):
    /// their children follow their parent.
    pub children: Vec<(Kind, Option<String>)>,
    /// The sharded `watches` entries: their objects follow the parent their label names.
    pub related: Vec<super::related::Link>,
}

/// A parent kind some controller reconciles.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parent {
    pub kind: Kind,
    /// The namespace it is watched in (`None`: all).
    pub namespace: Option<String>,
    /// What the controller selects of it on the server (`selector`, `field_selector`).
    pub filter: Filter,
}

impl Parent {
    /// Whether a controller's server-side filter leaves some objects of the kind out.
    pub(super) fn filtered(&self) -> bool {
        self.filter != Filter::default()
    }
}

impl Sharded {
    /// Adds a controller's parent kind. A kind a controller selects in full is sharded in full,
    /// once; otherwise each distinct filter is listed on its own.
    pub(crate) fn add_parent(&mut self, parent: Parent) {
        let same = |p: &Parent| p.kind == parent.kind && p.namespace == parent.namespace;
        if self.parents.iter().any(|p| same(p) && !p.filtered()) || self.parents.contains(&parent) {
            return;
        }
        if !parent.filtered() {
            self.parents.retain(|p| !same(p));
        }
        self.parents.push(parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_some_controller_selects_in_full_is_sharded_in_full_once() {
        let mut s = Sharded::default();
        let part = crate::shard::passes::tests::kinds().parents.remove(0);
        let with = |labels: &str| Parent {
            filter: Filter {
                labels: Some(labels.into()),
                fields: None,
            },
            ..part.clone()
        };
        s.add_parent(with("a=1"));
        s.add_parent(with("b=2"));
        s.add_parent(with("a=1"));
        assert_eq!(s.parents, [with("a=1"), with("b=2")]);
        s.add_parent(part.clone());
        s.add_parent(with("c=3"));
        assert_eq!(s.parents, [part]);
    }
}
