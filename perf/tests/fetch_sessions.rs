//! The agent's side of incremental fetch sessions (KIP-227) against the
//! synthetic source, which keeps sessions as a Kafka broker does: the agent
//! mirrors every partition byte for byte through incremental requests, and
//! once nothing changes its requests are a constant few bytes, not a line
//! per partition.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_perf::dataset::{Dataset, DatasetSpec};
use ringmirror_perf::log_files::{check_logs_hold, log_files};
use ringmirror_perf::synthetic_source::{SourceOptions, SyntheticSource};

const TOPIC: &str = "sessions";
const PARTITIONS: usize = 64;

/// Whether `done` came true within a minute. The test asserts only after
/// stopping the agent and the source: a panic with the agent running
/// would leave its threads to keep the test from ending.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// The directory of `partition` somewhere under `data_dir`.
fn partition_dir(data_dir: &Path, partition: usize) -> PathBuf {
    let name = format!("{TOPIC}-{partition}");
    let mut stack = vec![data_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == name.as_str()) {
                    return path;
                }
                stack.push(path);
            }
        }
    }
    panic!("no directory {name} under {}", data_dir.display());
}

#[test]
fn incremental_requests_mirror_every_partition_and_stay_constant_when_idle() {
    let dataset = Arc::new(Dataset::build(DatasetSpec {
        topic: TOPIC.into(),
        partitions: PARTITIONS as i32,
        bytes_per_partition: 64 * 1024,
        record_bytes: 500,
        records_per_batch: 8,
        seed: 7,
    }));
    let source = SyntheticSource::start(
        Arc::clone(&dataset),
        SourceOptions {
            fetch_sessions: true,
            port: 0,
            ..SourceOptions::default()
        },
    )
    .expect("start the source");
    let root = tempfile::tempdir().unwrap();
    let data_dir = root.path().join("data");
    let config = AgentConfig::parse(&format!(
        "data_dir = {data_dir:?}\nshards = 1\n[[mirror]]\nname = \"sessions\"\nbootstrap_servers = [{:?}]\n\
         topics = [{TOPIC:?}]\nfetch_max_wait_ms = 50\nfetch_min_bytes = 1\nfetch_partition_max_bytes = 8192\n",
        source.addr().to_string(),
    ))
    .expect("config");
    let agent = Agent::start(config).expect("start the agent");
    // 8 KiB per partition per request: each partition takes several
    // incremental requests, each naming only the partitions that moved.
    let caught_up = wait_for(|| source.caught_up().is_some());
    let before = source.stats();
    let idled = caught_up && wait_for(|| source.stats().fetch_requests >= before.fetch_requests + 10);
    let after = source.stats();
    agent.stop().expect("stop the agent");
    source.stop();

    assert!(caught_up, "the agent never fetched every partition to its end");
    assert!(idled, "no idle fetches");
    let idle_requests = after.fetch_requests - before.fetch_requests;
    let idle_bytes_each = (after.fetch_request_bytes - before.fetch_request_bytes) / idle_requests;
    // A full request names all 64 partitions (some 30 bytes each); an idle
    // incremental one names none.
    assert!(
        after.fetch_request_bytes_max > PARTITIONS as u64 * 20,
        "the first request names every partition ({} bytes at most)",
        after.fetch_request_bytes_max
    );
    assert!(
        idle_bytes_each < 100,
        "idle requests of {idle_bytes_each} bytes: unchanged partitions were sent again"
    );
    for (p, data) in dataset.partitions.iter().enumerate() {
        let logs = log_files(&partition_dir(&data_dir, p)).unwrap();
        check_logs_hold(&logs, &data.bytes).unwrap_or_else(|e| panic!("partition {p}: {e:#}"));
    }
}
