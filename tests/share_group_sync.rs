//! Share-group start-offset sync (`ringmirror_control::metadata_sync::groups`, issue 6)
//! between real peers, and our listener's share-group admin APIs
//! (DescribeShareGroupOffsets, AlterShareGroupOffsets,
//! DeleteShareGroupOffsets, ShareGroupDescribe, ListGroups types) over the
//! wire:
//!
//! - Agent A as the source (a local topic, produced into) holds share
//!   group "s1" (start offsets set with AlterShareGroupOffsets) and
//!   consumer group "c1"; agent B mirrors A's topic and syncs by itself
//!   every metadata round: B gets "s1" with the same start offsets and
//!   "c1". A consumer and a share group with the same name: share group
//!   "dup" at A while B holds a consumer group "dup", and consumer group
//!   "rev" at A while B holds a share group "rev" — B's groups stay as they
//!   were, the conflicts are in the sync report and `mirror describe`, the
//!   other groups sync. B keeps "s1" across a restart.
//! - librdkafka's mock cluster as the source (no share-group APIs, no
//!   ListGroups): share groups are simply not synced, consumer groups are,
//!   and nothing fails.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::{
    DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey, DeleteGroupsRequest, DeleteGroupsResponse,
    DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, GroupId, ListGroupsRequest,
    ListGroupsResponse, OffsetFetchRequest, OffsetFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror_control::admin::AdminRequest;
use ringmirror_control::metadata_sync::groups::{CONSUMER_GROUP, GroupFilter, GroupOutcome, SHARE_GROUP};
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_dataplane::client::{Connection, ConnectionOptions};

use common::KafkaConnection;

const DEADLINE: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;
/// At A, never mirrored by B.
const UNMIRRORED: &str = "audit";
/// At B only, before it mirrors anything.
const SCRATCH: &str = "scratch";
const GROUP_ID_NOT_FOUND: i16 = 69;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// Start offsets per (topic, partition); uninitialized (-1) ones left out.
type Starts = BTreeMap<(String, i32), i64>;
/// Committed offsets per (topic, partition); -1 left out.
type Commits = BTreeMap<(String, i32), i64>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_owned(), p)
}

fn conn(addr: &str) -> KafkaConnection {
    KafkaConnection::connect(addr, IO_TIMEOUT).expect("connect")
}

/// An agent serving on a free loopback port, mirroring nothing (yet).
fn local_agent(data_dir: &Path) -> Agent {
    Agent::start(common::serving_config(data_dir, "")).expect("agent")
}

fn listener(agent: &Agent) -> String {
    agent.listener_addr().expect("listening").to_string()
}

/// Mirror "dr" of `topics` from `bootstrap`, refreshing (and syncing
/// the groups `groups_exclude` leaves) every second.
fn mirror_definition(bootstrap: &str, topics: &[&str], groups_exclude: Option<&str>) -> MirrorConfig {
    serde_json::from_value(serde_json::json!({
        "name": "dr",
        "bootstrap_servers": [bootstrap],
        "topics": topics,
        "fetch_max_wait_ms": 50,
        "fetch_partition_max_bytes": 32768,
        "metadata_refresh_interval_ms": 1000,
        "groups_exclude": groups_exclude,
    }))
    .expect("mirror definition")
}

/// AlterShareGroupOffsets v0 of `(topic, partition, start)` for `group`:
/// (top-level error, per-partition errors).
fn alter_share(addr: &str, group: &str, starts: &[(&str, i32, i64)]) -> (i16, BTreeMap<(String, i32), i16>) {
    let mut topics: Vec<AlterShareGroupOffsetsRequestTopic> = Vec::new();
    for &(t, p, o) in starts {
        let partition = AlterShareGroupOffsetsRequestPartition::default()
            .with_partition_index(p)
            .with_start_offset(o);
        match topics.last_mut() {
            Some(last) if last.topic_name.0.as_str() == t => last.partitions.push(partition),
            _ => topics.push(
                AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(TopicName(s(t)))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(topics);
    let response: AlterShareGroupOffsetsResponse = conn(addr)
        .request(ApiKey::AlterShareGroupOffsets as i16, 0, &request)
        .expect("AlterShareGroupOffsets");
    let partitions = response
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| ((t.topic_name.0.to_string(), p.partition_index), p.error_code))
        })
        .collect();
    (response.error_code, partitions)
}

