//! Real convergence against Apache Kafka (a KRaft cluster of one
//! controller and three brokers, see `tests/common/kafka.rs`): leaders move
//! under a running producer (SIGKILL and restart, a controlled stop, a
//! preferred election), and an unclean election makes the source lose
//! committed records and write others at the same offsets. Each time the
//! mirror must end identical to what the source's leader serves, and a
//! divergence is reported exactly when the source rewrote history. And
//! `ringmirror mirror verify` passes an identical mirror and names the
//! offset of a byte flipped in a copy of our log.
//!
//! One cluster serves every test of this binary; the tests move leaders,
//! so they run one at a time.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ringmirror::agent::Agent;
use ringmirror_control::admin::{AdminAnswer, AdminRequest};
use ringmirror_storage::log::TopicPartition;

use common::kafka::{KafkaCluster, KafkaClusterSpec, driver, tool_output};

const DEADLINE: Duration = Duration::from_secs(60);

/// The tests stop brokers and move leaders: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn cluster() -> &'static KafkaCluster {
    KafkaCluster::shared(KafkaClusterSpec::default)
}

/// Each partition's (leader, replicas, in-sync replicas), from Kafka's Admin.
fn partition_info(topic: &str) -> BTreeMap<i32, (i32, Vec<i32>, Vec<i32>)> {
    let ids = |s: &str| {
        s.split(',')
            .filter(|s| !s.is_empty())
            .map(|i| i.parse().expect("id"))
            .collect()
    };
    driver("describe-topic", &cluster().bootstrap, &["--topic", topic])
        .iter()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            (f[0] == "partition").then(|| {
                (
                    f[1].parse().expect("partition"),
                    (
                        f[2].parse().expect("leader"),
                        ids(f[3]),
                        ids(f.get(4).copied().unwrap_or("")),
                    ),
                )
            })
        })
        .collect()
}

fn leader(topic: &str) -> i32 {
    partition_info(topic)[&0].0
}

/// Waits until partition 0 of `topic` has a leader that `ok` accepts.
fn wait_leader(topic: &str, what: &str, ok: impl Fn(i32) -> bool) -> i32 {
    common::wait_until(DEADLINE, what, || {
        let l = leader(topic);
        if l >= 0 && ok(l) {
            Ok(l)
        } else {
            Err(format!("leader {l}"))
        }
    })
}

fn produce(topic: &str, args: &[&str]) -> Vec<String> {
    let mut all = vec!["--topic", topic, "--partition", "0"];
    all.extend_from_slice(args);
    driver("produce", &cluster().bootstrap, &all)
}

fn mirror(data_dir: &std::path::Path, topic: &str) -> Agent {
    common::kafka::mirror_agent(data_dir, &cluster().bootstrap, &[topic], "", "", "")
}

/// Our partition's counters as `/metrics` has them: (divergences, truncations).
fn counters(agent: &Agent, topic: &str) -> (u64, u64) {
    match agent.admin(AdminRequest::Metrics).expect("metrics") {
        AdminAnswer::Metrics { metrics } => metrics
            .partitions
            .iter()
            .find(|p| p.view.topic == topic && p.view.partition == 0)
            .map_or((0, 0), |p| (p.divergences, p.truncations)),
        other => panic!("metrics answered {other:?}"),
    }
}

/// The high watermark of partition 0 as its leader answers a Fetch at 0
/// (Kafka leaves it -1 in an OFFSET_OUT_OF_RANGE answer, so none is asked past the end).
fn source_high_watermark(topic: &str) -> Result<i64, String> {
    let mut last_error = String::from("no broker");
    for broker in cluster().bootstrap.split(',') {
        let answer = common::KafkaConnection::connect(broker, Duration::from_secs(2))
            .and_then(|conn| conn.with_max_wait_ms(0).fetch(topic, 0, 0, 1));
        match answer {
            Ok(f) if f.error_code == 0 => return Ok(f.high_watermark),
            Ok(f) => last_error = format!("{broker}: error code {}", f.error_code),
            Err(e) => last_error = format!("{broker}: {e}"),
        }
    }
    Err(last_error)
}

/// Waits until our log of partition 0 ends at the source leader's high watermark.
fn wait_converged(agent: &Agent, topic: &str) -> i64 {
    common::wait_until(DEADLINE, "mirror at the source's high watermark", || {
        let hw = source_high_watermark(topic)?;
        let ours = log_end(agent, topic);
        if ours == hw {
            Ok(hw)
        } else {
            Err(format!("ours {ours}, source {hw}"))
        }
    })
}

/// A producer that keeps writing small batches until stopped (each round a
/// driver run; rounds that fail while a leader moves are retried).
struct SteadyProducer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl SteadyProducer {
    fn start(topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let topic = topic.to_owned();
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut rounds = 0;
            while !flag.load(Ordering::Acquire) {
                let args = [
                    "produce",
                    "--bootstrap",
                    &cluster().bootstrap,
                    "--topic",
                    &topic,
                    "--partition",
                    "0",
                    "--count",
                    "20",
                    "--idempotent",
                    "--codec",
                    "lz4",
                ];
                if tool_output("ringmirror.kafka.Driver", &args).status.success() {
                    rounds += 1;
                }
            }
            rounds
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops after the round in flight; how many rounds succeeded.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Release);
        self.thread.take().expect("running").join().expect("producer thread")
    }
}

