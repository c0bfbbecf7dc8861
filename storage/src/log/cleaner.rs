//! The log cleaner: Kafka's log compaction (`cleanup.policy=compact`) for
//! local topics — after failover, or created here. Mirrored partitions are
//! never cleaned: they follow their source byte for byte (the source's own
//! compaction arrives as offset gaps).
//!
//! [`PartitionLog::clean`] works as Kafka's `LogCleaner` does:
//!
//! - **Cleanable range.** The sealed segments from the log start up to the
//!   first one that is active or reaches the last stable offset (Kafka's
//!   "first uncleanable offset"), so that only decided records count. When
//!   the active segment is empty, the last sealed one is left alone too,
//!   so the log end can never depend on what cleaning removed.
//! - **Offset map.** Key → offset of its latest record, over the dirty
//!   part of the cleanable range (from the first segment holding the first
//!   dirty offset on): the part below was cleaned already and holds each
//!   key once. Records of aborted transactions (as the `.txnindex` tells
//!   READ_COMMITTED readers) and control records do not count: an aborted
//!   value never hides a committed one. The map is bounded (Kafka's
//!   `log.cleaner.dedupe.buffer.size`, [`CleanOptions::offset_map_bytes`]):
//!   when it is full, the pass stops mapping at the start of the segment it
//!   was reading and cleans only up to there, the rest in the next passes
//!   (each maps at least one whole segment, so every pass makes progress).
//!   A pass cleans the segments from the log start to the end of the
//!   mapped range; a key held only in the already clean part stays as it
//!   is, and records above the mapped range (the active segment among
//!   them) hide nothing until a later pass maps them.
//! - **Dirtiness** (`min.cleanable.dirty.ratio`, Kafka's
//!   `cleaner-offset-checkpoint`): the log's first dirty offset — the end of
//!   the range the last pass cleaned (and mapped) — is kept in the partition directory
//!   (see `cleaner_checkpoint`), so a restart does not make a log dirty
//!   again. The dirty ratio is the bytes of the cleanable segments holding
//!   offsets at or above it over all cleanable bytes. Truncation lowers it to
//!   the new log end (and rewrites the file), a log start moving past it
//!   raises it, emptying the log deletes the file; a missing or unreadable
//!   file, or one past the log end, means "never cleaned".
//! - **Groups.** Consecutive cleanable segments are rewritten together into
//!   one segment (named after the first) while their bytes fit
//!   `segment.bytes` and their offsets fit the relative offsets of one
//!   segment — Kafka's `groupSegmentsBySize`, so repeated cleaning does not
//!   leave ever smaller segments. A group in which nothing would change is
//!   not rewritten at all.
//! - **Records kept** (Kafka's `shouldRetainRecord`), committed
//!   transactional ones alike: a record whose key's latest offset is its
//!   own offset; a record with a null key (Kafka refuses them at produce on
//!   compacted topics, mirrored data may hold them); a tombstone (null
//!   value) only while its segment's largest timestamp is younger than
//!   `delete.retention.ms`.
//! - **Aborted transactions.** A batch inside a transaction the `.txnindex`
//!   lists as aborted loses all its records, whatever their keys, and goes
//!   (unless kept empty, see below).
//! - **Markers** (Kafka's `CleanedTransactionMetadata`). Groups are cleaned
//!   in offset order and a transaction's batches come before its marker, so
//!   what stays of a transaction is known when its marker is reached, even
//!   across groups. A COMMIT or ABORT marker goes only once no batch of its
//!   transaction (its producer's transactional batches since the previous
//!   marker) is left, and its segment is past the delete horizon (the
//!   tombstone rule: a consumer that read the transaction's batches gets to
//!   read its end). It stays, besides, while a producer snapshot holds its
//!   transaction open (a rebuild of producer state starting there must see
//!   the transaction end, or the last stable offset would stick), and when
//!   it comes after its producer's last data batch while producer state
//!   knows the producer (it carries the producer's latest epoch; Kafka
//!   keeps it for fencing). MIRROR_PID_RESET records and control records
//!   of unknown type always stay. A kept marker is copied byte for byte.
//! - **Transaction index.** A cleaned segment's `.txnindex` keeps the
//!   entries of the aborted transactions that still have a batch in the
//!   log (Kafka rebuilds it from the aborted transactions the cleaner still
//!   saw); without one there is nothing left for READ_COMMITTED readers to
//!   skip.
//! - **Batches.** A batch whose records all stay is copied byte for byte.
//!   One that loses records is rebuilt as Kafka's
//!   `MemoryRecords.filterTo` does: same base offset, last offset delta,
//!   partition leader epoch, producer id/epoch/base sequence, timestamp
//!   type and transactional flag, the kept records at their own offsets
//!   (deltas from the base), with the batch's own codec (gzip, snappy in
//!   xerial framing as Java writes it, lz4 frames with 64 KiB independent
//!   blocks, zstd), a new CRC. Every rebuilt batch is decoded again and
//!   compared with what was meant; should an encoder ever disagree, the
//!   batch is written uncompressed instead. A batch left without records
//!   goes (an empty batch too, once nothing needs it), except (Kafka's
//!   `RETAIN_EMPTY`) the last batch of a producer id the producer state
//!   still knows, kept as an empty batch (header only) so that its sequence
//!   numbers and last offset survive a rebuild of producer state; and the
//!   last batch of a group whose every batch would go, kept too (empty, or
//!   as it is for a marker), so that no segment is ever empty (recovery
//!   drops empty segments at the tail of the log).
//! - **Delete horizon.** A segment's largest timestamp is that of the
//!   batches it holds: where cleaning drops a segment's newest batches, the
//!   tombstones and markers left in it may go sooner on a later pass (Kafka
//!   ≤ 3.0 used the file's modification time, which a rewrite keeps; Kafka
//!   3.1+ stamps a delete horizon into the batch, KIP-534).
//!
//! So offsets never move, the log start and end stay, READ_COMMITTED
//! readers see the same latest committed value per key (tombstones aside)
//! below the same last stable offset, and producer state rebuilt from the
//! cleaned log knows the same producers and no transaction left open.
//!
//! **Swapping** a cleaned segment in, crash-safe at every step (Kafka's
//! `.cleaned`/`.swap` protocol, plus a small range file so that recovery
//! knows exactly which old segments the new one replaces):
//!
//! 1. write `<base>.log.cleaned`, `.index.cleaned`, `.timeindex.cleaned`,
//!    `.txnindex.cleaned` and `<base>.cleaner-range.cleaned` (the base
//!    offset of the segment after the group), fsync each and the directory;
//! 2. rename the four companion files to `.swap`, fsync the directory;
//! 3. rename `<base>.log.cleaned` to `.swap`, fsync — the commit point;
//! 4. delete the group's other segments, fsync;
//! 5. rename the index swaps over the live names, fsync;
//! 6. rename the log swap over `<base>.log`, fsync; remove the range file.
//!
//! [`PartitionLog::open`] first finishes steps 4–6 for every `.log.swap`
//! it finds (idempotent), then removes every other `.cleaned`/`.swap` file
//! as a stray: a crash before step 3 leaves the old segments, from step 3
//! on the new one, never a mix. The cleaned segment's indexes are rebuilt
//! as appends build them. A reader that holds an old segment's file (a
//! sendfile read in flight) keeps reading the old inode: a batch never
//! changes under it. The checkpoint is written once every group is swapped
//! in; a crash before that only makes the next pass clean again.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::batch::varint::{write_varint, write_varlong};
use crate::batch::{
    BATCH_HEADER_BYTES, BatchIter, Compression, ControlRecord, ControlType, Record, RecordBatch, TimestampType,
    decode_records,
};

