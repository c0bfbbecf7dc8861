//! The agent mirroring librdkafka's mock cluster under faults, with data
//! from real librdkafka producers. Every check compares our logs with a raw
//! Fetch of the source (tests/common `assert_mirrors_source`): the same log
//! start offset, and from there the same batches, byte for byte, at the same
//! offsets, with no gap and no duplicate.
//!
//! - injected retriable errors mid-stream: Fetch (partition and top-level
//!   errors, dropped connections), OffsetForLeaderEpoch, Metadata (the mock
//!   answers Metadata request errors as topic errors) and ListOffsets;
//! - every compression codec, keys and headers, idempotent, plain and
//!   transactional producers (committed and aborted), several topics;
//! - retention at the source (the mock keeps ~5 MiB per partition): an
//!   agent started after the source deleted its head starts at the source's
//!   log start, and follows it while retention moves it during mirroring;
//! - leader epoch bumps while producing, then a restart.

mod common;

#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::Producer;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_dataplane::fetch::{ShardEvent, StateEvent};
use ringmirror_storage::batch::{Compression, decode_records};
use ringmirror_storage::log::TopicPartition;

use common::{MAX_DECOMPRESSED_BYTES, assert_mirrors_source, batch_view, source_high_watermark};

const MIRROR_DEADLINE: Duration = Duration::from_secs(40);
const SOURCE_TIMEOUT: Duration = Duration::from_secs(20);

/// The agent's configuration; `ingest` is "mmap" (received straight into
/// the segment) or "aligned_copy" (a page-aligned buffer, then one copy).
fn config(data_dir: &Path, bootstrap: &str, topics: &[&str], ingest: &str, segment_bytes: u64) -> AgentConfig {
    let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [log]
        segment_bytes = {segment_bytes}
        [[mirror]]
        name = "dr"
        bootstrap_servers = [{bootstrap:?}]
        topics = [{topics}]
        fetch_max_wait_ms = 100
        fetch_partition_max_bytes = 32768
        metadata_refresh_interval_ms = 1000
        ingest = {ingest:?}
        "#
    ))
    .expect("config")
}

type Events = Arc<Mutex<Vec<ShardEvent>>>;

/// The agent's log, captured per test (shown when a test fails); `RUST_LOG` overrides.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "warn,ringmirror=info,ringmirror_dataplane=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .with_ansi(false)
        .try_init();
}

/// Starts an agent (receiving into the mapped segment; small segments, so
/// they roll often) that records every shard event.
fn start_agent(data_dir: &Path, bootstrap: &str, topics: &[&str]) -> (Agent, Events) {
    start_agent_with(data_dir, bootstrap, topics, "aligned_copy", 65536)
}

fn start_agent_with(
    data_dir: &Path,
    bootstrap: &str,
    topics: &[&str],
    ingest: &str,
    segment_bytes: u64,
) -> (Agent, Events) {
    init_tracing();
    let events: Events = Arc::default();
    let sink = Arc::clone(&events);
    let agent = Agent::start_observed(
        config(data_dir, bootstrap, topics, ingest, segment_bytes),
        Box::new(move |e| sink.lock().unwrap().push(e.clone())),
    )
    .expect("start agent");
    (agent, events)
}

fn partitions(topics: &[(&str, i32)]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|&(t, n)| (0..n).map(move |p| TopicPartition::new(t, p)))
        .collect()
}

fn produce(bootstrap: &str, topic: &str, partitions: i32, count: u64, codec: &str, seed: u64) {
    mock_source::produce(bootstrap, topic, partitions, count, codec, seed).unwrap_or_else(|e| panic!("produce: {e}"));
}

/// Waits until the agent's log end of every partition reaches the source's
/// current high watermark (data must have stopped coming), failing early
/// when a partition stopped appending.
fn wait_mirrored(agent: &Agent, bootstrap: &str, tps: &[TopicPartition]) {
    wait_mirrored_within(agent, bootstrap, tps, MIRROR_DEADLINE);
}

