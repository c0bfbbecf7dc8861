//! Appends whose bytes someone else copies into the segment file (the
//! shard's io_uring ring): the log reserves the room and says where to
//! write ([`PartitionLog::begin_write`]); once a write and every write
//! before it is in the file, [`PartitionLog::complete_oldest_write`] commits
//! its batches — indexes, epochs, producer state, and the log end that
//! readers, the high watermark and acknowledgements see.
//!
//! So readers never see a batch whose bytes are not in the file, and a crash
//! loses at most the writes in flight: their room was reserved (zeros), so
//! recovery keeps the longest valid prefix. A write that fails fails the
//! log: the writes after it would sit behind a hole, so none is committed.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

use crate::batch::{BatchIter, NO_PARTITION_LEADER_EPOCH};

use super::error::{LogError, Result};
use super::partition_log::{AppendInfo, PartitionLog};

/// Writes one log may have in flight (each up to a fetch's partition bytes).
pub const WRITES_IN_FLIGHT_MAX: usize = 8;

/// Where to write the offered batches: all of them, at `position` of `file`.
#[derive(Debug, Clone)]
pub struct WriteTarget {
    pub file: Arc<File>,
    pub position: u64,
    /// The log's sequence number for this write (completions name it).
    pub seq: u64,
}

/// What [`PartitionLog::begin_write`] decided.
#[derive(Debug)]
pub enum BeginWrite {
    /// Write the batches there, then report with `complete_oldest_write`.
    Ready(WriteTarget),
    /// [`WRITES_IN_FLIGHT_MAX`] writes are in flight: complete one first.
    Full,
    /// The batches need a new segment: complete every write in flight, then
    /// append them synchronously ([`PartitionLog::append`] rolls).
    NeedsRoll,
}

struct InFlightWrite {
    seq: u64,
    len: u64,
    /// The offset after the write's last batch.
    end_offset: i64,
    /// The last partition leader epoch among its batches, or before them.
    last_epoch: Option<i32>,
}

/// The writes a log has handed out, oldest first.
#[derive(Default)]
pub(super) struct InFlightWrites {
    writes: VecDeque<InFlightWrite>,
    bytes: u64,
    next_seq: u64,
    failed: Option<String>,
}

impl PartitionLog {
    /// Plans a write of `batches` — whole, validated batches whose offsets
    /// start at or above [`append_end_offset`](Self::append_end_offset) and
    /// increase — right after everything in flight, reserving disk and index
    /// room first (a full disk is an error here, before anything is written).
    pub fn begin_write(&mut self, batches: &[u8], now_ms: u64) -> Result<BeginWrite> {
        if let Some(reason) = &self.writes.failed {
            return Err(LogError::WriteFailed { reason: reason.clone() });
        }
        if self.writes.writes.len() >= WRITES_IN_FLIGHT_MAX {
            return Ok(BeginWrite::Full);
        }
        let max_batch_bytes = self.config.max_batch_bytes;
        let pending = self.writes.bytes;
        let mut end_offset = self.append_end_offset();
        let mut last_epoch = self.append_last_epoch();
        let mut len = 0u64;
        let mut iter = BatchIter::new(batches, max_batch_bytes);
        for item in iter.by_ref() {
            let (_, batch) = item?;
            if batch.base_offset() < end_offset {
                return Err(LogError::OffsetBelowLogEnd {
                    base_offset: batch.base_offset(),
                    log_end_offset: end_offset,
                });
            }
            let size = batch.size_bytes() as u64;
            if len == 0 && pending == 0 {
                // Nothing in flight: the first batch may roll, as in `append`.
                self.roll_if_needed(size, batch.base_offset(), batch.last_offset(), now_ms)?;
            } else if self
                .active()
                .should_roll(pending + len, size, batch.last_offset(), now_ms, &self.config)
            {
                return Ok(BeginWrite::NeedsRoll);
            }
            len += size;
            end_offset = batch.next_offset();
            if batch.partition_leader_epoch() != NO_PARTITION_LEADER_EPOCH {
                last_epoch = Some(batch.partition_leader_epoch());
            }
        }
        if iter.position() != batches.len() || len == 0 {
            return Err(LogError::PartialBatch {
                position: iter.position(),
            });
        }
        let config = self.config;
        let (active, plan) = self.active_with_plan(now_ms);
        let position = active.size() + pending;
        active.reserve_write(position, len, &config, &plan)?;
        let file = Arc::clone(active.file());
        let seq = self.writes.next_seq;
        self.writes.next_seq += 1;
        if self.writes.writes.capacity() == 0 {
            self.writes.writes.reserve_exact(WRITES_IN_FLIGHT_MAX);
        }
        self.writes.writes.push_back(InFlightWrite {
            seq,
            len,
            end_offset,
            last_epoch,
        });
        self.writes.bytes += len;
        Ok(BeginWrite::Ready(WriteTarget { file, position, seq }))
    }