impl Drop for SteadyProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Waits until our log end passes `offset` (the mirror kept going).
fn wait_past(agent: &Agent, topic: &str, offset: i64) {
    common::wait_until(DEADLINE, "mirror making progress", || {
        let ours = log_end(agent, topic);
        if ours > offset {
            Ok(())
        } else {
            Err(format!("ours {ours}"))
        }
    });
}

#[test]
fn leader_moves_under_a_producer_end_identical_with_no_false_divergence() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _logs = common::logs::capture("info");
    let topic = "moves";
    cluster().create_topic(topic, 1, &[("min.insync.replicas", "2")]);
    produce(topic, &["--count", "50"]);
    let dir = tempfile::tempdir().expect("data dir");
    let agent = mirror(dir.path(), topic);
    wait_converged(&agent, topic);
    let producer = SteadyProducer::start(topic);
    let preferred = partition_info(topic)[&0].1[0];
    let mut epoch_changes = 0;

    // 1. The leader is SIGKILLed: another takes over; the mirror goes on.
    let first = wait_leader(topic, "a leader", |_| true);
    let killed = cluster().kill_broker(first);
    wait_leader(topic, "a new leader after the kill", |l| l != first);
    epoch_changes += 1;
    wait_past(&agent, topic, log_end(&agent, topic));
    killed.restart();

    // 2. A preferred election moves it back.
    elect_preferred(topic, preferred);
    epoch_changes += 1;

    // 3. A broker down mid-stream (a controlled stop of the leader).
    let stopped = cluster().stop_broker(preferred);
    wait_leader(topic, "a new leader after the stop", |l| l != preferred);
    epoch_changes += 1;
    wait_past(&agent, topic, log_end(&agent, topic));
    stopped.restart();

    // 4. And a preferred election once more.
    elect_preferred(topic, preferred);
    epoch_changes += 1;

    assert!(producer.finish() > 0, "the producer wrote nothing");
    wait_converged(&agent, topic);
    assert_eq!(counters(&agent, topic), (0, 0), "no divergence, no truncation");
    assert!(common::describe_mirror(&agent, "dr").partition_events.is_empty());
    agent.stop().expect("stop agent");
    let compared = common::assert_mirrors_source(dir.path(), &cluster().bootstrap, &[TopicPartition::new(topic, 0)]);
    let (source, ours) = &compared[&TopicPartition::new(topic, 0)];
    // Our epoch cache is the source's batches' epochs, each from its first
    // batch. An epoch the producer wrote nothing in (its rounds start a JVM
    // each, so a short epoch may pass between two) has no entry, here as at
    // Kafka, whose cache replaces an entry at the same start offset.
    let mut source_epochs: Vec<(i32, i64)> = Vec::new();
    for (base, bytes) in &source.batches {
        let epoch = common::batch_view(bytes).partition_leader_epoch();
        if source_epochs.last().is_none_or(|&(last, _)| last != epoch) {
            source_epochs.push((epoch, *base));
        }
    }
    assert_eq!(
        ours.epochs, source_epochs,
        "our epoch cache against the source's batches"
    );
    // Data flowed after the kill and after the stop (`wait_past`): at least
    // those two leader changes carried batches.
    assert!(
        source_epochs.len() >= 3,
        "epochs with data: {source_epochs:?} ({epoch_changes} leader changes)"
    );
}

/// Runs preferred elections of partition 0 until `preferred` leads it.
fn elect_preferred(topic: &str, preferred: i32) {
    common::wait_until(DEADLINE, "the preferred leader elected", || {
        driver(
            "elect-leaders",
            &cluster().bootstrap,
            &["--topic", topic, "--partition", "0"],
        );
        match leader(topic) {
            l if l == preferred => Ok(()),
            l => Err(format!("leader {l}")),
        }
    });
}

/// Our log end of partition 0 as the agent reports it.
fn log_end(agent: &Agent, topic: &str) -> i64 {
    agent
        .status()
        .get(&("dr".to_string(), TopicPartition::new(topic, 0)))
        .map_or(-1, |s| s.log_end_offset)
}