/// Sets start offsets and checks every one was taken.
fn alter_share_ok(addr: &str, group: &str, starts: &[(&str, i32, i64)]) {
    let (error, partitions) = alter_share(addr, group, starts);
    assert_eq!(error, 0, "AlterShareGroupOffsets {group} at {addr}");
    assert_eq!(partitions.len(), starts.len());
    assert!(partitions.values().all(|&c| c == 0), "{group}: {partitions:?}");
}

/// DescribeShareGroupOffsets v0 of `group`: of the partitions of `topics`
/// (by name), or of everything it holds (`None`); initialized start
/// offsets only, after checking the group has no error.
fn share_starts(addr: &str, group: &str, topics: Option<&[(&str, i32)]>) -> Starts {
    let response = describe_share(addr, group, topics);
    let g = &response.groups[0];
    assert_eq!((g.group_id.0.as_str(), g.error_code), (group, 0), "{g:?}");
    g.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter(|p| p.start_offset >= 0).map(move |p| {
                assert_eq!(p.error_code, 0, "{group} {}-{}", t.topic_name.0, p.partition_index);
                ((t.topic_name.0.to_string(), p.partition_index), p.start_offset)
            })
        })
        .collect()
}

fn describe_share(addr: &str, group: &str, topics: Option<&[(&str, i32)]>) -> DescribeShareGroupOffsetsResponse {
    let topics = topics.map(|ts| {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for &(t, p) in ts {
            by_topic.entry(t).or_default().push(p);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                DescribeShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(TopicName(s(t)))
                    .with_partitions(ps)
            })
            .collect()
    });
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(topics),
    ]);
    conn(addr)
        .request(ApiKey::DescribeShareGroupOffsets as i16, 0, &request)
        .expect("DescribeShareGroupOffsets")
}

/// OffsetFetch v8 of `group` for `topics`: (group error, committed offsets).
fn committed(addr: &str, group: &str, topics: &[(&str, i32)]) -> (i16, Commits) {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for &(t, p) in topics {
        by_topic.entry(t).or_default().push(p);
    }
    let topics = by_topic
        .into_iter()
        .map(|(t, ps)| {
            OffsetFetchRequestTopics::default()
                .with_name(TopicName(s(t)))
                .with_partition_indexes(ps)
        })
        .collect();
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(topics)),
    ]);
    let response: OffsetFetchResponse = conn(addr)
        .request(ApiKey::OffsetFetch as i16, 8, &request)
        .expect("OffsetFetch");
    let g = &response.groups[0];
    let offsets = g
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.committed_offset >= 0)
                .map(move |p| ((t.name.0.to_string(), p.partition_index), p.committed_offset))
        })
        .collect();
    (g.error_code, offsets)
}

