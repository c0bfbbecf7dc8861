//! Committed group offsets, in memory and in an internal compacted log in
//! Kafka's `__consumer_offsets` record format, so an acknowledged commit
//! survives a crash and Kafka's own tools can read the file.
//!
//! One [`CompactedLog`] per shard, `<data dir>/__ringmirror/group-offsets-<shard>/`
//! (not a `<topic>-<n>` directory of the data dir, since each of those is
//! served as a topic); it owns flushing, recovery and compaction. Records:
//! key version 1 (group, topic, partition), value version 3 (offset, leader
//! epoch, metadata, commit timestamp); a null value is a tombstone (a
//! deleted group's offsets). Share groups' start offsets are kept apart,
//! in a log of their own ([`super::share_store`]).

use std::collections::BTreeMap;
use std::path::Path;

use ringmirror_storage::limits::{TooLong, put_string};
use ringmirror_storage::log::compacted::LiveValues;
use ringmirror_storage::log::{CompactedLog, KeyedRecord, LogError};

/// The directory under the data dir for the agent's internal state.
pub const INTERNAL_DIR: &str = "__ringmirror";
/// Kafka's `offset.metadata.max.bytes`.
pub const METADATA_MAX_BYTES: usize = 4096;
/// Key and value versions of Kafka's offset commit records.
const KEY_VERSION_OFFSET: i16 = 1;
const VALUE_VERSION: i16 = 3;

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// A group's committed offsets by (topic, partition).
pub type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

/// The store's errors are the log's (I/O, corruption).
pub type StoreResult<T> = Result<T, LogError>;

/// Committed offsets of the groups placed on one shard.
pub struct OffsetStore {
    log: CompactedLog,
    offsets: BTreeMap<String, GroupOffsets>,
}

/// Opens (creating) the log `<data dir>/__ringmirror/<name>-<shard>/` of
/// one shard's store (this one's, or the share-group store's next to it)
/// and returns it with the live value of every key; the log completes or
/// undoes an interrupted compaction first.
pub(super) fn open_shard_log(
    data_dir: &Path,
    name: &str,
    shard: usize,
    compact_min_bytes: u64,
) -> StoreResult<(CompactedLog, LiveValues)> {
    CompactedLog::open(
        &data_dir.join(INTERNAL_DIR),
        &format!("{name}-{shard}"),
        compact_min_bytes,
    )
}

/// The record that deletes `key`.
pub(super) fn tombstone(key: Vec<u8>) -> KeyedRecord {
    KeyedRecord {
        key,
        value: None,
        timestamp_ms: None,
    }
}

/// A key of key version `version` naming (group, topic, partition): an
/// offset commit's, or a share-group start offset's. Strings are Kafka
/// STRINGs (i16 length): a longer one is refused, never wrapped.
pub(super) fn encode_partition_key(version: i16, group: &str, topic: &str, partition: i32) -> Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(10 + group.len() + topic.len());
    out.extend_from_slice(&version.to_be_bytes());
    put_string(&mut out, "group id", group)?;
    put_string(&mut out, "topic name", topic)?;
    out.extend_from_slice(&partition.to_be_bytes());
    Ok(out)
}

/// Key version 1: group, topic, partition.
pub fn encode_key(group: &str, topic: &str, partition: i32) -> Result<Vec<u8>, TooLong> {
    encode_partition_key(KEY_VERSION_OFFSET, group, topic, partition)
}

/// Value version 3: offset, leader epoch, metadata, commit timestamp.
pub fn encode_value(v: &CommittedOffset) -> Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(24 + v.metadata.len());
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&v.offset.to_be_bytes());
    out.extend_from_slice(&v.leader_epoch.to_be_bytes());
    put_string(&mut out, "offset metadata", &v.metadata)?;
    out.extend_from_slice(&v.commit_timestamp.to_be_bytes());
    Ok(out)
}

/// A cursor over a record key or value (of either store); `None` when it
/// runs out.
pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    pub(super) fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    pub(super) fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    pub(super) fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
    pub(super) fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        let bytes = self.0.get(..len)?;
        self.0 = &self.0[len..];
        String::from_utf8(bytes.to_vec()).ok()
    }
}

