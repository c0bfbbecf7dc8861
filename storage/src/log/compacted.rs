//! [`CompactedLog`]: a crash-safe keyed log, compacted by rewriting — the
//! storage under the agent's internal state (committed group offsets,
//! `__mirror_state`).
//!
//! A [`PartitionLog`] of uncompressed batches of keyed records at
//! `<root>/<name>/` (Kafka's segment format, so Kafka's tools can read it).
//! The latest record per key wins; a null value is a tombstone. Every
//! append is flushed before it returns, so an acknowledged record survives
//! a crash; a torn, unacknowledged last batch is cut by the log's recovery
//! (the log is re-validated from the start on every open).
//!
//! On open the whole log is read (it is compacted, so small) and the live
//! values are handed to the caller, which keeps them in its own typed form;
//! this type keeps only each live key and its size, to know when to compact.
//! When the log is larger than `compact_min_bytes` and more than twice the
//! live bytes, it is rewritten with only the live records: the copy is
//! written and flushed in `<name>.compacted`, then `<name>` is renamed to
//! `<name>.old`, the copy to `<name>`, and the old one removed. A crash at
//! any point leaves either the old or the new complete log, and
//! [`CompactedLog::open`] finishes or rolls back what it finds.
//!
//! Never used for served topics: `root` must not be a data directory whose
//! `<topic>-<n>` children are served.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::batch::{BatchBuilder, BuildRecord, decode_records};

use super::config::LogConfig;
use super::error::{LogError, Result};
use super::files::fsync_dir;
use super::partition_log::{OpenOptions, PartitionLog};
use crate::clock::now_ms;

/// Records per batch when rewriting the log.
const COMPACTION_BATCH_RECORDS: usize = 1000;
/// Key and value bytes per batch when rewriting (far below the log's
/// largest batch, whatever the values' sizes).
const COMPACTION_BATCH_BYTES: usize = 1 << 20;
/// Decompressed bytes allowed per batch when reading (we write
/// uncompressed batches; this bounds a damaged or foreign one).
const READ_BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Per-record framing overhead counted in the live-size estimate.
const RECORD_OVERHEAD_BYTES: u64 = 16;

/// One write: a value for `key`, or a tombstone when `value` is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedRecord {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
    /// The record's timestamp (kept through compaction); `None` stamps it
    /// with the time of the append.
    pub timestamp_ms: Option<i64>,
}

/// The live value of every key, as [`CompactedLog::open`] finds them.
pub type LiveValues = BTreeMap<Vec<u8>, Vec<u8>>;

/// The latest value of a key, as re-read from the log.
struct LiveValue {
    timestamp_ms: i64,
    value: Vec<u8>,
}

/// A compacted keyed log (see the module doc).
pub struct CompactedLog {
    root: PathBuf,
    name: String,
    log: PartitionLog,
    /// Live keys and their estimated encoded size.
    live: HashMap<Vec<u8>, u64>,
    live_bytes: u64,
    /// The log is compacted only once it is larger than this.
    compact_min_bytes: u64,
    /// A compaction failed after the live directory was moved, and no
    /// complete log could be reopened in its place: `self.log` names a
    /// moved directory, so appending to it could lose acknowledged records.
    /// Appends are refused until the next [`CompactedLog::open`].
    unusable: bool,
    #[cfg(test)]
    crash_at: Option<tests::CrashPoint>,
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

fn record_bytes(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64 + RECORD_OVERHEAD_BYTES
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(LogError::io("rename", from))
}

fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(LogError::io("remove dir", dir)(e)),
        _ => Ok(()),
    }
}

fn open_log(dir: PathBuf) -> Result<PartitionLog> {
    // Never "clean": the whole (compacted, small) log is re-validated on
    // every open, so no checkpoint has to be kept for it and a torn tail
    // is always cut.
    let (log, _) = PartitionLog::open(OpenOptions {
        now_ms: now_ms(),
        ..OpenOptions::new(dir, log_config())
    })?;
    Ok(log)
}

/// Leaves exactly one complete log at `<root>/<name>` after a compaction
/// that stopped anywhere: with the live log present, a leftover copy may be
/// unfinished and the old one is superseded; without it, the swap stopped
/// between its renames, after the copy was complete (flushed before the
/// live log was moved away).
fn settle(root: &Path, name: &str) -> Result<()> {
    let live = root.join(name);
    let compacted = root.join(format!("{name}.compacted"));
    let old = root.join(format!("{name}.old"));
    if live.exists() {
        remove_dir(&compacted)?;
        remove_dir(&old)?;
    } else if compacted.exists() {
        rename(&compacted, &live)?;
        remove_dir(&old)?;
    } else if old.exists() {
        rename(&old, &live)?;
    }
    fsync_dir(root)
}

