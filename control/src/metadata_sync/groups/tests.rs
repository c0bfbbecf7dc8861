use std::cell::RefCell;
use std::rc::Rc;

use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsResponse, ApiKey, DescribeGroupsRequest, DescribeShareGroupOffsetsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, DescribeGroupsResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use ringmirror_protocol::error_codes as codes;

use super::consumer::*;
use super::coordinators::*;
use super::listing::*;
use super::offsets::*;
use super::share::*;
use super::*;

fn tp(t: &str, p: i32) -> (String, i32) {
    (t.to_owned(), p)
}

fn committed(offset: i64, leader_epoch: i32, metadata: &str) -> Committed {
    Committed {
        offset,
        leader_epoch,
        metadata: Some(metadata.to_owned()),
    }
}

/// Encodes `request` at `version` and decodes it back, as a broker
/// would read it.
fn round_trip<R: Encodable + Decodable>(request: &R, version: i16) -> R {
    let mut buf = Vec::new();
    request
        .encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
    let mut read = buf.as_slice();
    let decoded = R::decode(&mut read, version).unwrap_or_else(|e| panic!("decode v{version}: {e}"));
    assert!(read.is_empty(), "v{version}: bytes left over");
    decoded
}

#[test]
fn the_filter_takes_named_and_matching_ids_and_exclude_wins() {
    let all = GroupFilter::default();
    assert!(all.wants("anything") && all.wants("__internal-looking") && all.named().is_empty());
    let f = GroupFilter::new(["billing", "tmp-keep"], Some("app-.*"), Some("tmp-.*|app-test")).unwrap();
    assert!(f.wants("billing") && f.wants("app-orders"));
    assert!(!f.wants("tmp-keep"), "exclude wins over a named id");
    assert!(!f.wants("app-test") && !f.wants("xapp-orders") && !f.wants("other"));
    let named_only = GroupFilter::new(["a"], None, None).unwrap();
    assert!(named_only.wants("a") && !named_only.wants("b"));
    assert!(GroupFilter::new(Vec::<String>::new(), Some("("), None).is_err());
}

#[test]
fn listed_groups_are_sorted_by_type() {
    // Consumer groups: classic of the consumer protocol or none (simple
    // committers), and KIP-848 consumer groups; Connect's groups are not.
    assert_eq!(kind_of(false, "", "consumer"), Some(GroupKind::Consumer));
    assert_eq!(kind_of(false, "", ""), Some(GroupKind::Consumer));
    assert_eq!(kind_of(false, "Classic", "consumer"), Some(GroupKind::Consumer));
    assert_eq!(kind_of(false, "consumer", "consumer"), Some(GroupKind::Consumer));
    assert_eq!(kind_of(false, "classic", "connect"), None);
    assert_eq!(kind_of(false, "", "connect"), None);
    // A share listing, or a group that says it is a share group.
    assert_eq!(kind_of(true, "", ""), Some(GroupKind::Share));
    assert_eq!(kind_of(false, "Share", ""), Some(GroupKind::Share));
    assert_eq!(kind_of(false, "streams", ""), Some(GroupKind::Other("streams".into())));

    let listing: Listing = [
        ("app", vec![GroupKind::Consumer]),
        ("dual", vec![GroupKind::Consumer, GroupKind::Share]),
        ("queue", vec![GroupKind::Share]),
        ("kstreams", vec![GroupKind::Other("streams".into())]),
        ("tmp-1", vec![GroupKind::Consumer]),
        ("named-share", vec![GroupKind::Share]),
    ]
    .into_iter()
    .map(|(g, k)| (g.to_owned(), k.into_iter().collect()))
    .collect();
    let filter = GroupFilter::new(
        ["named-share", "named-only"],
        Some("app|dual|queue|kstreams|tmp-.*"),
        Some("tmp-.*"),
    )
    .unwrap();
    let mut report = GroupSyncReport::default();
    let sync = plan(
        Some(listing.clone()),
        &filter,
        Some(SHARE_GROUPS_UNSUPPORTED),
        &mut report,
    );
    assert_eq!(sync.consumer, ["app", "named-only"]);
    assert!(sync.share.is_empty());
    assert!(report.listed);
    assert_eq!(report.type_conflicts, BTreeSet::from(["dual".to_owned()]));
    let skipped = |g: &str| match report.outcome(g) {
        Some(GroupOutcome::Skipped { reason }) => reason.clone(),
        other => panic!("{g}: {other:?}"),
    };
    assert_eq!(
        skipped("queue"),
        "share group: destination does not support share groups"
    );
    assert_eq!(
        skipped("named-share"),
        skipped("queue"),
        "named, but still a share group"
    );
    assert!(skipped("kstreams").contains("streams"));
    assert!(report.outcome("tmp-1").is_none() && report.outcome("app").is_none());

    // A destination that takes share groups: they are synced too;
    // the conflicting id still is not.
    let mut report = GroupSyncReport::default();
    let sync = plan(Some(listing), &filter, None, &mut report);
    assert_eq!(sync.consumer, ["app", "named-only"]);
    assert_eq!(sync.share, ["named-share", "queue"]);
    assert_eq!(report.type_conflicts, BTreeSet::from(["dual".to_owned()]));
    assert_eq!(report.groups.keys().collect::<Vec<_>>(), ["kstreams"]);

    // A source that cannot list: the named groups only, as consumer groups.
    let mut report = GroupSyncReport::default();
    let sync = plan(None, &filter, None, &mut report);
    assert_eq!(sync.consumer, ["named-only", "named-share"]);
    assert!(sync.share.is_empty());
    assert!(!report.listed && report.groups.is_empty());
}

#[test]
fn list_groups_asks_per_type_from_v5() {
    let filters = |v, share| -> Vec<(bool, Vec<String>)> {
        list_groups_requests(v, share)
            .into_iter()
            .map(|(is_share, r)| {
                let r = round_trip(&r, v);
                (is_share, r.types_filter.iter().map(|t| t.to_string()).collect())
            })
            .collect()
    };
    assert_eq!(filters(4, true), [(false, vec![])]);
    assert_eq!(
        filters(5, false),
        [(false, vec!["classic".to_owned(), "consumer".to_owned()])]
    );
    assert_eq!(
        filters(5, true),
        [
            (false, vec!["classic".to_owned(), "consumer".to_owned()]),
            (true, vec!["share".to_owned()])
        ]
    );
    let response = ListGroupsResponse::default().with_groups(vec![
        ListedGroup::default()
            .with_group_id(GroupId(s("a")))
            .with_protocol_type(s("consumer"))
            .with_group_type(s("classic")),
        ListedGroup::default()
            .with_group_id(GroupId(s("w")))
            .with_protocol_type(s("connect"))
            .with_group_type(s("classic")),
        ListedGroup::default().with_group_id(GroupId(s("q"))),
    ]);
    assert_eq!(
        listed_groups(false, &response),
        [
            ("a".to_owned(), GroupKind::Consumer),
            ("q".to_owned(), GroupKind::Consumer)
        ]
    );
    assert_eq!(listed_groups(true, &response)[1], ("q".to_owned(), GroupKind::Share));
    assert_eq!(ApiKey::DescribeShareGroupOffsets as i16, 90);
}

