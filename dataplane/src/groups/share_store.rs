//! Share groups and their start offsets, in memory and in an internal
//! compacted log of their own, so an acknowledged AlterShareGroupOffsets
//! survives a crash.
//!
//! One [`CompactedLog`] per shard, `<data dir>/__ringmirror/share-group-offsets-<shard>/`,
//! next to the shard's consumer offsets log (`group-offsets-<shard>`, see
//! [`super::store`]) rather than inside it: Kafka keeps share-partition
//! state in an internal topic of its own (`__share_group_state`, owned by
//! the share coordinator), apart from `__consumer_offsets`, and a separate
//! log keeps ours in `__consumer_offsets`' record format only, so Kafka's
//! tools still read it, and lets each log compact on its own. A group id
//! is unique across the two: the coordinator checks both before creating
//! a group of either type ([`super::GroupCoordinator`]).
//!
//! Records (big-endian, strings as an i16 length and UTF-8 bytes; our own
//! layout, not `__share_group_state`'s, which is keyed by topic id and
//! carries in-flight record state we do not have):
//!
//! - key version 0, a share group: (group) → value version 0 (group epoch,
//!   bumped by every alter, as Kafka does). A group exists while this
//!   record does, with or without start offsets (DeleteShareGroupOffsets
//!   leaves an Empty group behind, as in Kafka).
//! - key version 1, a share-partition start offset: (group, topic,
//!   partition) → value version 0 (start offset, leader epoch, write
//!   timestamp).
//!
//! A null value is a tombstone. An alter writes the group record and its
//! offsets as one batch (flushed before it is answered); DeleteGroups
//! writes tombstones for both kinds in one batch.

use std::collections::BTreeMap;
use std::path::Path;

use super::store::{Reader, StoreResult, encode_partition_key, open_shard_log, tombstone};
use ringmirror_storage::limits::{TooLong, put_string};
use ringmirror_storage::log::{CompactedLog, KeyedRecord};

const KEY_VERSION_GROUP: i16 = 0;
const KEY_VERSION_START_OFFSET: i16 = 1;
const VALUE_VERSION: i16 = 0;
/// The leader epoch of a start offset set by AlterShareGroupOffsets
/// (Kafka's share coordinator initializes the state with no epoch).
pub const NO_LEADER_EPOCH: i32 = -1;

/// One share-partition's start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareStartOffset {
    pub start_offset: i64,
    pub leader_epoch: i32,
    pub write_timestamp: i64,
}

/// A share group as stored: its epoch and start offsets by (topic,
/// partition).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareGroup {
    pub epoch: i32,
    pub offsets: BTreeMap<(String, i32), ShareStartOffset>,
}

/// The share groups placed on one shard.
pub struct ShareOffsetStore {
    log: CompactedLog,
    groups: BTreeMap<String, ShareGroup>,
}

pub fn encode_group_key(group: &str) -> Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(4 + group.len());
    out.extend_from_slice(&KEY_VERSION_GROUP.to_be_bytes());
    put_string(&mut out, "group id", group)?;
    Ok(out)
}

pub fn encode_offset_key(group: &str, topic: &str, partition: i32) -> Result<Vec<u8>, TooLong> {
    encode_partition_key(KEY_VERSION_START_OFFSET, group, topic, partition)
}

fn encode_group_value(epoch: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(6);
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&epoch.to_be_bytes());
    out
}

fn encode_offset_value(v: &ShareStartOffset) -> Vec<u8> {
    let mut out = Vec::with_capacity(22);
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&v.start_offset.to_be_bytes());
    out.extend_from_slice(&v.leader_epoch.to_be_bytes());
    out.extend_from_slice(&v.write_timestamp.to_be_bytes());
    out
}

/// What a record key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareKey {
    Group(String),
    StartOffset(String, String, i32),
}

pub fn decode_key(key: &[u8]) -> Option<ShareKey> {
    let mut r = Reader(key);
    match r.i16()? {
        KEY_VERSION_GROUP => Some(ShareKey::Group(r.string()?)),
        KEY_VERSION_START_OFFSET => Some(ShareKey::StartOffset(r.string()?, r.string()?, r.i32()?)),
        _ => None,
    }
}

fn decode_group_value(value: &[u8]) -> Option<i32> {
    let mut r = Reader(value);
    (r.i16()? == VALUE_VERSION).then_some(())?;
    r.i32()
}

