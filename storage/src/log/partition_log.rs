//! [`PartitionLog`]: one partition's log — append at the batches' own
//! offsets, zero-copy reads, lookups, truncation, retention, flush, and
//! recovery after an unclean stop.
//!
//! Appends never rewrite a byte of a batch. Two ways in: [`PartitionLog::append`]
//! copies whole batches from a caller's buffer, and the zero-copy pair
//! [`PartitionLog::tail_mut`] / [`PartitionLog::commit_tail`] lets a fetcher
//! receive straight into the mapped tail of the active segment and then
//! commit what it validated in place.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{
    BatchIter, BatchSummary, NO_PARTITION_LEADER_EPOCH, RecordBatch, Validation, decode_records, validate_batches,
};

use super::async_append::InFlightWrites;
use super::background_flush::{UnflushedSegments, WRITE_BEHIND_BYTES};
use super::checkpoint::{read_partition_metadata, topic_id_to_string, write_partition_metadata};
use super::config::LogConfig;
use super::epoch_cache::LeaderEpochCache;
use super::error::{LogError, Result};
use super::files::{LOG_SUFFIX, fsync_dir, list_offset_files, remove_if_exists};
use super::producer_state::{BatchFacts, ProducerState};
use super::provenance::Provenance;
use super::reserve::{AppendRate, ReserveBudget, ReservePlan, reserve_step_bytes};
use super::segment::Segment;
use super::txn_index::AbortedTxn;

const EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Decompressed bytes allowed when a lookup must look inside one batch.
const LOOKUP_DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Leftovers of interrupted operations (ours and Kafka's) that are removed on open.
const STRAY_SUFFIXES: &[&str] = &[".tmp", ".deleted", ".cleaned", ".swap"];

/// How to open a partition log.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// The partition directory, `<data dir>/<topic>-<partition>`.
    pub dir: PathBuf,
    /// Topic id to record in `partition.metadata` (checked if already there).
    pub topic_id: Option<[u8; 16]>,
    pub config: LogConfig,
    /// From `recovery-point-offset-checkpoint`: everything below is on disk.
    pub recovery_point: i64,
    /// From `log-start-offset-checkpoint`.
    pub log_start_offset: i64,
    /// The data directory was shut down cleanly: skip the recovery scan.
    pub clean_shutdown: bool,
    pub now_ms: u64,
}

impl OpenOptions {
    /// A log at `dir` with no checkpoints: no topic id, recovery from the
    /// start if it holds anything.
    pub fn new(dir: impl Into<PathBuf>, config: LogConfig) -> Self {
        Self {
            dir: dir.into(),
            topic_id: None,
            config,
            recovery_point: 0,
            log_start_offset: 0,
            clean_shutdown: false,
            now_ms: 0,
        }
    }
}

/// What opening the log found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Offset of the first re-validated segment, when a scan ran.
    pub scanned_from_offset: Option<i64>,
    pub batches_validated: u64,
    pub bytes_validated: u64,
    /// Bytes dropped from a torn or corrupt tail.
    pub bytes_truncated: u64,
    pub segments_deleted: u32,
    /// Why the scan stopped early, if it did.
    pub corruption: Option<String>,
}

/// What an append committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    pub batches: u32,
    pub records: u64,
    pub bytes: u64,
}

/// A byte range of a segment file holding whole batches, for sending with
/// sendfile/splice. Holds the file open, so a later roll or retention
/// cannot pull the inode away mid-send.
#[derive(Debug, Clone)]
pub struct ReadSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: usize,
    /// Base offset of the first batch in the range (may be below the
    /// requested offset: readers skip records before it).
    pub first_offset: i64,
    /// The offset after the range's last batch (`first_offset` when empty).
    pub end_offset: i64,
}

impl ReadSlice {
    /// Copies the range out (tests and copying paths).
    pub fn to_vec(&self) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut out = vec![0; self.len];
        self.file.read_exact_at(&mut out, self.position)?;
        Ok(out)
    }
}

/// A record found by timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

pub struct PartitionLog {
    pub(super) dir: PathBuf,
    pub(super) config: LogConfig,
    topic_id: Option<[u8; 16]>,
    /// By base offset; the last one is active.
    pub(super) segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    /// The log end readers see: after the last batch whose bytes are in the file.
    pub(super) next_offset: i64,
    recovery_point: i64,
    pub(super) epochs: LeaderEpochCache,
    pub(super) producers: ProducerState,
    unflushed_records: u64,
    last_flush_ms: u64,
    /// The log cleaner's first dirty offset (`cleaner-offset-checkpoint`):
    /// the log below it was cleaned. Within [log start, log end].
    pub(super) first_dirty_offset: i64,
    /// Which source's batches the log holds, and whether anything was
    /// written here since (`mirror-source.checkpoint`); `None`: not known.
    pub(super) provenance: Option<Provenance>,
    /// Writes handed out by [`PartitionLog::begin_write`] whose bytes are
    /// not known to be in the file yet.
    pub(super) writes: InFlightWrites,
    /// Where the room reserved ahead of the data comes from (the shard's
    /// budget once attached; until then one step of the log's own), and
    /// the append rate its step follows.
    reserve_budget: Arc<ReserveBudget>,
    append_rate: AppendRate,
    /// Rolled segments whose background flush has not completed: the
    /// recovery point moves past them only once it has.
    unflushed: UnflushedSegments,
    /// Where in the active segment write-behind was last asked up to.
    written_behind: u64,
}

