//! The consumer group protocol's state machine without sockets: members
//! are driven by hand (or by proptest) the way Kafka's Java consumer drives
//! them — it gives up revoked partitions as soon as an assignment without
//! them arrives and reports what it owns on its next heartbeat.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::groups::{CommittedOffset, GroupConfig, JoinRequest, Reply};

const TOPIC: &str = "t";
const PARTITIONS: i32 = 6;

fn topic_id() -> Uuid {
    Uuid::from_u128(7)
}

fn coordinator(dir: &Path) -> GroupCoordinator {
    GroupCoordinator::open(dir, 0, GroupConfig::default()).unwrap()
}

fn topics(name: &str) -> Option<TopicMetadata> {
    (name == TOPIC).then_some(TopicMetadata {
        id: topic_id(),
        partitions: PARTITIONS,
    })
}

fn owned_list(a: &Assignment) -> Vec<i32> {
    a.get(&topic_id())
        .map(|ps| ps.iter().copied().collect())
        .unwrap_or_default()
}

fn join(member: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec![TOPIC.into()]),
        owned: Some(Assignment::new()),
        client_id: "client".into(),
        ..HeartbeatRequest::default()
    }
}

fn beat(member: &str, epoch: i32, owned: Option<&Assignment>) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: owned.cloned(),
        ..HeartbeatRequest::default()
    }
}

/// A classic member's first JoinGroup in "g".
fn classic_join() -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        client_id: "c".into(),
        client_host: String::new(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Default::default())],
        require_known_member_id: true,
    }
}

#[test]
fn revocation_comes_before_assignment() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    let a = c.consumer_heartbeat(join("a"), &topics, now);
    assert_eq!((a.error, a.member_epoch), (NONE, 1));
    assert_eq!(owned_list(a.assignment.as_ref().unwrap()), [0, 1, 2, 3, 4, 5]);
    let a_owned = a.assignment.unwrap();

    // b joins: epoch 2; a's half is not free yet, so b gets nothing.
    let b = c.consumer_heartbeat(join("b"), &topics, now);
    assert_eq!((b.error, b.member_epoch), (NONE, 2));
    assert_eq!(b.assignment, Some(Assignment::new()));
    assert_eq!(
        c.describe_consumer_group("g").unwrap().state,
        ConsumerGroupState::Reconciling
    );

    // a is asked to revoke three, at its old epoch.
    let a = c.consumer_heartbeat(beat("a", 1, Some(&a_owned)), &topics, now);
    assert_eq!(a.member_epoch, 1, "an epoch moves only once revoked");
    let kept = a.assignment.unwrap();
    assert_eq!(kept.values().map(BTreeSet::len).sum::<usize>(), 3);
    // Until a says it let them go, b still waits.
    let b = c.consumer_heartbeat(beat("b", 2, Some(&Assignment::new())), &topics, now);
    assert_eq!(b.assignment, None, "unchanged");
    // a owns only what it kept: epoch 2.
    let a = c.consumer_heartbeat(beat("a", 1, Some(&kept)), &topics, now);
    assert_eq!((a.error, a.member_epoch), (NONE, 2));
    // Now b gets the rest.
    let b = c.consumer_heartbeat(beat("b", 2, Some(&Assignment::new())), &topics, now);
    let given = b.assignment.unwrap();
    assert_eq!(given.values().map(BTreeSet::len).sum::<usize>(), 3);
    assert!(owned_list(&given).iter().all(|p| !owned_list(&kept).contains(p)));
    assert_eq!(
        c.describe_consumer_group("g").unwrap().state,
        ConsumerGroupState::Stable
    );
    let listed = c.list();
    assert_eq!(
        (listed[0].group_type, listed[0].protocol_type.as_str(), listed[0].state),
        (GroupType::Consumer, "consumer", "Stable")
    );
}

