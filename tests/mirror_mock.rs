//! The agent mirroring librdkafka's mock cluster (3 brokers), with data
//! from a real librdkafka producer: every partition's log must be exactly
//! the batches the source serves, at the same offsets — checked against a
//! raw Fetch of the source, not against our own writer — after a clean
//! stop, after a restart that resumes, and under faults (leader moves,
//! a broker down and back, injected errors).

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};

const MIRROR_DEADLINE: Duration = Duration::from_secs(60);

type Batches = Vec<(i64, Vec<u8>)>;

fn produce(bootstrap: &str, topic: &str, partitions: i32, count: u64, codec: &str, seed: u64) {
    mock_source::produce(bootstrap, topic, partitions, count, codec, seed).unwrap_or_else(|e| panic!("produce: {e}"));
}

fn config(data_dir: &Path, bootstrap: &str, topics: &[&str]) -> AgentConfig {
    config_with(data_dir, bootstrap, topics, "aligned_copy")
}

fn config_with(data_dir: &Path, bootstrap: &str, topics: &[&str], ingest: &str) -> AgentConfig {
    let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        offset_checkpoint_interval_ms = 100
        [log]
        segment_bytes = 65536
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

/// The source's batches of one partition, fetched raw from its leader.
fn source_batches(bootstrap: &str, tp: &TopicPartition) -> (Batches, i64) {
    let mut last_error = None;
    for broker in bootstrap.split(',') {
        let Ok(mut conn) = common::KafkaConnection::connect(broker, Duration::from_secs(5)) else {
            continue;
        };
        match conn.fetch_all(&tp.topic, tp.partition, 0, 10_000) {
            Ok((responses, high_watermark)) => return (responses.into_iter().flatten().collect(), high_watermark),
            Err(e) => last_error = Some(e),
        }
    }
    panic!("no broker serves {tp}: {last_error:?}");
}

fn mirrored_batches(data_dir: &Path, tp: &TopicPartition) -> Batches {
    let dir = LogDir::open(data_dir).unwrap();
    let (log, _) = dir
        .open_partition(
            tp,
            None,
            LogConfig {
                segment_bytes: 65536,
                ..LogConfig::default()
            },
            0,
        )
        .unwrap();
    common::stored_batches(&log)
}

/// Waits until every partition's log end reaches `targets`.
fn wait_mirrored(agent: &Agent, targets: &BTreeMap<TopicPartition, i64>) {
    let started = Instant::now();
    loop {
        let status = agent.status();
        let behind: Vec<String> = targets
            .iter()
            .filter(|&(tp, end)| {
                status
                    .get(&("dr".to_string(), tp.clone()))
                    .is_none_or(|s| s.log_end_offset < *end)
            })
            .map(|(tp, end)| {
                format!(
                    "{tp} (want {end}, have {:?})",
                    status.get(&("dr".to_string(), tp.clone()))
                )
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(started.elapsed() < MIRROR_DEADLINE, "not mirrored in time: {behind:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn partitions(topics: &[(&str, i32)]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|&(t, n)| (0..n).map(move |p| TopicPartition::new(t, p)))
        .collect()
}

/// Asserts our logs hold exactly the source's batches, and returns the source's ends.
fn assert_identical(data_dir: &Path, bootstrap: &str, tps: &[TopicPartition]) {
    for tp in tps {
        let (source, high_watermark) = source_batches(bootstrap, tp);
        let ours = mirrored_batches(data_dir, tp);
        assert!(!source.is_empty(), "{tp}: the source holds data");
        assert_eq!(
            ours.len(),
            source.len(),
            "{tp}: batch count (source high watermark {high_watermark})"
        );
        for ((o_off, o), (s_off, s)) in ours.iter().zip(&source) {
            assert_eq!(o_off, s_off, "{tp}: same offsets");
            assert!(o == s, "{tp}: batch at {o_off} differs from the source's bytes");
        }
    }
}

fn source_ends(bootstrap: &str, tps: &[TopicPartition]) -> BTreeMap<TopicPartition, i64> {
    tps.iter()
        .map(|tp| (tp.clone(), source_batches(bootstrap, tp).1))
        .collect()
}

#[test]
fn mirrors_every_partition_byte_for_byte_and_resumes_after_restart() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topics = [("orders", 4), ("events", 3)];
    for (t, n) in topics {
        cluster.create_topic(t, n, 1).expect("create topic");
    }
    produce(&bootstrap, "orders", 4, 3000, "lz4", 0);
    produce(&bootstrap, "events", 3, 2000, "zstd", 10_000);
    let tps = partitions(&topics);
    let dir = tempfile::tempdir().unwrap();

    let agent = Agent::start(config(dir.path(), &bootstrap, &["orders", "events"])).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, &tps);

    // More data while the agent is down; the restart resumes from each log end.
    produce(&bootstrap, "orders", 4, 1500, "gzip", 50_000);
    produce(&bootstrap, "events", 3, 500, "snappy", 60_000);
    let agent = Agent::start(config(dir.path(), &bootstrap, &["orders", "events"])).expect("restart agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, &tps);
}

/// Mirrors three partitions with `ingest` and checks the copy byte for
/// byte; `while_running` looks at the process before the agent stops.
fn mirrors_identically_with(ingest: &str, while_running: impl FnOnce()) {
    let cluster = MockCluster::new(2).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("copied", 3, 1).expect("create topic");
    produce(&bootstrap, "copied", 3, 2000, "lz4", 0);
    let tps = partitions(&[("copied", 3)]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config_with(dir.path(), &bootstrap, &["copied"], ingest)).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    while_running();
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, &tps);
}

#[test]
fn mmap_ingest_mirrors_identically() {
    mirrors_identically_with("mmap", || {});
}

/// The kernel's submission thread of an SQPOLL ring is a task of this
/// process named `iou-sqp-<pid>`: its presence shows the writes went
/// through such a ring, not the fallback copy on the shard's core.
#[test]
fn uring_sqpoll_ingest_mirrors_identically_through_a_kernel_submission_thread() {
    mirrors_identically_with("uring_sqpoll", || {
        let sqpoll_threads = std::fs::read_dir("/proc/self/task")
            .expect("tasks")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.starts_with("iou-sqp"))
            .count();
        assert!(sqpoll_threads >= 1, "no SQPOLL thread in the process");
    });
}

#[test]
fn leader_moves_and_a_broker_outage_keep_the_log_identical() {
    let cluster = MockCluster::new(3).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topics = [("moves", 3)];
    cluster.create_topic("moves", 3, 1).expect("create topic");
    for p in 0..3 {
        cluster.partition_leader("moves", p, Some(1)).unwrap();
    }
    produce(&bootstrap, "moves", 3, 1000, "lz4", 0);
    let tps = partitions(&topics);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &bootstrap, &["moves"])).expect("start agent");

    // Leaders move to other brokers mid-stream (the source's epochs bump).
    for (p, broker) in [(0, 2), (1, 3), (2, 2)] {
        cluster.partition_leader("moves", p, Some(broker)).unwrap();
    }
    produce(&bootstrap, "moves", 3, 1000, "zstd", 5000);
    // A broker goes down and comes back while data keeps coming.
    cluster.broker_down(2).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    cluster.broker_up(2).unwrap();
    produce(&bootstrap, "moves", 3, 1000, "gzip", 9000);
    for p in 0..3 {
        cluster.partition_leader("moves", p, Some(1)).unwrap();
    }
    produce(&bootstrap, "moves", 3, 500, "none", 20_000);

    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, &tps);
}

