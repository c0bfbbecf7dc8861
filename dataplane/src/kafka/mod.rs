//! The Kafka-protocol listener on the shard executors, so that ordinary
//! clients (and other agents) read what the agent holds and write its
//! writable topics: accepting, the session of each connection, and the
//! answers per API family.
//!
//! * [`listener`] — accepting, and each connection's session: framing,
//!   reading requests, writing the answers in order (records via
//!   sendfile); the only place that writes to a client's socket.
//! * [`connection`] — a connection as its handlers see it (peer,
//!   principal, authorization, fetch session); [`response`] — what a
//!   handler returns: an encoded frame, a Fetch response with file ranges,
//!   a raw SASL token, or nothing.
//! * [`sasl`] and [`tls`] — authentication and encryption of a connection
//!   before its requests are served.
//! * [`handlers`] — the dispatch of every request to its API family, and
//!   ApiVersions.
//! * [`metadata`] — Metadata, DescribeCluster; [`log_offsets`] —
//!   ListOffsets, OffsetForLeaderEpoch; [`configs`] — DescribeConfigs;
//!   [`acls`] — DescribeAcls, CreateAcls, DeleteAcls; [`cluster_mirrors`] —
//!   DescribeClusterMirrors (API 99).
//! * [`fetch`] — Fetch: reads on the owning shard, long polls, KIP-227
//!   sessions.
//! * [`write`] — local topics (CreateTopics, CreatePartitions),
//!   InitProducerId and Produce.
//! * [`groups`] — the group APIs, answered by each group's coordinator;
//!   [`consumer_groups`] — KIP-848's ConsumerGroupHeartbeat and
//!   ConsumerGroupDescribe.
//! * [`transactions`] — the transaction APIs, each shard's transaction
//!   coordinator, its timer and markers.
//! * [`log_dirs`] — DescribeLogDirs.
//! * [`auto_create`] — topics created by Metadata (`auto.create.topics.enable`).
//! * [`describe_producers`] — DescribeProducers; [`elect_leaders`] —
//!   ElectLeaders.

mod acls;
mod auto_create;
mod cluster_mirrors;
mod configs;
pub mod connection;
mod consumer_groups;
mod describe_producers;
mod elect_leaders;
mod fetch;
pub mod groups;
mod handlers;
pub mod listener;
mod log_dirs;
mod log_offsets;
mod metadata;
pub mod response;
pub mod sasl;
pub mod tls;
pub mod transactions;
mod write;

pub use auto_create::TopicCreation;
pub use listener::{
    AcceptMode, CONNECTIONS_MAX_IDLE_DEFAULT, ListenerSettings, MAX_REQUEST_BYTES_DEFAULT, ServeTasks, run_acceptor,
    run_listener, serve_handed_off,
};
