//! Apache Kafka (a KRaft cluster of one controller and three brokers, see
//! `tests/common/kafka.rs`) as the reference source: what an in-process
//! agent mirrors from it is compared with Kafka's own files, Kafka's own
//! tools read our files, and Kafka's own clients read our listener.
//!
//! - **Byte for byte against Kafka's own files**: topics of every codec,
//!   idempotent and transactional data with real COMMIT/ABORT markers,
//!   headers, null keys and values, records of several MiB. Our batches
//!   equal, offset for offset, the batches in the partition leader's `.log`
//!   files, and our `leader-epoch-checkpoint` equals the leader's.
//! - **Kafka's tools read our files**: DumpLogSegments prints for our
//!   `.log`, `.index` and `.timeindex` what it prints for the leader's
//!   (positions and segment bases aside), with its index sanity check.
//! - **Kafka's clients and tools use our listener**: the Java consumer
//!   reads at both isolation levels what it reads at the source;
//!   kafka-topics, kafka-get-offsets, kafka-configs, kafka-consumer-groups,
//!   kafka-acls, kafka-broker-api-versions and kafka-log-dirs work against
//!   the agent and agree with Kafka where both answer. A consumer group
//!   (classic, and KIP-848's `group.protocol=consumer`) that read part of a
//!   topic at Kafka resumes at our listener, after `mirror stop`, exactly at
//!   the offsets synced from Kafka.
//! - **A topic deleted at Kafka** is stopped only after the confirmation
//!   window (shown pending meanwhile, the absence confirmed by more than one
//!   of Kafka's brokers), with its data kept and served.
//!
//! One cluster serves every test of this binary; each test has topics and
//! an agent of its own.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use ringmirror::agent::Agent;
use ringmirror_storage::log::TopicPartition;

use common::kafka::{KafkaCluster, KafkaClusterSpec, driver, tool};

const DEADLINE: Duration = Duration::from_secs(60);
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// Tests that stop brokers hold this exclusively; the others share it, so
/// no leader moves under a test that compares with the leader's files.
static BROKERS_STEADY: RwLock<()> = RwLock::new(());

fn steady() -> RwLockReadGuard<'static, ()> {
    BROKERS_STEADY.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    BROKERS_STEADY.write().unwrap_or_else(|e| e.into_inner())
}

fn cluster() -> &'static KafkaCluster {
    KafkaCluster::shared(|| {
        KafkaClusterSpec::default()
            // Small segments, so the comparison spans segment rolls.
            .with("log.segment.bytes", &SEGMENT_BYTES.to_string())
            .with("message.max.bytes", "16777216")
            .with("replica.fetch.max.bytes", "16777216")
            // The cleaner and retention act within a test's time.
            .with("log.cleaner.backoff.ms", "300")
            .with("log.retention.check.interval.ms", "500")
            .with("log.segment.delete.delay.ms", "0")
    })
}

/// Produces to the cluster with the Java driver; returns the offsets it was told.
fn produce(topic: &str, args: &[&str]) -> Vec<(i32, i64)> {
    produce_at(&cluster().bootstrap, topic, args)
}

/// [`produce`] to `bootstrap`.
fn produce_at(bootstrap: &str, topic: &str, args: &[&str]) -> Vec<(i32, i64)> {
    let mut all = vec!["--topic", topic];
    all.extend_from_slice(args);
    driver("produce", bootstrap, &all)
        .iter()
        .filter_map(|l| l.strip_prefix("produced "))
        .map(|l| {
            let (p, o) = l.split_once(' ').expect("partition offset");
            (p.parse().expect("partition"), o.parse().expect("offset"))
        })
        .collect()
}

/// Every record the Java consumer reads from `topic` at `bootstrap`, as
/// the driver prints them, sorted by partition and offset.
fn consume(bootstrap: &str, topic: &str, isolation: &str) -> Vec<String> {
    let lines = driver(
        "consume",
        bootstrap,
        &["--topic", topic, "--isolation", isolation, "--idle-ms", "2000"],
    );
    let mut records: Vec<String> = lines.iter().filter(|l| l.starts_with("record ")).cloned().collect();
    records.sort_by_key(|l| {
        let mut f = l.split(' ').skip(1);
        let p: i32 = f.next().and_then(|v| v.parse().ok()).expect("partition");
        let o: i64 = f.next().and_then(|v| v.parse().ok()).expect("offset");
        (p, o)
    });
    records
}

/// The brokers' `log.segment.bytes`, and ours, so segments roll at the same offsets.
const SEGMENT_BYTES: u32 = 1 << 20;

/// An agent serving on loopback and mirroring `topics` from the cluster as
/// "dr", with segments of [`SEGMENT_BYTES`] as the brokers'.
fn mirror(data_dir: &Path, topics: &[&str]) -> Agent {
    let log = format!("segment_bytes = {SEGMENT_BYTES}");
    common::kafka::mirror_agent(data_dir, &cluster().bootstrap, topics, "", &log, "")
}