use super::cleaner_checkpoint;
use super::config::LogConfig;
use super::error::{LogError, Result};
use super::files::{
    INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, fsync_dir, list_offset_files,
    offset_file, parse_offset_file, remove_if_exists,
};
use super::index::{OffsetIndex, TimeIndex};
use super::partition_log::PartitionLog;
use super::producer_state::ProducerState;
use super::segment::Segment;
use super::txn_index::AbortedTxn;

/// What one key costs the offset map besides its bytes: its offset, the
/// key's heap header and allocation, the hash table's slot and slack.
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 64;
/// Decompressed bytes allowed per batch while cleaning; a batch beyond it
/// (or one that does not decode) is kept as it is and its keys not counted.
const DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;
/// The file naming the end of the offset range a cleaned segment replaces.
const RANGE_SUFFIX: &str = "cleaner-range";
/// Stage suffixes of a cleaned segment's files.
const CLEANED: &str = "cleaned";
const SWAP: &str = "swap";
/// Files renamed before the log file at each stage (the log goes last).
const COMPANIONS: [&str; 4] = [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, RANGE_SUFFIX];
const SEGMENT_SUFFIXES: [&str; 4] = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX];
/// xerial snappy-java framing, as Kafka's Java clients and brokers write it.
const XERIAL_HEADER: &[u8] = &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// How to clean.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanOptions {
    /// `delete.retention.ms`: a tombstone or a transaction marker may go
    /// once its segment's largest timestamp is at least this old.
    pub delete_retention_ms: u64,
    /// `min.cleanable.dirty.ratio`: clean only when the bytes at or above
    /// the log's first dirty offset are at least this share of the
    /// cleanable bytes. `None` cleans whatever the ratio.
    pub min_cleanable_ratio: Option<f64>,
    /// `log.cleaner.dedupe.buffer.size`: the memory the offset map may take
    /// (keys and their offsets, with [`OFFSET_MAP_ENTRY_BYTES`] of overhead
    /// per key), beyond one segment's keys (see the module doc).
    pub offset_map_bytes: u64,
    /// Tests only: stop (with an error) right after this step of the first
    /// swap, leaving the files as a crash there would; the log must then be
    /// dropped and reopened.
    #[doc(hidden)]
    pub halt_after: Option<SwapStep>,
}

impl CleanOptions {
    /// Cleans whatever the dirty ratio, keeping tombstones `delete_retention_ms`.
    pub fn new(delete_retention_ms: u64) -> Self {
        Self {
            delete_retention_ms,
            min_cleanable_ratio: None,
            offset_map_bytes: LogConfig::default().log_cleaner_dedupe_buffer_size,
            halt_after: None,
        }
    }

    /// What a log's settings say (the periodic cleaner's options).
    pub fn from_config(config: &LogConfig) -> Self {
        Self {
            delete_retention_ms: config.delete_retention_ms,
            min_cleanable_ratio: Some(config.min_cleanable_dirty_ratio),
            offset_map_bytes: config.log_cleaner_dedupe_buffer_size,
            halt_after: None,
        }
    }
}

/// The steps of swapping one cleaned segment in (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SwapStep {
    /// Every `.cleaned` file is written and synced.
    Written,
    /// The companion files are `.swap`; the log is still `.cleaned`.
    CompanionsStaged,
    /// The log is `.swap` too: the swap is committed.
    Committed,
    /// The group's other segments are deleted.
    OldDeleted,
    /// The indexes are live; the log is still `.swap`.
    IndexesInstalled,
    /// The log is live; the range file is still there.
    Installed,
}

impl SwapStep {
    pub const ALL: [SwapStep; 6] = [
        Self::Written,
        Self::CompanionsStaged,
        Self::Committed,
        Self::OldDeleted,
        Self::IndexesInstalled,
        Self::Installed,
    ];

    fn crash_point(self) -> &'static str {
        match self {
            Self::Written => "log-cleaner:written",
            Self::CompanionsStaged => "log-cleaner:companions-staged",
            Self::Committed => "log-cleaner:committed",
            Self::OldDeleted => "log-cleaner:old-deleted",
            Self::IndexesInstalled => "log-cleaner:indexes-installed",
            Self::Installed => "log-cleaner:installed",
        }
    }
}

