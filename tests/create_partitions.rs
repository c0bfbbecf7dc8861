//! CreatePartitions (API 37) at our listener, with librdkafka's admin
//! client: a local topic grows (same topic id, new partitions writable and
//! readable), wrong counts, unknown topics and mirror topics are refused
//! with Kafka's codes, validate_only changes nothing, the partitions
//! survive a restart, and a partition whose creation a crash interrupted
//! is completed by the next CreatePartitions. Then metadata sync (issue 6):
//! a partition added at a source agent appears at the agent mirroring it,
//! with the source's topic id, byte for byte.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::admin::{AdminAnswer, AdminRequest};
use ringmirror_dataplane::partition::registry::LOCAL_TOPIC_MARKER;
use ringmirror_storage::log::TopicPartition;

const DEADLINE: Duration = Duration::from_secs(60);
const INVALID_PARTITIONS: i16 = 37;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const READ_ONLY_TOPIC: i16 = 134;

fn config(data_dir: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        "#
    ))
    .expect("config")
}

fn listener(agent: &Agent) -> String {
    agent.listener_addr().expect("the agent listens").to_string()
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let results = futures_lite::future::block_on(admin(bootstrap).create_topics([&new], &AdminOptions::new()))
        .expect("create topics");
    assert!(matches!(&results[0], Ok(name) if name == topic), "{results:?}");
}

/// CreatePartitions through librdkafka: the topic's result.
fn grow(bootstrap: &str, partitions: &NewPartitions, validate_only: bool) -> Result<String, RDKafkaErrorCode> {
    let options = AdminOptions::new().validate_only(validate_only);
    let mut results = futures_lite::future::block_on(admin(bootstrap).create_partitions([partitions], &options))
        .expect("create partitions");
    assert_eq!(results.len(), 1);
    results.remove(0).map_err(|(_, code)| code)
}

/// CreatePartitions at the protocol level: each topic's error code.
fn grow_raw(bootstrap: &str, version: i16, topic: &str, count: i32) -> i16 {
    let mut c = common::KafkaConnection::connect(bootstrap, DEADLINE).expect("connect");
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_count(count),
        ])
        .with_timeout_ms(10_000);
    let response: CreatePartitionsResponse = c
        .request(ApiKey::CreatePartitions as i16, version, &request)
        .expect("CreatePartitions");
    assert_eq!(response.results.len(), 1);
    assert_eq!(response.results[0].name.0.as_str(), topic);
    response.results[0].error_code
}

/// The topic's id and its partitions (index → error code) per Metadata v12.
fn metadata(bootstrap: &str, topic: &str) -> ([u8; 16], BTreeMap<i32, i16>) {
    let mut c = common::KafkaConnection::connect(bootstrap, DEADLINE).expect("connect");
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(topic.to_owned())))),
    ]));
    let response: MetadataResponse = c.request(ApiKey::Metadata as i16, 12, &request).expect("Metadata");
    let t = &response.topics[0];
    assert_eq!(t.error_code, 0, "Metadata of {topic}");
    let partitions = t.partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
    (*t.topic_id.as_bytes(), partitions)
}

fn all_ok(count: i32) -> BTreeMap<i32, i16> {
    (0..count).map(|p| (p, 0)).collect()
}

/// Writes `count` records to `topic`-`partition` (keys and values name
/// them after `tag`), every one acknowledged.
fn produce(bootstrap: &str, topic: &str, partition: i32, tag: &str, count: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .set("topic.metadata.refresh.interval.ms", "500")
        .create()
        .expect("producer");
    for n in 0..count {
        let (key, value) = (format!("{tag}-k{n}"), format!("{tag}-v{n}"));
        let mut record = BaseRecord::to(topic).partition(partition).key(&key).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(DEADLINE).expect("every record acknowledged");
}

/// The values of `topic`-`partition` from the beginning, `count` of them.
fn consume(bootstrap: &str, topic: &str, partition: i32, count: usize) -> Vec<(i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    while out.len() < count {
        assert!(started.elapsed() < DEADLINE, "consumed {out:?} of {count}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                assert_eq!(m.partition(), partition);
                out.push((m.offset(), String::from_utf8(m.payload().unwrap().to_vec()).unwrap()));
            }
            Some(Err(e)) => panic!("consume {topic}-{partition}: {e}"),
            None => {}
        }
    }
    out
}