#[test]
fn epochs_fence_and_leaving_frees_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    let a = c.consumer_heartbeat(join("a"), &topics, now);
    let owned = a.assignment.unwrap();
    let ahead = c.consumer_heartbeat(beat("a", 5, Some(&owned)), &topics, now);
    assert_eq!(ahead.error, FENCED_MEMBER_EPOCH);
    let unknown = c.consumer_heartbeat(beat("x", 1, None), &topics, now);
    assert_eq!(unknown.error, UNKNOWN_MEMBER_ID);
    // Offsets: only at the member's epoch.
    let offset = CommittedOffset {
        offset: 5,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp: 0,
    };
    let commit = |c: &mut GroupCoordinator, member: &str, epoch: i32| {
        c.commit("g", epoch, member, vec![((TOPIC.into(), 0), offset.clone())], now)[0]
    };
    assert_eq!(commit(&mut c, "a", 0), STALE_MEMBER_EPOCH);
    assert_eq!(commit(&mut c, "b", 1), UNKNOWN_MEMBER_ID);
    assert_eq!(commit(&mut c, "", -1), UNKNOWN_MEMBER_ID, "not while it has members");
    assert_eq!(commit(&mut c, "a", 1), NONE);
    // The same checks for offsets committed in a transaction.
    let txn = |c: &mut GroupCoordinator, member: &str, epoch: i32| {
        c.txn_commit("g", 7, epoch, member, vec![((TOPIC.into(), 1), offset.clone())])[0]
    };
    assert_eq!(txn(&mut c, "a", 0), STALE_MEMBER_EPOCH);
    assert_eq!(txn(&mut c, "", -1), UNKNOWN_MEMBER_ID);
    assert_eq!(txn(&mut c, "a", 1), NONE);
    assert_eq!(c.consumer_fetch_error("g", Some("a"), 0), STALE_MEMBER_EPOCH);
    assert_eq!(c.consumer_fetch_error("g", None, -1), NONE);
    // A classic member cannot join while a has the group.
    let Reply::Now(refused) = c.join(classic_join(), now) else {
        panic!("answered at once")
    };
    assert_eq!(refused.error, INCONSISTENT_GROUP_PROTOCOL);
    assert_eq!(c.delete("g"), NON_EMPTY_GROUP);

    let left = c.consumer_heartbeat(beat("a", LEAVE_GROUP_MEMBER_EPOCH, None), &topics, now);
    assert_eq!((left.error, left.member_epoch), (NONE, -1));
    // The group stays (it has offsets), Empty; offsets without an epoch now.
    assert_eq!(c.describe_consumer_group("g").unwrap().state, ConsumerGroupState::Empty);
    assert_eq!(commit(&mut c, "", -1), NONE);
    assert_eq!(c.delete("g"), NONE);
    assert!(c.list().is_empty());
}

#[test]
fn a_silent_member_is_fenced_after_its_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    c.consumer_heartbeat(join("a"), &topics, now);
    let b = c.consumer_heartbeat(join("b"), &topics, now);
    assert_eq!(b.member_epoch, 2);
    let session = ms(GroupConfig::default().consumer_session_timeout_ms);
    let later = now + session / 2;
    let b = c.consumer_heartbeat(beat("b", 2, Some(&Assignment::new())), &topics, later);
    assert_eq!(b.error, NONE);
    assert!(c.next_deadline().is_some_and(|d| d <= now + session));
    c.tick(now + session);
    // a is gone; b gets everything at the next epoch.
    let b = c.consumer_heartbeat(beat("b", 2, Some(&Assignment::new())), &topics, now + session);
    assert_eq!((b.error, b.member_epoch), (NONE, 3));
    assert_eq!(owned_list(b.assignment.as_ref().unwrap()), [0, 1, 2, 3, 4, 5]);
    let a = c.consumer_heartbeat(beat("a", 1, None), &topics, now + session);
    assert_eq!(a.error, UNKNOWN_MEMBER_ID);
}

#[test]
fn the_configured_interval_is_answered_and_the_configured_session_fences() {
    let dir = tempfile::tempdir().unwrap();
    let config = GroupConfig {
        consumer_heartbeat_interval_ms: 500,
        consumer_session_timeout_ms: 6_000,
        ..GroupConfig::default()
    };
    let mut c = GroupCoordinator::open(dir.path(), 0, config).unwrap();
    let now = Instant::now();
    let a = c.consumer_heartbeat(join("a"), &topics, now);
    assert_eq!((a.error, a.heartbeat_interval_ms), (NONE, 500));
    let b = c.consumer_heartbeat(join("b"), &topics, now);
    assert_eq!((b.error, b.heartbeat_interval_ms), (NONE, 500));
    let b = c.consumer_heartbeat(beat("b", 2, Some(&Assignment::new())), &topics, now + ms(3_000));
    assert_eq!((b.error, b.heartbeat_interval_ms), (NONE, 500));
    let members = |c: &GroupCoordinator| {
        let group = c.describe_consumer_group("g").unwrap();
        group.members.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
    };
    // a is silent: kept until its 6 s are up, not Kafka's default 45 s.
    c.tick(now + ms(5_999));
    assert_eq!(members(&c), ["a", "b"]);
    assert!(c.next_deadline().is_some_and(|d| d <= now + ms(6_000)));
    c.tick(now + ms(6_000));
    assert_eq!(members(&c), ["b"]);
    let a = c.consumer_heartbeat(beat("a", 1, None), &topics, now + ms(6_000));
    assert_eq!(a.error, UNKNOWN_MEMBER_ID);
}