/// Waits until the agent's log of every partition of `topic` ends at the
/// source's high watermark; returns those ends.
fn wait_caught_up(agent: &Agent, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    common::kafka::wait_caught_up(agent, &cluster().bootstrap, topic, partitions, DEADLINE)
}

/// The `.log` files of `topic`-`partition` in a log directory, by base offset.
fn log_files(log_dir: &Path, tp: &TopicPartition, ext: &str) -> Vec<PathBuf> {
    let dir = log_dir.join(format!("{}-{}", tp.topic, tp.partition));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}

/// The whole batches in the partition leader's own segment files.
fn kafka_file_batches(tp: &TopicPartition) -> (i32, common::Batches) {
    let leader = cluster().leaders(&tp.topic)[&tp.partition];
    let mut batches = Vec::new();
    for file in log_files(cluster().log_dir(leader), tp, "log") {
        let bytes = std::fs::read(&file).expect("read Kafka's segment");
        batches.extend(common::split_batches(&bytes));
    }
    (leader, batches)
}

fn epoch_checkpoint(log_dir: &Path, tp: &TopicPartition) -> String {
    let path = log_dir
        .join(format!("{}-{}", tp.topic, tp.partition))
        .join("leader-epoch-checkpoint");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn batches_equal_kafka_leaders_own_files_byte_for_byte() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("bytes-codecs", CODECS.len() as i32, &[]);
    c.create_topic("bytes-txn", 1, &[]);
    c.create_topic(
        "bytes-large",
        1,
        &[("max.message.bytes", "16777216"), ("segment.bytes", "33554432")],
    );
    for (p, codec) in CODECS.iter().enumerate() {
        let p = p.to_string();
        let idempotent = if p == "1" || p == "3" {
            "--idempotent"
        } else {
            "--batch"
        };
        produce(
            "bytes-codecs",
            &[
                "--partition",
                &p,
                "--codec",
                codec,
                "--count",
                "400",
                "--value-bytes",
                "700",
                "--headers",
                "--null-keys",
                "--null-values",
                "--batch",
                idempotent,
            ],
        );
    }
    // Real transaction markers: a commit, an abort, and a commit again.
    for (id, outcome) in [("tx-a", "commit"), ("tx-b", "abort"), ("tx-a", "commit")] {
        produce(
            "bytes-txn",
            &[
                "--transactional",
                id,
                "--txn",
                outcome,
                "--count",
                "30",
                "--codec",
                "lz4",
                "--batch",
            ],
        );
    }
    produce(
        "bytes-large",
        &["--count", "4", "--value-bytes", "3145728", "--codec", "none"],
    );

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = mirror(&data, &["bytes-codecs", "bytes-txn", "bytes-large"]);
    let mut tps = Vec::new();
    for (topic, partitions) in [
        ("bytes-codecs", CODECS.len() as i32),
        ("bytes-txn", 1),
        ("bytes-large", 1),
    ] {
        wait_caught_up(&agent, topic, partitions);
        tps.extend((0..partitions).map(|p| TopicPartition::new(topic, p)));
    }
    agent.stop().expect("clean stop");

    // What Kafka serves equals what we hold (the raw-Fetch comparison) …
    common::assert_mirrors_source(&data, &c.bootstrap, &tps);
    // … and equals Kafka's own files, batch for batch.
    let ours = common::mirrored_partition_logs(&data, &tps);
    let mut markers = 0;
    for tp in &tps {
        let (leader, kafka) = kafka_file_batches(tp);
        let mine = &ours[tp].batches;
        assert!(!kafka.is_empty(), "{tp}: Kafka's files hold no batch");
        assert_eq!(
            mine.iter().map(|(o, b)| (*o, b.len())).collect::<Vec<_>>(),
            kafka.iter().map(|(o, b)| (*o, b.len())).collect::<Vec<_>>(),
            "{tp}: batch offsets and lengths, ours vs broker {leader}'s files"
        );
        for ((offset, a), (_, b)) in mine.iter().zip(&kafka) {
            assert!(a == b, "{tp}: batch at {offset} differs from broker {leader}'s file");
        }
        markers += mine.iter().filter(|(_, b)| common::batch_view(b).is_control()).count();
        assert_eq!(
            epoch_checkpoint(&data, tp),
            epoch_checkpoint(c.log_dir(leader), tp),
            "{tp}: leader-epoch-checkpoint, ours vs broker {leader}'s"
        );
    }
    assert_eq!(markers, 3, "one COMMIT/ABORT marker per transaction");
    let large = &ours[&TopicPartition::new("bytes-large", 0)].batches;
    assert!(
        large.iter().all(|(_, b)| b.len() > 3 << 20),
        "records of several MiB, one per batch"
    );
}

/// DumpLogSegments' output with what depends on where a file lies (the
/// "Dumping <path>" lines, the directory in other lines) left out.
fn dump(files: &[PathBuf], extra: &[&str]) -> Vec<String> {
    let dir = files[0].parent().expect("a partition directory").display().to_string();
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut args = vec!["--files".to_owned(), names.join(",")];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tool("org.apache.kafka.tools.DumpLogSegments", &args)
        .lines()
        .filter(|l| !l.starts_with("Dumping "))
        .map(|l| l.replace(&dir, "<dir>"))
        .collect()
}

