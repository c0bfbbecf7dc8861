//! A failover (`POST /mirrors/<name>/stop`: STOPPING → STOPPED) killed at
//! every step, then finished by a restart — exactly once.
//!
//! Each test runs the `ringmirror run` binary as a child process against a
//! librdkafka mock cluster (in this process) whose topic holds plain data
//! around two producers' transactions the mock never marks (it writes no
//! COMMIT/ABORT batches), so on the mirror both stay open on both
//! partitions until mirroring ends. The agent mirrors everything, is asked
//! to stop the mirror with `RINGMIRROR_CRASH_AT=<point>` set, and must
//! SIGKILL itself at that point (`storage/src/failpoint.rs`); the segment
//! files then show that it died where the point says. Restarted without the
//! variable, it must finish the stop: every partition STOPPED, and on disk,
//! after the mirrored batches (byte for byte the source's), exactly one
//! ABORT per open transaction and then exactly one MIRROR_PID_RESET, at a
//! leader epoch above every mirrored batch — and the topic takes writes.
//!
//! A stop covers several partitions: the coordinator records STOPPING for
//! all of them before acting on any, so one request is always finished
//! whole. And a stop finished after a crash leaves what an uninterrupted
//! one does ([`same_as_uninterrupted`]: the markers above the destination
//! leader epoch clients were told, Metadata never going back, the last
//! mirror epoch the source's, the reset naming the source cluster).
//!
//! `RINGMIRROR_TEST_KEEP_DIR=1` keeps each test's directory (agent logs,
//! data) and prints where it is.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use ringmirror::cli_admin::AdminClient;
use ringmirror_control::admin::{AdminAnswer, PartitionView};
use ringmirror_dataplane::partition::registry::{ENDING_MIRROR_MARKER, LOCAL_TOPIC_MARKER};
use ringmirror_storage::batch::{BatchIter, ControlRecord, ControlType};
use ringmirror_storage::failpoint::CRASH_AT_ENV;
use ringmirror_storage::log::TopicPartition;

use common::{ChildGuard, MAX_BATCH_BYTES, SourcePartitionLog, batch_view};

const TOPIC: &str = "ledger";
const PARTITIONS: i32 = 2;
const MIRROR: &str = "dr";
/// Transactional ids of the producers whose transactions stay open.
const TRANSACTIONAL_IDS: [&str; 2] = ["ledger-writer-a", "ledger-writer-b"];
/// Records produced to the topic after the failover (spread over the partitions).
const LOCAL_RECORDS: u64 = 6;
const DEADLINE: Duration = Duration::from_secs(60);
const EXIT_DEADLINE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The crash points of the stop path, in order
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// The coordinator wrote STOPPING, before telling the shard.
    StoppingWritten,
    /// The shard wrote the ending-mirror marker file.
    Started,
    /// The first ABORT marker for an open transaction is in the log.
    AbortWritten,
    /// All ABORT markers are in the log.
    AbortsWritten,
    /// The MIRROR_PID_RESET record is in the log.
    PidResetWritten,
    /// The local-topic marker file is written (the ending marker not yet removed).
    Writable,
    /// The coordinator heard the end, before writing STOPPED.
    Ended,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Self::StoppingWritten => "stop:stopping-written",
            Self::Started => "end-mirroring:started",
            Self::AbortWritten => "end-mirroring:abort-written",
            Self::AbortsWritten => "end-mirroring:aborts-written",
            Self::PidResetWritten => "end-mirroring:pid-reset-written",
            Self::Writable => "end-mirroring:writable",
            Self::Ended => "stop:ended",
        }
    }
}

#[test]
fn crash_after_stopping_is_written() {
    crash_while_stopping(Point::StoppingWritten);
}

#[test]
fn crash_after_the_end_of_mirroring_started() {
    crash_while_stopping(Point::Started);
}

#[test]
fn crash_after_the_first_abort_marker() {
    crash_while_stopping(Point::AbortWritten);
}

