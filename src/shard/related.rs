//! Related objects kept on their parent's shard: the objects of a sharded `watches` kind name a
//! parent by a label, and the sharder's passes ([`super::passes`]) keep each labelled for the
//! shard its parent is labelled for. Like the rest of the sharder, nothing here caches objects:
//! every pass is a label-selected list of metadata read one page at a time, and the parents a
//! page names are read by name and forgotten with the page.
//! - A parent moving (a dead shard's, or one assigned after its shard let go of it) takes its
//!   related objects with it, before it moves: a dead shard's related objects are relabelled
//!   with its children, for the shard their parent's key hashes to, as its parents are; a
//!   parent assigned anew has its own (`<label>=<parent name>`) relabelled with its children.
//! - Related objects on no live shard (never labelled: created before sharding, or while no
//!   shard answered the assignment webhook; or labelled for a shard that is not live) get
//!   their parent's shard label, every retry period and soon after one appears.
//! - Every related object is compared with its parent in the full pass (every few minutes),
//!   which catches one whose label now names another parent.
//!
//! A related object whose parent does not exist, or has no shard label yet, is left alone: its
//! parent may be created (or assigned) later, and it then follows at the next pass; guessing a
//! shard for it would be a write that the parent's arrival may undo.

use super::moves::{PATCHES_AT_ONCE, Relabel, send};
use super::pages::{Meta, Pages, Tally};
use super::ring::Ring;
use crate::watch::Kind;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};

/// A sharded `watches` entry: objects of `related` name a `parent` by `label`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Link {
    pub(crate) related: Kind,
    pub(crate) label: String,
    pub(crate) parent: Kind,
    /// Where the related objects are watched (`None`: every namespace).
    pub(crate) namespace: Option<String>,
}

/// A parent named by a related object: its namespace (`None` for a cluster-scoped kind) and
/// name.
type Named = (Option<String>, String);

impl Link {
    /// The parent `o` names by the link's label, if any.
    fn named(&self, o: &Meta) -> Option<Named> {
        let name = o.metadata.labels.as_ref()?.get(&self.label)?;
        if name.is_empty() {
            return None;
        }
        let ns = match (&o.metadata.namespace, self.parent.namespaced) {
            (_, false) => None,
            (Some(ns), true) => Some(ns.clone()),
            // A namespaced parent has no name without a namespace.
            (None, true) => return None,
        };
        Some((ns, name.clone()))
    }

    /// The ring key of the parent `o` names.
    fn parent_key(&self, o: &Meta) -> Option<String> {
        let (ns, name) = self.named(o)?;
        let r = &self.parent.resource;
        Some(super::key(&r.group, &r.kind, ns.as_deref(), &name))
    }
}

/// The sharder's passes over the related objects of `links`.
pub(super) struct Followers<'a> {
    pub client: &'a kube::Client,
    pub links: &'a [Link],
    /// `shard.khai.dev/<op>`.
    pub label: &'a str,
    pub page: u32,
}

