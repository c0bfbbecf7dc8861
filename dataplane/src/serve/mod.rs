//! Serving: a Kafka-protocol listener on the shard executors, so that
//! ordinary clients (and other agents) read what the agent holds.
//!
//! * [`catalog`] — which topics and partitions are served, by which shard.
//! * [`registry`] — each shard's open logs, and the jobs through which a
//!   connection on one shard reads a partition owned by another.
//! * [`request`] — request frames decoded and checked against what we serve.
//! * [`listener`] — accepting, framing, sending (records via sendfile).
//! * [`handlers`] and [`fetch`] — the answers.

pub mod catalog;
mod fetch;
mod handlers;
pub mod listener;
pub mod registry;
pub mod request;

pub use catalog::{Catalog, CatalogHandle, CatalogView, ServerIdentity, TopicEntry, derived_topic_id};
pub use listener::{ListenerSettings, MAX_REQUEST_BYTES_DEFAULT, run_listener};
pub use registry::{
    PartitionFn, Registry, ServedPartition, ShardAccess, ShardLinkEnd, ShardLinks, SharedLog, run_jobs,
};
pub use request::{Request, RequestError, SUPPORTED_APIS, decode_request};