/// What one [`PartitionLog::clean`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Sealed segments in the cleaned range (0 when nothing was due).
    pub segments_cleaned: u32,
    /// Of those, segments replaced on disk by a rewritten one.
    pub segments_rewritten: u32,
    /// Records removed (control records not counted).
    pub records_removed: u64,
    /// COMMIT/ABORT markers removed.
    pub markers_removed: u64,
    /// Bytes of the cleaned range before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The end of the range this pass cleaned: the log's first dirty
    /// offset now (0 when nothing was due).
    pub cleaned_end: i64,
}

/// What happens to one batch.
enum Filtered {
    /// Kept byte for byte.
    Whole,
    /// Replaced by a rebuilt batch (possibly empty).
    Rebuilt { bytes: Vec<u8>, removed: u64 },
    /// Gone.
    Dropped { removed: u64 },
}

/// Aborted transactions by producer id: (first offset, ABORT marker offset).
type AbortedRanges = HashMap<i64, Vec<(i64, i64)>>;

/// Key → offset of its latest decided record.
type OffsetMap = HashMap<Vec<u8>, i64>;

/// What one pass knows and has decided so far. Groups are cleaned in
/// offset order, so the transaction state (Kafka's
/// `CleanedTransactionMetadata`) carries over from one group to the next.
struct Pass {
    map: OffsetMap,
    aborted: AbortedRanges,
    /// Producer ids whose transaction is open at this point of the pass →
    /// whether a batch of it stays.
    open_txns: HashMap<i64, bool>,
    /// Aborted transactions whose marker was passed, by (producer id,
    /// marker offset) → whether a batch of theirs stays.
    aborts_passed: HashMap<(i64, i64), bool>,
    /// Producer id → offsets of the producer snapshots in which its
    /// transaction is open, each waiting for the marker that ends it.
    snapshot_txns: HashMap<i64, Vec<i64>>,
}

impl Pass {
    /// A data batch was decided on.
    fn on_data(&mut self, batch: &RecordBatch<&[u8]>, stays: bool) {
        if batch.is_transactional() {
            *self.open_txns.entry(batch.producer_id()).or_default() |= stays;
        }
    }

    /// A COMMIT/ABORT marker ends its producer's transaction. Returns
    /// whether a batch of the transaction stays, and whether a producer
    /// snapshot holds the transaction open.
    fn on_marker(&mut self, producer_id: i64, offset: i64, abort: bool) -> (bool, bool) {
        let stays = self.open_txns.remove(&producer_id).unwrap_or(false);
        if abort {
            self.aborts_passed.insert((producer_id, offset), stays);
        }
        let snapshot_needs = self.snapshot_txns.get_mut(&producer_id).is_some_and(|waiting| {
            let before = waiting.len();
            waiting.retain(|&s| s > offset);
            waiting.len() < before
        });
        (stays, snapshot_needs)
    }

    /// A MIRROR_PID_RESET: producer state forgets every transaction, so
    /// does a rebuild that replays it.
    fn on_pid_reset(&mut self, offset: i64) {
        self.open_txns.clear();
        for waiting in self.snapshot_txns.values_mut() {
            waiting.retain(|&s| s > offset);
        }
    }

    /// Whether an aborted transaction whose marker was passed still has a
    /// batch in the log (unknown ones are kept).
    fn abort_stays(&self, txn: &AbortedTxn) -> bool {
        self.aborts_passed
            .get(&(txn.producer_id, txn.last_offset))
            .copied()
            .unwrap_or(true)
    }
}

/// What a rewritten group holds and lost.
struct CleanedGroup {
    bytes: u64,
    records_removed: u64,
    markers_removed: u64,
}

impl PartitionLog {
    /// Compacts the sealed segments (see the module doc for the rules and
    /// the crash-safe swap). Offsets, the log start and the log end stay.
    pub fn clean(&mut self, options: &CleanOptions, now_ms: u64) -> Result<CleanReport> {
        let mut report = CleanReport::default();
        if let Some(base) = committed_swaps(&self.dir)?.first() {
            // A swap failed past its commit point (an I/O error): the old
            // segments are still what this process reads, the files say
            // otherwise until a reopen finishes the swap.
            return Err(LogError::CorruptFile {
                path: staged_path(&self.dir, *base, LOG_SUFFIX, SWAP),
                reason: "an interrupted swap of a cleaned segment is finished when the log is reopened".into(),
            });
        }
        let (cleanable, cleanable_end) = self.cleanable_segments();
        if cleanable.is_empty() {
            return Ok(report);
        }
        if let Some(min) = options.min_cleanable_ratio
            && self.dirty_ratio(&cleanable) < min
        {
            return Ok(report);
        }
        let aborted = self.aborted_ranges();
        let (map, mapped_end) = self.build_offset_map(&cleanable, cleanable_end, &aborted, options.offset_map_bytes)?;
        let mut pass = Pass {
            map,
            aborted,
            open_txns: HashMap::new(),
            aborts_passed: HashMap::new(),
            snapshot_txns: self.snapshot_txns()?,
        };
        let cleaned: Vec<i64> = cleanable.into_iter().filter(|&base| base < mapped_end).collect();
        for (group, next_base) in self.group_segments(&cleaned, mapped_end) {
            self.clean_group(&group, next_base, &mut pass, options, now_ms, &mut report)?;
        }
        if mapped_end > self.first_dirty_offset {
            cleaner_checkpoint::store(&self.dir, mapped_end)?;
            self.first_dirty_offset = mapped_end;
        }
        report.cleaned_end = mapped_end;
        Ok(report)
    }

    /// The bytes of the cleanable segments holding offsets at or above the
    /// first dirty offset, over all cleanable bytes.
    pub fn cleanable_dirty_ratio(&self) -> f64 {
        let (cleanable, _) = self.cleanable_segments();
        self.dirty_ratio(&cleanable)
    }

    /// The log cleaner's first dirty offset (`cleaner-offset-checkpoint`):
    /// the log below it is cleaned.
    pub fn first_dirty_offset(&self) -> i64 {
        self.first_dirty_offset
    }

