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
//!
//! Offsets committed in an open transaction (TxnOffsetCommit) are kept
//! too, pending, under keys of their own: key version
//! [`KEY_VERSION_PENDING_TXN_OFFSET`] (group, producer id, topic,
//! partition) → the same value version 3. Kafka writes them as ordinary
//! offset commit records in a transactional batch of `__consumer_offsets`
//! and lets the COMMIT/ABORT marker decide them on replay
//! (`OffsetMetadataManager.replayEndTransactionMarker`); a compacted log of
//! plain batches cannot hold a batch undecided, so ours says "pending" in
//! the key, a version outside Kafka's record types (its tools skip or
//! report it, never read it as a commit).
//!
//! Order of writes, so that a crash anywhere leaves a state that reloads to
//! the same outcome:
//! - TxnOffsetCommit: the pending records are flushed before it is
//!   answered. A crash before the flush loses only an unanswered request
//!   (the producer retries it or its transaction aborts).
//! - The transaction's end: the committed values (on COMMIT) and a
//!   tombstone for each of its pending keys go in **one batch**, flushed
//!   before the marker is acknowledged. A batch is whole or cut by the
//!   log's recovery, so a reload finds either all of them pending (the
//!   coordinator has no acknowledgement, re-sends the marker after its own
//!   reload, and it is applied again) or none pending and the values
//!   committed (a re-sent marker finds nothing and is acknowledged).
//!   Writing the same committed values twice is harmless: no other write
//!   happened in between, since the first never returned.
//!
//! On open, pending offsets are loaded back; the transaction coordinator's
//! reload completes or aborts their transactions (a transaction still open
//! when the agent stopped times out and aborts), and its marker decides
//! them as before the restart.

use std::collections::{BTreeMap, HashMap};
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
/// Key version of a pending transactional offset: ours, far above Kafka's
/// `__consumer_offsets` record types (which count up from 0).
pub const KEY_VERSION_PENDING_TXN_OFFSET: i16 = 0x7f00;

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

/// Per producer id, per group, the offsets it committed in its open transaction.
pub type PendingTxnOffsets = HashMap<i64, BTreeMap<String, GroupOffsets>>;

/// The store's errors are the log's (I/O, corruption).
pub type StoreResult<T> = Result<T, LogError>;