#[test]
fn an_offsets_only_classic_group_becomes_a_consumer_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    let offset = CommittedOffset {
        offset: 42,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp: 0,
    };
    // As group-offset sync writes it: no generation.
    assert_eq!(c.commit("g", -1, "", vec![((TOPIC.into(), 0), offset)], now), [NONE]);
    assert_eq!(c.list()[0].group_type, GroupType::Classic);
    let a = c.consumer_heartbeat(join("a"), &topics, now);
    assert_eq!(a.error, NONE);
    assert_eq!(c.list()[0].group_type, GroupType::Consumer);
    assert_eq!(c.committed("g", None)[0].1.as_ref().unwrap().offset, 42, "offsets kept");
    // Regex subscriptions and unknown assignors are refused.
    let regex = HeartbeatRequest {
        subscribed_topic_regex: Some("t.*".into()),
        ..join("r")
    };
    assert_eq!(c.consumer_heartbeat(regex, &topics, now).error, INVALID_REQUEST);
    let unknown = HeartbeatRequest {
        server_assignor: Some("sticky".into()),
        ..join("s")
    };
    assert_eq!(c.consumer_heartbeat(unknown, &topics, now).error, UNSUPPORTED_ASSIGNOR);
    // A share group's id is not a consumer group's.
    c.alter_share_offsets("s", vec![((TOPIC.into(), 0), 1)], 0).unwrap();
    let share = HeartbeatRequest {
        group_id: "s".into(),
        ..join("m")
    };
    assert_eq!(c.consumer_heartbeat(share, &topics, now).error, GROUP_ID_NOT_FOUND);
}

#[test]
fn the_group_uses_the_assignor_its_members_ask_for() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    c.consumer_heartbeat(join("a"), &topics, now);
    assert_eq!(c.describe_consumer_group("g").unwrap().assignor, assignors::UNIFORM);
    let ranged = HeartbeatRequest {
        server_assignor: Some(assignors::RANGE.into()),
        ..join("b")
    };
    c.consumer_heartbeat(ranged, &topics, now);
    let ranged_too = HeartbeatRequest {
        server_assignor: Some(assignors::RANGE.into()),
        ..join("c")
    };
    c.consumer_heartbeat(ranged_too, &topics, now);
    let d = c.describe_consumer_group("g").unwrap();
    assert_eq!(d.assignor, assignors::RANGE);
    // Range: contiguous, the first members one more.
    let of = |m: &str| owned_list(&d.target[m]);
    assert_eq!((of("a"), of("b"), of("c")), (vec![0, 1], vec![2, 3], vec![4, 5]));
}

#[test]
fn a_classic_group_with_members_is_not_a_consumer_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    // Without MEMBER_ID_REQUIRED: a member at once, waiting in its join.
    let _joining = c.join(
        JoinRequest {
            require_known_member_id: false,
            ..classic_join()
        },
        now,
    );
    let refused = c.consumer_heartbeat(join("a"), &topics, now);
    assert_eq!(refused.error, GROUP_ID_NOT_FOUND);
    assert_eq!(
        refused.error_message.as_deref(),
        Some("Group g is not a consumer group.")
    );
    assert_eq!(
        c.describe_consumer_group("g").err().map(|e| e.0),
        Some(GROUP_ID_NOT_FOUND)
    );
}

#[test]
fn a_static_member_away_keeps_its_partitions_for_its_successor() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = coordinator(dir.path());
    let now = Instant::now();
    let statically = |member: &str| HeartbeatRequest {
        instance_id: Some("i-1".into()),
        ..join(member)
    };
    let a = c.consumer_heartbeat(statically("a"), &topics, now);
    assert_eq!((a.error, a.member_epoch), (NONE, 1));
    let owned = a.assignment.unwrap();
    // While a is in, its instance id is not free.
    let early = c.consumer_heartbeat(statically("a2"), &topics, now);
    assert_eq!(early.error, UNRELEASED_INSTANCE_ID);
    let away = HeartbeatRequest {
        instance_id: Some("i-1".into()),
        ..beat("a", LEAVE_GROUP_STATIC_MEMBER_EPOCH, None)
    };
    let left = c.consumer_heartbeat(away, &topics, now);
    assert_eq!((left.error, left.member_epoch), (NONE, LEAVE_GROUP_STATIC_MEMBER_EPOCH));
    // Another member meanwhile gets none of a's partitions.
    let b = c.consumer_heartbeat(join("b"), &topics, now);
    assert_eq!(b.assignment, Some(Assignment::new()));
    // a's successor takes them over, at a's epoch: no rebalance for it.
    let successor = c.consumer_heartbeat(statically("a2"), &topics, now);
    assert_eq!(successor.error, NONE);
    assert!(
        !c.describe_consumer_group("g")
            .unwrap()
            .members
            .iter()
            .any(|m| m.id == "a")
    );
    let kept = successor.assignment.unwrap();
    assert!(!kept.is_empty() && is_subset(Some(&kept), &owned), "{kept:?}");
}