#[test]
fn kafka_dump_log_segments_reads_our_files_as_kafkas() {
    // The leader is stopped below: a closed Kafka log is compared with our
    // closed one (closing appends the active segment's last time index
    // entry and writes a producer snapshot, in Kafka as here).
    let _exclusive = exclusive();
    let c = cluster();
    c.create_topic("dump", 1, &[]);
    produce(
        "dump",
        &[
            "--count",
            "3000",
            "--value-bytes",
            "300",
            "--codec",
            "gzip",
            "--batch",
            "--headers",
        ],
    );
    produce("dump", &["--transactional", "tx-d", "--txn", "abort", "--count", "20"]);
    produce("dump", &["--count", "50", "--idempotent"]);

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = mirror(&data, &["dump"]);
    wait_caught_up(&agent, "dump", 1);
    agent.stop().expect("clean stop");

    let tp = TopicPartition::new("dump", 0);
    let leader = c.leaders("dump")[&0];
    let stopped = c.stop_broker(leader);
    for (ext, extra) in [
        ("log", &["--print-data-log", "--deep-iteration"][..]),
        ("index", &["--index-sanity-check"][..]),
        ("index", &[][..]),
        ("timeindex", &["--index-sanity-check"][..]),
        ("timeindex", &[][..]),
        ("txnindex", &[][..]),
        ("snapshot", &[][..]),
    ] {
        let kafka = log_files(c.log_dir(leader), &tp, ext);
        let ours = log_files(&data, &tp, ext);
        assert_eq!(
            ours.iter().map(|p| p.file_name()).collect::<Vec<_>>(),
            kafka.iter().map(|p| p.file_name()).collect::<Vec<_>>(),
            "{ext} files: ours vs broker {leader}'s"
        );
        let (mut a, mut b) = (dump(&ours, extra), dump(&kafka, extra));
        if ext == "snapshot" {
            // Kafka writes a snapshot's producers in its HashMap's iteration
            // order (ProducerStateManager), which no reader depends on.
            a.sort();
            b.sort();
        }
        assert!(!a.is_empty(), "DumpLogSegments printed nothing for our {ext} files");
        assert_eq!(a, b, "DumpLogSegments {extra:?} of our {ext} files vs Kafka's");
    }
    stopped.restart();
}

#[test]
fn kafka_java_consumer_reads_our_listener_as_it_reads_the_source() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("consumed", 2, &[]);
    produce(
        "consumed",
        &[
            "--count",
            "200",
            "--codec",
            "zstd",
            "--headers",
            "--null-values",
            "--batch",
        ],
    );
    produce(
        "consumed",
        &["--transactional", "tx-c1", "--txn", "abort", "--count", "25"],
    );
    produce(
        "consumed",
        &["--transactional", "tx-c2", "--txn", "commit", "--count", "25"],
    );

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["consumed"]);
    wait_caught_up(&agent, "consumed", 2);
    let ours = agent.listener_addr().expect("listening").to_string();
    for isolation in ["read_uncommitted", "read_committed"] {
        let at_source = consume(&c.bootstrap, "consumed", isolation);
        let here = consume(&ours, "consumed", isolation);
        let expected = if isolation == "read_committed" { 225 } else { 250 };
        assert_eq!(at_source.len(), expected, "{isolation} at Kafka");
        assert_eq!(
            here, at_source,
            "{isolation}: the Java consumer at our listener vs at Kafka"
        );
    }
    agent.stop().expect("clean stop");
}

/// Kafka's tool `class` run against `bootstrap` with `args`.
fn kafka_tool(class: &str, bootstrap: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    tool(class, &all)
}

const TOPIC_COMMAND: &str = "org.apache.kafka.tools.TopicCommand";
const GET_OFFSETS: &str = "org.apache.kafka.tools.GetOffsetShell";
const GROUPS_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";
const ACL_COMMAND: &str = "org.apache.kafka.tools.AclCommand";
const API_VERSIONS_COMMAND: &str = "org.apache.kafka.tools.BrokerApiVersionsCommand";
const LOG_DIRS_COMMAND: &str = "org.apache.kafka.tools.LogDirsCommand";

