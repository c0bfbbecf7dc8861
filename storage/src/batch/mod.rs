//! Kafka record batches (magic 2): zero-copy header views, framing, validation,
//! control records, header comparison with a source's bytes, record
//! decoding and a builder for the few batches the
//! agent writes itself (control markers, test data).
//!
//! The bytes of a batch are never rewritten here: views borrow them, and
//! validation only reads.

mod build;
mod compare;
mod control;
mod error;
mod header;
mod iter;
mod records;
mod validate;
pub mod varint;

pub use build::{BatchBuilder, BuildRecord};
pub use compare::{BatchSummary, Comparison, compare_batches};
pub use control::{
    ControlRecord, ControlRecordError, ControlType, MIRROR_PID_RESET_VALUE_VERSION, encode_mirror_pid_reset_value,
};
pub use error::{BatchError, BatchErrorKind};
pub use header::{
    BATCH_HEADER_BYTES, Compression, LOG_OVERHEAD_BYTES, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_ID, RecordBatch,
    TimestampType,
};
pub use iter::BatchIter;
pub use records::{Record, RecordHeader, RecordsError, decode_records};
pub use validate::{ValidatedRange, Validation, validate_batches};
