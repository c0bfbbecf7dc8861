//! One log segment: `<base>.log` and its `.index`, `.timeindex`, `.txnindex`.
//!
//! The active segment's file is mapped writable at a fixed length of
//! `segment.bytes + max batch`; disk space is reserved ahead of the write
//! position with `fallocate` (so a full disk is an `ENOSPC` from a syscall,
//! never a SIGBUS from a store into the mapping) and page tables are
//! populated ahead with `MADV_POPULATE_WRITE` (so appends do not stall on
//! page faults), both by a step that follows the partition's rate, from
//! its shard's budget (`reserve.rs`). The active file's length is always
//! what is reserved: every byte below it has its blocks. Sealed segments
//! are trimmed to their data and mapped read-only. Only `size` bytes of
//! whole, committed batches are ever read.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::batch::{BATCH_HEADER_BYTES, BatchIter, RecordBatch};

use super::background_flush::SealedFiles;
use super::config::LogConfig;
use super::error::{LogError, Result};
use super::files::{
    INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, offset_file, remove_if_exists, reserve_blocks,
};
use super::index::{OffsetIndex, TimeIndex};
use super::reserve::{Reservation, ReserveBudget, ReservePlan};
use super::txn_index::TxnIndex;

const PAGE_BYTES: u64 = 4096;

enum SegmentData {
    Active {
        map: MmapMut,
        allocated: u64,
        populated: u64,
    },
    Sealed {
        map: Option<Mmap>,
    },
}

pub(crate) struct Segment {
    pub(crate) base_offset: i64,
    log_path: PathBuf,
    file: Arc<File>,
    data: SegmentData,
    /// Bytes of whole committed batches.
    size: u64,
    flushed_size: u64,
    pub(crate) index: OffsetIndex,
    pub(crate) time_index: TimeIndex,
    pub(crate) txn_index: TxnIndex,
    bytes_since_index: u64,
    /// Largest batch max-timestamp in the segment and the batch's last offset.
    pub(crate) max_timestamp: i64,
    pub(crate) offset_of_max_timestamp: i64,
    /// Offset after the segment's last batch (its base offset when empty).
    pub(crate) next_offset: i64,
    /// Wall-clock time of the first append since this process opened it.
    pub(crate) first_append_ms: Option<u64>,
    /// Of the active segment's reserved room, what lies ahead of the end
    /// its writes needed, granted from the shard's budget.
    ahead: Option<Reservation>,
}

/// The most index entries (in each of `.index` and `.timeindex`) that
/// committing `bytes` of batches can add: one per batch, and one per
/// `index.interval.bytes` of them (see [`Segment::on_batch_committed`]).
fn index_entries_max(bytes: u64, config: &LogConfig) -> usize {
    let bytes_per_entry_min = (config.index_interval_bytes + 1).max(BATCH_HEADER_BYTES as u64);
    usize::try_from(bytes / bytes_per_entry_min + 1).unwrap_or(usize::MAX)
}

