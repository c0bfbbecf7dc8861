//! Consumer groups on the agent's listener: librdkafka consumers (the
//! `rdkafka` crate) share a mirror topic through the agent's group
//! coordinator, rebalance when one leaves, commit offsets, and a consumer
//! after a restart of the agent resumes from those offsets. Also every
//! advertised version of each group API, through raw requests, and group
//! administration (list, describe, delete).

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;

use common::KafkaConnection;

const DEADLINE: Duration = Duration::from_secs(30);
const TOPIC: &str = "events";
const PARTITIONS: i32 = 4;
const GROUP: &str = "failover-consumers";

fn config(data_dir: &Path, bootstrap: &str) -> AgentConfig {
    common::serving_mirror_config(data_dir, bootstrap, &[TOPIC], "")
}

fn wait_mirrored(agent: &Agent, ends: &BTreeMap<i32, i64>) {
    common::wait_mirrored(agent, TOPIC, ends, DEADLINE);
}

fn group_consumer(bootstrap: &str) -> BaseConsumer {
    let consumer = common::consumer(bootstrap, GROUP);
    consumer.subscribe(&[TOPIC]).expect("subscribe");
    consumer
}

fn assigned(consumer: &BaseConsumer) -> BTreeSet<i32> {
    consumer
        .assignment()
        .expect("assignment")
        .elements()
        .iter()
        .map(|e| e.partition())
        .collect()
}

/// Polls every consumer (each poll drives its group protocol) until `done`
/// holds; returns the (partition, offset) of every record each received.
fn poll_until(
    consumers: &[&BaseConsumer],
    what: &str,
    mut done: impl FnMut(&[BTreeSet<(i32, i64)>]) -> bool,
) -> Vec<BTreeSet<(i32, i64)>> {
    let mut seen = vec![BTreeSet::new(); consumers.len()];
    let started = Instant::now();
    while !done(&seen) {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        for (i, c) in consumers.iter().enumerate() {
            match c.poll(Duration::from_millis(20)) {
                Some(Ok(m)) => {
                    assert_eq!(m.topic(), TOPIC);
                    seen[i].insert((m.partition(), m.offset()));
                }
                Some(Err(e)) => panic!("{what}: {e}"),
                None => {}
            }
        }
    }
    seen
}

fn commit(consumer: &BaseConsumer, offsets: &BTreeMap<i32, i64>) {
    let mut tpl = TopicPartitionList::new();
    for (&p, &o) in offsets {
        tpl.add_partition_offset(TOPIC, p, Offset::Offset(o)).unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Committed offsets of `group` for `TOPIC`, through OffsetFetch v7.
fn fetch_committed(conn: &mut KafkaConnection, group: &str) -> BTreeMap<i32, i64> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes((0..PARTITIONS).collect()),
        ]));
    let response: OffsetFetchResponse = conn.request(ApiKey::OffsetFetch as i16, 7, &request).unwrap();
    assert_eq!(response.error_code, 0);
    response.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset))
        .collect()
}

