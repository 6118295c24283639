//! The sharder's passes over the objects, each a label-selected list of metadata only, read one
//! page at a time and acted on before the next page is read, so the sharder never holds more
//! than one page whatever the number of objects:
//! - unassigned parents (`!shard.khai.dev/<op>`), every retry period and soon after one appears;
//! - a dead shard's children, then its parents (`shard.khai.dev/<op>=<dead>`), once its Lease is
//!   released or taken over;
//! - every assigned parent, when the membership changed (joins drain) and every few minutes.
//!
//! The related objects of sharded `watches` kinds go with their parents ([`super::related`]).
//!
//! Each list of parents also carries the controllers' server-side filters (`selector`,
//! `field_selector`): a parent they leave out is not the operator's, so it is never assigned,
//! moved or drained, as khai unsharded never writes to it. A dead shard's children of such a
//! kind are relabelled with their parent, page by page of parents, found by their owner label,
//! so the children of a parent left out stay with it.

use super::kinds::{Parent, Sharded};
use super::moves::{Move, PATCHES_AT_ONCE, Relabel, decide, send};
use super::pages::{Meta, Pages, Tally};
use super::related::Followers;
use super::ring::Ring;
use crate::watch::{Filter, Kind};
use futures::StreamExt;
use kube::api::DynamicObject;
use std::collections::BTreeMap;

/// The passes of one sharder.
pub(super) struct Passes<'a> {
    pub client: &'a kube::Client,
    pub kinds: &'a Sharded,
    /// `shard.khai.dev/<op>` and `drain.shard.khai.dev/<op>`.
    pub label: String,
    pub drain: String,
    pub page: u32,
}