fn wait_mirrored_within(agent: &Agent, bootstrap: &str, tps: &[TopicPartition], deadline: Duration) {
    let targets: BTreeMap<&TopicPartition, i64> = tps
        .iter()
        .map(|tp| {
            (
                tp,
                source_high_watermark(bootstrap, &tp.topic, tp.partition, SOURCE_TIMEOUT),
            )
        })
        .collect();
    let started = Instant::now();
    loop {
        let status = agent.status();
        let mut behind = Vec::new();
        for (tp, &end) in &targets {
            let s = status.get(&("dr".to_string(), (*tp).clone()));
            if let Some(reason) = s.and_then(|s| s.stopped.as_ref()) {
                panic!("{tp} stopped appending: {reason:?}");
            }
            if s.is_none_or(|s| s.log_end_offset < end) {
                behind.push(format!("{tp} (want {end}, have {s:?})"));
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < deadline,
            "not mirrored within {deadline:?}: {behind:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn truncations(events: &Events) -> Vec<(TopicPartition, i64, &'static str)> {
    events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ShardEvent::State(StateEvent::Truncated {
                tp, to_offset, reason, ..
            }) => Some((tp.clone(), *to_offset, *reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn injected_retriable_errors_mid_stream_converge_to_an_identical_log() {
    use RDKafkaRespErr::*;
    let cluster = MockCluster::new(3).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topics = [("faults", 4), ("faults-b", 2)];
    for (t, n) in topics {
        cluster.create_topic(t, n, 1).expect("create topic");
    }
    let tps = partitions(&topics);
    produce(&bootstrap, "faults", 4, 1500, "lz4", 0);
    produce(&bootstrap, "faults-b", 2, 600, "snappy", 100_000);
    let dir = tempfile::tempdir().unwrap();
    let (agent, _events) = start_agent(dir.path(), &bootstrap, &["faults", "faults-b"]);

    // Fetch: every retriable partition error (the mock sets it as the
    // response's top-level error and on every partition), a dropped
    // connection, and OffsetForLeaderEpoch errors for the next placements.
    cluster.request_errors(
        RDKafkaApiKey::Fetch,
        &[
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR__TRANSPORT,
            RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH,
            RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
            RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR,
            RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION,
            RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
            RD_KAFKA_RESP_ERR__TRANSPORT,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ],
    );
    cluster.request_errors(
        RDKafkaApiKey::OffsetForLeaderEpoch,
        &[
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
            RD_KAFKA_RESP_ERR__TRANSPORT,
        ],
    );
    produce(&bootstrap, "faults", 4, 1000, "zstd", 10_000);
    std::thread::sleep(Duration::from_millis(300));

    // Metadata: the mock ignores request errors for Metadata and answers
    // topic errors instead. While "faults" has one, its partitions must be
    // placed again (their leaders move), so the agent has to wait it out.
    // (Producing to "faults" meanwhile would wait too: do it on a thread.)
    cluster
        .topic_error("faults", RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
        .unwrap();
    for p in 0..4 {
        cluster.partition_leader("faults", p, Some(1 + (p + 1) % 3)).unwrap();
    }
    let b = bootstrap.clone();
    let producer = std::thread::spawn(move || produce(&b, "faults", 4, 800, "gzip", 20_000));
    produce(&bootstrap, "faults-b", 2, 400, "none", 110_000);
    std::thread::sleep(Duration::from_millis(700));
    cluster.topic_error("faults", RD_KAFKA_RESP_ERR_NO_ERROR).unwrap();
    producer.join().expect("producer thread");

    // The leader of a partition unreachable for a while (Metadata lists the
    // broker no more), then a new leader, and more errors for the requests
    // that follow. (Not a leaderless partition: with no leader, the mock
    // cluster of librdkafka 2.12.1 crashes answering Fetch v12+ with
    // NOT_LEADER_OR_FOLLOWER — a NULL leader in
    // rd_kafka_mock_Fetch_reply_tags_partition_write.)
    cluster.partition_leader("faults-b", 0, Some(3)).unwrap();
    cluster.partition_leader("faults-b", 1, Some(1)).unwrap();
    produce(&bootstrap, "faults-b", 2, 200, "zstd", 115_000);
    cluster.broker_down(3).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    cluster.partition_leader("faults-b", 0, Some(2)).unwrap();
    cluster.broker_up(3).unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Fetch,
        &[
            RD_KAFKA_RESP_ERR__TRANSPORT,
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        ],
    );
    produce(&bootstrap, "faults-b", 2, 600, "lz4", 120_000);
    produce(&bootstrap, "faults", 4, 500, "snappy", 30_000);
    std::thread::sleep(Duration::from_millis(300));

    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    cluster.clear_request_errors(RDKafkaApiKey::Fetch);
    assert_mirrors_source(dir.path(), &bootstrap, &tps);
}

/// Decodes every record of our batches and checks each is exactly the
/// record `mock_source` produced under its number (header "n"); returns the
/// numbers seen.
fn produced_numbers(batches: &[(i64, Vec<u8>)]) -> Vec<u64> {
    let mut numbers = Vec::new();
    for (base, bytes) in batches {
        let batch = batch_view(bytes);
        for r in decode_records(&batch, MAX_DECOMPRESSED_BYTES).unwrap_or_else(|e| panic!("decode {base}: {e}")) {
            let n_header = r.headers.iter().find(|h| h.key == b"n").expect("header n");
            let n = u64::from_be_bytes(n_header.value.as_deref().unwrap().try_into().unwrap());
            assert_eq!(
                r.value.as_deref(),
                Some(&mock_source::record_value(n)[..]),
                "value of {n}"
            );
            assert_eq!(r.key, mock_source::record_key(n), "key of {n}");
            let headers: Vec<(String, Option<Vec<u8>>)> = r
                .headers
                .iter()
                .map(|h| (String::from_utf8(h.key.clone()).unwrap(), h.value.clone()))
                .collect();
            assert_eq!(headers, mock_source::record_headers(n), "headers of {n}");
            numbers.push(n);
        }
    }
    numbers
}

#[test]
fn every_codec_keys_headers_idempotent_plain_and_transactional_batches_are_mirrored() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    let codec_topics: Vec<String> = codecs.iter().map(|c| format!("codec-{c}")).collect();
    let mut topics: Vec<(&str, i32)> = codec_topics.iter().map(|t| (t.as_str(), 2)).collect();
    topics.push(("plain", 2));
    topics.push(("txn", 3));
    for &(t, n) in &topics {
        cluster.create_topic(t, n, 1).expect("create topic");
    }
    let tps = partitions(&topics);
    let names: Vec<&str> = topics.iter().map(|&(t, _)| t).collect();
    let plain = [("enable.idempotence", "false"), ("acks", "1")];

    // Half before the agent starts, half while it runs.
    for (codec, topic) in codecs.iter().zip(&codec_topics) {
        produce(&bootstrap, topic, 2, 300, codec, 0);
    }
    mock_source::produce_with(&bootstrap, "plain", 2, 300, "lz4", 0, &plain).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (agent, _events) = start_agent(dir.path(), &bootstrap, &names);
    for (codec, topic) in codecs.iter().zip(&codec_topics) {
        produce(&bootstrap, topic, 2, 300, codec, 300);
    }
    mock_source::produce_with(&bootstrap, "plain", 2, 300, "gzip", 300, &plain).unwrap();

    // Transactions, committed and aborted, across "txn" and "codec-zstd"
    // (the mock writes no COMMIT/ABORT markers: offsets run on).
    let txn = mock_source::producer(
        &bootstrap,
        "zstd",
        &[
            ("transactional.id", "ringmirror-faults"),
            ("transaction.timeout.ms", "60000"),
        ],
    )
    .unwrap();
    let timeout = Duration::from_secs(30);
    txn.init_transactions(timeout).expect("init transactions");
    let mut txn_numbers = BTreeSet::new();
    for round in 0..6u64 {
        txn.begin_transaction().expect("begin");
        for n in 1_000_000 + round * 100..1_000_000 + round * 100 + 60 {
            mock_source::send_record(&txn, "txn", 3, n).unwrap();
            txn_numbers.insert(n);
        }
        mock_source::send_record(&txn, "codec-zstd", 2, 2_000_000 + round).unwrap();
        mock_source::flush(&txn).unwrap();
        if round % 3 == 1 {
            txn.abort_transaction(timeout).expect("abort");
        } else {
            txn.commit_transaction(timeout).expect("commit");
        }
    }
    drop(txn);

    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    let checked = assert_mirrors_source(dir.path(), &bootstrap, &tps);

    // The test produced what it says: every record intact, each codec, and
    // producer ids for idempotent and transactional batches only.
    let mut numbers: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (tp, (_, ours)) in &checked {
        numbers
            .entry(tp.topic.as_str())
            .or_default()
            .extend(produced_numbers(&ours.batches));
        for (base, bytes) in &ours.batches {
            let batch = batch_view(bytes);
            let at = format!("{tp} batch {base}");
            assert!(!batch.is_control(), "{at}: the mock writes no control batches");
            match tp.topic.as_str() {
                "plain" => assert_eq!(batch.producer_id(), -1, "{at}: not idempotent"),
                "txn" => {
                    assert!(
                        batch.is_transactional() && batch.producer_id() >= 0,
                        "{at}: transactional"
                    );
                    assert_eq!(batch.compression(), Compression::Zstd, "{at}");
                }
                topic => {
                    assert!(
                        batch.producer_id() >= 0 && batch.base_sequence() >= 0,
                        "{at}: idempotent"
                    );
                    let codec = topic.strip_prefix("codec-").unwrap();
                    if batch.is_transactional() {
                        assert_eq!(codec, "zstd", "{at}: only codec-zstd takes part in transactions");
                    } else {
                        assert_eq!(batch.compression().name(), codec, "{at}: compression");
                    }
                }
            }
        }
    }
    for topic in &codec_topics {
        let mut got = numbers[topic.as_str()].clone();
        got.retain(|&n| n < 1_000_000);
        assert_eq!(got.len(), 600, "{topic}: every record once");
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<_>>(),
            (0..600).collect(),
            "{topic}"
        );
    }
    assert_eq!(numbers["plain"].len(), 600);
    let txn_got: BTreeSet<u64> = numbers["txn"].iter().copied().collect();
    assert_eq!(txn_got, txn_numbers, "txn: committed and aborted records alike");
    assert_eq!(numbers["txn"].len(), txn_numbers.len(), "txn: each record once");
}

/// Produces ~`mib` MiB of uncompressed records per partition, in batches
/// of ~20 KiB, numbered from `seed`.
fn produce_bulk(bootstrap: &str, topic: &str, partitions: i32, mib: u64, seed: u64) {
    // record_value averages ~140 bytes with its overhead.
    let count = mib * 1024 * 1024 / 140 * partitions as u64;
    mock_source::produce_with(
        bootstrap,
        topic,
        partitions,
        count,
        "none",
        seed,
        &[("batch.num.messages", "150"), ("linger.ms", "5")],
    )
    .unwrap_or_else(|e| panic!("produce: {e}"));
}

#[test]
fn a_late_agent_starts_at_the_source_log_start_and_follows_it_as_retention_moves_it() {
    use RDKafkaRespErr::*;
    let cluster = MockCluster::new(2).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topic = "retained";
    cluster.create_topic(topic, 2, 1).expect("create topic");
    let tps = partitions(&[(topic, 2)]);

    // Well over the mock's ~5 MiB per partition: the source deletes its head.
    produce_bulk(&bootstrap, topic, 2, 7, 0);
    let starts_before: Vec<i64> = tps
        .iter()
        .map(|tp| common::source_offsets(&bootstrap, topic, tp.partition, SOURCE_TIMEOUT).0)
        .collect();
    assert!(
        starts_before.iter().all(|&s| s > 0),
        "precondition: retention moved the source's log start ({starts_before:?})"
    );

    // The agent starts late: its fetches from 0 are out of range, and the
    // ListOffsets that follow meet errors first.
    cluster.request_errors(
        RDKafkaApiKey::ListOffsets,
        &[
            RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            RD_KAFKA_RESP_ERR__TRANSPORT,
            RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH,
        ],
    );
    // (Segments of 1 MiB: retention deletes whole ones, and far fewer rolls.)
    let dir = tempfile::tempdir().unwrap();
    let (agent, events) = start_agent_with(dir.path(), &bootstrap, &[topic], "mmap", 1 << 20);
    wait_mirrored(&agent, &bootstrap, &tps);
    let truncated = truncations(&events);
    for (tp, before) in tps.iter().zip(&starts_before) {
        assert!(
            truncated
                .iter()
                .any(|(t, to, reason)| t == tp && to >= before && reason.contains("log start")),
            "{tp}: the first fetch from 0 was out of range and the log restarted at the source's start: {truncated:?}"
        );
    }

    // More while it mirrors: the source's log start moves on during
    // mirroring, and ours must follow it (from the log start offset in
    // Fetch responses; the agent keeps up, so no fetch is out of range
    // again and no further truncation happens).
    let starts_mirroring: Vec<i64> = tps
        .iter()
        .map(|tp| common::source_offsets(&bootstrap, topic, tp.partition, SOURCE_TIMEOUT).0)
        .collect();
    for chunk in 0..3 {
        produce_bulk(&bootstrap, topic, 2, 1, 10_000_000 + chunk * 1_000_000);
    }
    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    let checked = assert_mirrors_source(dir.path(), &bootstrap, &tps);
    for (i, (tp, (source, ours))) in checked.iter().enumerate() {
        assert!(
            source.log_start_offset > starts_mirroring[i],
            "precondition: {tp}'s log start moved during mirroring"
        );
        assert!(
            ours.segment_bases[0] <= ours.log_start_offset,
            "{tp}: {:?}",
            ours.segment_bases
        );
    }
    assert_eq!(
        truncations(&events).len(),
        tps.len(),
        "one restart at the source's log start per partition, then following it: {:?}",
        truncations(&events)
    );

    // Stopped longer than retention keeps data: the source's log start
    // passes our log end; the restarted agent (copying from an aligned
    // buffer this time) is out of range and starts over at the source's start.
    let ends: Vec<i64> = checked.values().map(|(_, ours)| ours.log_end_offset).collect();
    produce_bulk(&bootstrap, topic, 2, 6, 20_000_000);
    let (agent, events) = start_agent_with(dir.path(), &bootstrap, &[topic], "aligned_copy", 1 << 20);
    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    let checked = assert_mirrors_source(dir.path(), &bootstrap, &tps);
    let truncated = truncations(&events);
    for ((tp, (source, _)), end) in checked.iter().zip(ends) {
        assert!(
            source.log_start_offset > end,
            "precondition: {tp}'s source start passed our end"
        );
        assert!(
            truncated
                .iter()
                .any(|(t, to, reason)| t == tp && *to > end && reason.contains("log start")),
            "{tp}: restarted at the source's log start: {truncated:?}"
        );
    }
}

#[test]
fn leader_epoch_bumps_while_producing_then_a_restart_keep_the_log_identical() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topics = [("epochs", 3)];
    cluster.create_topic("epochs", 3, 1).expect("create topic");
    let tps = partitions(&topics);
    produce(&bootstrap, "epochs", 3, 600, "lz4", 0);
    let dir = tempfile::tempdir().unwrap();
    let (agent, events) = start_agent(dir.path(), &bootstrap, &["epochs"]);

    // Leaders move round after round while a producer thread keeps
    // producing; after each move some records are sure to land in the new
    // epoch before the next.
    let moves = |rounds: std::ops::Range<i32>, seed: u64| {
        let b = bootstrap.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_producing = Arc::clone(&stop);
        let producer = std::thread::spawn(move || {
            let mut i = 0;
            while !stop_producing.load(Ordering::Relaxed) {
                produce(
                    &b,
                    "epochs",
                    3,
                    150,
                    ["zstd", "gzip", "none"][i % 3],
                    seed + i as u64 * 1000,
                );
                i += 1;
            }
        });
        for round in rounds {
            for p in 0..3 {
                cluster
                    .partition_leader("epochs", p, Some(1 + (round + p) % 3))
                    .unwrap();
            }
            produce(&bootstrap, "epochs", 3, 60, "lz4", 1_000_000 + round as u64 * 1000);
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::Relaxed);
        producer.join().expect("producer thread");
    };
    moves(0..6, 10_000);
    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    let checked = assert_mirrors_source(dir.path(), &bootstrap, &tps);
    for (tp, (_, ours)) in &checked {
        let epochs = common::assert_epoch_cache_matches_batches(tp, ours);
        assert!(
            epochs >= 6,
            "precondition: {tp}'s batches span several leader epochs ({epochs})"
        );
    }
    assert_eq!(
        truncations(&events),
        vec![],
        "nothing to truncate when following a single source"
    );

    // Restart: the agent checks where its latest epoch ends at the source,
    // finds nothing to truncate, and continues through more epoch bumps
    // (copying from an aligned buffer this time).
    let (agent, events) = start_agent_with(dir.path(), &bootstrap, &["epochs"], "aligned_copy", 65536);
    moves(6..9, 20_000);
    wait_mirrored(&agent, &bootstrap, &tps);
    agent.stop().expect("clean stop");
    let checked = assert_mirrors_source(dir.path(), &bootstrap, &tps);
    for (tp, (_, ours)) in &checked {
        common::assert_epoch_cache_matches_batches(tp, ours);
    }
    assert_eq!(truncations(&events), vec![], "the restart resumed without truncating");
}

#[test]
fn a_topic_with_a_retriable_metadata_error_at_start_up_is_mirrored_once_it_clears() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("starting", 2, 1).expect("create topic");
    produce(&bootstrap, "starting", 2, 400, "lz4", 0);
    let tps = partitions(&[("starting", 2)]);
    // LEADER_NOT_AVAILABLE is what a broker answers for a topic still being
    // created or whose leader is being elected: retriable.
    cluster
        .topic_error("starting", RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (agent, _events) = start_agent(dir.path(), &bootstrap, &["starting"]);
    std::thread::sleep(Duration::from_millis(500));
    cluster
        .topic_error("starting", RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
        .unwrap();
    // Discovery looks again every metadata refresh interval and places the
    // topic once the error clears.
    wait_mirrored_within(&agent, &bootstrap, &tps, Duration::from_secs(15));
    agent.stop().expect("clean stop");
    assert_mirrors_source(dir.path(), &bootstrap, &tps);
}
