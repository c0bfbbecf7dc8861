//! Compaction of a local topic in a running agent, with librdkafka as the
//! client: a topic created with CreateTopics on an agent whose `[log]` says
//! `cleanup_policy = "compact"` is produced to with every codec (keyed
//! records, tombstones), the shard's periodic cleaner compacts its sealed
//! segments (rewriting batches with their own codec), and consumers reading
//! from the start — while the cleaner works and after — see every offset at
//! most once, in order, each record as produced at its own offset, and in
//! the end exactly the latest value of each key (deleted keys gone), with
//! gaps where older records were.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_storage::log::LogConfig;

const TOPIC: &str = "compacted-local";
const KEYS: usize = 10;
const OWN_KEYS: usize = 4;
const PER_CODEC: usize = 150;
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const SEGMENT_MS: u64 = 300;
const DEADLINE: Duration = Duration::from_secs(60);

fn config(data_dir: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 1
        [listener]
        address = "127.0.0.1:0"
        [log]
        cleanup_policy = "compact"
        delete_retention_ms = 0
        min_cleanable_dirty_ratio = 0.01
        log_cleaner_interval_ms = 100
        segment_bytes = 4096
        segment_ms = {SEGMENT_MS}
        index_interval_bytes = 512
        segment_index_bytes = 65536
        preallocate_bytes = 65536
        prefault_bytes = 0
        "#
    ))
    .expect("config")
}

/// (key, value) of each produced record by offset; `None` values are tombstones.
type Produced = BTreeMap<i64, (Vec<u8>, Option<Vec<u8>>)>;

#[derive(Default)]
struct Deliveries(Mutex<Produced>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let m = result.as_ref().expect("record delivered");
        let key = m.key().expect("keyed").to_vec();
        let previous = self
            .0
            .lock()
            .unwrap()
            .insert(m.offset(), (key, m.payload().map(<[u8]>::to_vec)));
        assert!(previous.is_none(), "offset {} acknowledged twice", m.offset());
    }
}

fn create_topic(bootstrap: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1));
    let results =
        futures_lite::future::block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("create topics");
    assert!(matches!(&results[0], Ok(name) if name == TOPIC), "{results:?}");
}

/// Produces `records` with `codec`; returns what was acknowledged, by offset.
fn produce(bootstrap: &str, codec: &str, records: &[(String, Option<String>)]) -> Produced {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", codec)
        .set("linger.ms", "20")
        .set("batch.num.messages", "20")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())
        .expect("producer");
    for (key, value) in records {
        let mut record = BaseRecord::to(TOPIC).partition(0).key(key.as_str());
        if let Some(v) = value {
            record = record.payload(v.as_str());
        }
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
    let produced = std::mem::take(&mut *producer.context().0.lock().unwrap());
    assert_eq!(produced.len(), records.len(), "{codec}: acknowledgements");
    produced
}

