//! KIP-848's consumer group protocol on the group's shard: the state
//! machine behind ConsumerGroupHeartbeat and ConsumerGroupDescribe, after
//! Kafka's `GroupMetadataManager.consumerGroupHeartbeat`,
//! `ConsumerGroupMember` and `CurrentAssignmentBuilder`.
//!
//! A member joins with epoch 0, heartbeats with the epoch it was last
//! given, leaves with -1 (-2 for a static member). A change of the group's
//! members or subscriptions, or of a subscribed topic's partitions, bumps
//! the group epoch; the target assignment is then recomputed by the
//! group's assignor ([`super::assignors`]) at that epoch. Each member is
//! reconciled towards its target: partitions it must give up are revoked
//! first (the member keeps its epoch until it no longer reports them), and
//! a partition is handed to its new owner only once no other member holds
//! it — so no partition is ever owned by two members at once.
//!
//! Membership is in memory (after a restart members rejoin); committed
//! offsets are the shard's one offset store, shared with classic groups,
//! so offsets synced from a mirror's source apply to consumer-protocol
//! members too. A group id names one group: an empty classic group (one
//! that only holds offsets, as synced groups do) becomes a consumer group
//! when a consumer-protocol member joins, and an empty consumer group a
//! classic one when a classic member joins; otherwise the other protocol
//! is refused as Kafka refuses it with `group.consumer.migration.policy`
//! disabled (Kafka 4 migrates such groups online by default; not done
//! here). A static member (an instance id) that
//! leaves with -2 keeps its partitions until its session runs out; a member
//! joining with its instance id takes them over, and is refused
//! (UNRELEASED_INSTANCE_ID) while the holder is still in the group. Not
//! done here: regular-expression subscriptions (refused with
//! INVALID_REQUEST) and rack-aware assignment.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::assignors::{self, ASSIGNORS, Assignment, AssignmentSpec};
use super::codes::*;
use super::{GroupCoordinator, GroupListing, GroupType, due_groups, ms};

/// The protocol type Kafka lists consumer groups with.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";
/// Member epochs with a meaning (Kafka's `ConsumerGroupHeartbeatRequest`).
pub const JOIN_GROUP_MEMBER_EPOCH: i32 = 0;
pub const LEAVE_GROUP_MEMBER_EPOCH: i32 = -1;
pub const LEAVE_GROUP_STATIC_MEMBER_EPOCH: i32 = -2;

/// A topic as the assignors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicMetadata {
    pub id: Uuid,
    pub partitions: i32,
}

/// A ConsumerGroupHeartbeat, decoded.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatRequest {
    pub group_id: String,
    /// Empty at v0's first join: the coordinator chooses one.
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns; `None`: unchanged since the last
    /// heartbeat that said.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// A ConsumerGroupHeartbeat's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeartbeatResult {
    pub error: i16,
    pub error_message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when they changed or it asked in full.
    pub assignment: Option<Assignment>,
}

impl HeartbeatResult {
    fn error(error: i16, message: impl Into<String>) -> Self {
        Self {
            error,
            error_message: Some(message.into()),
            ..Self::default()
        }
    }
}

/// Kafka's `MemberState` of a consumer-protocol member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Owns its target at the target epoch.
    Stable,
    /// Must first give up `pending_revocation`.
    UnrevokedPartitions,
    /// Waits for partitions other members still hold.
    UnreleasedPartitions,
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    previous_epoch: i32,
    pub state: MemberState,
    pub subscribed_topics: BTreeSet<String>,
    pub server_assignor: Option<String>,
    rebalance_timeout: Duration,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
    session_deadline: Instant,
    /// Set while it must revoke: fenced if it has not by then.
    revocation_deadline: Option<Instant>,
}

/// Kafka's `ConsumerGroup.ConsumerGroupState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    /// The group epoch is ahead of the target assignment's.
    Assigning,
    /// Some member is not yet at the target.
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Assigning => "Assigning",
            Self::Reconciling => "Reconciling",
            Self::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
    /// The epoch of the member holding each partition, assigned or being
    /// revoked (Kafka's `currentPartitionEpoch`); absent: free.
    partition_epochs: HashMap<(Uuid, i32), i32>,
    /// The subscribed topics that exist, by name.
    subscription: BTreeMap<String, TopicMetadata>,
    /// The topic names members subscribe to; `None` after a member came,
    /// went or changed its subscription (recomputed on the next refresh,
    /// so a steady heartbeat costs a lookup per subscribed topic, not a
    /// walk over every member).
    subscribed_names: Option<BTreeSet<String>>,
}

