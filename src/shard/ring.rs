//! A consistent-hash ring over the live shards: each shard stands at [`VNODES`] points of a
//! 64-bit circle, and a key belongs to the shard at the first point at or after its hash.
//!
//! Written here rather than taken from a crate: it is a sorted vector and a binary search, and
//! its hash must stay the same across khai versions and replicas (xxh3, whose output is
//! specified), which the ring crates do not promise.

use xxhash_rust::xxh3::xxh3_64;

/// Points per shard. 512 keep each shard's arc of the ring within about 5% of an even share, so
/// the keys a shard owns stay within ±20% of a third even for a few hundred keys.
pub(crate) const VNODES: usize = 512;

/// The ring of one membership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ring {
    /// (point, index into `shards`), sorted by point.
    points: Vec<(u64, usize)>,
    shards: Vec<String>,
}

impl Ring {
    /// The ring of `shards` (duplicates count once; order does not matter).
    pub(crate) fn new<'a>(shards: impl IntoIterator<Item = &'a str>) -> Self {
        let mut shards: Vec<String> = shards.into_iter().map(str::to_string).collect();
        shards.sort();
        shards.dedup();
        let mut points: Vec<(u64, usize)> = shards
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                (0..VNODES).map(move |n| (xxh3_64(format!("{s}/{n}").as_bytes()), i))
            })
            .collect();
        points.sort_unstable();
        Self { points, shards }
    }

    /// Makes this the ring of `shards`, placing the points again only when the set of shards
    /// differs (a Lease renewal changes nothing here); whether it did.
    pub(crate) fn set<'a>(&mut self, shards: impl IntoIterator<Item = &'a str>) -> bool {
        let mut next: Vec<&str> = shards.into_iter().collect();
        next.sort_unstable();
        next.dedup();
        if self
            .shards
            .iter()
            .map(String::as_str)
            .eq(next.iter().copied())
        {
            return false;
        }
        *self = Self::new(next);
        true
    }

    /// The shard that owns `key`; `None` when the ring is empty.
    pub(crate) fn owner(&self, key: &str) -> Option<&str> {
        let h = xxh3_64(key.as_bytes());
        let at = self.points.partition_point(|(p, _)| *p < h);
        let (_, i) = self.points.get(at).or_else(|| self.points.first())?;
        Some(self.shards[*i].as_str())
    }

    /// The shards on the ring, sorted.
    pub(crate) fn shards(&self) -> &[String] {
        &self.shards
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("examples.khai.dev/Cache/ns-{}/cache-{i}", i % 7))
            .collect()
    }

    fn share(ring: &Ring, keys: &[String]) -> HashMap<String, usize> {
        let mut owned = HashMap::new();
        for k in keys {
            *owned.entry(ring.owner(k).unwrap().to_string()).or_default() += 1;
        }
        owned
    }

    #[test]
    fn three_shards_each_own_a_third_of_3000_keys_within_20_percent() {
        let ring = Ring::new(["khai-0", "khai-1", "khai-2"]);
        let owned = share(&ring, &keys(3000));
        assert_eq!(owned.len(), 3, "{owned:?}");
        for (shard, n) in &owned {
            assert!(
                (800..=1200).contains(n),
                "{shard} owns {n} of 3000: {owned:?}"
            );
        }
    }

    #[test]
    fn a_shard_joining_takes_keys_only_for_itself_and_about_a_quarter_of_them() {
        let keys = keys(3000);
        let three = Ring::new(["khai-0", "khai-1", "khai-2"]);
        let four = Ring::new(["khai-0", "khai-1", "khai-2", "khai-3"]);
        let moved: Vec<_> = keys
            .iter()
            .filter(|k| three.owner(k) != four.owner(k))
            .collect();
        assert!(
            moved.iter().all(|k| four.owner(k) == Some("khai-3")),
            "a key moved between two shards that were there before"
        );
        assert!(
            (500..=1000).contains(&moved.len()),
            "{} of 3000 moved",
            moved.len()
        );
    }

    #[test]
    fn a_shard_leaving_gives_up_only_its_own_keys() {
        let keys = keys(3000);
        let three = Ring::new(["khai-0", "khai-1", "khai-2"]);
        let two = Ring::new(["khai-0", "khai-2"]);
        for k in &keys {
            if three.owner(k) != Some("khai-1") {
                assert_eq!(
                    three.owner(k),
                    two.owner(k),
                    "{k} moved though its shard stayed"
                );
            }
        }
    }

    #[test]
    fn the_ring_is_the_same_whatever_the_order_of_its_shards_and_empty_owns_nothing() {
        let a = Ring::new(["b", "a", "c"]);
        let b = Ring::new(["c", "b", "a", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.shards(), ["a", "b", "c"]);
        assert_eq!(Ring::new([]).owner("x"), None);
    }

    #[test]
    fn setting_the_same_shards_keeps_the_points_and_another_set_places_them_anew() {
        let mut ring = Ring::default();
        assert!(ring.set(["b", "a"]));
        assert_eq!(ring, Ring::new(["a", "b"]));
        assert!(
            !ring.set(["a", "b", "a"]),
            "the same shards, in another order"
        );
        assert!(ring.set(["a", "b", "c"]));
        assert_eq!(ring, Ring::new(["c", "b", "a"]));
        assert!(ring.set(std::iter::empty()));
        assert_eq!(ring, Ring::default());
    }
}