/// The latest value per key, tombstones applied.
fn read_live(log: &PartitionLog) -> Result<BTreeMap<Vec<u8>, LiveValue>> {
    let mut live = BTreeMap::new();
    log.for_each_batch(|batch| {
        // We never write control batches; a foreign one holds no keyed state.
        if batch.is_control() {
            return;
        }
        let records = match decode_records(&batch, READ_BATCH_BYTES_MAX) {
            Ok(records) => records,
            Err(e) => {
                tracing::error!(dir = %log.dir().display(), error = %e, "skipping an undecodable batch of a compacted log");
                return;
            }
        };
        for record in records {
            let Some(key) = record.key else { continue };
            match record.value {
                Some(value) => {
                    let timestamp_ms = record.timestamp;
                    live.insert(key, LiveValue { timestamp_ms, value });
                }
                None => {
                    live.remove(&key);
                }
            }
        }
    })?;
    Ok(live)
}

/// Appends `records` as one batch at the log end (not flushed).
fn append_batch(log: &mut PartitionLog, records: Vec<BuildRecord>, now_ms: u64) -> Result<()> {
    let batch = BatchBuilder {
        base_offset: log.log_end_offset(),
        records,
        ..BatchBuilder::default()
    }
    .build();
    log.append(&batch, now_ms).map(drop)
}

