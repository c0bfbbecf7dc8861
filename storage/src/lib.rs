//! ringmirror's storage: what is on disk and the bytes that may go there.
//!
//! * [`batch`] reads, validates and builds Kafka v2 record batches without
//!   copying them.
//! * [`log`] is the partition log in Kafka's on-disk format: segments,
//!   indexes, leader-epoch cache, producer and transaction state, recovery.
//! * [`topic_config`] is the Kafka topic configs a local topic may set, and
//!   their text form beside the log.
//! * [`clock`] is the wall clock in milliseconds, Kafka's unit.
//! * [`limits`] bounds the strings from the network that we write again.
//! * [`placement`] is the stable hash that places partitions, groups and
//!   transactional ids on shards.
//! * [`failpoint`] kills the process at named points, for crash tests.
//!
//! No sockets and no async runtime: the crate's dependencies hold none, so
//! only bytes validated here become log data.

pub mod batch;
pub mod clock;
pub mod failpoint;
pub mod limits;
pub mod log;
pub mod placement;
pub mod topic_config;
