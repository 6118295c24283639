//! The metrics of sharding (`khai run --shards`) and of the caches' size: what the sharder
//! assigned and moved, the drains a shard acknowledged, the objects each kind's caches hold.

use prometheus::{IntCounterVec, IntGaugeVec, Registry};

pub(super) struct ShardMetrics {
    objects: IntGaugeVec,
    moves: IntCounterVec,
    acks: IntCounterVec,
    cached: IntGaugeVec,
    ring: IntGaugeVec,
}

impl ShardMetrics {
    pub(super) fn new(r: &Registry) -> Self {
        Self {
            objects: super::gauge(
                r,
                "khai_shard_objects",
                "Parents labelled for each shard, as the replica holding the sharder Lease last counted them",
                &["shard"],
            ),
            moves: super::counter(
                r,
                "khai_shard_moves_total",
                "Labels the sharder wrote, by sort: assign (an unassigned parent), move (off a dead shard), drain (asking a live shard to let go), child (a moved parent's child), related (a related object following its parent)",
                &["sort"],
            ),
            acks: super::counter(
                r,
                "khai_shard_drains_total",
                "Parents this shard let go of when the sharder asked (drain acknowledged)",
                &["controller"],
            ),
            cached: super::gauge(
                r,
                "khai_cached_objects",
                "Objects in this replica's caches, by kind (with --shards: its share)",
                &["kind"],
            ),
            ring: super::gauge(
                r,
                "khai_shard_ring_shards",
                "Live shards in the ring this replica's assignment webhook hashes with",
                &[],
            ),
        }
    }
}

/// The sharder's count of parents per shard; shards absent from `owned` are dropped.
pub(crate) fn shard_objects(owned: &std::collections::BTreeMap<String, i64>) {
    let m = &super::METRICS.shard.objects;
    m.reset();
    for (shard, n) in owned {
        m.with_label_values(&[shard]).set(*n);
    }
}

/// The sharder wrote a label of `sort` (`assign`, `move`, `drain`, `child`, `related`).
pub(crate) fn shard_moved(sort: &str) {
    super::METRICS.shard.moves.with_label_values(&[sort]).inc();
}

/// `controller` let go of a parent the sharder asked it to drain.
pub(crate) fn shard_drained(controller: &str) {
    super::METRICS
        .shard
        .acks
        .with_label_values(&[controller])
        .inc();
}

/// The caches of `kind` hold `n` objects.
pub(crate) fn cached_objects(kind: &str, n: usize) {
    super::METRICS
        .shard
        .cached
        .with_label_values(&[kind])
        .set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// This replica's view of the ring holds `n` live shards.
pub(crate) fn ring_shards(n: usize) {
    super::METRICS
        .shard
        .ring
        .with_label_values::<&str>(&[])
        .set(i64::try_from(n).unwrap_or(i64::MAX));
}