#[test]
fn crash_after_all_abort_markers() {
    crash_while_stopping(Point::AbortsWritten);
}

#[test]
fn crash_after_the_pid_reset() {
    crash_while_stopping(Point::PidResetWritten);
}

#[test]
fn crash_after_the_partition_became_writable() {
    crash_while_stopping(Point::Writable);
}

#[test]
fn crash_after_the_coordinator_heard_the_end() {
    crash_while_stopping(Point::Ended);
}

// ---------------------------------------------------------------------------
// The scenario
// ---------------------------------------------------------------------------

fn partitions() -> Vec<TopicPartition> {
    (0..PARTITIONS).map(|p| TopicPartition::new(TOPIC, p)).collect()
}

fn crash_while_stopping(point: Point) {
    let started = Instant::now();
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let source = cluster.bootstrap_servers();
    mock_source::produce(&source, TOPIC, PARTITIONS, 40, "lz4", 0).expect("produce before the transactions");
    leave_transactions_open(&source);
    // Data after the transactions: the markers must follow all of it.
    mock_source::produce(&source, TOPIC, PARTITIONS, 20, "none", 1000).expect("produce after the transactions");

    let tps = partitions();
    let sources: BTreeMap<TopicPartition, SourcePartitionLog> = tps
        .iter()
        .map(|tp| {
            (
                tp.clone(),
                common::source_partition_log(&source, &tp.topic, tp.partition, DEADLINE),
            )
        })
        .collect();
    let open: BTreeMap<TopicPartition, BTreeSet<i64>> = sources
        .iter()
        .map(|(tp, s)| (tp.clone(), open_transactions(tp, s)))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_path_buf();
    // Removed at the end, unless kept.
    let _dir = match std::env::var_os("RINGMIRROR_TEST_KEEP_DIR") {
        Some(_) => {
            eprintln!("{point:?}: keeping {}", dir_path.display());
            let _ = dir.keep();
            None
        }
        None => Some(dir),
    };
    let dir = dir_path.as_path();
    let data_dir = dir.join("data");
    let config = write_config(dir, &data_dir, &source);

    // 1: mirror everything, then stop with the crash point armed.
    let mut agent = AgentProcess::start(&config, dir.join("agent-1.log"), Some(point.name()));
    let admin = agent.admin();
    let mirroring = wait_mirrored(&mut agent, &admin, &sources);
    let cluster_id = source_cluster_id(&admin);
    // The leader epoch clients were told while mirroring.
    let told = metadata_leader_epochs(&agent.listener());
    for (tp, view) in &mirroring {
        assert_eq!(
            told[tp], view.destination_leader_epoch,
            "{point:?} {tp}: Metadata and /status disagree on the destination leader epoch"
        );
        assert!(
            view.destination_leader_epoch
                > sources[tp]
                    .batches
                    .iter()
                    .map(|(_, b)| batch_view(b).partition_leader_epoch())
                    .max()
                    .unwrap_or(-1),
            "{point:?} {tp}: the destination leader epoch is not above the mirrored batches'"
        );
    }
    let answer = admin.request("POST", &format!("/mirrors/{MIRROR}/stop"), None);
    if point == Point::StoppingWritten {
        // The crash comes inside the request, before its answer.
        assert!(answer.is_err(), "{point:?}: the stop was answered: {answer:?}");
    }
    let crash_log = agent.wait_crashed(point);
    let at_crash = scan_at_crash(&data_dir, &sources);
    assert_crashed_where_expected(point, &at_crash, &open, &crash_log);

    // 2: restarted without the crash point: the stop is finished.
    let mut agent = AgentProcess::start(&config, dir.join("agent-2.log"), None);
    let admin = agent.admin();
    let stopped = wait_stopped(&mut agent, &admin);
    let listener = agent.listener();
    let told_after = metadata_leader_epochs(&listener);
    mock_source::produce(&listener, TOPIC, PARTITIONS, LOCAL_RECORDS, "none", 9000)
        .unwrap_or_else(|e| panic!("{point:?}: produce after the restart: {e}; agent log:\n{}", agent.log()));
    let restart_log = agent.terminate();

    // 3: the logs on disk.
    let ours = common::mirrored_partition_logs(&data_dir, &tps);
    let mut problems = Vec::new();
    for tp in &tps {
        let markers = assert_stopped_log(
            tp,
            &sources[tp],
            &ours[tp].batches,
            &open[tp],
            LOCAL_RECORDS / PARTITIONS as u64,
        );
        problems.extend(same_as_uninterrupted(
            tp,
            &sources[tp],
            &markers,
            &cluster_id,
            &mirroring[tp],
            &stopped[tp],
            (told[tp], told_after[tp]),
        ));
        let view = &stopped[tp];
        assert!(
            view.destination_leader_epoch >= markers.epoch,
            "{point:?} {tp}: STOPPED with destination leader epoch {}, below its markers' {}",
            view.destination_leader_epoch,
            markers.epoch
        );
        let part_dir = data_dir.join(tp.to_string());
        assert!(
            !part_dir.join(ENDING_MIRROR_MARKER).exists(),
            "{point:?} {tp}: the ending-mirror marker file is still there"
        );
        assert!(
            part_dir.join(LOCAL_TOPIC_MARKER).exists(),
            "{point:?} {tp}: no local-topic marker file"
        );
    }
    for needle in ["crash point reached", "panicked"] {
        assert!(
            !restart_log.contains(needle),
            "{point:?}: the restarted agent logged {needle:?}:\n{restart_log}"
        );
    }
    if !problems.is_empty() {
        let problems = problems.join("\n  ");
        panic!(
            "{point:?}: not what an uninterrupted stop leaves:\n  {problems}\ncrash log:\n{crash_log}\nrestart log:\n{restart_log}"
        );
    }
    eprintln!(
        "{point:?}: crashed with {}; finished after the restart; {:.1} s",
        describe_at_crash(&at_crash),
        started.elapsed().as_secs_f64()
    );
}

