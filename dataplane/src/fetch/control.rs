//! How the rest of the agent steers a mirror's partitions on a shard:
//! commands to the mirror's supervisor, and the directives the supervisor
//! leaves for the fetcher that holds a partition. Both are same-thread
//! queues: a shard never shares them with another thread.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use ringmirror_storage::log::TopicPartition;

use super::partition::MirrorPartition;
use super::supervisor::MirrorSettings;

/// A command to one mirror's supervisor on this shard.
pub enum MirrorCommand {
    /// Start mirroring a partition whose log is open.
    Add(Box<MirrorPartition>),
    /// Stop mirroring a partition and close its log.
    Remove(TopicPartition),
    /// Stop fetching a partition (it stays open and readable).
    Pause(TopicPartition),
    /// Fetch again, after a pause or a stop (such as an exceeded epoch):
    /// the partition is placed afresh with the source's current epoch.
    Resume(TopicPartition),
    /// End mirroring (failover): the partition leaves its fetcher, gets
    /// the closing markers and becomes local and writable; its log stays open.
    End(TopicPartition),
    /// Compare the partition's last batches with the source's now (see
    /// [`super::divergence`]).
    CheckDivergence(TopicPartition),
    /// Compare every batch held from `from_offset` with the source's
    /// (`mirror verify`), at most `bytes_per_s`; answered with `Verified`.
    Verify {
        tp: TopicPartition,
        from_offset: i64,
        bytes_per_s: u64,
    },
    /// Replace the mirror's settings (`mirror update`): fetchers use them
    /// from their next request on.
    UpdateSettings(Box<MirrorSettings>),
    /// Hand every partition back for closing.
    Stop,
}

pub type MirrorInbox = Rc<RefCell<VecDeque<MirrorCommand>>>;

/// What a fetcher must do with a partition it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Directive {
    Pause,
    Resume,
    Remove,
    End,
    CheckDivergence,
}

pub(crate) type Directives = Rc<RefCell<HashMap<TopicPartition, Directive>>>;