    /// Truncation hook: nothing above the new log end was cleaned.
    pub(super) fn lower_first_dirty_offset(&mut self) -> Result<()> {
        let end = self.log_end_offset();
        if self.first_dirty_offset <= end {
            return Ok(());
        }
        self.first_dirty_offset = end;
        cleaner_checkpoint::store(&self.dir, end)
    }

    /// The cleanable segments' bases, and the base of the first segment
    /// after them.
    fn cleanable_segments(&self) -> (Vec<i64>, i64) {
        let lso = self.last_stable_offset();
        let (&active_base, active) = self.segments.iter().next_back().expect("a log has an active segment");
        let mut bases: Vec<i64> = self
            .segments
            .iter()
            .take_while(|&(&base, segment)| base != active_base && segment.next_offset <= lso)
            .map(|(&base, _)| base)
            .collect();
        if active.size() == 0 && bases.len() + 1 == self.segments.len() {
            bases.pop();
        }
        let end = bases
            .last()
            .and_then(|last| self.segments.range(last + 1..).next())
            .map_or(active_base, |(&b, _)| b);
        (bases, end)
    }

    fn dirty_ratio(&self, cleanable: &[i64]) -> f64 {
        let (mut clean, mut dirty) = (0u64, 0u64);
        for base in cleanable {
            let segment = &self.segments[base];
            // A segment straddling the first dirty offset (after a
            // truncation) counts as dirty.
            if segment.next_offset > self.first_dirty_offset {
                dirty += segment.size();
            } else {
                clean += segment.size();
            }
        }
        if clean + dirty == 0 {
            return 0.0;
        }
        dirty as f64 / (clean + dirty) as f64
    }

    fn aborted_ranges(&self) -> AbortedRanges {
        let mut ranges = AbortedRanges::new();
        for txn in self.segments.values().flat_map(|s| s.txn_index.entries()) {
            ranges
                .entry(txn.producer_id)
                .or_default()
                .push((txn.first_offset, txn.last_offset));
        }
        ranges
    }

    /// For each producer id, the offsets of the producer snapshots in which
    /// it has an open transaction.
    fn snapshot_txns(&self) -> Result<HashMap<i64, Vec<i64>>> {
        let mut txns: HashMap<i64, Vec<i64>> = HashMap::new();
        for offset in list_offset_files(&self.dir, SNAPSHOT_SUFFIX)? {
            let path = offset_file(&self.dir, offset, SNAPSHOT_SUFFIX);
            let bytes = fs::read(&path).map_err(LogError::io("read", &path))?;
            // An unreadable snapshot is never loaded (loading deletes it).
            let Ok(state) = ProducerState::decode_snapshot(&bytes) else {
                continue;
            };
            for p in state.producers().filter(|p| p.current_txn_first_offset.is_some()) {
                txns.entry(p.producer_id).or_default().push(offset);
            }
        }
        Ok(txns)
    }

    /// The offset map of the dirty `cleanable` segments (see the module
    /// doc), and the end of the range it covers: `cleanable_end`, or the
    /// base of the segment where `budget_bytes` ran out (never the first
    /// segment mapped).
    fn build_offset_map(
        &self,
        cleanable: &[i64],
        cleanable_end: i64,
        aborted: &AbortedRanges,
        budget_bytes: u64,
    ) -> Result<(OffsetMap, i64)> {
        let mut map = OffsetMap::new();
        let mut used = 0u64;
        let mut mapped_one = false;
        for base in cleanable {
            let segment = &self.segments[base];
            if segment.next_offset <= self.first_dirty_offset {
                continue;
            }
            // What this segment changed in the map (key, its entry before),
            // to undo if the map fills before the segment's end.
            let mut undo: Vec<(Vec<u8>, Option<i64>)> = Vec::new();
            let used_before = used;
            for item in BatchIter::new(segment.bytes(), self.config.max_batch_bytes) {
                let (_, batch) = item?;
                if mapped_one && used >= budget_bytes {
                    // The pass cleans and checkpoints below this segment
                    // only, so no record of it may hide an older one yet:
                    // its entries go, as if it had never been read. Kafka's
                    // `Cleaner.doClean` likewise cleans up to
                    // `offsetMap.latestOffset + 1`, the end of what it mapped
                    // (`buildOffsetMap`), and `shouldRetainRecord` keeps the records
                    // past it.
                    for (key, before) in undo.into_iter().rev() {
                        match before {
                            Some(offset) => {
                                map.insert(key, offset);
                            }
                            None => {
                                map.remove(&key);
                            }
                        }
                    }
                    used = used_before;
                    tracing::info!(dir = %self.dir.display(), keys = map.len(), bytes = used, end = base,
                        "log cleaner's offset map is full: this pass cleans below the segment it reached");
                    return Ok((map, *base));
                }
                if batch.is_control() || is_aborted(&batch, aborted) {
                    continue;
                }
                // A batch that does not decode is kept whole: its keys
                // unknown, older values of them stay too.
                let Ok(records) = decode_records(&batch, DECOMPRESSED_BYTES_MAX) else {
                    continue;
                };
                for record in records {
                    if let Some(key) = record.key {
                        let key_bytes = key.len() as u64;
                        let before = map.insert(key.clone(), record.offset);
                        if before.is_none() {
                            used += key_bytes + OFFSET_MAP_ENTRY_BYTES;
                        }
                        if mapped_one {
                            undo.push((key, before));
                        }
                    }
                }
            }
            mapped_one = true;
        }
        Ok((map, cleanable_end))
    }