fn values(tag: &str, count: usize) -> Vec<(i64, String)> {
    (0..count).map(|n| (n as i64, format!("{tag}-v{n}"))).collect()
}

#[test]
fn a_local_topic_grows_and_its_partitions_survive_a_restart() {
    const TOPIC: &str = "growing";
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path())).expect("start");
    let addr = listener(&agent);
    create_topic(&addr, TOPIC, 1);
    let (id, partitions) = metadata(&addr, TOPIC);
    assert_eq!(partitions, all_ok(1));
    assert_ne!(id, [0; 16]);

    // 1 → 3.
    assert_eq!(grow(&addr, &NewPartitions::new(TOPIC, 3), false), Ok(TOPIC.to_string()));
    assert_eq!(
        metadata(&addr, TOPIC),
        (id, all_ok(3)),
        "3 partitions, the same topic id"
    );

    // Refused: no growth, shrinking, an unknown topic; validate_only
    // checks and changes nothing.
    for count in [3, 2] {
        assert_eq!(
            grow(&addr, &NewPartitions::new(TOPIC, count), false),
            Err(RDKafkaErrorCode::InvalidPartitions),
            "{count} partitions"
        );
    }
    assert_eq!(
        grow(&addr, &NewPartitions::new("no-such-topic", 2), false),
        Err(RDKafkaErrorCode::UnknownTopicOrPartition)
    );
    assert_eq!(grow(&addr, &NewPartitions::new(TOPIC, 5), true), Ok(TOPIC.to_string()));
    assert_eq!(
        grow(&addr, &NewPartitions::new(TOPIC, 2), true),
        Err(RDKafkaErrorCode::InvalidPartitions),
        "validate_only checks the count"
    );
    assert_eq!(metadata(&addr, TOPIC), (id, all_ok(3)), "validate_only changed nothing");
    // Every version, at the protocol level.
    for version in 0..=3 {
        assert_eq!(grow_raw(&addr, version, "no-such-topic", 2), UNKNOWN_TOPIC_OR_PARTITION);
        assert_eq!(grow_raw(&addr, version, TOPIC, 1), INVALID_PARTITIONS);
    }

    // A new partition takes writes and serves them.
    produce(&addr, TOPIC, 2, "p2", 20);
    assert_eq!(consume(&addr, TOPIC, 2, 20), values("p2", 20));

    // Assignments are accepted (and ignored: one broker): 3 → 4.
    let node: &[i32] = &[0];
    let assignment = [node];
    assert_eq!(
        grow(&addr, &NewPartitions::new(TOPIC, 4).assign(&assignment), false),
        Ok(TOPIC.to_string())
    );
    assert_eq!(metadata(&addr, TOPIC), (id, all_ok(4)));

    // A restart keeps all four, local and writable.
    agent.stop().expect("stop");
    let agent = Agent::start(config(dir.path())).expect("restart");
    let addr = listener(&agent);
    assert_eq!(metadata(&addr, TOPIC), (id, all_ok(4)), "after a restart");
    assert_eq!(consume(&addr, TOPIC, 2, 20), values("p2", 20));
    produce(&addr, TOPIC, 1, "p1", 5);
    assert_eq!(consume(&addr, TOPIC, 1, 5), values("p1", 5));

    // A crash inside the creation of partition 3 (log opened, local
    // marker not yet written) leaves an empty partition that the next
    // start serves as unclaimed mirrored data: the next CreatePartitions
    // completes it rather than stumbling over it.
    agent.stop().expect("stop");
    let marker = dir.path().join(format!("{TOPIC}-3")).join(LOCAL_TOPIC_MARKER);
    std::fs::remove_file(&marker).expect("remove the local marker");
    let agent = Agent::start(config(dir.path())).expect("restart");
    let addr = listener(&agent);
    assert_eq!(metadata(&addr, TOPIC).1.len(), 4, "the leftover is served");
    assert_eq!(grow(&addr, &NewPartitions::new(TOPIC, 5), false), Ok(TOPIC.to_string()));
    assert_eq!(metadata(&addr, TOPIC), (id, all_ok(5)));
    assert!(marker.exists(), "partition 3 is local again");
    for partition in [3, 4] {
        let tag = format!("p{partition}");
        produce(&addr, TOPIC, partition, &tag, 3);
        assert_eq!(consume(&addr, TOPIC, partition, 3), values(&tag, 3));
    }
    agent.stop().expect("stop");
}