#[test]
fn kafka_cli_tools_work_against_the_agent() {
    let _steady = steady();
    let c = cluster();
    c.create_topic(
        "tooled",
        3,
        &[("retention.ms", "7200000"), ("cleanup.policy", "delete")],
    );
    produce("tooled", &["--count", "90", "--batch"]);
    driver(
        "commit-offsets",
        &c.bootstrap,
        &[
            "--group",
            "tool-readers",
            "--topic",
            "tooled",
            "--offset",
            "0=5",
            "--offset",
            "2=11",
        ],
    );

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["tooled"]);
    wait_caught_up(&agent, "tooled", 3);
    let ours = agent.listener_addr().expect("listening").to_string();

    // kafka-topics: the same topic id and partitions.
    let described = kafka_tool(TOPIC_COMMAND, &ours, &["--describe", "--topic", "tooled"]);
    let at_kafka = kafka_tool(TOPIC_COMMAND, &c.bootstrap, &["--describe", "--topic", "tooled"]);
    let topic_id = |text: &str| {
        text.split_whitespace()
            .skip_while(|w| *w != "TopicId:")
            .nth(1)
            .map(str::to_owned)
    };
    assert_eq!(topic_id(&described), topic_id(&at_kafka), "{described}");
    assert_eq!(
        described.lines().filter(|l| l.contains("Partition:")).count(),
        3,
        "{described}"
    );

    // kafka-get-offsets: latest and earliest as at Kafka.
    for time in ["-1", "-2"] {
        let args = ["--topic", "tooled", "--time", time];
        let mut here: Vec<String> = kafka_tool(GET_OFFSETS, &ours, &args)
            .lines()
            .map(str::to_owned)
            .collect();
        let mut there: Vec<String> = kafka_tool(GET_OFFSETS, &c.bootstrap, &args)
            .lines()
            .map(str::to_owned)
            .collect();
        here.sort();
        there.sort();
        assert_eq!(here, there, "kafka-get-offsets --time {time}");
    }

    // kafka-configs: the synced overrides.
    common::wait_until(DEADLINE, "retention.ms synced", || {
        let text = kafka_tool(
            CONFIG_COMMAND,
            &ours,
            &["--describe", "--entity-type", "topics", "--entity-name", "tooled"],
        );
        if text.contains("retention.ms=7200000") {
            Ok(())
        } else {
            Err(text)
        }
    });

    // kafka-consumer-groups: the group synced from Kafka, at its offsets.
    common::wait_until(DEADLINE, "tool-readers listed", || {
        let text = kafka_tool(GROUPS_COMMAND, &ours, &["--list"]);
        if text.lines().any(|l| l.trim() == "tool-readers") {
            Ok(())
        } else {
            Err(text)
        }
    });
    let groups = common::wait_until(DEADLINE, "tool-readers described at its offsets", || {
        let text = kafka_tool(GROUPS_COMMAND, &ours, &["--describe", "--group", "tool-readers"]);
        let offsets: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 4 && f[1] == "tooled").then(|| (f[2].to_owned(), f[3].to_owned()))
            })
            .collect();
        if offsets == BTreeMap::from([("0".into(), "5".into()), ("2".into(), "11".into())]) {
            Ok(text)
        } else {
            Err(text)
        }
    });
    assert!(groups.contains("tool-readers"), "{groups}");

    // kafka-acls: lists (none here).
    let acls = kafka_tool(ACL_COMMAND, &ours, &["--list"]);
    assert!(!acls.contains("Error"), "{acls}");

    // kafka-broker-api-versions: our node and the APIs we serve.
    let versions = kafka_tool(API_VERSIONS_COMMAND, &ours, &[]);
    assert!(versions.contains("Fetch(1): 4 to 16"), "{versions}");

    // kafka-log-dirs: our data dir, with the partitions' sizes.
    let dirs = kafka_tool(LOG_DIRS_COMMAND, &ours, &["--describe", "--topic-list", "tooled"]);
    for p in 0..3 {
        let key = format!("\"partition\":\"tooled-{p}\",\"size\":");
        let size: u64 = dirs
            .split(&key)
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no size of tooled-{p} in {dirs}"));
        assert!(size > 0, "tooled-{p} holds records: {dirs}");
    }
    agent.stop().expect("clean stop");
}

/// Waits until every partition of `topic` has ended mirroring (failover);
/// returns each one's log end after the markers.
fn wait_failed_over(agent: &Agent, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    common::kafka::wait_failed_over(agent, topic, partitions, DEADLINE)
}

#[test]
fn after_failover_kafka_clients_write_and_an_open_transaction_no_longer_holds_readers() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("failover", 1, &[]);
    produce(
        "failover",
        &["--transactional", "tx-f1", "--txn", "commit", "--count", "20"],
    );
    // A transaction the source never finishes while we mirror: its producer
    // halts with it open (its timeout far away).
    produce(
        "failover",
        &[
            "--transactional",
            "tx-open",
            "--txn",
            "open",
            "--count",
            "7",
            "--prop",
            "transaction.timeout.ms=900000",
        ],
    );
    let at_kafka = consume(&c.bootstrap, "failover", "read_committed");
    assert_eq!(
        at_kafka.len(),
        20,
        "Kafka's READ_COMMITTED readers stop at the open transaction"
    );

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["failover"]);
    let ends = wait_caught_up(&agent, "failover", 1);
    let ours = agent.listener_addr().expect("listening").to_string();
    assert_eq!(
        consume(&ours, "failover", "read_committed"),
        at_kafka,
        "before failover, as at Kafka"
    );

    agent.end_mirroring("dr", "failover").expect("mirror stop");
    let ended = wait_failed_over(&agent, "failover", 1);
    assert_eq!(
        ended[&0],
        ends[&0] + 2,
        "an ABORT marker for the open transaction, then MIRROR_PID_RESET"
    );

    // Kafka's idempotent producer writes to the failed-over topic, after
    // the markers …
    let written = produce_at(&ours, "failover", &["--count", "15", "--idempotent", "--batch"]);
    let offsets: Vec<i64> = written.iter().map(|&(_, o)| o).collect();
    assert_eq!(
        offsets,
        (ended[&0]..ended[&0] + 15).collect::<Vec<_>>(),
        "offsets the agent assigned"
    );
    // … and READ_COMMITTED readers are no longer held by the open
    // transaction: they read the committed records and the new ones, never
    // the aborted ones; READ_UNCOMMITTED readers read everything.
    let committed = consume(&ours, "failover", "read_committed");
    assert_eq!(committed.len(), 20 + 15, "{committed:#?}");
    assert_eq!(committed[..20], at_kafka[..]);
    let open_offsets = ends[&0] - 7..ends[&0];
    assert!(
        committed.iter().all(|l| !open_offsets.contains(&record_offset(l))),
        "records of the aborted transaction are not read committed"
    );
    assert_eq!(consume(&ours, "failover", "read_uncommitted").len(), 20 + 7 + 15);
    agent.stop().expect("clean stop");
}