#[test]
fn find_coordinator_batches_from_v4() {
    let keys = ["g1".to_owned(), "g2".to_owned()];
    for v in 0..=5 {
        let r = round_trip(&find_coordinator_request(v, &keys[..if v >= 4 { 2 } else { 1 }]), v);
        if v >= 4 {
            assert_eq!(r.coordinator_keys, [s("g1"), s("g2")]);
        } else {
            assert_eq!(r.key, s("g1"));
        }
        assert_eq!(r.key_type, KEY_TYPE_GROUP);
    }
    let response = FindCoordinatorResponse::default().with_coordinators(vec![
        Coordinator::default()
            .with_key(s("g1"))
            .with_host(s("h1"))
            .with_port(9092),
        Coordinator::default().with_key(s("g2")).with_error_code(15),
    ]);
    let found = coordinators_from(4, &[keys[0].clone(), keys[1].clone(), "g3".into()], &response);
    assert_eq!(found[0], ("g1".into(), Ok("h1:9092".into())));
    assert!(found[1].1.as_ref().unwrap_err().contains("15"));
    assert!(found[2].1.is_err());
    let single = FindCoordinatorResponse::default().with_host(s("h2")).with_port(1);
    assert_eq!(coordinators_from(3, &keys[..1], &single)[0].1, Ok("h2:1".into()));
}

#[test]
fn offset_fetch_asks_all_from_v7_and_batches_from_v8() {
    let topics: Topics = vec![("orders".into(), vec![0, 1]), ("pay".into(), vec![3])];
    let asks = [("g1".to_owned(), topics.clone()), ("g2".to_owned(), topics.clone())];
    for v in 1..=9 {
        for all in [false, true] {
            let batch = if v >= 8 { &asks[..] } else { &asks[..1] };
            let r = round_trip(&offset_fetch_request(v, batch, all), v);
            let asked_all = all && v >= 7;
            if v >= 8 {
                assert_eq!(r.groups.len(), 2);
                let g = &r.groups[1];
                assert_eq!(g.group_id.0.as_str(), "g2");
                assert_eq!(g.topics.is_none(), asked_all, "v{v}");
                if let Some(ts) = &g.topics {
                    assert_eq!(ts[0].partition_indexes, [0, 1]);
                }
                if v >= 9 {
                    assert_eq!((g.member_id.as_ref(), g.member_epoch), (None, -1));
                }
            } else {
                assert_eq!(r.group_id.0.as_str(), "g1");
                assert_eq!(r.topics.is_none(), asked_all, "v{v}");
                if let Some(ts) = &r.topics {
                    assert_eq!(ts[1].name.0.as_str(), "pay");
                    assert_eq!(ts[1].partition_indexes, [3]);
                }
            }
            assert!(!r.require_stable);
        }
    }
}

#[test]
fn offset_fetch_answers_keep_committed_mirrored_partitions() {
    let keep: BTreeSet<_> = [tp("orders", 0), tp("orders", 1), tp("orders", 2)].into();
    let p = |i, offset, error| {
        OffsetFetchResponsePartition::default()
            .with_partition_index(i)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(4)
            .with_metadata(Some(s("m")))
            .with_error_code(error)
    };
    let response = OffsetFetchResponse::default().with_topics(vec![
        OffsetFetchResponseTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partitions(vec![p(0, 10, 0), p(1, -1, 0), p(2, 7, 3)]),
        OffsetFetchResponseTopic::default()
            .with_name(TopicName(s("unmirrored")))
            .with_partitions(vec![p(0, 5, 0)]),
    ]);
    let got = offsets_from(6, &["g".into()], &response, &keep);
    assert_eq!(got[0].0, "g");
    let offsets = got[0].1.clone().unwrap();
    assert_eq!(offsets, Offsets::from([(tp("orders", 0), committed(10, 4, "m"))]));
    // A coordinator error is the group's, whichever level says it.
    let moved = response.clone().with_topics(vec![
        OffsetFetchResponseTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partitions(vec![p(0, -1, NOT_COORDINATOR)]),
    ]);
    assert!(offsets_from(1, &["g".into()], &moved, &keep)[0].1.is_err());
    assert!(
        offsets_from(6, &["g".into()], &response.clone().with_error_code(15), &keep)[0]
            .1
            .is_err()
    );
    // v1 has no group error code: it is not looked at.
    assert!(
        offsets_from(1, &["g".into()], &response.clone().with_error_code(15), &keep)[0]
            .1
            .is_ok()
    );

    let pp = |i, offset| {
        OffsetFetchResponsePartitions::default()
            .with_partition_index(i)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(2)
            .with_metadata(None)
    };
    let batched = OffsetFetchResponse::default().with_groups(vec![
        OffsetFetchResponseGroup::default()
            .with_group_id(GroupId(s("a")))
            .with_topics(vec![
                OffsetFetchResponseTopics::default()
                    .with_name(TopicName(s("orders")))
                    .with_partitions(vec![pp(2, 99)]),
            ]),
        OffsetFetchResponseGroup::default()
            .with_group_id(GroupId(s("gone")))
            .with_error_code(codes::GROUP_ID_NOT_FOUND),
        OffsetFetchResponseGroup::default()
            .with_group_id(GroupId(s("busy")))
            .with_error_code(COORDINATOR_LOAD_IN_PROGRESS),
    ]);
    let asked = ["a".to_owned(), "gone".into(), "busy".into(), "missing".into()];
    let got: BTreeMap<_, _> = offsets_from(8, &asked, &batched, &keep).into_iter().collect();
    assert_eq!(
        got["a"],
        Ok(Offsets::from([(
            tp("orders", 2),
            Committed {
                offset: 99,
                leader_epoch: 2,
                metadata: None
            }
        )]))
    );
    assert_eq!(got["gone"], Ok(Offsets::new()));
    assert!(got["busy"].is_err() && got["missing"].is_err());
}

