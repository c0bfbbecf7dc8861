//! Errors of the partition log: operating errors (disk, bad bytes, requests
//! outside the log) that callers handle and report.

use std::path::PathBuf;

use crate::batch::BatchError;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("batch base offset {base_offset} is below the log end offset {log_end_offset}")]
    OffsetBelowLogEnd { base_offset: i64, log_end_offset: i64 },
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("appended bytes end in a partial batch at byte {position}")]
    PartialBatch { position: usize },
    #[error("corrupt {path}: {reason}")]
    CorruptFile { path: PathBuf, reason: String },
    /// A record we write would not hold a string (such as a source
    /// cluster id in MIRROR_PID_RESET).
    #[error(transparent)]
    FieldTooLong(#[from] crate::limits::TooLong),
    /// Cutting, sealing or a synchronous append while writes are in flight:
    /// the caller completes them first (they would land in a cut file).
    #[error("{count} segment writes are still in flight")]
    WritesInFlight { count: usize },
    /// A segment write failed earlier: the writes after it would leave a
    /// hole, so the log takes no more appends.
    #[error("an earlier segment write failed: {reason}")]
    WriteFailed { reason: String },
    #[error("partition {path} belongs to topic id {on_disk}, not {requested}")]
    TopicIdMismatch {
        path: PathBuf,
        on_disk: String,
        requested: String,
    },
}

impl LogError {
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { op, path, source }
    }

    /// True when the disk (or quota) is full: the caller should stop appending
    /// and report, not retry in a loop.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull
            || source.raw_os_error() == Some(libc::ENOSPC)
            || source.raw_os_error() == Some(libc::EDQUOT))
    }
}

pub(crate) type Result<T> = std::result::Result<T, LogError>;