#[test]
fn pause_resume_and_remove_commands_take_effect() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("ctl", 1, 1).expect("create topic");
    cluster.create_topic("other", 1, 1).expect("create topic");
    produce(&bootstrap, "ctl", 1, 200, "none", 0);
    produce(&bootstrap, "other", 1, 200, "none", 0);
    let tps = partitions(&[("ctl", 1), ("other", 1)]);
    let (p0, p1) = (tps[0].clone(), tps[1].clone());
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &bootstrap, &["ctl", "other"])).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));

    // Paused: the topic stays where it was while the other goes on.
    assert_eq!(agent.pause("dr", "ctl").unwrap(), std::slice::from_ref(&p0));
    let again = agent.pause("dr", "ctl").unwrap_err().to_string();
    assert!(again.contains("already paused"), "{again}");
    std::thread::sleep(Duration::from_millis(300));
    let paused_at = agent.status()[&("dr".to_string(), p0.clone())].log_end_offset;
    produce(&bootstrap, "ctl", 1, 300, "none", 1000);
    produce(&bootstrap, "other", 1, 300, "none", 1000);
    let ends = source_ends(&bootstrap, &tps);
    wait_mirrored(&agent, &BTreeMap::from([(p1.clone(), ends[&p1])]));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        agent.status()[&("dr".to_string(), p0.clone())].log_end_offset,
        paused_at,
        "paused partition moved"
    );
    assert!(paused_at < ends[&p0]);

    // Resumed: it catches up.
    assert_eq!(agent.resume("dr", "ctl").unwrap(), std::slice::from_ref(&p0));
    let again = agent.resume("dr", "ctl").unwrap_err().to_string();
    assert!(again.contains("not paused"), "{again}");
    wait_mirrored(&agent, &ends);

    // Removed: its log is closed where it was; new source data does not arrive.
    assert_eq!(agent.remove_topic("dr", "other").unwrap(), std::slice::from_ref(&p1));
    let started = Instant::now();
    while agent.status().contains_key(&("dr".to_string(), p1.clone())) {
        assert!(started.elapsed() < MIRROR_DEADLINE, "removal not confirmed");
        std::thread::sleep(Duration::from_millis(20));
    }
    produce(&bootstrap, "ctl", 1, 100, "none", 5000);
    produce(&bootstrap, "other", 1, 100, "none", 5000);
    let ends_after = source_ends(&bootstrap, &tps);
    wait_mirrored(&agent, &BTreeMap::from([(p0.clone(), ends_after[&p0])]));
    let refused = agent.pause("dr", "other").unwrap_err().to_string();
    assert!(
        refused.contains("not in mirror"),
        "a removed topic takes no commands: {refused}"
    );
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, std::slice::from_ref(&p0));
    let removed = mirrored_batches(dir.path(), &p1);
    assert_eq!(
        removed
            .last()
            .map(|(o, b)| o + common::batch_view(b).last_offset_delta() as i64 + 1),
        Some(ends[&p1])
    );
}