/// (group id, group type, state) of every group ListGroups v5 lists.
fn listed(addr: &str, types: &[&str]) -> Vec<(String, String, String)> {
    let request = ListGroupsRequest::default().with_types_filter(types.iter().map(|t| s(t)).collect());
    let response: ListGroupsResponse = conn(addr)
        .request(ApiKey::ListGroups as i16, 5, &request)
        .expect("ListGroups");
    assert_eq!(response.error_code, 0);
    let mut out: Vec<_> = response
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.0.to_string(),
                g.group_type.to_string(),
                g.group_state.to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn row(id: &str, group_type: &str) -> (String, String, String) {
    (id.to_owned(), group_type.to_owned(), "Empty".to_owned())
}

fn every_partition() -> Vec<(&'static str, i32)> {
    (0..PARTITIONS).map(|p| (TOPIC, p)).collect()
}

fn mirrored() -> BTreeSet<(String, i32)> {
    (0..PARTITIONS).map(|p| tp(TOPIC, p)).collect()
}

/// The listener's share-group APIs, as Kafka answers them.
fn assert_share_group_apis(addr: &str) {
    // ApiVersions lists them (DescribeShareGroupOffsets, Alter…, Delete…,
    // ShareGroupDescribe v1) and no share consumer API.
    let advertised = conn(addr).advertised_versions();
    // v1 of DescribeShareGroupOffsets adds each partition's lag (KIP-1226).
    assert_eq!(
        advertised.get(&(ApiKey::DescribeShareGroupOffsets as i16)),
        Some(&(0, 1))
    );
    for key in [ApiKey::AlterShareGroupOffsets, ApiKey::DeleteShareGroupOffsets] {
        assert_eq!(advertised.get(&(key as i16)), Some(&(0, 0)), "{key:?}");
    }
    assert_eq!(advertised.get(&(ApiKey::ShareGroupDescribe as i16)), Some(&(1, 1)));
    for key in [
        ApiKey::ShareGroupHeartbeat,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ] {
        assert!(!advertised.contains_key(&(key as i16)), "{key:?} is not served");
    }

    // Alter creates the group; a partition not served is refused alone.
    let (error, partitions) = alter_share(addr, "probe", &[(TOPIC, 0, 3), (TOPIC, 99, 1), ("nope", 0, 1)]);
    assert_eq!(error, 0);
    assert_eq!(
        partitions,
        BTreeMap::from([
            (tp(TOPIC, 0), 0),
            (tp(TOPIC, 99), UNKNOWN_TOPIC_OR_PARTITION),
            (tp("nope", 0), UNKNOWN_TOPIC_OR_PARTITION)
        ])
    );
    // Described by name: -1 (epoch 0) where nothing is set, no error; the
    // start offset set by an alter has no leader epoch.
    let d = describe_share(addr, "probe", Some(&[(TOPIC, 0), (TOPIC, 1), ("nope", 0)]));
    let parts: Vec<(String, i32, i64, i32, i16)> = d.groups[0]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.topic_name.0.to_string(),
                    p.partition_index,
                    p.start_offset,
                    p.leader_epoch,
                    p.error_code,
                )
            })
        })
        .collect();
    assert_eq!(
        parts,
        [
            ("nope".into(), 0, -1, 0, 0),
            (TOPIC.into(), 0, 3, -1, 0),
            (TOPIC.into(), 1, -1, 0, 0)
        ]
    );
    assert!(
        d.groups[0]
            .topics
            .iter()
            .any(|t| t.topic_name.0.as_str() == TOPIC && !t.topic_id.is_nil())
    );
    // An unknown group is no error either.
    assert_eq!(share_starts(addr, "nobody", Some(&[(TOPIC, 0)])), Starts::new());
    assert_eq!(share_starts(addr, "nobody", None), Starts::new());
    // ShareGroupDescribe: Empty, no members.
    let described: ShareGroupDescribeResponse = conn(addr)
        .request(
            ApiKey::ShareGroupDescribe as i16,
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("probe")), GroupId(s("nobody"))]),
        )
        .expect("ShareGroupDescribe");
    let (probe, nobody) = (&described.groups[0], &described.groups[1]);
    assert_eq!(
        (probe.error_code, probe.group_state.as_str(), probe.members.len()),
        (0, "Empty", 0)
    );
    assert_eq!(nobody.error_code, GROUP_ID_NOT_FOUND);
    // DescribeGroups (classic groups) does not know it.
    let classic: DescribeGroupsResponse = conn(addr)
        .request(
            ApiKey::DescribeGroups as i16,
            6,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("probe"))]),
        )
        .expect("DescribeGroups");
    assert_eq!(
        (classic.groups[0].error_code, classic.groups[0].group_state.as_str()),
        (GROUP_ID_NOT_FOUND, "Dead")
    );
    // DeleteShareGroupOffsets: per topic; the group stays.
    let request = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("probe")))
        .with_topics(
            [TOPIC, "nope"]
                .iter()
                .map(|t| DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(TopicName(s(t))))
                .collect(),
        );
    let deleted: DeleteShareGroupOffsetsResponse = conn(addr)
        .request(ApiKey::DeleteShareGroupOffsets as i16, 0, &request)
        .expect("DeleteShareGroupOffsets");
    assert_eq!(deleted.error_code, 0);
    let codes: Vec<(&str, i16)> = deleted
        .responses
        .iter()
        .map(|t| (t.topic_name.0.as_str(), t.error_code))
        .collect();
    assert_eq!(codes, [(TOPIC, 0), ("nope", UNKNOWN_TOPIC_OR_PARTITION)]);
    assert_eq!(share_starts(addr, "probe", None), Starts::new());
    assert!(listed(addr, &["share"]).contains(&row("probe", "share")));
    let unknown: DeleteShareGroupOffsetsResponse = conn(addr)
        .request(
            ApiKey::DeleteShareGroupOffsets as i16,
            0,
            &request.clone().with_group_id(GroupId(s("nobody"))),
        )
        .expect("DeleteShareGroupOffsets");
    assert_eq!(unknown.error_code, GROUP_ID_NOT_FOUND);
    // DeleteGroups removes it.
    let gone: DeleteGroupsResponse = conn(addr)
        .request(
            ApiKey::DeleteGroups as i16,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("probe"))]),
        )
        .expect("DeleteGroups");
    assert_eq!(gone.results[0].error_code, 0);
    assert!(!listed(addr, &[]).iter().any(|(g, _, _)| g == "probe"));
}