fn decode_offset_value(value: &[u8]) -> Option<ShareStartOffset> {
    let mut r = Reader(value);
    (r.i16()? == VALUE_VERSION).then_some(())?;
    Some(ShareStartOffset {
        start_offset: r.i64()?,
        leader_epoch: r.i32()?,
        write_timestamp: r.i64()?,
    })
}

impl ShareOffsetStore {
    /// Opens (creating) shard `shard`'s share-group log under `data_dir`
    /// and loads it.
    pub fn open(data_dir: &Path, shard: usize, compact_min_bytes: u64) -> StoreResult<Self> {
        let (log, values) = open_shard_log(data_dir, "share-group-offsets", shard, compact_min_bytes)?;
        let mut groups: BTreeMap<String, ShareGroup> = BTreeMap::new();
        for (key, value) in values {
            match decode_key(&key) {
                Some(ShareKey::Group(group)) => match decode_group_value(&value) {
                    Some(epoch) => groups.entry(group).or_default().epoch = epoch,
                    None => tracing::warn!(group, "skipping an undecodable share group record"),
                },
                Some(ShareKey::StartOffset(group, topic, partition)) => match decode_offset_value(&value) {
                    // An offset without its group record (not written so,
                    // but harmless): the group exists.
                    Some(v) => {
                        groups.entry(group).or_default().offsets.insert((topic, partition), v);
                    }
                    None => tracing::warn!(group, topic, partition, "skipping an undecodable share start offset"),
                },
                None => tracing::warn!(key = ?key, "skipping an unknown share group record"),
            }
        }
        Ok(Self { log, groups })
    }

    pub fn group(&self, group: &str) -> Option<&ShareGroup> {
        self.groups.get(group)
    }

    pub fn contains(&self, group: &str) -> bool {
        self.groups.contains_key(group)
    }

    /// Every share group on this shard.
    pub fn groups(&self) -> impl Iterator<Item = (&String, &ShareGroup)> {
        self.groups.iter()
    }

    /// Sets start offsets of `group`, creating it, and bumps its epoch:
    /// written and flushed as one batch first, then visible.
    pub fn alter(&mut self, group: &str, offsets: Vec<((String, i32), i64)>, now_ms: i64) -> StoreResult<()> {
        let epoch = self.groups.get(group).map_or(0, |g| g.epoch).saturating_add(1);
        let values: Vec<((String, i32), ShareStartOffset)> = offsets
            .into_iter()
            .map(|(tp, start_offset)| {
                let v = ShareStartOffset {
                    start_offset,
                    leader_epoch: NO_LEADER_EPOCH,
                    write_timestamp: now_ms,
                };
                (tp, v)
            })
            .collect();
        let mut records = Vec::with_capacity(values.len() + 1);
        records.push(KeyedRecord {
            key: encode_group_key(group)?,
            value: Some(encode_group_value(epoch)),
            timestamp_ms: Some(now_ms),
        });
        for ((topic, partition), v) in &values {
            records.push(KeyedRecord {
                key: encode_offset_key(group, topic, *partition)?,
                value: Some(encode_offset_value(v)),
                timestamp_ms: Some(now_ms),
            });
        }
        self.log.append(records)?;
        let g = self.groups.entry(group.to_owned()).or_default();
        g.epoch = epoch;
        g.offsets.extend(values);
        Ok(())
    }

    /// Deletes `group`'s start offsets of `topics` (tombstones); the group
    /// stays. Returns the topics that had offsets (the others are left
    /// alone).
    pub fn delete_topics(&mut self, group: &str, topics: &[String]) -> StoreResult<Vec<String>> {
        let Some(g) = self.groups.get(group) else {
            return Ok(Vec::new());
        };
        let doomed: Vec<(String, i32)> = g.offsets.keys().filter(|(t, _)| topics.contains(t)).cloned().collect();
        let records = doomed
            .iter()
            .map(|(topic, partition)| encode_offset_key(group, topic, *partition).map(tombstone))
            .collect::<Result<_, TooLong>>()?;
        self.log.append(records)?;
        let g = self.groups.get_mut(group).expect("found above");
        let mut deleted: Vec<String> = Vec::new();
        for tp in doomed {
            if !deleted.contains(&tp.0) {
                deleted.push(tp.0.clone());
            }
            g.offsets.remove(&tp);
        }
        Ok(deleted)
    }