    /// Groups of consecutive segments rewritten into one, each with the
    /// base of the segment that follows it.
    fn group_segments(&self, cleanable: &[i64], cleanable_end: i64) -> Vec<(Vec<i64>, i64)> {
        let mut groups: Vec<Vec<i64>> = Vec::new();
        let mut size = 0;
        for &base in cleanable {
            let segment = &self.segments[&base];
            let last_offset = (segment.next_offset - 1).max(base);
            let fits = groups.last().is_some_and(|g| {
                size + segment.size() <= self.config.segment_bytes && last_offset - g[0] <= i64::from(i32::MAX)
            });
            if fits {
                groups.last_mut().expect("checked").push(base);
                size += segment.size();
            } else {
                groups.push(vec![base]);
                size = segment.size();
            }
        }
        let mut out = Vec::with_capacity(groups.len());
        for i in 0..groups.len() {
            let next = groups.get(i + 1).map_or(cleanable_end, |g| g[0]);
            out.push((std::mem::take(&mut groups[i]), next));
        }
        out
    }

    /// Decides what becomes of one batch (Kafka's `checkBatchRetention`
    /// and `shouldRetainRecord`), noting it in the pass's transaction state.
    fn filter_batch(&self, batch: &RecordBatch<&[u8]>, pass: &mut Pass, retain_deletes: bool) -> Filtered {
        if batch.is_control() {
            return self.filter_control(batch, pass, retain_deletes);
        }
        let filtered = if is_aborted(batch, &pass.aborted) {
            let removed = u64::try_from(batch.records_count()).unwrap_or(0);
            self.drop_or_empty(batch, removed)
        } else {
            self.filter_records(batch, &pass.map, retain_deletes)
        };
        pass.on_data(batch, !matches!(filtered, Filtered::Dropped { .. }));
        filtered
    }

    /// A control batch: only a COMMIT/ABORT marker may go (see the module doc).
    fn filter_control(&self, batch: &RecordBatch<&[u8]>, pass: &mut Pass, retain_deletes: bool) -> Filtered {
        let abort = match ControlRecord::decode(batch).map(|r| r.control_type) {
            Ok(ControlType::Abort) => true,
            Ok(ControlType::Commit) => false,
            Ok(ControlType::MirrorPidReset) => {
                pass.on_pid_reset(batch.last_offset());
                return Filtered::Whole;
            }
            Ok(ControlType::Unknown(_)) | Err(_) => return Filtered::Whole,
        };
        let producer_id = batch.producer_id();
        let (txn_stays, snapshot_needs) = pass.on_marker(producer_id, batch.last_offset(), abort);
        let producers_last_word = self
            .producers
            .producer(producer_id)
            .is_some_and(|p| p.last_offset < batch.base_offset());
        if txn_stays || retain_deletes || snapshot_needs || producers_last_word {
            Filtered::Whole
        } else {
            Filtered::Dropped { removed: 0 }
        }
    }