impl PartitionLog {
    /// Opens the log at `opts.dir`, creating it if missing, and recovers it
    /// if the last stop was not clean.
    pub fn open(opts: OpenOptions) -> Result<(Self, RecoveryReport)> {
        let dir = opts.dir.clone();
        std::fs::create_dir_all(&dir).map_err(LogError::io("create dir", &dir))?;
        let topic_id = Self::check_topic_id(&dir, opts.topic_id)?;
        // A cleaned segment swapped in past its commit point is finished
        // first; what is left of an uncommitted one goes with the strays.
        super::cleaner::complete_interrupted_swaps(&dir)?;
        remove_strays(&dir)?;
        let epochs = LeaderEpochCache::load(dir.join(EPOCH_CHECKPOINT_FILE))?;
        let provenance = super::provenance::load(&dir);
        let mut log = Self {
            dir,
            config: opts.config,
            topic_id,
            segments: BTreeMap::new(),
            log_start_offset: opts.log_start_offset.max(0),
            next_offset: 0,
            recovery_point: opts.recovery_point,
            epochs,
            producers: ProducerState::default(),
            unflushed_records: 0,
            last_flush_ms: opts.now_ms,
            first_dirty_offset: opts.log_start_offset.max(0),
            provenance,
            writes: InFlightWrites::default(),
            reserve_budget: Arc::new(ReserveBudget::new(opts.config.preallocate_bytes)),
            append_rate: AppendRate::since(opts.now_ms),
            unflushed: UnflushedSegments::default(),
            written_behind: 0,
        };
        let bases = list_offset_files(&log.dir, LOG_SUFFIX)?;
        let mut report = RecoveryReport::default();
        if bases.is_empty() {
            log.start_empty_at(log.log_start_offset)?;
            return Ok((log, report));
        }
        log.log_start_offset = log.log_start_offset.max(bases[0]);
        let last = *bases.last().expect("not empty");
        let recovery_segment = bases.partition_point(|&b| b <= opts.recovery_point).saturating_sub(1);
        let mut first_suspect = None;
        for (i, &base) in bases.iter().enumerate() {
            let (mut segment, indexes_ok) = Segment::open(&log.dir, base, &log.config, base == last, false)?;
            // After an unclean stop, segments from the recovery point on are
            // re-validated anyway; only earlier ones need the cheap check.
            let rescanned = !opts.clean_shutdown && i >= recovery_segment;
            let tail_ok = rescanned || (indexes_ok && segment.check_tail(log.config.max_batch_bytes));
            if !tail_ok && first_suspect.is_none() {
                first_suspect = Some(i);
            }
            log.segments.insert(base, segment);
        }
        let scan_from = match (opts.clean_shutdown, first_suspect) {
            (true, suspect) => suspect,
            (false, suspect) => Some(suspect.map_or(recovery_segment, |s| s.min(recovery_segment))),
        };
        match scan_from {
            Some(i) => log.recover(bases[i], &mut report)?,
            None => {
                log.next_offset = log.active().next_offset;
                log.rebuild_producer_state(log.next_offset)?;
                log.recovery_point = log.next_offset;
            }
        }
        if log.next_offset < log.log_start_offset {
            // Retention moved past everything we hold while we were down.
            log.truncate_fully_and_start_at(log.log_start_offset)?;
        }
        log.first_dirty_offset = super::cleaner_checkpoint::load(&log.dir, log.log_start_offset, log.next_offset);
        Ok((log, report))
    }

    fn check_topic_id(dir: &Path, requested: Option<[u8; 16]>) -> Result<Option<[u8; 16]>> {
        let path = dir.join(PARTITION_METADATA_FILE);
        let on_disk = read_partition_metadata(&path)?;
        match (on_disk, requested) {
            (Some(found), Some(wanted)) if found != wanted => Err(LogError::TopicIdMismatch {
                path: dir.to_owned(),
                on_disk: topic_id_to_string(&found),
                requested: topic_id_to_string(&wanted),
            }),
            (None, Some(wanted)) => {
                write_partition_metadata(&path, &wanted)?;
                Ok(Some(wanted))
            }
            (found, _) => Ok(found),
        }
    }

    pub(super) fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub(super) fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// The active segment, and what a write into it may reserve ahead at
    /// `now_ms`: the step for the log's recent rate, from its budget.
    pub(super) fn active_with_plan(&mut self, now_ms: u64) -> (&mut Segment, ReservePlan<'_>) {
        let plan = ReservePlan {
            budget: &self.reserve_budget,
            step_bytes: reserve_step_bytes(self.append_rate.bytes_per_s(now_ms), self.config.preallocate_bytes),
        };
        let active = self
            .segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment");
        (active, plan)
    }

    /// Takes the room reserved ahead of the data from `budget` from now on
    /// (the shard's, once the log is opened on it). Room the active
    /// segment already holds (from before an unclean stop) is held against
    /// it as far as it grants, and the rest released. Returns the bytes
    /// released.
    pub fn set_reserve_budget(&mut self, budget: Arc<ReserveBudget>) -> Result<u64> {
        let keep_end = self.active().size() + self.writes_in_flight_bytes();
        let released = self.active_mut().move_reservation_to(&budget, keep_end)?;
        budget.count_released(released);
        self.reserve_budget = budget;
        Ok(released)
    }

    /// When nothing was appended for `reserve_release_idle_ms` (or since
    /// the log was opened), gives the room the active segment has reserved
    /// past its data and the writes in flight back to the file system (see
    /// [`Segment::release_ahead`]) and to the budget. Returns the bytes
    /// released.
    pub fn release_idle_reservation(&mut self, now_ms: u64) -> Result<u64> {
        if self.append_rate.idle_ms(now_ms) < self.config.reserve_release_idle_ms {
            return Ok(0);
        }
        let keep_end = self.active().size() + self.writes_in_flight_bytes();
        let released = self.active_mut().release_ahead(keep_end)?;
        self.reserve_budget.count_released(released);
        Ok(released)
    }

