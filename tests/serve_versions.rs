//! Every version of every non-group API the listener advertises gets an
//! answer that decodes — the responses hold only fields their version has
//! (kafka-protocol refuses to encode the others, which would close the
//! connection). Run against served data whose batches carry a leader epoch,
//! so that epoch fields are set wherever a version allows them.

mod common;

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_protocol::request::SUPPORTED_APIS;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord};
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};

const TOPIC: &str = "epochs";
const EPOCH: i32 = 5;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn batch(base_offset: i64, epoch: i32, producer_id: i64) -> Vec<u8> {
    BatchBuilder {
        base_offset,
        partition_leader_epoch: epoch,
        producer_id,
        producer_epoch: if producer_id >= 0 { 0 } else { -1 },
        base_sequence: if producer_id >= 0 { 0 } else { -1 },
        records: (0..3)
            .map(|i| BuildRecord {
                timestamp: 1_700_000_000_000 + i,
                key: Some(b"k".to_vec()),
                value: Some(b"v".to_vec()),
                headers: Vec::new(),
            })
            .collect(),
        ..BatchBuilder::default()
    }
    .build()
}

fn versions(api: ApiKey) -> std::ops::RangeInclusive<i16> {
    let &(_, min, max) = SUPPORTED_APIS.iter().find(|(k, _, _)| *k == api).expect("advertised");
    min..=max
}

/// An agent (two shards, a listener) serving `batches` of mirrored data
/// (no mirror claims it: read-only) in `TOPIC`, and a connection to it.
fn start_agent(dir: &std::path::Path, batches: &[Vec<u8>]) -> (Agent, common::KafkaConnection) {
    {
        let log_dir = LogDir::open(dir).unwrap();
        let (mut log, _) = log_dir
            .open_partition(&TopicPartition::new(TOPIC, 0), Some([9; 16]), LogConfig::default(), 0)
            .unwrap();
        for b in batches {
            log.append(b, 0).unwrap();
        }
        log.close(0).unwrap();
    }
    let config = AgentConfig::parse(&format!(
        "data_dir = {dir:?}\nshards = 2\n[listener]\naddress = \"127.0.0.1:0\"\n"
    ))
    .unwrap();
    let agent = Agent::start(config).expect("agent");
    let addr = agent.listener_addr().unwrap().to_string();
    let c = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
    (agent, c)
}

