//! The classic consumer-group protocol on a shard's coordinator:
//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the state of a
//! classic group and its members (Empty → PreparingRebalance →
//! CompletingRebalance → Stable, as Kafka's `ClassicGroup`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::codes::*;
use super::{GroupCoordinator, GroupState, Reply, ms};

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

pub(super) struct Member {
    pub(super) id: String,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) awaiting_join: Option<async_channel::Sender<JoinResult>>,
    pub(super) awaiting_sync: Option<async_channel::Sender<SyncResult>>,
    /// When the member is removed unless it heartbeats (ignored while it
    /// waits in a join or sync: the phase's own deadline covers it).
    pub(super) session_deadline: Instant,
}

impl Member {
    pub(super) fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    pub(super) fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    pub(super) fn keep_alive(&mut self, now: Instant) {
        self.session_deadline = now + self.session_timeout;
    }
}

pub(super) struct Group {
    pub(super) state: GroupState,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) leader: Option<String>,
    /// In join order: the first is the leader unless the leader is kept.
    pub(super) members: Vec<Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, until they join or expire.
    pub(super) pending: HashMap<String, Instant>,
    /// When PreparingRebalance ends even if not every member rejoined.
    pub(super) rebalance_deadline: Option<Instant>,
}

impl Group {
    pub(super) fn new() -> Self {
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

    pub(super) fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub(super) fn member_mut(&mut self, id: &str) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.id == id)
    }

    /// Protocols every member supports, in the first member's order.
    pub(super) fn candidates(&self) -> Vec<&str> {
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
    pub(super) fn supports(&self, member_id: &str, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
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
    pub(super) fn select_protocol(&self) -> Option<String> {
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

    pub(super) fn join_result(&self, member: &Member) -> JoinResult {
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

    pub(super) fn sync_result(&self, assignment: Bytes) -> SyncResult {
        SyncResult {
            error: NONE,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    pub(super) fn all_joined(&self) -> bool {
        self.pending.is_empty() && self.members.iter().all(|m| m.awaiting_join.is_some())
    }

    /// Starts a rebalance: members waiting for assignments are told to
    /// rejoin, and the join phase waits for everyone (bounded by the
    /// longest rebalance timeout).
    pub(super) fn prepare_rebalance(&mut self, now: Instant) {
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

    pub(super) fn try_complete_join(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance && self.all_joined() {
            self.complete_join(now);
        }
    }

    /// Ends the join phase: members that did not rejoin are dropped, the
    /// generation advances, a protocol is chosen, and every waiting member
    /// gets its answer (the leader with everyone's metadata).
    pub(super) fn complete_join(&mut self, now: Instant) {
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
    pub(super) fn remove_member(&mut self, id: &str, now: Instant) {
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

    pub(super) fn next_deadline(&self) -> Option<Instant> {
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

impl GroupCoordinator {
    /// A new member id: the client id and a unique suffix, as Kafka's.
    pub(super) fn new_member_id(&mut self, client_id: &str) -> String {
        self.member_seq += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let uuid = uuid::Uuid::from_u64_pair(nanos, (self.member_seq << 16) | self.shard as u64);
        format!("{client_id}-{uuid}")
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
}
