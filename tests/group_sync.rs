//! Consumer-group offset sync (`ringmirror_control::metadata_sync::groups`, issue 6)
//! against real peers, run from a glommio executor as the control plane
//! runs it:
//!
//! - librdkafka's mock cluster as the source (three brokers, the groups'
//!   coordinators on two of them; it serves no ListGroups, so the groups
//!   are named), librdkafka consumers committing there, an agent mirroring
//!   the topic as the destination: an idle group's offsets arrive with
//!   their leader epochs, only for mirrored partitions, an offset past the
//!   destination's log end as it is (until failover, which moves it back
//!   to the mirrored log end); a group with a live librdkafka consumer at
//!   the destination is left alone, and synced once that consumer has
//!   left.
//! - An agent as the source (it lists its groups): every group is found
//!   by ListGroups, filtered by regex, and fetched in batches; a failover
//!   syncs once more first, so offsets committed at the source since the
//!   last round arrive before the partitions take writes.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, OffsetFetchRequest,
    OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::{MockCluster, MockCoordinator};
use rdkafka::{Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror_control::admin::{AdminAnswer, AdminRequest};
use ringmirror_control::metadata_sync::groups::{GroupFilter, GroupOutcome};
use ringmirror_storage::log::TopicPartition;

use common::KafkaConnection;

const DEADLINE: Duration = Duration::from_secs(60);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
/// At the source, never mirrored.
const UNMIRRORED: &str = "audit";
const IDLE: &str = "g-idle";
const ACTIVE: &str = "g-active";
/// How far past the source's end the "ahead" offset is committed.
const AHEAD: i64 = 1000;

/// (offset, leader epoch, metadata) per (topic, partition); -1 offsets
/// (nothing committed) left out.
type Committed = BTreeMap<(String, i32), (i64, i32, String)>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn mirrored() -> BTreeSet<(String, i32)> {
    (0..PARTITIONS).map(|p| (TOPIC.to_owned(), p)).collect()
}

/// Committed offsets of `group` for every partition of TOPIC and
/// UNMIRRORED (OffsetFetch v6 — the newest the mock speaks, with leader
/// epochs), as `addr` answers.
fn committed(addr: &str, group: &str) -> Committed {
    let mut conn = KafkaConnection::connect(addr, IO_TIMEOUT).expect("connect");
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes((0..PARTITIONS).collect()),
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(UNMIRRORED)))
                .with_partition_indexes(vec![0]),
        ]));
    let response: OffsetFetchResponse = conn
        .request(ApiKey::OffsetFetch as i16, 6, &request)
        .expect("OffsetFetch");
    assert_eq!(response.error_code, 0, "OffsetFetch of {group} at {addr}");
    response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter(|p| p.committed_offset >= 0).map(move |p| {
                (
                    (t.name.0.to_string(), p.partition_index),
                    (
                        p.committed_offset,
                        p.committed_leader_epoch,
                        p.metadata.as_deref().unwrap_or_default().to_owned(),
                    ),
                )
            })
        })
        .collect()
}

