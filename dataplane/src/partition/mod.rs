//! The partitions this agent serves and how shards reach each other's:
//! what the fetchers, the listener and the control plane share about a
//! partition, below all of them.
//!
//! * [`catalog`] — which topics and partitions are served, by which shard.
//! * [`registry`] — each shard's open logs, and the jobs through which a
//!   connection on one shard reads a partition owned by another.
//! * placement (`ringmirror_storage::placement`, re-exported here) — the
//!   shard of a partition, group or transactional id.
//! * [`destination_epoch`] — KIP-1279's destination leader epoch rule, one
//!   copy for both planes.
//! * [`last_mirror_epoch`] — KIP-1279's [`LastMirrorEpoch`] (LME).
//! * [`mirror_partition_state`] — KIP-1279's [`MirrorPartitionState`]
//!   machine, driven by the control plane and shown in the reports.
//! * [`producer_ids`] — producer ids for writers of the writable topics.
//! * [`mirror_reports`] — what the control plane reports of each mirror,
//!   for DescribeClusterMirrors (a peer's last-mirror-epoch lookups).

pub mod catalog;
pub mod destination_epoch;
pub mod last_mirror_epoch;
pub mod mirror_partition_state;
pub mod mirror_reports;
pub mod producer_ids;
pub mod registry;

pub use catalog::{Catalog, CatalogHandle, CatalogView, ServerIdentity, TopicEntry, derived_topic_id};
pub use last_mirror_epoch::LastMirrorEpoch;
pub use mirror_partition_state::{InvalidTransition, MirrorPartitionState};
pub use mirror_reports::{MirrorReport, MirrorReports, MirrorReportsHandle, PartitionReport, TopicCover, TopicReport};
pub use producer_ids::ProducerIds;
pub use registry::{
    PartitionFn, Registry, ServedPartition, ShardAccess, ShardLinkEnd, ShardLinks, SharedLog, run_jobs,
};
pub use ringmirror_storage::placement::{shard_for, shard_for_key, stable_hash};
