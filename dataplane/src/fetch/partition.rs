//! [`MirrorPartition`]: one mirrored partition as the data plane holds it —
//! its log, the source leader epoch it fetches with, and why it is not
//! fetching when it is not.

use std::cell::{Ref, RefMut};
use std::fmt;
use std::rc::Rc;

use crate::partition::{ServedPartition, shard_for};
use ringmirror_storage::log::{PartitionLog, TopicPartition};

use super::divergence::PendingCheck;
use super::fetcher::SessionSent;

/// Identity of a mirrored partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionKey {
    pub mirror: String,
    pub topic_id: [u8; 16],
    pub tp: TopicPartition,
}

impl PartitionKey {
    /// The shard that owns this partition (see [`shard_for`]).
    pub fn shard(&self, shards: usize) -> usize {
        shard_for(&self.tp, shards)
    }
}

impl fmt::Display for PartitionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.mirror, self.tp)
    }
}

pub struct MirrorPartition {
    pub key: PartitionKey,
    /// The log, shared with the shard's registry (which serves it).
    pub served: Rc<ServedPartition>,
    /// The source leader epoch from metadata (`current_leader_epoch`).
    pub fetch_epoch: i32,
    /// Source high watermark from the last response (for lag).
    pub high_watermark: i64,
    /// Set on placement: converge with the source before fetching.
    pub needs_truncation_check: bool,
    /// Set when the source's leader epoch changed (and on demand): compare
    /// our last batches with the source's before fetching on.
    pub divergence_check: Option<PendingCheck>,
    /// Appending is stopped (an error such as an exceeded epoch) until the
    /// control plane says go on.
    pub stopped: bool,
    /// Paused by the control plane: not fetched, still open.
    pub paused: bool,
    /// Consecutive failures, for backoff.
    pub failures: u32,
    /// When the last progress event went out, and the log end it reported.
    pub last_progress_ms: u64,
    pub last_progress_offset: i64,
    /// The (recovery point, log start) last reported for the checkpoints.
    pub last_checkpoint: (i64, i64),
    /// The destination epoch for which a bump was last reported due.
    pub epoch_bump_reported_at: i32,
    /// Bytes and batches appended since the partition was placed (metrics).
    pub appended_bytes: u64,
    pub appended_batches: u64,
    /// What the fetcher's fetch session last sent for it, and which session.
    pub(crate) session_sent: Option<SessionSent>,
}

impl MirrorPartition {
    pub fn new(key: PartitionKey, served: Rc<ServedPartition>) -> Self {
        Self {
            key,
            served,
            fetch_epoch: -1,
            high_watermark: -1,
            needs_truncation_check: true,
            divergence_check: None,
            stopped: false,
            paused: false,
            failures: 0,
            last_progress_ms: 0,
            last_progress_offset: -1,
            last_checkpoint: (-1, -1),
            epoch_bump_reported_at: i32::MIN,
            appended_bytes: 0,
            appended_batches: 0,
            session_sent: None,
        }
    }

    /// The log, borrowed for a synchronous step (never across an await).
    pub fn log(&self) -> Ref<'_, PartitionLog> {
        self.served.log.borrow()
    }

    pub fn log_mut(&self) -> RefMut<'_, PartitionLog> {
        self.served.log.borrow_mut()
    }

    pub fn tp(&self) -> &TopicPartition {
        &self.key.tp
    }

    /// Whether the next Fetch should include this partition: not stopped or
    /// paused, and converged with the source since it was placed.
    pub fn fetchable(&self) -> bool {
        !self.stopped && !self.paused && !self.needs_truncation_check && self.divergence_check.is_none()
    }
}