    /// A data batch of a decided, not aborted, transaction or of none: its
    /// records by key.
    fn filter_records(&self, batch: &RecordBatch<&[u8]>, map: &OffsetMap, retain_deletes: bool) -> Filtered {
        let records = match decode_records(batch, DECOMPRESSED_BYTES_MAX) {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "log cleaner keeps a batch it cannot decode");
                return Filtered::Whole;
            }
        };
        let total = records.len();
        let kept: Vec<Record> = records
            .into_iter()
            .filter(|r| keep_record(r, map, retain_deletes))
            .collect();
        let removed = (total - kept.len()) as u64;
        if kept.is_empty() {
            return self.drop_or_empty(batch, removed);
        }
        if removed == 0 {
            return Filtered::Whole;
        }
        Filtered::Rebuilt {
            bytes: rebuild_batch(batch, &kept),
            removed,
        }
    }

    /// A data batch left without records (`removed` of them now): gone,
    /// unless producer state still needs it (`RETAIN_EMPTY`).
    fn drop_or_empty(&self, batch: &RecordBatch<&[u8]>, removed: u64) -> Filtered {
        let producers_last = batch.producer_id() >= 0
            && self
                .producers
                .producer(batch.producer_id())
                .is_some_and(|p| p.last_offset == batch.last_offset());
        match (producers_last, removed) {
            // Already empty, and still needed.
            (true, 0) => Filtered::Whole,
            (true, _) => Filtered::Rebuilt {
                bytes: empty_batch(batch),
                removed,
            },
            // Emptied now, or an empty batch no longer needed.
            (false, _) => Filtered::Dropped { removed },
        }
    }

    /// Cleans one group of segments into a new segment and swaps it in.
    fn clean_group(
        &mut self,
        group: &[i64],
        next_base: i64,
        pass: &mut Pass,
        options: &CleanOptions,
        now_ms: u64,
        report: &mut CleanReport,
    ) -> Result<()> {
        let base = group[0];
        let bytes_before: u64 = group.iter().map(|b| self.segments[b].size()).sum();
        report.segments_cleaned += group.len() as u32;
        report.bytes_before += bytes_before;
        remove_staged(&self.dir, base)?;
        let written = self.write_cleaned(group, pass, options.delete_retention_ms, now_ms);
        let cleaned = match written {
            Ok(Some(cleaned)) => cleaned,
            Ok(None) => {
                // Nothing to remove: the group stays as it is.
                report.bytes_after += bytes_before;
                return remove_staged(&self.dir, base);
            }
            Err(e) => {
                let _ = remove_staged(&self.dir, base);
                return Err(e);
            }
        };
        let staged = (|| {
            write_synced(
                &staged_path(&self.dir, base, RANGE_SUFFIX, CLEANED),
                format!("{next_base}\n").as_bytes(),
            )?;
            fsync_dir(&self.dir)?;
            halt_at(SwapStep::Written, options, &self.dir)?;
            for suffix in COMPANIONS {
                rename(
                    &staged_path(&self.dir, base, suffix, CLEANED),
                    &staged_path(&self.dir, base, suffix, SWAP),
                )?;
            }
            fsync_dir(&self.dir)?;
            halt_at(SwapStep::CompanionsStaged, options, &self.dir)
        })();
        if let Err(e) = staged {
            if options.halt_after.is_none() {
                let _ = remove_staged(&self.dir, base);
            }
            return Err(e);
        }
        rename(
            &staged_path(&self.dir, base, LOG_SUFFIX, CLEANED),
            &staged_path(&self.dir, base, LOG_SUFFIX, SWAP),
        )?;
        fsync_dir(&self.dir)?;
        // Committed: from here on a reopen finishes the swap.
        halt_at(SwapStep::Committed, options, &self.dir)?;
        // Should a step fail from here on, the old segments stay in memory
        // (mapped: their data stays readable) and a reopen finishes the swap.
        complete_swap(&self.dir, base, options)?;
        let (mut segment, _) = Segment::open(&self.dir, base, &self.config, false, false)?;
        if !segment.check_tail(self.config.max_batch_bytes) {
            return Err(LogError::CorruptFile {
                path: segment.log_path().to_owned(),
                reason: "cleaned segment does not frame".into(),
            });
        }
        for b in group {
            // Their files are gone or replaced; readers holding them keep the old inodes.
            drop(self.segments.remove(b));
        }
        self.segments.insert(base, segment);
        report.segments_rewritten += group.len() as u32;
        report.records_removed += cleaned.records_removed;
        report.markers_removed += cleaned.markers_removed;
        report.bytes_after += cleaned.bytes;
        tracing::info!(dir = %self.dir.display(), base, segments = group.len(), bytes_before, bytes_after = cleaned.bytes,
            records_removed = cleaned.records_removed, markers_removed = cleaned.markers_removed,
            "swapped in a cleaned segment");
        Ok(())
    }

    /// Writes the group's kept batches and rebuilt indexes to the
    /// `.cleaned` files. `None` when nothing would change.
    fn write_cleaned(
        &self,
        group: &[i64],
        pass: &mut Pass,
        delete_retention_ms: u64,
        now_ms: u64,
    ) -> Result<Option<CleanedGroup>> {
        let base = group[0];
        let max_batch_bytes = self.config.max_batch_bytes;
        let source_bytes: u64 = group.iter().map(|b| self.segments[b].size()).sum();
        let mut out = CleanedSegment::create(&self.dir, base, &self.config, source_bytes)?;
        // Batches dropped or rebuilt, index entries dropped: the group is
        // rewritten only if any.
        let mut changes = 0usize;
        let (mut records_removed, mut markers_removed) = (0, 0);
        let mut last_batch = None;
        for b in group {
            let segment = &self.segments[b];
            let mut largest_timestamp = i64::MIN;
            for item in BatchIter::new(segment.bytes(), max_batch_bytes) {
                largest_timestamp = largest_timestamp.max(item?.1.max_timestamp());
            }
            let horizon = largest_timestamp.saturating_add(i64::try_from(delete_retention_ms).unwrap_or(i64::MAX));
            let retain_deletes = horizon > i64::try_from(now_ms).unwrap_or(i64::MAX);
            for item in BatchIter::new(segment.bytes(), max_batch_bytes) {
                let (position, batch) = item?;
                last_batch = Some((*b, position));
                match self.filter_batch(&batch, pass, retain_deletes) {
                    Filtered::Whole => out.append(batch.bytes())?,
                    Filtered::Rebuilt { bytes, removed } => {
                        out.append(&bytes)?;
                        changes += 1;
                        records_removed += removed;
                    }
                    Filtered::Dropped { removed } => {
                        changes += 1;
                        records_removed += removed;
                        markers_removed += u64::from(batch.is_control());
                    }
                }
            }
        }
        if out.position == 0
            && let Some((b, position)) = last_batch
        {
            // Never an empty segment: the group's last batch (dropped)
            // stays, a marker as it is, a data batch empty (no change if
            // it was that empty batch already).
            let batch = self.segments[&b].batch_at(position as u64)?;
            let kept = if batch.is_control() {
                markers_removed -= 1;
                batch.bytes().to_vec()
            } else {
                pass.on_data(&batch, true);
                empty_batch(&batch)
            };
            if kept == batch.bytes() {
                changes -= 1;
            }
            out.append(&kept)?;
        }
        // Every marker of the group's entries was passed by now.
        let mut txns: Vec<AbortedTxn> = Vec::new();
        for txn in group.iter().flat_map(|b| self.segments[b].txn_index.entries()) {
            if pass.abort_stays(txn) {
                txns.push(*txn);
            } else {
                changes += 1;
            }
        }
        if changes == 0 {
            return Ok(None);
        }
        Ok(Some(CleanedGroup {
            bytes: out.finish(&txns)?,
            records_removed,
            markers_removed,
        }))
    }
}

fn is_aborted(batch: &RecordBatch<&[u8]>, aborted: &AbortedRanges) -> bool {
    batch.is_transactional()
        && !batch.is_control()
        && aborted.get(&batch.producer_id()).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|&(first, marker)| first <= batch.base_offset() && batch.base_offset() < marker)
        })
}

fn keep_record(record: &Record, map: &OffsetMap, retain_deletes: bool) -> bool {
    let Some(key) = &record.key else {
        return true;
    };
    match map.get(key) {
        Some(&latest) if latest > record.offset => false,
        _ => record.value.is_some() || retain_deletes,
    }
}

/// The v2 batch header (61 bytes) followed by `records`, with its CRC.
fn encode_batch(
    original: &RecordBatch<&[u8]>,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: i64,
    count: usize,
    records: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + records.len());
    out.extend_from_slice(&original.base_offset().to_be_bytes());
    let length = (BATCH_HEADER_BYTES - 12 + records.len()) as i32;
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&original.partition_leader_epoch().to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&original.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&max_timestamp.to_be_bytes());
    out.extend_from_slice(&original.producer_id().to_be_bytes());
    out.extend_from_slice(&original.producer_epoch().to_be_bytes());
    out.extend_from_slice(&original.base_sequence().to_be_bytes());
    out.extend_from_slice(&(count as i32).to_be_bytes());
    debug_assert_eq!(out.len(), BATCH_HEADER_BYTES);
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Kafka's `DefaultRecordBatch.writeEmptyHeader`: the batch's offsets,
/// producer fields and flags, no records, its max timestamp as both
/// timestamps, uncompressed.
fn empty_batch(original: &RecordBatch<&[u8]>) -> Vec<u8> {
    let attributes = original.attributes() & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL);
    let ts = original.max_timestamp();
    encode_batch(original, attributes, ts, ts, 0, &[])
}

