//! A zero-copy view of one v2 record batch over any byte container.
//!
//! Layout (all big-endian): baseOffset i64, batchLength i32,
//! partitionLeaderEpoch i32, magic i8, crc u32, attributes i16,
//! lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
//! producerEpoch i16, baseSequence i32, recordsCount i32, then the records.
//! The CRC32C covers attributes..end; baseOffset and partitionLeaderEpoch lie
//! outside it, which is why a broker may set them without re-checksumming.

use super::error::{BatchError, BatchErrorKind};

/// Bytes before the batch length's coverage starts: baseOffset + batchLength.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The fixed v2 header, up to and including recordsCount.
pub const BATCH_HEADER_BYTES: usize = 61;
/// `partitionLeaderEpoch` of a batch written without one.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// `producerId` of a batch from a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;

pub(crate) const OFF_BASE_OFFSET: usize = 0;
pub(crate) const OFF_LENGTH: usize = 8;
pub(crate) const OFF_LEADER_EPOCH: usize = 12;
pub(crate) const OFF_MAGIC: usize = 16;
pub(crate) const OFF_CRC: usize = 17;
pub(crate) const OFF_ATTRIBUTES: usize = 21;
pub(crate) const OFF_LAST_OFFSET_DELTA: usize = 23;
pub(crate) const OFF_BASE_TIMESTAMP: usize = 27;
pub(crate) const OFF_MAX_TIMESTAMP: usize = 35;
pub(crate) const OFF_PRODUCER_ID: usize = 43;
pub(crate) const OFF_PRODUCER_EPOCH: usize = 51;
pub(crate) const OFF_BASE_SEQUENCE: usize = 53;
pub(crate) const OFF_RECORDS_COUNT: usize = 57;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The compression codec named by attributes bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    /// Codec ids 5-7 are unassigned; kept so that a batch can still be shown.
    Unknown(u8),
}

impl Compression {
    pub fn from_id(id: u8) -> Self {
        match id {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            other => Self::Unknown(other),
        }
    }

    pub fn id(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
            Self::Unknown(id) => id,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
            Self::Unknown(_) => "unknown",
        }
    }
}

/// Attributes bit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// One whole v2 record batch. Constructed only over a buffer that holds
/// exactly `LOG_OVERHEAD_BYTES + batchLength` bytes with a sane length, so the
/// accessors never index out of bounds.
#[derive(Clone, Copy)]
pub struct RecordBatch<B> {
    buf: B,
}

#[inline]
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
#[inline]
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads the total size (`LOG_OVERHEAD_BYTES + batchLength`) of the batch
/// starting at `buf[0]`, checking the length bounds and the magic byte.
/// Returns `Ok(None)` when `buf` is too short to tell (a partial header).
pub(crate) fn frame_size(buf: &[u8], position: usize, max_batch_bytes: u32) -> Result<Option<usize>, BatchError> {
    if buf.len() < OFF_MAGIC + 1 {
        return Ok(None);
    }
    let length = be_i32(buf, OFF_LENGTH);
    let err = |kind| BatchError {
        position,
        base_offset: Some(be_i64(buf, OFF_BASE_OFFSET)),
        kind,
    };
    let minimum = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
    if length < minimum {
        return Err(err(BatchErrorKind::LengthTooSmall { length, minimum }));
    }
    if length as u32 > max_batch_bytes {
        return Err(err(BatchErrorKind::LengthTooLarge {
            length,
            limit: max_batch_bytes,
        }));
    }
    let magic = buf[OFF_MAGIC] as i8;
    if magic != 2 {
        return Err(err(BatchErrorKind::WrongMagic { magic }));
    }
    Ok(Some(LOG_OVERHEAD_BYTES + length as usize))
}

impl<B: AsRef<[u8]>> RecordBatch<B> {
    /// Views `buf` as one whole batch. `buf` must hold exactly one batch:
    /// a longer buffer is an error too, so that `bytes()` is the batch.
    pub fn new(buf: B) -> Result<Self, BatchError> {
        let b = buf.as_ref();
        match frame_size(b, 0, u32::MAX >> 1)? {
            Some(size) if size == b.len() => Ok(Self { buf }),
            Some(size) => Err(BatchError {
                position: 0,
                base_offset: Some(be_i64(b, OFF_BASE_OFFSET)),
                kind: BatchErrorKind::Truncated {
                    needed: size,
                    available: b.len(),
                },
            }),
            None => Err(BatchError {
                position: 0,
                base_offset: None,
                kind: BatchErrorKind::Truncated {
                    needed: BATCH_HEADER_BYTES,
                    available: b.len(),
                },
            }),
        }
    }