#[test]
fn every_advertised_version_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, mut c) = start_agent(dir.path(), &[batch(0, EPOCH, -1), batch(3, EPOCH, -1)]);
    let key = |api: ApiKey| api as i16;

    for v in versions(ApiKey::ApiVersions) {
        let r: ApiVersionsResponse = c
            .request(key(ApiKey::ApiVersions), v, &ApiVersionsRequest::default())
            .unwrap();
        assert_eq!(r.error_code, 0, "ApiVersions v{v}");
    }
    for v in versions(ApiKey::Metadata) {
        let req = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(TOPIC)))]));
        let r: MetadataResponse = c.request(key(ApiKey::Metadata), v, &req).unwrap();
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "Metadata v{v}");
        if v >= 7 {
            assert_eq!(p.leader_epoch, EPOCH, "Metadata v{v}");
        }
    }
    for v in versions(ApiKey::ListOffsets) {
        for timestamp in [-2, -1, 0] {
            let req = ListOffsetsRequest::default().with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(name(TOPIC))
                    .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(timestamp)]),
            ]);
            let r: ListOffsetsResponse = c.request(key(ApiKey::ListOffsets), v, &req).unwrap();
            let p = &r.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets v{v} {timestamp}");
            assert_eq!(
                p.offset,
                if timestamp == -1 { 6 } else { 0 },
                "ListOffsets v{v} {timestamp}"
            );
        }
    }
    for v in versions(ApiKey::OffsetForLeaderEpoch) {
        let req = OffsetForLeaderEpochRequest::default().with_topics(vec![
            OffsetForLeaderTopic::default()
                .with_topic(name(TOPIC))
                .with_partitions(vec![
                    OffsetForLeaderPartition::default()
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(EPOCH),
                ]),
        ]);
        let r: OffsetForLeaderEpochResponse = c.request(key(ApiKey::OffsetForLeaderEpoch), v, &req).unwrap();
        let p = &r.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.leader_epoch, p.end_offset),
            (0, EPOCH, 6),
            "OffsetForLeaderEpoch v{v}"
        );
    }
    for v in versions(ApiKey::Fetch) {
        let mut t = FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_topic_id(uuid::Uuid::from_bytes([9; 16]));
        t.partitions.push(
            FetchPartition::default()
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20),
        );
        let req = FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![t]);
        let r: FetchResponse = c.request(key(ApiKey::Fetch), v, &req).unwrap();
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "Fetch v{v}");
        assert_eq!(
            p.records.as_ref().map(Bytes::len),
            Some(2 * batch(0, EPOCH, -1).len()),
            "Fetch v{v}"
        );
    }
    for v in versions(ApiKey::DescribeCluster) {
        let r: DescribeClusterResponse = c
            .request(key(ApiKey::DescribeCluster), v, &DescribeClusterRequest::default())
            .unwrap();
        assert_eq!((r.error_code, r.brokers.len()), (0, 1), "DescribeCluster v{v}");
    }
    for v in versions(ApiKey::DescribeConfigs) {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str(TOPIC))
                .with_configuration_keys(None),
        ]);
        let r: DescribeConfigsResponse = c.request(key(ApiKey::DescribeConfigs), v, &req).unwrap();
        assert_eq!(r.results[0].error_code, 0, "DescribeConfigs v{v}");
        assert!(
            r.results[0].configs.iter().any(|c| &*c.name == "segment.bytes"),
            "DescribeConfigs v{v}"
        );
    }
    for v in versions(ApiKey::DescribeAcls) {
        let r: DescribeAclsResponse = c
            .request(
                key(ApiKey::DescribeAcls),
                v,
                &DescribeAclsRequest::default().with_resource_type_filter(1),
            )
            .unwrap();
        assert_eq!(r.error_code, 0, "DescribeAcls v{v}");
    }
    for v in versions(ApiKey::CreateTopics) {
        let topic = format!("created-v{v}");
        let req = CreateTopicsRequest::default().with_topics(vec![
            CreatableTopic::default()
                .with_name(name(&topic))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ]);
        let r: CreateTopicsResponse = c.request(key(ApiKey::CreateTopics), v, &req).unwrap();
        assert_eq!(r.topics[0].error_code, 0, "CreateTopics v{v}");
        let again: CreateTopicsResponse = c.request(key(ApiKey::CreateTopics), v, &req).unwrap();
        assert_eq!(
            again.topics[0].error_code, 36,
            "CreateTopics v{v}: TOPIC_ALREADY_EXISTS"
        );
    }
    for v in versions(ApiKey::InitProducerId) {
        let r: InitProducerIdResponse = c
            .request(
                key(ApiKey::InitProducerId),
                v,
                &InitProducerIdRequest::default().with_transactional_id(None),
            )
            .unwrap();
        assert_eq!(r.error_code, 0, "InitProducerId v{v}");
    }
    for v in versions(ApiKey::Produce) {
        // To the mirrored data: READ_ONLY_TOPIC; to a local topic: appended.
        for (topic, code) in [(TOPIC.to_string(), 134), ("created-v2".to_string(), 0)] {
            let req = ProduceRequest::default()
                .with_transactional_id(None)
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(name(&topic))
                        .with_partition_data(vec![
                            PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(Bytes::from(batch(0, 0, -1)))),
                        ]),
                ]);
            let r: ProduceResponse = c.request(key(ApiKey::Produce), v, &req).unwrap();
            let p = &r.responses[0].partition_responses[0];
            assert_eq!(p.error_code, code, "Produce v{v} to {topic}");
        }
    }
    for v in versions(ApiKey::DescribeProducers) {
        // The batches carry no producer id: no active producers; a
        // partition the topic lacks is unknown.
        let req = DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name(TOPIC))
                .with_partition_indexes(vec![0, 3]),
        ]);
        let r: DescribeProducersResponse = c.request(key(ApiKey::DescribeProducers), v, &req).unwrap();
        let answers: Vec<_> = r.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code, p.active_producers.len()))
            .collect();
        assert_eq!(answers, [(0, 0, 0), (3, 3, 0)], "DescribeProducers v{v}");
    }
    for v in versions(ApiKey::ElectLeaders) {
        // One replica, which leads: ELECTION_NOT_NEEDED.
        let req = ElectLeadersRequest::default().with_topic_partitions(Some(vec![
            elect_leaders_request::TopicPartitions::default()
                .with_topic(name(TOPIC))
                .with_partitions(vec![0]),
        ]));
        let r: ElectLeadersResponse = c.request(key(ApiKey::ElectLeaders), v, &req).unwrap();
        let p = &r.replica_election_results[0].partition_result[0];
        assert_eq!(
            (r.error_code, p.partition_id, p.error_code),
            (0, 0, 84),
            "ElectLeaders v{v}"
        );
    }
    agent.stop().expect("stop");
}

