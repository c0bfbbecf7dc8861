//! Lengths from the network are checked where they enter. A proxy in front
//! of librdkafka's mock cluster rewrites the real Metadata answers so that
//! the source's cluster id is 40 000 bytes (a flexible Metadata version
//! carries it in a compact string; the MIRROR_PID_RESET record we write at
//! failover holds at most 32767). The agent refuses those answers with an
//! error the mirror shows, places nothing from them, and — one shard for
//! both mirrors — the other mirror goes on, as does the same mirror once the
//! source answers with a proper id again; a failover of both still writes
//! its MIRROR_PID_RESET (with the id recorded) and the agent stops cleanly.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kafka_protocol::protocol::StrBytes;
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_storage::batch::{ControlRecord, ControlType, RecordBatch};
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};

use common::rewriting_proxy::{self, API_METADATA};
use common::{describe_mirror, wait_until};

const DEADLINE: Duration = Duration::from_secs(60);
const LONG_ID_BYTES: usize = 40_000;
const PARTITIONS: i32 = 2;
/// Records per partition produced before, and again during, the long ids.
const RECORDS: i64 = 10;

fn config(data_dir: &std::path::Path, long_source: &str, plain_source: &str) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 1
        [[mirror]]
        name = "long"
        bootstrap_servers = [{long_source:?}]
        topics = ["a"]
        fetch_max_wait_ms = 50
        metadata_refresh_interval_ms = 300
        [[mirror]]
        name = "plain"
        bootstrap_servers = [{plain_source:?}]
        topics = ["b"]
        fetch_max_wait_ms = 50
        metadata_refresh_interval_ms = 300
        "#
    ))
    .expect("config")
}

fn produce(bootstrap: &str, topic: &str, seed: u64) {
    mock_source::produce(
        bootstrap,
        topic,
        PARTITIONS,
        RECORDS as u64 * PARTITIONS as u64,
        "none",
        seed,
    )
    .expect("produce");
}

/// Waits until `mirror`'s partitions of `topic` are all in `state` with
/// log end `end`.
fn wait_partitions(agent: &Agent, mirror: &str, topic: &str, state: &str, end: i64) {
    wait_until(DEADLINE, &format!("{mirror}: {topic} {state} at {end}"), || {
        let d = describe_mirror(agent, mirror);
        let status = agent.status();
        let ok = (0..PARTITIONS).all(|p| {
            d.partitions
                .iter()
                .any(|v| v.topic == topic && v.partition == p && v.state == state)
                && status
                    .get(&(mirror.to_string(), TopicPartition::new(topic, p)))
                    .is_some_and(|s| s.log_end_offset == end)
        });
        if ok {
            Ok(())
        } else {
            Err(format!("{:?} {:?}", d.partitions, status))
        }
    });
}

fn wait_refused(agent: &Agent) -> String {
    wait_until(DEADLINE, "the long cluster id refused", || {
        let error = describe_mirror(agent, "long").sync_error.unwrap_or_default();
        if error.contains("source cluster id is 40000 bytes, longer than Kafka allows") {
            Ok(error)
        } else {
            Err(format!("sync error: {error:?}"))
        }
    })
}

#[test]
fn a_source_cluster_id_longer_than_kafka_allows_is_refused_and_nothing_else_stops() {
    let source = MockCluster::new(1).expect("mock cluster");
    let other = MockCluster::new(1).expect("mock cluster");
    source.create_topic("a", PARTITIONS, 1).expect("create a");
    other.create_topic("b", PARTITIONS, 1).expect("create b");
    produce(&source.bootstrap_servers(), "a", 0);
    produce(&other.bootstrap_servers(), "b", 0);
    let long_ids = Arc::new(AtomicBool::new(true));
    let rewrite_ids = Arc::clone(&long_ids);
    let proxy = rewriting_proxy::start(
        source.bootstrap_servers().parse().unwrap(),
        Arc::new(move |key, version, _, body| {
            if key == API_METADATA && rewrite_ids.load(Ordering::SeqCst) {
                *body = rewriting_proxy::edit_metadata(body, version, |m| {
                    m.cluster_id = Some(StrBytes::from_string("c".repeat(LONG_ID_BYTES)));
                });
            }
        }),
    );
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &proxy.to_string(), &other.bootstrap_servers())).expect("agent");

    // Refused and shown; nothing of that source is placed or recorded.
    let error = wait_refused(&agent);
    assert!(
        error.len() < 1000,
        "the message does not carry the id: {} bytes",
        error.len()
    );
    wait_partitions(&agent, "plain", "b", "MIRRORING", RECORDS);
    let long = describe_mirror(&agent, "long");
    assert!(long.partitions.is_empty(), "{:?}", long.partitions);
    assert_eq!(long.source_cluster_id, None);
    assert!(agent.status().keys().all(|(mirror, _)| mirror != "long"));

    // The source answers with its own id again: mirrored.
    long_ids.store(false, Ordering::SeqCst);
    wait_partitions(&agent, "long", "a", "MIRRORING", RECORDS);
    let recorded = describe_mirror(&agent, "long").source_cluster_id.expect("recorded");
    assert!(recorded.len() < 64, "{recorded}");

    // Long ids again: refused, and what is placed goes on fetching.
    long_ids.store(true, Ordering::SeqCst);
    wait_refused(&agent);
    produce(&source.bootstrap_servers(), "a", 100);
    produce(&other.bootstrap_servers(), "b", 100);
    wait_partitions(&agent, "long", "a", "MIRRORING", 2 * RECORDS);
    wait_partitions(&agent, "plain", "b", "MIRRORING", 2 * RECORDS);
    assert_eq!(
        describe_mirror(&agent, "long").source_cluster_id.as_deref(),
        Some(recorded.as_str())
    );

    // Failover of both, on the one shard: each ends with its reset.
    agent.end_mirroring("long", "a").expect("stop long");
    agent.end_mirroring("plain", "b").expect("stop plain");
    wait_partitions(&agent, "long", "a", "STOPPED", 2 * RECORDS + 1);
    wait_partitions(&agent, "plain", "b", "STOPPED", 2 * RECORDS + 1);
    agent.stop().expect("the shard ended cleanly");

    let log_dir = LogDir::open(dir.path()).unwrap();
    for p in 0..PARTITIONS {
        let tp = TopicPartition::new("a", p);
        let (log, _) = log_dir.open_partition(&tp, None, LogConfig::default(), 0).unwrap();
        let batches = common::stored_batches(&log);
        let (offset, last) = batches.last().expect("batches");
        assert_eq!(*offset, 2 * RECORDS, "{tp}");
        let reset = ControlRecord::decode(&RecordBatch::new(&last[..]).unwrap()).unwrap();
        assert_eq!(reset.control_type, ControlType::MirrorPidReset, "{tp}");
        assert_eq!(reset.source_cluster_id.as_deref(), Some(recorded.as_str()), "{tp}");
    }
}