/// The offset of a `record <partition> <offset> …` line of the driver.
fn record_offset(line: &str) -> i64 {
    line.split(' ')
        .nth(2)
        .and_then(|o| o.parse().ok())
        .expect("record offset")
}

/// Our log start offset of `topic`-`partition` at our listener (ListOffsets earliest).
fn log_start_at(bootstrap: &str, topic: &str, partition: i32) -> i64 {
    let text = kafka_tool(
        GET_OFFSETS,
        bootstrap,
        &["--topic", topic, "--partitions", &partition.to_string(), "--time", "-2"],
    );
    text.trim()
        .rsplit(':')
        .next()
        .and_then(|o| o.parse().ok())
        .unwrap_or_else(|| panic!("kafka-get-offsets answered {text}"))
}

#[test]
fn a_topic_compacted_by_kafkas_cleaner_is_mirrored_as_kafka_serves_it() {
    let _steady = steady();
    let c = cluster();
    c.create_topic(
        "compacted",
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "300"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "0"),
            ("min.compaction.lag.ms", "0"),
        ],
    );
    // Overwritten keys, tombstones (every third value null), an aborted
    // transaction; each round rolls the segment before (segment.ms).
    for round in 0..4 {
        let prefix = format!("r{round}-");
        produce(
            "compacted",
            &[
                "--count",
                "60",
                "--keys",
                "12",
                "--null-values",
                "--batch",
                "--key-prefix",
                "k",
                "--value-bytes",
                "40",
            ],
        );
        if round == 1 {
            produce(
                "compacted",
                &[
                    "--transactional",
                    "tx-compact",
                    "--txn",
                    "abort",
                    "--count",
                    "10",
                    "--key-prefix",
                    &prefix,
                ],
            );
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    produce("compacted", &["--count", "1", "--key-prefix", "roll"]);
    // Kafka's cleaner has run once the source holds fewer records than written.
    let written = 4 * 60 + 10 + 1;
    common::wait_until(DEADLINE, "Kafka's cleaner compacted the topic", || {
        let read = consume(&c.bootstrap, "compacted", "read_uncommitted").len();
        if read < written / 2 {
            Ok(())
        } else {
            Err(format!("{read} of {written} records still there"))
        }
    });

    // Its later passes rewrite batches at the same offsets (tombstones and
    // the marker go once past delete.retention.ms): mirror once the log is
    // settled — the same bytes over many cleaner back-offs.
    let mut last = Vec::new();
    common::wait_until(DEADLINE, "Kafka's cleaner settled", || {
        std::thread::sleep(Duration::from_millis(1500));
        let now = common::source_partition_log(&c.bootstrap, "compacted", 0, DEADLINE).batches;
        if now == last {
            Ok(())
        } else {
            last = now;
            Err("the cleaner rewrote the log since the last look".to_owned())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = mirror(&data, &["compacted"]);
    wait_caught_up(&agent, "compacted", 1);
    let ours = agent.listener_addr().expect("listening").to_string();
    // A consumer reads here what it reads at Kafka: the same records at the
    // same offsets (the cleaner's gaps kept), so the latest value per key too.
    for isolation in ["read_uncommitted", "read_committed"] {
        let there = consume(&c.bootstrap, "compacted", isolation);
        let here = consume(&ours, "compacted", isolation);
        assert_eq!(here, there, "{isolation}");
    }
    agent.stop().expect("clean stop");
    let tp = TopicPartition::new("compacted", 0);
    let both = common::assert_mirrors_source(&data, &c.bootstrap, std::slice::from_ref(&tp));
    let offsets: Vec<i64> = both[&tp].1.batches.iter().map(|(o, _)| *o).collect();
    assert!(
        offsets.windows(2).any(|w| {
            let first = common::batch_view(&both[&tp].1.batches[offsets.iter().position(|o| *o == w[0]).unwrap()].1);
            first.next_offset() < w[1]
        }),
        "the cleaner's gaps are in our log: {offsets:?}"
    );
}

#[test]
fn delete_records_and_retention_at_kafka_move_our_log_start() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("retained", 1, &[("segment.ms", "200")]);
    // Several segments (each round rolls the last one).
    for _ in 0..3 {
        produce("retained", &["--count", "100", "--value-bytes", "200", "--batch"]);
        std::thread::sleep(Duration::from_millis(250));
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["retained"]);
    let ends = wait_caught_up(&agent, "retained", 1);
    let ours = agent.listener_addr().expect("listening").to_string();
    assert_eq!(log_start_at(&ours, "retained", 0), 0);

    // DeleteRecords at Kafka …
    let low = driver(
        "delete-records",
        &c.bootstrap,
        &["--topic", "retained", "--partition", "0", "--before", "120"],
    );
    assert_eq!(low, ["low 120"]);
    // … reaches us with the next Fetch answer's log start offset.
    produce("retained", &["--count", "5"]);
    common::wait_until(DEADLINE, "our log start at 120", || {
        match log_start_at(&ours, "retained", 0) {
            120 => Ok(()),
            other => Err(format!("log start {other}")),
        }
    });

    // retention.ms: Kafka deletes the old segments, and our log start follows.
    driver(
        "alter-configs",
        &c.bootstrap,
        &["--topic", "retained", "--set", "retention.ms=1000"],
    );
    let kafka_start = common::wait_until(DEADLINE, "Kafka's retention deleted old segments", || {
        std::thread::sleep(Duration::from_millis(300));
        produce("retained", &["--count", "3"]);
        let start = log_start_at(&c.bootstrap, "retained", 0);
        if start > ends[&0] {
            Ok(start)
        } else {
            Err(format!("Kafka's log start {start}"))
        }
    });
    common::wait_until(DEADLINE, "our log start follows Kafka's", || {
        let here = log_start_at(&ours, "retained", 0);
        if here >= kafka_start {
            Ok(())
        } else {
            Err(format!("ours {here}, Kafka's {kafka_start}"))
        }
    });
    agent.stop().expect("clean stop");
}

/// What KafkaJS (`tests/kafkajs/read.js`, its own protocol code) reads from
/// `topic` at `bootstrap`: the `record <partition> <offset>` lines, sorted.
fn kafkajs_read(bootstrap: &str, topic: &str, isolation: &str) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kafkajs/read.js");
    let output = std::process::Command::new("node")
        .arg(&script)
        .args([bootstrap, topic, isolation, "3000", "60000"])
        .output()
        .expect("run node (scripts/setup.sh installs KafkaJS in tests/kafkajs)");
    assert!(
        output.status.success(),
        "KafkaJS reader failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("record "))
        .map(str::to_owned)
        .collect()
}

/// The `record <partition> <offset>` part of the Java driver's lines.
fn positions(records: &[String]) -> Vec<String> {
    records
        .iter()
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn kafkajs_reads_interleaved_aborted_transactions_as_kafkas_java_consumer() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("interleaved", 1, &[]);
    let lines = driver(
        "interleaved-aborts",
        &c.bootstrap,
        &[
            "--topic",
            "interleaved",
            "--rounds",
            "4",
            "--count",
            "5",
            "--codec",
            "lz4",
        ],
    );
    assert_eq!(lines, ["committed 20"]);
    let java_at_kafka = positions(&consume(&c.bootstrap, "interleaved", "read_committed"));
    assert_eq!(java_at_kafka.len(), 20);
    // What Kafka 4.3 answers: the aborted transactions in `.txnindex` order
    // (by marker), which KafkaJS walks as if by first offset — so at Kafka
    // it delivers records of aborted transactions (every round's first
    // transaction begins before and ends after the other).
    let kafkajs_at_kafka = kafkajs_read(&c.bootstrap, "interleaved", "read_committed");
    assert_eq!(kafkajs_at_kafka.len(), 40, "KafkaJS at Kafka: {kafkajs_at_kafka:?}");

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["interleaved"]);
    wait_caught_up(&agent, "interleaved", 1);
    let ours = agent.listener_addr().expect("listening").to_string();
    assert_eq!(
        positions(&consume(&ours, "interleaved", "read_committed")),
        java_at_kafka
    );
    // We answer them in first-offset order: KafkaJS reads what Kafka's own
    // consumer reads.
    let kafkajs_here = kafkajs_read(&ours, "interleaved", "read_committed");
    assert_eq!(kafkajs_here, java_at_kafka, "KafkaJS at our listener");
    assert_eq!(kafkajs_read(&ours, "interleaved", "read_uncommitted").len(), 4 * 27 - 8);
    agent.stop().expect("clean stop");
}

#[test]
fn a_java_consumer_group_fails_over_to_our_listener_with_no_gap_and_no_duplicate() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("resume", 2, &[]);
    produce("resume", &["--count", "120", "--batch", "--keys", "40"]);
    // The group reads part of the topic at Kafka and commits where it got to.
    let first = driver(
        "consume",
        &c.bootstrap,
        &[
            "--topic",
            "resume",
            "--group",
            "resumers",
            "--max",
            "70",
            "--commit",
            "--idle-ms",
            "3000",
        ],
    );
    let first: Vec<String> = first.into_iter().filter(|l| l.starts_with("record ")).collect();
    assert_eq!(first.len(), 70);

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &["resume"]);
    wait_caught_up(&agent, "resume", 2);
    let ours = agent.listener_addr().expect("listening").to_string();
    let at_kafka = kafka_tool(GROUPS_COMMAND, &c.bootstrap, &["--describe", "--group", "resumers"]);
    let committed = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 4 && f[1] == "resume").then(|| (f[2].to_owned(), f[3].to_owned()))
            })
            .collect()
    };
    let expected = committed(&at_kafka);
    assert_eq!(expected.len(), 2, "{at_kafka}");
    common::wait_until(DEADLINE, "the group's offsets synced", || {
        let here = kafka_tool(GROUPS_COMMAND, &ours, &["--describe", "--group", "resumers"]);
        if committed(&here) == expected {
            Ok(())
        } else {
            Err(here)
        }
    });

    // The same group, now at our listener, goes on where it stopped.
    let rest = driver(
        "consume",
        &ours,
        &[
            "--topic",
            "resume",
            "--group",
            "resumers",
            "--commit",
            "--idle-ms",
            "3000",
        ],
    );
    let rest: Vec<String> = rest.into_iter().filter(|l| l.starts_with("record ")).collect();
    let mut all: Vec<String> = first.iter().chain(&rest).cloned().collect();
    all.sort();
    let mut everything = consume(&c.bootstrap, "resume", "read_uncommitted");
    everything.sort();
    assert_eq!(all, everything, "first at Kafka, the rest here: every record once");
    agent.stop().expect("clean stop");
}