#[test]
fn unclean_election_rewriting_committed_offsets_is_reported_and_mirrored() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _logs = common::logs::capture("info");
    let topic = "unclean";
    driver(
        "create-topic",
        &cluster().bootstrap,
        &[
            "--topic",
            topic,
            "--partitions",
            "1",
            "--replication",
            "2",
            "--config",
            "unclean.leader.election.enable=true",
            "--config",
            "min.insync.replicas=1",
        ],
    );
    let (first_leader, replicas, _) = partition_info(topic)[&0].clone();
    let follower = *replicas.iter().find(|&&r| r != first_leader).expect("a follower");
    produce(topic, &["--count", "100"]);
    let dir = tempfile::tempdir().expect("data dir");
    let agent = mirror(dir.path(), topic);
    assert_eq!(wait_converged(&agent, topic), 100);

    // The follower stops; the leader alone takes 50 more, and we mirror them.
    let follower_down = cluster().stop_broker(follower);
    common::wait_until(DEADLINE, "the follower out of the ISR", || {
        let (_, _, isr) = partition_info(topic)[&0].clone();
        if isr == [first_leader] {
            Ok(())
        } else {
            Err(format!("isr {isr:?}"))
        }
    });
    produce(topic, &["--count", "50", "--acks", "1"]);
    assert_eq!(wait_converged(&agent, topic), 150);

    // The leader dies; the stale follower (up to 100) is elected uncleanly
    // and writes 30 records at offsets 100..130.
    let leader_down = cluster().kill_broker(first_leader);
    follower_down.restart();
    common::wait_until(DEADLINE, "the stale follower elected", || {
        let _ = tool_output(
            "ringmirror.kafka.Driver",
            &[
                "elect-leaders",
                "--bootstrap",
                &cluster().bootstrap,
                "--topic",
                topic,
                "--partition",
                "0",
                "--unclean",
            ],
        );
        let l = leader(topic);
        if l == follower {
            Ok(())
        } else {
            Err(format!("leader {l}"))
        }
    });
    produce(topic, &["--count", "30", "--acks", "1"]);

    common::wait_until(DEADLINE, "the divergence reported", || match counters(&agent, topic) {
        (1, _) => Ok(()),
        other => Err(format!("(divergences, truncations) {other:?}")),
    });
    assert_eq!(wait_converged(&agent, topic), 130);
    let events = common::describe_mirror(&agent, "dr").partition_events;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            events[0].topic.as_str(),
            events[0].first_differing_offset,
            events[0].truncated_to
        ),
        (topic, 100, 100)
    );
    assert!(events[0].bytes_lost > 0);
    assert!(
        !common::logs::lines_with(&["WARN", "rewrote history", "unclean-0"]).is_empty(),
        "a WARN names the divergence"
    );
    agent.stop().expect("stop agent");
    // Identical to the source's new history: nothing it still has is lost.
    common::assert_mirrors_source(dir.path(), &cluster().bootstrap, &[TopicPartition::new(topic, 0)]);
    leader_down.restart();
}

/// `ringmirror mirror verify dr` against the agent's admin API: (exit status, stdout).
fn verify_cli(agent: &Agent) -> (i32, String) {
    let admin = format!("http://{}", agent.admin_addr().expect("admin API"));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ringmirror"))
        .args(["mirror", "--admin", &admin, "verify", "dr", "--rate-mib-per-s", "64"])
        .output()
        .expect("run ringmirror mirror verify");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let code = output.status.code().expect("exited");
    (code, format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)))
}

/// An agent with an admin API and segments of 1 MiB.
fn verifying_agent(data_dir: &std::path::Path, topic: &str) -> Agent {
    let log = "segment_bytes = 1048576\n[admin]\naddress = \"127.0.0.1:0\"";
    common::kafka::mirror_agent(data_dir, &cluster().bootstrap, &[topic], "", log, "")
}

#[test]
fn mirror_verify_passes_an_identical_mirror_and_names_a_planted_difference() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let topic = "verified";
    cluster().create_topic(topic, 1, &[]);
    // Records of 200 KiB: one per batch, so the tail that a divergence
    // check compares on start (at most 1 MiB) leaves the first segment out.
    produce(topic, &["--count", "12", "--value-bytes", "204800"]);
    let dir = tempfile::tempdir().expect("data dir");
    let agent = verifying_agent(dir.path(), topic);
    wait_converged(&agent, topic);
    let (code, out) = verify_cli(&agent);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verified-0: identical (12 batches"), "{out}");
    agent.stop().expect("stop agent");

    // A copy of our data with one byte flipped inside a record of the
    // second batch of the first (closed) segment.
    let copy = tempfile::tempdir().expect("copy dir");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dir.path().display()))
        .arg(copy.path())
        .status()
        .expect("cp");
    assert!(status.success());
    let partition_dir = copy.path().join(format!("{topic}-0"));
    let segments = common::segment_files(&partition_dir);
    assert!(segments.len() >= 2, "the first segment is closed: {segments:?}");
    let first_segment = &segments[0];
    let mut bytes = std::fs::read(first_segment).expect("read segment");
    let batches = common::split_batches(&bytes);
    assert!(batches.len() >= 2, "the first segment holds {} batches", batches.len());
    let (planted_at, _) = batches[1];
    let position = batches[0].1.len() + 61 + 100;
    bytes[position] ^= 0x01;
    std::fs::write(first_segment, &bytes).expect("write segment");

    let agent = verifying_agent(copy.path(), topic);
    wait_converged(&agent, topic);
    let (code, out) = verify_cli(&agent);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("verified-0: differs at offset {planted_at}")),
        "{out}"
    );
    agent.stop().expect("stop agent");
}
