//! The typed error for bad batch bytes: where it happened and why.

/// Bad bytes in a run of record batches. Names the byte position (relative to
/// the start of the buffer that was being read), the batch's base offset when
/// the header was readable, and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad record batch at byte {position} (base offset {base_offset:?}): {kind}")]
pub struct BatchError {
    pub position: usize,
    pub base_offset: Option<i64>,
    pub kind: BatchErrorKind,
}

/// Why a batch was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchErrorKind {
    #[error("batch length {length} is below the minimum {minimum}")]
    LengthTooSmall { length: i32, minimum: i32 },
    #[error("batch length {length} is above the limit {limit}")]
    LengthTooLarge { length: i32, limit: u32 },
    #[error("magic {magic} is not supported (only magic 2)")]
    WrongMagic { magic: i8 },
    #[error("CRC32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("last offset delta {delta} is negative")]
    NegativeOffsetDelta { delta: i32 },
    #[error("records count {count} does not fit last offset delta {delta}")]
    RecordsCountMismatch { count: i32, delta: i32 },
    #[error("base offset {base_offset} is below the expected next offset {expected}")]
    OffsetBelowExpected { base_offset: i64, expected: i64 },
    #[error("offsets overflow: base offset {base_offset} + delta {delta}")]
    OffsetOverflow { base_offset: i64, delta: i32 },
    #[error("partition leader epoch {epoch} is above the fetch epoch {fetch_epoch}")]
    EpochAboveFetchEpoch { epoch: i32, fetch_epoch: i32 },
    #[error("partition leader epoch {epoch} is below the previous batch's {previous}")]
    EpochDecreased { epoch: i32, previous: i32 },
    #[error("truncated: batch needs {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
}