#[test]
fn librdkafka_groups_share_the_mirror_and_resume_after_a_restart() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, PARTITIONS, 400, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, common::source_high_watermark(&source, TOPIC, p, DEADLINE)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &source)).expect("agent");
    let mirror = agent.listener_addr().expect("listening").to_string();
    wait_mirrored(&agent, &ends);

    // Two members split the four partitions, and read them to the end.
    let c1 = group_consumer(&mirror);
    poll_until(&[&c1], "the first member's assignment", |_| assigned(&c1).len() == 4);
    let c2 = group_consumer(&mirror);
    let split = |_: &[BTreeSet<(i32, i64)>]| {
        let (a, b) = (assigned(&c1), assigned(&c2));
        !a.is_empty() && !b.is_empty() && a.is_disjoint(&b) && a.len() + b.len() == PARTITIONS as usize
    };
    poll_until(&[&c1, &c2], "the rebalance to two members", split);
    let (a1, a2) = (assigned(&c1), assigned(&c2));
    let all: BTreeSet<i32> = a1.union(&a2).copied().collect();
    assert_eq!(all, (0..PARTITIONS).collect(), "covering: {a1:?} + {a2:?}");
    let at_end = |seen: &[BTreeSet<(i32, i64)>]| {
        ends.iter()
            .all(|(&p, &end)| seen.iter().any(|s| s.contains(&(p, end - 1))))
    };
    let seen = poll_until(&[&c1, &c2], "consuming every partition to its end", at_end);
    for (records, mine) in seen.iter().zip([&a1, &a2]) {
        assert!(
            records.iter().all(|(p, _)| mine.contains(p)),
            "records only from own partitions"
        );
    }
    // Each commits half of its partitions' records.
    let half = |mine: &BTreeSet<i32>| -> BTreeMap<i32, i64> { mine.iter().map(|&p| (p, ends[&p] / 2)).collect() };
    commit(&c1, &half(&a1));
    commit(&c2, &half(&a2));
    let mut admin = KafkaConnection::connect(&mirror, DEADLINE).unwrap();
    let halves: BTreeMap<i32, i64> = ends.iter().map(|(&p, &e)| (p, e / 2)).collect();
    assert_eq!(fetch_committed(&mut admin, GROUP), halves);
    let described = c1.fetch_group_list(Some(GROUP), DEADLINE).expect("describe");
    let group = &described.groups()[0];
    assert_eq!(
        (group.state(), group.protocol_type(), group.members().len()),
        ("Stable", "consumer", 2)
    );
    let deleted = delete_group(&mut admin, GROUP);
    assert_eq!(deleted, 68, "NON_EMPTY_GROUP while it has members");

    // One leaves: the other gets every partition.
    drop(c2);
    poll_until(&[&c1], "the rebalance to one member", |_| assigned(&c1).len() == 4);
    let three_quarters: BTreeMap<i32, i64> = ends.iter().map(|(&p, &e)| (p, e * 3 / 4)).collect();
    commit(&c1, &three_quarters);
    drop(c1);
    agent.stop().expect("stop");

    // A restarted agent still has the commits; a new member resumes there.
    let agent = Agent::start(config(dir.path(), &source)).expect("agent again");
    let mirror = agent.listener_addr().expect("listening").to_string();
    wait_mirrored(&agent, &ends);
    let mut admin = KafkaConnection::connect(&mirror, DEADLINE).unwrap();
    assert_eq!(fetch_committed(&mut admin, GROUP), three_quarters);
    let c3 = group_consumer(&mirror);
    let seen = poll_until(&[&c3], "the resumed consumer reaching the ends", at_end);
    for (&p, &from) in &three_quarters {
        let offsets: Vec<i64> = seen[0].iter().filter(|(q, _)| *q == p).map(|&(_, o)| o).collect();
        assert_eq!(
            offsets,
            (from..ends[&p]).collect::<Vec<_>>(),
            "partition {p} resumes at {from}"
        );
    }
    drop(c3);

    // Empty now: listed as such, then deleted with its offsets.
    let listed: ListGroupsResponse = admin
        .request(ApiKey::ListGroups as i16, 4, &ListGroupsRequest::default())
        .unwrap();
    let states: Vec<(String, String)> = listed
        .groups
        .iter()
        .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
        .collect();
    assert_eq!(states, [(GROUP.to_string(), "Empty".to_string())]);
    assert_eq!(delete_group(&mut admin, GROUP), 0);
    assert_eq!(delete_group(&mut admin, GROUP), 69, "GROUP_ID_NOT_FOUND");
    assert!(fetch_committed(&mut admin, GROUP).values().all(|&o| o == -1));
    agent.stop().expect("stop");
}

fn delete_group(conn: &mut KafkaConnection, group: &str) -> i16 {
    let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
    let response: DeleteGroupsResponse = conn.request(ApiKey::DeleteGroups as i16, 2, &request).unwrap();
    response.results[0].error_code
}

/// The advertised versions of this API (from ApiVersions).
fn versions(api: ApiKey) -> std::ops::RangeInclusive<i16> {
    let (_, min, max) = *ringmirror_protocol::request::SUPPORTED_APIS
        .iter()
        .find(|(k, _, _)| *k == api)
        .expect("advertised");
    min..=max
}