/// A topic deleted at the source (the mock answers its metadata with
/// UNKNOWN_TOPIC_OR_PARTITION, by name and by id) moves to STOPPED once the
/// deletion is confirmed (3 rounds over 2 s here): its data stays, and it
/// is a writable local topic now; the other topic goes on mirroring.
/// Each mirrored topic's partition state (one-partition topics), as the
/// admin API reports it.
fn topic_states(agent: &Agent) -> BTreeMap<String, String> {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    match agent.admin(AdminRequest::Status).unwrap() {
        AdminAnswer::Status { partitions } => partitions.into_iter().map(|p| (p.topic, p.state)).collect(),
        other => panic!("{other:?}"),
    }
}

fn wait_for_state(agent: &Agent, topic: &str, state: &str) {
    let started = Instant::now();
    while topic_states(agent).get(topic).map(String::as_str) != Some(state) {
        assert!(
            started.elapsed() < MIRROR_DEADLINE,
            "{topic} not {state}: {:?}",
            topic_states(agent)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_topic_deleted_at_the_source_is_stopped_and_kept() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("doomed", 1, 1).expect("create topic");
    cluster.create_topic("kept", 1, 1).expect("create topic");
    produce(&bootstrap, "doomed", 1, 100, "none", 0);
    produce(&bootstrap, "kept", 1, 100, "none", 0);
    let tps = partitions(&[("doomed", 1), ("kept", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &bootstrap, &["doomed", "kept"]);
    config.mirrors[0].topic_deletion_confirm_ms = 2000;
    let agent = Agent::start(config).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    let before = mirrored_batches(dir.path(), &tps[0]);

    cluster
        .topic_error(
            "doomed",
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        )
        .unwrap();
    let states = || topic_states(&agent);
    let injected = Instant::now();
    wait_for_state(&agent, "doomed", "STOPPED");
    assert!(
        injected.elapsed() >= Duration::from_secs(2),
        "stopped before the confirmation window ran out"
    );
    assert_eq!(states()["kept"], "MIRRORING");
    produce(&bootstrap, "kept", 1, 50, "none", 1000);
    wait_mirrored(
        &agent,
        &BTreeMap::from([(tps[1].clone(), source_ends(&bootstrap, &tps[1..])[&tps[1]])]),
    );
    agent.stop().expect("clean stop");
    // Everything mirrored is still there, followed by the closing marker.
    let after = mirrored_batches(dir.path(), &tps[0]);
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after.len(), before.len() + 1, "one MIRROR_PID_RESET after the data");
}

#[test]
fn recovery_points_are_checkpointed_while_running() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("rolling", 2, 1).expect("create topic");
    produce(&bootstrap, "rolling", 2, 3000, "none", 0);
    let tps = partitions(&[("rolling", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(dir.path(), &bootstrap, &["rolling"])).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    // Segments of 64 KiB rolled; each roll moved the recovery point, and the
    // running agent writes it down (checked before any clean stop).
    let started = Instant::now();
    let checkpoint = dir.path().join("recovery-point-offset-checkpoint");
    loop {
        produce(&bootstrap, "rolling", 2, 10, "none", 100_000);
        let text = std::fs::read_to_string(&checkpoint).unwrap_or_default();
        let points: Vec<i64> = text
            .lines()
            .skip(2)
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        if points.len() == 2 && points.iter().all(|&p| p > 0) {
            break;
        }
        assert!(
            started.elapsed() < MIRROR_DEADLINE,
            "no recovery points checkpointed: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!dir.path().join(".kafka_cleanshutdown").exists());
    agent.stop().expect("clean stop");
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
}

/// The destination leader epoch stays above the source's as the source's
/// leader moves again and again (each move bumps the source epoch): the
/// coordinator bumps it ahead of time (proactive and periodic triggers),
/// Metadata at the agent never reports less than the source's epoch, and
/// the log stays byte-identical.
#[test]
fn the_destination_epoch_stays_above_the_source_epoch() {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    let cluster = MockCluster::new(2).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("moving", 1, 1).expect("create topic");
    let tps = partitions(&[("moving", 1)]);
    let dir = tempfile::tempdir().unwrap();
    produce(&bootstrap, "moving", 1, 50, "none", 0);
    let agent = Agent::start(config(dir.path(), &bootstrap, &["moving"])).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    let destination_epoch = || match agent.admin(AdminRequest::Metrics).unwrap() {
        AdminAnswer::Metrics { metrics } => {
            let p = &metrics.partitions[0];
            (p.view.destination_leader_epoch, p.epoch_bumps)
        }
        other => panic!("{other:?}"),
    };
    let (first, _) = destination_epoch();
    // Twelve moves take the source's epoch past the first destination epoch.
    for round in 0..12 {
        cluster.partition_leader("moving", 0, Some(1 + round % 2)).unwrap();
        produce(&bootstrap, "moving", 1, 20, "none", 1000 + round as u64 * 100);
        wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
        let source_epoch = mirrored_batches(dir.path(), &tps[0])
            .last()
            .map(|(_, b)| common::batch_view(b).partition_leader_epoch())
            .unwrap();
        let (now, _) = destination_epoch();
        assert!(
            now > source_epoch,
            "round {round}: destination epoch {now} not above the source's {source_epoch}"
        );
    }
    let (last, bumps) = destination_epoch();
    assert!(last > first && bumps > 0, "bumped: {first} -> {last}, {bumps} bumps");
    agent.stop().expect("clean stop");
    assert_identical(dir.path(), &bootstrap, &tps);
}

/// A mirror's definition replaced while running: a topic the new exclude
/// pattern covers stops (its data kept) while the others go on; pointed at
/// another cluster (another cluster id), all sync halts and no partition
/// is touched.
#[test]
fn an_updated_definition_stops_excluded_topics_and_a_new_cluster_halts_sync() {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    for topic in ["t-keep", "t-drop"] {
        cluster.create_topic(topic, 1, 1).expect("create topic");
        produce(&bootstrap, topic, 1, 50, "none", 0);
    }
    let tps = partitions(&[("t-keep", 1), ("t-drop", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), &bootstrap, &["t-keep"]);
    config.mirrors[0].topics_include = Some("t-.*".into());
    let agent = Agent::start(config.clone()).expect("start agent");
    wait_mirrored(&agent, &source_ends(&bootstrap, &tps));
    let states = || topic_states(&agent);

    let mut update = config.mirrors[0].clone();
    update.topics_exclude = "t-drop".into();
    agent
        .admin(AdminRequest::UpdateMirror { config: update.clone() })
        .expect("update");
    wait_for_state(&agent, "t-drop", "STOPPED");
    assert_eq!(states()["t-keep"], "MIRRORING");
    produce(&bootstrap, "t-keep", 1, 20, "none", 100);
    wait_mirrored(
        &agent,
        &BTreeMap::from([(tps[0].clone(), source_ends(&bootstrap, &tps[..1])[&tps[0]])]),
    );

    // Another cluster behind the mirror's servers: sync halts.
    let other = MockCluster::new(1).expect("another mock cluster");
    other.create_topic("t-new", 1, 1).expect("create topic");
    update.bootstrap_servers = vec![other.bootstrap_servers()];
    agent
        .admin(AdminRequest::UpdateMirror { config: update })
        .expect("update");
    let started = Instant::now();
    let halted = loop {
        let AdminAnswer::Metrics { metrics } = agent.admin(AdminRequest::Metrics).unwrap() else {
            panic!("metrics")
        };
        if metrics.mirrors[0].sync_halted {
            break metrics;
        }
        assert!(started.elapsed() < MIRROR_DEADLINE, "sync not halted");
        std::thread::sleep(Duration::from_millis(50));
    };
    let described = match agent
        .admin(AdminRequest::DescribeMirror { mirror: "dr".into() })
        .unwrap()
    {
        AdminAnswer::Mirror { mirror } => mirror,
        other => panic!("{other:?}"),
    };
    let error = described.sync_error.expect("a sync error");
    assert!(error.contains("cluster id"), "{error}");
    // Nothing of the other cluster is placed; nothing here changed state.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        states(),
        BTreeMap::from([
            ("t-drop".into(), "STOPPED".into()),
            ("t-keep".into(), "MIRRORING".into())
        ])
    );
    assert_eq!(halted.partitions.len(), 2);
    agent.stop().expect("clean stop");
}