/// Only TOPIC's partitions.
fn mirrored_only(c: &Committed) -> Committed {
    c.iter()
        .filter(|((t, _), _)| t == TOPIC)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `group`'s state at the agent (DescribeGroups v5: "Dead" when unknown).
fn group_state(addr: &str, group: &str) -> String {
    let mut conn = KafkaConnection::connect(addr, IO_TIMEOUT).expect("connect");
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    let response: DescribeGroupsResponse = conn
        .request(ApiKey::DescribeGroups as i16, 5, &request)
        .expect("DescribeGroups");
    response.groups[0].group_state.to_string()
}

fn wait_for_state(addr: &str, group: &str, state: &str) {
    let started = Instant::now();
    loop {
        let now = group_state(addr, group);
        if now == state {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{group} at {addr} stays {now}, not {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `consumer` (subscribed to `topics`) until it has read at least
/// `per_partition` records of every partition in `partitions`.
fn consume(consumer: &BaseConsumer, partitions: &[(&str, i32)], per_partition: usize) {
    let mut seen: BTreeMap<(String, i32), usize> = BTreeMap::new();
    let started = Instant::now();
    while !partitions
        .iter()
        .all(|(t, p)| seen.get(&((*t).to_owned(), *p)).is_some_and(|&n| n >= per_partition))
    {
        assert!(started.elapsed() < DEADLINE, "consuming timed out: {seen:?}");
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                use rdkafka::Message;
                *seen.entry((m.topic().to_owned(), m.partition())).or_default() += 1;
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None => {}
        }
    }
}

fn commit(consumer: &BaseConsumer, offsets: &[(&str, i32, i64)]) {
    let mut tpl = TopicPartitionList::new();
    for &(t, p, o) in offsets {
        tpl.add_partition_offset(t, p, Offset::Offset(o)).expect("offset");
    }
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
}

fn mirror_agent(data_dir: &Path, source: &str, topics: &[&str]) -> Agent {
    Agent::start(common::serving_mirror_config(data_dir, source, topics, "")).expect("agent")
}

fn log_end(agent: &Agent, partition: i32) -> i64 {
    agent
        .status()
        .get(&("dr".to_string(), TopicPartition::new(TOPIC, partition)))
        .map_or(-1, |s| s.log_end_offset)
}

#[test]
fn groups_from_the_mock_sync_unless_active_at_the_destination() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    cluster.create_topic(UNMIRRORED, 1, 1).expect("topic");
    // A leader move gives orders-1 a later leader epoch than the others.
    cluster.partition_leader(TOPIC, 1, Some(2)).expect("leader");
    cluster.partition_leader(TOPIC, 1, Some(3)).expect("leader");
    // The groups' coordinators are not the broker the sync connects to.
    cluster
        .coordinator(MockCoordinator::Group(IDLE.into()), 2)
        .expect("coordinator");
    cluster
        .coordinator(MockCoordinator::Group(ACTIVE.into()), 3)
        .expect("coordinator");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, PARTITIONS, 300, "none", 0).expect("produce");
    mock_source::produce(&source, UNMIRRORED, 1, 20, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, common::source_high_watermark(&source, TOPIC, p, DEADLINE)))
        .collect();

    // Both groups read at the source and commit what they consumed; the
    // idle one also commits an offset past the end of orders-2.
    let every_partition = [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2), (UNMIRRORED, 0)];
    for (group, per_partition) in [(IDLE, 15), (ACTIVE, 5)] {
        let c = common::consumer(&source, group);
        c.subscribe(&[TOPIC, UNMIRRORED]).expect("subscribe");
        consume(&c, &every_partition, per_partition);
        c.commit_consumer_state(CommitMode::Sync).expect("commit");
        if group == IDLE {
            commit(&c, &[(TOPIC, 2, ends[&2] + AHEAD)]);
        }
    }
    let idle_at_source = committed(&source, IDLE);
    assert_eq!(idle_at_source.len(), 4, "{idle_at_source:?}");
    assert_eq!(idle_at_source[&(TOPIC.to_owned(), 2)].0, ends[&2] + AHEAD);
    assert!(idle_at_source.contains_key(&(UNMIRRORED.to_owned(), 0)));

    let dir = tempfile::tempdir().expect("temp dir");
    let agent = mirror_agent(dir.path(), &source, &[TOPIC]);
    let dest = agent.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&agent, TOPIC, &ends, DEADLINE);

    // The mock lists no groups: they are named.
    let filter = GroupFilter::new([IDLE, ACTIVE], None, None).expect("filter");
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert!(!report.listed, "{report:?}");
    assert_eq!(report.groups.len(), 2, "{report:?}");
    assert_eq!(common::synced(&report, IDLE), (3, 0));
    assert_eq!(common::synced(&report, ACTIVE), (3, 0));
    let idle_at_dest = committed(&dest, IDLE);
    assert_eq!(
        idle_at_dest,
        mirrored_only(&idle_at_source),
        "the source's offsets and leader epochs, mirrored partitions only"
    );
    assert_ne!(
        idle_at_dest[&(TOPIC.to_owned(), 1)].1,
        idle_at_dest[&(TOPIC.to_owned(), 0)].1,
        "orders-1's leader epoch moved"
    );
    let ahead = idle_at_dest[&(TOPIC.to_owned(), 2)].0;
    assert!(
        ahead > log_end(&agent, 2),
        "committed as it is, past the destination's log end"
    );
    let active_before = committed(&dest, ACTIVE);
    assert_eq!(active_before, mirrored_only(&committed(&source, ACTIVE)));

    // A consumer of g-active runs at the destination; meanwhile the group
    // moves on at the source.
    let live = common::LiveConsumer::start(&dest, ACTIVE, TOPIC);
    wait_for_state(&dest, ACTIVE, "Stable");
    {
        let c = common::consumer(&source, ACTIVE);
        c.subscribe(&[TOPIC]).expect("subscribe");
        common::wait_assigned(&c);
        commit(&c, &[(TOPIC, 0, 1), (TOPIC, 1, 2), (TOPIC, 2, 3)]);
    }
    let active_at_source = mirrored_only(&committed(&source, ACTIVE));
    assert_eq!(active_at_source.values().map(|v| v.0).collect::<Vec<_>>(), [1, 2, 3]);
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert_eq!(
        report.outcome(ACTIVE),
        Some(&GroupOutcome::Active { state: "Stable".into() })
    );
    assert_eq!(common::synced(&report, IDLE), (0, 3), "nothing new for the idle group");
    assert_eq!(
        committed(&dest, ACTIVE),
        active_before,
        "an active group's offsets are left alone"
    );

    // The consumer leaves: the group is Empty, and the next round syncs it.
    live.close();
    wait_for_state(&dest, ACTIVE, "Empty");
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert_eq!(common::synced(&report, ACTIVE), (3, 0));
    assert_eq!(committed(&dest, ACTIVE), active_at_source);
    assert_eq!(committed(&dest, IDLE), idle_at_dest);

    // Failover: the offset synced past what the mirror holds moves back to
    // the mirrored log end before the partition takes writes (else a
    // consumer resuming there would skip what producers write below it);
    // offsets within the log stay as synced.
    agent
        .admin(AdminRequest::Stop {
            mirror: "dr".into(),
            topics: vec![TOPIC.into()],
        })
        .expect("stop");
    let ended = common::kafka::wait_failed_over(&agent, TOPIC, PARTITIONS, DEADLINE);
    assert!(
        ended[&2] > ends[&2],
        "the failover markers follow the mirrored log: {ended:?}"
    );
    let mut expected = idle_at_dest.clone();
    let ahead = expected.get_mut(&(TOPIC.to_owned(), 2)).expect("orders-2");
    *ahead = (ends[&2], -1, ahead.2.clone());
    assert_eq!(
        committed(&dest, IDLE),
        expected,
        "orders-2 moved back to the mirrored end, alone"
    );
    assert_eq!(committed(&dest, ACTIVE), active_at_source);

    agent.stop().expect("stop");
}