#[test]
fn share_and_consumer_groups_sync_and_never_overwrite_each_other() {
    let started = Instant::now();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    // A: local topics, produced into.
    let a = local_agent(dir_a.path());
    let a_addr = listener(&a);
    common::create_topic(&a_addr, TOPIC, PARTITIONS, DEADLINE);
    common::create_topic(&a_addr, UNMIRRORED, 1, DEADLINE);
    mock_source::produce(&a_addr, TOPIC, PARTITIONS, 60, "none", 0).expect("produce");
    mock_source::produce(&a_addr, UNMIRRORED, 1, 5, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| {
            (
                p,
                common::source_partition_log(&a_addr, TOPIC, p, DEADLINE).high_watermark,
            )
        })
        .collect();
    assert!(ends.values().all(|&e| e >= 10), "{ends:?}");
    assert_share_group_apis(&a_addr);

    // A's groups: share "s1" and "dup", consumer "c1" and "rev".
    alter_share_ok(
        &a_addr,
        "s1",
        &[(TOPIC, 0, 5), (TOPIC, 1, 7), (TOPIC, 2, 0), (UNMIRRORED, 0, 3)],
    );
    common::admin_commit(&a_addr, "c1", TOPIC, &[(0, 4, -1), (1, 5, -1), (2, 6, -1)], "");
    common::admin_commit(&a_addr, "c1", UNMIRRORED, &[(0, 2, -1)], "");
    alter_share_ok(&a_addr, "dup", &[(TOPIC, 0, 11)]);
    common::admin_commit(&a_addr, "rev", TOPIC, &[(0, 12, -1)], "");
    assert_eq!(
        listed(&a_addr, &[]),
        [
            row("c1", "classic"),
            row("dup", "share"),
            row("rev", "classic"),
            row("s1", "share")
        ]
    );
    assert_eq!(
        listed(&a_addr, &["classic", "consumer"]),
        [row("c1", "classic"), row("rev", "classic")],
        "no share group in a listing without the share type"
    );
    // A group id is one group of one type, at A too.
    assert_eq!(alter_share(&a_addr, "c1", &[(TOPIC, 0, 1)]).0, GROUP_ID_NOT_FOUND);
    assert_eq!(committed(&a_addr, "s1", &every_partition()).0, GROUP_ID_NOT_FOUND);

    // B, before it mirrors anything: consumer group "dup" and share group
    // "rev" on a topic of its own.
    let b = local_agent(dir_b.path());
    let b_addr = listener(&b);
    common::create_topic(&b_addr, SCRATCH, 1, DEADLINE);
    common::admin_commit(&b_addr, "dup", SCRATCH, &[(0, 1, -1)], "");
    alter_share_ok(&b_addr, "rev", &[(SCRATCH, 0, 2)]);
    let b_dup = committed(&b_addr, "dup", &[(SCRATCH, 0), (TOPIC, 0)]);
    assert_eq!(b_dup, (0, Commits::from([(tp(SCRATCH, 0), 1)])));

    // B mirrors orders from A and syncs A's groups every round.
    b.admin(AdminRequest::CreateMirror {
        config: mirror_definition(&a_addr, &[TOPIC], None),
    })
    .expect("create the mirror at B");
    common::wait_mirrored(&b, TOPIC, &ends, DEADLINE);
    let s1_at_a = share_starts(&a_addr, "s1", None);
    assert_eq!(s1_at_a.len(), 4);
    let s1_mirrored: Starts = s1_at_a
        .iter()
        .filter(|((t, _), _)| t == TOPIC)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    common::wait_until(DEADLINE, "B syncs s1 and c1 from A", || {
        let s1 = share_starts(&b_addr, "s1", Some(&every_partition()));
        let c1 = committed(&b_addr, "c1", &every_partition());
        if s1 == s1_mirrored && c1.1.len() == 3 {
            Ok(())
        } else {
            Err(format!("s1 {s1:?}, c1 {c1:?}"))
        }
    });
    assert_eq!(
        share_starts(&b_addr, "s1", None),
        Starts::from([(tp(TOPIC, 0), 5), (tp(TOPIC, 1), 7), (tp(TOPIC, 2), 0)]),
        "the mirrored partitions' start offsets, nothing of the unmirrored topic"
    );
    assert_eq!(
        committed(&b_addr, "c1", &every_partition()).1,
        Commits::from([(tp(TOPIC, 0), 4), (tp(TOPIC, 1), 5), (tp(TOPIC, 2), 6)])
    );
    let described = common::wait_until(DEADLINE, "B's describe shows the conflicts", || {
        let d = common::describe_mirror(&b, "dr");
        if d.groups.contains_key("dup") && d.groups.contains_key("rev") {
            Ok(d)
        } else {
            Err(format!("{:?}", d.groups))
        }
    });
    assert!(described.groups["s1"].starts_with("synced"), "{:?}", described.groups);
    assert!(described.groups["c1"].starts_with("synced"), "{:?}", described.groups);
    assert_eq!(
        described.groups["dup"],
        "skipped: type conflict: a share group at the source, a consumer group here"
    );
    assert_eq!(
        described.groups["rev"],
        "skipped: type conflict: a consumer group at the source, a share group here"
    );
    // B's own groups are as they were.
    assert_eq!(committed(&b_addr, "dup", &[(SCRATCH, 0), (TOPIC, 0)]), b_dup);
    assert_eq!(share_starts(&b_addr, "dup", Some(&[(TOPIC, 0)])), Starts::new());
    assert_eq!(share_starts(&b_addr, "rev", None), Starts::from([(tp(SCRATCH, 0), 2)]));
    assert_eq!(committed(&b_addr, "rev", &[(TOPIC, 0)]).0, GROUP_ID_NOT_FOUND);
    assert_eq!(
        listed(&b_addr, &[]),
        [
            row("c1", "classic"),
            row("dup", "classic"),
            row("rev", "share"),
            row("s1", "share")
        ]
    );

    // B's own rounds stop syncing groups, so the rounds below are the
    // only ones.
    b.admin(AdminRequest::UpdateMirror {
        config: mirror_definition(&a_addr, &[TOPIC], Some(".*")),
    })
    .expect("update the mirror at B");
    common::wait_until(DEADLINE, "B's rounds sync no group", || {
        let d = common::describe_mirror(&b, "dr");
        if d.groups.is_empty() {
            Ok(())
        } else {
            Err(format!("{:?}", d.groups))
        }
    });

    // The same round, run directly: in place, and the conflicts reported.
    let filter = GroupFilter::default();
    let report = common::sync_groups(&a_addr, &b_addr, mirrored(), &filter);
    assert!(
        report.listed && report.listing_errors.is_empty() && report.type_conflicts.is_empty(),
        "{report:?}"
    );
    assert_eq!(common::synced(&report, "s1"), (0, 3));
    assert_eq!(common::synced(&report, "c1"), (0, 3));
    assert_eq!(
        report.outcome("dup"),
        Some(&GroupOutcome::TypeConflict {
            source: SHARE_GROUP.into(),
            destination: CONSUMER_GROUP.into()
        })
    );
    assert_eq!(
        report.outcome("rev"),
        Some(&GroupOutcome::TypeConflict {
            source: CONSUMER_GROUP.into(),
            destination: SHARE_GROUP.into()
        })
    );

    // s1 moves on at A: only the changed partition is written.
    alter_share_ok(&a_addr, "s1", &[(TOPIC, 0, 20)]);
    let report = common::sync_groups(&a_addr, &b_addr, mirrored(), &filter);
    assert_eq!(common::synced(&report, "s1"), (1, 2));
    assert_eq!(
        share_starts(&b_addr, "s1", Some(&[(TOPIC, 0)])),
        Starts::from([(tp(TOPIC, 0), 20)])
    );

    // B keeps its share groups across a restart (the mirror first: a
    // stopping source leaves its mirror's requests hanging).
    b.stop().expect("stop B");
    let b = local_agent(dir_b.path());
    let b_addr = listener(&b);
    assert_eq!(
        share_starts(&b_addr, "s1", None),
        Starts::from([(tp(TOPIC, 0), 20), (tp(TOPIC, 1), 7), (tp(TOPIC, 2), 0)])
    );
    assert_eq!(share_starts(&b_addr, "rev", None), Starts::from([(tp(SCRATCH, 0), 2)]));
    assert_eq!(alter_share(&b_addr, "dup", &[(SCRATCH, 0, 1)]).0, GROUP_ID_NOT_FOUND);
    b.stop().expect("stop B");
    a.stop().expect("stop A");
    eprintln!("share groups between agents: {:?}", started.elapsed());
}