impl Passes<'_> {
    fn api(&self, kind: &Kind, namespace: Option<&str>) -> kube::Api<DynamicObject> {
        crate::watch::api(self.client, kind, namespace)
    }

    /// The parents of `p` its controllers select, among those the label selector `shard`
    /// picks, a page at a time.
    fn parents(&self, p: &Parent, shard: &str) -> Pages {
        let filter = super::narrowed(&p.filter, shard);
        Pages::new(
            self.api(&p.kind, p.namespace.as_deref()),
            &filter,
            self.page,
        )
    }

    /// The objects of `kind` in `namespace` the label selector `labels` picks, a page at a time.
    fn labelled(&self, kind: &Kind, namespace: Option<&str>, labels: &str) -> Pages {
        let filter = super::narrowed(&Filter::default(), labels);
        Pages::new(self.api(kind, namespace), &filter, self.page)
    }

    fn label_of<'m>(&self, o: &'m Meta) -> Option<&'m str> {
        super::pages::label(o, &self.label)
    }

    /// The passes over the related objects, with the same client and labels.
    fn related(&self) -> Followers<'_> {
        Followers {
            client: self.client,
            links: &self.kinds.related,
            label: &self.label,
            page: self.page,
        }
    }

    fn draining(&self, o: &Meta) -> bool {
        o.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(&self.drain))
    }

    /// The ring key of the parent a child's controller ownerReference names, when that parent
    /// is of a kind sharded in full. The children of a kind its controllers filter move with
    /// their parent instead ([`Self::children_first`]): a parent left out stays, and so do its
    /// children.
    fn parent_key(&self, child: &Meta) -> Option<String> {
        let r = child
            .metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))?;
        let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let parent = self
            .kinds
            .parents
            .iter()
            .find(|p| p.kind.resource.group == group && p.kind.resource.kind == r.kind)
            .filter(|p| !p.filtered())?;
        let kind = &parent.kind;
        let ns = child
            .metadata
            .namespace
            .as_deref()
            .filter(|_| kind.namespaced);
        Some(super::key(group, &r.kind, ns, &r.name))
    }

    /// The patch carrying `m` out on parent `o` of `kind`.
    fn parent(&self, kind: &Kind, o: &Meta, m: &Move) -> Relabel {
        Relabel::parent(
            self.api(kind, o.metadata.namespace.as_deref()),
            o.metadata.name.clone().unwrap_or_default(),
            o.metadata.resource_version.clone(),
            m,
            &self.label,
            &self.drain,
        )
    }

    /// Moves the objects of `dead`, whose Lease is released or taken over, to the live shards:
    /// every child and related object first, then every parent.
    pub(super) async fn dead(&self, ring: &Ring, dead: &str) -> Result<Tally, kube::Error> {
        let selector = format!("{}={dead}", self.label);
        let mut tally = Tally::default();
        for (kind, ns) in &self.kinds.children {
            let mut pages = self.labelled(kind, ns.as_deref(), &selector);
            while let Some(page) = pages.next().await? {
                let patches = page
                    .into_iter()
                    .filter_map(|c| {
                        let to = ring.owner(&self.parent_key(&c)?)?;
                        Some(Relabel::child(
                            self.api(kind, c.metadata.namespace.as_deref()),
                            c.metadata.name?,
                            c.metadata.resource_version,
                            &self.label,
                            to,
                        ))
                    })
                    .collect();
                tally.add(send(patches).await?.into());
            }
        }
        tally.add(self.related().of_dead(ring, dead).await?);
        for p in &self.kinds.parents {
            let kind = &p.kind;
            let mut pages = self.parents(p, &selector);
            while let Some(page) = pages.next().await? {
                let mut moved = Vec::new();
                let mut patches = Vec::new();
                for o in &page {
                    let Some(m) = decide(ring, &key(kind, o), Some(dead), false, true) else {
                        continue;
                    };
                    if let (true, Move::Assign { to, .. }) = (p.filtered(), &m) {
                        moved.push((o, to.clone()));
                    }
                    patches.push(self.parent(kind, o, &m));
                }
                tally.add(self.children_first(kind, moved).await?);
                tally.add(send(patches).await?.into());
            }
        }
        Ok(tally)
    }

    /// Assigns every unassigned parent; a parent its old shard let go of (it still carries the
    /// drain label) has its children and related objects relabelled first. Then labels the
    /// related objects on no live shard for their parents' shards.
    pub(super) async fn unassigned(&self, ring: &Ring) -> Result<Tally, kube::Error> {
        let selector = format!("!{}", self.label);
        let mut tally = Tally::default();
        for p in &self.kinds.parents {
            let kind = &p.kind;
            let mut pages = self.parents(p, &selector);
            while let Some(page) = pages.next().await? {
                let mut drained = Vec::new();
                let mut patches = Vec::new();
                for o in &page {
                    let Some(m) = decide(ring, &key(kind, o), None, false, false) else {
                        continue;
                    };
                    if let (true, Move::Assign { to, .. }) = (self.draining(o), &m) {
                        drained.push((o, to.clone()));
                    }
                    patches.push(self.parent(kind, o, &m));
                }
                tally.add(self.children_first(kind, drained).await?);
                tally.add(send(patches).await?.into());
            }
        }
        tally.add(self.related().unassigned(ring).await?);
        Ok(tally)
    }

    /// Every assigned parent: drains those the ring now gives to another live shard, moves
    /// those of a shard without a Lease (children and related objects first). Also counts the
    /// parents per shard. Then every related object is compared with its parent.
    pub(super) async fn full(
        &self,
        ring: &Ring,
    ) -> Result<(BTreeMap<String, i64>, Tally), kube::Error> {
        let mut owned: BTreeMap<String, i64> =
            ring.shards().iter().map(|s| (s.clone(), 0)).collect();
        let mut tally = Tally::default();
        for p in &self.kinds.parents {
            let kind = &p.kind;
            let mut pages = self.parents(p, &self.label);
            while let Some(page) = pages.next().await? {
                let mut moved = Vec::new();
                let mut patches = Vec::new();
                for o in &page {
                    let Some(current) = self.label_of(o) else {
                        continue;
                    };
                    *owned.entry(current.to_string()).or_default() += 1;
                    let draining = self.draining(o);
                    let Some(m) = decide(ring, &key(kind, o), Some(current), draining, true) else {
                        continue;
                    };
                    if let Move::Assign { to, .. } = &m {
                        moved.push((o, to.clone()));
                    }
                    patches.push(self.parent(kind, o, &m));
                }
                tally.add(self.children_first(kind, moved).await?);
                tally.add(send(patches).await?.into());
            }
        }
        tally.add(self.related().all().await?);
        Ok((owned, tally))
    }

    /// Relabels the children of each of `parents` (of `kind`) for the parent's new shard,
    /// found by the owner label khai gives every child it applies, and its related objects,
    /// found by the label naming it.
    async fn children_first(
        &self,
        kind: &Kind,
        parents: Vec<(&Meta, String)>,
    ) -> Result<Tally, kube::Error> {
        if parents.is_empty() {
            return Ok(Tally::default());
        }
        let found: Vec<Result<Vec<Relabel>, kube::Error>> = futures::stream::iter(parents)
            .map(|(p, to)| self.children_of(kind, p, to))
            .buffer_unordered(PATCHES_AT_ONCE)
            .collect()
            .await;
        let mut patches = Vec::new();
        for f in found {
            patches.extend(f?);
        }
        Ok(Tally::from(send(patches).await?))
    }

    /// The patches giving `parent`'s children and related objects, labelled for another shard
    /// than `to`, label `to`.
    async fn children_of(
        &self,
        kind: &Kind,
        parent: &Meta,
        to: String,
    ) -> Result<Vec<Relabel>, kube::Error> {
        let Some(uid) = parent.metadata.uid.as_deref() else {
            return Ok(Vec::new());
        };
        let label = &self.label;
        let selector = format!(
            "{}={uid},{label},{label}!={to}",
            crate::watch::ownership::OWNER_LABEL
        );
        let mut out = Vec::new();
        for (child, ns) in &self.kinds.children {
            // The children of a namespaced parent live in its namespace.
            let ns = match &parent.metadata.namespace {
                Some(p) if kind.namespaced && child.namespaced => Some(p.as_str()),
                _ => ns.as_deref(),
            };
            let mut pages = self.labelled(child, ns, &selector);
            while let Some(page) = pages.next().await? {
                out.extend(page.into_iter().filter_map(|c| {
                    Some(Relabel::child(
                        self.api(child, c.metadata.namespace.as_deref()),
                        c.metadata.name?,
                        c.metadata.resource_version,
                        label,
                        &to,
                    ))
                }));
            }
        }
        out.extend(self.related().of_parent(kind, parent, &to).await?);
        Ok(out)
    }
}