#[test]
fn offset_commit_is_an_admin_commit_with_epochs_from_v6() {
    let offsets = Offsets::from([
        (tp("orders", 0), committed(10, 3, "meta")),
        (tp("orders", 1), committed(1_000_000, 4, "")),
        (
            tp("pay", 0),
            Committed {
                offset: 5,
                leader_epoch: -1,
                metadata: None,
            },
        ),
    ]);
    for v in 2..=9 {
        let r = round_trip(&offset_commit_request(v, "g", &offsets), v);
        assert_eq!(r.group_id.0.as_str(), "g");
        assert_eq!((r.generation_id_or_member_epoch, r.member_id.as_str()), (-1, ""));
        assert_eq!(r.group_instance_id, None);
        assert_eq!(r.retention_time_ms, -1);
        assert_eq!(r.topics.len(), 2);
        let p = &r.topics[0].partitions;
        assert_eq!(
            (p[0].committed_offset, p[1].committed_offset),
            (10, 1_000_000),
            "offsets go as they are"
        );
        assert_eq!(p[0].committed_metadata.as_deref(), Some("meta"));
        assert_eq!(r.topics[1].partitions[0].committed_metadata, None);
        assert_eq!(p[1].committed_leader_epoch, if v >= 6 { 4 } else { -1 }, "v{v}");
    }
    let response = OffsetCommitResponse::default().with_topics(vec![
        OffsetCommitResponseTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partitions(vec![
                OffsetCommitResponsePartition::default().with_partition_index(0),
                OffsetCommitResponsePartition::default()
                    .with_partition_index(1)
                    .with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
            ]),
    ]);
    assert_eq!(
        commit_results(&response),
        (
            1,
            BTreeMap::from([(tp("orders", 1), codes::UNKNOWN_TOPIC_OR_PARTITION)])
        )
    );
    assert!(committed(1, 2, "").same_as(&Committed {
        offset: 1,
        leader_epoch: 2,
        metadata: None
    }));
    assert!(!committed(1, 2, "").same_as(&committed(1, 3, "")));
    assert!(is_inactive("Empty") && is_inactive("Dead") && is_inactive("empty"));
    assert!(!is_inactive("Stable") && !is_inactive("PreparingRebalance") && !is_inactive("CompletingRebalance"));
}

// ---- a fake cluster, for the whole round ----

/// One fake broker: answers what the round asks from what is set here,
/// and records what it was asked.
#[derive(Default)]
struct Fake {
    /// (api key, max version) advertised; min is 0 (1 for OffsetFetch, 2
    /// for OffsetCommit, as the crate encodes).
    apis: Vec<(i16, i16)>,
    brokers: Vec<(i32, String)>,
    /// Groups this broker coordinates: id → (protocol type, group type).
    groups: BTreeMap<String, (&'static str, &'static str)>,
    /// Where each group's coordinator is.
    coordinators: BTreeMap<String, String>,
    offsets: BTreeMap<String, Offsets>,
    /// DescribeGroups states (unknown groups are not found).
    states: BTreeMap<String, &'static str>,
    /// (api key, version) of every request.
    seen: Vec<(i16, i16)>,
    list_filters: Vec<Vec<String>>,
    commits: Vec<(String, i32, String)>,
    /// Share groups' start offsets, and the groups altered, in order.
    share_offsets: BTreeMap<String, ShareOffsets>,
    alters: Vec<(String, usize)>,
}

type Shared = Rc<RefCell<Fake>>;
/// A topic's partitions and what each holds.
type Held = Vec<(i32, Option<Committed>)>;

