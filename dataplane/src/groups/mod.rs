//! The group coordinator: Kafka's classic consumer-group protocol
//! (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), committed offsets
//! (OffsetCommit, OffsetFetch) and group administration (ListGroups,
//! DescribeGroups, DeleteGroups) — what consumers use after a failover to
//! the mirror, and what group-offset sync writes into.
//!
//! A group lives on shard `hash(group id) % shards` ([`group_shard`]); all
//! its state is that shard's [`GroupCoordinator`], reached by connections on
//! any shard through a synchronous job ([`crate::kafka::groups`]). The state machine here is
//! synchronous and takes the time as an argument, so it is tested without
//! sockets or sleeping. A JoinGroup or SyncGroup that must wait for other
//! members gets a [`Reply::Wait`]: a channel the connection awaits (with a
//! bound) while the coordinator goes on; the coordinator sends into it when
//! the join or sync phase completes.
//!
//! States as Kafka's: Empty → PreparingRebalance (waiting for every known
//! member to rejoin, until the rebalance timeout; members that do not are
//! removed) → CompletingRebalance (waiting for the leader's assignments) →
//! Stable. Dead is reported for groups that do not exist (deleted ones are
//! removed). Members that stop heartbeating are removed after their session
//! timeout; [`GroupCoordinator::tick`] applies the deadlines and
//! [`GroupCoordinator::next_deadline`] says when it is next needed.
//!
//! Membership is kept in memory only (after a restart members rejoin, as
//! they do when a Kafka coordinator moves); committed offsets persist
//! ([`store`]). Static membership (`group.instance.id`) is not implemented:
//! such members are treated as dynamic ones.
//!
//! **Consumer groups** of KIP-848's protocol (ConsumerGroupHeartbeat,
//! server-side assignors) live beside the classic ones on the same shard
//! and share the offset store ([`consumer_protocol`], [`assignors`]).
//!
//! Offsets committed in a transaction (TxnOffsetCommit) wait for its end,
//! persisted pending in the offset store ([`txn_offsets`]).
//!
//! **Share groups** (KIP-932) are held for their start offsets only, as
//! Kafka's admin API sees them (AlterShareGroupOffsets,
//! DescribeShareGroupOffsets, DeleteShareGroupOffsets, ShareGroupDescribe,
//! ListGroups type "share", DeleteGroups), persisted in a log of their own
//! ([`share_store`]), so a mirror keeps them for failover and an agent
//! mirroring from this one can read them. There are no share consumers
//! here (ShareGroupHeartbeat, ShareFetch and ShareAcknowledge are not
//! served), so a share group is always Empty. A group id names one group
//! of one type: as in Kafka, an alter of a consumer group's id is refused
//! (GROUP_ID_NOT_FOUND), and so are a JoinGroup (INCONSISTENT_GROUP_PROTOCOL),
//! an OffsetCommit and an OffsetFetch (GROUP_ID_NOT_FOUND) of a share
//! group's id; DescribeGroups describes a share group as not found.

pub mod assignors;
mod classic;
pub mod consumer_protocol;
mod offsets;
pub mod shards;
mod share_groups;
pub mod share_store;
pub mod store;
pub mod txn_offsets;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use event_listener::Event;

pub use shards::{clamp_offsets_on_every_shard, shard_coordinator};
pub use share_store::{ShareOffsetStore, ShareStartOffset};
pub use store::{CommittedOffset, GroupOffsets, OffsetStore};

use self::classic::Group;
pub use self::classic::{JoinRequest, JoinResult, SyncRequest, SyncResult};
use self::offsets::store_offsets;

use codes::*;
/// Kafka's error codes, by name.
pub use ringmirror_protocol::error_codes as codes;

/// The shard that owns `group` (FNV-1a, stable across runs, like the
/// placement of partitions).
pub fn group_shard(group: &str, shards: usize) -> usize {
    crate::partition::shard_for_key(group, shards)
}