#[test]
fn every_advertised_version_of_the_group_apis_answers() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 1, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, 1, 10, "none", 0).expect("produce");
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &source)).expect("agent");
    let addr = agent.listener_addr().expect("listening");
    wait_mirrored(&agent, &BTreeMap::from([(0, 1)]));
    let mut conn = KafkaConnection::connect(&addr.to_string(), DEADLINE).unwrap();
    let key = ApiKey::FindCoordinator as i16;

    for v in versions(ApiKey::FindCoordinator) {
        // Groups and transactional ids are both coordinated here.
        for (key_type, code) in [(0i8, 0i16), (1, 0)] {
            let mut r = FindCoordinatorRequest::default().with_key_type(key_type);
            r = if v >= 4 {
                r.with_coordinator_keys(vec![s("g")])
            } else {
                r.with_key(s("g"))
            };
            if v == 0 && key_type != 0 {
                continue;
            }
            let resp: FindCoordinatorResponse = conn.request(key, v, &r).unwrap();
            let (error, port) = match resp.coordinators.first() {
                Some(c) if v >= 4 => (c.error_code, c.port),
                _ => (resp.error_code, resp.port),
            };
            assert_eq!(error, code, "FindCoordinator v{v} key type {key_type}");
            if code == 0 {
                assert_eq!(port, i32::from(addr.port()), "v{v}");
            }
        }
    }

    // Joining alone: v0–3 get an id at once; v4+ first MEMBER_ID_REQUIRED.
    for v in versions(ApiKey::JoinGroup) {
        let group = format!("join-v{v}");
        let protocol = JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(Bytes::from_static(b"meta"));
        let request = |member: &str| {
            JoinGroupRequest::default()
                .with_group_id(GroupId(s(&group)))
                .with_session_timeout_ms(6000)
                .with_rebalance_timeout_ms(if v >= 1 { 10_000 } else { -1 })
                .with_member_id(s(member))
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![protocol.clone()])
        };
        let mut joined: JoinGroupResponse = conn.request(ApiKey::JoinGroup as i16, v, &request("")).unwrap();
        if v >= 4 {
            assert_eq!(joined.error_code, 79, "v{v}");
            let id = joined.member_id.to_string();
            joined = conn.request(ApiKey::JoinGroup as i16, v, &request(&id)).unwrap();
        }
        assert_eq!((joined.error_code, joined.generation_id), (0, 1), "JoinGroup v{v}");
        assert_eq!(joined.leader, joined.member_id);
        assert_eq!(&joined.members[0].metadata[..], b"meta");
        let member = joined.member_id.clone();
        let sync_v = v.min(*versions(ApiKey::SyncGroup).end());
        let mut sync = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_generation_id(1)
            .with_member_id(member.clone())
            .with_assignments(vec![
                kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment::default()
                    .with_member_id(member.clone())
                    .with_assignment(Bytes::from_static(b"mine")),
            ]);
        if sync_v >= 5 {
            sync = sync
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")));
        }
        let synced: SyncGroupResponse = conn.request(ApiKey::SyncGroup as i16, sync_v, &sync).unwrap();
        assert_eq!(
            (synced.error_code, &synced.assignment[..]),
            (0, &b"mine"[..]),
            "SyncGroup v{sync_v}"
        );
        let hb_v = v.min(*versions(ApiKey::Heartbeat).end());
        let hb = HeartbeatRequest::default()
            .with_group_id(GroupId(s(&group)))
            .with_generation_id(1)
            .with_member_id(member.clone());
        let beat: HeartbeatResponse = conn.request(ApiKey::Heartbeat as i16, hb_v, &hb).unwrap();
        assert_eq!(beat.error_code, 0, "Heartbeat v{hb_v}");
        let stale: HeartbeatResponse = conn
            .request(ApiKey::Heartbeat as i16, hb_v, &hb.clone().with_generation_id(0))
            .unwrap();
        assert_eq!(stale.error_code, 22, "ILLEGAL_GENERATION");
        let leave_v = v.min(*versions(ApiKey::LeaveGroup).end());
        let leave = if leave_v >= 3 {
            LeaveGroupRequest::default().with_members(vec![
                MemberIdentity::default().with_member_id(member.clone()),
                MemberIdentity::default().with_member_id(s("stranger")),
            ])
        } else {
            LeaveGroupRequest::default().with_member_id(member.clone())
        }
        .with_group_id(GroupId(s(&group)));
        let left: LeaveGroupResponse = conn.request(ApiKey::LeaveGroup as i16, leave_v, &leave).unwrap();
        if leave_v >= 3 {
            let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
            assert_eq!((left.error_code, codes), (0, vec![0, 25]), "LeaveGroup v{leave_v}");
        } else {
            assert_eq!(left.error_code, 0, "LeaveGroup v{leave_v}");
        }
        let gone: HeartbeatResponse = conn.request(ApiKey::Heartbeat as i16, hb_v, &hb).unwrap();
        assert_eq!(gone.error_code, 25, "UNKNOWN_MEMBER_ID after leaving");
    }

    // Standalone commits at every version, read back at every version.
    for v in versions(ApiKey::OffsetCommit) {
        let partition = OffsetCommitRequestPartition::default()
            .with_partition_index(0)
            .with_committed_offset(i64::from(v))
            .with_committed_leader_epoch(if v >= 6 { 3 } else { -1 })
            .with_committed_metadata(Some(s("note")));
        let r = OffsetCommitRequest::default()
            .with_group_id(GroupId(s("simple")))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(TOPIC)))
                    .with_partitions(vec![partition.clone(), partition.clone().with_partition_index(9)]),
            ]);
        let resp: OffsetCommitResponse = conn.request(ApiKey::OffsetCommit as i16, v, &r).unwrap();
        let codes: Vec<i16> = resp.topics[0].partitions.iter().map(|p| p.error_code).collect();
        assert_eq!(codes, [0, 3], "OffsetCommit v{v}: partition 9 is not served");
    }
    let last = i64::from(*versions(ApiKey::OffsetCommit).end());
    for v in versions(ApiKey::OffsetFetch) {
        let r = if v >= 8 {
            OffsetFetchRequest::default().with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s("simple")))
                    .with_topics(Some(vec![
                        OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s(TOPIC)))
                            .with_partition_indexes(vec![0, 1]),
                    ])),
                OffsetFetchRequestGroup::default().with_group_id(GroupId(s("nobody"))),
            ])
        } else {
            OffsetFetchRequest::default()
                .with_group_id(GroupId(s("simple")))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s(TOPIC)))
                        .with_partition_indexes(vec![0, 1]),
                ]))
        };
        let resp: OffsetFetchResponse = conn.request(ApiKey::OffsetFetch as i16, v, &r).unwrap();
        let found: Vec<(i64, i32, String)> = if v >= 8 {
            assert_eq!(resp.groups.len(), 2);
            assert!(resp.groups[1].topics.is_empty(), "no offsets for an unknown group");
            resp.groups[0].topics[0]
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_deref().unwrap_or("").into(),
                    )
                })
                .collect()
        } else {
            resp.topics[0]
                .partitions
                .iter()
                .map(|p| {
                    (
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_deref().unwrap_or("").into(),
                    )
                })
                .collect()
        };
        let epoch = if v >= 5 { 3 } else { -1 };
        assert_eq!(found[0], (last, epoch, "note".into()), "OffsetFetch v{v}");
        assert_eq!(found[1].0, -1, "OffsetFetch v{v}: nothing committed");
    }

    // Listing (with the v4 state filter and v5 type filter) and describing.
    for v in versions(ApiKey::ListGroups) {
        let mut r = ListGroupsRequest::default();
        if v >= 4 {
            r = r.with_states_filter(vec![s("empty")]);
        }
        if v >= 5 {
            r = r.with_types_filter(vec![s("classic")]);
        }
        let resp: ListGroupsResponse = conn.request(ApiKey::ListGroups as i16, v, &r).unwrap();
        let names: Vec<String> = resp.groups.iter().map(|g| g.group_id.0.to_string()).collect();
        assert_eq!(names, ["simple"], "ListGroups v{v}");
        if v >= 4 {
            let stable: ListGroupsResponse = conn
                .request(ApiKey::ListGroups as i16, v, &r.with_states_filter(vec![s("Stable")]))
                .unwrap();
            assert!(stable.groups.is_empty());
        }
    }
    for v in versions(ApiKey::DescribeGroups) {
        let r = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("simple")), GroupId(s("nobody"))]);
        let resp: DescribeGroupsResponse = conn.request(ApiKey::DescribeGroups as i16, v, &r).unwrap();
        assert_eq!(
            (resp.groups[0].error_code, resp.groups[0].group_state.as_str()),
            (0, "Empty")
        );
        let missing = (resp.groups[1].error_code, resp.groups[1].group_state.as_str());
        assert_eq!(missing, (if v >= 6 { 69 } else { 0 }, "Dead"), "DescribeGroups v{v}");
    }
    for v in versions(ApiKey::DeleteGroups) {
        let r = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("simple"))]);
        let resp: DeleteGroupsResponse = conn.request(ApiKey::DeleteGroups as i16, v, &r).unwrap();
        let expected = if v == 0 { 0 } else { 69 };
        assert_eq!(resp.results[0].error_code, expected, "DeleteGroups v{v}");
    }
    agent.stop().expect("stop");
}