/// librdkafka's mock cluster speaks no share-group API (nor ListGroups):
/// a sync from it into an agent that holds share groups syncs the named
/// consumer group, asks the mock nothing of share groups, touches no share
/// group and reports nothing failed.
#[test]
fn a_source_without_share_groups_syncs_consumer_groups_only() {
    let started = Instant::now();
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let mock = cluster.bootstrap_servers();
    mock_source::produce(&mock, TOPIC, PARTITIONS, 30, "none", 0).expect("produce");
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, common::source_high_watermark(&mock, TOPIC, p, DEADLINE)))
        .collect();
    {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &mock)
            .set("group.id", "c-mock")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(TOPIC, p, rdkafka::Offset::Offset(i64::from(p) + 1))
                .expect("offset");
        }
        c.commit(&tpl, CommitMode::Sync).expect("commit at the mock");
    }
    let advertises_share = common::on_glommio({
        let mock = mock.clone();
        move || async move {
            let c = Connection::connect(&mock, ConnectionOptions::default())
                .await
                .expect("mock");
            c.advertises(ApiKey::DescribeShareGroupOffsets as i16) || c.advertises(ApiKey::ListGroups as i16)
        }
    });
    assert!(!advertises_share, "the mock lists no groups and has no share groups");

    let dir = tempfile::tempdir().unwrap();
    let config = common::serving_mirror_config(dir.path(), &mock, &[TOPIC], "");
    let b = Agent::start(config).expect("agent");
    let b_addr = listener(&b);
    common::wait_mirrored(&b, TOPIC, &ends, DEADLINE);
    // B holds a share group of its own.
    alter_share_ok(&b_addr, "s-keep", &[(TOPIC, 0, 9)]);

    // "s-keep" is named too: unlisted, it is taken for a consumer group,
    // has nothing at the source, and B's share group stays as it is.
    let filter = GroupFilter::new(["c-mock", "s-keep"], None, None).expect("filter");
    let report = common::sync_groups(&mock, &b_addr, mirrored(), &filter);
    assert!(!report.listed && report.listing_errors.is_empty() && report.type_conflicts.is_empty());
    assert_eq!(
        report.groups.keys().collect::<Vec<_>>(),
        ["c-mock", "s-keep"],
        "{report:?}"
    );
    assert_eq!(common::synced(&report, "c-mock"), (3, 0));
    assert_eq!(common::synced(&report, "s-keep"), (0, 0));
    assert_eq!(
        committed(&b_addr, "c-mock", &every_partition()).1,
        Commits::from([(tp(TOPIC, 0), 1), (tp(TOPIC, 1), 2), (tp(TOPIC, 2), 3)])
    );
    assert_eq!(share_starts(&b_addr, "s-keep", None), Starts::from([(tp(TOPIC, 0), 9)]));
    assert_eq!(listed(&b_addr, &["share"]), [row("s-keep", "share")]);
    b.stop().expect("stop");
    eprintln!("a source without share groups: {:?}", started.elapsed());
}