#[test]
fn an_agent_source_lists_its_groups_and_the_filter_applies() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    cluster.create_topic(UNMIRRORED, 1, 1).expect("topic");
    let mock = cluster.bootstrap_servers();
    mock_source::produce(&mock, TOPIC, PARTITIONS, 150, "none", 0).expect("produce");
    mock_source::produce(&mock, UNMIRRORED, 1, 10, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, common::source_high_watermark(&mock, TOPIC, p, DEADLINE)))
        .collect();

    // Agent A mirrors both topics from the mock and is the source here;
    // agent B mirrors orders only, from A.
    let dir_a = tempfile::tempdir().expect("temp dir");
    let a = mirror_agent(dir_a.path(), &mock, &[TOPIC, UNMIRRORED]);
    let source = a.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&a, TOPIC, &ends, DEADLINE);
    common::wait_mirrored(&a, UNMIRRORED, &BTreeMap::from([(0, 10)]), DEADLINE);
    // B syncs group offsets from A by itself, every metadata round.
    let dir_b = tempfile::tempdir().expect("temp dir");
    let mut b_config = common::serving_mirror_config(dir_b.path(), &source, &[TOPIC], "");
    b_config.mirrors[0].groups_exclude = Some("tmp-.*".into());
    let b = Agent::start(b_config).expect("agent B");
    let dest = b.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&b, TOPIC, &ends, DEADLINE);

    // At A: a live librdkafka group that committed what it read, an admin
    // commit with metadata, and a group the filter leaves out.
    let live = common::consumer(&source, "g-live");
    live.subscribe(&[TOPIC, UNMIRRORED]).expect("subscribe");
    consume(&live, &[(TOPIC, 0), (TOPIC, 1), (TOPIC, 2), (UNMIRRORED, 0)], 5);
    live.commit_consumer_state(CommitMode::Sync).expect("commit");
    common::admin_commit(&source, "g-admin", TOPIC, &[(0, 7, 0), (1, 8, 0), (2, 9, 0)], "tool");
    common::admin_commit(&source, "g-admin", UNMIRRORED, &[(0, 3, 0)], "tool");
    common::admin_commit(&source, "tmp-scratch", TOPIC, &[(0, 1, 0)], "");

    // B's coordinator commits A's offsets of the mirrored topic.
    let started = Instant::now();
    for group in ["g-live", "g-admin"] {
        let at_source = committed(&source, group);
        assert_eq!(at_source.len(), 4, "{group}: {at_source:?}");
        while committed(&dest, group) != mirrored_only(&at_source) {
            assert!(
                started.elapsed() < DEADLINE,
                "{group} not synced by B: {:?}",
                committed(&dest, group)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(
        committed(&dest, "g-admin")[&(TOPIC.to_owned(), 1)],
        (8, 0, "tool".to_owned())
    );
    let described = match b.admin(AdminRequest::DescribeMirror { mirror: "dr".into() }) {
        Ok(AdminAnswer::Mirror { mirror }) => mirror,
        other => panic!("{other:?}"),
    };
    assert!(described.groups_synced_ms.is_some());
    assert!(
        described.groups["g-admin"].starts_with("synced"),
        "{:?}",
        described.groups
    );
    assert!(!described.groups.contains_key("tmp-scratch"), "{:?}", described.groups);

    // The same filter, run directly: every listed group but the excluded
    // one, already in place.
    let filter = GroupFilter::new(Vec::<String>::new(), Some(".*"), Some("tmp-.*")).expect("filter");
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert!(report.listed && report.listing_errors.is_empty(), "{report:?}");
    assert!(report.type_conflicts.is_empty());
    assert_eq!(
        report.groups.keys().map(String::as_str).collect::<Vec<_>>(),
        ["g-admin", "g-live"],
        "every listed group but the excluded one"
    );
    assert_eq!(common::synced(&report, "g-live"), (0, 3));
    assert_eq!(common::synced(&report, "g-admin"), (0, 3));
    assert!(committed(&dest, "tmp-scratch").is_empty());
    assert_eq!(group_state(&dest, "tmp-scratch"), "Dead");

    drop(live);
    b.stop().expect("stop B");
    a.stop().expect("stop A");
}

/// A KIP-848 group with a member at the destination is active there, though
/// DescribeGroups does not know it (Dead): the sync asks
/// ConsumerGroupDescribe and leaves the group alone; once the member left,
/// the offsets are synced.
#[test]
fn a_consumer_protocol_group_active_at_the_destination_is_left_alone() {
    const GROUP: &str = "g-848";
    let dir_a = tempfile::tempdir().expect("temp dir");
    let a = Agent::start(common::serving_config(dir_a.path(), "")).expect("agent A");
    let source = a.listener_addr().expect("listening").to_string();
    let dir_b = tempfile::tempdir().expect("temp dir");
    let b = Agent::start(common::serving_config(dir_b.path(), "")).expect("agent B");
    let dest = b.listener_addr().expect("listening").to_string();
    for addr in [&source, &dest] {
        common::create_topic(addr, TOPIC, PARTITIONS, DEADLINE);
    }
    common::admin_commit(&source, GROUP, TOPIC, &[(0, 5, 0), (1, 6, 0), (2, 7, 0)], "");

    let mut member = KafkaConnection::connect(&dest, IO_TIMEOUT).expect("connect");
    let joined: ConsumerGroupHeartbeatResponse = member
        .request(
            ApiKey::ConsumerGroupHeartbeat as i16,
            1,
            &common::consumer_group_join(GROUP, "m-1", TOPIC),
        )
        .expect("ConsumerGroupHeartbeat");
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1));
    assert_eq!(group_state(&dest, GROUP), "Dead", "DescribeGroups does not know it");
    let filter = GroupFilter::new(Vec::<String>::new(), Some(".*"), None).expect("filter");
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert_eq!(
        report.outcome(GROUP),
        Some(&GroupOutcome::Active { state: "Stable".into() })
    );
    assert!(committed(&dest, GROUP).is_empty());

    let leave = common::consumer_group_join(GROUP, "m-1", TOPIC)
        .with_member_epoch(-1)
        .with_subscribed_topic_names(None)
        .with_topic_partitions(None);
    let left: ConsumerGroupHeartbeatResponse = member
        .request(ApiKey::ConsumerGroupHeartbeat as i16, 1, &leave)
        .expect("ConsumerGroupHeartbeat");
    assert_eq!(left.error_code, 0);
    let report = common::sync_groups(&source, &dest, mirrored(), &filter);
    assert_eq!(common::synced(&report, GROUP), (3, 0), "{report:?}");
    assert_eq!(committed(&dest, GROUP).len(), 3);
    b.stop().expect("stop B");
    a.stop().expect("stop A");
}