/// A consumer group as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct ConsumerGroupDescription {
    pub state: ConsumerGroupState,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: &'static str,
    pub members: Vec<ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
}

fn contains(a: &Assignment, topic: &Uuid, partition: i32) -> bool {
    a.get(topic).is_some_and(|ps| ps.contains(&partition))
}

/// Whether every partition of `owned` is in `of` (Kafka's `isSubset`; an
/// unreported set is not a subset).
fn is_subset(owned: Option<&Assignment>, of: &Assignment) -> bool {
    owned.is_some_and(|owned| owned.iter().all(|(t, ps)| ps.iter().all(|p| contains(of, t, *p))))
}

/// Whether the member still reports a partition of `revoking` (unreported
/// owned partitions count as still owned, as Kafka's
/// `CurrentAssignmentBuilder.ownsRevokedPartitions`).
fn owns_any(owned: Option<&Assignment>, revoking: &Assignment) -> bool {
    owned.is_none_or(|owned| owned.iter().any(|(t, ps)| ps.iter().any(|p| contains(revoking, t, *p))))
}

impl ConsumerGroup {
    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.epoch != self.assignment_epoch)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The assignor the most members asked for; the default when none did
    /// (Kafka's `ModernGroup.preferredServerAssignor`).
    pub fn assignor(&self) -> &'static str {
        let mut votes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for name in self.members.values().filter_map(|m| m.server_assignor.as_deref()) {
            if let Some(known) = ASSIGNORS.iter().find(|a| **a == name) {
                *votes.entry(known).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .map_or(ASSIGNORS[0], |(name, _)| name)
    }

    fn release(&mut self, member: &ConsumerMember) {
        for a in [&member.assigned, &member.pending_revocation] {
            for (t, ps) in a {
                for p in ps {
                    self.partition_epochs.remove(&(*t, *p));
                }
            }
        }
    }

    fn hold(&mut self, member: &ConsumerMember) {
        for a in [&member.assigned, &member.pending_revocation] {
            for (t, ps) in a {
                for p in ps {
                    let previous = self.partition_epochs.insert((*t, *p), member.epoch);
                    debug_assert!(previous.is_none(), "partition {t} {p} held twice");
                }
            }
        }
    }

    /// Stores `member`, keeping the partition epochs in step.
    fn put(&mut self, member: ConsumerMember) {
        match self.members.remove(&member.id) {
            Some(old) => {
                self.release(&old);
                if old.subscribed_topics != member.subscribed_topics {
                    self.subscribed_names = None;
                }
            }
            None => self.subscribed_names = None,
        }
        self.hold(&member);
        self.members.insert(member.id.clone(), member);
    }

    fn remove(&mut self, member_id: &str) -> bool {
        let Some(old) = self.members.remove(member_id) else {
            return false;
        };
        self.release(&old);
        self.subscribed_names = None;
        self.target.remove(member_id);
        self.group_epoch += 1;
        true
    }

    /// The away static member `old` replaced by `new_id`: its partitions,
    /// target and epoch (the one before it left) go to the new member; the
    /// group epoch stays.
    fn take_over(&mut self, old: &str, new_id: &str) -> ConsumerMember {
        let mut member = self.members.remove(old).expect("a member");
        self.release(&member);
        self.subscribed_names = None;
        if let Some(target) = self.target.remove(old) {
            self.target.insert(new_id.to_owned(), target);
        }
        member.id = new_id.to_owned();
        member.epoch = member.previous_epoch;
        member
    }

    /// Re-reads the subscribed topics; a change bumps the group epoch.
    fn refresh_subscription(&mut self, topics: &dyn Fn(&str) -> Option<TopicMetadata>) -> bool {
        let members = &self.members;
        let names = self.subscribed_names.get_or_insert_with(|| {
            members
                .values()
                .flat_map(|m| m.subscribed_topics.iter().cloned())
                .collect()
        });
        let subscription: BTreeMap<String, TopicMetadata> = names
            .iter()
            .filter_map(|name| topics(name).map(|t| (name.clone(), t)))
            .collect();
        let changed = subscription != self.subscription;
        self.subscription = subscription;
        changed
    }

    fn update_target(&mut self) {
        let subscriptions: BTreeMap<String, BTreeSet<Uuid>> = self
            .members
            .values()
            .map(|m| {
                let ids = m
                    .subscribed_topics
                    .iter()
                    .filter_map(|n| self.subscription.get(n))
                    .map(|t| t.id)
                    .collect();
                (m.id.clone(), ids)
            })
            .collect();
        let partition_counts: BTreeMap<Uuid, i32> = self.subscription.values().map(|t| (t.id, t.partitions)).collect();
        self.target = assignors::assign(
            self.assignor(),
            &AssignmentSpec {
                subscriptions: &subscriptions,
                partition_counts: &partition_counts,
                previous: &self.target,
            },
        );
        self.assignment_epoch = self.group_epoch;
    }

    /// Kafka's `CurrentAssignmentBuilder.build`: the member one step closer
    /// to its target, given the partitions it reports owning.
    fn reconcile(&self, member: &ConsumerMember, owned: Option<&Assignment>, now: Instant) -> ConsumerMember {
        let at_target = member.state == MemberState::Stable && member.epoch == self.assignment_epoch;
        match member.state {
            _ if at_target => member.clone(),
            MemberState::UnrevokedPartitions if owns_any(owned, &member.pending_revocation) => member.clone(),
            MemberState::UnrevokedPartitions => self.next_assignment(member, member.epoch + 1, owned, now),
            MemberState::Stable | MemberState::UnreleasedPartitions => {
                self.next_assignment(member, member.epoch, owned, now)
            }
        }
    }

    /// Kafka's `CurrentAssignmentBuilder.computeNextAssignment`.
    fn next_assignment(
        &self,
        member: &ConsumerMember,
        epoch: i32,
        owned: Option<&Assignment>,
        now: Instant,
    ) -> ConsumerMember {
        let empty = Assignment::new();
        let target = self.target.get(&member.id).unwrap_or(&empty);
        let topics: BTreeSet<&Uuid> = target.keys().chain(member.assigned.keys()).collect();
        let (mut assigned, mut revoking, mut adding) = (Assignment::new(), Assignment::new(), Assignment::new());
        let mut unreleased = false;
        for topic in topics {
            let want = target.get(topic).unwrap_or(&BTreeSet::new()).clone();
            let have = member.assigned.get(topic).cloned().unwrap_or_default();
            let keep: BTreeSet<i32> = have.intersection(&want).copied().collect();
            let give_up: BTreeSet<i32> = have.difference(&keep).copied().collect();
            let mut take: BTreeSet<i32> = want.difference(&keep).copied().collect();
            let before = take.len();
            take.retain(|p| !self.partition_epochs.contains_key(&(*topic, *p)));
            unreleased |= take.len() != before;
            for (into, set) in [(&mut assigned, keep), (&mut revoking, give_up), (&mut adding, take)] {
                if !set.is_empty() {
                    into.insert(*topic, set);
                }
            }
        }
        let mut next = member.clone();
        next.pending_revocation = Assignment::new();
        next.revocation_deadline = None;
        if !revoking.is_empty() && owns_any(owned, &revoking) {
            next.state = MemberState::UnrevokedPartitions;
            next.set_epoch(epoch);
            next.assigned = assigned;
            next.pending_revocation = revoking;
            next.revocation_deadline = Some(now + member.rebalance_timeout);
            return next;
        }
        for (topic, ps) in adding {
            assigned.entry(topic).or_default().extend(ps);
        }
        next.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        next.set_epoch(self.assignment_epoch);
        next.assigned = assigned;
        next
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| std::iter::once(m.session_deadline).chain(m.revocation_deadline))
            .min()
    }

    /// OffsetCommit by a member (Kafka's `ConsumerGroup.validateOffsetCommit`):
    /// an admin or standalone commit (no epoch) only while the group is
    /// empty; a member's only at its current epoch.
    pub fn commit_error(&self, member_id: &str, member_epoch: i32) -> i16 {
        if member_epoch < 0 && self.members.is_empty() {
            return NONE;
        }
        self.member_epoch_error(member_id, member_epoch)
    }

    /// Kafka's `ConsumerGroup.validateMemberEpoch`, for offsets.
    fn member_epoch_error(&self, member_id: &str, member_epoch: i32) -> i16 {
        match self.members.get(member_id) {
            None => UNKNOWN_MEMBER_ID,
            Some(m) if m.epoch != member_epoch => STALE_MEMBER_EPOCH,
            Some(_) => NONE,
        }
    }

    /// OffsetFetch by a member (Kafka's `ConsumerGroup.validateOffsetFetch`);
    /// without a member id or epoch, anyone may.
    pub fn fetch_error(&self, member_id: Option<&str>, member_epoch: i32) -> i16 {
        let Some(member_id) = member_id.filter(|_| member_epoch >= 0) else {
            return NONE;
        };
        self.member_epoch_error(member_id, member_epoch)
    }
}

