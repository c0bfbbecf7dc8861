//! Mirror fetching: pulls record batches from a source cluster and lands
//! them unmodified, at their source offsets, in the partition logs.
//!
//! Per shard and mirror, a [`supervisor`] keeps source metadata and hands
//! each partition to the [`fetcher`] of its leader broker; a fetcher owns
//! one connection and the partitions it fetches, reads each Fetch response
//! as a stream and receives record bytes straight into the log tail,
//! validates them in place and commits whole batches (or hands the write
//! to the shard's io_uring ring, [`append_ring`], and commits when it is done). A partition that
//! meets an error goes back to the supervisor, which refreshes metadata and
//! places it again after a jittered backoff. After a source leader-epoch
//! change the fetcher compares our last batches with the source's
//! ([`divergence`]) before it fetches on.

mod append_ring;
mod control;
mod divergence;
mod events;
mod fetcher;
mod ingest;
mod metadata;
mod partition;
mod stats;
mod supervisor;

pub use control::{MirrorCommand, MirrorInbox};
pub use divergence::{
    DIVERGENCE_ATTEMPTS_MAX, DIVERGENCE_RETRY_INTERVAL_MS, DIVERGENCE_WINDOW_BATCHES, DIVERGENCE_WINDOW_BYTES_MAX,
    DIVERGENCE_WINDOWS_MAX, PendingCheck, VerifyOutcome,
};
pub use events::{
    ShardEvent, ShardEventCounts, ShardEventReceiver, ShardEventSink, StateEvent, StopReason,
    TELEMETRY_EVENTS_QUEUED_MAX_DEFAULT, TelemetryEvent, event_queue,
};
pub use ingest::IngestMode;
pub use metadata::{SourceMetadata, SourcePartition, fetch_source_metadata};
pub use partition::{MirrorPartition, PartitionKey};
pub use stats::FetchStats;
pub(crate) use supervisor::mirror_ended;
pub use supervisor::{MirrorSettings, run_mirror};
