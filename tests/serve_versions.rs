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

#[test]
fn every_advertised_version_answers() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log_dir = LogDir::open(dir.path()).unwrap();
        let (mut log, _) = log_dir
            .open_partition(&TopicPartition::new(TOPIC, 0), Some([9; 16]), LogConfig::default(), 0)
            .unwrap();
        log.append(&batch(0, EPOCH, -1), 0).unwrap();
        log.append(&batch(3, EPOCH, -1), 0).unwrap();
        log.close(0).unwrap();
    }
    let config = AgentConfig::parse(&format!(
        "data_dir = {:?}\nshards = 2\n[listener]\naddress = \"127.0.0.1:0\"\n",
        dir.path()
    ))
    .unwrap();
    let agent = Agent::start(config).expect("agent");
    let addr = agent.listener_addr().unwrap().to_string();
    let mut c = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
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
    agent.stop().expect("stop");
}
