//! ringmirror's control plane: what the data plane does with each mirrored
//! partition, and when. Off the hot path; it drives the data plane through
//! the commands and events `ringmirror-dataplane` exports.
//!
//! * [`state`] — the mirror partition state machine (KIP-1279's states).
//! * [`state_store`] — `__mirror_state`: mirror definitions and partition
//!   states, persisted before they take effect.
//! * [`epochs`] — the destination leader epoch rules (DLE > SLE).
//! * [`mirror`] — a mirror's definition and topic selection.
//! * [`coordinator`] — owns the mirrors and partitions: drives the state
//!   machine, writes `__mirror_state`, steers the shards, answers the admin API.
//! * [`deletion`] — when a topic absent at the source counts as deleted:
//!   several rounds, some minutes, by name and by id, never an ACL error.
//! * [`admin`] — the admin API's requests, answers and errors.
//! * [`http`] — the admin API server (HTTP/JSON), which hands requests to
//!   the coordinator as [`admin::AdminCall`]s.
//! * [`admin_auth`] — who may use the admin API: bearer tokens to callers
//!   (the admin token, principals), ClusterMirror ACLs per route and mirror.
//! * [`admin_tls`] — the admin API's listener, in clear or HTTPS.
//! * [`metrics`] — `/metrics`: a [`admin::MetricsSnapshot`] in Prometheus'
//!   text format.
//! * [`group_sync`] — consumer-group offsets from the source into our group
//!   coordinator, for mirrored partitions, skipping groups active here
//!   (share groups are detected and skipped).
//! * [`topic_config_sync`] — each mirrored topic's config overrides from the
//!   source (DescribeConfigs), minus a documented exclude list (throttles,
//!   placement, tiered storage), and what changed since the last round.
//! * [`acl_sync`] — the source's ACLs onto our listener, within the
//!   mirror's ACL include setting: missing ones created, extra ones deleted.
//!
//! The failover data path itself is the data plane's (`EndMirroring` on a
//! shard, on top of `PartitionLog::end_mirroring`).

pub mod acl_sync;
pub mod admin;
pub mod admin_auth;
pub mod admin_tls;
pub mod coordinator;
pub mod deletion;
pub mod epochs;
#[cfg(test)]
mod fake_broker;
pub mod group_sync;
pub mod http;
pub mod metrics;
pub mod mirror;
pub mod state;
pub mod state_store;
pub mod topic_config_sync;