impl CompactedLog {
    /// Opens (creating) the log `<root>/<name>`, completing or undoing an
    /// interrupted compaction first, and returns it with the live value of
    /// every key.
    pub fn open(root: &Path, name: &str, compact_min_bytes: u64) -> Result<(Self, LiveValues)> {
        std::fs::create_dir_all(root).map_err(LogError::io("create dir", root))?;
        settle(root, name)?;
        let log = open_log(root.join(name))?;
        // The log's own directory entry, and the root's, are durable before
        // anything written to it is acknowledged.
        fsync_dir(root)?;
        if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir(parent)?;
        }
        let values = read_live(&log)?;
        let live: HashMap<_, _> = values
            .iter()
            .map(|(key, v)| (key.clone(), record_bytes(key, &v.value)))
            .collect();
        let mut this = Self {
            root: root.to_owned(),
            name: name.to_owned(),
            log,
            live_bytes: live.values().sum(),
            live,
            compact_min_bytes,
            unusable: false,
            #[cfg(test)]
            crash_at: None,
        };
        this.compact_if_needed();
        Ok((this, values.into_iter().map(|(key, v)| (key, v.value)).collect()))
    }

    /// Appends `records` as one batch and flushes it; later records win
    /// over earlier ones for the same key. May compact the log afterwards.
    pub fn append(&mut self, records: Vec<KeyedRecord>) -> Result<()> {
        if self.unusable {
            return Err(LogError::io("append to", self.root.join(&self.name))(
                std::io::Error::other("a failed compaction left no usable log; reopen it to recover"),
            ));
        }
        if records.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let sizes: Vec<(Vec<u8>, Option<u64>)> = records
            .iter()
            .map(|r| (r.key.clone(), r.value.as_deref().map(|v| record_bytes(&r.key, v))))
            .collect();
        let records = records
            .into_iter()
            .map(|r| BuildRecord {
                timestamp: r.timestamp_ms.unwrap_or(now as i64),
                key: Some(r.key),
                value: r.value,
                headers: Vec::new(),
            })
            .collect();
        append_batch(&mut self.log, records, now)?;
        // The index follows what the log holds from here, even if the flush
        // fails (the records may then still be read back after a restart).
        for (key, size) in sizes {
            let old = match size {
                Some(size) => {
                    self.live_bytes += size;
                    self.live.insert(key, size)
                }
                None => self.live.remove(&key),
            };
            self.live_bytes -= old.unwrap_or(0);
        }
        self.log.flush(now)?;
        self.compact_if_needed();
        Ok(())
    }

    /// Bytes of the log on disk (whole batches).
    pub fn size_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    fn needs_compaction(&self) -> bool {
        let size = self.log.size_bytes();
        size > self.compact_min_bytes && size > 2 * self.live_bytes
    }

    /// A failed compaction leaves a complete log in place (it already holds
    /// every record), so it is reported, not returned: the append that
    /// triggered it has succeeded. It is tried again after later appends.
    fn compact_if_needed(&mut self) {
        if !self.unusable
            && self.needs_compaction()
            && let Err(e) = self.compact()
        {
            tracing::error!(dir = %self.root.join(&self.name).display(), error = %e, "compacting a compacted log failed");
        }
    }

    /// Rewrites the log with only the live records (see the module doc for
    /// the crash-safe swap).
    fn compact(&mut self) -> Result<()> {
        let before_bytes = self.log.size_bytes();
        // Re-read rather than kept in memory: the caller holds the values.
        let values = read_live(&self.log)?;
        debug_assert_eq!(values.len(), self.live.len(), "the index follows the log");
        let path = self.root.join(&self.name);
        let compacted = self.root.join(format!("{}.compacted", self.name));
        let old = self.root.join(format!("{}.old", self.name));
        remove_dir(&compacted)?;
        let mut copy = open_log(compacted.clone())?;
        let now = now_ms();
        let mut live = HashMap::with_capacity(values.len());
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for (key, v) in values {
            live.insert(key.clone(), record_bytes(&key, &v.value));
            batch_bytes += key.len() + v.value.len();
            batch.push(BuildRecord {
                timestamp: v.timestamp_ms,
                key: Some(key),
                value: Some(v.value),
                headers: Vec::new(),
            });
            if batch.len() == COMPACTION_BATCH_RECORDS || batch_bytes >= COMPACTION_BATCH_BYTES {
                append_batch(&mut copy, std::mem::take(&mut batch), now)?;
                batch_bytes = 0;
            }
        }
        if !batch.is_empty() {
            append_batch(&mut copy, batch, now)?;
        }
        #[cfg(test)]
        self.crash_point(tests::CrashPoint::CopyWritten);
        copy.close(now)?;
        fsync_dir(&self.root)?;
        #[cfg(test)]
        self.crash_point(tests::CrashPoint::CopyClosed);
        // From here the copy is complete: a crash after this rename makes
        // `open` finish the swap.
        rename(&path, &old)?;
        #[cfg(test)]
        self.crash_point(tests::CrashPoint::LiveMovedAway);
        let swapped = rename(&compacted, &path)
            .and_then(|()| fsync_dir(&self.root))
            .and_then(|()| open_log(path.clone()));
        match swapped {
            Ok(log) => self.log = log,
            Err(e) => {
                // `self.log` names the moved directory now. Do what `open`
                // does after a crash; either log it leaves holds every record.
                match settle(&self.root, &self.name).and_then(|()| open_log(path.clone())) {
                    Ok(log) => self.log = log,
                    Err(reopen) => {
                        tracing::error!(dir = %path.display(), error = %reopen, "reopening after a failed compaction failed");
                        self.unusable = true;
                    }
                }
                return Err(e);
            }
        }
        self.live_bytes = live.values().sum();
        self.live = live;
        #[cfg(test)]
        self.crash_point(tests::CrashPoint::CopyInPlace);
        // A leftover is removed by the next open.
        remove_dir(&old)?;
        tracing::info!(
            dir = %path.display(),
            before_bytes,
            after_bytes = self.log.size_bytes(),
            "compacted a compacted log"
        );
        Ok(())
    }

    #[cfg(test)]
    fn crash_point(&self, point: tests::CrashPoint) {
        if self.crash_at == Some(point) {
            panic!("simulated crash at {point:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a simulated crash stops a compaction.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum CrashPoint {
        /// The copy holds every batch but was never flushed or closed.
        CopyWritten,
        /// The copy is complete; the live log is untouched.
        CopyClosed,
        /// The live log is at `.old`, the copy still at `.compacted`.
        LiveMovedAway,
        /// The copy is the live log; `.old` is still there.
        CopyInPlace,
    }

    const NAME: &str = "state-0";

    fn put(key: &str, value: &str) -> KeyedRecord {
        KeyedRecord {
            key: key.as_bytes().to_vec(),
            value: Some(value.as_bytes().to_vec()),
            timestamp_ms: None,
        }
    }

    fn tombstone(key: &str) -> KeyedRecord {
        KeyedRecord {
            key: key.as_bytes().to_vec(),
            value: None,
            timestamp_ms: None,
        }
    }

    fn map(entries: &[(&str, &str)]) -> LiveValues {
        entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn names(root: &Path) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn segment_file(root: &Path) -> PathBuf {
        root.join(NAME).join("00000000000000000000.log")
    }

    #[test]
    fn the_latest_value_wins_and_tombstones_delete_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, values) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
        assert!(values.is_empty());
        log.append(vec![put("a", "1"), put("b", "2"), put("a", "3")]).unwrap();
        log.append(vec![put("c", "4"), tombstone("b"), tombstone("never")])
            .unwrap();
        log.append(Vec::new()).unwrap();
        drop(log); // no clean close: every append was flushed
        let (_, values) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
        assert_eq!(values, map(&[("a", "3"), ("c", "4")]));
        assert_eq!(names(dir.path()), [NAME]);
    }

    #[test]
    fn compaction_keeps_only_the_latest_values_and_their_timestamps() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = CompactedLog::open(dir.path(), NAME, 16 * 1024).unwrap();
        for i in 0..2000 {
            let mut record = put(&format!("k{}", i % 4), &format!("v{i}"));
            record.timestamp_ms = Some(i);
            log.append(vec![record]).unwrap();
        }
        log.append(vec![put("gone", "x")]).unwrap();
        log.append(vec![tombstone("gone")]).unwrap();
        assert!(log.size_bytes() < 32 * 1024, "compacted: {}", log.size_bytes());
        let timestamps: Vec<_> = read_live(&log.log).unwrap().values().map(|v| v.timestamp_ms).collect();
        assert_eq!(timestamps, [1996, 1997, 1998, 1999]);
        drop(log);
        let (_, values) = CompactedLog::open(dir.path(), NAME, 16 * 1024).unwrap();
        assert_eq!(
            values,
            map(&[("k0", "v1996"), ("k1", "v1997"), ("k2", "v1998"), ("k3", "v1999")])
        );
        assert_eq!(names(dir.path()), [NAME]);
    }

    /// A crash at each step of the swap: reopening finds every record that
    /// was written, in one log, with no leftovers; once the first rename
    /// happened, the log found is the compacted copy.
    #[test]
    fn an_interrupted_compaction_recovers_at_every_step() {
        use CrashPoint::*;
        for (point, compacted) in [
            (CopyWritten, false),
            (CopyClosed, false),
            (LiveMovedAway, true),
            (CopyInPlace, true),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (mut log, _) = CompactedLog::open(dir.path(), NAME, 8 * 1024).unwrap();
            log.crash_at = Some(point);
            let mut model = BTreeMap::new();
            let mut size_before_crash = 0;
            for i in 0.. {
                let (key, value) = (format!("k{}", i % 8), format!("value-{i}"));
                model.insert(key.clone().into_bytes(), value.clone().into_bytes());
                size_before_crash = log.size_bytes();
                let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    log.append(vec![put(&key, &value)]).unwrap();
                }));
                if crashed.is_err() {
                    break;
                }
            }
            drop(log);
            let (log, values) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
            assert_eq!(values, model, "{point:?}");
            assert_eq!(names(dir.path()), [NAME], "{point:?}");
            // The append that triggered the compaction was flushed first.
            let size = log.size_bytes();
            assert_eq!(
                size < size_before_crash,
                compacted,
                "{point:?}: {size} vs {size_before_crash}"
            );
        }
    }

    /// A crash mid-write leaves a partial last batch; recovery cuts it, and
    /// every earlier (acknowledged) append survives, wherever the cut is.
    #[test]
    fn a_torn_last_append_is_cut_and_earlier_appends_survive() {
        let probe = tempfile::tempdir().unwrap();
        let (mut log, _) = CompactedLog::open(probe.path(), NAME, u64::MAX).unwrap();
        log.append(vec![put("a", "1"), put("b", "2")]).unwrap();
        let acknowledged_bytes = log.size_bytes();
        log.append(vec![put("a", "torn"), tombstone("b")]).unwrap();
        let last_batch_bytes = log.size_bytes() - acknowledged_bytes;
        drop(log);
        for cut in [1, last_batch_bytes / 2, last_batch_bytes - 1] {
            let dir = tempfile::tempdir().unwrap();
            let (mut log, _) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
            log.append(vec![put("a", "1"), put("b", "2")]).unwrap();
            log.append(vec![put("a", "torn"), tombstone("b")]).unwrap();
            drop(log);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(segment_file(dir.path()))
                .unwrap();
            file.set_len(acknowledged_bytes + last_batch_bytes - cut).unwrap();
            drop(file);
            let (mut log, values) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
            assert_eq!(values, map(&[("a", "1"), ("b", "2")]), "cut {cut}");
            assert_eq!(log.size_bytes(), acknowledged_bytes);
            // The recovered log takes appends right after what survived.
            log.append(vec![put("c", "3")]).unwrap();
            drop(log);
            let (_, values) = CompactedLog::open(dir.path(), NAME, u64::MAX).unwrap();
            assert_eq!(values, map(&[("a", "1"), ("b", "2"), ("c", "3")]), "cut {cut}");
        }
    }
}
