//! What a shard reports about its partitions to the control plane, and
//! the queue that carries it. Two kinds of event, two types:
//!
//! - [`StateEvent`]s move the control plane's state machine or record what
//!   was done to a log (an acknowledged command, a stop, a truncation).
//!   They are never dropped: a lost `MirrorEnded` would leave a partition
//!   STOPPING until a restart, a lost `Stopped` a partition not fetching
//!   while shown MIRRORING.
//! - [`TelemetryEvent`]s are measurements and latest values (progress,
//!   statistics, checkpoint offsets). At most a configured number wait in
//!   the queue; beyond it they are dropped and counted
//!   ([`ShardEventCounts::telemetry_dropped`]), and their senders report
//!   the latest value again later.
//!
//! Both travel in one FIFO queue ([`event_queue`]), so a partition's events
//! arrive in the order they were sent. Sending never blocks the data plane:
//! the queue is unbounded, and what keeps it bounded is that state events
//! are few by construction — per partition, one per command the control
//! plane sent it (`Placed`/`Paused`/`Removed`/`MirrorEnded` or
//! `CommandFailed` answer a command), a few per stop (a stopped partition
//! is not fetched again until a command resumes or places it), one
//! `EpochBumpDue` per destination epoch (which only a command changes),
//! one `Verified` per verify command,
//! and at most two `Truncated` per fetch round (each follows a source's
//! answer and cuts the log on disk, and may come with a `Diverged`) — and
//! telemetry is capped.
//! [`ShardEventCounts::state_queued`] shows how many state events wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ringmirror_storage::log::TopicPartition;

use crate::partition::LastMirrorEpoch;

use super::divergence::VerifyOutcome;
use super::stats::FetchStats;

/// Telemetry events that may wait in one queue before more are dropped.
pub const TELEMETRY_EVENTS_QUEUED_MAX_DEFAULT: usize = 4096;

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

/// What the control plane acts on: never dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateEvent {
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
    /// The log was truncated to converge with the source (counted in
    /// `ringmirror_partition_truncations_total`: a lost one would hide a cut).
    Truncated {
        mirror: String,
        tp: TopicPartition,
        to_offset: i64,
        reason: &'static str,
    },
    /// The source rewrote history we had copied (an unclean leader
    /// election): our log from `first_differing_offset` on differed from
    /// the source's, found by batch CRCs or by the source's epochs, and was
    /// cut to `truncated_to` (`bytes_lost` bytes of batches) to mirror the
    /// source's new history. Follows the `Truncated` of the same cut; counted
    /// in `ringmirror_partition_divergences_total`.
    Diverged {
        mirror: String,
        tp: TopicPartition,
        first_differing_offset: i64,
        truncated_to: i64,
        bytes_lost: u64,
    },
    /// What a `mirror verify` of the partition found (one per command).
    Verified {
        mirror: String,
        tp: TopicPartition,
        outcome: VerifyOutcome,
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
        /// The last source leader epoch mirrored (LME).
        last_mirror_epoch: LastMirrorEpoch,
        aborted_transactions: usize,
    },
    /// A command could not be carried out.
    CommandFailed {
        mirror: String,
        tp: TopicPartition,
        error: String,
    },
}

/// Measurements and latest values: dropped (and counted) when too many wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TelemetryEvent {
    /// Progress of a partition after appends (sent again after a drop).
    Progress {
        mirror: String,
        tp: TopicPartition,
        log_end_offset: i64,
        high_watermark: i64,
        /// Appended since the partition was placed on its shard.
        appended_bytes: u64,
        appended_batches: u64,
    },
    /// A batch from the source failed validation and was not appended
    /// (the same offset is fetched again).
    BadBatch {
        mirror: String,
        tp: TopicPartition,
        offset: i64,
        error: String,
    },
    /// What a mirror's fetchers on one shard measured since the last report
    /// (kept for the next report after a drop).
    FetchStats { mirror: String, stats: Box<FetchStats> },
    /// A partition's recovery point (everything below is on disk) or log
    /// start moved: what the data directory's checkpoint files record
    /// (sent again after a drop; closing a log records its final offsets
    /// through `Removed` or the shard's stop).
    Checkpoint {
        mirror: String,
        tp: TopicPartition,
        recovery_point: i64,
        log_start_offset: i64,
    },
}

