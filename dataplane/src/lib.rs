//! ringmirror's data plane on glommio: the hot path from a source's
//! sockets to the local log, and from the log to clients.
//!
//! * [`client`] is our Kafka client to sources (and to our own listener):
//!   connections, ApiVersions, ListOffsets, OffsetForLeaderEpoch, SASL.
//! * [`fetch`] is the fetchers: one supervisor per shard and mirror, Fetch
//!   sessions, divergence and truncation, appends to the log.
//! * [`shard`] runs a shard: its pinned executor, registry, listener and
//!   periodic jobs.
//! * [`partition`] is what the agent serves: the catalog, each shard's
//!   registry of partition logs and the links between shards, the
//!   destination-epoch rule, producer ids and mirror reports.
//! * [`kafka`] is the Kafka-protocol listener clients read the logs
//!   through and write the writable topics through: sessions and the
//!   answers per API family.
//! * [`groups`] is the group coordinator: consumer and share groups and
//!   their committed offsets.
//! * [`security`] is the ACL store and the authorizer.
//! * [`transactions`] is the transaction coordinator's core (Kafka's
//!   transactions for the writable topics), the `ringmirror-transactions`
//!   crate re-exported.
//! * [`transport`] is a TCP stream in clear or under TLS.
//!
//! Batches and the log are `ringmirror_storage`'s, wire code
//! `ringmirror_protocol`'s. This crate never imports the control plane;
//! the control plane drives it through the types exported here.

pub mod client;
pub mod fetch;
pub mod groups;
pub mod kafka;
pub mod partition;
pub mod security;
pub mod shard;
pub use ringmirror_transactions as transactions;
pub mod transport;
