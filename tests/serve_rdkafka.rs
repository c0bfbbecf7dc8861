//! Clients read the mirror: librdkafka (the `rdkafka` crate) consumes
//! from the agent's listener what it consumes from the source (the mock
//! cluster) — every record, key, header, offset and timestamp.
//!
//! (Produce refusals are tested with kcat and confluent-kafka: the `rdkafka`
//! crate turns an error code it does not know, such as 134 READ_ONLY_TOPIC,
//! into an invalid enum value and crashes in its delivery report.)

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;

const DEADLINE: Duration = Duration::from_secs(60);

/// (partition, offset) → (key, value, headers, timestamp)
type Records = BTreeMap<(i32, i64), (Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>, i64)>;

fn produce(bootstrap: &str, topic: &str, partitions: i32, count: u64, codec: &str, seed: u64) {
    mock_source::produce(bootstrap, topic, partitions, count, codec, seed).unwrap_or_else(|e| panic!("produce: {e}"));
}

/// Everything in `topic` up to the given ends, read with assign (no group).
fn consume(bootstrap: &str, topic: &str, ends: &BTreeMap<i32, i64>, isolation: &str) -> Records {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for &p in ends.keys() {
        assignment.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).expect("assign");
    let mut out = Records::new();
    let started = Instant::now();
    let done = |out: &Records| {
        ends.iter()
            .all(|(&p, &end)| end == 0 || out.range((p, end - 1)..=(p, end - 1)).next().is_some())
    };
    while !done(&out) {
        assert!(started.elapsed() < DEADLINE, "consuming from {bootstrap} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(
                    (m.partition(), m.offset()),
                    (
                        m.key().map(<[u8]>::to_vec),
                        m.payload().map(<[u8]>::to_vec),
                        headers,
                        m.timestamp().to_millis().unwrap_or(-1),
                    ),
                );
            }
            Some(Err(e)) => panic!("consume from {bootstrap}: {e}"),
            None => {}
        }
    }
    out
}

#[test]
fn librdkafka_reads_the_mirror_as_it_reads_the_source() {
    reads_the_mirror_as_the_source("");
}

/// The same with shard 0 accepting every connection and handing them out.
#[test]
fn librdkafka_reads_the_mirror_through_one_acceptor() {
    reads_the_mirror_as_the_source(r#"accept = "one_acceptor""#);
}

/// `listener` is extra TOML for the agent's `[listener]` table.
fn reads_the_mirror_as_the_source(listener: &str) {
    let cluster = MockCluster::new(3).expect("mock cluster");
    cluster.create_topic("orders", 3, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    produce(&source, "orders", 3, 3000, "lz4", 0);
    let ends: BTreeMap<i32, i64> = (0..3)
        .map(|p| (p, common::source_high_watermark(&source, "orders", p, DEADLINE)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(common::serving_mirror_config(
        dir.path(),
        &source,
        &["orders"],
        listener,
    ))
    .expect("agent");
    let mirror = agent.listener_addr().expect("listening").to_string();
    common::wait_mirrored(&agent, "orders", &ends, DEADLINE);

    let from_source = consume(&source, "orders", &ends, "read_uncommitted");
    let from_mirror = consume(&mirror, "orders", &ends, "read_uncommitted");
    assert_eq!(from_source.len(), 3000);
    assert_eq!(from_mirror, from_source);

    // Metadata: the agent leads every partition, with the source's topic id.
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &mirror).create().unwrap();
    let md = consumer
        .fetch_metadata(Some("orders"), Duration::from_secs(10))
        .expect("metadata");
    let topic = &md.topics()[0];
    assert_eq!(topic.partitions().len(), 3);
    assert!(topic.partitions().iter().all(|p| p.leader() == 0));
    // Watermarks match the source's.
    for (&p, &end) in &ends {
        let (low, high) = consumer
            .fetch_watermarks("orders", p, Duration::from_secs(10))
            .expect("watermarks");
        assert_eq!(high, end, "partition {p}");
        assert!(low <= from_mirror.keys().find(|(q, _)| *q == p).map_or(0, |k| k.1));
    }

    agent.stop().expect("stop");
}