/// One event as the queue carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardEvent {
    State(StateEvent),
    Telemetry(TelemetryEvent),
}

/// What the queues of one agent count, shared by all of them (shard →
/// agent, agent → control plane): read for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ShardEventCounts(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    telemetry_dropped: AtomicU64,
    state_queued: AtomicUsize,
}

impl ShardEventCounts {
    /// Telemetry events dropped because their queue was full, since start.
    pub fn telemetry_dropped(&self) -> u64 {
        self.0.telemetry_dropped.load(Ordering::Relaxed)
    }

    /// State events sent and not yet received, over every queue.
    pub fn state_queued(&self) -> usize {
        self.0.state_queued.load(Ordering::Relaxed)
    }
}

/// One queue's bookkeeping.
#[derive(Debug)]
struct Queue {
    telemetry_queued_max: usize,
    telemetry_queued: AtomicUsize,
    counts: ShardEventCounts,
}

/// A FIFO queue of shard events: state events always go in, telemetry
/// while fewer than `telemetry_queued_max` wait (at least one).
pub fn event_queue(telemetry_queued_max: usize, counts: &ShardEventCounts) -> (ShardEventSink, ShardEventReceiver) {
    let (tx, rx) = async_channel::unbounded();
    let queue = Arc::new(Queue {
        telemetry_queued_max: telemetry_queued_max.max(1),
        telemetry_queued: AtomicUsize::new(0),
        counts: counts.clone(),
    });
    (
        ShardEventSink {
            tx,
            queue: Arc::clone(&queue),
        },
        ShardEventReceiver { rx, queue },
    )
}

/// The sending end; cloned by every fetcher, supervisor and shard. Never blocks.
#[derive(Debug, Clone)]
pub struct ShardEventSink {
    tx: async_channel::Sender<ShardEvent>,
    queue: Arc<Queue>,
}

impl ShardEventSink {
    /// Queues a state event. Only a receiver that is gone (the agent is
    /// stopping, nobody acts on events any more) leaves it undelivered.
    pub fn state(&self, event: StateEvent) {
        let counts = &self.queue.counts.0;
        counts.state_queued.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.tx.try_send(ShardEvent::State(event)) {
            counts.state_queued.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!(event = ?e.into_inner(), "no receiver for a state event (stopping)");
        }
    }

    /// Queues a telemetry event unless too many wait already; a dropped
    /// event is counted and handed back, for senders of latest values to
    /// keep (and send again later).
    pub fn telemetry(&self, event: TelemetryEvent) -> Result<(), TelemetryEvent> {
        let queue = &self.queue;
        if queue.telemetry_queued.fetch_add(1, Ordering::Relaxed) >= queue.telemetry_queued_max {
            queue.telemetry_queued.fetch_sub(1, Ordering::Relaxed);
            queue.counts.0.telemetry_dropped.fetch_add(1, Ordering::Relaxed);
            return Err(event);
        }
        match self.tx.try_send(ShardEvent::Telemetry(event)) {
            Ok(()) => Ok(()),
            Err(e) => {
                queue.telemetry_queued.fetch_sub(1, Ordering::Relaxed);
                match e.into_inner() {
                    ShardEvent::Telemetry(event) => Err(event),
                    ShardEvent::State(_) => unreachable!("sent a telemetry event"),
                }
            }
        }
    }

    /// Passes a received event on to the next queue, by its kind.
    pub fn forward(&self, event: ShardEvent) {
        match event {
            ShardEvent::State(event) => self.state(event),
            // Dropped when full, and counted: the sender reports again.
            ShardEvent::Telemetry(event) => drop(self.telemetry(event)),
        }
    }
}

/// The receiving end.
#[derive(Debug)]
pub struct ShardEventReceiver {
    rx: async_channel::Receiver<ShardEvent>,
    queue: Arc<Queue>,
}

impl ShardEventReceiver {
    /// The next event; `None` once every sink is gone and the queue is empty.
    pub async fn recv(&self) -> Option<ShardEvent> {
        let event = self.rx.recv().await.ok()?;
        Some(self.received(event))
    }

