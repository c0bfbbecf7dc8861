//! Agents mirroring from agents: what one agent serves on its listener is
//! a source like any Kafka cluster, so a second agent mirrors it byte for
//! byte, offset for offset.
//!
//! - A chain: librdkafka's mock cluster → agent A → agent B. Both hold
//!   exactly the source's batches (checked against raw Fetches of the source
//!   while they run, and on disk after a clean stop), with the same
//!   leader-epoch checkpoints, also after leader moves at the source bump
//!   its epochs and more data arrives.
//! - An agent as the source: A serves a data directory written here batch
//!   by batch — compressed keyed records, two producers' transactions with
//!   COMMIT and ABORT markers (one left open), and a compacted topic whose
//!   offsets have gaps — and B's logs must hold exactly those batches at
//!   those offsets, with the same last stable offsets and aborted
//!   transactions; a READ_COMMITTED librdkafka consumer gets exactly the
//!   committed records through either agent.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror::tools::demo::{Codec, compress_batch};
use ringmirror_storage::batch::{BatchBuilder, BuildRecord, ControlRecord, ControlType, RecordBatch, decode_records};
use ringmirror_storage::log::{AbortedTxn, LogConfig, LogDir, TopicPartition};

const DEADLINE: Duration = Duration::from_secs(60);
const SEGMENT_BYTES: u64 = 65536;

/// An agent serving on a free port, mirroring `topics` from `bootstrap` as
/// mirror `name` when given one (and only serving its data dir otherwise).
fn agent_config(data_dir: &Path, mirror: Option<(&str, &str, &[&str])>) -> AgentConfig {
    let mirror = mirror.map_or(String::new(), |(name, bootstrap, topics)| {
        let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
        format!(
            r#"
            [[mirror]]
            name = {name:?}
            bootstrap_servers = [{bootstrap:?}]
            topics = [{topics}]
            fetch_max_wait_ms = 100
            fetch_partition_max_bytes = 32768
            metadata_refresh_interval_ms = 1000
            "#
        )
    });
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [log]
        segment_bytes = {SEGMENT_BYTES}
        [listener]
        address = "127.0.0.1:0"
        {mirror}
        "#
    ))
    .expect("config")
}

fn listener(agent: &Agent) -> String {
    agent.listener_addr().expect("the agent listens").to_string()
}