fn transactional_batch(producer_id: i64, producer_epoch: i16) -> Bytes {
    let batch = BatchBuilder {
        producer_id,
        producer_epoch,
        base_sequence: 0,
        transactional: true,
        records: vec![BuildRecord {
            timestamp: 1_700_000_000_000,
            key: Some(b"k".to_vec()),
            value: Some(b"in a transaction".to_vec()),
            headers: Vec::new(),
        }],
        ..BatchBuilder::default()
    };
    Bytes::from(batch.build())
}

fn transactional_produce(id: &str, topic: &str, batch: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.to_owned()))))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![
                    PartitionProduceData::default().with_index(0).with_records(Some(batch)),
                ]),
        ])
}

fn add_partitions_v3(id: &str, producer_id: i64, epoch: i16, topic: &str) -> AddPartitionsToTxnRequest {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
        .with_v3_and_below_producer_id(ProducerId(producer_id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![0]),
        ])
}

fn txn_offset_commit(id: &str, producer_id: i64, epoch: i16, topic: &str, offset: i64) -> TxnOffsetCommitRequest {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_owned())))
        .with_group_id(GroupId(StrBytes::from_static_str("txn-group")))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1),
                ]),
        ])
}

/// OffsetFetch v7 with `require_stable` of `txn-group` on partition 0 of
/// `topic`: (error, committed offset).
fn stable_offset(c: &mut common::KafkaConnection, topic: &str) -> (i16, i64) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    let r = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("txn-group")))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![0]),
        ]))
        .with_require_stable(true);
    let fetched: OffsetFetchResponse = c.request(ApiKey::OffsetFetch as i16, 7, &r).unwrap();
    let p = &fetched.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