fn page_round_up(n: u64) -> u64 {
    n.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

impl Segment {
    fn map_len(config: &LogConfig, at_least: u64) -> u64 {
        page_round_up((config.segment_bytes + u64::from(config.max_batch_bytes)).max(at_least))
    }

    /// Opens (or creates, when missing) the segment at `base_offset`. When
    /// `writable` it becomes the active segment; `rebuild_indexes` starts its
    /// indexes empty for recovery to refill. Returns whether the index files
    /// looked consistent (whole entries).
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        config: &LogConfig,
        writable: bool,
        rebuild_indexes: bool,
    ) -> Result<(Self, bool)> {
        let log_path = offset_file(dir, base_offset, LOG_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&log_path)
            .map_err(LogError::io("open", &log_path))?;
        let file_len = file.metadata().map_err(LogError::io("stat", &log_path))?.len();
        let index_mode = writable || rebuild_indexes;
        let (index, index_ok) = OffsetIndex::open(
            &offset_file(dir, base_offset, INDEX_SUFFIX),
            base_offset,
            config.segment_index_bytes,
            index_mode,
            rebuild_indexes,
        )?;
        let (time_index, time_ok) = TimeIndex::open(
            &offset_file(dir, base_offset, TIME_INDEX_SUFFIX),
            base_offset,
            config.segment_index_bytes,
            index_mode,
            rebuild_indexes,
        )?;
        let txn_index = TxnIndex::open(offset_file(dir, base_offset, TXN_INDEX_SUFFIX))?;
        let mut segment = Self {
            base_offset,
            log_path,
            file: Arc::new(file),
            data: SegmentData::Sealed { map: None },
            size: file_len,
            flushed_size: file_len,
            index,
            time_index,
            txn_index,
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            next_offset: base_offset,
            first_append_ms: None,
            ahead: None,
        };
        if let Some((ts, offset)) = segment.time_index.last_entry() {
            segment.max_timestamp = ts;
            segment.offset_of_max_timestamp = offset;
        }
        if writable {
            segment.map_active(config, file_len)?;
        } else {
            segment.map_sealed(file_len)?;
        }
        Ok((segment, index_ok && time_ok))
    }

    fn map_active(&mut self, config: &LogConfig, allocated: u64) -> Result<()> {
        let len = Self::map_len(config, allocated);
        self.data = SegmentData::Sealed { map: None };
        // SAFETY: the file belongs to this segment; it is only written through
        // this mapping, and never shrunk below `allocated` while mapped.
        let map = unsafe { MmapOptions::new().len(len as usize).map_mut(&*self.file) }
            .map_err(LogError::io("mmap", &self.log_path))?;
        let populated = allocated - allocated % PAGE_BYTES;
        self.data = SegmentData::Active {
            map,
            allocated,
            populated,
        };
        Ok(())
    }

    fn map_sealed(&mut self, len: u64) -> Result<()> {
        self.data = SegmentData::Sealed { map: None };
        self.ahead = None;
        if len > 0 {
            // SAFETY: sealed segments are not written; truncation remaps first.
            let map = unsafe { MmapOptions::new().len(len as usize).map(&*self.file) }
                .map_err(LogError::io("mmap", &self.log_path))?;
            self.data = SegmentData::Sealed { map: Some(map) };
        }
        Ok(())
    }

    pub(crate) fn is_active(&self) -> bool {
        matches!(self.data, SegmentData::Active { .. })
    }

    /// Every byte of the file as opened (recovery scans beyond `size`).
    pub(crate) fn file_bytes(&self) -> &[u8] {
        match &self.data {
            SegmentData::Active { map, allocated, .. } => &map[..*allocated as usize],
            SegmentData::Sealed { map } => map.as_deref().unwrap_or_default(),
        }
    }

    /// The committed bytes: whole batches only.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.file_bytes()[..self.size as usize]
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of the file in [from, to), committed or not (the received tail).
    pub(crate) fn bytes_range(&self, from: u64, to: u64) -> &[u8] {
        &self.file_bytes()[from as usize..to as usize]
    }

    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Makes [0, end) of the active segment writable: the mapping covers it
    /// and disk blocks are reserved (fallocate). Past `end`, page-rounded,
    /// up to the plan's step more is reserved, as far as the budget grants
    /// it; a full disk that leaves no room for the step still leaves the
    /// room `end` needs. With `populate`, page tables are also faulted in
    /// ahead, never past the reserved room, for stores through the mapping.
    fn reserve_to(&mut self, end: u64, config: &LogConfig, populate_pages: bool, plan: &ReservePlan) -> Result<()> {
        let needs_remap = matches!(&self.data, SegmentData::Active { map, .. } if end > map.len() as u64);
        if needs_remap {
            let allocated = match self.data {
                SegmentData::Active { allocated, .. } => allocated,
                SegmentData::Sealed { .. } => unreachable!("checked active above"),
            };
            let bigger = LogConfig {
                segment_bytes: end,
                ..*config
            };
            self.map_active(&bigger, allocated)?;
        }
        let SegmentData::Active {
            map,
            allocated,
            populated,
        } = &mut self.data
        else {
            panic!("writing to sealed segment {}", self.log_path.display());
        };
        let map_len = map.len() as u64;
        // Index room first: a batch is never committed without the index
        // entries it may add, so a full disk stops the write before it.
        let entries_max = index_entries_max(end.saturating_sub(self.size), config);
        self.index.reserve_entries(entries_max)?;
        self.time_index.reserve_entries(entries_max)?;
        // The mapping's length is whole pages, so `needed` covers `end`.
        let needed = page_round_up(end).min(map_len);
        if end > *allocated {
            // What was held ahead is used up: the room ahead is granted afresh.
            self.ahead = None;
            let mut ahead = Reservation::take(plan.budget, plan.step_bytes.min(map_len - needed));
            if let Err(e) = reserve(&self.file, &self.log_path, *allocated, needed + ahead.bytes()) {
                if ahead.bytes() == 0 || !e.is_disk_full() {
                    return Err(e);
                }
                ahead.shrink_to(0);
                reserve(&self.file, &self.log_path, *allocated, needed)?;
            }
            *allocated = needed + ahead.bytes();
            self.ahead = Some(ahead);
        } else if let Some(ahead) = &mut self.ahead {
            // The writes moved into the room held ahead: that much goes back.
            ahead.shrink_to(allocated.saturating_sub(needed));
        }
        if populate_pages && config.prefault_bytes > 0 && end > *populated {
            let step = config.prefault_bytes.min(plan.step_bytes);
            let target = page_round_up(end.max(*populated + step)).min(*allocated);
            populate(map, *populated, target);
            *populated = target - target % PAGE_BYTES;
        }
        Ok(())
    }

    /// Reserves and pre-faults room for `len` more bytes and returns them,
    /// for receiving straight into the mapping.
    pub(crate) fn tail_mut(&mut self, len: usize, config: &LogConfig, plan: &ReservePlan) -> Result<&mut [u8]> {
        let end = self.size + len as u64;
        self.reserve_to(end, config, true, plan)?;
        let SegmentData::Active { map, .. } = &mut self.data else {
            unreachable!("reserved above")
        };
        Ok(&mut map[self.size as usize..end as usize])
    }

    /// Writes `bytes` at the end of the committed data with pwrite. The page
    /// cache takes them without the zero-fill and per-page write faults
    /// that a first store through the mapping costs (perf/RESULTS.md: more
    /// than half of the agent's CPU); the space is still reserved first, so
    /// a full disk is an error here, not a SIGBUS later.
    pub(crate) fn write_tail(&mut self, bytes: &[u8], config: &LogConfig, plan: &ReservePlan) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.reserve_to(self.size + bytes.len() as u64, config, false, plan)?;
        self.file
            .write_all_at(bytes, self.size)
            .map_err(LogError::io("write", &self.log_path))
    }

    /// Reserves disk (and index room) for `len` bytes at `position`, at
    /// or after the committed end, for a write that someone else carries out.
    pub(crate) fn reserve_write(
        &mut self,
        position: u64,
        len: u64,
        config: &LogConfig,
        plan: &ReservePlan,
    ) -> Result<()> {
        debug_assert!(position >= self.size);
        self.reserve_to(position + len, config, false, plan)
    }

    /// The active file's reserved length (0 for a sealed segment).
    pub(crate) fn reserved_bytes(&self) -> u64 {
        match self.data {
            SegmentData::Active { allocated, .. } => allocated,
            SegmentData::Sealed { .. } => 0,
        }
    }

    /// What the segment holds ahead, granted from its budget.
    pub(crate) fn reserved_ahead_bytes(&self) -> u64 {
        self.ahead.as_ref().map_or(0, Reservation::bytes)
    }

    /// Gives the room reserved past `keep_end` (page-rounded up; at or past
    /// the committed data and every write in flight) back to the file
    /// system and the budget. Returns the bytes released.
    ///
    /// The file is cut there (ftruncate), rather than a hole punched
    /// (PUNCH_HOLE | KEEP_SIZE), because the active file's length is what
    /// is reserved: [`reserve_to`](Self::reserve_to) extends from it, and a
    /// store through the mapping below it must never meet a page without
    /// blocks (a SIGBUS on a full disk). A hole would break that; a shorter
    /// file keeps it, and recovery, which reads the file to its length,
    /// finds the data and zeros after it, as after any reservation.
    pub(crate) fn release_ahead(&mut self, keep_end: u64) -> Result<u64> {
        debug_assert!(keep_end >= self.size);
        let SegmentData::Active {
            allocated, populated, ..
        } = &mut self.data
        else {
            return Ok(0);
        };
        let keep = page_round_up(keep_end.max(self.size));
        if keep >= *allocated {
            return Ok(0);
        }
        self.file
            .set_len(keep)
            .map_err(LogError::io("release reserved room", &self.log_path))?;
        let released = *allocated - keep;
        *allocated = keep;
        *populated = (*populated).min(keep);
        self.ahead = None;
        Ok(released)
    }

    /// Holds what the active segment has reserved past `keep_end` against
    /// `budget` instead (a log attached to its shard's budget after it was
    /// opened, holding room from before a crash): as much as the budget
    /// grants, the rest released. Returns the bytes released.
    pub(crate) fn move_reservation_to(&mut self, budget: &Arc<ReserveBudget>, keep_end: u64) -> Result<u64> {
        let reserved = self.reserved_bytes();
        self.ahead = None;
        let keep = page_round_up(keep_end.max(self.size));
        let ahead = Reservation::take(budget, reserved.saturating_sub(keep));
        let released = if keep + ahead.bytes() < reserved {
            self.release_ahead(keep + ahead.bytes())?
        } else {
            0
        };
        if reserved > 0 {
            self.ahead = Some(ahead);
        }
        Ok(released)
    }

    /// Zeroes [from, to) of the active segment's reserved space (bytes that
    /// were received or truncated but are not part of the log).
    pub(crate) fn zero_tail(&mut self, from: u64, to: u64) {
        if let SegmentData::Active { map, allocated, .. } = &mut self.data {
            let to = to.min(*allocated);
            if from < to {
                map[from as usize..to as usize].fill(0);
            }
        }
    }

    /// Records a batch written at `position` (== size) into the index files.
    /// Follows Kafka's `LogSegment.append`: an index entry (batch last
    /// offset, batch position) once more than `index.interval.bytes` have
    /// gone by, and a time-index entry for the max timestamp so far.
    pub(crate) fn on_batch_committed(
        &mut self,
        batch_bytes: u64,
        last_offset: i64,
        max_timestamp: i64,
        config: &LogConfig,
    ) -> Result<()> {
        debug_assert!(last_offset - self.base_offset <= i64::from(i32::MAX));
        let position = self.size;
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        if self.bytes_since_index > config.index_interval_bytes {
            self.index.append(last_offset, position as u32)?;
            self.time_index
                .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += batch_bytes;
        self.size += batch_bytes;
        self.next_offset = last_offset + 1;
        Ok(())
    }

    /// Whether a batch of `batch_bytes` ending at `last_offset` must go to a
    /// new segment, when `pending_bytes` more are already queued before it.
    pub(crate) fn should_roll(
        &self,
        pending_bytes: u64,
        batch_bytes: u64,
        last_offset: i64,
        now_ms: u64,
        config: &LogConfig,
    ) -> bool {
        let size = self.size + pending_bytes;
        if size == 0 {
            return last_offset - self.base_offset > i64::from(i32::MAX);
        }
        // Index entries the queued bytes may still add, at one per interval.
        let entries_needed = ((pending_bytes + batch_bytes) / config.index_interval_bytes.max(1) + 1) as usize;
        size + batch_bytes > config.segment_bytes
            || self
                .first_append_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= config.segment_ms)
            || self.index.remaining() <= entries_needed
            || self.time_index.remaining() <= entries_needed
            || last_offset - self.base_offset > i64::from(i32::MAX)
    }

    /// Walks the committed tail from the last index entry to the file end.
    /// Returns false unless it lands exactly on the end with sane framing;
    /// on success sets `next_offset` and the max timestamp.
    pub(crate) fn check_tail(&mut self, max_batch_bytes: u32) -> bool {
        let start = self.index.last_entry().map_or(0, |(_, pos)| pos as usize);
        let bytes = self.bytes();
        if start > bytes.len() {
            return false;
        }
        let mut iter = BatchIter::new(&bytes[start..], max_batch_bytes);
        let mut tail = None;
        let mut max_ts = (self.max_timestamp, self.offset_of_max_timestamp);
        for item in iter.by_ref() {
            let Ok((_, batch)) = item else { return false };
            if batch.max_timestamp() > max_ts.0 {
                max_ts = (batch.max_timestamp(), batch.last_offset());
            }
            tail = Some(batch.next_offset());
        }
        if iter.position() != bytes.len() - start {
            return false;
        }
        if let Some(next) = tail {
            self.next_offset = next;
        }
        (self.max_timestamp, self.offset_of_max_timestamp) = max_ts;
        true
    }

    /// Position of the first batch whose last offset is ≥ `offset`.
    pub(crate) fn find_position(&self, offset: i64, max_batch_bytes: u32) -> Result<Option<u64>> {
        let (_, start) = self.index.lookup(offset);
        let bytes = self.bytes();
        let start = (start as usize).min(bytes.len());
        for item in BatchIter::new(&bytes[start..], max_batch_bytes) {
            let (pos, batch) = item?;
            if batch.last_offset() >= offset {
                return Ok(Some((start + pos) as u64));
            }
        }
        Ok(None)
    }

    /// The batches from `position`, as many whole ones as fit `max_bytes`
    /// (at least one, as Kafka's "min one message"). Returns the length.
    pub(crate) fn whole_batches_len(
        &self,
        position: u64,
        max_bytes: usize,
        upper_offset: i64,
        max_batch_bytes: u32,
    ) -> Result<(usize, Option<i64>)> {
        let mut len = 0;
        let mut end_offset = None;
        for item in BatchIter::new(&self.bytes()[position as usize..], max_batch_bytes) {
            let (_, batch) = item?;
            if (len > 0 && len + batch.size_bytes() > max_bytes) || batch.base_offset() >= upper_offset {
                break;
            }
            len += batch.size_bytes();
            end_offset = Some(batch.last_offset() + 1);
        }
        Ok((len, end_offset))
    }

    /// The batch at `position`, which may lie in the received but not yet
    /// committed tail.
    pub(crate) fn batch_at(&self, position: u64) -> Result<RecordBatch<&[u8]>> {
        let bytes = &self.file_bytes()[position as usize..];
        match BatchIter::new(bytes, u32::MAX >> 1).next() {
            Some(item) => Ok(item?.1),
            None => Err(LogError::PartialBatch {
                position: position as usize,
            }),
        }
    }

    /// Forgets everything after byte `position`: the file (if sealed),
    /// indexes, transaction index entries and timestamps are cut back.
    pub(crate) fn truncate_to_position(&mut self, position: u64, max_batch_bytes: u32) -> Result<()> {
        assert!(position <= self.file_bytes().len() as u64);
        // Zero what is cut from the active segment: left in place, a crash
        // would let recovery find those batches again.
        self.zero_tail(position, self.size);
        self.size = position;
        self.flushed_size = self.flushed_size.min(position);
        self.index.truncate_to_position(position as u32);
        // Recompute what depends on the last kept batch.
        let mut next_offset = self.base_offset;
        let mut max_ts = (-1, -1);
        let mut last_start = 0;
        for item in BatchIter::new(self.bytes(), max_batch_bytes) {
            let (pos, batch) = item?;
            last_start = pos;
            next_offset = batch.next_offset();
            if batch.max_timestamp() > max_ts.0 {
                max_ts = (batch.max_timestamp(), batch.last_offset());
            }
        }
        self.next_offset = next_offset;
        (self.max_timestamp, self.offset_of_max_timestamp) = max_ts;
        self.time_index.truncate_to_offset(self.next_offset);
        self.txn_index.truncate_to(self.next_offset)?;
        self.bytes_since_index =
            (position - self.index.last_entry().map_or(0, |(_, p)| u64::from(p))).min(position - last_start as u64);
        if !self.is_active() {
            self.file
                .set_len(position)
                .map_err(LogError::io("truncate", &self.log_path))?;
            self.map_sealed(position)?;
        }
        Ok(())
    }

    /// Empties the indexes so recovery can rebuild them batch by batch.
    pub(crate) fn reset_for_rebuild(&mut self) -> Result<()> {
        self.index.clear();
        self.time_index.clear();
        self.txn_index.clear()?;
        self.size = 0;
        self.flushed_size = 0;
        self.bytes_since_index = 0;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.next_offset = self.base_offset;
        Ok(())
    }

    /// Writes committed data and indexes to disk.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if let SegmentData::Active { map, .. } = &self.data
            && self.size > self.flushed_size
        {
            let from = self.flushed_size - self.flushed_size % PAGE_BYTES;
            map.flush_range(from as usize, (self.size - from) as usize)
                .map_err(LogError::io("msync", &self.log_path))?;
        }
        self.index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()?;
        self.flushed_size = self.size;
        Ok(())
    }

    /// Makes this segment read-only: final time-index entry, flush, trim the
    /// file and index files to their contents, and sync the trim.
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
        self.flush()?;
        if self.seal_unflushed()? {
            self.file.sync_all().map_err(LogError::io("fsync", &self.log_path))?;
        }
        Ok(())
    }

    /// Makes this segment read-only without waiting for its bytes to reach
    /// the disk: final time-index entry, trim the file and index files to
    /// their contents. What was written stays dirty in the page cache until
    /// [`sealed_files`](Self::sealed_files) are synced. Returns whether the
    /// file was trimmed.
    pub(crate) fn seal_unflushed(&mut self) -> Result<bool> {
        self.time_index
            .maybe_append(self.max_timestamp, self.offset_of_max_timestamp)?;
        if let SegmentData::Active { .. } = self.data {
            self.data = SegmentData::Sealed { map: None };
        }
        let file_len = self
            .file
            .metadata()
            .map_err(LogError::io("stat", &self.log_path))?
            .len();
        let trim = file_len != self.size;
        if trim {
            self.file
                .set_len(self.size)
                .map_err(LogError::io("trim", &self.log_path))?;
        }
        self.map_sealed(self.size)?;
        self.index.seal()?;
        self.time_index.seal()?;
        Ok(trim)
    }

    /// What a background flush of this (sealed) segment must sync, with the
    /// producer snapshot its roll wrote.
    pub(crate) fn sealed_files(&self, snapshot: Option<PathBuf>) -> SealedFiles {
        SealedFiles {
            log: Arc::clone(&self.file),
            log_path: self.log_path.clone(),
            indexes: [
                self.index.path().to_owned(),
                self.time_index.path().to_owned(),
                self.txn_index.path().to_owned(),
            ],
            snapshot,
            end_offset: self.next_offset,
        }
    }

    /// Turns a sealed segment (the last one left after truncation or
    /// recovery) back into the active one.
    pub(crate) fn make_active(&mut self, config: &LogConfig) -> Result<()> {
        if self.is_active() {
            return Ok(());
        }
        self.index.make_active()?;
        self.time_index.make_active()?;
        let file_len = self
            .file
            .metadata()
            .map_err(LogError::io("stat", &self.log_path))?
            .len();
        self.map_active(config, file_len)?;
        let bytes_after_index = self.size - self.index.last_entry().map_or(0, |(_, p)| u64::from(p));
        self.bytes_since_index = bytes_after_index;
        Ok(())
    }

    pub(crate) fn delete(self) -> Result<()> {
        let Self {
            log_path,
            index,
            time_index,
            txn_index,
            data,
            file,
            ..
        } = self;
        drop(data);
        drop(file);
        index.delete()?;
        time_index.delete()?;
        txn_index.delete()?;
        remove_if_exists(&log_path)
    }
}

/// Reserves disk blocks for [from, to) of the segment file.
fn reserve(file: &File, path: &Path, from: u64, to: u64) -> Result<()> {
    if reserve_blocks(file, path, from, to)? {
        return Ok(());
    }
    // Filesystems without fallocate: extend sparsely. A full disk then
    // surfaces as SIGBUS on write, which is why fallocate is preferred.
    tracing::warn!(path = %path.display(), "fallocate unsupported; extending the segment sparsely");
    file.set_len(to).map_err(LogError::io("extend", path))
}

/// Faults in [from, to) of the mapping as writable in one call.
fn populate(map: &MmapMut, from: u64, to: u64) {
    if to <= from {
        return;
    }
    // SAFETY: the range lies inside the mapping; madvise does not change
    // the mapping's contents.
    let rc = unsafe {
        libc::madvise(
            map.as_ptr().add(from as usize) as *mut libc::c_void,
            (to - from) as usize,
            libc::MADV_POPULATE_WRITE,
        )
    };
    if rc != 0 {
        // Kernels before 5.14 lack it; pages then fault in on first write.
        tracing::debug!(error = %std::io::Error::last_os_error(), "MADV_POPULATE_WRITE failed");
    }
}