/// Two transactional producers, each with one transaction over both
/// partitions, interleaved; the mock cluster writes no markers, so both
/// stay open in the mirrored log.
fn leave_transactions_open(bootstrap: &str) {
    let producers: Vec<BaseProducer> = TRANSACTIONAL_IDS
        .iter()
        .map(|id| {
            let producer: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("transactional.id", *id)
                .set("linger.ms", "0")
                .create()
                .expect("transactional producer");
            producer.init_transactions(DEADLINE).expect("init transactions");
            producer.begin_transaction().expect("begin");
            producer
        })
        .collect();
    for round in 0..2 {
        for (w, producer) in producers.iter().enumerate() {
            for p in 0..PARTITIONS {
                let key = format!("w{w}-r{round}-p{p}");
                producer
                    .send(
                        BaseRecord::to(TOPIC)
                            .partition(p)
                            .key(&key)
                            .payload("in a transaction the source never marks"),
                    )
                    .expect("queued");
            }
            producer.flush(DEADLINE).expect("flush transactional records");
        }
    }
    for producer in &producers {
        producer.commit_transaction(DEADLINE).expect("commit");
    }
}

/// The producer ids with transactional data in the source partition: all
/// open (the mock writes no markers). Checks the preconditions: at least
/// two, with plain data after them.
fn open_transactions(tp: &TopicPartition, source: &SourcePartitionLog) -> BTreeSet<i64> {
    let mut open = BTreeSet::new();
    let mut last_transactional = None;
    for (i, (_, bytes)) in source.batches.iter().enumerate() {
        let batch = batch_view(bytes);
        assert!(!batch.is_control(), "{tp}: the mock wrote a control batch");
        if batch.is_transactional() {
            open.insert(batch.producer_id());
            last_transactional = Some(i);
        }
    }
    assert!(
        open.len() >= 2,
        "precondition: {tp} needs two open transactions (got producers {open:?})"
    );
    assert!(
        last_transactional.is_some_and(|i| i + 1 < source.batches.len()),
        "precondition: {tp} has plain data after the transactions"
    );
    open
}