/// Settings, named after Kafka's broker configs.
#[derive(Debug, Clone, Copy)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// The offsets log is compacted once larger than this (and more than
    /// twice its live records).
    pub compact_min_bytes: u64,
    /// `group.consumer.session.timeout.ms`
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_heartbeat_interval_ms: i32,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6000,
            max_session_timeout_ms: 1_800_000,
            compact_min_bytes: 16 << 20,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka uses in ListGroups and DescribeGroups.
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::PreparingRebalance => "PreparingRebalance",
            Self::CompletingRebalance => "CompletingRebalance",
            Self::Stable => "Stable",
            Self::Dead => "Dead",
        }
    }
}

/// An answer now, or a channel that will carry it and how long to wait.
pub enum Reply<T> {
    Now(T),
    Wait(async_channel::Receiver<T>, Duration),
}

/// The group types here (Kafka's `Group.GroupType`, as ListGroups v5
/// names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    /// The classic consumer-group protocol (JoinGroup, SyncGroup, …).
    Classic,
    /// A KIP-932 share group (start offsets only here).
    Share,
    /// A KIP-848 consumer group ([`consumer_protocol`]).
    Consumer,
}

impl GroupType {
    pub fn name(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Share => "share",
            Self::Consumer => "consumer",
        }
    }
}

/// The protocol type Kafka lists share groups with.
pub const SHARE_PROTOCOL_TYPE: &str = "share";

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub group_type: GroupType,
    pub protocol_type: String,
    /// The state's name, as Kafka lists it (a classic group's
    /// [`GroupState`], a consumer group's
    /// [`consumer_protocol::ConsumerGroupState`]).
    pub state: &'static str,
}

/// A share group as ShareGroupDescribe shows it (always Empty here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    pub state: GroupState,
    /// Bumped by every AlterShareGroupOffsets.
    pub group_epoch: i32,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    /// The chosen protocol, when Stable ("" otherwise, as Kafka).
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    /// Metadata and assignment are shown only when the group is Stable.
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// One shard's groups and their committed offsets.
pub struct GroupCoordinator {
    shard: usize,
    config: GroupConfig,
    groups: HashMap<String, Group>,
    store: OffsetStore,
    /// Share groups and their start offsets; never a name in `groups`.
    shares: ShareOffsetStore,
    member_seq: u64,
    /// Notified when a deadline may have moved earlier, so the timer task
    /// (in [`crate::kafka::groups`]) recomputes its sleep.
    deadlines_changed: Event,
    /// KIP-848 consumer groups; never a name in `groups` or `shares`.
    consumer_groups: HashMap<String, consumer_protocol::ConsumerGroup>,
}

/// The ids of the groups with a deadline due at `now`.
fn due_groups<G>(groups: &HashMap<String, G>, now: Instant, deadline: impl Fn(&G) -> Option<Instant>) -> Vec<String> {
    groups
        .iter()
        .filter(|(_, g)| deadline(g).is_some_and(|d| d <= now))
        .map(|(id, _)| id.clone())
        .collect()
}

fn ms(v: i32) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

impl GroupCoordinator {
    /// Opens shard `shard`'s offsets and share groups under `data_dir`;
    /// every group with committed offsets exists, Empty.
    pub fn open(data_dir: &Path, shard: usize, config: GroupConfig) -> store::StoreResult<Self> {
        let store = OffsetStore::open(data_dir, shard, config.compact_min_bytes)?;
        let shares = ShareOffsetStore::open(data_dir, shard, config.compact_min_bytes)?;
        let groups: HashMap<String, Group> = store.groups().map(|g| (g.clone(), Group::new())).collect();
        for (group, _) in shares.groups().filter(|(g, _)| groups.contains_key(*g)) {
            // Never written so (each type's writes check the other); the
            // share group is served, the consumer group's offsets are kept.
            tracing::warn!(shard, group, "a group id with both committed and share-group offsets");
        }
        Ok(Self {
            shard,
            config,
            groups,
            store,
            shares,
            member_seq: 0,
            deadlines_changed: Event::new(),
            consumer_groups: HashMap::new(),
        })
    }