/// The batch with only `kept` (Kafka's `buildRetainedRecordsInto`).
fn rebuild_batch(original: &RecordBatch<&[u8]>, kept: &[Record]) -> Vec<u8> {
    let log_append_time = original.timestamp_type() == TimestampType::LogAppendTime;
    let (base_timestamp, max_timestamp) = if log_append_time {
        (original.base_timestamp(), original.max_timestamp())
    } else {
        let max = kept.iter().map(|r| r.timestamp).max().unwrap_or(-1);
        (kept.first().map_or(-1, |r| r.timestamp), max)
    };
    let raw = encode_records(original.base_offset(), base_timestamp, kept);
    let codec = original.compression();
    let flags = original.attributes() & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL);
    if codec != Compression::None
        && let Some(compressed) = compress(codec, &raw)
    {
        let attributes = flags | i16::from(codec.id());
        let batch = encode_batch(
            original,
            attributes,
            base_timestamp,
            max_timestamp,
            kept.len(),
            &compressed,
        );
        let round_trip = RecordBatch::new(&batch[..])
            .ok()
            .and_then(|b| decode_records(&b, DECOMPRESSED_BYTES_MAX).ok());
        if round_trip.as_deref() == Some(kept) {
            return batch;
        }
        tracing::warn!(
            codec = codec.name(),
            base_offset = original.base_offset(),
            "re-encoded batch does not decode to its records; writing it uncompressed"
        );
    }
    encode_batch(original, flags, base_timestamp, max_timestamp, kept.len(), &raw)
}

/// The records section (uncompressed) of a v2 batch.
fn encode_records(base_offset: i64, base_timestamp: i64, records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    for r in records {
        body.clear();
        body.push(0); // record attributes (unused in v2)
        write_varlong(&mut body, r.timestamp.wrapping_sub(base_timestamp));
        write_varint(&mut body, (r.offset - base_offset) as i32);
        write_field(&mut body, r.key.as_deref());
        write_field(&mut body, r.value.as_deref());
        write_varint(&mut body, r.headers.len() as i32);
        for h in &r.headers {
            write_field(&mut body, Some(&h.key));
            write_field(&mut body, h.value.as_deref());
        }
        write_varint(&mut out, body.len() as i32);
        out.extend_from_slice(&body);
    }
    out
}

fn write_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        None => write_varint(out, -1),
        Some(bytes) => {
            write_varint(out, bytes.len() as i32);
            out.extend_from_slice(bytes);
        }
    }
}

/// `raw` compressed with `codec` as Kafka's clients write it; `None` when
/// the codec is unknown or the encoder fails.
fn compress(codec: Compression, raw: &[u8]) -> Option<Vec<u8>> {
    let encoded = std::panic::catch_unwind(|| -> std::io::Result<Option<Vec<u8>>> {
        Ok(match codec {
            Compression::None => Some(raw.to_vec()),
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(raw)?;
                Some(e.finish()?)
            }
            Compression::Snappy => {
                let mut out = XERIAL_HEADER.to_vec();
                let mut encoder = snap::raw::Encoder::new();
                for block in raw.chunks(XERIAL_BLOCK_BYTES) {
                    let compressed = encoder.compress_vec(block).map_err(std::io::Error::other)?;
                    out.extend_from_slice(&(compressed.len() as i32).to_be_bytes());
                    out.extend_from_slice(&compressed);
                }
                Some(out)
            }
            Compression::Lz4 => {
                use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
                let info = FrameInfo::new()
                    .block_size(BlockSize::Max64KB)
                    .block_mode(BlockMode::Independent);
                let mut e = FrameEncoder::with_frame_info(info, Vec::new());
                e.write_all(raw)?;
                Some(e.finish().map_err(std::io::Error::other)?)
            }
            Compression::Zstd => Some(ruzstd::encoding::compress_to_vec(
                raw,
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
            Compression::Unknown(_) => None,
        })
    });
    match encoded {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            tracing::warn!(codec = codec.name(), error = %e, "compressing a cleaned batch failed");
            None
        }
        Err(_) => {
            tracing::warn!(codec = codec.name(), "compressing a cleaned batch panicked");
            None
        }
    }
}

/// A cleaned segment being written: the log through a buffer, the
/// indexes as appends build them (Kafka's `LogSegment.append`).
struct CleanedSegment {
    base: i64,
    dir: PathBuf,
    log: BufWriter<File>,
    index: OffsetIndex,
    time_index: TimeIndex,
    index_interval_bytes: u64,
    position: u64,
    bytes_since_index: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
}