/// (state, source topic id) of `topic`-`partition` of mirror "dr".
fn mirror_state(agent: &Agent, topic: &str, partition: i32) -> Option<(String, String)> {
    match agent.admin(AdminRequest::Status).expect("status") {
        AdminAnswer::Status { partitions } => partitions
            .into_iter()
            .find(|v| v.mirror == "dr" && v.topic == topic && v.partition == partition)
            .map(|v| (v.state, v.topic_id)),
        other => panic!("status answered {other:?}"),
    }
}

#[test]
fn a_partition_added_at_the_source_is_mirrored_with_the_source_topic_id() {
    const TOPIC: &str = "grow";
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Agent::start(config(dir_a.path())).expect("start A");
    let a_addr = listener(&a);
    create_topic(&a_addr, TOPIC, 1);
    produce(&a_addr, TOPIC, 0, "first", 50);
    let (id, _) = metadata(&a_addr, TOPIC);

    let b = Agent::start(common::serving_mirror_config(dir_b.path(), &a_addr, &[TOPIC], "")).expect("start B");
    let b_addr = listener(&b);
    let end = |partition| common::source_high_watermark(&a_addr, TOPIC, partition, DEADLINE);
    common::wait_mirrored(&b, TOPIC, &BTreeMap::from([(0, end(0))]), DEADLINE);
    assert_eq!(metadata(&b_addr, TOPIC), (id, all_ok(1)), "B has A's topic id");

    // The mirror topic is read-only at B.
    for version in 0..=3 {
        assert_eq!(grow_raw(&b_addr, version, TOPIC, 2), READ_ONLY_TOPIC, "v{version}");
    }

    // A grows; the new partition gets data.
    assert_eq!(
        grow(&a_addr, &NewPartitions::new(TOPIC, 2), false),
        Ok(TOPIC.to_string())
    );
    produce(&a_addr, TOPIC, 1, "second", 30);
    produce(&a_addr, TOPIC, 0, "more", 10);
    let ends = BTreeMap::from([(0, end(0)), (1, end(1))]);
    assert!(ends[&1] >= 30);

    // B picks it up at a metadata refresh (1 s) and mirrors it.
    common::wait_mirrored(&b, TOPIC, &ends, Duration::from_secs(30));
    let uuid = uuid::Uuid::from_bytes(id).to_string();
    let started = Instant::now();
    loop {
        let state = mirror_state(&b, TOPIC, 1);
        if state.as_ref().is_some_and(|(s, _)| s == "MIRRORING") {
            assert_eq!(state.unwrap().1, uuid, "B's grow-1 carries A's topic id");
            break;
        }
        assert!(started.elapsed() < DEADLINE, "grow-1 at B: {state:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        metadata(&b_addr, TOPIC),
        (id, all_ok(2)),
        "B serves both with A's topic id"
    );
    assert_eq!(metadata(&a_addr, TOPIC), (id, all_ok(2)));

    b.stop().expect("B stops cleanly");
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new(TOPIC, p)).collect();
    common::assert_mirrors_source(dir_b.path(), &a_addr, &tps);
    for tp in &tps {
        let file = |dir: &Path| {
            let path = dir.join(tp.to_string()).join("partition.metadata");
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        };
        assert_eq!(file(dir_b.path()), file(dir_a.path()), "{tp}: partition.metadata");
    }
    a.stop().expect("A stops cleanly");
}