/// The ring key of parent `o` of `kind`.
fn key(kind: &Kind, o: &Meta) -> String {
    super::key(
        &kind.resource.group,
        &kind.resource.kind,
        o.metadata.namespace.as_deref(),
        o.metadata.name.as_deref().unwrap_or_default(),
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::shard::fake::{CMS, Fake, PARTS, SECRETS, naming, part, patches};
    use serde_json::json;

    /// Parts owning ConfigMaps, and Secrets naming their Part.
    pub(crate) fn kinds() -> Sharded {
        Sharded {
            parents: vec![Parent {
                kind: part(),
                namespace: Some("ns".into()),
                filter: Filter::default(),
            }],
            children: vec![(Kind::configmaps(), Some("ns".into()))],
            related: vec![crate::shard::related::tests::link()],
        }
    }

    fn passes<'a>(client: &'a kube::Client, kinds: &'a Sharded, page: u32) -> Passes<'a> {
        Passes {
            client,
            kinds,
            label: "shard.khai.dev/op".into(),
            drain: "drain.shard.khai.dev/op".into(),
            page,
        }
    }

    /// The position in `sent` of the patch of `path`.
    fn at(sent: &[String], path: &str) -> usize {
        let p = format!("PATCH {path} ");
        sent.iter()
            .position(|l| l.starts_with(&p))
            .unwrap_or_else(|| panic!("no patch of {path}: {sent:#?}"))
    }

    #[tokio::test]
    async fn a_pass_reads_the_next_page_only_once_the_last_is_written() {
        let fake = Fake::default();
        for i in 0..25 {
            fake.add(PARTS, &format!("p{i:02}"), json!({}), json!({}));
        }
        let (client, kinds) = (fake.client(), kinds());
        let ring = Ring::new(["a"]);
        let t = passes(&client, &kinds, 10).unassigned(&ring).await.unwrap();
        assert_eq!(
            t,
            Tally {
                written: 25,
                stale: 0
            }
        );
        let log = fake.log();
        let shape: Vec<&str> = log.iter().filter_map(|l| l.split(' ').next()).collect();
        let mut expected = Vec::new();
        for n in [10, 10, 5] {
            expected.push("LIST");
            expected.extend(std::iter::repeat_n("PATCH", n));
        }
        // Then the related objects on no live shard: none here.
        expected.push("LIST");
        assert_eq!(shape, expected, "{log:#?}");
        assert_eq!(log[0], format!("LIST {PARTS} !shard.khai.dev/op "));
        assert_eq!(log[11], format!("LIST {PARTS} !shard.khai.dev/op p09"));
    }

    #[tokio::test]
    async fn a_dead_shards_children_and_related_objects_are_relabelled_before_the_parents() {
        let fake = Fake::default();
        let dead = json!({ "shard.khai.dev/op": "gone" });
        for i in 0..3 {
            let name = format!("p{i}");
            fake.add(PARTS, &name, dead.clone(), json!({}));
            let owner = json!({ "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "Part",
                "name": name, "uid": format!("uid-{name}"), "controller": true }] });
            fake.add(CMS, &name, dead.clone(), owner);
            let related = naming(&name, Some("gone"));
            fake.add(SECRETS, &name, related, json!({}));
        }
        // No sharded parent controls this one: it is left alone.
        fake.add(CMS, "stray", dead.clone(), json!({}));
        fake.add(
            PARTS,
            "kept",
            json!({ "shard.khai.dev/op": "a" }),
            json!({}),
        );
        let (client, kinds) = (fake.client(), kinds());
        let ring = Ring::new(["a", "b"]);
        let t = passes(&client, &kinds, 500)
            .dead(&ring, "gone")
            .await
            .unwrap();
        assert_eq!(t.written, 9);
        let sent = patches(&fake);
        assert!(
            sent[..3].iter().all(|p| p.contains("/configmaps/")),
            "{sent:#?}"
        );
        assert!(
            sent[3..6].iter().all(|p| p.contains("/secrets/")),
            "{sent:#?}"
        );
        assert!(sent[6..].iter().all(|p| p.contains("/parts/")), "{sent:#?}");
        for i in 0..3 {
            let key = crate::shard::key("x.dev", "Part", Some("ns"), &format!("p{i}"));
            let to = ring.owner(&key).unwrap();
            let child = json!({ "shard.khai.dev/op": to });
            let parent = json!({ "shard.khai.dev/op": to, "drain.shard.khai.dev/op": null });
            for o in [CMS, SECRETS] {
                let patch = format!("PATCH {o}/p{i} {child}");
                assert!(sent.contains(&patch), "{sent:#?}");
            }
            assert!(
                sent.contains(&format!("PATCH {PARTS}/p{i} {parent}")),
                "{sent:#?}"
            );
        }
    }

    #[tokio::test]
    async fn a_parent_let_go_of_has_its_children_and_related_objects_relabelled_before_it() {
        let fake = Fake::default();
        fake.add(
            PARTS,
            "p",
            json!({ "drain.shard.khai.dev/op": "true" }),
            json!({}),
        );
        let child = json!({ "shard.khai.dev/op": "old", "khai.dev/owner": "uid-p" });
        fake.add(CMS, "p", child, json!({}));
        let another = json!({ "shard.khai.dev/op": "old", "khai.dev/owner": "uid-q" });
        fake.add(CMS, "q", another, json!({}));
        fake.add(SECRETS, "p-rel", naming("p", Some("old")), json!({}));
        fake.add(SECRETS, "p-new", naming("p", None), json!({}));
        fake.add(SECRETS, "p-there", naming("p", Some("a")), json!({}));
        let (client, kinds) = (fake.client(), kinds());
        let ring = Ring::new(["a"]);
        passes(&client, &kinds, 500)
            .unassigned(&ring)
            .await
            .unwrap();
        let sent = patches(&fake);
        assert_eq!(sent.len(), 4, "{sent:#?}");
        let parent = at(&sent, &format!("{PARTS}/p"));
        for o in [
            format!("{CMS}/p"),
            format!("{SECRETS}/p-rel"),
            format!("{SECRETS}/p-new"),
        ] {
            assert!(at(&sent, &o) < parent, "{sent:#?}");
        }
        let to_a = json!({ "shard.khai.dev/op": "a" });
        for o in [format!("{CMS}/p"), format!("{SECRETS}/p-rel")] {
            assert!(sent.contains(&format!("PATCH {o} {to_a}")), "{sent:#?}");
        }
    }

    #[tokio::test]
    async fn a_related_object_naming_another_parent_follows_it_in_the_full_pass() {
        let fake = Fake::default();
        let ring = Ring::new(["a", "b"]);
        for p in ["p", "q"] {
            let key = crate::shard::key("x.dev", "Part", Some("ns"), p);
            let on = json!({ "shard.khai.dev/op": ring.owner(&key).unwrap() });
            fake.add(PARTS, p, on, json!({}));
        }
        let q = crate::shard::key("x.dev", "Part", Some("ns"), "q");
        let q_on = ring.owner(&q).unwrap();
        let elsewhere = if q_on == "a" { "b" } else { "a" };
        // Relabelled from p to q: still on the shard it was on.
        fake.add(SECRETS, "s", naming("q", Some(elsewhere)), json!({}));
        let (client, kinds) = (fake.client(), kinds());
        let (_, t) = passes(&client, &kinds, 500).full(&ring).await.unwrap();
        assert_eq!(t.written, 1);
        let to = json!({ "shard.khai.dev/op": q_on });
        assert_eq!(patches(&fake), [format!("PATCH {SECRETS}/s {to}")]);
    }

    /// A parent the controllers' `selector` leaves out is not the operator's: no pass assigns,
    /// moves or drains it, nor relabels its children; a selected one moves, children first.
    #[tokio::test]
    async fn a_parent_the_controllers_filter_out_is_left_alone_with_its_children() {
        let fake = Fake::default();
        for (name, keep) in [("in", "yes"), ("out", "no")] {
            let labels = json!({ "shard.khai.dev/op": "gone", "keep": keep });
            fake.add(PARTS, name, labels, json!({}));
            let owner = json!({ "ownerReferences": [{ "apiVersion": "x.dev/v1", "kind": "Part",
                "name": name, "uid": format!("uid-{name}"), "controller": true }] });
            let child =
                json!({ "shard.khai.dev/op": "gone", "khai.dev/owner": format!("uid-{name}") });
            fake.add(CMS, name, child, owner);
        }
        fake.add(PARTS, "new", json!({ "keep": "no" }), json!({}));
        let mut kinds = kinds();
        kinds.parents[0].filter.labels = Some("keep=yes".into());
        let (client, ring) = (fake.client(), Ring::new(["a"]));
        let p = passes(&client, &kinds, 500);
        p.dead(&ring, "gone").await.unwrap();
        p.unassigned(&ring).await.unwrap();
        p.full(&ring).await.unwrap();
        let child = json!({ "shard.khai.dev/op": "a" });
        let parent = json!({ "shard.khai.dev/op": "a", "drain.shard.khai.dev/op": null });
        assert_eq!(
            patches(&fake),
            [
                format!("PATCH {CMS}/in {child}"),
                format!("PATCH {PARTS}/in {parent}")
            ]
        );
        let lists: Vec<String> = fake
            .log()
            .into_iter()
            .filter(|l| l.starts_with(&format!("LIST {PARTS}")))
            .collect();
        assert!(lists.iter().all(|l| l.contains("keep=yes,")), "{lists:#?}");
    }
}
