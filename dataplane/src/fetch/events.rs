//! What a shard reports about its partitions (to the agent now, to the
//! control plane later). Sent over a channel; never blocks the data plane.

use crate::log::TopicPartition;

/// Why a partition stopped appending until told to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A batch carried a leader epoch above the epoch we fetched with (the
    /// KAFKA-18723 rule): the destination epoch must be bumped first.
    EpochExceeded { batch_epoch: i32, fetch_epoch: i32 },
    /// The log could not be written (a full disk, an I/O error).
    LogFailed { error: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    /// Progress of a partition after appends.
    Progress {
        mirror: String,
        tp: TopicPartition,
        log_end_offset: i64,
        high_watermark: i64,
    },
    /// The log was truncated to converge with the source.
    Truncated {
        mirror: String,
        tp: TopicPartition,
        to_offset: i64,
        reason: &'static str,
    },
    /// The partition stopped appending.
    Stopped {
        mirror: String,
        tp: TopicPartition,
        reason: StopReason,
    },
    /// The partition is no longer mirrored; its log was closed.
    Removed {
        mirror: String,
        tp: TopicPartition,
        recovery_point: i64,
        log_start_offset: i64,
    },
    /// Mirroring ended (failover): the partition is local and writable
    /// from `log_end_offset` on, at `leader_epoch`.
    MirrorEnded {
        mirror: String,
        tp: TopicPartition,
        log_end_offset: i64,
        leader_epoch: i32,
        aborted_transactions: usize,
    },
    /// A command could not be carried out.
    CommandFailed {
        mirror: String,
        tp: TopicPartition,
        error: String,
    },
    /// A batch from the source failed validation and was not appended
    /// (the same offset is fetched again).
    BadBatch {
        mirror: String,
        tp: TopicPartition,
        offset: i64,
        error: String,
    },
    /// A partition's recovery point (everything below is on disk) or log
    /// start moved: what the data directory's checkpoint files record.
    Checkpoint {
        mirror: String,
        tp: TopicPartition,
        recovery_point: i64,
        log_start_offset: i64,
    },
}
