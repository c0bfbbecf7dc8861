//! Committed group offsets, in memory and in an internal compacted log in
//! Kafka's `__consumer_offsets` record format, so an acknowledged commit
//! survives a crash and Kafka's own tools can read the file.
//!
//! One log per shard, `<data dir>/__ringmirror/group-offsets-<shard>/` (a
//! [`PartitionLog`]; not a `<topic>-<n>` directory of the data dir, since
//! each of those is served as a topic). Records: key version 1 (group,
//! topic, partition), value version 3 (offset, leader epoch, metadata,
//! commit timestamp); a null value is a tombstone (a deleted group's
//! offsets). Every append is flushed before it counts.
//!
//! On open the log is read from the start (it is compacted, so small): the
//! latest value per key wins, tombstones delete. When the log holds much
//! more than the live records it is rewritten: the compacted copy is
//! written and flushed in `<name>.compacted`, then the live directory is
//! renamed to `<name>.old`, the copy to `<name>`, and the old one removed.
//! A crash at any point leaves either the old or the new complete copy;
//! [`OffsetStore::open`] finishes or rolls back what it finds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::batch::{BatchBuilder, BuildRecord, decode_records};
use crate::log::{LogConfig, LogError, OpenOptions, PartitionLog};

/// The directory under the data dir for the agent's internal state.
pub const INTERNAL_DIR: &str = "__ringmirror";
/// Kafka's `offset.metadata.max.bytes`.
pub const METADATA_MAX_BYTES: usize = 4096;
/// Records per batch when rewriting the log.
const COMPACTION_BATCH_RECORDS: usize = 1000;
/// Decompressed bytes allowed per batch when loading (we write uncompressed
/// batches; this bounds a damaged or foreign one).
const LOAD_BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Key and value versions of Kafka's offset commit records.
const KEY_VERSION_OFFSET: i16 = 1;
const VALUE_VERSION: i16 = 3;
/// Per-record framing overhead counted in the live-size estimate.
const RECORD_OVERHEAD_BYTES: u64 = 16;

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
    root: PathBuf,
    name: String,
    log: PartitionLog,
    offsets: BTreeMap<String, GroupOffsets>,
    /// Estimated encoded size of the live records.
    live_bytes: u64,
    /// The log is compacted only once it is larger than this.
    compact_min_bytes: u64,
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 << 20,
        segment_index_bytes: 1 << 20,
        preallocate_bytes: 1 << 20,
        prefault_bytes: 0,
        ..LogConfig::default()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> LogError {
    LogError::io(what, path)
}

fn fsync_dir(dir: &Path) -> StoreResult<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync dir", dir))
}

fn remove_dir(dir: &Path) -> StoreResult<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LogError::io("remove dir", dir)(e)),
        _ => Ok(()),
    }
}

fn open_log(dir: PathBuf) -> StoreResult<PartitionLog> {
    // Never "clean": the whole (compacted, small) log is re-validated on
    // every open, so no checkpoint has to be kept for it.
    let (log, _) = PartitionLog::open(OpenOptions {
        dir,
        topic_id: None,
        config: log_config(),
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: now_ms(),
    })?;
    Ok(log)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Key version 1: group, topic, partition.
pub fn encode_key(group: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + group.len() + topic.len());
    out.extend_from_slice(&KEY_VERSION_OFFSET.to_be_bytes());
    put_str(&mut out, group);
    put_str(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

/// Value version 3: offset, leader epoch, metadata, commit timestamp.
pub fn encode_value(v: &CommittedOffset) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + v.metadata.len());
    out.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    out.extend_from_slice(&v.offset.to_be_bytes());
    out.extend_from_slice(&v.leader_epoch.to_be_bytes());
    put_str(&mut out, &v.metadata);
    out.extend_from_slice(&v.commit_timestamp.to_be_bytes());
    out
}