#[test]
fn a_failover_takes_the_offsets_committed_at_the_source_since_the_last_round() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let mock = cluster.bootstrap_servers();
    mock_source::produce(&mock, TOPIC, PARTITIONS, 60, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, common::source_high_watermark(&mock, TOPIC, p, DEADLINE)))
        .collect();
    // Agent A (it lists its groups) is the source; agent B mirrors it with
    // no metadata round of its own for an hour after the first.
    let dir_a = tempfile::tempdir().expect("temp dir");
    let a = mirror_agent(dir_a.path(), &mock, &[TOPIC]);
    let source = a.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&a, TOPIC, &ends, DEADLINE);
    let dir_b = tempfile::tempdir().expect("temp dir");
    let mut b_config = common::serving_mirror_config(dir_b.path(), &source, &[TOPIC], "");
    b_config.mirrors[0].metadata_refresh_interval_ms = 3_600_000;
    let b = Agent::start(b_config).expect("agent B");
    let dest = b.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&b, TOPIC, &ends, DEADLINE);
    // The round at start may have run before the partitions were
    // mirroring (no groups synced then): one more, asked for.
    b.admin(AdminRequest::Sync { mirror: "dr".into() }).expect("sync");
    common::wait_until(DEADLINE, "B's group round", || {
        match b.admin(AdminRequest::DescribeMirror { mirror: "dr".into() }) {
            Ok(AdminAnswer::Mirror { mirror }) if mirror.groups_synced_ms.is_some() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    // Committed at the source after that round: only a sync at the
    // failover itself brings it.
    common::admin_commit(&source, "g-late", TOPIC, &[(0, 15, 0), (1, 12, 0)], "late");
    assert!(committed(&dest, "g-late").is_empty(), "no round ran since");
    b.admin(AdminRequest::Stop {
        mirror: "dr".into(),
        topics: vec![TOPIC.into()],
    })
    .expect("stop");
    common::kafka::wait_failed_over(&b, TOPIC, PARTITIONS, DEADLINE);
    assert_eq!(
        committed(&dest, "g-late"),
        mirrored_only(&committed(&source, "g-late")),
        "the source's offsets as committed there, before the partitions took writes"
    );

    b.stop().expect("stop B");
    a.stop().expect("stop A");
}