/// (group, topic, partition) of an offset commit key; `None` for other
/// keys (group metadata, key version 2, which we do not write).
pub fn decode_key(key: &[u8]) -> Option<(String, String, i32)> {
    let mut r = Reader(key);
    match r.i16()? {
        0 | 1 => Some((r.string()?, r.string()?, r.i32()?)),
        _ => None,
    }
}

/// An offset commit value of any of Kafka's non-flexible versions (0–3).
pub fn decode_value(value: &[u8]) -> Option<CommittedOffset> {
    let mut r = Reader(value);
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp = r.i64()?;
    (0..=3).contains(&version).then_some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

impl OffsetStore {
    /// Opens (creating) shard `shard`'s offsets log under `data_dir` and
    /// loads it (the log completes or undoes an interrupted compaction first).
    pub fn open(data_dir: &Path, shard: usize, compact_min_bytes: u64) -> StoreResult<Self> {
        let (log, values) = open_shard_log(data_dir, "group-offsets", shard, compact_min_bytes)?;
        let mut offsets: BTreeMap<String, GroupOffsets> = BTreeMap::new();
        for (key, value) in values {
            let Some((group, topic, partition)) = decode_key(&key) else {
                continue;
            };
            match decode_value(&value) {
                Some(v) => {
                    offsets.entry(group).or_default().insert((topic, partition), v);
                }
                None => tracing::warn!(group, topic, partition, "skipping an undecodable offset record"),
            }
        }
        Ok(Self { log, offsets })
    }

    /// A group's committed offsets.
    pub fn offsets(&self, group: &str) -> Option<&GroupOffsets> {
        self.offsets.get(group)
    }

    /// Groups that have committed offsets.
    pub fn groups(&self) -> impl Iterator<Item = &String> {
        self.offsets.keys()
    }

    /// Stores offsets for `group`: written and flushed as one batch first,
    /// then visible.
    pub fn commit(&mut self, group: &str, offsets: Vec<((String, i32), CommittedOffset)>) -> StoreResult<()> {
        let records = offsets
            .iter()
            .map(|((topic, partition), v)| {
                Ok(KeyedRecord {
                    key: encode_key(group, topic, *partition)?,
                    value: Some(encode_value(v)?),
                    timestamp_ms: Some(v.commit_timestamp),
                })
            })
            .collect::<Result<_, TooLong>>()?;
        self.log.append(records)?;
        if !offsets.is_empty() {
            self.offsets.entry(group.to_owned()).or_default().extend(offsets);
        }
        Ok(())
    }

    /// Deletes every offset of `group` (a tombstone per key).
    pub fn delete_group(&mut self, group: &str) -> StoreResult<()> {
        let Some(offsets) = self.offsets.get(group) else {
            return Ok(());
        };
        let records = offsets
            .keys()
            .map(|(topic, partition)| encode_key(group, topic, *partition).map(tombstone))
            .collect::<Result<_, TooLong>>()?;
        self.log.append(records)?;
        self.offsets.remove(group);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
        }
    }

    fn tp(t: &str, p: i32) -> (String, i32) {
        (t.to_owned(), p)
    }

    #[test]
    fn records_round_trip_in_kafkas_format() {
        let key = encode_key("g", "orders", 7).unwrap();
        assert_eq!(
            key,
            [&[0, 1, 0, 1][..], b"g", &[0, 6], b"orders", &[0, 0, 0, 7]].concat()
        );
        assert_eq!(decode_key(&key), Some(("g".into(), "orders".into(), 7)));
        assert_eq!(decode_value(&encode_value(&offset(42)).unwrap()), Some(offset(42)));
        // Version 1 (with an expire timestamp) is read too; epoch unknown.
        let mut v1 = vec![0, 1];
        v1.extend_from_slice(&9i64.to_be_bytes());
        v1.extend_from_slice(&[0, 0]);
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&6i64.to_be_bytes());
        let decoded = decode_value(&v1).unwrap();
        assert_eq!(
            (decoded.offset, decoded.leader_epoch, decoded.commit_timestamp),
            (9, -1, 5)
        );
        assert_eq!(decode_key(&[0, 2, 0, 1, b'g']), None);
        assert_eq!(decode_value(&[0, 3, 1]), None);
    }

    #[test]
    fn strings_longer_than_their_i16_length_are_refused_not_wrapped() {
        let long = "x".repeat(40_000);
        let refused = encode_key(&long, "t", 0).unwrap_err();
        assert_eq!((refused.field, refused.bytes), ("group id", 40_000));
        assert_eq!(encode_key("g", &long, 0).unwrap_err().field, "topic name");
        let mut v = offset(1);
        v.metadata = long;
        assert_eq!(encode_value(&v).unwrap_err().field, "offset metadata");
        // Nothing reaches the log.
        let dir = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        let refused = store.commit("g", vec![(tp("t", 0), offset(1)), (tp("t", 1), v)]);
        assert!(matches!(refused, Err(LogError::FieldTooLong(_))), "{refused:?}");
        assert!(store.offsets("g").is_none());
        drop(store);
        assert!(
            OffsetStore::open(dir.path(), 0, u64::MAX)
                .unwrap()
                .offsets("g")
                .is_none()
        );
    }

    #[test]
    fn commits_survive_reopen_and_tombstones_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        store
            .commit("a", vec![(tp("t", 0), offset(1)), (tp("t", 1), offset(2))])
            .unwrap();
        store.commit("a", vec![(tp("t", 0), offset(10))]).unwrap();
        store.commit("b", vec![(tp("u", 0), offset(5))]).unwrap();
        store.delete_group("b").unwrap();
        drop(store);
        let store = OffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        let a = store.offsets("a").unwrap();
        assert_eq!(a.get(&tp("t", 0)), Some(&offset(10)));
        assert_eq!(a.get(&tp("t", 1)), Some(&offset(2)));
        assert!(store.offsets("b").is_none());
        assert_eq!(store.groups().collect::<Vec<_>>(), ["a"]);
        // Not a topic directory of the data dir.
        assert!(dir.path().join(INTERNAL_DIR).join("group-offsets-0").is_dir());
    }

    #[test]
    fn compaction_rewrites_the_log_and_keeps_the_latest_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(dir.path(), 1, 16 * 1024).unwrap();
        for i in 0..2000 {
            store.commit("g", vec![(tp("t", i % 4), offset(i64::from(i)))]).unwrap();
        }
        store.commit("gone", vec![(tp("t", 0), offset(1))]).unwrap();
        store.delete_group("gone").unwrap();
        let bytes = store.log.size_bytes();
        assert!(bytes < 32 * 1024, "compacted: {bytes}");
        drop(store);
        let store = OffsetStore::open(dir.path(), 1, 16 * 1024).unwrap();
        for p in 0..4 {
            assert_eq!(store.offsets("g").unwrap()[&tp("t", p)].offset, i64::from(1996 + p));
        }
        assert!(store.offsets("gone").is_none());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join(INTERNAL_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["group-offsets-1"]);
    }

    /// Every crash point of the swap: a leftover copy, a missing live log
    /// between the renames, a leftover old log.
    #[test]
    fn an_interrupted_compaction_leaves_a_complete_log() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(INTERNAL_DIR);
        let live = root.join("group-offsets-0");
        let mut store = OffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
        store.commit("g", vec![(tp("t", 0), offset(7))]).unwrap();
        drop(store);
        let copy_of = |from: &Path, to: &Path| {
            std::fs::create_dir_all(to).unwrap();
            for e in std::fs::read_dir(from).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        };
        let check = || {
            let store = OffsetStore::open(dir.path(), 0, u64::MAX).unwrap();
            assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)].offset, 7);
            let mut names: Vec<_> = std::fs::read_dir(&root)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            assert_eq!(names, ["group-offsets-0"]);
        };
        // Crash while writing the copy: a half-written copy is dropped.
        std::fs::create_dir_all(root.join("group-offsets-0.compacted")).unwrap();
        std::fs::write(root.join("group-offsets-0.compacted/00000000000000000000.log"), b"torn").unwrap();
        check();
        // Crash between the renames: the complete copy becomes the log.
        copy_of(&live, &root.join("group-offsets-0.compacted"));
        std::fs::rename(&live, root.join("group-offsets-0.old")).unwrap();
        check();
        // Crash before the old log was removed.
        copy_of(&live, &root.join("group-offsets-0.old"));
        check();
    }
}