    /// [`ShardEventReceiver::recv`] for a thread that may block.
    pub fn recv_blocking(&self) -> Option<ShardEvent> {
        let event = self.rx.recv_blocking().ok()?;
        Some(self.received(event))
    }

    /// The next event if one waits.
    pub fn try_recv(&self) -> Option<ShardEvent> {
        let event = self.rx.try_recv().ok()?;
        Some(self.received(event))
    }

    fn received(&self, event: ShardEvent) -> ShardEvent {
        match &event {
            ShardEvent::State(_) => self.queue.counts.0.state_queued.fetch_sub(1, Ordering::Relaxed),
            ShardEvent::Telemetry(_) => self.queue.telemetry_queued.fetch_sub(1, Ordering::Relaxed),
        };
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused(partition: i32) -> StateEvent {
        StateEvent::Paused {
            mirror: "m".into(),
            tp: TopicPartition::new("t", partition),
        }
    }

    fn checkpoint(partition: i32) -> TelemetryEvent {
        TelemetryEvent::Checkpoint {
            mirror: "m".into(),
            tp: TopicPartition::new("t", partition),
            recovery_point: 1,
            log_start_offset: 0,
        }
    }

    #[test]
    fn state_events_pass_a_full_telemetry_queue_in_order_and_drops_are_counted() {
        let counts = ShardEventCounts::default();
        let (sink, events) = event_queue(2, &counts);
        sink.telemetry(checkpoint(0)).unwrap();
        sink.state(paused(0));
        sink.telemetry(checkpoint(1)).unwrap();
        // Two telemetry events wait: the next ones are handed back, counted.
        assert_eq!(sink.telemetry(checkpoint(2)), Err(checkpoint(2)));
        assert_eq!(sink.telemetry(checkpoint(3)), Err(checkpoint(3)));
        for p in 1..=100 {
            sink.state(paused(p));
        }
        assert_eq!(counts.telemetry_dropped(), 2);
        assert_eq!(counts.state_queued(), 101);
        let received: Vec<ShardEvent> = std::iter::from_fn(|| events.try_recv()).collect();
        let mut expected = vec![
            ShardEvent::Telemetry(checkpoint(0)),
            ShardEvent::State(paused(0)),
            ShardEvent::Telemetry(checkpoint(1)),
        ];
        expected.extend((1..=100).map(|p| ShardEvent::State(paused(p))));
        assert_eq!(received, expected);
        assert_eq!(counts.state_queued(), 0);
        // Room again once received.
        sink.telemetry(checkpoint(4)).unwrap();
        sink.telemetry(checkpoint(5)).unwrap();
        assert!(sink.telemetry(checkpoint(6)).is_err());
        assert_eq!(counts.telemetry_dropped(), 3);
    }

    #[test]
    fn forwarding_keeps_the_kind_and_counts_over_both_queues() {
        let counts = ShardEventCounts::default();
        let (shard, agent) = event_queue(1, &counts);
        let (to_control, control) = event_queue(1, &counts);
        shard.state(paused(0));
        shard.telemetry(checkpoint(0)).unwrap();
        while let Some(event) = agent.try_recv() {
            to_control.forward(event.clone());
            // The second hop is full of telemetry now: forwarding drops it.
            to_control.forward(event);
        }
        assert_eq!(counts.telemetry_dropped(), 1);
        assert_eq!(counts.state_queued(), 2);
        let received: Vec<ShardEvent> = std::iter::from_fn(|| control.try_recv()).collect();
        assert_eq!(
            received,
            vec![
                ShardEvent::State(paused(0)),
                ShardEvent::State(paused(0)),
                ShardEvent::Telemetry(checkpoint(0)),
            ]
        );
        assert_eq!(counts.state_queued(), 0);
    }

    #[test]
    fn a_gone_receiver_loses_nothing_it_would_have_acted_on() {
        let counts = ShardEventCounts::default();
        let (sink, events) = event_queue(4, &counts);
        drop(events);
        sink.state(paused(0));
        assert_eq!(counts.state_queued(), 0, "nothing waits for a receiver that is gone");
        assert_eq!(sink.telemetry(checkpoint(0)), Err(checkpoint(0)));
        assert_eq!(counts.telemetry_dropped(), 0, "not a full queue");
    }
}