    /// Deletes `group` and every start offset of it (tombstones).
    pub fn delete_group(&mut self, group: &str) -> StoreResult<()> {
        let Some(g) = self.groups.get(group) else {
            return Ok(());
        };
        let mut records = vec![tombstone(encode_group_key(group)?)];
        for (topic, partition) in g.offsets.keys() {
            records.push(tombstone(encode_offset_key(group, topic, *partition)?));
        }
        self.log.append(records)?;
        self.groups.remove(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::INTERNAL_DIR;
    use super::*;

    fn tp(t: &str, p: i32) -> (String, i32) {
        (t.to_owned(), p)
    }

    #[test]
    fn records_round_trip() {
        assert_eq!(
            encode_group_key("g").unwrap(),
            [&[0, 0, 0, 1][..], b"g"].concat(),
            "key version 0, the group"
        );
        assert_eq!(
            decode_key(&encode_group_key("g").unwrap()),
            Some(ShareKey::Group("g".into()))
        );
        let key = encode_offset_key("g", "orders", 7).unwrap();
        assert_eq!(
            key,
            [&[0, 1, 0, 1][..], b"g", &[0, 6], b"orders", &[0, 0, 0, 7]].concat()
        );
        assert_eq!(
            decode_key(&key),
            Some(ShareKey::StartOffset("g".into(), "orders".into(), 7))
        );
        let v = ShareStartOffset {
            start_offset: 42,
            leader_epoch: -1,
            write_timestamp: 1_700_000_000_000,
        };
        assert_eq!(decode_offset_value(&encode_offset_value(&v)), Some(v));
        assert_eq!(decode_group_value(&encode_group_value(3)), Some(3));
        assert_eq!(decode_key(&[0, 9, 0, 1, b'g']), None, "an unknown key version");
        assert_eq!(decode_offset_value(&[0, 0, 1]), None, "cut short");
        assert_eq!(
            decode_group_value(&[0, 1, 0, 0, 0, 1]),
            None,
            "an unknown value version"
        );
    }

    #[test]
    fn alters_survive_reopen_and_tombstones_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ShareOffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        store
            .alter("s", vec![(tp("t", 0), 5), (tp("t", 1), 6), (tp("u", 0), 1)], 10)
            .unwrap();
        store.alter("s", vec![(tp("t", 0), 50)], 11).unwrap();
        store.alter("gone", vec![(tp("t", 0), 1)], 12).unwrap();
        store.delete_group("gone").unwrap();
        store.alter("emptied", vec![(tp("t", 0), 1)], 13).unwrap();
        assert_eq!(
            store.delete_topics("emptied", &["t".into(), "x".into()]).unwrap(),
            ["t"]
        );
        assert_eq!(store.delete_topics("s", &["u".into()]).unwrap(), ["u"]);
        drop(store);
        let store = ShareOffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        let s = store.group("s").unwrap();
        assert_eq!(s.epoch, 2, "bumped by each alter");
        assert_eq!(
            s.offsets
                .iter()
                .map(|(k, v)| (k.clone(), v.start_offset))
                .collect::<Vec<_>>(),
            [(tp("t", 0), 50), (tp("t", 1), 6)]
        );
        assert_eq!(s.offsets[&tp("t", 0)].leader_epoch, NO_LEADER_EPOCH);
        assert_eq!(s.offsets[&tp("t", 0)].write_timestamp, 11);
        assert!(store.group("gone").is_none());
        assert!(
            store.group("emptied").is_some_and(|g| g.offsets.is_empty()),
            "a group whose offsets were deleted stays"
        );
        assert_eq!(
            store.groups().map(|(g, _)| g.as_str()).collect::<Vec<_>>(),
            ["emptied", "s"]
        );
        assert!(dir.path().join(INTERNAL_DIR).join("share-group-offsets-0").is_dir());
    }

    #[test]
    fn compaction_keeps_the_latest_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = ShareOffsetStore::open(dir.path(), 3, 16 * 1024).unwrap();
        for i in 0..2000 {
            store.alter("s", vec![(tp("t", i % 4), i64::from(i))], 1).unwrap();
        }
        store.alter("gone", vec![(tp("t", 0), 1)], 1).unwrap();
        store.delete_group("gone").unwrap();
        let bytes = store.log.size_bytes();
        assert!(bytes < 32 * 1024, "compacted: {bytes}");
        drop(store);
        let store = ShareOffsetStore::open(dir.path(), 3, 16 * 1024).unwrap();
        let s = store.group("s").unwrap();
        assert_eq!(s.epoch, 2000);
        for p in 0..4 {
            assert_eq!(s.offsets[&tp("t", p)].start_offset, i64::from(1996 + p));
        }
        assert!(store.group("gone").is_none());
    }
}