/// KIP-848 (issue 17 item 2): a group of Kafka's Java consumers with
/// `group.protocol=consumer` reads part of a topic at Kafka and commits;
/// the mirror syncs the group's offsets; after `mirror stop` the same group,
/// on the same protocol at our listener, goes on exactly at those offsets.
#[test]
fn a_consumer_protocol_group_resumes_at_the_synced_offsets_after_failover() {
    const TOPIC: &str = "resume-848";
    const GROUP: &str = "resumers-848";
    let _steady = steady();
    let c = cluster();
    c.create_topic(TOPIC, 2, &[]);
    produce(TOPIC, &["--count", "120", "--batch", "--keys", "40"]);
    let member = |bootstrap: &str, extra: &[&str]| {
        let mut args = vec![
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--protocol",
            "consumer",
            "--idle-ms",
            "3000",
        ];
        args.extend_from_slice(extra);
        common::kafka::member_records(&driver("group-member", bootstrap, &args))
    };
    let first = member(&c.bootstrap, &["--max", "70"]);
    assert_eq!(first.len(), 70);

    let dir = tempfile::tempdir().unwrap();
    let agent = mirror(&dir.path().join("data"), &[TOPIC]);
    wait_caught_up(&agent, TOPIC, 2);
    let ours = agent.listener_addr().expect("listening").to_string();
    let next_offsets = |bootstrap: &str| common::committed_offsets(bootstrap, GROUP, TOPIC, 2);
    // At Kafka, through the tool (it finds the group's coordinator).
    let described = kafka_tool(GROUPS_COMMAND, &c.bootstrap, &["--describe", "--group", GROUP]);
    let at_kafka: BTreeMap<i32, i64> = described
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 4 && f[1] == TOPIC).then(|| (f[2].parse().expect("partition"), f[3].parse().expect("offset")))
        })
        .collect();
    assert_eq!(at_kafka.values().sum::<i64>(), 70, "{described}");
    common::wait_until(DEADLINE, "the group's offsets synced", || {
        let here = next_offsets(&ours);
        if here == at_kafka {
            Ok(())
        } else {
            Err(format!("{here:?}"))
        }
    });

    agent
        .admin(ringmirror_control::admin::AdminRequest::Stop {
            mirror: "dr".into(),
            topics: vec![TOPIC.into()],
        })
        .expect("mirror stop");
    common::kafka::wait_failed_over(&agent, TOPIC, 2, DEADLINE);
    assert_eq!(
        next_offsets(&ours),
        at_kafka,
        "failover keeps offsets within the mirrored log"
    );

    let rest = member(&ours, &[]);
    let mut all: Vec<(i32, i64)> = first.iter().chain(&rest).copied().collect();
    all.sort();
    let everything = common::kafka::member_records(&consume(&c.bootstrap, TOPIC, "read_uncommitted"));
    assert_eq!(all, everything, "first at Kafka, the rest here: every record once");
    agent.stop().expect("clean stop");
}

