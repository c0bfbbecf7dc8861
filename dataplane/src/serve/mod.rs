//! Serving: a Kafka-protocol listener on the shard executors, so that
//! ordinary clients (and other agents) read what the agent holds.
//!
//! * [`catalog`] — which topics and partitions are served, by which shard.
//! * [`registry`] — each shard's open logs, and the jobs through which a
//!   connection on one shard reads a partition owned by another.
//! * [`groups`] — the group coordinator: consumer groups and committed offsets.
//! * [`transactions`] — the transaction coordinator of each shard on the
//!   listener: its APIs, timer and markers.
//! * [`request`] — request frames decoded and checked against what we serve.
//! * [`listener`] — accepting, framing, sending (records via sendfile).
//! * [`handlers`], [`fetch`] and [`write`] — the answers (`write`: local
//!   topics, producer ids, Produce).
//! * [`topic_config`] — the topic configs CreateTopics accepts, checked as
//!   Kafka checks them, and their form in a local partition's marker file.
//! * [`mirror_reports`] — what the control plane reports of each mirror,
//!   for DescribeClusterMirrors (a peer's last-mirror-epoch lookups).
//! * [`acls`] — the ACL bindings the listener stores and serves
//!   (DescribeAcls, CreateAcls, DeleteAcls).
//! * [`authorizer`] — their enforcement (`[listener] authorizer = "acl"`).
//! * [`sasl`] — SASL authentication of connections (PLAIN, SCRAM), and
//!   each connection's principal.

pub mod acls;
pub mod authorizer;
pub mod catalog;
mod fetch;
pub mod groups;
mod handlers;
pub mod listener;
mod log_dirs;
pub mod mirror_reports;
pub mod producer_ids;
pub mod registry;
pub mod sasl;
pub mod tls;
pub mod transactions;
mod write;

pub use acls::{AclBinding, AclBindingFilter, AclStore};
pub use authorizer::{AuthorizerMode, AuthorizerSettings};
pub use catalog::{Catalog, CatalogHandle, CatalogView, ServerIdentity, TopicEntry, derived_topic_id};
pub use listener::{
    AcceptMode, CONNECTIONS_MAX_IDLE_DEFAULT, ListenerSettings, MAX_REQUEST_BYTES_DEFAULT, ServeTasks, run_acceptor,
    run_listener, serve_handed_off,
};
pub use mirror_reports::{MirrorReport, MirrorReports, MirrorReportsHandle, PartitionReport, TopicReport};
pub use producer_ids::ProducerIds;
pub use registry::{
    PartitionFn, Registry, ServedPartition, ShardAccess, ShardLinkEnd, ShardLinks, SharedLog, run_jobs,
};
