//! Ending a mirror (failover) on a running agent: the mirrored partitions
//! leave their fetchers, transactions the source left open are aborted,
//! a MIRROR_PID_RESET closes the source's producer history at a bumped
//! leader epoch, and the topic — read-only while mirrored — takes writes
//! from an ordinary librdkafka producer, before and after a restart.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use ringmirror::agent::Agent;
use ringmirror_storage::log::TopicPartition;

const TOPIC: &str = "ledger";
const DEADLINE: Duration = Duration::from_secs(60);

/// Produces `count` records in one transaction the mock never marks: on the
/// mirror it stays open until mirroring ends.
fn produce_transaction(bootstrap: &str, count: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", "ledger-writer")
        .create()
        .expect("transactional producer");
    producer.init_transactions(DEADLINE).expect("init transactions");
    producer.begin_transaction().expect("begin");
    for n in 0..count {
        let key = format!("t{n}");
        producer
            .send(
                BaseRecord::to(TOPIC)
                    .partition(n as i32 % 2)
                    .key(&key)
                    .payload("in a transaction"),
            )
            .expect("queued");
    }
    producer.commit_transaction(DEADLINE).expect("commit");
}

/// (latest offset with READ_UNCOMMITTED, with READ_COMMITTED) of a partition.
fn ends(conn: &mut common::KafkaConnection, partition: i32) -> (i64, i64) {
    let latest = |conn: &mut common::KafkaConnection, isolation_level: i8| {
        let req = ListOffsetsRequest::default()
            .with_isolation_level(isolation_level)
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(-1),
                    ]),
            ]);
        let r: ListOffsetsResponse = conn.request(ApiKey::ListOffsets as i16, 5, &req).expect("list offsets");
        r.topics[0].partitions[0].offset
    };
    (latest(conn, 0), latest(conn, 1))
}

fn produce_locally(bootstrap: &str, count: usize) -> Result<(), String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", "20000")
        .create()
        .map_err(|e| e.to_string())?;
    for n in 0..count {
        let key = format!("local{n}");
        producer
            .send(
                BaseRecord::to(TOPIC)
                    .partition(n as i32 % 2)
                    .key(&key)
                    .payload("written after failover"),
            )
            .map_err(|(e, _)| e.to_string())?;
    }
    producer.flush(DEADLINE).map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn ending_mirroring_makes_the_topic_writable_and_closes_open_transactions() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 2, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, 2, 200, "lz4", 0).expect("produce");
    produce_transaction(&source, 20);
    let source_ends: BTreeMap<i32, i64> = (0..2)
        .map(|p| (p, common::source_high_watermark(&source, TOPIC, p, DEADLINE)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(common::serving_mirror_config(dir.path(), &source, &[TOPIC], "")).expect("agent");
    common::wait_mirrored(&agent, TOPIC, &source_ends, DEADLINE);
    let addr = agent.listener_addr().unwrap().to_string();
    let mut conn = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
    for p in 0..2 {
        let (end, stable) = ends(&mut conn, p);
        assert_eq!(end, source_ends[&p]);
        assert!(
            stable < end,
            "partition {p}: the unmarked transaction keeps the LSO below the end"
        );
    }

    let ended = agent.end_mirroring("dr", TOPIC).expect("end mirroring");
    assert_eq!(ended.len(), 2);
    let started = Instant::now();
    let ended_at: BTreeMap<i32, (i64, i32)> = loop {
        let status = agent.status();
        let done: BTreeMap<i32, (i64, i32)> = (0..2)
            .filter_map(|p| {
                let s = status.get(&("dr".to_string(), TopicPartition::new(TOPIC, p)))?;
                Some((p, s.mirroring_ended?))
            })
            .collect();
        if done.len() == 2 {
            break done;
        }
        assert!(started.elapsed() < DEADLINE, "mirroring did not end: {status:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    for p in 0..2 {
        let (end, stable) = ends(&mut conn, p);
        // An ABORT marker and the MIRROR_PID_RESET follow the mirrored data,
        // and nothing is open any more.
        assert_eq!(end, source_ends[&p] + 2, "partition {p}");
        assert_eq!((end, stable), (ended_at[&p].0, end), "partition {p}");
    }

    // The topic now takes writes, after the markers.
    produce_locally(&addr, 10).expect("produce after failover");
    for p in 0..2 {
        assert_eq!(ends(&mut conn, p).0, ended_at[&p].0 + 5, "partition {p}");
    }
    drop(conn);
    agent.stop().expect("stop");

    // Restarted with the same configuration: the topic stays local.
    let agent = Agent::start(common::serving_mirror_config(dir.path(), &source, &[TOPIC], "")).expect("restart");
    let addr = agent.listener_addr().unwrap().to_string();
    produce_locally(&addr, 10).expect("produce after restart");
    let mut conn = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
    for p in 0..2 {
        assert_eq!(
            ends(&mut conn, p),
            (ended_at[&p].0 + 10, ended_at[&p].0 + 10),
            "partition {p}"
        );
    }
    agent.stop().expect("stop");
}

/// A crash between starting to end mirroring and finishing it: the marker
/// file left in the partition directory makes the next start finish the
/// job (markers written once, partition writable).
#[test]
fn an_interrupted_end_of_mirroring_is_finished_at_start() {
    use ringmirror_dataplane::partition::registry::ENDING_MIRROR_MARKER;
    use ringmirror_storage::batch::{BatchBuilder, BuildRecord};
    use ringmirror_storage::log::{LogConfig, LogDir};

    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new(TOPIC, 0);
    {
        let log_dir = LogDir::open(dir.path()).unwrap();
        let (mut log, _) = log_dir
            .open_partition(&tp, Some([4; 16]), LogConfig::default(), 0)
            .unwrap();
        let open_txn = BatchBuilder {
            partition_leader_epoch: 2,
            producer_id: 9,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            records: vec![BuildRecord {
                timestamp: 1,
                value: Some(b"never committed at the source".to_vec()),
                ..BuildRecord::default()
            }],
            ..BatchBuilder::default()
        };
        log.append(&open_txn.build(), 0).unwrap();
        log.close(0).unwrap();
        // The crash came right after the job was recorded.
        std::fs::write(log_dir.partition_dir(&tp).join(ENDING_MIRROR_MARKER), "source-cluster").unwrap();
    }
    let config = ringmirror::config::AgentConfig::parse(&format!(
        "data_dir = {:?}\nshards = 1\n[listener]\naddress = \"127.0.0.1:0\"\n",
        dir.path()
    ))
    .unwrap();
    let agent = Agent::start(config).expect("agent");
    let addr = agent.listener_addr().unwrap().to_string();
    let mut conn = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).unwrap();
    // The open transaction was aborted and the reset written: 1 + 2.
    assert_eq!(ends(&mut conn, 0), (3, 3));
    produce_locally(&addr, 1).expect("writable after the finished end");
    assert_eq!(ends(&mut conn, 0), (4, 4), "the local write landed after the markers");
    assert!(
        !dir.path()
            .join(format!("{TOPIC}-0"))
            .join(ENDING_MIRROR_MARKER)
            .exists()
    );
    agent.stop().expect("stop");
}