/// A cursor over a record key or value; `None` when it runs out.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
    fn string(&mut self) -> Option<String> {
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

fn record_bytes(group: &str, topic: &str, v: &CommittedOffset) -> u64 {
    (10 + group.len() + topic.len() + 24 + v.metadata.len()) as u64 + RECORD_OVERHEAD_BYTES
}

impl OffsetStore {
    /// Opens (creating) shard `shard`'s offsets log under `data_dir` and
    /// loads it, completing or undoing an interrupted compaction first.
    pub fn open(data_dir: &Path, shard: usize, compact_min_bytes: u64) -> StoreResult<Self> {
        let root = data_dir.join(INTERNAL_DIR);
        std::fs::create_dir_all(&root).map_err(io("create dir", &root))?;
        let name = format!("group-offsets-{shard}");
        let live = root.join(&name);
        let compacted = root.join(format!("{name}.compacted"));
        let old = root.join(format!("{name}.old"));
        if live.exists() {
            // The copy may be unfinished; the old one is superseded.
            remove_dir(&compacted)?;
            remove_dir(&old)?;
        } else if compacted.exists() {
            // Crashed between the two renames: the copy was complete
            // (flushed before the live log was moved away).
            std::fs::rename(&compacted, &live).map_err(io("rename", &compacted))?;
            remove_dir(&old)?;
        } else if old.exists() {
            std::fs::rename(&old, &live).map_err(io("rename", &old))?;
        }
        fsync_dir(&root)?;
        let log = open_log(live)?;
        let mut store = Self {
            root,
            name,
            log,
            offsets: BTreeMap::new(),
            live_bytes: 0,
            compact_min_bytes,
        };
        store.load()?;
        if store.needs_compaction() {
            store.compact()?;
        }
        Ok(store)
    }

    fn load(&mut self) -> StoreResult<()> {
        let mut records = Vec::new();
        self.log.for_each_batch(|batch| {
            if batch.is_control() {
                return;
            }
            match decode_records(&batch, LOAD_BATCH_BYTES_MAX) {
                Ok(r) => records.extend(r),
                Err(e) => tracing::error!(error = %e, "skipping an undecodable batch of the group offsets log"),
            }
        })?;
        for record in records {
            let Some((group, topic, partition)) = record.key.as_deref().and_then(decode_key) else {
                continue;
            };
            match record.value.as_deref().map(decode_value) {
                None => self.apply_delete(&group, &topic, partition),
                Some(Some(value)) => self.apply_put(&group, topic, partition, value),
                Some(None) => tracing::warn!(group, topic, partition, "skipping an undecodable offset record"),
            }
        }
        Ok(())
    }

    fn apply_put(&mut self, group: &str, topic: String, partition: i32, value: CommittedOffset) {
        self.live_bytes += record_bytes(group, &topic, &value);
        let offsets = self.offsets.entry(group.to_owned()).or_default();
        if let Some(old) = offsets.insert((topic.clone(), partition), value) {
            self.live_bytes -= record_bytes(group, &topic, &old);
        }
    }

    fn apply_delete(&mut self, group: &str, topic: &str, partition: i32) {
        let Some(offsets) = self.offsets.get_mut(group) else {
            return;
        };
        if let Some(old) = offsets.remove(&(topic.to_owned(), partition)) {
            self.live_bytes -= record_bytes(group, topic, &old);
        }
        if offsets.is_empty() {
            self.offsets.remove(group);
        }
    }

    /// A group's committed offsets.
    pub fn offsets(&self, group: &str) -> Option<&GroupOffsets> {
        self.offsets.get(group)
    }

    /// Groups that have committed offsets.
    pub fn groups(&self) -> impl Iterator<Item = &String> {
        self.offsets.keys()
    }

    /// Appends one batch of records and flushes it.
    fn append(&mut self, records: Vec<BuildRecord>) -> StoreResult<()> {
        if records.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let batch = BatchBuilder {
            base_offset: self.log.log_end_offset(),
            records,
            ..BatchBuilder::default()
        }
        .build();
        self.log.append(&batch, now)?;
        self.log.flush(now)
    }

    /// Stores offsets for `group`: written and flushed as one batch first,
    /// then visible.
    pub fn commit(&mut self, group: &str, offsets: Vec<((String, i32), CommittedOffset)>) -> StoreResult<()> {
        let records = offsets
            .iter()
            .map(|((topic, partition), v)| BuildRecord {
                timestamp: v.commit_timestamp,
                key: Some(encode_key(group, topic, *partition)),
                value: Some(encode_value(v)),
                headers: Vec::new(),
            })
            .collect();
        self.append(records)?;
        for ((topic, partition), v) in offsets {
            self.apply_put(group, topic, partition, v);
        }
        self.compact_if_needed();
        Ok(())
    }

    /// Deletes every offset of `group` (a tombstone per key).
    pub fn delete_group(&mut self, group: &str) -> StoreResult<()> {
        let Some(offsets) = self.offsets.get(group) else {
            return Ok(());
        };
        let timestamp = now_ms() as i64;
        let records = offsets
            .keys()
            .map(|(topic, partition)| BuildRecord {
                timestamp,
                key: Some(encode_key(group, topic, *partition)),
                value: None,
                headers: Vec::new(),
            })
            .collect();
        let keys: Vec<_> = offsets.keys().cloned().collect();
        self.append(records)?;
        for (topic, partition) in keys {
            self.apply_delete(group, &topic, partition);
        }
        self.compact_if_needed();
        Ok(())
    }

    fn needs_compaction(&self) -> bool {
        let size = self.log.size_bytes();
        size > self.compact_min_bytes && size > 2 * self.live_bytes
    }

    /// A failed compaction leaves the current log in place (it is complete
    /// and already holds every record); it is tried again after later appends.
    fn compact_if_needed(&mut self) {
        if self.needs_compaction()
            && let Err(e) = self.compact()
        {
            tracing::error!(dir = %self.root.display(), error = %e, "compacting the group offsets log failed");
        }
    }

    /// Rewrites the log with only the live records (see the module doc for
    /// the crash-safe swap).
    fn compact(&mut self) -> StoreResult<()> {
        let before = self.log.size_bytes();
        let live = self.root.join(&self.name);
        let compacted = self.root.join(format!("{}.compacted", self.name));
        let old = self.root.join(format!("{}.old", self.name));
        remove_dir(&compacted)?;
        let mut copy = open_log(compacted.clone())?;
        let now = now_ms();
        let mut records = Vec::with_capacity(COMPACTION_BATCH_RECORDS);
        let all = self
            .offsets
            .iter()
            .flat_map(|(g, offsets)| offsets.iter().map(move |((t, p), v)| (g, t, *p, v)));
        let write = |records: &mut Vec<BuildRecord>, copy: &mut PartitionLog| {
            let batch = BatchBuilder {
                base_offset: copy.log_end_offset(),
                records: std::mem::take(records),
                ..BatchBuilder::default()
            }
            .build();
            copy.append(&batch, now).map(drop)
        };
        for (group, topic, partition, v) in all {
            records.push(BuildRecord {
                timestamp: v.commit_timestamp,
                key: Some(encode_key(group, topic, partition)),
                value: Some(encode_value(v)),
                headers: Vec::new(),
            });
            if records.len() == COMPACTION_BATCH_RECORDS {
                write(&mut records, &mut copy)?;
            }
        }
        if !records.is_empty() {
            write(&mut records, &mut copy)?;
        }
        copy.close(now)?;
        fsync_dir(&self.root)?;
        // From here the copy is complete: a crash after the first rename
        // makes `open` finish the swap.
        std::fs::rename(&live, &old).map_err(io("rename", &live))?;
        std::fs::rename(&compacted, &live).map_err(io("rename", &compacted))?;
        fsync_dir(&self.root)?;
        self.log = open_log(live)?;
        remove_dir(&old)?;
        tracing::info!(
            dir = %self.root.display(),
            before_bytes = before,
            after_bytes = self.log.size_bytes(),
            "compacted the group offsets log"
        );
        Ok(())
    }

    #[cfg(test)]
    fn log_bytes(&self) -> u64 {
        self.log.size_bytes()
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
        let key = encode_key("g", "orders", 7);
        assert_eq!(
            key,
            [&[0, 1, 0, 1][..], b"g", &[0, 6], b"orders", &[0, 0, 0, 7]].concat()
        );
        assert_eq!(decode_key(&key), Some(("g".into(), "orders".into(), 7)));
        assert_eq!(decode_value(&encode_value(&offset(42))), Some(offset(42)));
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
        assert!(store.log_bytes() < 32 * 1024, "compacted: {}", store.log_bytes());
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