/// Waits until the log end of each of `mirror`'s partitions reaches `ends`.
fn wait_caught_up(agent: &Agent, mirror: &str, ends: &BTreeMap<TopicPartition, i64>) {
    let started = Instant::now();
    loop {
        let status = agent.status();
        let behind: Vec<String> = ends
            .iter()
            .filter_map(|(tp, &end)| {
                let state = status.get(&(mirror.to_owned(), tp.clone()));
                state
                    .is_none_or(|s| s.log_end_offset < end)
                    .then(|| format!("{tp} (want {end}, have {state:?})"))
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{mirror} did not catch up in time: {behind:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn partitions(topic: &str, count: i32) -> Vec<TopicPartition> {
    (0..count).map(|p| TopicPartition::new(topic, p)).collect()
}

fn source_ends(bootstrap: &str, tps: &[TopicPartition]) -> BTreeMap<TopicPartition, i64> {
    tps.iter()
        .map(|tp| {
            let end = common::source_high_watermark(bootstrap, &tp.topic, tp.partition, DEADLINE);
            (tp.clone(), end)
        })
        .collect()
}

/// Asserts that each of `agents` (name, listener address) serves exactly
/// the source's batches of every partition: raw Fetches of both sides,
/// compared byte for byte at the same offsets, with the same log start and
/// high watermark.
fn assert_agents_serve_the_source(source: &str, agents: &[(&str, &str)], tps: &[TopicPartition]) {
    for tp in tps {
        let expected = common::source_partition_log(source, &tp.topic, tp.partition, DEADLINE);
        assert!(!expected.batches.is_empty(), "{tp}: the source holds data");
        for &(name, addr) in agents {
            let served = common::source_partition_log(addr, &tp.topic, tp.partition, DEADLINE);
            assert_eq!(
                (served.log_start_offset, served.high_watermark),
                (expected.log_start_offset, expected.high_watermark),
                "{name} {tp}: log start offset and high watermark"
            );
            assert_eq!(served.batches.len(), expected.batches.len(), "{name} {tp}: batch count");
            for ((o_off, o), (s_off, s)) in served.batches.iter().zip(&expected.batches) {
                assert_eq!(o_off, s_off, "{name} {tp}: same offsets");
                assert!(o == s, "{name} {tp}: batch at {o_off} differs from the source's bytes");
            }
        }
    }
}

fn leader_epoch_checkpoint(data_dir: &Path, tp: &TopicPartition) -> String {
    let path = data_dir.join(tp.to_string()).join("leader-epoch-checkpoint");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn a_chain_of_agents_mirrors_the_source_byte_for_byte() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    cluster.create_topic("orders", 3, 1).expect("create topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, "orders", 3, 3000, "lz4", 0).expect("produce");
    let tps = partitions("orders", 3);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let a = Agent::start(agent_config(dir_a.path(), Some(("from-source", &source, &["orders"])))).expect("start A");
    let a_addr = listener(&a);
    let b = Agent::start(agent_config(dir_b.path(), Some(("from-a", &a_addr, &["orders"])))).expect("start B");
    let b_addr = listener(&b);
    let ends = source_ends(&source, &tps);
    wait_caught_up(&a, "from-source", &ends);
    wait_caught_up(&b, "from-a", &ends);
    assert_agents_serve_the_source(&source, &[("A", &a_addr), ("B", &b_addr)], &tps);

    // Leaders move at the source (its epochs bump: A fetches with the new
    // ones, then B is fenced by A and refreshes), and more data comes while
    // both run.
    for (p, broker) in [(0, 2), (1, 3), (2, 1)] {
        cluster
            .partition_leader("orders", p, Some(broker))
            .expect("move leader");
    }
    mock_source::produce(&source, "orders", 3, 1500, "zstd", 10_000).expect("produce");
    mock_source::produce(&source, "orders", 3, 1500, "gzip", 20_000).expect("produce");
    let ends = source_ends(&source, &tps);
    wait_caught_up(&a, "from-source", &ends);
    wait_caught_up(&b, "from-a", &ends);
    assert_agents_serve_the_source(&source, &[("A", &a_addr), ("B", &b_addr)], &tps);

    b.stop().expect("B stops cleanly");
    a.stop().expect("A stops cleanly");
    let on_a = common::assert_mirrors_source(dir_a.path(), &source, &tps);
    let on_b = common::assert_mirrors_source(dir_b.path(), &source, &tps);
    for tp in &tps {
        let (a_log, b_log) = (&on_a[tp].1, &on_b[tp].1);
        assert!(
            common::assert_epoch_cache_matches_batches(tp, b_log) >= 2,
            "{tp}: the leader moved, so the batches carry two epochs or more"
        );
        assert_eq!(b_log.epochs, a_log.epochs, "{tp}: leader-epoch caches");
        assert_eq!(
            leader_epoch_checkpoint(dir_b.path(), tp),
            leader_epoch_checkpoint(dir_a.path(), tp),
            "{tp}: leader-epoch-checkpoint files"
        );
    }
}

// ---------------------------------------------------------------------------
// An agent as the source
// ---------------------------------------------------------------------------

const LEDGER: &str = "ledger";
const COMPACTED: &str = "compacted";
const LEDGER_ID: [u8; 16] = *b"ledger-topic-id!";
const COMPACTED_ID: [u8; 16] = *b"compacted-topic!";

/// The epoch of every producer here.
const PRODUCER_EPOCH: i16 = 3;
/// The producer of the ledger's batches outside transactions.
const IDEMPOTENT_PRODUCER: i64 = 10;

fn records(count: usize, seed: usize, timestamp: i64) -> Vec<BuildRecord> {
    (0..count)
        .map(|i| {
            let n = seed * 1000 + i;
            BuildRecord {
                timestamp: timestamp + i as i64,
                key: Some(format!("account-{}", n % 37).into_bytes()),
                value: Some(format!("{{\"n\":{n},\"memo\":\"{}\"}}", "transfer ".repeat(1 + n % 40)).into_bytes()),
                headers: vec![("n".into(), Some(n.to_be_bytes().to_vec()))],
            }
        })
        .collect()
}

/// Builds one partition's batches at increasing offsets (a caller makes a
/// gap by moving `next_offset` on), each producer's sequences following on.
struct SourceWriter {
    next_offset: i64,
    batches: Vec<(i64, Vec<u8>)>,
    sequences: BTreeMap<i64, i32>,
}

impl SourceWriter {
    fn new(first_offset: i64) -> Self {
        Self {
            next_offset: first_offset,
            batches: Vec::new(),
            sequences: BTreeMap::new(),
        }
    }

    fn push(&mut self, mut builder: BatchBuilder, codec: Option<Codec>) {
        builder.base_offset = self.next_offset;
        if builder.producer_id >= 0 && !builder.control {
            let sequence = self.sequences.entry(builder.producer_id).or_default();
            builder.base_sequence = *sequence;
            *sequence += builder.records.len() as i32;
        }
        let batch = builder.build();
        let batch = match codec {
            Some(codec) => compress_batch(&batch, codec).expect("compress"),
            None => batch,
        };
        self.next_offset = RecordBatch::new(&batch[..]).expect("a batch").next_offset();
        self.batches.push((builder.base_offset, batch));
    }

    fn data(&mut self, epoch: i32, producer_id: i64, transactional: bool, seed: usize, codec: Codec) {
        let builder = BatchBuilder {
            partition_leader_epoch: epoch,
            producer_id,
            producer_epoch: PRODUCER_EPOCH,
            transactional,
            records: records(5 + seed % 20, seed, 1_700_000_000_000 + seed as i64 * 100),
            ..BatchBuilder::default()
        };
        self.push(builder, Some(codec));
    }

    fn marker(&mut self, epoch: i32, producer_id: i64, kind: ControlType) {
        let value = BatchBuilder::end_txn_marker_value(7);
        let builder =
            BatchBuilder::control_marker(0, epoch, producer_id, PRODUCER_EPOCH, kind, value, 1_700_000_000_000);
        self.push(builder, None);
    }
}

/// A ledger partition: idempotent batches, and two producers' transactions
/// interleaved, committed and aborted, over two leader epochs; partition 0
/// ends inside an open transaction.
fn ledger_batches(partition: i32) -> Vec<(i64, Vec<u8>)> {
    let (p1, p2) = (100 + 2 * i64::from(partition), 101 + 2 * i64::from(partition));
    let mut w = SourceWriter::new(0);
    for round in 0..40 {
        let epoch = if round < 20 { 4 } else { 6 };
        let seed = round * 10 + partition as usize * 1000;
        w.data(epoch, IDEMPOTENT_PRODUCER, false, seed, Codec::Lz4);
        w.data(epoch, p1, true, seed + 1, Codec::Gzip);
        w.data(epoch, p2, true, seed + 2, Codec::Lz4);
        w.data(epoch, p1, true, seed + 3, Codec::Lz4);
        let (first, second) = if round % 2 == 0 { (p1, p2) } else { (p2, p1) };
        w.marker(epoch, first, ControlType::Commit);
        w.data(epoch, second, true, seed + 4, Codec::Gzip);
        let outcome = if round % 3 == 0 {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        w.marker(epoch, second, outcome);
    }
    if partition == 0 {
        w.data(6, p1, true, 99_999, Codec::Lz4);
    }
    w.batches
}

/// A compacted partition: it starts past offset 0, records are missing
/// inside batches and whole batches between them, some batches lost their
/// trailing records (the last offset stays), some records are tombstones.
fn compacted_batches() -> Vec<(i64, Vec<u8>)> {
    let mut w = SourceWriter::new(37);
    for i in 0..150usize {
        let count = 3 + i % 9;
        let mut records = records(count, 50_000 + i, 1_700_000_000_000 + i as i64);
        if i % 4 == 0 {
            records[0].value = None;
        }
        let deltas: Vec<i32> = (0..count as i32).map(|r| r * (1 + (i % 3) as i32)).collect();
        let trailing = if i % 5 == 0 { 4 } else { 0 };
        let builder = BatchBuilder {
            partition_leader_epoch: 2 + (i / 75) as i32,
            last_offset_delta: Some(deltas[count - 1] + trailing),
            offset_deltas: Some(deltas),
            records,
            ..BatchBuilder::default()
        };
        w.push(builder, (i % 2 == 0).then_some(Codec::Lz4));
        w.next_offset += (i % 7) as i64 * 3;
    }
    w.batches
}

/// Writes the source data dir by hand; returns each partition's batches.
fn write_source(data_dir: &Path) -> BTreeMap<TopicPartition, Vec<(i64, Vec<u8>)>> {
    let written: BTreeMap<TopicPartition, Vec<(i64, Vec<u8>)>> = [
        (TopicPartition::new(LEDGER, 0), ledger_batches(0)),
        (TopicPartition::new(LEDGER, 1), ledger_batches(1)),
        (TopicPartition::new(COMPACTED, 0), compacted_batches()),
    ]
    .into_iter()
    .collect();
    let log_dir = LogDir::open(data_dir).unwrap();
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let mut logs = Vec::new();
    for (tp, batches) in &written {
        let id = if tp.topic == LEDGER { LEDGER_ID } else { COMPACTED_ID };
        let (mut log, _) = log_dir.open_partition(tp, Some(id), config, 0).unwrap();
        for (_, batch) in batches {
            log.append(batch, 0).unwrap_or_else(|e| panic!("append to {tp}: {e}"));
        }
        logs.push((tp.clone(), log));
    }
    log_dir.close(logs, 0).unwrap();
    written
}

/// What a log holds, and what it answers about offsets and transactions.
#[derive(Debug, PartialEq, Eq)]
struct LogFacts {
    topic_id: Option<[u8; 16]>,
    log_start_offset: i64,
    log_end_offset: i64,
    last_stable_offset: i64,
    aborted: Vec<AbortedTxn>,
    epochs: Vec<(i32, i64)>,
}

/// Opens the stopped agent's data dir, reads each log's facts and batches,
/// and closes it cleanly again.
fn log_facts(data_dir: &Path, tps: &[TopicPartition]) -> BTreeMap<TopicPartition, (LogFacts, common::Batches)> {
    let log_dir = LogDir::open(data_dir).unwrap();
    let mut out = BTreeMap::new();
    let mut logs = Vec::new();
    for tp in tps {
        let (log, _) = log_dir.open_partition(tp, None, LogConfig::default(), 0).unwrap();
        let end = log.log_end_offset();
        let facts = LogFacts {
            topic_id: log.topic_id(),
            log_start_offset: log.log_start_offset(),
            log_end_offset: end,
            last_stable_offset: log.last_stable_offset(),
            aborted: log.aborted_transactions(0, end),
            epochs: log
                .epoch_cache()
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect(),
        };
        out.insert(tp.clone(), (facts, common::stored_batches(&log)));
        logs.push((tp.clone(), log));
    }
    log_dir.close(logs, 0).unwrap();
    out
}

/// Where a record is: (topic, partition, offset).
type RecordAt = (String, i32, i64);
/// A record's key and value.
type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// (topic, partition, offset) of every record a READ_COMMITTED reader
/// gets: those outside transactions and those of committed transactions
/// (none follows the one left open, so the last stable offset hides nothing else).
fn committed_records(written: &BTreeMap<TopicPartition, Vec<(i64, Vec<u8>)>>) -> BTreeSet<RecordAt> {
    let mut out = BTreeSet::new();
    for (tp, batches) in written {
        let mut open: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (_, bytes) in batches {
            let batch = RecordBatch::new(&bytes[..]).unwrap();
            let offsets: Vec<i64> = if batch.is_control() {
                let marker = ControlRecord::decode(&batch).unwrap();
                let decided = open.remove(&batch.producer_id()).unwrap_or_default();
                if marker.control_type == ControlType::Commit {
                    decided
                } else {
                    Vec::new()
                }
            } else {
                let offsets = decode_records(&batch, common::MAX_DECOMPRESSED_BYTES)
                    .unwrap()
                    .iter()
                    .map(|r| r.offset)
                    .collect();
                if batch.is_transactional() {
                    open.entry(batch.producer_id()).or_default().extend(offsets);
                    Vec::new()
                } else {
                    offsets
                }
            };
            out.extend(offsets.into_iter().map(|o| (tp.topic.clone(), tp.partition, o)));
        }
    }
    out
}

/// Reads `tps` from the start with a READ_COMMITTED librdkafka consumer
/// until `count` records have arrived: (topic, partition, offset) → (key, value).
fn consume_committed(bootstrap: &str, tps: &[TopicPartition], count: usize) -> BTreeMap<RecordAt, KeyValue> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for tp in tps {
        assignment
            .add_partition_offset(&tp.topic, tp.partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).expect("assign");
    let mut out = BTreeMap::new();
    let started = Instant::now();
    while out.len() < count {
        assert!(
            started.elapsed() < DEADLINE,
            "{bootstrap}: {} of {count} committed records in time",
            out.len()
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let key = (m.topic().to_owned(), m.partition(), m.offset());
                out.insert(key, (m.key().map(<[u8]>::to_vec), m.payload().map(<[u8]>::to_vec)));
            }
            Some(Err(e)) => panic!("consume from {bootstrap}: {e}"),
            None => {}
        }
    }
    out
}

#[test]
fn an_agent_serves_transactions_and_compaction_gaps_to_another_byte_for_byte() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let written = write_source(dir_a.path());
    let tps: Vec<TopicPartition> = written.keys().cloned().collect();
    let ends: BTreeMap<TopicPartition, i64> = written
        .iter()
        .map(|(tp, batches)| {
            let (_, last) = batches.last().expect("batches");
            (tp.clone(), RecordBatch::new(&last[..]).unwrap().next_offset())
        })
        .collect();

    let a = Agent::start(agent_config(dir_a.path(), None)).expect("start A");
    let a_addr = listener(&a);
    let b = Agent::start(agent_config(
        dir_b.path(),
        Some(("from-a", &a_addr, &[LEDGER, COMPACTED])),
    ))
    .expect("start B");
    wait_caught_up(&b, "from-a", &ends);

    // A READ_COMMITTED client (librdkafka) sees exactly the committed
    // records through either agent: both answer with the same last stable
    // offsets and aborted transactions.
    let committed = committed_records(&written);
    let from_a = consume_committed(&a_addr, &tps, committed.len());
    let from_b = consume_committed(&listener(&b), &tps, committed.len());
    assert_eq!(
        from_a.keys().cloned().collect::<BTreeSet<_>>(),
        committed,
        "A: committed records"
    );
    assert!(from_b == from_a, "B serves other committed records than A");
    b.stop().expect("B stops cleanly");
    a.stop().expect("A stops cleanly");

    let on_a = log_facts(dir_a.path(), &tps);
    let on_b = log_facts(dir_b.path(), &tps);
    for tp in &tps {
        let ((a_log, a_batches), (b_log, b_batches)) = (&on_a[tp], &on_b[tp]);
        let wanted = &written[tp];
        assert!(a_batches == wanted, "{tp}: A's log changed while serving");
        assert_eq!(b_batches.len(), wanted.len(), "{tp}: batch count");
        for ((b_off, b_bytes), (w_off, w_bytes)) in b_batches.iter().zip(wanted) {
            assert_eq!(b_off, w_off, "{tp}: same offsets, gaps included");
            assert!(
                b_bytes == w_bytes,
                "{tp}: batch at {b_off} differs from what was written"
            );
        }
        assert_eq!(b_log.log_end_offset, ends[tp], "{tp}: log end offset");
        assert_eq!(b_log, a_log, "{tp}: B's log answers as A's does");
    }

    // The checks above compare something: transactions were aborted,
    // partition 0 ends in an open one, offsets are missing in the gaps.
    let (ledger_0, _) = &on_b[&TopicPartition::new(LEDGER, 0)];
    assert!(!ledger_0.aborted.is_empty(), "aborted transactions are indexed");
    assert!(
        ledger_0.last_stable_offset < ledger_0.log_end_offset,
        "the open transaction holds the last stable offset back"
    );
    assert_eq!(ledger_0.epochs.iter().map(|e| e.0).collect::<Vec<_>>(), [4, 6]);
    let (ledger_1, _) = &on_b[&TopicPartition::new(LEDGER, 1)];
    assert_eq!(ledger_1.last_stable_offset, ledger_1.log_end_offset);
    let (compacted, compacted_batches) = &on_b[&TopicPartition::new(COMPACTED, 0)];
    assert_eq!(compacted_batches[0].0, 37, "the compacted log starts past offset 0");
    let gaps = compacted_batches
        .windows(2)
        .filter(|w| w[1].0 > common::batch_view(&w[0].1).next_offset())
        .count();
    assert!(gaps > 50, "{gaps} gaps between batches");
    assert_eq!(compacted.topic_id, Some(COMPACTED_ID), "B keeps the source's topic id");
}

// ---------------------------------------------------------------------------
// A source log start inside a batch
// ---------------------------------------------------------------------------

/// A source whose log start offset lies inside a batch — Kafka's
/// DeleteRecords puts it there, and the source then keeps and serves the
/// whole batch — is mirrored: the mirror takes that batch (as a Kafka
/// follower does) and goes on, with the source's log start. (It once
/// looped: the empty log restarted at the batch's base without taking the
/// batch, and the next answer moved it back to the log start.)
#[test]
fn a_source_log_start_inside_a_batch_is_mirrored() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tp = TopicPartition::new("trimmed", 0);
    let mut w = SourceWriter::new(0);
    for seed in 0..3 {
        let records = records(10, seed, 1_700_000_000_000);
        w.push(
            BatchBuilder {
                records,
                ..BatchBuilder::default()
            },
            None,
        );
    }
    let log_dir = LogDir::open(dir_a.path()).unwrap();
    let (mut log, _) = log_dir
        .open_partition(&tp, Some(LEDGER_ID), LogConfig::default(), 0)
        .unwrap();
    for (_, batch) in &w.batches {
        log.append(batch, 0).unwrap();
    }
    // DeleteRecords up to offset 15, inside the batch 10-19.
    log.advance_log_start(15).unwrap();
    log_dir.close(vec![(tp.clone(), log)], 0).unwrap();

    let a = Agent::start(agent_config(dir_a.path(), None)).expect("start A");
    let b = Agent::start(agent_config(
        dir_b.path(),
        Some(("from-a", &listener(&a), &["trimmed"])),
    ))
    .expect("start B");
    wait_caught_up(&b, "from-a", &BTreeMap::from([(tp.clone(), 30)]));
    b.stop().expect("B stops cleanly");
    a.stop().expect("A stops cleanly");
    let on_b = log_facts(dir_b.path(), std::slice::from_ref(&tp));
    let (b_log, b_batches) = &on_b[&tp];
    assert_eq!((b_log.log_start_offset, b_log.log_end_offset), (15, 30));
    assert!(
        *b_batches == w.batches[1..],
        "B holds the batches from the one holding offset 15 on"
    );
}
