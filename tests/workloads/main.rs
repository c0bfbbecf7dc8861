//! What runs on Kafka must run at the agent, and on a copy after a failover
//! from Kafka (issue 17): Java transactional producers, a Kafka Streams
//! application with exactly-once processing, Kafka Connect in distributed
//! mode, and consumer groups on KIP-848's protocol — each with Kafka's own
//! libraries (the Java driver's `streams-count`, `txn-*` and
//! `group-member` commands, and Connect's own `ConnectDistributed`).
//!
//! One test binary, one Apache Kafka 4.3.1 cluster (a KRaft controller and
//! three brokers, started by the first test that needs it), and each
//! reference view computed at Kafka once:
//!
//! - [`at_kafka`]: the reference runs at Kafka alone.
//! - [`at_the_agent`]: the same workloads at a plain agent, on local topics.
//! - [`after_failover`]: the workloads started at Kafka, mirrored, failed
//!   over (`mirror stop`), and carried on at the agent.
//! - [`unplanned_failover`]: the Streams application failed over while
//!   the agent is cut off its source mid-stream, the windows measured.
//!
//! - [`broker_apis`]: the broker APIs Kafka's tools and clients use beside
//!   them (leader election, topic auto-creation), at the agent and at Kafka.
//!
//! The workloads themselves are in [`scenarios`] and [`connect`]. Each
//! test starts several JVMs beside the cluster's four, so the tests take
//! turns ([`scenarios::one_at_a_time`]); every wait is bounded and waits on
//! a condition.

#[path = "../common/mod.rs"]
mod common;

mod after_failover;
mod at_kafka;
mod at_the_agent;
mod broker_apis;
mod connect;
mod scenarios;
mod unplanned_failover;