impl crate::fake_broker::Answer for Fake {
    fn answer(&mut self, api: ApiKey, version: i16, buf: &mut &[u8]) -> Vec<u8> {
        self.seen.push((api as i16, version));
        let mut out = Vec::new();
        match api {
            ApiKey::ApiVersions => {
                ApiVersionsRequest::decode(buf, version).unwrap();
                let keys = self
                    .apis
                    .iter()
                    .map(|&(key, max)| {
                        let min = match key {
                            k if k == ApiKey::OffsetFetch as i16 => 1,
                            k if k == ApiKey::OffsetCommit as i16 => 2,
                            _ => 0,
                        };
                        ApiVersion::default()
                            .with_api_key(key)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect();
                ApiVersionsResponse::default()
                    .with_api_keys(keys)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::Metadata => {
                let r = MetadataRequest::decode(buf, version).unwrap();
                assert_eq!(r.topics.map(|t| t.len()), Some(0), "brokers only");
                let brokers = self
                    .brokers
                    .iter()
                    .map(|(id, addr)| {
                        let (host, port) = addr.rsplit_once(':').unwrap();
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(*id))
                            .with_host(s(host))
                            .with_port(port.parse().unwrap())
                    })
                    .collect();
                MetadataResponse::default()
                    .with_brokers(brokers)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::ListGroups => {
                let r = ListGroupsRequest::decode(buf, version).unwrap();
                let types: Vec<String> = r.types_filter.iter().map(|t| t.to_lowercase()).collect();
                self.list_filters.push(types.clone());
                let groups = self
                    .groups
                    .iter()
                    .filter(|(_, (_, group_type))| types.is_empty() || types.iter().any(|t| t == group_type))
                    .map(|(id, (protocol_type, group_type))| {
                        let g = ListedGroup::default()
                            .with_group_id(GroupId(s(id)))
                            .with_protocol_type(s(protocol_type))
                            .with_group_state(s(self.states.get(id.as_str()).copied().unwrap_or("Empty")));
                        if version >= 5 {
                            g.with_group_type(s(group_type))
                        } else {
                            g
                        }
                    })
                    .collect();
                ListGroupsResponse::default()
                    .with_groups(groups)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::FindCoordinator => {
                let r = FindCoordinatorRequest::decode(buf, version).unwrap();
                // Groups it knows nothing of are coordinated by the first broker.
                let addr = |key: &str| {
                    let at = self.coordinators.get(key).unwrap_or(&self.brokers[0].1);
                    let (host, port) = at.rsplit_once(':').unwrap();
                    (s(host), port.parse::<i32>().unwrap())
                };
                let response = if version >= 4 {
                    FindCoordinatorResponse::default().with_coordinators(
                        r.coordinator_keys
                            .iter()
                            .map(|k| {
                                let (host, port) = addr(k);
                                Coordinator::default()
                                    .with_key(k.clone())
                                    .with_host(host)
                                    .with_port(port)
                            })
                            .collect(),
                    )
                } else {
                    let (host, port) = addr(&r.key);
                    FindCoordinatorResponse::default().with_host(host).with_port(port)
                };
                response.encode(&mut out, version).unwrap();
            }
            ApiKey::OffsetFetch => {
                let r = OffsetFetchRequest::decode(buf, version).unwrap();
                let answer = |group: &str, topics: Option<Topics>| -> Vec<(String, Held)> {
                    let held = self.offsets.get(group).cloned().unwrap_or_default();
                    match topics {
                        None => by_topic(held.keys())
                            .into_iter()
                            .map(|(t, ps)| {
                                let v = ps.iter().map(|&p| (p, held.get(&(t.clone(), p)).cloned())).collect();
                                (t, v)
                            })
                            .collect(),
                        Some(ts) => ts
                            .into_iter()
                            .map(|(t, ps)| {
                                let v = ps.iter().map(|&p| (p, held.get(&(t.clone(), p)).cloned())).collect();
                                (t, v)
                            })
                            .collect(),
                    }
                };
                let fields = |c: Option<Committed>| {
                    c.map_or((-1, -1, None), |c| {
                        (c.offset, c.leader_epoch, c.metadata.as_deref().map(s))
                    })
                };
                let response = if version >= 8 {
                    let groups = r
                        .groups
                        .iter()
                        .map(|g| {
                            let topics = g.topics.as_ref().map(|ts| {
                                ts.iter()
                                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                                    .collect()
                            });
                            let topics = answer(&g.group_id.0, topics)
                                .into_iter()
                                .map(|(t, ps)| {
                                    let ps = ps
                                        .into_iter()
                                        .map(|(p, c)| {
                                            let (o, e, m) = fields(c);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(o)
                                                .with_committed_leader_epoch(e)
                                                .with_metadata(m)
                                        })
                                        .collect();
                                    OffsetFetchResponseTopics::default()
                                        .with_name(TopicName(s(&t)))
                                        .with_partitions(ps)
                                })
                                .collect();
                            OffsetFetchResponseGroup::default()
                                .with_group_id(g.group_id.clone())
                                .with_topics(topics)
                        })
                        .collect();
                    OffsetFetchResponse::default().with_groups(groups)
                } else {
                    let topics = r.topics.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                            .collect()
                    });
                    let topics = answer(&r.group_id.0, topics)
                        .into_iter()
                        .map(|(t, ps)| {
                            let ps = ps
                                .into_iter()
                                .map(|(p, c)| {
                                    let (o, e, m) = fields(c);
                                    let p = OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_metadata(m);
                                    if version >= 5 {
                                        p.with_committed_leader_epoch(e)
                                    } else {
                                        p
                                    }
                                })
                                .collect();
                            OffsetFetchResponseTopic::default()
                                .with_name(TopicName(s(&t)))
                                .with_partitions(ps)
                        })
                        .collect();
                    OffsetFetchResponse::default().with_topics(topics)
                };
                response.encode(&mut out, version).unwrap();
            }
            ApiKey::DescribeGroups => {
                let r = DescribeGroupsRequest::decode(buf, version).unwrap();
                let groups = r
                    .groups
                    .iter()
                    .map(|g| {
                        let d = DescribedGroup::default().with_group_id(g.clone());
                        match self.states.get(g.0.as_str()) {
                            Some(state) => d.with_group_state(s(state)),
                            None if version >= 6 => {
                                d.with_group_state(s("Dead")).with_error_code(codes::GROUP_ID_NOT_FOUND)
                            }
                            None => d.with_group_state(s("Dead")),
                        }
                    })
                    .collect();
                DescribeGroupsResponse::default()
                    .with_groups(groups)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::OffsetCommit => {
                let r = OffsetCommitRequest::decode(buf, version).unwrap();
                let group = r.group_id.0.to_string();
                self.commits
                    .push((group.clone(), r.generation_id_or_member_epoch, r.member_id.to_string()));
                let held = self.offsets.entry(group).or_default();
                let topics = r
                    .topics
                    .iter()
                    .map(|t| {
                        let ps = t
                            .partitions
                            .iter()
                            .map(|p| {
                                held.insert(
                                    (t.name.0.to_string(), p.partition_index),
                                    Committed {
                                        offset: p.committed_offset,
                                        leader_epoch: p.committed_leader_epoch,
                                        metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                                    },
                                );
                                OffsetCommitResponsePartition::default().with_partition_index(p.partition_index)
                            })
                            .collect();
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(ps)
                    })
                    .collect();
                OffsetCommitResponse::default()
                    .with_topics(topics)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::DescribeShareGroupOffsets => {
                let r = DescribeShareGroupOffsetsRequest::decode(buf, version).unwrap();
                let groups = r
                    .groups
                    .iter()
                    .map(|g| {
                        let held = self
                            .share_offsets
                            .get(g.group_id.0.as_str())
                            .cloned()
                            .unwrap_or_default();
                        let asked: Topics = match &g.topics {
                            Some(ts) => ts
                                .iter()
                                .map(|t| (t.topic_name.0.to_string(), t.partitions.clone()))
                                .collect(),
                            None => by_topic(held.keys()),
                        };
                        let topics = asked
                            .into_iter()
                            .map(|(t, ps)| {
                                let ps = ps
                                    .into_iter()
                                    .map(|p| {
                                        DescribeShareGroupOffsetsResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_start_offset(held.get(&(t.clone(), p)).copied().unwrap_or(-1))
                                    })
                                    .collect();
                                DescribeShareGroupOffsetsResponseTopic::default()
                                    .with_topic_name(TopicName(s(&t)))
                                    .with_partitions(ps)
                            })
                            .collect();
                        DescribeShareGroupOffsetsResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_topics(topics)
                    })
                    .collect();
                DescribeShareGroupOffsetsResponse::default()
                    .with_groups(groups)
                    .encode(&mut out, version)
                    .unwrap();
            }
            ApiKey::AlterShareGroupOffsets => {
                let r = AlterShareGroupOffsetsRequest::decode(buf, version).unwrap();
                let group = r.group_id.0.to_string();
                let other_type = self.groups.get(&group).is_some_and(|(_, t)| *t != "share");
                let response = if other_type {
                    AlterShareGroupOffsetsResponse::default().with_error_code(codes::GROUP_ID_NOT_FOUND)
                } else {
                    let held = self.share_offsets.entry(group.clone()).or_default();
                    let mut count = 0;
                    let topics = r
                        .topics
                        .iter()
                        .map(|t| {
                            let ps = t
                                .partitions
                                .iter()
                                .map(|p| {
                                    held.insert((t.topic_name.0.to_string(), p.partition_index), p.start_offset);
                                    count += 1;
                                    AlterShareGroupOffsetsResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                })
                                .collect();
                            AlterShareGroupOffsetsResponseTopic::default()
                                .with_topic_name(t.topic_name.clone())
                                .with_partitions(ps)
                        })
                        .collect();
                    self.alters.push((group, count));
                    AlterShareGroupOffsetsResponse::default().with_responses(topics)
                };
                response.encode(&mut out, version).unwrap();
            }
            other => panic!("the fake broker was asked {other:?}"),
        }
        out
    }
}

fn listen(fake: &Shared) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    glommio::spawn_local(crate::fake_broker::serve(listener, Rc::clone(fake))).detach();
    addr
}

fn on_glommio<T: Send + 'static, G: std::future::Future<Output = T> + 'static>(
    f: impl FnOnce() -> G + Send + 'static,
) -> T {
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("group-sync-test")
        .io_memory(1 << 20)
        .spawn(f)
        .expect("executor")
        .join()
        .expect("join")
}

/// The highest versions of the group APIs a fake broker speaks.
struct Versions {
    list_groups: i16,
    find_coordinator: i16,
    offset_fetch: i16,
    describe_groups: i16,
    offset_commit: i16,
}

/// As a Kafka 4 broker.
const NEW: Versions = Versions {
    list_groups: 5,
    find_coordinator: 5,
    offset_fetch: 9,
    describe_groups: 6,
    offset_commit: 9,
};
/// Before types filters, batched coordinators, batched and "all"
/// offset fetches, not-found groups and committed leader epochs.
const OLD: Versions = Versions {
    list_groups: 4,
    find_coordinator: 3,
    offset_fetch: 6,
    describe_groups: 5,
    offset_commit: 5,
};

fn source_apis(share: bool, v: &Versions) -> Vec<(i16, i16)> {
    let mut apis = vec![
        (ApiKey::ApiVersions as i16, 3),
        (ApiKey::Metadata as i16, 12),
        (ApiKey::ListGroups as i16, v.list_groups),
        (ApiKey::FindCoordinator as i16, v.find_coordinator),
        (ApiKey::OffsetFetch as i16, v.offset_fetch),
    ];
    if share {
        apis.push((ApiKey::DescribeShareGroupOffsets as i16, 0));
    }
    apis
}

fn destination_apis(v: &Versions) -> Vec<(i16, i16)> {
    vec![
        (ApiKey::ApiVersions as i16, 3),
        (ApiKey::DescribeGroups as i16, v.describe_groups),
        (ApiKey::OffsetFetch as i16, v.offset_fetch),
        (ApiKey::OffsetCommit as i16, v.offset_commit),
    ]
}

struct Round {
    report: GroupSyncReport,
    source: Vec<Fake>,
    destination: Fake,
}

/// Two source brokers and a destination, set up by `setup`; runs
/// `rounds` sync rounds (the last one's report is returned).
fn run_rounds(
    versions: &'static Versions,
    share: bool,
    filter: GroupFilter,
    rounds: usize,
    setup: fn(&mut [Fake; 2], &[String; 2], &mut Fake),
) -> Round {
    on_glommio(move || async move {
        let brokers = [
            Rc::new(RefCell::new(Fake::default())),
            Rc::new(RefCell::new(Fake::default())),
        ];
        let destination = Rc::new(RefCell::new(Fake::default()));
        let addrs = [listen(&brokers[0]), listen(&brokers[1])];
        let dest_addr = listen(&destination);
        {
            let mut b0 = brokers[0].borrow_mut();
            let mut b1 = brokers[1].borrow_mut();
            let mut d = destination.borrow_mut();
            for (b, _) in [(&mut *b0, 1), (&mut *b1, 2)] {
                b.apis = source_apis(share, versions);
                b.brokers = vec![(1, addrs[0].clone()), (2, addrs[1].clone())];
            }
            d.apis = destination_apis(versions);
            let mut pair = [std::mem::take(&mut *b0), std::mem::take(&mut *b1)];
            setup(&mut pair, &addrs, &mut d);
            let [p0, p1] = pair;
            *b0 = p0;
            *b1 = p1;
        }
        let mirrored: BTreeSet<_> = [tp("orders", 0), tp("orders", 1), tp("orders", 2)].into();
        let options = ConnectionOptions::default();
        let mut source = Connection::connect(&addrs[0], options.clone()).await.unwrap();
        let mut dest = Connection::connect(&dest_addr, options).await.unwrap();
        let mut report = GroupSyncReport::default();
        for _ in 0..rounds {
            report = sync_group_offsets(&mut source, &mut dest, &mirrored, &filter)
                .await
                .unwrap();
        }
        let take = |f: &Shared| std::mem::take(&mut *f.borrow_mut());
        Round {
            report,
            source: vec![take(&brokers[0]), take(&brokers[1])],
            destination: take(&destination),
        }
    })
}

/// The scenario: "app" (broker 1, coordinated by broker 2), "local"
/// (broker 1), "busy" (active at the destination), "queue" (a share
/// group), "dual" (a consumer group at broker 1 and a share group at
/// broker 2), "connect" (Connect's workers), "tmp-x" (filtered out).
fn scenario(brokers: &mut [Fake; 2], addrs: &[String; 2], destination: &mut Fake) {
    let [b1, b2] = brokers;
    for (g, types) in [
        ("app", ("consumer", "classic")),
        ("local", ("", "classic")),
        ("busy", ("consumer", "consumer")),
        ("dual", ("consumer", "classic")),
        ("connect", ("connect", "classic")),
        ("tmp-x", ("consumer", "classic")),
    ] {
        b1.groups.insert(g.into(), types);
    }
    for g in ["queue", "dual"] {
        b2.groups.insert(g.into(), ("", "share"));
    }
    let offsets = Offsets::from([
        (tp("orders", 0), committed(10, 3, "m0")),
        (tp("orders", 1), committed(1_000_000, 4, "")),
        (tp("unmirrored", 0), committed(7, 1, "")),
    ]);
    for b in [&mut *b1, &mut *b2] {
        for g in ["app", "local", "busy", "dual", "connect", "tmp-x"] {
            let at = if g == "app" { &addrs[1] } else { &addrs[0] };
            b.coordinators.insert(g.into(), at.clone());
        }
    }
    b2.offsets.insert("app".into(), offsets.clone());
    b1.offsets
        .insert("local".into(), Offsets::from([(tp("orders", 2), committed(5, 0, "x"))]));
    b1.offsets.insert("busy".into(), offsets.clone());
    b1.offsets.insert("tmp-x".into(), offsets);
    destination.states.insert("busy".into(), "Stable");
    destination.states.insert("local".into(), "Empty");
    destination
        .offsets
        .insert("busy".into(), Offsets::from([(tp("orders", 0), committed(1, 1, ""))]));
}

#[test]
fn a_round_syncs_consumer_groups_and_skips_active_share_and_conflicting_ones() {
    let filter = GroupFilter::new(Vec::<String>::new(), Some(".*"), Some("tmp-.*")).unwrap();
    let round = run_rounds(&NEW, true, filter.clone(), 1, scenario);
    let r = &round.report;
    assert!(r.listed && r.listing_errors.is_empty(), "{r:?}");
    assert_eq!(r.type_conflicts, BTreeSet::from(["dual".to_owned()]));
    let synced = |g: &str| match r.outcome(g) {
        Some(GroupOutcome::Synced {
            committed,
            unchanged,
            refused,
        }) => (*committed, *unchanged, refused.len()),
        other => panic!("{g}: {other:?}"),
    };
    assert_eq!(synced("app"), (2, 0, 0));
    assert_eq!(synced("local"), (1, 0, 0));
    assert_eq!(
        r.outcome("busy"),
        Some(&GroupOutcome::Active { state: "Stable".into() })
    );
    assert_eq!(
        r.outcome("queue"),
        Some(&GroupOutcome::Skipped {
            reason: format!("share group: {SHARE_GROUPS_UNSUPPORTED}")
        })
    );
    assert!(r.outcome("dual").is_none() && r.outcome("connect").is_none() && r.outcome("tmp-x").is_none());
    assert_eq!(r.groups.len(), 4);
    assert_eq!(r.committed(), 3);

    let d = &round.destination;
    assert_eq!(
        d.offsets["app"],
        Offsets::from([
            (tp("orders", 0), committed(10, 3, "m0")),
            (tp("orders", 1), committed(1_000_000, 4, "")),
        ]),
        "mirrored partitions only, epochs and metadata kept, an offset past the log end as it is"
    );
    assert_eq!(
        d.offsets["local"],
        Offsets::from([(tp("orders", 2), committed(5, 0, "x"))])
    );
    assert_eq!(
        d.offsets["busy"],
        Offsets::from([(tp("orders", 0), committed(1, 1, ""))]),
        "an active group is left alone"
    );
    assert!(!d.offsets.contains_key("dual") && !d.offsets.contains_key("queue"));
    assert!(
        d.commits
            .iter()
            .all(|(_, generation, member)| *generation == -1 && member.is_empty())
    );
    // Batched: one DescribeGroups, one OffsetFetch, a commit per group.
    let count = |f: &Fake, api: ApiKey| f.seen.iter().filter(|(k, _)| *k == api as i16).count();
    assert_eq!(count(d, ApiKey::DescribeGroups), 1);
    assert_eq!(count(d, ApiKey::OffsetFetch), 1);
    assert_eq!(count(d, ApiKey::OffsetCommit), 2);

    // Each source broker was asked per type, and only the coordinators
    // for offsets (all of them, v9, batched).
    let [b1, b2] = [&round.source[0], &round.source[1]];
    for b in [b1, b2] {
        assert_eq!(
            b.list_filters,
            [
                vec!["classic".to_owned(), "consumer".to_owned()],
                vec!["share".to_owned()]
            ]
        );
    }
    assert_eq!(count(b1, ApiKey::FindCoordinator), 1);
    assert_eq!(count(b2, ApiKey::FindCoordinator), 0);
    assert_eq!(count(b1, ApiKey::OffsetFetch), 1);
    assert_eq!(count(b2, ApiKey::OffsetFetch), 1);
    assert!(b1.seen.contains(&(ApiKey::OffsetFetch as i16, 9)));

    // A second round finds everything in place: nothing is written.
    let round = run_rounds(&NEW, true, filter, 2, scenario);
    assert_eq!(
        round.report.outcome("app"),
        Some(&GroupOutcome::Synced {
            committed: 0,
            unchanged: 2,
            refused: BTreeMap::new()
        })
    );
    assert_eq!(round.destination.commits.len(), 2, "only the first round committed");
}

#[test]
fn without_share_group_apis_the_source_is_listed_once_per_broker() {
    // The source speaks no share-group APIs: "dual" is listed only as a
    // consumer group; nothing is in conflict.
    let round = run_rounds(&NEW, false, GroupFilter::default(), 1, scenario);
    let r = &round.report;
    assert!(r.type_conflicts.is_empty());
    assert!(matches!(
        r.outcome("dual"),
        Some(GroupOutcome::Synced { committed: 0, .. })
    ));
    assert!(r.outcome("queue").is_none());
    assert_eq!(
        round.source[0].list_filters,
        [vec!["classic".to_owned(), "consumer".to_owned()]]
    );
}

#[test]
fn older_versions_go_group_by_group() {
    // ListGroups v4 (no types), FindCoordinator v3, OffsetFetch v6
    // (named partitions), DescribeGroups v5, OffsetCommit v5 (no epochs).
    let round = run_rounds(&OLD, true, GroupFilter::default(), 1, scenario);
    let r = &round.report;
    assert!(
        r.type_conflicts.is_empty(),
        "no types filter below v5: no share listing"
    );
    assert!(matches!(
        r.outcome("app"),
        Some(GroupOutcome::Synced { committed: 2, .. })
    ));
    assert!(matches!(
        r.outcome("tmp-x"),
        Some(GroupOutcome::Synced { committed: 2, .. })
    ));
    let app = &round.destination.offsets["app"];
    assert_eq!(app[&tp("orders", 0)].offset, 10);
    assert_eq!(
        app[&tp("orders", 0)].leader_epoch,
        -1,
        "OffsetCommit v5 carries no epoch"
    );
    let b1 = &round.source[0];
    assert_eq!(b1.list_filters, [Vec::<String>::new()]);
    let fetches: Vec<_> = b1
        .seen
        .iter()
        .filter(|(k, _)| *k == ApiKey::OffsetFetch as i16)
        .collect();
    assert!(
        fetches.len() >= 4 && fetches.iter().all(|(_, v)| *v == 6),
        "{fetches:?}"
    );
}

#[test]
fn a_source_that_cannot_list_syncs_the_named_groups() {
    fn unlisted(brokers: &mut [Fake; 2], addrs: &[String; 2], destination: &mut Fake) {
        scenario(brokers, addrs, destination);
        for b in brokers.iter_mut() {
            b.apis.retain(|(k, _)| *k != ApiKey::ListGroups as i16);
        }
    }
    let filter = GroupFilter::new(["app", "nobody"], None, None).unwrap();
    let round = run_rounds(&NEW, false, filter, 1, unlisted);
    let r = &round.report;
    assert!(!r.listed);
    assert_eq!(r.groups.keys().collect::<Vec<_>>(), ["app", "nobody"]);
    assert!(matches!(
        r.outcome("app"),
        Some(GroupOutcome::Synced { committed: 2, .. })
    ));
    assert!(matches!(
        r.outcome("nobody"),
        Some(GroupOutcome::Synced { committed: 0, .. })
    ));
    assert!(round.source[0].list_filters.is_empty());
}

#[test]
fn nothing_mirrored_asks_nothing() {
    on_glommio(|| async {
        let fake = Rc::new(RefCell::new(Fake {
            apis: source_apis(true, &NEW),
            ..Fake::default()
        }));
        let addr = listen(&fake);
        let mut a = Connection::connect(&addr, ConnectionOptions::default()).await.unwrap();
        let mut b = Connection::connect(&addr, ConnectionOptions::default()).await.unwrap();
        let report = sync_group_offsets(&mut a, &mut b, &BTreeSet::new(), &GroupFilter::default())
            .await
            .unwrap();
        assert_eq!(report, GroupSyncReport::default());
        assert!(fake.borrow().seen.iter().all(|(k, _)| *k == ApiKey::ApiVersions as i16));
    });
}

/// The destination's share-group APIs (as our listener's).
fn with_share_apis(destination: &mut Fake) {
    destination.apis.extend([
        (ApiKey::ListGroups as i16, 5),
        (ApiKey::DescribeShareGroupOffsets as i16, 0),
        (ApiKey::AlterShareGroupOffsets as i16, 0),
    ]);
}

/// Share groups at the source: "queue" (coordinated by broker 2, start
/// offsets of mirrored and unmirrored partitions), "fresh" (nothing
/// initialized), "sdup" (a consumer group of that id at the
/// destination); consumer group "cdup" at the source is a share group
/// at the destination. The rest as [`scenario`].
fn share_scenario(brokers: &mut [Fake; 2], addrs: &[String; 2], destination: &mut Fake) {
    scenario(brokers, addrs, destination);
    with_share_apis(destination);
    let [b1, b2] = brokers;
    for g in ["fresh", "sdup"] {
        b2.groups.insert(g.into(), ("share", "share"));
    }
    b1.groups.insert("cdup".into(), ("consumer", "classic"));
    for b in [&mut *b1, &mut *b2] {
        b.coordinators.insert("queue".into(), addrs[1].clone());
    }
    let queue = ShareOffsets::from([(tp("orders", 0), 100), (tp("orders", 2), 0), (tp("unmirrored", 0), 7)]);
    b2.share_offsets.insert("queue".into(), queue);
    b1.share_offsets
        .insert("sdup".into(), ShareOffsets::from([(tp("orders", 1), 5)]));
    b1.offsets
        .insert("cdup".into(), Offsets::from([(tp("orders", 0), committed(3, 0, ""))]));
    // At the destination: "sdup" is a consumer group, "cdup" a share
    // group, "queue" already holds one of its offsets.
    destination.groups.insert("sdup".into(), ("consumer", "classic"));
    destination
        .offsets
        .insert("sdup".into(), Offsets::from([(tp("orders", 1), committed(1, 0, ""))]));
    destination.groups.insert("cdup".into(), ("share", "share"));
    destination
        .share_offsets
        .insert("cdup".into(), ShareOffsets::from([(tp("orders", 0), 9)]));
    destination.groups.insert("queue".into(), ("share", "share"));
    destination
        .share_offsets
        .insert("queue".into(), ShareOffsets::from([(tp("orders", 2), 0)]));
}

#[test]
fn share_groups_sync_and_never_overwrite_a_group_of_the_other_type() {
    let filter = GroupFilter::new(Vec::<String>::new(), Some(".*"), Some("tmp-.*")).unwrap();
    let round = run_rounds(&NEW, true, filter.clone(), 1, share_scenario);
    let r = &round.report;
    assert_eq!(r.type_conflicts, BTreeSet::from(["dual".to_owned()]), "{r:?}");
    assert_eq!(
        r.outcome("queue"),
        Some(&GroupOutcome::Synced {
            committed: 1,
            unchanged: 1,
            refused: BTreeMap::new()
        }),
        "mirrored partitions only; the one already there not written again"
    );
    assert_eq!(
        r.outcome("fresh"),
        Some(&GroupOutcome::Synced {
            committed: 0,
            unchanged: 0,
            refused: BTreeMap::new()
        })
    );
    assert_eq!(
        r.outcome("sdup"),
        Some(&GroupOutcome::TypeConflict {
            source: SHARE_GROUP.into(),
            destination: CONSUMER_GROUP.into()
        })
    );
    assert_eq!(
        r.outcome("cdup"),
        Some(&GroupOutcome::TypeConflict {
            source: CONSUMER_GROUP.into(),
            destination: SHARE_GROUP.into()
        })
    );
    // The consumer groups as without share groups.
    assert!(matches!(
        r.outcome("app"),
        Some(GroupOutcome::Synced { committed: 2, .. })
    ));
    assert_eq!(
        r.outcome("busy"),
        Some(&GroupOutcome::Active { state: "Stable".into() })
    );

    let d = &round.destination;
    assert_eq!(
        d.share_offsets["queue"],
        ShareOffsets::from([(tp("orders", 0), 100), (tp("orders", 2), 0)])
    );
    assert_eq!(
        d.alters,
        [("queue".to_owned(), 1)],
        "one alter, of the changed partition"
    );
    assert_eq!(
        d.share_offsets["cdup"],
        ShareOffsets::from([(tp("orders", 0), 9)]),
        "a share group is not overwritten by a consumer group"
    );
    assert!(!d.offsets.contains_key("cdup"));
    assert_eq!(
        d.offsets["sdup"],
        Offsets::from([(tp("orders", 1), committed(1, 0, ""))]),
        "a consumer group is not overwritten by a share group"
    );
    assert!(!d.share_offsets.contains_key("sdup"));
    let count = |f: &Fake, api: ApiKey| f.seen.iter().filter(|(k, _)| *k == api as i16).count();
    assert_eq!(count(d, ApiKey::ListGroups), 1, "one listing of every type");
    assert_eq!(d.list_filters, [Vec::<String>::new()]);
    assert_eq!(count(d, ApiKey::DescribeShareGroupOffsets), 1);
    // The source: share offsets at each group's coordinator, batched.
    let [b1, b2] = [&round.source[0], &round.source[1]];
    assert_eq!(count(b1, ApiKey::DescribeShareGroupOffsets), 1, "fresh and sdup");
    assert_eq!(count(b2, ApiKey::DescribeShareGroupOffsets), 1, "queue");

    // Another round: nothing to write.
    let round = run_rounds(&NEW, true, filter, 2, share_scenario);
    assert_eq!(
        round.report.outcome("queue"),
        Some(&GroupOutcome::Synced {
            committed: 0,
            unchanged: 2,
            refused: BTreeMap::new()
        })
    );
    assert_eq!(round.destination.alters.len(), 1, "only the first round wrote");
}

#[test]
fn a_destination_without_share_apis_skips_share_groups() {
    fn no_share_destination(brokers: &mut [Fake; 2], addrs: &[String; 2], destination: &mut Fake) {
        share_scenario(brokers, addrs, destination);
        destination.apis = destination_apis(&NEW);
    }
    let round = run_rounds(&NEW, true, GroupFilter::default(), 1, no_share_destination);
    let r = &round.report;
    for g in ["queue", "fresh", "sdup"] {
        assert_eq!(
            r.outcome(g),
            Some(&GroupOutcome::Skipped {
                reason: format!("share group: {SHARE_GROUPS_UNSUPPORTED}")
            }),
            "{g}"
        );
    }
    assert!(round.destination.alters.is_empty());
    let d = &round.destination;
    assert!(
        d.seen
            .iter()
            .all(|(k, _)| *k != ApiKey::ListGroups as i16 && *k != ApiKey::DescribeShareGroupOffsets as i16)
    );
    assert!(round.source.iter().all(|b| {
        b.seen
            .iter()
            .all(|(k, _)| *k != ApiKey::DescribeShareGroupOffsets as i16)
    }));
}

#[test]
fn share_requests_and_answers() {
    let topics: Topics = vec![("orders".into(), vec![0, 1]), ("pay".into(), vec![3])];
    let asks = [("g1".to_owned(), topics.clone()), ("g2".to_owned(), topics)];
    let r = round_trip(&describe_share_request(&asks), 0);
    assert_eq!(r.groups.len(), 2);
    let ts = r.groups[1].topics.as_ref().expect("by name, never null (Kafka 4.0)");
    assert_eq!(
        (ts[0].topic_name.0.as_str(), ts[0].partitions.as_slice()),
        ("orders", &[0, 1][..])
    );
    assert_eq!(share_groups_per_request(3), GROUPS_PER_REQUEST);
    assert_eq!(share_groups_per_request(500), 20);
    assert_eq!(share_groups_per_request(1_000_000), 1);

    let offsets = ShareOffsets::from([(tp("orders", 0), 10), (tp("orders", 1), 0), (tp("pay", 2), 5)]);
    let a = round_trip(&alter_share_request("g", &offsets), 0);
    assert_eq!(a.group_id.0.as_str(), "g");
    assert_eq!(a.topics.len(), 2);
    assert_eq!(
        a.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.start_offset))
            .collect::<Vec<_>>(),
        [(0, 10), (1, 0)]
    );

    let keep: BTreeSet<_> = [tp("orders", 0), tp("orders", 1), tp("orders", 2)].into();
    let p = |i, start, error| {
        DescribeShareGroupOffsetsResponsePartition::default()
            .with_partition_index(i)
            .with_start_offset(start)
            .with_error_code(error)
    };
    let response = DescribeShareGroupOffsetsResponse::default().with_groups(vec![
        DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(GroupId(s("a")))
            .with_topics(vec![
                DescribeShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(TopicName(s("orders")))
                    .with_partitions(vec![p(0, 4, 0), p(1, -1, 0), p(2, 9, 29)]),
                DescribeShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(TopicName(s("unmirrored")))
                    .with_partitions(vec![p(0, 3, 0)]),
            ]),
        DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(GroupId(s("gone")))
            .with_error_code(codes::GROUP_ID_NOT_FOUND),
        DescribeShareGroupOffsetsResponseGroup::default()
            .with_group_id(GroupId(s("moving")))
            .with_error_code(NOT_COORDINATOR),
    ]);
    let asked = ["a".to_owned(), "gone".into(), "moving".into(), "missing".into()];
    let got: BTreeMap<_, _> = share_offsets_from(&asked, &response, &keep).into_iter().collect();
    assert_eq!(
        got["a"],
        Ok(ShareOffsets::from([(tp("orders", 0), 4)])),
        "initialized, without error, mirrored"
    );
    assert_eq!(got["gone"], Ok(ShareOffsets::new()));
    assert!(got["moving"].is_err() && got["missing"].is_err());

    // Alter answers.
    let ok = AlterShareGroupOffsetsResponse::default().with_responses(vec![
        AlterShareGroupOffsetsResponseTopic::default()
            .with_topic_name(TopicName(s("orders")))
            .with_partitions(vec![
                AlterShareGroupOffsetsResponsePartition::default().with_partition_index(0),
                AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(1)
                    .with_error_code(codes::UNKNOWN_TOPIC_OR_PARTITION),
            ]),
    ]);
    assert_eq!(
        alter_results(&ok),
        Ok((
            1,
            BTreeMap::from([(tp("orders", 1), codes::UNKNOWN_TOPIC_OR_PARTITION)])
        ))
    );
    let other_type = AlterShareGroupOffsetsResponse::default().with_error_code(codes::GROUP_ID_NOT_FOUND);
    assert_eq!(
        alter_results(&other_type),
        Err(GroupOutcome::TypeConflict {
            source: SHARE_GROUP.into(),
            destination: CONSUMER_GROUP.into()
        })
    );
    assert!(matches!(
        alter_results(&AlterShareGroupOffsetsResponse::default().with_error_code(15)),
        Err(GroupOutcome::Failed { .. })
    ));
    // What a destination listing says of each id.
    assert!(is_share_listing("share", "share") && is_share_listing("Share", ""));
    assert!(is_share_listing("", "share"), "below v5: the protocol type");
    assert!(!is_share_listing("classic", "consumer") && !is_share_listing("", "consumer"));
    assert!(!is_share_listing("consumer", "share"));
}
