//! ringmirror's data plane: the hot path from source bytes to the local log.
//!
//! * [`batch`] reads, validates and builds Kafka v2 record batches without
//!   copying them.
//! * [`log`] is the partition log in Kafka's on-disk format: segments,
//!   indexes, leader-epoch cache, producer and transaction state, recovery.
//! * [`serve`] is the Kafka-protocol listener clients read the logs through.
//! * [`transactions`] is the transaction coordinator's core (Kafka's
//!   transactions for the writable topics).
//! * [`sasl`] is SASL authentication (PLAIN, SCRAM), ours to sources and
//!   our listener's; [`transport`] is a TCP stream in clear or under TLS.
//! * [`lazy_alloc`] maps huge allocations lazily, so lying lengths cannot abort.
//! * [`limits`] bounds the strings from the network that we write again.
//! * [`failpoint`] kills the process at named points, for crash tests.
//!
//! This crate never imports the control plane; the control plane drives it
//! through the types exported here.

pub mod client;
pub mod fetch;
pub mod serve;
pub mod shard;
pub mod transactions;
pub mod transport;