    pub fn deadlines_changed(&self) -> &Event {
        &self.deadlines_changed
    }

    /// Drops a group that holds nothing: no members, no pending members,
    /// no offsets.
    fn forget_if_unused(&mut self, group_id: &str) {
        let unused = self
            .groups
            .get(group_id)
            .is_some_and(|g| g.state == GroupState::Empty && g.members.is_empty() && g.pending.is_empty())
            && self.store.offsets(group_id).is_none();
        if unused {
            self.groups.remove(group_id);
        }
    }

    /// Applies the deadlines due at `now`: expired sessions and pending
    /// members are removed, join phases past their rebalance timeout end.
    pub fn tick(&mut self, now: Instant) {
        self.tick_consumer_groups(now);
        for id in due_groups(&self.groups, now, Group::next_deadline) {
            let group = self.groups.get_mut(&id).expect("listed above");
            group.pending.retain(|_, deadline| *deadline > now);
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|m| m.awaiting_join.is_none() && m.awaiting_sync.is_none() && m.session_deadline <= now)
                .map(|m| m.id.clone())
                .collect();
            for member in expired {
                tracing::info!(group = id, member, "member session expired");
                group.remove_member(&member, now);
            }
            if group.state == GroupState::PreparingRebalance && group.rebalance_deadline.is_some_and(|d| d <= now) {
                group.complete_join(now);
            } else {
                group.try_complete_join(now);
            }
            self.forget_if_unused(&id);
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        let classic = self.groups.values().filter_map(Group::next_deadline).min();
        classic.into_iter().chain(self.next_consumer_group_deadline()).min()
    }

    /// Every group, of both types, by id.
    pub fn list(&self) -> Vec<GroupListing> {
        let classic = self.groups.iter().map(|(id, g)| GroupListing {
            group_id: id.clone(),
            group_type: GroupType::Classic,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            state: g.state.name(),
        });
        let share = self.shares.groups().map(|(id, _)| GroupListing {
            group_id: id.clone(),
            group_type: GroupType::Share,
            protocol_type: SHARE_PROTOCOL_TYPE.to_owned(),
            state: GroupState::Empty.name(),
        });
        let mut out: Vec<GroupListing> = classic.chain(share).chain(self.consumer_group_listings()).collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }
    /// A group's description; `None` when it does not exist.
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let g = self.groups.get(group_id)?;
        let stable = g.state == GroupState::Stable;
        let protocol = g.protocol_name.clone().unwrap_or_default();
        Some(GroupDescription {
            state: g.state,
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable { protocol.clone() } else { String::new() },
            members: g
                .members
                .iter()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable { m.metadata(&protocol) } else { Bytes::new() },
                    assignment: if stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        })
    }

    /// DeleteGroups: only an Empty group, with its offsets (tombstones);
    /// a share group (always Empty) with its start offsets.
    pub fn delete(&mut self, group_id: &str) -> i16 {
        if group_id.is_empty() {
            return INVALID_GROUP_ID;
        }
        if self.shares.contains(group_id) {
            // Always Empty here: deleted with its start offsets.
            return match self.shares.delete_group(group_id) {
                Ok(()) => NONE,
                Err(e) => {
                    tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot delete a share group");
                    COORDINATOR_NOT_AVAILABLE
                }
            };
        }
        let empty = match (self.consumer_groups.get(group_id), self.groups.get(group_id)) {
            (Some(consumer), _) => consumer.members.is_empty(),
            (None, Some(classic)) => classic.state == GroupState::Empty && classic.members.is_empty(),
            (None, None) => return GROUP_ID_NOT_FOUND,
        };
        if !empty {
            return NON_EMPTY_GROUP;
        }
        if let Err(e) = self.store.delete_group(group_id) {
            tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot delete group offsets");
            return COORDINATOR_NOT_AVAILABLE;
        }
        self.consumer_groups.remove(group_id);
        self.groups.remove(group_id);
        NONE
    }
}

#[cfg(test)]
mod tests;