/// One step of a member, as the Java consumer takes it.
#[derive(Debug, Clone)]
enum Step {
    Join(usize),
    /// A heartbeat reporting what the client owns.
    Heartbeat(usize),
    Leave(usize),
    /// Half a session timeout passes.
    Wait,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0usize..4).prop_map(Step::Join),
        6 => (0usize..4).prop_map(Step::Heartbeat),
        1 => (0usize..4).prop_map(Step::Leave),
        1 => Just(Step::Wait),
    ]
}

/// A client's view: its epoch, the partitions it owns, its last heartbeat.
#[derive(Debug, Clone)]
struct Client {
    epoch: i32,
    owned: Assignment,
    last_heartbeat: Instant,
}

/// The client takes the coordinator's answer: a new epoch and assignment
/// (revoked partitions dropped at once), or, fenced or forgotten, it drops
/// everything and is gone.
fn take_answer(clients: &mut BTreeMap<usize, Client>, i: usize, r: HeartbeatResult, now: Instant) {
    if r.error != NONE {
        clients.remove(&i);
        return;
    }
    let client = clients.entry(i).or_insert(Client {
        epoch: 0,
        owned: Assignment::new(),
        last_heartbeat: now,
    });
    client.epoch = r.member_epoch;
    client.last_heartbeat = now;
    if let Some(a) = r.assignment {
        client.owned = a;
    }
}

fn name(i: usize) -> String {
    format!("m{i}")
}

proptest! {
    /// No partition is ever owned by two clients at once, whatever the
    /// order of joins, heartbeats, leaves and session expiries; and once
    /// every member keeps heartbeating, the group settles with every
    /// partition owned once.
    #[test]
    fn no_partition_is_owned_twice(steps in proptest::collection::vec(step(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut c = coordinator(dir.path());
        let session = ms(GroupConfig::default().consumer_session_timeout_ms);
        let mut now = Instant::now();
        let mut clients: BTreeMap<usize, Client> = BTreeMap::new();
        for s in steps {
            match s {
                Step::Join(i) if !clients.contains_key(&i) => {
                    let r = c.consumer_heartbeat(join(&name(i)), &topics, now);
                    take_answer(&mut clients, i, r, now);
                }
                Step::Join(_) => {}
                Step::Heartbeat(i) => {
                    let Some(client) = clients.get(&i) else { continue };
                    let r = c.consumer_heartbeat(beat(&name(i), client.epoch, Some(&client.owned)), &topics, now);
                    take_answer(&mut clients, i, r, now);
                }
                Step::Leave(i) => {
                    if clients.remove(&i).is_some() {
                        let r = c.consumer_heartbeat(beat(&name(i), LEAVE_GROUP_MEMBER_EPOCH, None), &topics, now);
                        prop_assert_eq!(r.error, NONE);
                    }
                }
                Step::Wait => {
                    now += session / 2;
                    c.tick(now);
                    // A client whose session ran out learns it on its next
                    // heartbeat, and drops its partitions then: gone here.
                    clients.retain(|_, cl| cl.last_heartbeat + session > now);
                }
            }
            let mut seen: BTreeMap<i32, usize> = BTreeMap::new();
            for (i, cl) in &clients {
                for p in owned_list(&cl.owned) {
                    prop_assert!(seen.insert(p, *i).is_none(), "partition {} owned by m{} and m{}", p, seen[&p], i);
                }
            }
        }
        // Everyone keeps heartbeating: the group settles.
        for _ in 0..8 {
            let ids: Vec<usize> = clients.keys().copied().collect();
            for i in ids {
                let client = clients[&i].clone();
                let r = c.consumer_heartbeat(beat(&name(i), client.epoch, Some(&client.owned)), &topics, now);
                prop_assert_eq!(r.error, NONE);
                take_answer(&mut clients, i, r, now);
            }
        }
        if !clients.is_empty() {
            let total: usize = clients.values().map(|cl| owned_list(&cl.owned).len()).sum();
            prop_assert_eq!(total, PARTITIONS as usize);
            prop_assert_eq!(c.describe_consumer_group("g").unwrap().state, ConsumerGroupState::Stable);
        }
    }
}
