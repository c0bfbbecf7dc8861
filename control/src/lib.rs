//! ringmirror's control plane: what the data plane does with each mirrored
//! partition, and when. Off the hot path; it drives the data plane through
//! the commands and events `ringmirror-dataplane` exports.
//!
//! * [`state`] — the mirror partition state machine (KIP-1279's states).
//! * [`epochs`] — the destination leader epoch rules (DLE > SLE).
//!
//! The coordinator (`__mirror_state`), failback and the admin API are built
//! on these (issue 5); the failover data path itself is
//! `Agent::end_mirroring` on top of `PartitionLog::end_mirroring`.

pub mod epochs;
pub mod mirror;
pub mod state;
