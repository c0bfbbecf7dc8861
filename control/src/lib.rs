//! ringmirror's control plane: what the data plane does with each mirrored
//! partition, and when. Off the hot path; it drives the data plane through
//! the commands and events `ringmirror-dataplane` exports, and never the
//! other way round.
//!
//! * [`coordinator`] — [`coordinator::MirrorCoordinator`]: owns the mirrors
//!   and partitions, drives the state machine, writes `__mirror_state`
//!   first, steers the shards, runs each mirror's metadata round, answers
//!   the admin API.
//! * [`metadata_sync`] — the metadata sync steps of a round (KIP-1279's
//!   MirrorMetadataManager): topic configs, consumer and share group
//!   offsets, ACLs, deletion confirmation.
//! * [`admin`] — the admin API: its vocabulary, the HTTP server, its
//!   authentication and TLS, `/metrics`.
//! * [`state`] — the mirror partition state machine (KIP-1279's states).
//! * [`state_store`] — `__mirror_state`: mirror definitions and partition
//!   states, persisted before they take effect.
//! * [`mirror`] — a mirror's definition and topic selection.
//!
//! The failover data path itself is the data plane's (`EndMirroring` on a
//! shard, on top of `PartitionLog::end_mirroring`).

#![forbid(unsafe_code)]

pub mod admin;
pub mod coordinator;
#[cfg(test)]
mod fake_broker;
pub mod metadata_sync;
pub mod mirror;
pub mod state;
pub mod state_store;