/// One pass of a reader from the start to the log end as it was when the
/// pass began: the records in offset order (each offset once, increasing).
fn read_pass(bootstrap: &str) -> Vec<(i64, Vec<u8>, Option<Vec<u8>>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("max.partition.fetch.bytes", "2000")
        .create()
        .expect("consumer");
    let (_, end) = consumer
        .fetch_watermarks(TOPIC, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut out: Vec<(i64, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    if end == 0 {
        std::thread::sleep(Duration::from_millis(50));
        return out;
    }
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let started = Instant::now();
    // The log's last record is in the active segment, never cleaned.
    while out.last().is_none_or(|r| r.0 + 1 < end) {
        assert!(started.elapsed() < DEADLINE, "a pass did not reach {end}");
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                if let Some(last) = out.last() {
                    assert!(m.offset() > last.0, "offset {} after {}", m.offset(), last.0);
                }
                out.push((m.offset(), m.key().unwrap().to_vec(), m.payload().map(<[u8]>::to_vec)));
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None => {}
        }
    }
    out
}

/// Reads the partition from the start up to `end` (exclusive), checking
/// each record against what was produced at its offset.
fn consume_all(bootstrap: &str, produced: &Produced, end: i64) -> Produced {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("max.partition.fetch.bytes", "3000")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut out = Produced::new();
    let mut last = -1;
    let started = Instant::now();
    while last + 1 < end {
        assert!(started.elapsed() < DEADLINE, "consumed up to {last} of {end}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                assert!(m.offset() > last, "offset {} after {last}", m.offset());
                last = m.offset();
                let record = (m.key().unwrap().to_vec(), m.payload().map(<[u8]>::to_vec));
                assert_eq!(
                    produced.get(&m.offset()),
                    Some(&record),
                    "record at {} is not what was produced there",
                    m.offset()
                );
                out.insert(m.offset(), record);
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None => {}
        }
    }
    out
}

#[test]
fn a_compacted_local_topic_keeps_the_latest_value_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path())).expect("agent");
    let bootstrap = agent.listener_addr().unwrap().to_string();
    create_topic(&bootstrap);

    // A reader going over the partition again and again while it is
    // written and cleaned.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, bootstrap) = (Arc::clone(&stop), bootstrap.clone());
        std::thread::spawn(move || {
            let mut passes = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                passes.push(read_pass(&bootstrap));
            }
            passes
        })
    };

    let mut produced = Produced::new();
    for (c, codec) in CODECS.iter().enumerate() {
        let records: Vec<(String, Option<String>)> = (0..PER_CODEC)
            .map(|n| {
                // Half the keys are the codec's own, so that every codec's
                // last batches keep records and get rebuilt with it.
                let key = if n % 2 == 0 {
                    format!("{codec}-{}", n / 2 % OWN_KEYS)
                } else {
                    format!("key-{}", (n * 7 + c) % KEYS)
                };
                // Every 9th record deletes its key; the values compress well.
                let value = (n % 9 != 4).then(|| format!("{codec}-{n}-{}", "payload ".repeat(8)));
                (key, value)
            })
            .collect();
        produced.extend(produce(&bootstrap, codec, &records));
    }
    // Past `segment.ms`, one more record rolls the segment: everything
    // before it is sealed, hence cleanable.
    std::thread::sleep(Duration::from_millis(2 * SEGMENT_MS));
    produced.extend(produce(
        &bootstrap,
        "none",
        &[("end".to_string(), Some("sentinel".to_string()))],
    ));
    let end = *produced.keys().next_back().unwrap() + 1;
    assert_eq!(end as usize, CODECS.len() * PER_CODEC + 1);

    // The latest record per key, unless it is a tombstone (retention 0).
    let mut latest: BTreeMap<&[u8], i64> = BTreeMap::new();
    for (&offset, (key, _)) in &produced {
        latest.insert(key, offset);
    }
    let expected: Produced = latest
        .values()
        .filter(|o| produced[o].1.is_some())
        .map(|o| (*o, produced[o].clone()))
        .collect();

    // Consumers read while the cleaner works, until it is done.
    let started = Instant::now();
    let mut rounds = 0;
    let compacted = loop {
        let read = consume_all(&bootstrap, &produced, end);
        rounds += 1;
        if read == expected {
            break read;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "after {rounds} reads the log still holds {} records, {} expected",
            read.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    stop.store(true, Ordering::SeqCst);
    let passes = reader.join().expect("reader");
    // Every record a pass saw was produced at that offset, and none that
    // is still there at the end was missing from a pass that got past it
    // (cleaning only removes, appends only add after the end).
    for pass in &passes {
        let reached = pass.last().map_or(-1, |r| r.0);
        for (offset, key, value) in pass {
            assert_eq!(
                produced.get(offset),
                Some(&(key.clone(), value.clone())),
                "a reader saw at {offset} what was not produced there"
            );
        }
        let seen: Vec<i64> = pass.iter().map(|r| r.0).collect();
        for offset in compacted.keys().filter(|&&o| o <= reached) {
            assert!(seen.binary_search(offset).is_ok(), "a reader missed offset {offset}");
        }
    }
    eprintln!(
        "PASSES {} {:?}",
        passes.len(),
        passes.iter().map(Vec::len).collect::<Vec<_>>()
    );
    assert!(
        passes.len() > 1,
        "the reader read while the log was written and cleaned"
    );
    let offsets: Vec<i64> = compacted.keys().copied().collect();
    assert!(offsets.len() <= KEYS + OWN_KEYS * CODECS.len() + 1, "{offsets:?}");
    assert!(offsets.windows(2).any(|w| w[1] > w[0] + 1), "compaction leaves gaps");
    assert_eq!(*offsets.last().unwrap(), end - 1, "the sentinel at the log end");

    // The cleaned segments survive a restart, and writes go on after them.
    agent.stop().expect("stop");
    let agent = Agent::start(config(dir.path())).expect("restart");
    let bootstrap = agent.listener_addr().unwrap().to_string();
    assert_eq!(consume_all(&bootstrap, &produced, end), expected);
    let more = produce(
        &bootstrap,
        "lz4",
        &[("key-0".to_string(), Some("after restart".to_string()))],
    );
    assert_eq!(more.keys().copied().collect::<Vec<_>>(), vec![end]);
    agent.stop().expect("stop");

    // On disk: batches that lost records were rebuilt with their own codec.
    let log = common::open_log(
        &dir.path().join(format!("{TOPIC}-0")),
        LogConfig {
            preallocate_bytes: 65536,
            ..LogConfig::default()
        },
    );
    let mut rebuilt = BTreeMap::new();
    log.for_each_batch(|b| {
        if b.records_count() > 0 && b.records_count() < b.last_offset_delta() + 1 {
            *rebuilt.entry(b.compression().name()).or_insert(0) += 1;
        }
    })
    .unwrap();
    for codec in CODECS {
        assert!(rebuilt.contains_key(codec), "no rebuilt {codec} batch: {rebuilt:?}");
    }
}