    /// The caller has framed `buf` with [`frame_size`].
    pub(crate) fn new_framed(buf: B) -> Self {
        debug_assert!(buf.as_ref().len() >= BATCH_HEADER_BYTES);
        Self { buf }
    }

    /// The whole batch, exactly as received.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }
    #[inline]
    pub fn into_inner(self) -> B {
        self.buf
    }
    #[inline]
    pub fn size_bytes(&self) -> usize {
        self.bytes().len()
    }
    #[inline]
    pub fn base_offset(&self) -> i64 {
        be_i64(self.bytes(), OFF_BASE_OFFSET)
    }
    #[inline]
    pub fn batch_length(&self) -> i32 {
        be_i32(self.bytes(), OFF_LENGTH)
    }
    #[inline]
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(self.bytes(), OFF_LEADER_EPOCH)
    }
    #[inline]
    pub fn magic(&self) -> i8 {
        self.bytes()[OFF_MAGIC] as i8
    }
    #[inline]
    pub fn crc(&self) -> u32 {
        be_i32(self.bytes(), OFF_CRC) as u32
    }
    #[inline]
    pub fn attributes(&self) -> i16 {
        be_i16(self.bytes(), OFF_ATTRIBUTES)
    }
    #[inline]
    pub fn compression(&self) -> Compression {
        Compression::from_id((self.attributes() & ATTR_COMPRESSION_MASK) as u8)
    }
    #[inline]
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    #[inline]
    pub fn is_transactional(&self) -> bool {
        self.attributes() & ATTR_TRANSACTIONAL != 0
    }
    #[inline]
    pub fn is_control(&self) -> bool {
        self.attributes() & ATTR_CONTROL != 0
    }
    #[inline]
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(self.bytes(), OFF_LAST_OFFSET_DELTA)
    }
    /// `baseOffset + lastOffsetDelta`; saturates rather than wrapping on a
    /// batch that validation would reject.
    #[inline]
    pub fn last_offset(&self) -> i64 {
        self.base_offset().saturating_add(i64::from(self.last_offset_delta()))
    }
    /// The offset after this batch: where the next batch may start at the earliest.
    #[inline]
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    #[inline]
    pub fn base_timestamp(&self) -> i64 {
        be_i64(self.bytes(), OFF_BASE_TIMESTAMP)
    }
    #[inline]
    pub fn max_timestamp(&self) -> i64 {
        be_i64(self.bytes(), OFF_MAX_TIMESTAMP)
    }
    #[inline]
    pub fn producer_id(&self) -> i64 {
        be_i64(self.bytes(), OFF_PRODUCER_ID)
    }
    #[inline]
    pub fn producer_epoch(&self) -> i16 {
        be_i16(self.bytes(), OFF_PRODUCER_EPOCH)
    }
    #[inline]
    pub fn base_sequence(&self) -> i32 {
        be_i32(self.bytes(), OFF_BASE_SEQUENCE)
    }
    /// The sequence number of the last record, or -1 for a batch without one.
    #[inline]
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base < 0 {
            return -1;
        }
        // Sequences wrap at i32::MAX, as Kafka's DefaultRecordBatch.incrementSequence.
        let delta = self.last_offset_delta();
        if base > i32::MAX - delta {
            delta - (i32::MAX - base) - 1
        } else {
            base + delta
        }
    }
    #[inline]
    pub fn records_count(&self) -> i32 {
        be_i32(self.bytes(), OFF_RECORDS_COUNT)
    }
    /// The record bytes after the header (compressed when the batch is).
    #[inline]
    pub fn records_bytes(&self) -> &[u8] {
        &self.bytes()[BATCH_HEADER_BYTES..]
    }
    /// CRC32C over attributes..end, as Kafka computes it.
    #[inline]
    pub fn computed_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes()[OFF_ATTRIBUTES..])
    }
    #[inline]
    pub fn crc_is_valid(&self) -> bool {
        self.computed_crc() == self.crc()
    }
}

impl<B: AsRef<[u8]>> std::fmt::Debug for RecordBatch<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("size_bytes", &self.size_bytes())
            .field("leader_epoch", &self.partition_leader_epoch())
            .field("producer_id", &self.producer_id())
            .field("control", &self.is_control())
            .field("transactional", &self.is_transactional())
            .finish()
    }
}
