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
pub mod consumer_protocol;
pub mod shards;
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

/// How long a connection waits beyond the coordinator's own deadline
/// before it gives up on a reply (only if the coordinator went away).
const WAIT_MARGIN: Duration = Duration::from_secs(5);

pub struct JoinRequest {
    pub group_id: String,
    /// Empty for a member's first join.
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a first join gets MEMBER_ID_REQUIRED and an id.
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct JoinResult {
    pub error: i16,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Every member's (id, metadata for the chosen protocol); leader only.
    pub members: Vec<(String, Bytes)>,
}

impl JoinResult {
    pub(crate) fn error(error: i16, member_id: &str) -> Self {
        Self {
            error,
            generation: -1,
            member_id: member_id.to_owned(),
            ..Self::default()
        }
    }
}

pub struct SyncRequest {
    pub group_id: String,
    pub generation: i32,
    pub member_id: String,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's assignments (empty from followers).
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub(crate) fn error(error: i16) -> Self {
        Self {
            error,
            ..Self::default()
        }
    }
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

struct Member {
    id: String,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    awaiting_join: Option<async_channel::Sender<JoinResult>>,
    awaiting_sync: Option<async_channel::Sender<SyncResult>>,
    /// When the member is removed unless it heartbeats (ignored while it
    /// waits in a join or sync: the phase's own deadline covers it).
    session_deadline: Instant,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    fn keep_alive(&mut self, now: Instant) {
        self.session_deadline = now + self.session_timeout;
    }
}

struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    /// In join order: the first is the leader unless the leader is kept.
    members: Vec<Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pending: HashMap<String, Instant>,
    /// When PreparingRebalance ends even if not every member rejoined.
    rebalance_deadline: Option<Instant>,
}

impl Group {
    fn new() -> Self {
        Self {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: Vec::new(),
            pending: HashMap::new(),
            rebalance_deadline: None,
        }
    }

    fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    fn member_mut(&mut self, id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    /// Protocols every member supports, in the first member's order.
    fn candidates(&self) -> Vec<&str> {
        let Some(first) = self.members.first() else {
            return Vec::new();
        };
        first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|p| self.members.iter().all(|m| m.supports(p)))
            .collect()
    }

    /// Whether a joining member's protocols fit the group (Kafka's
    /// `supportsProtocols`): any for an empty group, else the same type and
    /// a protocol every other member supports.
    fn supports(&self, member_id: &str, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        let others: Vec<&Member> = self.members.iter().filter(|m| m.id != member_id).collect();
        if others.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(p, _)| others.iter().all(|m| m.supports(p)))
    }