/// Every version of each transaction API, through whole transactions (one
/// per version of AddPartitionsToTxn, EndTxn and the rest cycling through
/// theirs) on a local topic: each answers, a committed transaction moves
/// the last stable offset, a batch of a partition outside the transaction
/// and any transaction on mirrored data are refused.
#[test]
fn every_advertised_version_of_the_transaction_apis_answers() {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    let dir = tempfile::tempdir().unwrap();
    let (agent, mut c) = start_agent(dir.path(), &[batch(0, EPOCH, -1)]);
    let key = |api: ApiKey| api as i16;
    let local = "txn-local";
    let create = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(name(local))
            .with_num_partitions(2)
            .with_replication_factor(1),
    ]);
    let created: CreateTopicsResponse = c.request(key(ApiKey::CreateTopics), 5, &create).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let id_of = |s: &str| TransactionalId(StrBytes::from_string(s.to_owned()));
    let at = |api: ApiKey, i: i16| {
        let r = versions(api);
        i.clamp(*r.start(), *r.end())
    };
    let rounds = *versions(ApiKey::AddPartitionsToTxn).end() + 1;
    for i in 0..rounds.max(*versions(ApiKey::InitProducerId).end() + 1) {
        let id = format!("txn-{i}");
        let init: InitProducerIdResponse = c
            .request(
                key(ApiKey::InitProducerId),
                at(ApiKey::InitProducerId, i),
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(id_of(&id)))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
            .unwrap();
        assert_eq!(init.error_code, 0, "InitProducerId round {i}");
        let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
        assert!(pid >= 0);
        let v = at(ApiKey::AddPartitionsToTxn, i.min(3));
        let added: AddPartitionsToTxnResponse = c
            .request(
                key(ApiKey::AddPartitionsToTxn),
                v,
                &add_partitions_v3(&id, pid, epoch, local),
            )
            .unwrap();
        let code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
        assert_eq!(code, 0, "AddPartitionsToTxn v{v}");
        let offsets: AddOffsetsToTxnResponse = c
            .request(
                key(ApiKey::AddOffsetsToTxn),
                at(ApiKey::AddOffsetsToTxn, i),
                &AddOffsetsToTxnRequest::default()
                    .with_transactional_id(id_of(&id))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_group_id(GroupId(StrBytes::from_static_str("txn-group"))),
            )
            .unwrap();
        assert_eq!(offsets.error_code, 0, "AddOffsetsToTxn round {i}");
        let v = at(ApiKey::TxnOffsetCommit, i);
        let offset_commit: TxnOffsetCommitResponse = c
            .request(
                key(ApiKey::TxnOffsetCommit),
                v,
                &txn_offset_commit(&id, pid, epoch, local, i64::from(i) + 1),
            )
            .unwrap();
        assert_eq!(
            offset_commit.topics[0].partitions[0].error_code, 0,
            "TxnOffsetCommit v{v}"
        );
        let (code, _) = stable_offset(&mut c, local);
        assert_eq!(code, 88, "UNSTABLE_OFFSET_COMMIT while the transaction holds it");
        let produced: ProduceResponse = c
            .request(
                key(ApiKey::Produce),
                9,
                &transactional_produce(&id, local, transactional_batch(pid, epoch)),
            )
            .unwrap();
        assert_eq!(produced.responses[0].partition_responses[0].error_code, 0, "round {i}");
        if i == 0 {
            // The batched (broker) form verifies without adding.
            for v in 4..=*versions(ApiKey::AddPartitionsToTxn).end() {
                let topics = vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(name(local))
                        .with_partitions(vec![0, 1]),
                ];
                let r = AddPartitionsToTxnRequest::default().with_transactions(vec![
                    AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(id_of(&id))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_verify_only(true)
                        .with_topics(topics),
                ]);
                let verified: AddPartitionsToTxnResponse = c.request(key(ApiKey::AddPartitionsToTxn), v, &r).unwrap();
                let codes: Vec<i16> = verified.results_by_transaction[0].topic_results[0]
                    .results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
                    .collect();
                assert_eq!(codes, [0, 120], "AddPartitionsToTxn v{v} VerifyOnly");
            }
            // Partition 1 is not in the transaction: refused before append
            // (INVALID_TXN_STATE below Produce v11).
            let mut outside = transactional_produce(&id, local, transactional_batch(pid, epoch));
            outside.topic_data[0].partition_data[0].index = 1;
            let refused: ProduceResponse = c.request(key(ApiKey::Produce), 9, &outside).unwrap();
            assert_eq!(refused.responses[0].partition_responses[0].error_code, 48);
            // Mirrored data takes no transaction, with a message that says so.
            let mirrored: AddPartitionsToTxnResponse = c
                .request(
                    key(ApiKey::AddPartitionsToTxn),
                    3,
                    &add_partitions_v3(&id, pid, epoch, TOPIC),
                )
                .unwrap();
            let code = mirrored.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
            assert_eq!(code, 134, "READ_ONLY_TOPIC");
            let refused: ProduceResponse = c
                .request(
                    key(ApiKey::Produce),
                    9,
                    &transactional_produce(&id, TOPIC, transactional_batch(pid, epoch)),
                )
                .unwrap();
            let p = &refused.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 134);
            assert!(p.error_message.as_deref().unwrap_or_default().contains("mirror topic"));
        }
        let described: DescribeTransactionsResponse = c
            .request(
                key(ApiKey::DescribeTransactions),
                0,
                &DescribeTransactionsRequest::default().with_transactional_ids(vec![id_of(&id)]),
            )
            .unwrap();
        let d = &described.transaction_states[0];
        assert_eq!((d.error_code, d.transaction_state.as_str()), (0, "Ongoing"));
        assert_eq!(d.producer_id.0, pid);
        let topics: Vec<&str> = d.topics.iter().map(|t| t.topic.0.as_str()).collect();
        assert_eq!(topics, ["__consumer_offsets", local]);
        let commit = i % 2 == 0;
        let ended: EndTxnResponse = c
            .request(
                key(ApiKey::EndTxn),
                at(ApiKey::EndTxn, i),
                &EndTxnRequest::default()
                    .with_transactional_id(id_of(&id))
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(commit),
            )
            .unwrap();
        assert_eq!(ended.error_code, 0, "EndTxn round {i}");
        // The markers follow: the id completes, the last stable offset
        // reaches the log end.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let done = if commit { "CompleteCommit" } else { "CompleteAbort" };
        loop {
            let listed: ListTransactionsResponse = c
                .request(
                    key(ApiKey::ListTransactions),
                    at(ApiKey::ListTransactions, i),
                    &ListTransactionsRequest::default().with_duration_filter(-1),
                )
                .unwrap();
            assert_eq!(listed.error_code, 0);
            let state = listed
                .transaction_states
                .iter()
                .find(|t| t.transactional_id.0.as_str() == id)
                .map(|t| t.transaction_state.to_string());
            if state.as_deref() == Some(done) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "round {i}: {state:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let committed = ListOffsetsRequest::default().with_isolation_level(1).with_topics(vec![
            ListOffsetsTopic::default().with_name(name(local)).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ]),
        ]);
        let lso: ListOffsetsResponse = c.request(key(ApiKey::ListOffsets), 5, &committed).unwrap();
        // Each round appended a batch and a marker.
        assert_eq!(lso.topics[0].partitions[0].offset, 2 * (i64::from(i) + 1), "round {i}");
        // The offset is committed with the transaction, dropped with it.
        let last_committed_round = if commit { i } else { i - 1 };
        assert_eq!(
            stable_offset(&mut c, local),
            (0, i64::from(last_committed_round) + 1),
            "round {i}"
        );
    }
    agent.stop().expect("stop");
}
