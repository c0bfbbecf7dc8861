//! Control records: transaction markers (ABORT 0, COMMIT 1) and the mirror's
//! MIRROR_PID_RESET (7), which tells every reader of the log to forget all
//! producer state written before it (the mirror was stopped and its producer
//! ids no longer mean what they meant at the source).
//!
//! Key: version i16, type i16. Value of ABORT/COMMIT: version i16,
//! coordinatorEpoch i32. Value of MIRROR_PID_RESET: version i16, source
//! cluster id as a Kafka STRING (i16 length, UTF-8 bytes).

use super::header::{BATCH_HEADER_BYTES, RecordBatch};
use super::varint::{VarintError, read_varint, read_varlong};
use crate::limits::{TooLong, put_string};

/// The version we write in MIRROR_PID_RESET values.
pub const MIRROR_PID_RESET_VALUE_VERSION: i16 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    MirrorPidReset,
    Unknown(i16),
}

impl ControlType {
    pub fn from_id(id: i16) -> Self {
        match id {
            0 => Self::Abort,
            1 => Self::Commit,
            7 => Self::MirrorPidReset,
            other => Self::Unknown(other),
        }
    }

    pub fn id(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
            Self::MirrorPidReset => 7,
            Self::Unknown(id) => id,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Abort => "ABORT",
            Self::Commit => "COMMIT",
            Self::MirrorPidReset => "MIRROR_PID_RESET",
            Self::Unknown(_) => "UNKNOWN",
        }
    }
}

/// The decoded first record of a control batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlRecord {
    pub key_version: i16,
    pub control_type: ControlType,
    /// ABORT/COMMIT: the transaction coordinator's epoch.
    pub coordinator_epoch: Option<i32>,
    /// MIRROR_PID_RESET: the cluster the partition was mirrored from.
    pub source_cluster_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlRecordError {
    #[error("batch at offset {0} is not a control batch")]
    NotControl(i64),
    #[error("control batch at offset {0} is compressed")]
    Compressed(i64),
    #[error("control batch at offset {0} holds no record")]
    Empty(i64),
    #[error("control record at offset {offset} is malformed: {reason}")]
    Malformed { offset: i64, reason: &'static str },
    #[error("control record at offset {offset}: {source}")]
    Varint { offset: i64, source: VarintError },
}

fn be_i16(b: &[u8]) -> Option<i16> {
    Some(i16::from_be_bytes(b.get(..2)?.try_into().ok()?))
}

impl ControlRecord {
    /// Decodes the control record of a control batch. Kafka writes exactly
    /// one record per control batch, uncompressed.
    pub fn decode<B: AsRef<[u8]>>(batch: &RecordBatch<B>) -> Result<Self, ControlRecordError> {
        let offset = batch.base_offset();
        if !batch.is_control() {
            return Err(ControlRecordError::NotControl(offset));
        }
        if batch.compression() != super::Compression::None {
            return Err(ControlRecordError::Compressed(offset));
        }
        if batch.records_count() < 1 {
            return Err(ControlRecordError::Empty(offset));
        }
        let buf = &batch.bytes()[BATCH_HEADER_BYTES..];
        let malformed = |reason| ControlRecordError::Malformed { offset, reason };
        let varint = |source| ControlRecordError::Varint { offset, source };
        let mut pos = 0;
        let _length = read_varint(buf, &mut pos).map_err(varint)?;
        pos += 1; // attributes
        read_varlong(buf, &mut pos).map_err(varint)?; // timestamp delta
        read_varint(buf, &mut pos).map_err(varint)?; // offset delta
        let key_len = read_varint(buf, &mut pos).map_err(varint)?;
        let key = take(buf, &mut pos, key_len).ok_or_else(|| malformed("key out of bounds"))?;
        let key = key.ok_or_else(|| malformed("null key"))?;
        let key_version = be_i16(key).ok_or_else(|| malformed("short key"))?;
        let control_type = ControlType::from_id(be_i16(&key[2..]).ok_or_else(|| malformed("short key"))?);
        let value_len = read_varint(buf, &mut pos).map_err(varint)?;
        let value = take(buf, &mut pos, value_len).ok_or_else(|| malformed("value out of bounds"))?;
        let mut record = Self {
            key_version,
            control_type,
            coordinator_epoch: None,
            source_cluster_id: None,
        };
        match (control_type, value) {
            (ControlType::Abort | ControlType::Commit, Some(v)) if v.len() >= 6 => {
                record.coordinator_epoch = Some(i32::from_be_bytes(v[2..6].try_into().expect("4 bytes")));
            }
            (ControlType::MirrorPidReset, Some(v)) => {
                let len = be_i16(v.get(2..).unwrap_or_default()).ok_or_else(|| malformed("short value"))?;
                let len = usize::try_from(len).map_err(|_| malformed("null source cluster id"))?;
                let id = v
                    .get(4..4 + len)
                    .ok_or_else(|| malformed("source cluster id out of bounds"))?;
                let id = std::str::from_utf8(id).map_err(|_| malformed("source cluster id is not UTF-8"))?;
                record.source_cluster_id = Some(id.to_owned());
            }
            (ControlType::MirrorPidReset, None) => return Err(malformed("MIRROR_PID_RESET without value")),
            _ => {}
        }
        Ok(record)
    }
}

/// Takes a length-prefixed field; `Some(None)` for a null (-1) field.
fn take<'a>(buf: &'a [u8], pos: &mut usize, len: i32) -> Option<Option<&'a [u8]>> {
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(len as usize)?;
    let field = buf.get(*pos..end)?;
    *pos = end;
    Some(Some(field))
}

/// Encodes the value of a MIRROR_PID_RESET record; a cluster id longer
/// than a Kafka STRING is refused.
pub fn encode_mirror_pid_reset_value(source_cluster_id: &str) -> Result<Vec<u8>, TooLong> {
    let mut out = Vec::with_capacity(4 + source_cluster_id.len());
    out.extend_from_slice(&MIRROR_PID_RESET_VALUE_VERSION.to_be_bytes());
    put_string(&mut out, "source cluster id", source_cluster_id)?;
    Ok(out)
}