/// Committed offsets of the groups placed on one shard, and the pending
/// offsets of open transactions.
pub struct OffsetStore {
    log: CompactedLog,
    offsets: BTreeMap<String, GroupOffsets>,
    pending_txn: PendingTxnOffsets,
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

/// Key version [`KEY_VERSION_PENDING_TXN_OFFSET`]: group, producer id, topic, partition.
pub fn encode_pending_txn_key(group: &str, producer_id: i64, topic: &str, partition: i32) -> Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(18 + group.len() + topic.len());
    out.extend_from_slice(&KEY_VERSION_PENDING_TXN_OFFSET.to_be_bytes());
    put_string(&mut out, "group id", group)?;
    out.extend_from_slice(&producer_id.to_be_bytes());
    put_string(&mut out, "topic name", topic)?;
    out.extend_from_slice(&partition.to_be_bytes());
    Ok(out)
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

/// (group, producer id, topic, partition) of a pending transactional
/// offset key; `None` for other keys.
pub fn decode_pending_txn_key(key: &[u8]) -> Option<(String, i64, String, i32)> {
    let mut r = Reader(key);
    if r.i16()? != KEY_VERSION_PENDING_TXN_OFFSET {
        return None;
    }
    let decoded = (r.string()?, r.i64()?, r.string()?, r.i32()?);
    r.0.is_empty().then_some(decoded)
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
        let mut pending_txn = PendingTxnOffsets::new();
        for (key, value) in values {
            if let Some((group, topic, partition)) = decode_key(&key) {
                match decode_value(&value) {
                    Some(v) => {
                        offsets.entry(group).or_default().insert((topic, partition), v);
                    }
                    None => tracing::warn!(group, topic, partition, "skipping an undecodable offset record"),
                }
            } else if let Some((group, producer_id, topic, partition)) = decode_pending_txn_key(&key) {
                match decode_value(&value) {
                    Some(v) => {
                        let group_offsets = pending_txn.entry(producer_id).or_default().entry(group).or_default();
                        group_offsets.insert((topic, partition), v);
                    }
                    None => tracing::warn!(
                        group,
                        producer_id,
                        topic,
                        partition,
                        "skipping an undecodable transactional offset record"
                    ),
                }
            }
        }
        Ok(Self {
            log,
            offsets,
            pending_txn,
        })
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

    /// Producer ids with pending transactional offsets.
    pub fn pending_txn_producers(&self) -> usize {
        self.pending_txn.len()
    }

    /// Whether `producer_id` has pending transactional offsets.
    pub fn has_pending_txn(&self, producer_id: i64) -> bool {
        self.pending_txn.contains_key(&producer_id)
    }

    /// Whether some open transaction holds an offset of `group` for the partition.
    pub fn has_pending_txn_offset(&self, group: &str, partition: &(String, i32)) -> bool {
        self.pending_txn
            .values()
            .any(|groups| groups.get(group).is_some_and(|o| o.contains_key(partition)))
    }

    /// Stores offsets `producer_id` committed for `group` in its open
    /// transaction: written and flushed as one batch first, then pending.
    pub fn stage_txn_offsets(
        &mut self,
        group: &str,
        producer_id: i64,
        offsets: Vec<((String, i32), CommittedOffset)>,
    ) -> StoreResult<()> {
        let records = offsets
            .iter()
            .map(|((topic, partition), v)| {
                Ok(KeyedRecord {
                    key: encode_pending_txn_key(group, producer_id, topic, *partition)?,
                    value: Some(encode_value(v)?),
                    timestamp_ms: Some(v.commit_timestamp),
                })
            })
            .collect::<Result<_, TooLong>>()?;
        self.log.append(records)?;
        if !offsets.is_empty() {
            let pending = self.pending_txn.entry(producer_id).or_default();
            pending.entry(group.to_owned()).or_default().extend(offsets);
        }
        Ok(())
    }

    /// The end of `producer_id`'s transaction: its pending offsets
    /// committed (`commit`) or dropped, in one batch of the committed
    /// values and tombstones of the pending keys (see the module doc), flushed
    /// first, then visible. Returns the groups whose offsets were
    /// committed. On an error nothing changes in memory (the marker is
    /// applied again later).
    pub fn end_txn_offsets(&mut self, producer_id: i64, commit: bool) -> StoreResult<Vec<String>> {
        let Some(groups) = self.pending_txn.get(&producer_id) else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        for (group, offsets) in groups {
            for ((topic, partition), v) in offsets {
                if commit {
                    records.push(KeyedRecord {
                        key: encode_key(group, topic, *partition)?,
                        value: Some(encode_value(v)?),
                        timestamp_ms: Some(v.commit_timestamp),
                    });
                }
                records.push(tombstone(encode_pending_txn_key(
                    group,
                    producer_id,
                    topic,
                    *partition,
                )?));
            }
        }
        self.log.append(records)?;
        let groups = self.pending_txn.remove(&producer_id).unwrap_or_default();
        if !commit {
            return Ok(Vec::new());
        }
        Ok(groups
            .into_iter()
            .map(|(group, offsets)| {
                self.offsets.entry(group.clone()).or_default().extend(offsets);
                group
            })
            .collect())
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

    /// Shard 0's store under `dir`, never compacted.
    fn reopen(dir: &Path) -> OffsetStore {
        OffsetStore::open(dir, 0, u64::MAX).unwrap()
    }

    fn pending(store: &OffsetStore, producer_id: i64) -> Option<&BTreeMap<String, GroupOffsets>> {
        store.pending_txn.get(&producer_id)
    }

    #[test]
    fn pending_keys_round_trip_apart_from_commit_keys() {
        let key = encode_pending_txn_key("g", 42, "orders", 7).unwrap();
        assert_eq!(decode_pending_txn_key(&key), Some(("g".into(), 42, "orders".into(), 7)));
        assert_eq!(decode_key(&key), None, "never read as a commit");
        assert_eq!(decode_pending_txn_key(&encode_key("g", "orders", 7).unwrap()), None);
        assert_eq!(decode_pending_txn_key(&key[..key.len() - 1]), None);
        assert_eq!(decode_pending_txn_key(&[key.as_slice(), &[0]].concat()), None);
    }

    #[test]
    fn pending_txn_offsets_survive_reopen_then_commit_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = reopen(dir.path());
        store.commit("g", vec![(tp("t", 0), offset(1))]).unwrap();
        store.stage_txn_offsets("g", 7, vec![(tp("t", 0), offset(5))]).unwrap();
        store.stage_txn_offsets("h", 7, vec![(tp("u", 1), offset(6))]).unwrap();
        store.stage_txn_offsets("g", 8, vec![(tp("t", 1), offset(9))]).unwrap();
        drop(store);

        let mut store = reopen(dir.path());
        assert_eq!(store.pending_txn_producers(), 2);
        assert!(store.has_pending_txn_offset("g", &tp("t", 0)));
        assert!(store.has_pending_txn_offset("h", &tp("u", 1)));
        assert_eq!(
            store.offsets("g").unwrap()[&tp("t", 0)],
            offset(1),
            "pending, not committed"
        );
        assert!(store.offsets("h").is_none());
        assert_eq!(store.end_txn_offsets(7, true).unwrap(), ["g", "h"]);
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)], offset(5));
        assert!(!store.has_pending_txn(7));
        drop(store);

        let mut store = reopen(dir.path());
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)], offset(5));
        assert_eq!(store.offsets("h").unwrap()[&tp("u", 1)], offset(6));
        assert!(!store.has_pending_txn(7));
        assert!(store.has_pending_txn(8));
        // A marker sent again (its acknowledgement lost in a crash) finds
        // nothing left to do.
        assert_eq!(store.end_txn_offsets(7, true).unwrap(), Vec::<String>::new());
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)], offset(5));
    }

    #[test]
    fn pending_txn_offsets_aborted_after_reopen_are_dropped_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = reopen(dir.path());
        store.commit("g", vec![(tp("t", 0), offset(1))]).unwrap();
        store.stage_txn_offsets("g", 7, vec![(tp("t", 0), offset(5))]).unwrap();
        drop(store);
        let mut store = reopen(dir.path());
        assert!(store.has_pending_txn(7));
        assert_eq!(store.end_txn_offsets(7, false).unwrap(), Vec::<String>::new());
        assert!(!store.has_pending_txn_offset("g", &tp("t", 0)));
        drop(store);
        let store = reopen(dir.path());
        assert_eq!(store.pending_txn_producers(), 0);
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)], offset(1));
    }

    /// The transaction's end is one batch: a crash while writing it (the
    /// batch torn, cut by the log's recovery) leaves the offsets pending
    /// and none committed, and the marker re-sent after the restart
    /// commits them.
    #[test]
    fn a_torn_end_of_transaction_reloads_pending_and_the_resent_marker_commits() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = reopen(dir.path());
        store.commit("g", vec![(tp("t", 0), offset(1))]).unwrap();
        store
            .stage_txn_offsets("g", 7, vec![(tp("t", 0), offset(5)), (tp("t", 1), offset(6))])
            .unwrap();
        let segment = std::fs::read_dir(dir.path().join(INTERNAL_DIR).join("group-offsets-0"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "log"))
            .unwrap();
        let before_end = store.log.size_bytes();
        store.end_txn_offsets(7, true).unwrap();
        let after_end = store.log.size_bytes();
        drop(store);
        assert!(after_end > before_end);
        let whole = std::fs::read(&segment).unwrap();
        // Torn anywhere inside the batch: its first byte only, or all but its last.
        for torn_len in [before_end + 1, after_end - 1] {
            std::fs::write(&segment, &whole[..usize::try_from(torn_len).unwrap()]).unwrap();
            let store = reopen(dir.path());
            assert_eq!(
                store.offsets("g").unwrap()[&tp("t", 0)],
                offset(1),
                "torn at {torn_len}"
            );
            assert!(store.offsets("g").unwrap().get(&tp("t", 1)).is_none());
            assert_eq!(pending(&store, 7).unwrap()["g"].len(), 2);
        }
        let mut store = reopen(dir.path());
        assert_eq!(store.end_txn_offsets(7, true).unwrap(), ["g"]);
        drop(store);
        let store = reopen(dir.path());
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 0)], offset(5));
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 1)], offset(6));
        assert_eq!(store.pending_txn_producers(), 0);
    }

    #[test]
    fn compaction_keeps_pending_txn_offsets_and_drops_ended_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = OffsetStore::open(dir.path(), 0, 16 * 1024).unwrap();
        store.stage_txn_offsets("g", 1, vec![(tp("t", 0), offset(3))]).unwrap();
        for i in 0..2000 {
            let producer_id = 100 + i64::from(i);
            store
                .stage_txn_offsets("g", producer_id, vec![(tp("t", 1), offset(i64::from(i)))])
                .unwrap();
            store.end_txn_offsets(producer_id, i % 2 == 0).unwrap();
        }
        let bytes = store.log.size_bytes();
        assert!(bytes < 32 * 1024, "compacted: {bytes}");
        drop(store);
        let store = OffsetStore::open(dir.path(), 0, 16 * 1024).unwrap();
        assert_eq!(store.pending_txn_producers(), 1);
        assert_eq!(pending(&store, 1).unwrap()["g"][&tp("t", 0)], offset(3));
        assert_eq!(store.offsets("g").unwrap()[&tp("t", 1)].offset, 1998);
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Step {
        Commit {
            group: u8,
            partition: i32,
            offset: i64,
        },
        Stage {
            producer_id: i64,
            group: u8,
            partition: i32,
            offset: i64,
        },
        End {
            producer_id: i64,
            commit: bool,
        },
        Reopen,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0u8..2, 0i32..3, 0i64..100).prop_map(|(group, partition, offset)| Step::Commit {
                group,
                partition,
                offset
            }),
            (0i64..3, 0u8..2, 0i32..3, 0i64..100).prop_map(|(producer_id, group, partition, offset)| Step::Stage {
                producer_id,
                group,
                partition,
                offset
            }),
            (0i64..3, any::<bool>()).prop_map(|(producer_id, commit)| Step::End { producer_id, commit }),
            Just(Step::Reopen),
        ]
    }

    /// (group, partition) → offset: what a model or the store holds.
    type Flat = BTreeMap<(String, i32), i64>;

    fn flat<'a>(groups: impl IntoIterator<Item = (&'a String, &'a GroupOffsets)>) -> Flat {
        groups
            .into_iter()
            .flat_map(|(g, o)| o.iter().map(move |((_, p), v)| ((g.clone(), *p), v.offset)))
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// Commits, transactional offsets and their ends, and reopens, held
        /// against a model: committed offsets in one map, pending ones per
        /// producer in another, a commit moving them over.
        #[test]
        fn the_store_with_pending_txn_offsets_matches_a_model(steps in proptest::collection::vec(step(), 1..30)) {
            let dir = tempfile::tempdir().unwrap();
            let mut store = reopen(dir.path());
            let mut committed = Flat::new();
            let mut pending: BTreeMap<i64, Flat> = BTreeMap::new();
            let name = |g: u8| format!("g{g}");
            for s in steps {
                match s {
                    Step::Commit { group, partition, offset: o } => {
                        store.commit(&name(group), vec![(tp("t", partition), offset(o))]).unwrap();
                        committed.insert((name(group), partition), o);
                    }
                    Step::Stage { producer_id, group, partition, offset: o } => {
                        store.stage_txn_offsets(&name(group), producer_id, vec![(tp("t", partition), offset(o))]).unwrap();
                        pending.entry(producer_id).or_default().insert((name(group), partition), o);
                    }
                    Step::End { producer_id, commit } => {
                        store.end_txn_offsets(producer_id, commit).unwrap();
                        let ended = pending.remove(&producer_id).unwrap_or_default();
                        if commit {
                            committed.extend(ended);
                        }
                    }
                    Step::Reopen => {
                        drop(store);
                        store = reopen(dir.path());
                    }
                }
                proptest::prop_assert_eq!(&flat(&store.offsets), &committed);
                let store_pending: BTreeMap<i64, Flat> =
                    store.pending_txn.iter().map(|(id, groups)| (*id, flat(groups))).collect();
                proptest::prop_assert_eq!(&store_pending, &pending);
            }
        }
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