impl Followers<'_> {
    /// The patch labelling related object `o` of `link` for shard `to`.
    fn follow(&self, link: &Link, o: Meta, to: &str) -> Option<Relabel> {
        let api = crate::watch::api(self.client, &link.related, o.metadata.namespace.as_deref());
        let child = Relabel::child(
            api,
            o.metadata.name?,
            o.metadata.resource_version,
            self.label,
            to,
        );
        Some(Relabel {
            sort: "related",
            ..child
        })
    }

    /// Relabels the related objects labelled for `dead` for the shard their parent's key hashes
    /// to on `ring`, where the dead pass moves their parents.
    pub(super) async fn of_dead(&self, ring: &Ring, dead: &str) -> Result<Tally, kube::Error> {
        let mut tally = Tally::default();
        for link in self.links {
            let selector = format!("{},{}={dead}", link.label, self.label);
            let api = crate::watch::api(self.client, &link.related, link.namespace.as_deref());
            let mut pages = Pages::labelled(api, &selector, self.page);
            while let Some(page) = pages.next().await? {
                let patches = page
                    .into_iter()
                    .filter_map(|o| {
                        let to = ring.owner(&link.parent_key(&o)?)?.to_string();
                        self.follow(link, o, &to)
                    })
                    .collect();
                tally.add(send(patches).await?.into());
            }
        }
        Ok(tally)
    }

    /// The patches giving the related objects of `parent` (of `kind`), labelled for another
    /// shard than `to` or for none, label `to`.
    pub(super) async fn of_parent(
        &self,
        kind: &Kind,
        parent: &Meta,
        to: &str,
    ) -> Result<Vec<Relabel>, kube::Error> {
        let Some(name) = parent.metadata.name.as_deref() else {
            return Ok(Vec::new());
        };
        // A name that is no label value cannot be named by a label.
        if crate::config::selector::label_value(name).is_err() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for link in self.links.iter().filter(|l| l.parent == *kind) {
            let selector = format!("{}={name},{}!={to}", link.label, self.label);
            // The related objects of a namespaced parent live in its namespace.
            let ns = match &parent.metadata.namespace {
                Some(p) if kind.namespaced && link.related.namespaced => Some(p.as_str()),
                _ => link.namespace.as_deref(),
            };
            let api = crate::watch::api(self.client, &link.related, ns);
            let mut pages = Pages::labelled(api, &selector, self.page);
            while let Some(page) = pages.next().await? {
                out.extend(page.into_iter().filter_map(|o| self.follow(link, o, to)));
            }
        }
        Ok(out)
    }

    /// Labels every related object on no live shard of `ring` (no shard label, or one of a
    /// shard that is not live) for its parent's shard.
    pub(super) async fn unassigned(&self, ring: &Ring) -> Result<Tally, kube::Error> {
        let off_ring = if ring.shards().is_empty() {
            format!("!{}", self.label)
        } else {
            format!("{} notin ({})", self.label, ring.shards().join(","))
        };
        self.related_to_parents(|link| format!("{},{off_ring}", link.label))
            .await
    }

    /// Labels every related object for its parent's shard where the two differ: the full
    /// pass's look at each, for those whose label names another parent than it did.
    pub(super) async fn all(&self) -> Result<Tally, kube::Error> {
        self.related_to_parents(|link| link.label.clone()).await
    }

    /// Labels the related objects of each link that `selector` picks for their parent's shard,
    /// one page at a time: the parents a page names are read once each, and forgotten with it.
    async fn related_to_parents(
        &self,
        selector: impl Fn(&Link) -> String,
    ) -> Result<Tally, kube::Error> {
        let mut tally = Tally::default();
        for link in self.links {
            let api = crate::watch::api(self.client, &link.related, link.namespace.as_deref());
            let mut pages = Pages::labelled(api, &selector(link), self.page);
            while let Some(page) = pages.next().await? {
                let named: BTreeSet<Named> = page.iter().filter_map(|o| link.named(o)).collect();
                let shards = self.shards_of(&link.parent, named).await?;
                let patches = page
                    .into_iter()
                    .filter_map(|o| {
                        let want = shards.get(&link.named(&o)?)?;
                        if super::pages::label(&o, self.label) == Some(want.as_str()) {
                            return None;
                        }
                        self.follow(link, o, want)
                    })
                    .collect();
                tally.add(send(patches).await?.into());
            }
        }
        Ok(tally)
    }

    /// The shard label of each of `parents` (of `kind`) that exists and has one.
    async fn shards_of(
        &self,
        kind: &Kind,
        parents: BTreeSet<Named>,
    ) -> Result<BTreeMap<Named, String>, kube::Error> {
        let mut read = futures::stream::iter(parents)
            .map(|(ns, name)| async move {
                let api = crate::watch::api(self.client, kind, ns.as_deref());
                let got = api.get_metadata_opt(&name).await;
                ((ns, name), got)
            })
            .buffer_unordered(PATCHES_AT_ONCE);
        let mut shards = BTreeMap::new();
        while let Some((named, got)) = read.next().await {
            if let Some(shard) = got?
                .as_ref()
                .and_then(|p| super::pages::label(p, self.label))
            {
                shards.insert(named, shard.to_string());
            }
        }
        Ok(shards)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::shard::fake::{Fake, PARTS, SECRETS, naming, part, patches, secret};
    use serde_json::json;

    /// Secrets naming their Part by `x.dev/part`.
    pub(crate) fn link() -> Link {
        Link {
            related: secret(),
            label: "x.dev/part".into(),
            parent: part(),
            namespace: Some("ns".into()),
        }
    }

    fn followers<'a>(client: &'a kube::Client, links: &'a [Link], page: u32) -> Followers<'a> {
        Followers {
            client,
            links,
            label: "shard.khai.dev/op",
            page,
        }
    }

    #[tokio::test]
    async fn a_related_object_on_no_live_shard_gets_its_parents_label_unless_it_has_no_parent() {
        let fake = Fake::default();
        fake.add(PARTS, "p", json!({ "shard.khai.dev/op": "b" }), json!({}));
        fake.add(SECRETS, "unlabelled", naming("p", None), json!({}));
        fake.add(SECRETS, "stray", naming("p", Some("nowhere")), json!({}));
        fake.add(SECRETS, "there", naming("p", Some("b")), json!({}));
        // Its parent does not exist: left alone, unlabelled.
        fake.add(SECRETS, "orphan", naming("gone", None), json!({}));
        let (client, links) = (fake.client(), [link()]);
        let ring = Ring::new(["a", "b"]);
        let t = followers(&client, &links, 500)
            .unassigned(&ring)
            .await
            .unwrap();
        assert_eq!(t.written, 2);
        let to_b = json!({ "shard.khai.dev/op": "b" });
        assert_eq!(
            patches(&fake),
            [
                format!("PATCH {SECRETS}/stray {to_b}"),
                format!("PATCH {SECRETS}/unlabelled {to_b}"),
            ]
        );
        let log = fake.log();
        assert!(log.contains(&format!("GET {PARTS}/gone")), "{log:#?}");
        assert!(
            log.contains(&format!(
                "LIST {SECRETS} x.dev/part,shard.khai.dev/op notin (a,b) "
            )),
            "{log:#?}"
        );
    }

    #[tokio::test]
    async fn related_objects_are_read_a_page_at_a_time_with_each_pages_parents_read_once() {
        let fake = Fake::default();
        for p in 0..5 {
            fake.add(
                PARTS,
                &format!("p{p}"),
                json!({ "shard.khai.dev/op": "a" }),
                json!({}),
            );
        }
        for i in 0..25 {
            let parent = format!("p{}", i / 5);
            fake.add(
                SECRETS,
                &format!("s{i:02}"),
                naming(&parent, None),
                json!({}),
            );
        }
        let (client, links) = (fake.client(), [link()]);
        let ring = Ring::new(["a"]);
        let t = followers(&client, &links, 10)
            .unassigned(&ring)
            .await
            .unwrap();
        assert_eq!(t.written, 25);
        let log = fake.log();
        let shape: Vec<&str> = log.iter().filter_map(|l| l.split(' ').next()).collect();
        let mut expected = Vec::new();
        for (parents, patched) in [(2, 10), (2, 10), (1, 5)] {
            expected.push("LIST");
            expected.extend(std::iter::repeat_n("GET", parents));
            expected.extend(std::iter::repeat_n("PATCH", patched));
        }
        assert_eq!(shape, expected, "{log:#?}");
    }
}