impl CleanedSegment {
    fn create(dir: &Path, base: i64, config: &LogConfig, source_bytes: u64) -> Result<Self> {
        let log_path = staged_path(dir, base, LOG_SUFFIX, CLEANED);
        let log = File::create(&log_path).map_err(LogError::io("create", &log_path))?;
        // Room for every entry the data could need, whatever the config says.
        let interval = config.index_interval_bytes.max(1);
        let needed = (source_bytes / interval + 2) * 12;
        let max_bytes = config.segment_index_bytes.max(needed);
        let (index, _) = OffsetIndex::open(
            &staged_path(dir, base, INDEX_SUFFIX, CLEANED),
            base,
            max_bytes,
            true,
            true,
        )?;
        let (time_index, _) = TimeIndex::open(
            &staged_path(dir, base, TIME_INDEX_SUFFIX, CLEANED),
            base,
            max_bytes,
            true,
            true,
        )?;
        Ok(Self {
            base,
            dir: dir.to_owned(),
            log: BufWriter::with_capacity(1 << 20, log),
            index,
            time_index,
            index_interval_bytes: config.index_interval_bytes,
            position: 0,
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
        })
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        let batch = RecordBatch::new(bytes)?;
        let position = u32::try_from(self.position).map_err(|_| LogError::CorruptFile {
            path: staged_path(&self.dir, self.base, LOG_SUFFIX, CLEANED),
            reason: "cleaned segment would pass 4 GiB".into(),
        })?;
        let last_offset = batch.last_offset();
        if batch.max_timestamp() > self.max_timestamp {
            self.max_timestamp = batch.max_timestamp();
            self.offset_of_max_timestamp = last_offset;
        }
        if self.bytes_since_index > self.index_interval_bytes {
            if !self.index.is_full() {
                self.index.append(last_offset, position)?;
            }
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
            self.bytes_since_index = 0;
        }
        let path = staged_path(&self.dir, self.base, LOG_SUFFIX, CLEANED);
        self.log.write_all(bytes).map_err(LogError::io("write", &path))?;
        self.bytes_since_index += bytes.len() as u64;
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Seals and syncs everything; writes the transaction index. Returns the log's size.
    fn finish(mut self, txns: &[AbortedTxn]) -> Result<u64> {
        let path = |suffix| staged_path(&self.dir, self.base, suffix, CLEANED);
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
        self.index.seal()?;
        self.time_index.seal()?;
        let log = self
            .log
            .into_inner()
            .map_err(|e| LogError::io("write", path(LOG_SUFFIX))(e.into_error()))?;
        log.sync_all().map_err(LogError::io("fsync", path(LOG_SUFFIX)))?;
        drop((self.index, self.time_index));
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let p = path(suffix);
            File::open(&p)
                .and_then(|f| f.sync_all())
                .map_err(LogError::io("fsync", &p))?;
        }
        let entries: Vec<u8> = txns.iter().flat_map(encode_txn).collect();
        write_synced(&path(TXN_INDEX_SUFFIX), &entries)?;
        Ok(self.position)
    }
}

/// A `.txnindex` entry: version 0, producer id, first offset, last offset,
/// last stable offset (34 bytes).
fn encode_txn(txn: &AbortedTxn) -> Vec<u8> {
    let mut out = Vec::with_capacity(34);
    out.extend_from_slice(&0i16.to_be_bytes());
    for v in [
        txn.producer_id,
        txn.first_offset,
        txn.last_offset,
        txn.last_stable_offset,
    ] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

fn staged_path(dir: &Path, base: i64, suffix: &str, stage: &str) -> PathBuf {
    dir.join(format!("{base:020}.{suffix}.{stage}"))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = File::create(path).map_err(LogError::io("create", path))?;
    file.write_all(bytes).map_err(LogError::io("write", path))?;
    file.sync_all().map_err(LogError::io("fsync", path))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(LogError::io("rename", from))
}

/// Removes every staged file of a swap at `base` that is not committed
/// (only valid while `<base>.log.swap` does not exist).
fn remove_staged(dir: &Path, base: i64) -> Result<()> {
    for suffix in SEGMENT_SUFFIXES.iter().chain([&RANGE_SUFFIX]) {
        for stage in [CLEANED, SWAP] {
            remove_if_exists(&staged_path(dir, base, suffix, stage))?;
        }
    }
    Ok(())
}

/// The test hook (and crash point) after `step`.
fn halt_at(step: SwapStep, options: &CleanOptions, dir: &Path) -> Result<()> {
    crate::failpoint::crash_point(step.crash_point());
    if options.halt_after == Some(step) {
        return Err(LogError::Io {
            op: "clean (halted by the test hook)",
            path: dir.to_owned(),
            source: std::io::Error::other(format!("halted after {step:?}")),
        });
    }
    Ok(())
}

/// Steps 4–6 of a committed swap at `base` (idempotent: a reopen runs them
/// again for whatever a crash left).
fn complete_swap(dir: &Path, base: i64, options: &CleanOptions) -> Result<()> {
    let range_path = staged_path(dir, base, RANGE_SUFFIX, SWAP);
    let end = match fs::read_to_string(&range_path) {
        Ok(text) => text.trim().parse::<i64>().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(LogError::io("read", &range_path)(e)),
    };
    let end = end.unwrap_or_else(|| {
        // Cannot happen (the range file is staged before the log); keep
        // every other segment rather than guess.
        tracing::warn!(dir = %dir.display(), base, "cleaned segment without its range file; keeping later segments");
        base + 1
    });
    // Later segments' files first, the head's own are replaced by rename.
    for suffix in SEGMENT_SUFFIXES {
        for offset in list_offset_files(dir, suffix)? {
            if offset > base && offset < end {
                remove_if_exists(&offset_file(dir, offset, suffix))?;
            }
        }
    }
    fsync_dir(dir)?;
    halt_at(SwapStep::OldDeleted, options, dir)?;
    for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX] {
        let swap = staged_path(dir, base, suffix, SWAP);
        if swap.exists() {
            rename(&swap, &offset_file(dir, base, suffix))?;
        }
    }
    fsync_dir(dir)?;
    halt_at(SwapStep::IndexesInstalled, options, dir)?;
    rename(
        &staged_path(dir, base, LOG_SUFFIX, SWAP),
        &offset_file(dir, base, LOG_SUFFIX),
    )?;
    fsync_dir(dir)?;
    halt_at(SwapStep::Installed, options, dir)?;
    remove_if_exists(&range_path)?;
    fsync_dir(dir)
}

/// The bases of the committed swaps in `dir` (each a `<base>.log.swap`).
fn committed_swaps(dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        if let Some(base) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".swap"))
            .and_then(|n| parse_offset_file(n, LOG_SUFFIX))
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Finishes every committed swap in `dir`, before the log's segments are
/// listed. Uncommitted leftovers are strays.
pub(crate) fn complete_interrupted_swaps(dir: &Path) -> Result<()> {
    for base in committed_swaps(dir)? {
        tracing::info!(dir = %dir.display(), base, "finishing the swap of a cleaned segment");
        complete_swap(dir, base, &CleanOptions::new(0))?;
    }
    Ok(())
}