fn write_config(dir: &Path, data_dir: &Path, bootstrap: &str) -> PathBuf {
    let path = dir.join("ringmirror.toml");
    std::fs::write(
        &path,
        format!(
            r#"
data_dir = {data_dir:?}
shards = 2
mirror_topic_num_partitions = 8
[listener]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[log]
segment_bytes = 65536
[[mirror]]
name = "{MIRROR}"
bootstrap_servers = [{bootstrap:?}]
topics = ["{TOPIC}"]
fetch_max_wait_ms = 50
metadata_refresh_interval_ms = 1000
"#
        ),
    )
    .expect("write config");
    path
}

// ---------------------------------------------------------------------------
// The agent process
// ---------------------------------------------------------------------------

/// A `ringmirror run` process; its stderr (the log) goes to a file.
struct AgentProcess {
    child: ChildGuard,
    log_path: PathBuf,
}

impl AgentProcess {
    fn start(config: &Path, log_path: PathBuf, crash_at: Option<&str>) -> Self {
        let env: Vec<(&str, &str)> = crash_at.map(|point| (CRASH_AT_ENV, point)).into_iter().collect();
        let child = common::run_agent_binary(config, &log_path, &env);
        Self { child, log_path }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if !self.child.is_running() {
            let status = self.child.child().wait().expect("reap agent");
            panic!("the agent exited early ({status}); its log:\n{}", self.log());
        }
    }