    /// The active segment file's reserved length: its data, the writes in
    /// flight and the room reserved ahead of them.
    pub fn reserved_bytes(&self) -> u64 {
        self.active().reserved_bytes()
    }

    /// What the active segment holds ahead of its writes, from the budget.
    pub fn reserved_ahead_bytes(&self) -> u64 {
        self.active().reserved_ahead_bytes()
    }

    /// Re-validates every segment from `from_base` on, rebuilding indexes,
    /// the epoch cache and producer state, and cuts the log at the first bad
    /// byte (everything after it is dropped: only the longest valid prefix
    /// survives).
    fn recover(&mut self, from_base: i64, report: &mut RecoveryReport) -> Result<()> {
        report.scanned_from_offset = Some(from_base);
        tracing::info!(dir = %self.dir.display(), from_offset = from_base, "recovering log");
        // Epoch entries for offsets below the first batch scanned are still
        // right (one may be clamped to the log start); later ones are rebuilt.
        let first_scanned = self.segments[&from_base]
            .batch_at(0)
            .ok()
            .filter(|b| b.crc_is_valid() && b.base_offset() >= from_base)
            .map_or(from_base, |b| b.base_offset());
        self.epochs.truncate_from_end(first_scanned);
        ProducerState::delete_snapshots(&self.dir, |o| o > from_base)?;
        self.rebuild_producer_state(from_base)?;
        let bases: Vec<i64> = self.segments.range(from_base..).map(|(&b, _)| b).collect();
        let last = *bases.last().expect("from_base is a segment");
        let mut next_offset = self
            .segments
            .range(..from_base)
            .next_back()
            .map_or(from_base, |(_, s)| s.next_offset);
        let mut cut_after = None;
        for &base in &bases {
            // Re-open with empty, writable indexes to rebuild them.
            let old = self.segments.remove(&base).expect("listed");
            drop(old);
            // Keep a snapshot at every segment base, as rolling does, so that
            // a later recovery or retention never needs the deleted batches.
            self.producers.write_snapshot(&self.dir, base)?;
            let (mut segment, _) = Segment::open(&self.dir, base, &self.config, base == last, true)?;
            segment.reset_for_rebuild()?;
            let file_len = segment.file_bytes().len() as u64;
            let range = validate_batches(
                segment.file_bytes(),
                &Validation {
                    next_offset: next_offset.max(base),
                    max_batch_bytes: self.config.max_batch_bytes,
                    fetch_epoch: None,
                    last_epoch: self.epochs.latest().map(|e| e.epoch),
                },
            );
            let mut valid_bytes = 0;
            let mut stop = range.error.map(|e| e.to_string());
            let mut position = 0;
            while position < range.valid_bytes {
                let batch = segment.batch_at(position as u64)?;
                if batch.last_offset() - base > i64::from(i32::MAX) {
                    stop = Some(format!(
                        "batch at offset {} does not fit segment {base}",
                        batch.base_offset()
                    ));
                    break;
                }
                let size = batch.size_bytes();
                let facts = BatchFacts::of(&batch);
                let epoch = batch.partition_leader_epoch();
                let records = batch.records_count();
                self.apply_batch_state(&mut segment, &facts, epoch, size as u64, records)?;
                position += size;
                valid_bytes = position;
                report.batches_validated += 1;
            }
            report.bytes_validated += valid_bytes as u64;
            next_offset = segment.next_offset;
            let lost = file_len - valid_bytes as u64;
            let is_last = base == last;
            // The active segment's reserved space past its data reads as
            // zeros: that is not corruption and nothing is lost.
            let only_reserved_zeros = is_last && segment.file_bytes()[valid_bytes..].iter().all(|&b| b == 0);
            if lost > 0 && !only_reserved_zeros {
                let reason = stop.clone().unwrap_or_else(|| "partial batch at the tail".into());
                tracing::warn!(segment = %segment.log_path().display(), kept_bytes = valid_bytes, dropped_bytes = lost,
                    reason, "truncating a torn or corrupt segment tail");
                report.corruption = Some(reason);
                report.bytes_truncated += lost;
            }
            if lost > 0 {
                segment.truncate_to_position(valid_bytes as u64, self.config.max_batch_bytes)?;
                if is_last && !only_reserved_zeros {
                    // Writes complete out of order: whole batches may sit
                    // behind the hole. Left in place, they could pass for
                    // the log's continuation in a later recovery.
                    segment.zero_tail(valid_bytes as u64, file_len);
                }
            }
            self.segments.insert(base, segment);
            if lost > 0 && !only_reserved_zeros {
                // Whatever follows a torn or corrupt batch cannot be trusted
                // to continue the log without a hole.
                cut_after = Some(base);
                break;
            }
        }
        if let Some(cut) = cut_after {
            let doomed: Vec<i64> = self.segments.range(cut + 1..).map(|(&b, _)| b).collect();
            for base in doomed {
                let segment = self.segments.remove(&base).expect("listed");
                report.bytes_truncated += segment.file_bytes().len() as u64;
                report.segments_deleted += 1;
                segment.delete()?;
            }
        }
        self.drop_empty_tail_segments(report)?;
        // Seal what recovery rebuilt, except the new active segment.
        let active_base = *self.segments.keys().next_back().expect("at least one segment");
        for (_, segment) in self.segments.range_mut(from_base.min(active_base)..active_base) {
            segment.seal()?;
        }
        let config = self.config;
        let active = self.active_mut();
        active.make_active(&config)?;
        active.flush()?;
        ProducerState::delete_snapshots(&self.dir, |o| o > active_base)?;
        self.next_offset = self.active().next_offset;
        self.recovery_point = self.next_offset;
        // Re-scanned batches below the log start must not resurrect epochs.
        self.epochs.truncate_from_end(self.next_offset);
        self.epochs.truncate_from_start(self.log_start_offset);
        self.epochs.persist()?;
        fsync_dir(&self.dir)
    }

