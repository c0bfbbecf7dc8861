//! What a shard reports about its partitions (to the agent now, to the
//! control plane later). Sent over a channel; never blocks the data plane.

use crate::log::TopicPartition;

use super::stats::FetchStats;

/// Why a partition stopped appending until told to go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A batch carried a leader epoch above the epoch we fetched with (the
    /// KAFKA-18723 rule) or above the destination leader epoch (which must
    /// stay above every mirrored batch's): the destination epoch must be
    /// bumped first (reactive trigger). `fetch_epoch` is the lower of the two.
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
        /// Appended since the partition was placed on its shard.
        appended_bytes: u64,
        appended_batches: u64,
    },
    /// The partition was placed on its shard (after LME truncation, when
    /// asked for: `truncated_to` is the new log end if it cut) and is
    /// mirroring, or paused if placed so.
    Placed {
        mirror: String,
        tp: TopicPartition,
        log_end_offset: i64,
        truncated_to: Option<i64>,
    },
    /// A pause took effect: no Fetch request includes the partition any more.
    Paused { mirror: String, tp: TopicPartition },
    /// The source's leader epoch came within the threshold of the
    /// destination epoch (proactive trigger): a bump is due, appends go on.
    EpochBumpDue {
        mirror: String,
        tp: TopicPartition,
        source_epoch: i32,
        destination_epoch: i32,
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
        /// The last source leader epoch mirrored (LME), -1 if none.
        last_mirror_epoch: i32,
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
    /// What a mirror's fetchers on one shard measured since the last report.
    FetchStats { mirror: String, stats: Box<FetchStats> },
    /// A partition's recovery point (everything below is on disk) or log
    /// start moved: what the data directory's checkpoint files record.
    Checkpoint {
        mirror: String,
        tp: TopicPartition,
        recovery_point: i64,
        log_start_offset: i64,
    },
}