    /// Each member votes for its most preferred candidate; most votes wins,
    /// ties go to the first member's preference.
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidates();
        let votes = |c: &str| {
            self.members
                .iter()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .find(|(p, _)| candidates.contains(&p.as_str()))
                        .map(|(p, _)| p.as_str())
                        == Some(c)
                })
                .count()
        };
        let mut best: Option<(&str, usize)> = None;
        for &c in &candidates {
            let v = votes(c);
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((c, v));
            }
        }
        best.map(|(c, _)| c.to_owned())
    }

    fn join_result(&self, member: &Member) -> JoinResult {
        let is_leader = self.leader.as_deref() == Some(member.id.as_str());
        let protocol = self.protocol_name.clone().unwrap_or_default();
        JoinResult {
            error: NONE,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member.id.clone(),
            members: if is_leader {
                self.members
                    .iter()
                    .map(|m| (m.id.clone(), m.metadata(&protocol)))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn sync_result(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: NONE,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.iter().all(|m| m.awaiting_join.is_some())
    }

    /// Starts a rebalance: members waiting for assignments are told to
    /// rejoin, and the join phase waits for everyone (bounded by the
    /// longest rebalance timeout).
    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state == GroupState::CompletingRebalance {
            for m in &mut self.members {
                m.assignment = Bytes::new();
                if let Some(tx) = m.awaiting_sync.take() {
                    let _ = tx.try_send(SyncResult::error(REBALANCE_IN_PROGRESS));
                }
            }
        }
        let timeout = self
            .members
            .iter()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.state = GroupState::PreparingRebalance;
        self.rebalance_deadline = Some(now + timeout);
        self.try_complete_join(now);
    }

    fn try_complete_join(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance && self.all_joined() {
            self.complete_join(now);
        }
    }

    /// Ends the join phase: members that did not rejoin are dropped, the
    /// generation advances, a protocol is chosen, and every waiting member
    /// gets its answer (the leader with everyone's metadata).
    fn complete_join(&mut self, now: Instant) {
        self.members.retain(|m| m.awaiting_join.is_some());
        if self.leader.as_ref().is_none_or(|l| self.member(l).is_none()) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        self.generation += 1;
        self.rebalance_deadline = None;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol_type = None;
            self.protocol_name = None;
            return;
        }
        self.protocol_name = self.select_protocol();
        self.state = GroupState::CompletingRebalance;
        let results: Vec<JoinResult> = self.members.iter().map(|m| self.join_result(m)).collect();
        for (m, result) in self.members.iter_mut().zip(results) {
            m.keep_alive(now);
            if let Some(tx) = m.awaiting_join.take() {
                let _ = tx.try_send(result);
            }
        }
    }

    /// Removes a member (left or expired) and moves the group on.
    fn remove_member(&mut self, id: &str, now: Instant) {
        let Some(i) = self.members.iter().position(|m| m.id == id) else {
            return;
        };
        let member = self.members.remove(i);
        if let Some(tx) = member.awaiting_join {
            let _ = tx.try_send(JoinResult::error(UNKNOWN_MEMBER_ID, id));
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(now),
            GroupState::PreparingRebalance => self.try_complete_join(now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let sessions = self
            .members
            .iter()
            .filter(|m| m.awaiting_join.is_none() && m.awaiting_sync.is_none())
            .map(|m| m.session_deadline);
        sessions
            .chain(self.pending.values().copied())
            .chain(self.rebalance_deadline)
            .min()
    }
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

/// A group id whose offsets can be stored: not empty, and within a Kafka
/// STRING (the records' keys hold it with an i16 length). A flexible
/// request's compact string may carry a longer one.
fn storable_group_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= ringmirror_storage::limits::STRING_BYTES_MAX
}

/// Writes `offsets` with `write`, all but those whose metadata is over
/// Kafka's `offset.metadata.max.bytes` (OFFSET_METADATA_TOO_LARGE): an
/// error code per partition, in order; a failed write is
/// COORDINATOR_NOT_AVAILABLE (retriable) for each it held.
fn store_offsets(
    shard: usize,
    group_id: &str,
    offsets: Vec<((String, i32), CommittedOffset)>,
    write: impl FnOnce(Vec<((String, i32), CommittedOffset)>) -> store::StoreResult<()>,
) -> Vec<i16> {
    let mut codes = Vec::with_capacity(offsets.len());
    let mut accepted = Vec::with_capacity(offsets.len());
    for (tp, v) in offsets {
        if v.metadata.len() > store::METADATA_MAX_BYTES {
            codes.push(OFFSET_METADATA_TOO_LARGE);
        } else {
            codes.push(NONE);
            accepted.push((tp, v));
        }
    }
    if let Err(e) = write(accepted) {
        tracing::error!(shard, group = group_id, error = %e, "cannot store offsets");
        for c in codes.iter_mut().filter(|c| **c == NONE) {
            *c = COORDINATOR_NOT_AVAILABLE;
        }
    }
    codes
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

    /// A new member id: the client id and a unique suffix, as Kafka's.
    fn new_member_id(&mut self, client_id: &str) -> String {
        self.member_seq += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let uuid = uuid::Uuid::from_u64_pair(nanos, (self.member_seq << 16) | self.shard as u64);
        format!("{client_id}-{uuid}")
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

    pub fn join(&mut self, req: JoinRequest, now: Instant) -> Reply<JoinResult> {
        let group_id = req.group_id.clone();
        let reply = self.join_inner(req, now);
        // A refused first join leaves no group behind.
        self.forget_if_unused(&group_id);
        self.deadlines_changed.notify(usize::MAX);
        reply
    }

    fn join_inner(&mut self, req: JoinRequest, now: Instant) -> Reply<JoinResult> {
        let fail = |code: i16| Reply::Now(JoinResult::error(code, &req.member_id));
        if req.group_id.is_empty() {
            return fail(INVALID_GROUP_ID);
        }
        if self.shares.contains(&req.group_id) {
            // Kafka: "Group exists but it's not a consumer group".
            return Reply::Now(JoinResult::error(INCONSISTENT_GROUP_PROTOCOL, ""));
        }
        if !self.yield_empty_consumer_group(&req.group_id) {
            // Kafka with `group.consumer.migration.policy=disabled`: no
            // classic member in a consumer group with members (Kafka 4's
            // online migration is not done here).
            return fail(INCONSISTENT_GROUP_PROTOCOL);
        }
        if !(self.config.min_session_timeout_ms..=self.config.max_session_timeout_ms).contains(&req.session_timeout_ms)
        {
            return fail(INVALID_SESSION_TIMEOUT);
        }
        if !req.member_id.is_empty() && !self.groups.contains_key(&req.group_id) {
            return fail(UNKNOWN_MEMBER_ID);
        }
        let new_id = req.member_id.is_empty().then(|| self.new_member_id(&req.client_id));
        let group = self.groups.entry(req.group_id.clone()).or_insert_with(Group::new);
        if !group.supports(&req.member_id, &req.protocol_type, &req.protocols) {
            return fail(INCONSISTENT_GROUP_PROTOCOL);
        }
        let session_timeout = ms(req.session_timeout_ms);
        let rebalance_timeout = if req.rebalance_timeout_ms > 0 {
            ms(req.rebalance_timeout_ms)
        } else {
            session_timeout
        };
        let (tx, rx) = async_channel::bounded(1);
        if let Some(id) = new_id {
            if req.require_known_member_id {
                // The client rejoins with this id; until then it counts as
                // a member the join phase waits for.
                group.pending.insert(id.clone(), now + session_timeout);
                return Reply::Now(JoinResult::error(MEMBER_ID_REQUIRED, &id));
            }
            return Self::add_member(group, id, req, session_timeout, rebalance_timeout, tx, rx, now);
        }
        if group.pending.remove(&req.member_id).is_some() {
            let id = req.member_id.clone();
            return Self::add_member(group, id, req, session_timeout, rebalance_timeout, tx, rx, now);
        }
        let state = group.state;
        let is_leader = group.leader.as_deref() == Some(req.member_id.as_str());
        let Some(member) = group.member_mut(&req.member_id) else {
            return fail(UNKNOWN_MEMBER_ID);
        };
        let same_protocols = member.protocols == req.protocols;
        member.protocols = req.protocols;
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        member.session_timeout = session_timeout;
        member.rebalance_timeout = rebalance_timeout;
        match state {
            GroupState::PreparingRebalance => {
                member.awaiting_join = Some(tx);
                let wait = group
                    .rebalance_deadline
                    .map_or(rebalance_timeout, |d| d.saturating_duration_since(now));
                group.try_complete_join(now);
                Reply::Wait(rx, wait + WAIT_MARGIN)
            }
            // A member that got its join answer rejoins with nothing new:
            // the same answer again, no rebalance.
            GroupState::CompletingRebalance | GroupState::Stable
                if same_protocols && !(state == GroupState::Stable && is_leader) =>
            {
                member.keep_alive(now);
                let member = group.member(&req.member_id).expect("found above");
                Reply::Now(group.join_result(member))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                member.awaiting_join = Some(tx);
                let wait = member.rebalance_timeout;
                group.prepare_rebalance(now);
                Reply::Wait(rx, wait + WAIT_MARGIN)
            }
            GroupState::Empty | GroupState::Dead => fail(UNKNOWN_MEMBER_ID),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add_member(
        group: &mut Group,
        id: String,
        req: JoinRequest,
        session_timeout: Duration,
        rebalance_timeout: Duration,
        tx: async_channel::Sender<JoinResult>,
        rx: async_channel::Receiver<JoinResult>,
        now: Instant,
    ) -> Reply<JoinResult> {
        if group.members.is_empty() {
            group.protocol_type = Some(req.protocol_type.clone());
        }
        group.members.push(Member {
            id,
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout,
            rebalance_timeout,
            protocols: req.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(tx),
            awaiting_sync: None,
            session_deadline: now + session_timeout,
        });
        if group.state == GroupState::PreparingRebalance {
            group.try_complete_join(now);
        } else {
            group.prepare_rebalance(now);
        }
        let wait = group
            .rebalance_deadline
            .map_or(rebalance_timeout, |d| d.saturating_duration_since(now));
        Reply::Wait(rx, wait + WAIT_MARGIN)
    }

    pub fn sync(&mut self, req: SyncRequest, now: Instant) -> Reply<SyncResult> {
        let fail = |code: i16| Reply::Now(SyncResult::error(code));
        let Some(group) = self.groups.get_mut(&req.group_id) else {
            return fail(UNKNOWN_MEMBER_ID);
        };
        let Some(member) = group.member(&req.member_id) else {
            return fail(UNKNOWN_MEMBER_ID);
        };
        if req.generation != group.generation {
            return fail(ILLEGAL_GENERATION);
        }
        let mismatch = |ours: &Option<String>, theirs: &Option<String>| theirs.is_some() && theirs != ours;
        if mismatch(&group.protocol_type, &req.protocol_type) || mismatch(&group.protocol_name, &req.protocol_name) {
            return fail(INCONSISTENT_GROUP_PROTOCOL);
        }
        let wait = member.rebalance_timeout + WAIT_MARGIN;
        match group.state {
            GroupState::Empty | GroupState::Dead => fail(UNKNOWN_MEMBER_ID),
            GroupState::PreparingRebalance => fail(REBALANCE_IN_PROGRESS),
            GroupState::Stable => {
                let assignment = member.assignment.clone();
                group.member_mut(&req.member_id).expect("found above").keep_alive(now);
                Reply::Now(group.sync_result(assignment))
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = async_channel::bounded(1);
                group.member_mut(&req.member_id).expect("found above").awaiting_sync = Some(tx);
                if group.leader.as_deref() == Some(req.member_id.as_str()) {
                    let assignments: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                    group.state = GroupState::Stable;
                    let result = group.sync_result(Bytes::new());
                    for m in &mut group.members {
                        m.assignment = assignments.get(&m.id).cloned().unwrap_or_default();
                        m.keep_alive(now);
                        if let Some(tx) = m.awaiting_sync.take() {
                            let _ = tx.try_send(SyncResult {
                                assignment: m.assignment.clone(),
                                ..result.clone()
                            });
                        }
                    }
                }
                self.deadlines_changed.notify(usize::MAX);
                Reply::Wait(rx, wait)
            }
        }
    }

    pub fn heartbeat(&mut self, group_id: &str, member_id: &str, generation: i32, now: Instant) -> i16 {
        let Some(group) = self.groups.get_mut(group_id) else {
            return UNKNOWN_MEMBER_ID;
        };
        let state = group.state;
        let group_generation = group.generation;
        let Some(member) = group.member_mut(member_id) else {
            return UNKNOWN_MEMBER_ID;
        };
        if generation != group_generation {
            return ILLEGAL_GENERATION;
        }
        match state {
            GroupState::Empty | GroupState::Dead => UNKNOWN_MEMBER_ID,
            GroupState::CompletingRebalance | GroupState::Stable => {
                member.keep_alive(now);
                NONE
            }
            GroupState::PreparingRebalance => {
                member.keep_alive(now);
                REBALANCE_IN_PROGRESS
            }
        }
    }

    /// Removes members (LeaveGroup): an error per member id, in order.
    pub fn leave(&mut self, group_id: &str, member_ids: &[String], now: Instant) -> Vec<i16> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return vec![UNKNOWN_MEMBER_ID; member_ids.len()];
        };
        let codes = member_ids
            .iter()
            .map(|id| {
                if group.pending.remove(id).is_some() {
                    group.try_complete_join(now);
                    NONE
                } else if group.member(id).is_some() {
                    group.remove_member(id, now);
                    NONE
                } else {
                    UNKNOWN_MEMBER_ID
                }
            })
            .collect();
        self.deadlines_changed.notify(usize::MAX);
        self.forget_if_unused(group_id);
        codes
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

    /// Why an offset commit (OffsetCommit or TxnOffsetCommit) to `group_id`
    /// is refused before its offsets are looked at, if it is: an id that
    /// cannot be stored, a share group's id (Kafka: "Group … is not a
    /// consumer group."), or, in a KIP-848 group, a member or epoch that is
    /// not current (the member's epoch, not a generation —
    /// Kafka's `ConsumerGroup.validateOffsetCommit`).
    fn commit_refusal(&self, group_id: &str, generation: i32, member_id: &str) -> Option<i16> {
        if !storable_group_id(group_id) {
            return Some(INVALID_GROUP_ID);
        }
        if self.shares.contains(group_id) {
            return Some(GROUP_ID_NOT_FOUND);
        }
        let code = self
            .consumer_groups
            .get(group_id)
            .map_or(NONE, |consumer| consumer.commit_error(member_id, generation));
        (code != NONE).then_some(code)
    }

    /// OffsetCommit: an error per partition, in order. Offsets are flushed
    /// to the log before this returns.
    pub fn commit(
        &mut self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<((String, i32), CommittedOffset)>,
        now: Instant,
    ) -> Vec<i16> {
        let all = |code: i16| vec![code; offsets.len()];
        if let Some(code) = self.commit_refusal(group_id, generation, member_id) {
            return all(code);
        }
        let created = match self.groups.get_mut(group_id) {
            _ if self.consumer_groups.contains_key(group_id) => false,
            // Simple (standalone) consumers commit without a generation.
            None if generation < 0 => {
                self.groups.insert(group_id.to_owned(), Group::new());
                true
            }
            None => return all(ILLEGAL_GENERATION),
            Some(g) if generation < 0 && g.state == GroupState::Empty => false,
            Some(g) => {
                let state = g.state;
                let group_generation = g.generation;
                let Some(member) = g.member_mut(member_id) else {
                    return all(UNKNOWN_MEMBER_ID);
                };
                if generation != group_generation {
                    return all(ILLEGAL_GENERATION);
                }
                if state == GroupState::CompletingRebalance {
                    return all(REBALANCE_IN_PROGRESS);
                }
                member.keep_alive(now);
                false
            }
        };
        let codes = store_offsets(self.shard, group_id, offsets, |accepted| {
            self.store.commit(group_id, accepted)
        });
        if created {
            self.forget_if_unused(group_id);
        }
        codes
    }

    /// Failover, before a partition becomes writable: a committed offset or
    /// share-group start offset past `log_end` — synced from a source that
    /// had records this mirror never received — is moved back to
    /// `log_end` (leader epoch unknown, metadata kept), flushed before this
    /// returns. Left as it was, a consumer resuming after failover would
    /// skip whatever producers write here between `log_end` and that
    /// offset. Idempotent. Returns how many offsets were moved.
    pub fn clamp_offsets_to_log_end(
        &mut self,
        topic: &str,
        partition: i32,
        log_end: i64,
        now_ms: i64,
    ) -> store::StoreResult<usize> {
        let tp = (topic.to_owned(), partition);
        let committed: Vec<(String, CommittedOffset)> = self
            .store
            .groups()
            .filter_map(|group| {
                let v = self.store.offsets(group)?.get(&tp)?;
                (v.offset > log_end).then(|| {
                    let clamped = CommittedOffset {
                        offset: log_end,
                        leader_epoch: share_store::NO_LEADER_EPOCH,
                        metadata: v.metadata.clone(),
                        commit_timestamp: now_ms,
                    };
                    (group.clone(), clamped)
                })
            })
            .collect();
        let share_groups: Vec<String> = self
            .shares
            .groups()
            .filter(|(_, g)| g.offsets.get(&tp).is_some_and(|v| v.start_offset > log_end))
            .map(|(group, _)| group.clone())
            .collect();
        let moved = committed.len() + share_groups.len();
        for (group, clamped) in committed {
            self.store.commit(&group, vec![(tp.clone(), clamped)])?;
        }
        for group in share_groups {
            self.shares.alter(&group, vec![(tp.clone(), log_end)], now_ms)?;
        }
        Ok(moved)
    }

    /// Committed offsets of `group_id`: of the given partitions (`None` for
    /// a partition without one), or all of them.
    pub fn committed(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<CommittedOffset>)> {
        let offsets = self.store.offsets(group_id);
        match partitions {
            Some(wanted) => wanted
                .iter()
                .map(|tp| (tp.clone(), offsets.and_then(|o| o.get(tp)).cloned()))
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|(tp, v)| (tp.clone(), Some(v.clone())))
                .collect(),
        }
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

    /// Whether `group_id` is a share group.
    pub fn is_share_group(&self, group_id: &str) -> bool {
        self.shares.contains(group_id)
    }

    /// AlterShareGroupOffsets of the partitions this agent serves (the
    /// caller answers the others): sets their start offsets, creating the
    /// share group if need be, flushed before this returns. As Kafka's
    /// `GroupMetadataManager.alterShareGroupOffsets`: an id of a group of
    /// another type is refused with GROUP_ID_NOT_FOUND (a share group here
    /// is always Empty, so NON_EMPTY_GROUP does not arise). Nothing to set
    /// creates nothing.
    pub fn alter_share_offsets(
        &mut self,
        group_id: &str,
        offsets: Vec<((String, i32), i64)>,
        now_ms: i64,
    ) -> Result<(), i16> {
        if !storable_group_id(group_id) {
            return Err(INVALID_GROUP_ID);
        }
        if self.groups.contains_key(group_id) || self.consumer_groups.contains_key(group_id) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        if offsets.is_empty() {
            return Ok(());
        }
        self.shares.alter(group_id, offsets, now_ms).map_err(|e| {
            tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot store share-group start offsets");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// Start offsets of `group_id`: of the given partitions (`None` for a
    /// partition without one), or all of them. A group that is not a
    /// share group has none (Kafka answers such a group without an
    /// error, every start offset uninitialized).
    pub fn share_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[(String, i32)]>,
    ) -> Vec<((String, i32), Option<ShareStartOffset>)> {
        let offsets = self.shares.group(group_id).map(|g| &g.offsets);
        match partitions {
            Some(wanted) => wanted
                .iter()
                .map(|tp| (tp.clone(), offsets.and_then(|o| o.get(tp)).copied()))
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|(tp, v)| (tp.clone(), Some(*v)))
                .collect(),
        }
    }

    /// DeleteShareGroupOffsets of `topics`: the topics whose start offsets
    /// were deleted (the rest had none); the group stays. A group that is
    /// not a share group: GROUP_ID_NOT_FOUND.
    pub fn delete_share_offsets(&mut self, group_id: &str, topics: &[String]) -> Result<Vec<String>, i16> {
        if group_id.is_empty() {
            return Err(INVALID_GROUP_ID);
        }
        if !self.shares.contains(group_id) {
            return Err(GROUP_ID_NOT_FOUND);
        }
        self.shares.delete_topics(group_id, topics).map_err(|e| {
            tracing::error!(shard = self.shard, group = group_id, error = %e, "cannot delete share-group start offsets");
            COORDINATOR_NOT_AVAILABLE
        })
    }

    /// ShareGroupDescribe: the share group, or Kafka's error and message.
    pub fn describe_share_group(&self, group_id: &str) -> Result<ShareGroupDescription, (i16, String)> {
        if group_id.is_empty() {
            return Err((INVALID_GROUP_ID, "The group id must not be empty.".to_owned()));
        }
        if let Some(g) = self.shares.group(group_id) {
            return Ok(ShareGroupDescription {
                state: GroupState::Empty,
                group_epoch: g.epoch,
            });
        }
        let message = if self.groups.contains_key(group_id) || self.consumer_groups.contains_key(group_id) {
            format!("Group {group_id} is not a share group.")
        } else {
            format!("Group {group_id} not found.")
        };
        Err((GROUP_ID_NOT_FOUND, message))
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