    /// Removes empty segments at the end of the log (but never the first):
    /// an empty active segment must start exactly at the log end offset.
    fn drop_empty_tail_segments(&mut self, report: &mut RecoveryReport) -> Result<()> {
        while self.segments.len() > 1 && self.active().size() == 0 {
            let (_, segment) = self.segments.pop_last().expect("len > 1");
            report.segments_deleted += 1;
            segment.delete()?;
        }
        Ok(())
    }

    /// Loads the newest producer snapshot at or below `up_to` and replays
    /// batch headers from there to `up_to` (headers only; these bytes were
    /// validated when written).
    fn rebuild_producer_state(&mut self, up_to: i64) -> Result<()> {
        let (from, state) = ProducerState::load_latest_snapshot(&self.dir, up_to)?.unwrap_or_default();
        self.producers = state;
        for segment in self.segments.values() {
            if segment.base_offset >= up_to || segment.next_offset <= from {
                continue;
            }
            for item in BatchIter::new(segment.bytes(), self.config.max_batch_bytes) {
                let (_, batch) = item?;
                if batch.base_offset() >= up_to {
                    break;
                }
                if batch.base_offset() >= from {
                    self.producers.apply(&BatchFacts::of(&batch));
                }
            }
        }
        Ok(())
    }

    /// Everything an append changes besides the bytes: indexes, epoch cache,
    /// producer state, aborted transactions.
    fn apply_batch_state(
        &mut self,
        segment: &mut Segment,
        facts: &BatchFacts,
        epoch: i32,
        size: u64,
        records: i32,
    ) -> Result<()> {
        segment.on_batch_committed(size, facts.last_offset, facts.max_timestamp, &self.config)?;
        if epoch != NO_PARTITION_LEADER_EPOCH {
            self.epochs.assign(epoch, facts.base_offset);
        }
        if let Some(aborted) = self.producers.apply(facts) {
            segment.txn_index.append(aborted)?;
        }
        self.unflushed_records += u64::try_from(records).unwrap_or(0);
        Ok(())
    }

    fn start_empty_at(&mut self, offset: i64) -> Result<()> {
        let (segment, _) = Segment::open(&self.dir, offset, &self.config, true, true)?;
        self.segments.insert(offset, segment);
        self.log_start_offset = offset;
        self.next_offset = offset;
        self.recovery_point = offset;
        self.unflushed.forget_progress();
        fsync_dir(&self.dir)
    }

    /// Seals the active segment and starts a new one at `base`. The sealed
    /// segment, the producer snapshot and the directory are synced in the
    /// background (see `background_flush`), as Kafka's `UnifiedLog.roll`
    /// leaves them to its scheduler: the appending thread does not wait for
    /// a whole segment's write-back.
    fn roll(&mut self, base: i64) -> Result<()> {
        self.active_mut().seal_unflushed()?;
        self.epochs.persist()?;
        let snapshot = self.producers.write_snapshot_unsynced(&self.dir, base)?;
        let sealed = self.active().sealed_files(Some(snapshot));
        let (segment, _) = Segment::open(&self.dir, base, &self.config, true, true)?;
        self.segments.insert(base, segment);
        self.written_behind = 0;
        tracing::debug!(dir = %self.dir.display(), base, "rolled segment");
        self.unflushed.flush_in_background(&self.dir, sealed);
        Ok(())
    }

    /// Rolls first if a batch of `size` bytes ending at `last_offset` does
    /// not belong in the active segment.
    pub(super) fn roll_if_needed(&mut self, size: u64, base_offset: i64, last_offset: i64, now_ms: u64) -> Result<()> {
        if !self.active().should_roll(0, size, last_offset, now_ms, &self.config) {
            return Ok(());
        }
        let overflow = last_offset - self.next_offset > i64::from(i32::MAX);
        let new_base = if overflow { base_offset } else { self.next_offset };
        if self.active().size() == 0 {
            // Only a relative-offset overflow rolls an empty segment: move it.
            let (_, empty) = self.segments.pop_last().expect("active exists");
            empty.delete()?;
            let (segment, _) = Segment::open(&self.dir, new_base, &self.config, true, true)?;
            self.segments.insert(new_base, segment);
            return fsync_dir(&self.dir);
        }
        self.roll(new_base)
    }

    /// Commits the batch just placed at the active segment's tail.
    fn commit_tail_batch(&mut self, now_ms: u64) -> Result<(i64, i64, i32)> {
        let active = self.active();
        let batch = active.batch_at(active.size())?;
        let facts = BatchFacts::of(&batch);
        let (epoch, size, records) = (
            batch.partition_leader_epoch(),
            batch.size_bytes() as u64,
            batch.records_count(),
        );
        self.commit_facts(&facts, epoch, size, records, now_ms)?;
        Ok((facts.base_offset, facts.last_offset, records))
    }

    /// Everything but the bytes for a batch now written at the active
    /// segment's tail: indexes, epochs, producer state, log end.
    fn commit_facts(&mut self, facts: &BatchFacts, epoch: i32, size: u64, records: i32, now_ms: u64) -> Result<()> {
        self.append_rate.record(size, now_ms);
        let mut segment = self.segments.pop_last().expect("active exists").1;
        segment.first_append_ms.get_or_insert(now_ms);
        let result = self.apply_batch_state(&mut segment, facts, epoch, size, records);
        let written = segment.size();
        if written < self.written_behind {
            // The segment was cut (or is new) since.
            self.written_behind = 0;
        }
        if written >= self.written_behind + WRITE_BEHIND_BYTES {
            UnflushedSegments::write_behind(segment.file(), self.written_behind, written);
            self.written_behind = written;
        }
        self.next_offset = segment.next_offset;
        self.segments.insert(segment.base_offset, segment);
        result
    }