impl ConsumerMember {
    fn set_epoch(&mut self, epoch: i32) {
        if epoch != self.epoch {
            self.previous_epoch = self.epoch;
            self.epoch = epoch;
        }
    }
}

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`.
fn invalid_request(req: &HeartbeatRequest) -> Option<HeartbeatResult> {
    let invalid = |message: &str| Some(HeartbeatResult::error(INVALID_REQUEST, message));
    if req.group_id.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_deref() == Some("") {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_deref() == Some("") {
        return invalid("RackId can't be empty.");
    }
    if req.subscribed_topic_regex.is_some() {
        return invalid("SubscribedTopicRegex is not supported by this cluster: subscribe by topic names.");
    }
    match req.member_epoch {
        JOIN_GROUP_MEMBER_EPOCH => {
            if req.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req.owned.as_ref().is_none_or(|o| !o.is_empty()) {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
            if req.subscribed_topic_names.as_ref().is_none_or(Vec::is_empty) {
                return invalid("SubscribedTopicNames must be set in first request.");
            }
        }
        LEAVE_GROUP_STATIC_MEMBER_EPOCH if req.instance_id.is_none() => return invalid("InstanceId can't be null."),
        e if (e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH || e == LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            && req.member_id.is_empty() =>
        {
            return invalid("MemberId can't be empty.");
        }
        e if e > 0 || e == LEAVE_GROUP_MEMBER_EPOCH || e == LEAVE_GROUP_STATIC_MEMBER_EPOCH => {}
        _ => return invalid("MemberEpoch is invalid."),
    }
    if let Some(name) = req.server_assignor.as_deref().filter(|n| !ASSIGNORS.contains(n)) {
        let message = format!(
            "ServerAssignor {name} is not supported. Supported assignors: {}.",
            ASSIGNORS.join(", ")
        );
        return Some(HeartbeatResult::error(UNSUPPORTED_ASSIGNOR, message));
    }
    None
}

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat. `topics` looks a topic up by name at this
    /// agent.
    pub fn consumer_heartbeat(
        &mut self,
        req: HeartbeatRequest,
        topics: &dyn Fn(&str) -> Option<TopicMetadata>,
        now: Instant,
    ) -> HeartbeatResult {
        let group_id = req.group_id.clone();
        let result = self.consumer_heartbeat_inner(req, topics, now);
        // A refused first join leaves no group behind.
        self.forget_consumer_group_if_unused(&group_id);
        self.deadlines_changed.notify(usize::MAX);
        result
    }

    fn consumer_heartbeat_inner(
        &mut self,
        mut req: HeartbeatRequest,
        topics: &dyn Fn(&str) -> Option<TopicMetadata>,
        now: Instant,
    ) -> HeartbeatResult {
        if let Some(refused) = invalid_request(&req) {
            return refused;
        }
        let group_id = req.group_id.clone();
        let not_consumer =
            || HeartbeatResult::error(GROUP_ID_NOT_FOUND, format!("Group {group_id} is not a consumer group."));
        if self.shares.contains(&group_id) {
            return not_consumer();
        }
        let joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH;
        if let Some(classic) = self.groups.get(&group_id) {
            // An empty classic group holds offsets only: the consumer
            // protocol takes it over (Kafka's `maybeDeleteEmptyClassicGroup`).
            let empty = classic.members.is_empty() && classic.pending.is_empty();
            if !(joining && empty) {
                return not_consumer();
            }
            self.groups.remove(&group_id);
        }
        if !self.consumer_groups.contains_key(&group_id) {
            if !joining {
                // Membership is not kept across restarts: a member this
                // coordinator does not know rejoins.
                return HeartbeatResult::error(UNKNOWN_MEMBER_ID, "The member is not known to the group coordinator.");
            }
            self.consumer_groups.insert(group_id.clone(), ConsumerGroup::default());
        }
        if req.member_id.is_empty() {
            // v0: the coordinator names the member (v1 clients name
            // themselves).
            req.member_id = self.new_member_id(&req.client_id);
        }
        let session_timeout = ms(self.config.consumer_session_timeout_ms);
        let heartbeat_interval_ms = self.config.consumer_heartbeat_interval_ms;
        let group = self.consumer_groups.get_mut(&group_id).expect("created above");
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH {
            // A static member away for now keeps its partitions and instance
            // id until its session runs out or another member takes them
            // over (Kafka's `consumerGroupStaticMemberGroupLeave`).
            let Some(mut away) = group.members.get(&req.member_id).cloned() else {
                return HeartbeatResult::error(UNKNOWN_MEMBER_ID, "The member is not known to the group coordinator.");
            };
            away.set_epoch(LEAVE_GROUP_STATIC_MEMBER_EPOCH);
            group.put(away);
            tracing::info!(group = group_id, member = req.member_id, "static member left for now");
            return HeartbeatResult {
                member_id: req.member_id,
                member_epoch: LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                heartbeat_interval_ms,
                ..HeartbeatResult::default()
            };
        }
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH {
            if !group.remove(&req.member_id) {
                return HeartbeatResult::error(UNKNOWN_MEMBER_ID, "The member is not known to the group coordinator.");
            }
            tracing::info!(
                group = group_id,
                member = req.member_id,
                "member left the consumer group"
            );
            return HeartbeatResult {
                member_id: req.member_id,
                member_epoch: req.member_epoch,
                heartbeat_interval_ms,
                ..HeartbeatResult::default()
            };
        }
        // A static member joining under an instance id another member holds
        // takes over that member's partitions if it is away, else is
        // refused (Kafka's `getOrMaybeSubscribeStaticConsumerGroupMember`).
        let holder = req.instance_id.as_deref().filter(|_| joining).and_then(|instance| {
            group
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(instance) && m.id != req.member_id)
        });
        let replaced = match holder {
            Some(m) if m.epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH => {
                let message = format!(
                    "Static member with instance id {} is still in the group: it must leave first.",
                    req.instance_id.as_deref().unwrap_or_default()
                );
                return HeartbeatResult::error(UNRELEASED_INSTANCE_ID, message);
            }
            Some(m) => Some(m.id.clone()),
            None => None,
        };
        let mut bump = false;
        let member = match group.members.get(&req.member_id) {
            Some(_) if joining => {
                // A fenced member rejoins with its id and epoch 0: it has
                // given up its partitions.
                group.remove(&req.member_id);
                None
            }
            Some(m) => {
                if req.member_epoch > m.epoch
                    || (req.member_epoch < m.epoch
                        && (req.member_epoch != m.previous_epoch || !is_subset(req.owned.as_ref(), &m.assigned)))
                {
                    return HeartbeatResult::error(
                        FENCED_MEMBER_EPOCH,
                        format!(
                            "The consumer group member has a member epoch ({}) other than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                            req.member_epoch, m.epoch
                        ),
                    );
                }
                Some(m.clone())
            }
            None if joining => replaced.map(|old| group.take_over(&old, &req.member_id)),
            None => {
                return HeartbeatResult::error(UNKNOWN_MEMBER_ID, "The member is not known to the group coordinator.");
            }
        };
        let before = member.clone();
        let mut member = member.unwrap_or_else(|| {
            bump = true;
            tracing::info!(
                group = group_id,
                member = req.member_id,
                "member joins the consumer group"
            );
            ConsumerMember {
                id: req.member_id.clone(),
                instance_id: None,
                rack_id: None,
                client_id: String::new(),
                client_host: String::new(),
                epoch: 0,
                previous_epoch: 0,
                state: MemberState::Stable,
                subscribed_topics: BTreeSet::new(),
                server_assignor: None,
                rebalance_timeout: Duration::ZERO,
                assigned: Assignment::new(),
                pending_revocation: Assignment::new(),
                session_deadline: now,
                revocation_deadline: None,
            }
        });
        if let Some(names) = req.subscribed_topic_names.take() {
            let names: BTreeSet<String> = names.into_iter().collect();
            bump |= names != member.subscribed_topics;
            member.subscribed_topics = names;
        }
        if let Some(assignor) = req.server_assignor.take() {
            bump |= member.server_assignor.as_deref() != Some(assignor.as_str());
            member.server_assignor = Some(assignor);
        }
        if req.rebalance_timeout_ms >= 0 {
            member.rebalance_timeout = ms(req.rebalance_timeout_ms);
        }
        member.instance_id = req.instance_id.take().or(member.instance_id);
        member.rack_id = req.rack_id.take().or(member.rack_id);
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        member.session_deadline = now + session_timeout;
        group.put(member);
        bump |= group.refresh_subscription(topics);
        if bump {
            group.group_epoch += 1;
        }
        if group.group_epoch > group.assignment_epoch {
            group.update_target();
        }
        let current = group.members[&req.member_id].clone();
        let next = group.reconcile(&current, req.owned.as_ref(), now);
        group.put(next.clone());
        let full = joining || (req.rebalance_timeout_ms != -1 && req.owned.is_some());
        let changed = before.is_none_or(|b| b.assigned != next.assigned);
        HeartbeatResult {
            member_id: next.id,
            member_epoch: next.epoch,
            heartbeat_interval_ms,
            assignment: (full || changed).then_some(next.assigned),
            ..HeartbeatResult::default()
        }
    }

    /// Drops an empty consumer group without offsets.
    fn forget_consumer_group_if_unused(&mut self, group_id: &str) {
        let unused = self.consumer_groups.get(group_id).is_some_and(|g| g.members.is_empty())
            && self.store.offsets(group_id).is_none();
        if unused {
            self.consumer_groups.remove(group_id);
        }
    }

    /// Fences members past their session timeout, or that did not revoke
    /// within their rebalance timeout.
    pub(super) fn tick_consumer_groups(&mut self, now: Instant) {
        for id in due_groups(&self.consumer_groups, now, ConsumerGroup::next_deadline) {
            let group = self.consumer_groups.get_mut(&id).expect("listed above");
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.session_deadline <= now || m.revocation_deadline.is_some_and(|d| d <= now))
                .map(|m| m.id.clone())
                .collect();
            for member in expired {
                tracing::info!(
                    group = id,
                    member,
                    "consumer group member fenced: session or revocation timed out"
                );
                group.remove(&member);
            }
            self.forget_consumer_group_if_unused(&id);
        }
    }

    pub(super) fn next_consumer_group_deadline(&self) -> Option<Instant> {
        self.consumer_groups
            .values()
            .filter_map(ConsumerGroup::next_deadline)
            .min()
    }

    pub(super) fn consumer_group_listings(&self) -> impl Iterator<Item = GroupListing> + '_ {
        self.consumer_groups.iter().map(|(id, g)| GroupListing {
            group_id: id.clone(),
            group_type: GroupType::Consumer,
            protocol_type: CONSUMER_PROTOCOL_TYPE.to_owned(),
            state: g.state().name(),
        })
    }

    /// ConsumerGroupDescribe of one group: the group, or Kafka's error and
    /// message.
    pub fn describe_consumer_group(&self, group_id: &str) -> Result<ConsumerGroupDescription, (i16, String)> {
        if group_id.is_empty() {
            return Err((INVALID_GROUP_ID, "The group id must not be empty.".to_owned()));
        }
        let Some(g) = self.consumer_groups.get(group_id) else {
            let message = if self.groups.contains_key(group_id) || self.shares.contains(group_id) {
                format!("Group {group_id} is not a consumer group.")
            } else {
                format!("Group {group_id} not found.")
            };
            return Err((GROUP_ID_NOT_FOUND, message));
        };
        Ok(ConsumerGroupDescription {
            state: g.state(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: g.assignor(),
            members: g.members.values().cloned().collect(),
            target: g.target.clone(),
        })
    }

    /// Whether `group_id` is a consumer-protocol group.
    pub fn is_consumer_group(&self, group_id: &str) -> bool {
        self.consumer_groups.contains_key(group_id)
    }

    /// OffsetFetch's member check for a consumer group (NONE for any
    /// other group).
    pub fn consumer_fetch_error(&self, group_id: &str, member_id: Option<&str>, member_epoch: i32) -> i16 {
        self.consumer_groups
            .get(group_id)
            .map_or(NONE, |g| g.fetch_error(member_id, member_epoch))
    }

    /// A classic member joins `group_id`: an empty consumer group gives the
    /// id up (its offsets stay); `false` when it has members.
    pub(super) fn yield_empty_consumer_group(&mut self, group_id: &str) -> bool {
        match self.consumer_groups.get(group_id) {
            None => true,
            Some(g) if g.members.is_empty() => {
                self.consumer_groups.remove(group_id);
                true
            }
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests;
