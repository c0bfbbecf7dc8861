//! The partition log, in Kafka's on-disk format so that Kafka's own tools
//! can read what we write.
//!
//! A partition directory `<topic>-<partition>/` holds segments named by base
//! offset (`<20 digits>.log`, `.index`, `.timeindex`, `.txnindex`), producer
//! snapshots (`<offset>.snapshot`), `leader-epoch-checkpoint`,
//! `partition.metadata`, once compacted, `cleaner-offset-checkpoint`
//! (where the log cleaner got to) and, once mirrored or written,
//! `mirror-source.checkpoint` (which source it holds, and whether anything
//! was written here since: [`Provenance`]). The data directory holds
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and the
//! clean-shutdown marker ([`LogDir`]).
//!
//! Invariants kept here: batches are stored exactly as given, at their own
//! offsets; offsets strictly increase across the log; the log end offset is
//! the offset after the last whole batch; nothing below the log start offset
//! is served; after a crash only the longest valid prefix survives.

mod async_append;
mod background_flush;
mod checkpoint;
mod cleaner;
mod cleaner_checkpoint;
pub mod compacted;
mod config;
mod end_mirroring;
mod epoch_cache;
mod error;
mod files;
mod index;
mod log_dir;
mod partition_log;
mod produce;
mod producer_state;
mod provenance;
mod reserve;
mod segment;
mod txn_index;

pub use async_append::{BeginWrite, WRITES_IN_FLIGHT_MAX, WriteTarget};
pub use cleaner::{CleanOptions, CleanReport, SwapStep};
pub use compacted::{CompactedLog, KeyedRecord};
pub use config::{CleanupPolicy, LogConfig};
pub use end_mirroring::EndedMirroring;
pub use epoch_cache::{EpochEntry, LeaderEpochCache, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
pub use error::LogError;
pub use log_dir::{LogDir, OffsetCheckpoints, TopicPartition};
pub use partition_log::{AppendInfo, OpenOptions, PartitionLog, ReadSlice, RecoveryReport, TimestampOffset};
pub use produce::{ProduceError, Produced};
pub use producer_state::{ProducerEntry, ProducerState};
pub use provenance::{MirrorSource, Provenance};
pub use reserve::{RESERVE_HORIZON_MS, RESERVE_STEP_BYTES_MIN, ReserveBudget, reserve_step_bytes};
pub use txn_index::AbortedTxn;