    /// Appends whole, already-validated batches at their own offsets. The
    /// input must be whole batches with increasing offsets, the first at or
    /// above the log end offset; otherwise nothing is appended. Runs of
    /// batches that belong in the same segment go in with one pwrite.
    pub fn append(&mut self, batches: &[u8], now_ms: u64) -> Result<AppendInfo> {
        self.check_no_writes_in_flight()?;
        let max_batch_bytes = self.config.max_batch_bytes;
        let mut expected = self.next_offset;
        let mut iter = BatchIter::new(batches, max_batch_bytes);
        for item in iter.by_ref() {
            let (_, batch) = item?;
            if batch.base_offset() < expected {
                return Err(LogError::OffsetBelowLogEnd {
                    base_offset: batch.base_offset(),
                    log_end_offset: expected,
                });
            }
            expected = batch.next_offset();
        }
        if iter.position() != batches.len() {
            return Err(LogError::PartialBatch {
                position: iter.position(),
            });
        }
        let mut info = AppendInfo {
            first_offset: self.next_offset,
            last_offset: self.next_offset - 1,
            ..Default::default()
        };
        let mut pos = 0;
        while pos < batches.len() {
            let rest = &batches[pos..];
            let (_, first) = BatchIter::new(rest, max_batch_bytes)
                .next()
                .expect("framed above")
                .expect("framed above");
            self.roll_if_needed(
                first.size_bytes() as u64,
                first.base_offset(),
                first.last_offset(),
                now_ms,
            )?;
            // The run: every batch that goes into the active segment as it is.
            let mut run = 0;
            for item in BatchIter::new(rest, max_batch_bytes) {
                let (_, b) = item.expect("framed above");
                let size = b.size_bytes() as u64;
                if run > 0
                    && self
                        .active()
                        .should_roll(run as u64, size, b.last_offset(), now_ms, &self.config)
                {
                    break;
                }
                run += b.size_bytes();
            }
            let config = self.config;
            let (active, plan) = self.active_with_plan(now_ms);
            active.write_tail(&rest[..run], &config, &plan)?;
            self.commit_written(&rest[..run], &mut info, now_ms)?;
            pos += run;
        }
        self.maybe_flush(now_ms)?;
        Ok(info)
    }

    /// Commits `written`, whole framed batches now in the file at the
    /// active segment's committed end, and adds them to `info`.
    pub(super) fn commit_written(&mut self, written: &[u8], info: &mut AppendInfo, now_ms: u64) -> Result<()> {
        for item in BatchIter::new(written, self.config.max_batch_bytes) {
            let (_, batch) = item.expect("framed before writing");
            let facts = BatchFacts::of(&batch);
            let records = batch.records_count();
            self.commit_facts(
                &facts,
                batch.partition_leader_epoch(),
                batch.size_bytes() as u64,
                records,
                now_ms,
            )?;
            if info.batches == 0 {
                info.first_offset = facts.base_offset;
            }
            info.last_offset = facts.last_offset;
            info.batches += 1;
            info.records += u64::try_from(records).unwrap_or(0);
            info.bytes += batch.size_bytes() as u64;
        }
        Ok(())
    }