    /// The `addr=` of the first log line containing `message`, once logged.
    fn logged_addr(&mut self, message: &str) -> String {
        let started = Instant::now();
        loop {
            self.assert_running();
            let log = common::strip_ansi(&self.log());
            if let Some(addr) = log
                .lines()
                .filter(|l| l.contains(message))
                .find_map(|l| Some(l.split("addr=").nth(1)?.split_whitespace().next()?.to_owned()))
            {
                return addr;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "no {message:?} line within {DEADLINE:?}; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn admin(&mut self) -> AdminClient {
        let addr = self.logged_addr("admin API listening");
        AdminClient::new(Some(&format!("http://{addr}")))
    }

    fn listener(&mut self) -> String {
        self.logged_addr("serving Kafka clients")
    }

    /// Waits for the process to kill itself at `point`; returns its log.
    fn wait_crashed(mut self, point: Point) -> String {
        let status: Option<ExitStatus> = self.child.wait_timeout(EXIT_DEADLINE);
        let log = self.log();
        let Some(status) = status else {
            panic!(
                "{point:?}: the agent did not die within {EXIT_DEADLINE:?} of the stop: crash point {:?} never reached; log:\n{log}",
                point.name()
            );
        };
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{point:?}: the agent exited with {status}, not by SIGKILL; log:\n{log}"
        );
        let line = log
            .lines()
            .find(|l| l.contains("crash point reached"))
            .unwrap_or_else(|| panic!("{point:?}: no \"crash point reached\" in the log:\n{log}"));
        assert!(
            line.contains(point.name()),
            "{point:?}: crashed at another point: {line}"
        );
        log
    }

    /// SIGTERM; checks a clean exit and returns the log.
    fn terminate(mut self) -> String {
        self.child.signal(libc::SIGTERM);
        let status = self.child.wait_timeout(EXIT_DEADLINE);
        let log = self.log();
        let Some(status) = status else {
            panic!("the agent did not exit within {EXIT_DEADLINE:?} of SIGTERM; log:\n{log}");
        };
        assert!(
            status.success(),
            "the agent exited with {status} on SIGTERM; log:\n{log}"
        );
        assert!(log.contains("agent stopped cleanly"), "log:\n{log}");
        log
    }
}

// ---------------------------------------------------------------------------
// The admin API
// ---------------------------------------------------------------------------

fn status(admin: &AdminClient) -> anyhow::Result<BTreeMap<TopicPartition, PartitionView>> {
    let answer: AdminAnswer = serde_json::from_value(admin.request("GET", "/status", None)?)?;
    let AdminAnswer::Status { partitions } = answer else {
        anyhow::bail!("/status answered {answer:?}");
    };
    Ok(partitions
        .into_iter()
        .filter(|v| v.mirror == MIRROR && v.topic == TOPIC)
        .map(|v| (TopicPartition::new(TOPIC, v.partition), v))
        .collect())
}

fn source_cluster_id(admin: &AdminClient) -> String {
    let answer: AdminAnswer = serde_json::from_value(
        admin
            .request("GET", &format!("/mirrors/{MIRROR}"), None)
            .expect("describe mirror"),
    )
    .expect("a mirror description");
    let AdminAnswer::Mirror { mirror } = answer else {
        panic!("GET /mirrors/{MIRROR} answered {answer:?}");
    };
    mirror
        .source_cluster_id
        .expect("the mirror knows its source cluster id")
}

/// Waits until every partition is MIRRORING at the source's high watermark;
/// returns their views.
fn wait_mirrored(
    agent: &mut AgentProcess,
    admin: &AdminClient,
    sources: &BTreeMap<TopicPartition, SourcePartitionLog>,
) -> BTreeMap<TopicPartition, PartitionView> {
    let started = Instant::now();
    loop {
        agent.assert_running();
        let now = status(admin);
        if let Ok(views) = &now
            && sources.iter().all(|(tp, s)| {
                views
                    .get(tp)
                    .is_some_and(|v| v.state == "MIRRORING" && v.destination_offset == s.high_watermark)
            })
        {
            return views.clone();
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not mirrored within {DEADLINE:?}: {now:?}; log:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After the restart: waits until every partition is STOPPED (the stop's
/// STOPPING was written for all before the crash); none may fail.
fn wait_stopped(agent: &mut AgentProcess, admin: &AdminClient) -> BTreeMap<TopicPartition, PartitionView> {
    let tps = partitions();
    let started = Instant::now();
    loop {
        agent.assert_running();
        let now = status(admin);
        if let Ok(views) = &now {
            if let Some(failed) = views.values().find(|v| v.state == "FAILED") {
                panic!(
                    "a partition FAILED after the restart: {failed:?}; log:\n{}",
                    agent.log()
                );
            }
            if tps.iter().all(|tp| views.get(tp).is_some_and(|v| v.state == "STOPPED")) {
                return views.clone();
            }
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not all STOPPED within {DEADLINE:?} of the restart: {now:?}; log:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The leader epoch of each partition of the topic in the agent's Metadata answer.
fn metadata_leader_epochs(listener: &str) -> BTreeMap<TopicPartition, i32> {
    let mut conn = common::KafkaConnection::connect(listener, Duration::from_secs(10)).expect("connect to the agent");
    let metadata: MetadataResponse = conn
        .request(
            ApiKey::Metadata as i16,
            9,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str(TOPIC)))),
                ]))
                .with_allow_auto_topic_creation(false),
        )
        .expect("Metadata");
    let [topic] = &metadata.topics[..] else {
        panic!("Metadata: {:?}", metadata.topics)
    };
    assert_eq!(topic.error_code, 0, "Metadata: {topic:?}");
    let epochs: BTreeMap<TopicPartition, i32> = topic
        .partitions
        .iter()
        .map(|p| (TopicPartition::new(TOPIC, p.partition_index), p.leader_epoch))
        .collect();
    assert_eq!(epochs.len(), PARTITIONS as usize, "Metadata: {topic:?}");
    epochs
}

// ---------------------------------------------------------------------------
// The logs
// ---------------------------------------------------------------------------

/// What a stop leaves whatever crashed in between, as an uninterrupted one
/// does: the stop bumps the destination leader epoch, so the markers go in
/// above the one clients were told while mirroring, and Metadata never goes
/// back; the last mirror epoch is the source's epoch of the last mirrored
/// batch (not one of our markers'); the reset names the source cluster.
/// Returns what differs.
fn same_as_uninterrupted(
    tp: &TopicPartition,
    source: &SourcePartitionLog,
    markers: &Markers,
    cluster_id: &str,
    mirroring: &PartitionView,
    stopped: &PartitionView,
    (told_before, told_after): (i32, i32),
) -> Vec<String> {
    let mut problems = Vec::new();
    if markers.first_epoch <= mirroring.destination_leader_epoch {
        problems.push(format!(
            "{tp}: the markers went in at leader epoch {}, not above the destination leader epoch {} reported while mirroring",
            markers.first_epoch, mirroring.destination_leader_epoch
        ));
    }
    if told_after < told_before || told_after < markers.epoch {
        problems.push(format!(
            "{tp}: Metadata reports leader epoch {told_after} after the restart: below the {told_before} it reported \
             before the stop, or the markers' {}",
            markers.epoch
        ));
    }
    let last_source_epoch = source
        .batches
        .last()
        .map_or(-1, |(_, b)| batch_view(b).partition_leader_epoch());
    if stopped.last_mirror_epoch != last_source_epoch {
        problems.push(format!(
            "{tp}: STOPPED with last mirror epoch {}, the last mirrored batch has source epoch {last_source_epoch}",
            stopped.last_mirror_epoch
        ));
    }
    if markers.reset_cluster_id.as_deref() != Some(cluster_id) {
        problems.push(format!(
            "{tp}: the MIRROR_PID_RESET names source cluster {:?}, not {cluster_id:?}",
            markers.reset_cluster_id
        ));
    }
    problems
}

/// What a partition directory held past the mirrored data when the agent died.
#[derive(Debug, Default)]
struct AtCrash {
    /// Producer ids of the ABORT markers, in log order.
    aborts: Vec<i64>,
    resets: usize,
    /// Batches past the mirrored data that are neither.
    others: usize,
    ending_marker: bool,
    local_marker: bool,
}

/// Reads each partition's segment files read-only (opening the log would
/// recover it, and the restart must see what the crash left).
fn scan_at_crash(
    data_dir: &Path,
    sources: &BTreeMap<TopicPartition, SourcePartitionLog>,
) -> BTreeMap<TopicPartition, AtCrash> {
    sources
        .iter()
        .map(|(tp, source)| {
            let dir = data_dir.join(tp.to_string());
            let mut at = AtCrash {
                ending_marker: dir.join(ENDING_MIRROR_MARKER).exists(),
                local_marker: dir.join(LOCAL_TOPIC_MARKER).exists(),
                ..AtCrash::default()
            };
            let batches = read_segments(&dir);
            let mirrored: Vec<_> = batches
                .iter()
                .filter(|(base, _)| *base < source.high_watermark)
                .collect();
            assert_eq!(
                mirrored.len(),
                source.batches.len(),
                "{tp}: batches of mirrored data on disk after the crash"
            );
            for (base, bytes) in batches.iter().filter(|(base, _)| *base >= source.high_watermark) {
                let batch = batch_view(bytes);
                match batch.is_control().then(|| ControlRecord::decode(&batch)) {
                    Some(Ok(r)) if r.control_type == ControlType::Abort => at.aborts.push(batch.producer_id()),
                    Some(Ok(r)) if r.control_type == ControlType::MirrorPidReset => at.resets += 1,
                    other => {
                        eprintln!("{tp}: unexpected batch at {base} after the crash: {other:?}");
                        at.others += 1;
                    }
                }
            }
            (tp.clone(), at)
        })
        .collect()
}

/// Whole, CRC-valid batches with increasing offsets in a partition
/// directory's segment files, up to the first byte that is not one.
fn read_segments(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut next = i64::MIN;
    for path in common::segment_files(dir) {
        let bytes = std::fs::read(&path).expect("read segment");
        let mut iter = BatchIter::new(&bytes, MAX_BATCH_BYTES);
        let mut whole = true;
        for item in iter.by_ref() {
            let Ok((_, batch)) = item else {
                whole = false;
                break;
            };
            if !batch.crc_is_valid() || batch.base_offset() < next {
                whole = false;
                break;
            }
            next = batch.next_offset();
            out.push((batch.base_offset(), batch.bytes().to_vec()));
        }
        if !whole || iter.position() != bytes.len() {
            break;
        }
    }
    out
}

fn describe_at_crash(at: &BTreeMap<TopicPartition, AtCrash>) -> String {
    at.iter()
        .map(|(tp, a)| {
            format!(
                "{tp}: {} abort(s), {} reset(s), ending marker {}, local marker {}",
                a.aborts.len(),
                a.resets,
                a.ending_marker,
                a.local_marker
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The segment files show the agent died where `point` says — on some
/// partition (the other may be anywhere: shards end theirs concurrently),
/// and that nothing was written twice on any.
fn assert_crashed_where_expected(
    point: Point,
    at: &BTreeMap<TopicPartition, AtCrash>,
    open: &BTreeMap<TopicPartition, BTreeSet<i64>>,
    log: &str,
) {
    let seen = describe_at_crash(at);
    for (tp, a) in at {
        let distinct: BTreeSet<i64> = a.aborts.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            a.aborts.len(),
            "{point:?} {tp}: an ABORT written twice before the crash ({seen})"
        );
        assert!(
            distinct.is_subset(&open[tp]),
            "{point:?} {tp}: an ABORT for a producer without an open transaction ({seen})"
        );
        assert!(a.resets <= 1, "{point:?} {tp}: two resets before the crash ({seen})");
        assert_eq!(
            a.others, 0,
            "{point:?} {tp}: unexpected batches after the data ({seen})"
        );
    }
    let here = |tp: &TopicPartition, a: &AtCrash| {
        let all = a.aborts.len() == open[tp].len();
        match point {
            Point::StoppingWritten => false,
            Point::Started => a.ending_marker && !a.local_marker && a.aborts.is_empty() && a.resets == 0,
            Point::AbortWritten => a.ending_marker && !a.local_marker && a.aborts.len() == 1 && a.resets == 0,
            Point::AbortsWritten => a.ending_marker && !a.local_marker && all && a.resets == 0,
            Point::PidResetWritten => a.ending_marker && !a.local_marker && all && a.resets == 1,
            Point::Writable => a.ending_marker && a.local_marker && all && a.resets == 1,
            Point::Ended => !a.ending_marker && a.local_marker && all && a.resets == 1,
        }
    };
    if point == Point::StoppingWritten {
        // Before any shard heard of the stop.
        assert!(
            at.values()
                .all(|a| !a.ending_marker && !a.local_marker && a.aborts.is_empty() && a.resets == 0),
            "{point:?}: a partition started ending although the crash came first ({seen}); log:\n{log}"
        );
    } else {
        assert!(
            at.iter().any(|(tp, a)| here(tp, a)),
            "{point:?}: no partition is in the state the crash point names ({seen}); log:\n{log}"
        );
    }
}

/// The markers that end a stopped partition's mirrored data.
struct Markers {
    /// The leader epoch of the first.
    first_epoch: i32,
    /// The highest leader epoch among them.
    epoch: i32,
    /// The source cluster id the MIRROR_PID_RESET names.
    reset_cluster_id: Option<String>,
}

/// Checks a stopped partition's log: the mirrored batches byte for byte
/// the source's; then one ABORT per open transaction and one
/// MIRROR_PID_RESET, at leader epochs above the mirrored batches'; then `local_records` produced records, nothing else.
fn assert_stopped_log(
    tp: &TopicPartition,
    source: &SourcePartitionLog,
    ours: &[(i64, Vec<u8>)],
    open: &BTreeSet<i64>,
    local_records: u64,
) -> Markers {
    // Whole, valid, contiguous: nothing duplicated, no gap.
    let mut next = 0;
    for (base, bytes) in ours {
        let batch = batch_view(bytes);
        assert!(batch.crc_is_valid(), "{tp}: batch at {base} fails its CRC");
        assert_eq!(*base, next, "{tp}: a gap or an overlap at {base}");
        next = batch.next_offset();
    }
    // The mirrored batches, unchanged.
    let n = source.batches.len();
    assert!(ours.len() > n, "{tp}: {} batches, {n} mirrored ones", ours.len());
    for (i, (s, o)) in source.batches.iter().zip(ours).enumerate() {
        assert_eq!(s.0, o.0, "{tp}: mirrored batch #{i} moved");
        assert!(s.1 == o.1, "{tp}: mirrored batch #{i} at {} changed", s.0);
    }
    let mirrored_epoch = source
        .batches
        .iter()
        .map(|(_, b)| batch_view(b).partition_leader_epoch())
        .max()
        .expect("mirrored batches");

    // The markers, and nothing like them anywhere else.
    let mut aborts: Vec<(i64, i64)> = Vec::new();
    let mut resets: Vec<i64> = Vec::new();
    for (base, bytes) in ours {
        let batch = batch_view(bytes);
        if !batch.is_control() {
            continue;
        }
        let record = ControlRecord::decode(&batch).unwrap_or_else(|e| panic!("{tp}: control batch at {base}: {e}"));
        match record.control_type {
            ControlType::Abort => aborts.push((batch.producer_id(), *base)),
            ControlType::MirrorPidReset => resets.push(*base),
            other => panic!("{tp}: a {other:?} marker at {base}"),
        }
    }
    let aborted: BTreeSet<i64> = aborts.iter().map(|&(pid, _)| pid).collect();
    assert_eq!(
        aborts.len(),
        aborted.len(),
        "{tp}: a transaction aborted more than once: {aborts:?}"
    );
    assert_eq!(
        &aborted, open,
        "{tp}: ABORT markers (producer id, offset) {aborts:?} for open transactions {open:?}"
    );
    assert_eq!(resets.len(), 1, "{tp}: MIRROR_PID_RESET records at {resets:?}");

    let k = open.len();
    let first_epoch = batch_view(&ours[n].1).partition_leader_epoch();
    let mut reset_cluster_id = None;
    let mut epoch = mirrored_epoch;
    for (i, (base, bytes)) in ours[n..n + k + 1].iter().enumerate() {
        let batch = batch_view(bytes);
        let record = ControlRecord::decode(&batch).unwrap_or_else(|e| panic!("{tp}: batch at {base}: {e}"));
        let expected = if i < k {
            ControlType::Abort
        } else {
            ControlType::MirrorPidReset
        };
        assert_eq!(
            record.control_type, expected,
            "{tp}: batch at {base} after the mirrored data (the ABORTs, then the reset)"
        );
        if expected == ControlType::MirrorPidReset {
            reset_cluster_id = record.source_cluster_id;
        }
        let marker_epoch = batch.partition_leader_epoch();
        assert!(
            marker_epoch > mirrored_epoch,
            "{tp}: marker at {base} has leader epoch {marker_epoch}, not above the mirrored {mirrored_epoch}"
        );
        assert!(
            marker_epoch >= epoch,
            "{tp}: marker at {base} has leader epoch {marker_epoch}, below the one before ({epoch})"
        );
        epoch = marker_epoch;
    }

    // Local writes after the markers, at an epoch no lower.
    let mut records = 0;
    for (base, bytes) in &ours[n + k + 1..] {
        let batch = batch_view(bytes);
        assert!(
            !batch.is_control() && !batch.is_transactional(),
            "{tp}: batch at {base} after the reset is not a plain local write"
        );
        assert!(
            batch.partition_leader_epoch() >= epoch,
            "{tp}: local batch at {base} has leader epoch {}, below the markers' {epoch}",
            batch.partition_leader_epoch()
        );
        records += u64::try_from(batch.records_count()).expect("record count");
    }
    assert_eq!(records, local_records, "{tp}: records produced after the failover");
    Markers {
        first_epoch,
        epoch,
        reset_cluster_id,
    }
}
