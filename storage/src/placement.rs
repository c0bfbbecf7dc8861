//! Placement hashing: which shard owns a partition, a group or a
//! transactional id — a stable hash, so placement survives restarts and
//! every room computes it the same way.

use crate::log::TopicPartition;

/// The shard that owns a partition: a stable hash (FNV-1a) of its topic
/// name and partition number, so placement survives restarts, does not
/// depend on the standard library's randomized hasher, and can be computed
/// from a partition directory found on disk (which records no mirror name).
pub fn shard_for(tp: &TopicPartition, shards: usize) -> usize {
    shard_for_bytes(tp.topic.bytes().chain(tp.partition.to_be_bytes()), shards)
}

/// The shard that owns a key placed by name (a group id, a transactional
/// id): the same hash as partitions, over the name's bytes.
pub fn shard_for_key(key: &str, shards: usize) -> usize {
    shard_for_bytes(key.bytes(), shards)
}

fn shard_for_bytes(bytes: impl IntoIterator<Item = u8>, shards: usize) -> usize {
    (stable_hash(bytes) % shards.max(1) as u64) as usize
}

/// 64-bit FNV-1a: the same on every run and every build, for placements
/// that must survive restarts.
pub fn stable_hash(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