    /// Room for `len` bytes at the active segment's tail, reserved on disk
    /// and pre-faulted, for receiving batches in place. Rolls first when
    /// `len` more bytes would overflow the segment. Nothing is committed
    /// until [`commit_tail`](Self::commit_tail).
    pub fn tail_mut(&mut self, len: usize, now_ms: u64) -> Result<&mut [u8]> {
        self.check_no_writes_in_flight()?;
        let active = self.active();
        let time_up = active
            .first_append_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= self.config.segment_ms);
        if active.size() > 0
            && (active.size() + len as u64 > self.config.segment_bytes
                || time_up
                || active.index.is_full()
                || active.time_index.is_full())
        {
            self.roll(self.next_offset)?;
        }
        let config = self.config;
        let (active, plan) = self.active_with_plan(now_ms);
        active.tail_mut(len, &config, &plan)
    }

    /// Commits the first `len` of the `received` bytes written at the tail
    /// since [`tail_mut`](Self::tail_mut), and zeroes the rest (a partial or
    /// refused batch must not look like log data to a later recovery). The
    /// caller has validated the `len` bytes (see
    /// [`crate::batch::validate_batches`]): whole batches whose offsets start
    /// at or above the log end offset and increase.
    pub fn commit_tail(&mut self, len: usize, received: usize, now_ms: u64) -> Result<AppendInfo> {
        assert!(len <= received, "cannot commit more than was received");
        let (base, start) = (self.active().base_offset, self.active().size());
        let info = self.commit_received(start, start + len as u64, now_ms);
        // A roll on offset overflow trims the receiving segment's file, which
        // discards the tail too; otherwise it is still active and mapped.
        if let Some(segment) = self.segments.get_mut(&base) {
            let committed_end = segment.size();
            segment.zero_tail(committed_end, start + received as u64);
        }
        let info = info?;
        self.maybe_flush(now_ms)?;
        Ok(info)
    }

    fn commit_received(&mut self, start: u64, end: u64, now_ms: u64) -> Result<AppendInfo> {
        let mut info = AppendInfo {
            first_offset: self.next_offset,
            last_offset: self.next_offset - 1,
            ..Default::default()
        };
        debug_assert_eq!(self.active().size(), start);
        while self.active().size() < end {
            let active = self.active();
            let batch = active.batch_at(active.size())?;
            if batch.base_offset() < self.next_offset {
                return Err(LogError::OffsetBelowLogEnd {
                    base_offset: batch.base_offset(),
                    log_end_offset: self.next_offset,
                });
            }
            if active.should_roll(
                0,
                0,
                batch.last_offset(),
                0,
                &LogConfig {
                    segment_ms: u64::MAX,
                    ..self.config
                },
            ) && active.size() > 0
            {
                // Offsets too far apart for this segment's u32 relative
                // offsets (a huge compaction gap): move the rest to a new one.
                let rest = active.bytes_range(active.size(), end).to_vec();
                let more = self.append(&rest, now_ms)?;
                info.last_offset = more.last_offset;
                info.batches += more.batches;
                info.records += more.records;
                info.bytes += more.bytes;
                return Ok(info);
            }
            let size = batch.size_bytes() as u64;
            let (base, last, records) = self.commit_tail_batch(now_ms)?;
            if info.batches == 0 {
                info.first_offset = base;
            }
            info.last_offset = last;
            info.batches += 1;
            info.records += u64::try_from(records).unwrap_or(0);
            info.bytes += size;
        }
        Ok(info)
    }

    /// Whole batches from the first one holding an offset ≥ `offset`, up to
    /// `max_bytes` (at least one batch), from a single segment.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadSlice> {
        self.read_below(offset, max_bytes, i64::MAX)
    }

    /// Like [`PartitionLog::read`], without batches that start at or above
    /// `upper_offset` (READ_COMMITTED reads stop at the last stable offset).
    pub fn read_below(&self, offset: i64, max_bytes: usize, upper_offset: i64) -> Result<ReadSlice> {
        if offset < self.log_start_offset || offset > self.next_offset {
            return Err(self.out_of_range(offset));
        }
        let start = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(self.log_start_offset, |(&b, _)| b);
        for segment in self.segments.range(start..).map(|(_, s)| s) {
            if let Some(position) = segment.find_position(offset, self.config.max_batch_bytes)? {
                let (len, end_offset) =
                    segment.whole_batches_len(position, max_bytes, upper_offset, self.config.max_batch_bytes)?;
                let first_offset = segment.batch_at(position)?.base_offset();
                return Ok(ReadSlice {
                    file: Arc::clone(segment.file()),
                    position,
                    len,
                    first_offset,
                    end_offset: end_offset.unwrap_or(first_offset),
                });
            }
        }
        let active = self.active();
        Ok(ReadSlice {
            file: Arc::clone(active.file()),
            position: active.size(),
            len: 0,
            first_offset: self.next_offset,
            end_offset: self.next_offset,
        })
    }

    fn out_of_range(&self, offset: i64) -> LogError {
        LogError::OffsetOutOfRange {
            offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.next_offset,
        }
    }

    /// The first record at or after `position` in `segment` with a
    /// timestamp ≥ `timestamp` and an offset ≥ the log start.
    fn find_record_by_timestamp(
        &self,
        segment: &Segment,
        position: u64,
        timestamp: i64,
    ) -> Result<Option<TimestampOffset>> {
        for item in BatchIter::new(&segment.bytes()[position as usize..], self.config.max_batch_bytes) {
            let (_, batch) = item?;
            if batch.max_timestamp() < timestamp || batch.last_offset() < self.log_start_offset {
                continue;
            }
            let records = decode_records(&batch, LOOKUP_DECOMPRESSED_BYTES_MAX).map_err(|e| LogError::CorruptFile {
                path: segment.log_path().to_owned(),
                reason: e.to_string(),
            })?;
            if let Some(r) = records
                .iter()
                .find(|r| r.timestamp >= timestamp && r.offset >= self.log_start_offset)
            {
                return Ok(Some(TimestampOffset {
                    timestamp: r.timestamp,
                    offset: r.offset,
                }));
            }
        }
        Ok(None)
    }

    /// ListOffsets by timestamp: the first record whose timestamp is ≥
    /// `timestamp`, or `None` when every record is older.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<TimestampOffset>> {
        for segment in self
            .segments
            .values()
            .filter(|s| s.max_timestamp >= timestamp && s.next_offset > self.log_start_offset)
        {
            let from_offset = segment.time_index.lookup(timestamp).max(self.log_start_offset);
            let (_, position) = segment.index.lookup(from_offset);
            if let Some(found) = self.find_record_by_timestamp(segment, u64::from(position), timestamp)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record with the largest timestamp (the
    /// first such), or `None` for an empty log.
    pub fn max_timestamp(&self) -> Result<Option<TimestampOffset>> {
        let best = self
            .segments
            .values()
            .filter(|s| s.next_offset > self.log_start_offset && s.max_timestamp >= 0)
            .fold(None::<&Segment>, |best, s| match best {
                Some(b) if b.max_timestamp >= s.max_timestamp => Some(b),
                _ => Some(s),
            });
        let Some(segment) = best else { return Ok(None) };
        let Some(position) = segment.find_position(segment.offset_of_max_timestamp, self.config.max_batch_bytes)?
        else {
            return Ok(None);
        };
        self.find_record_by_timestamp(segment, position, segment.max_timestamp)
    }

    /// OffsetForLeaderEpoch: (largest known epoch ≤ `epoch`, its end offset).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.next_offset)
    }

    pub fn epoch_cache(&self) -> &LeaderEpochCache {
        &self.epochs
    }

    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// The offset below which every transaction is decided (the high
    /// watermark is the log end: this log is the only replica).
    pub fn last_stable_offset(&self) -> i64 {
        self.producers.first_unstable_offset().unwrap_or(self.next_offset)
    }

    /// Aborted transactions overlapping [`from_offset`, `upper_bound`), as
    /// READ_COMMITTED Fetch responses list them. An entry sits in the
    /// segment of its ABORT marker, which may come after `upper_bound`, so
    /// the scan goes on (as Kafka's `collectAbortedTransactions`) until an
    /// entry's last stable offset shows no earlier transaction is still open.
    pub fn aborted_transactions(&self, from_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        let start = self
            .segments
            .range(..=from_offset)
            .next_back()
            .map_or(i64::MIN, |(&b, _)| b);
        let mut out = Vec::new();
        for txn in self.segments.range(start..).flat_map(|(_, s)| s.txn_index.entries()) {
            if txn.last_offset >= from_offset && txn.first_offset < upper_bound {
                out.push(*txn);
            }
            if txn.last_stable_offset >= upper_bound {
                break;
            }
        }
        out
    }

    /// Removes every batch holding an offset ≥ `offset`. A batch straddling
    /// `offset` goes whole, so the log end may end up below `offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        self.check_no_writes_in_flight()?;
        if offset >= self.next_offset {
            return Ok(());
        }
        if offset <= self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        tracing::info!(dir = %self.dir.display(), offset, log_end_offset = self.next_offset, "truncating log");
        let base = *self
            .segments
            .range(..=offset)
            .next_back()
            .expect("offset above log start")
            .0;
        let position = self.segments[&base].find_position(offset, self.config.max_batch_bytes)?;
        let doomed: Vec<i64> = self.segments.range(base + 1..).map(|(&b, _)| b).collect();
        for b in doomed {
            self.segments.remove(&b).expect("listed").delete()?;
        }
        let max_batch_bytes = self.config.max_batch_bytes;
        let segment = self.segments.get_mut(&base).expect("exists");
        if let Some(position) = position {
            segment.truncate_to_position(position, max_batch_bytes)?;
        }
        self.drop_empty_tail_segments(&mut RecoveryReport::default())?;
        let config = self.config;
        self.active_mut().make_active(&config)?;
        self.next_offset = self.active().next_offset;
        if self.next_offset < self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        self.recovery_point = self.recovery_point().min(self.next_offset);
        self.unflushed.forget_progress();
        self.lower_first_dirty_offset()?;
        self.epochs.truncate_from_end(self.next_offset);
        self.epochs.persist()?;
        ProducerState::delete_snapshots(&self.dir, |o| o > self.next_offset)?;
        self.rebuild_producer_state(self.next_offset)?;
        fsync_dir(&self.dir)?;
        self.forget_truncated_local_writes()
    }

    /// LME truncation (KIP-1279's first convergence phase, before a mirror
    /// starts fetching into this log): cuts the log at the start of the
    /// first leader epoch above `last_mirror_epoch`, the last epoch the
    /// source mirrored from us — what we wrote after it diverged. An LME of
    /// -1 (a source that never mirrored from us) means nothing here is the
    /// source's: the log is emptied and starts at 0 (the fetcher then moves
    /// up to the source's log start). Returns the new log end when it cut.
    pub fn truncate_above_epoch(&mut self, last_mirror_epoch: i32) -> Result<Option<i64>> {
        if last_mirror_epoch < 0 {
            if self.log_start_offset == 0 && self.next_offset == 0 {
                return Ok(None);
            }
            self.truncate_fully_and_start_at(0)?;
            return Ok(Some(0));
        }
        let Some(cut) = self
            .epochs
            .entries()
            .iter()
            .find(|e| e.epoch > last_mirror_epoch)
            .map(|e| e.start_offset)
        else {
            return Ok(None);
        };
        self.truncate_to(cut)?;
        Ok(Some(self.next_offset))
    }

    /// Deletes everything and starts an empty log whose start and end are `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.check_no_writes_in_flight()?;
        tracing::info!(dir = %self.dir.display(), offset, "truncating log fully");
        while let Some((_, segment)) = self.segments.pop_first() {
            segment.delete()?;
        }
        ProducerState::delete_snapshots(&self.dir, |_| true)?;
        self.producers.clear();
        self.epochs.clear();
        self.epochs.persist()?;
        self.first_dirty_offset = offset;
        super::cleaner_checkpoint::remove(&self.dir)?;
        self.start_empty_at(offset)?;
        self.forget_truncated_local_writes()
    }

    /// Local retention (Kafka's delete policy): the oldest sealed segments
    /// go while their newest record is older than `retention_ms` or while
    /// the log without them is still at least `retention_bytes`; the active
    /// segment always stays. Returns the new log start when it moved.
    pub fn apply_retention(
        &mut self,
        retention_ms: Option<u64>,
        retention_bytes: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<i64>> {
        let cutoff = retention_ms.map(|ms| i64::try_from(now_ms.saturating_sub(ms)).unwrap_or(i64::MAX));
        let mut remaining = self.size_bytes();
        let active_base = *self.segments.keys().next_back().expect("a log has an active segment");
        let mut new_start = None;
        for (&base, segment) in &self.segments {
            if base == active_base {
                break;
            }
            let too_old = cutoff.is_some_and(|c| segment.max_timestamp >= 0 && segment.max_timestamp < c);
            let too_big = retention_bytes.is_some_and(|max| remaining.saturating_sub(segment.size()) >= max);
            if !(too_old || too_big) {
                break;
            }
            remaining -= segment.size();
            new_start = Some(segment.next_offset);
        }
        match new_start {
            Some(start) if start > self.log_start_offset => {
                tracing::info!(dir = %self.dir.display(), log_start_offset = start, "retention: old segments deleted");
                self.advance_log_start(start)?;
                Ok(Some(start))
            }
            _ => Ok(None),
        }
    }

    /// Moves the log start forward (retention, or the source's log start):
    /// offsets below it are no longer served, and whole segments below it
    /// are deleted. Past the log end, the log restarts empty there.
    pub fn advance_log_start(&mut self, offset: i64) -> Result<()> {
        if offset <= self.log_start_offset {
            return Ok(());
        }
        if offset > self.next_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        self.log_start_offset = offset;
        self.first_dirty_offset = self.first_dirty_offset.max(offset);
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for pair in bases.windows(2) {
            if pair[1] > offset {
                break;
            }
            self.segments.remove(&pair[0]).expect("listed").delete()?;
        }
        self.epochs.truncate_from_start(offset);
        self.epochs.persist()?;
        let first_base = *self.segments.keys().next().expect("active remains");
        ProducerState::delete_snapshots(&self.dir, |o| o < first_base)
    }

    /// Writes everything appended so far to disk and advances the recovery point.
    pub fn flush(&mut self, now_ms: u64) -> Result<()> {
        self.unflushed.sync_now(&self.dir)?;
        self.active_mut().flush()?;
        self.epochs.persist()?;
        self.recovery_point = self.next_offset;
        self.unflushed_records = 0;
        self.last_flush_ms = now_ms;
        Ok(())
    }

    /// Flushes if `flush.messages` or `flush.ms` says so. Returns whether it did.
    pub fn maybe_flush(&mut self, now_ms: u64) -> Result<bool> {
        let due = self.unflushed_records >= self.config.flush_messages
            || (self.unflushed_records > 0 && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms);
        if due {
            self.flush(now_ms)?;
        }
        Ok(due)
    }

    /// Clean close: flush, trim the active segment and its indexes, and
    /// snapshot producer state at the log end, so the next open skips recovery.
    pub fn close(mut self, now_ms: u64) -> Result<()> {
        self.check_no_writes_in_flight()?;
        self.flush(now_ms)?;
        self.active_mut().seal()?;
        self.producers.write_snapshot(&self.dir, self.next_offset)?;
        fsync_dir(&self.dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn topic_id(&self) -> Option<[u8; 16]> {
        self.topic_id
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// The offset after the last batch: where the next batch may start.
    pub fn log_end_offset(&self) -> i64 {
        self.next_offset
    }
    /// Everything below is on disk: what flushes, recovery and completed
    /// background flushes of rolled segments established.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.max(self.unflushed.flushed_to())
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    /// The headers of the last batches ending at or below `end_offset`: at
    /// most `batches_max` of them and `bytes_max` bytes (at least one batch
    /// when there is one), in offset order. Reads headers only, from the
    /// segment holding `end_offset` down (divergence checks).
    pub fn tail_batches(&self, end_offset: i64, batches_max: usize, bytes_max: usize) -> Result<Vec<BatchSummary>> {
        let mut tail = std::collections::VecDeque::with_capacity(batches_max);
        for segment in self.segments.range(..end_offset).rev().map(|(_, s)| s) {
            let mut in_segment = Vec::new();
            for item in BatchIter::new(segment.bytes(), self.config.max_batch_bytes) {
                let summary = BatchSummary::of(&item?.1);
                if summary.end_offset() > end_offset {
                    break;
                }
                in_segment.push(summary);
            }
            let mut bytes: usize = tail.iter().map(|b: &BatchSummary| b.size_bytes).sum();
            for summary in in_segment.into_iter().rev() {
                if tail.len() == batches_max || (!tail.is_empty() && bytes + summary.size_bytes > bytes_max) {
                    return Ok(tail.into());
                }
                bytes += summary.size_bytes;
                tail.push_front(summary);
            }
        }
        Ok(tail.into())
    }

    /// The headers of the batches from the one holding `offset` on, within
    /// one segment: at most `batches_max` and `bytes_max` bytes (at least one
    /// batch when there is one), each with the CRC of its bytes as stored
    /// (so damage on our disk shows). Empty at the log end (`mirror verify`).
    pub fn batches_from(&self, offset: i64, batches_max: usize, bytes_max: usize) -> Result<Vec<BatchSummary>> {
        let offset = offset.max(self.log_start_offset);
        let mut found = Vec::new();
        let mut bytes = 0;
        let first = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&base, _)| base);
        for segment in self.segments.range(first..).map(|(_, s)| s) {
            let Some(position) = segment.find_position(offset, self.config.max_batch_bytes)? else {
                continue;
            };
            for item in BatchIter::new(&segment.bytes()[position as usize..], self.config.max_batch_bytes) {
                let summary = BatchSummary::of_contents(&item?.1);
                if found.len() == batches_max || (!found.is_empty() && bytes + summary.size_bytes > bytes_max) {
                    break;
                }
                bytes += summary.size_bytes;
                found.push(summary);
            }
            break;
        }
        Ok(found)
    }

    /// Every committed batch in offset order, read from the mapped segments
    /// (off the hot path: verification, tools and tests).
    pub fn for_each_batch(&self, mut f: impl FnMut(RecordBatch<&[u8]>)) -> Result<()> {
        for segment in self.segments.values() {
            for item in BatchIter::new(segment.bytes(), self.config.max_batch_bytes) {
                f(item?.1);
            }
        }
        Ok(())
    }
}

fn remove_strays(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(LogError::io("list", dir))? {
        let entry = entry.map_err(LogError::io("list", dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if STRAY_SUFFIXES.iter().any(|s| name.ends_with(s)) {
            tracing::info!(file = %entry.path().display(), "removing leftover of an interrupted operation");
            remove_if_exists(&entry.path())?;
        }
    }
    Ok(())
}