    /// Reports how the oldest write in flight ended (`written`: the bytes
    /// the write call reported) and commits its batches, `bytes` — the very
    /// bytes it wrote — when it wrote them all. The caller reports writes in
    /// sequence order, whatever order the kernel finished them in.
    pub fn complete_oldest_write(
        &mut self,
        seq: u64,
        written: std::io::Result<usize>,
        bytes: &[u8],
        now_ms: u64,
    ) -> Result<AppendInfo> {
        let write = self.writes.writes.pop_front().expect("a write in flight");
        assert_eq!(write.seq, seq, "writes complete in sequence order");
        assert_eq!(write.len, bytes.len() as u64, "the bytes the write carried");
        self.writes.bytes -= write.len;
        let failure = match written {
            Ok(n) if n == bytes.len() => None,
            Ok(n) => Some(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("wrote {n} of {} bytes", bytes.len()),
            )),
            Err(e) => Some(e),
        };
        if let Some(source) = failure {
            let error = LogError::Io {
                op: "write",
                path: self.active().log_path().to_owned(),
                source,
            };
            tracing::error!(dir = %self.dir.display(), %error, abandoned_writes = self.writes.writes.len(),
                "segment write failed; the log takes no more appends");
            self.writes.failed = Some(error.to_string());
            self.writes.writes.clear();
            self.writes.bytes = 0;
            return Err(error);
        }
        let mut info = AppendInfo {
            first_offset: self.next_offset,
            last_offset: self.next_offset - 1,
            ..Default::default()
        };
        if let Err(error) = self.commit_written(bytes, &mut info, now_ms) {
            // Half-committed: nothing after it may go in.
            self.writes.failed = Some(error.to_string());
            self.writes.writes.clear();
            self.writes.bytes = 0;
            return Err(error);
        }
        debug_assert_eq!(self.next_offset, write.end_offset);
        self.maybe_flush(now_ms)?;
        Ok(info)
    }

    /// Where the next batch offered to [`begin_write`](Self::begin_write)
    /// may start: after the writes in flight (the fetcher fetches from
    /// here). Readers see [`log_end_offset`](Self::log_end_offset).
    pub fn append_end_offset(&self) -> i64 {
        self.writes.writes.back().map_or(self.next_offset, |w| w.end_offset)
    }

    /// The latest partition leader epoch, counting the writes in flight.
    pub fn append_last_epoch(&self) -> Option<i32> {
        match self.writes.writes.back() {
            Some(w) => w.last_epoch,
            None => self.epochs.latest().map(|e| e.epoch),
        }
    }

    pub fn writes_in_flight(&self) -> usize {
        self.writes.writes.len()
    }

    /// The sequence number of the oldest write in flight.
    pub fn oldest_write_seq(&self) -> Option<u64> {
        self.writes.writes.front().map(|w| w.seq)
    }

    /// Whether write `seq` is still waiting to be committed (a failed write
    /// abandons those after it).
    pub fn write_is_pending(&self, seq: u64) -> bool {
        self.writes.writes.iter().any(|w| w.seq == seq)
    }

    /// Bytes of the writes in flight (their room is needed, not ahead).
    pub(super) fn writes_in_flight_bytes(&self) -> u64 {
        self.writes.bytes
    }

    pub(super) fn check_no_writes_in_flight(&self) -> Result<()> {
        match self.writes.writes.len() {
            0 => Ok(()),
            count => Err(LogError::WritesInFlight { count }),
        }
    }
}
