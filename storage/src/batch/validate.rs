//! Validation of received batches before they are committed to a log.
//!
//! Checks, per batch: framing (length bounds, magic 2), CRC32C over
//! attributes..end, a non-negative last offset delta, a records count that
//! fits the delta (compaction may leave fewer records, never more), offsets
//! at or above the expected next offset (gaps are fine: source compaction),
//! leader epochs that never decrease, and — for a mirror — no leader epoch
//! above the epoch we fetched with (the KAFKA-18723 rule). Reads only.

use super::error::{BatchError, BatchErrorKind};
use super::header::{NO_PARTITION_LEADER_EPOCH, RecordBatch};
use super::iter::BatchIter;

/// What a run of batches must satisfy.
#[derive(Debug, Clone, Copy)]
pub struct Validation {
    /// The log end offset: the first batch may not start below it.
    pub next_offset: i64,
    /// Upper bound on one batch's claimed size.
    pub max_batch_bytes: u32,
    /// The leader epoch the fetch was made with; batches above it are refused.
    pub fetch_epoch: Option<i32>,
    /// The epoch of the last batch already in the log.
    pub last_epoch: Option<i32>,
}

/// The longest valid prefix of a buffer and why it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedRange {
    /// Bytes of whole valid batches from the start of the buffer.
    pub valid_bytes: usize,
    pub batches: u32,
    /// Offset after the last valid batch (the input `next_offset` if none).
    pub next_offset: i64,
    pub last_epoch: Option<i32>,
    /// Set when a bad batch ended the prefix; `None` means the rest of the
    /// buffer (if any) is a partial batch.
    pub error: Option<BatchError>,
}

/// Checks one framed batch against the running state.
fn check_batch(
    batch: &RecordBatch<&[u8]>,
    position: usize,
    next_offset: i64,
    last_epoch: Option<i32>,
    fetch_epoch: Option<i32>,
) -> Result<(), BatchError> {
    let err = |kind| BatchError {
        position,
        base_offset: Some(batch.base_offset()),
        kind,
    };
    let (stored, computed) = (batch.crc(), batch.computed_crc());
    if stored != computed {
        return Err(err(BatchErrorKind::CrcMismatch { stored, computed }));
    }
    let delta = batch.last_offset_delta();
    if delta < 0 {
        return Err(err(BatchErrorKind::NegativeOffsetDelta { delta }));
    }
    let count = batch.records_count();
    if count < 0 || i64::from(count) > i64::from(delta) + 1 {
        return Err(err(BatchErrorKind::RecordsCountMismatch { count, delta }));
    }
    let base_offset = batch.base_offset();
    if base_offset < next_offset {
        return Err(err(BatchErrorKind::OffsetBelowExpected {
            base_offset,
            expected: next_offset,
        }));
    }
    if base_offset
        .checked_add(i64::from(delta))
        .is_none_or(|last| last == i64::MAX)
    {
        return Err(err(BatchErrorKind::OffsetOverflow { base_offset, delta }));
    }
    let epoch = batch.partition_leader_epoch();
    if epoch != NO_PARTITION_LEADER_EPOCH {
        if let Some(fetch_epoch) = fetch_epoch
            && epoch > fetch_epoch
        {
            return Err(err(BatchErrorKind::EpochAboveFetchEpoch { epoch, fetch_epoch }));
        }
        if let Some(previous) = last_epoch
            && epoch < previous
        {
            return Err(err(BatchErrorKind::EpochDecreased { epoch, previous }));
        }
    }
    Ok(())
}

/// Validates the batches of `buf` in place and returns the longest valid
/// prefix. Never panics on any input.
pub fn validate_batches(buf: &[u8], v: &Validation) -> ValidatedRange {
    let mut range = ValidatedRange {
        valid_bytes: 0,
        batches: 0,
        next_offset: v.next_offset,
        last_epoch: v.last_epoch,
        error: None,
    };
    for item in BatchIter::new(buf, v.max_batch_bytes) {
        let (position, batch) = match item {
            Ok(b) => b,
            Err(e) => {
                range.error = Some(e);
                break;
            }
        };
        if let Err(e) = check_batch(&batch, position, range.next_offset, range.last_epoch, v.fetch_epoch) {
            range.error = Some(e);
            break;
        }
        range.valid_bytes = position + batch.size_bytes();
        range.batches += 1;
        range.next_offset = batch.next_offset();
        if batch.partition_leader_epoch() != NO_PARTITION_LEADER_EPOCH {
            range.last_epoch = Some(batch.partition_leader_epoch());
        }
    }
    range
}