#[test]
fn partitions_added_at_kafka_are_mirrored() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("growing", 1, &[]);
    produce("growing", &["--count", "20"]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let agent = mirror(&data, &["growing"]);
    wait_caught_up(&agent, "growing", 1);
    driver(
        "add-partitions",
        &c.bootstrap,
        &["--topic", "growing", "--partitions", "3"],
    );
    for p in 1..3 {
        produce(
            "growing",
            &["--count", "15", "--partition", &p.to_string(), "--idempotent"],
        );
    }
    wait_caught_up(&agent, "growing", 3);
    agent.stop().expect("clean stop");
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("growing", p)).collect();
    common::assert_mirrors_source(&data, &c.bootstrap, &tps);
}

#[test]
fn a_topic_deleted_at_kafka_is_stopped_after_the_confirmation_window_with_its_data() {
    const CONFIRM_MS: u64 = 4000;
    let _steady = steady();
    let c = cluster();
    for topic in ["doomed", "outlives"] {
        c.create_topic(topic, 1, &[]);
        produce(topic, &["--count", "100", "--batch"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = common::kafka::mirror_agent(
        &dir.path().join("data"),
        &c.bootstrap,
        &["doomed", "outlives"],
        "",
        "",
        &format!("topic_deletion_confirm_rounds = 3\ntopic_deletion_confirm_ms = {CONFIRM_MS}"),
    );
    wait_caught_up(&agent, "doomed", 1);
    wait_caught_up(&agent, "outlives", 1);
    let ours = agent.listener_addr().expect("listening").to_string();
    let before = common::source_partition_log(&ours, "doomed", 0, DEADLINE);
    let topic_id = common::topic_id(&c.bootstrap, "doomed", DEADLINE);

    kafka_tool(TOPIC_COMMAND, &c.bootstrap, &["--delete", "--topic", "doomed"]);
    // Pending (shown, MIRRORING) until the window has run out; then STOPPED.
    let mut first_absent: Option<u64> = None;
    let mut rounds = 0;
    let mut brokers = 0;
    let stopped_at = common::wait_until(DEADLINE, "doomed stopping", || {
        let state = common::partition_state(&agent, "dr", "doomed", 0);
        let now = ringmirror_storage::clock::now_ms();
        if state == "STOPPING" || state == "STOPPED" {
            return Ok(now);
        }
        assert_eq!(state, "MIRRORING", "a pending deletion leaves the topic mirroring");
        let checks = common::describe_mirror(&agent, "dr").topic_checks;
        if let Some(check) = checks.into_iter().find(|c| c.topic == "doomed") {
            assert_eq!(check.kind, "deleted", "{check:?}");
            assert_eq!(check.topic_id, topic_id, "{check:?}");
            first_absent.get_or_insert(check.since_ms);
            rounds = rounds.max(check.round);
            brokers = brokers.max(check.brokers.len());
        }
        Err(format!("{state}; first absent at {first_absent:?}"))
    });
    common::wait_until(DEADLINE, "doomed STOPPED", || {
        match common::partition_state(&agent, "dr", "doomed", 0).as_str() {
            "STOPPED" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
    let first_absent = first_absent.expect("the pending deletion was shown before it was acted on");
    assert!(
        stopped_at >= first_absent + CONFIRM_MS,
        "stopped {} ms after Kafka first answered the topic absent, inside the {CONFIRM_MS} ms window",
        stopped_at - first_absent
    );
    assert!(rounds >= 2, "rounds shown pending: {rounds}");
    assert!(
        brokers >= 2,
        "Kafka has three brokers: the absence is confirmed by more than one ({brokers})"
    );
    // The data stays, served, closed by the failover marker.
    let after = common::source_partition_log(&ours, "doomed", 0, DEADLINE);
    assert_eq!(after.batches[..before.batches.len()], before.batches[..]);
    assert_eq!(after.batches.len(), before.batches.len() + 1, "one MIRROR_PID_RESET");
    // The other topic mirrors on.
    produce("outlives", &["--count", "10"]);
    wait_caught_up(&agent, "outlives", 1);
    assert_eq!(common::partition_state(&agent, "dr", "outlives", 0), "MIRRORING");
    agent.stop().expect("clean stop");
}

#[test]
fn kafkas_transactions_tool_runs_from_the_classpath_and_sees_an_open_transaction() {
    let _steady = steady();
    let c = cluster();
    c.create_topic("txn-tool", 1, &[]);
    produce(
        "txn-tool",
        &[
            "--transactional",
            "tx-tool",
            "--txn",
            "open",
            "--count",
            "5",
            "--prop",
            "transaction.timeout.ms=900000",
        ],
    );
    const TRANSACTIONS_COMMAND: &str = "org.apache.kafka.tools.TransactionsCommand";
    let listed = kafka_tool(TRANSACTIONS_COMMAND, &c.bootstrap, &["list"]);
    let row = listed
        .lines()
        .find(|l| l.split_whitespace().next() == Some("tx-tool"))
        .unwrap_or_else(|| panic!("tx-tool in kafka-transactions list:\n{listed}"));
    assert!(row.contains("Ongoing"), "the transaction is left open: {row}");
    let described = kafka_tool(
        TRANSACTIONS_COMMAND,
        &c.bootstrap,
        &["describe", "--transactional-id", "tx-tool"],
    );
    assert!(described.contains("txn-tool-0"), "its partition: {described}");
}
