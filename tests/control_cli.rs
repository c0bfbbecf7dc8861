//! The control plane end to end, as an operator drives it: the
//! `ringmirror run` binary with an admin API and no configured mirror,
//! steered only through the `ringmirror mirror …` / `ringmirror status`
//! CLI, mirroring librdkafka's mock cluster.
//!
//! - create a mirror, watch it catch up, list and describe it;
//! - pause it and count the Fetch requests that reach the source (none
//!   may), resume it;
//! - refused requests exit 1 with the server's specific message;
//! - stop it (failover): ordinary clients write to the topic at a leader
//!   epoch above every mirrored batch's, and a consumer group whose offsets
//!   (with their leader epochs) were committed at the source resumes at
//!   the destination without a metadata loop;
//! - restart the agent with partitions MIRRORING, PAUSED, STOPPED and
//!   FAILED: each keeps its state and behaves as it says.
//!
//! Every wait is bounded; the agent and CLI processes are killed if a test
//! fails (ChildGuard).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetFetchRequest,
    OffsetFetchResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror_control::admin::PartitionView;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord, RecordBatch, decode_records};

use common::{ChildGuard, KafkaConnection};

const DEADLINE: Duration = Duration::from_secs(60);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Kafka's READ_ONLY_TOPIC (a Produce to a mirror topic).
const READ_ONLY_TOPIC: i16 = 134;
/// Kafka's API key of Fetch.
const FETCH: i16 = 1;

// ---------------------------------------------------------------------------
// The source: librdkafka's mock cluster, with request tracking
// ---------------------------------------------------------------------------

/// A mock cluster owned by a producer created with `test.mock.num.brokers`,
/// so that its raw handle is reachable (request tracking is not in the
/// safe `MockCluster` API).
struct Source {
    owner: BaseProducer,
    bootstrap: String,
    /// ListOffsets only (watermarks): never sends a Fetch.
    offsets: BaseConsumer,
}

/// One request the mock cluster received while tracking.
#[derive(Debug, Clone, Copy)]
struct TrackedRequest {
    broker: i32,
    api_key: i16,
    micros: i64,
}

impl Source {
    fn start(brokers: u32) -> Self {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .create()
            .expect("a producer owning a mock cluster");
        let bootstrap = owner
            .client()
            .mock_cluster()
            .expect("the producer owns a mock cluster")
            .bootstrap_servers();
        let offsets: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("watermark consumer");
        Self {
            owner,
            bootstrap,
            offsets,
        }
    }

    fn mock(&self) -> MockCluster<'_, DefaultProducerContext> {
        self.owner.client().mock_cluster().expect("mock cluster")
    }

    fn raw(&self) -> *mut rdkafka_sys::rd_kafka_mock_cluster_t {
        // SAFETY: the producer is alive (borrowed by self) and owns the mock.
        let raw = unsafe { rdkafka_sys::rd_kafka_handle_mock_cluster(self.owner.client().native_ptr()) };
        assert!(!raw.is_null(), "no mock cluster behind the producer");
        raw
    }

    /// Starts tracking (again): forgets every request tracked so far.
    fn track_requests(&self) {
        // SAFETY: a live mock cluster; the call takes the cluster's lock.
        unsafe { rdkafka_sys::rd_kafka_mock_start_request_tracking(self.raw()) }
    }

    fn stop_tracking(&self) {
        // SAFETY: as above.
        unsafe { rdkafka_sys::rd_kafka_mock_stop_request_tracking(self.raw()) }
    }

    fn tracked(&self) -> Vec<TrackedRequest> {
        let mut count = 0usize;
        // SAFETY: a live mock cluster; the array and its elements are
        // copies we own and free below, read only before that.
        unsafe {
            let requests = rdkafka_sys::rd_kafka_mock_get_requests(self.raw(), &mut count);
            if requests.is_null() {
                return Vec::new();
            }
            let out = (0..count)
                .map(|i| {
                    let r = *requests.add(i);
                    TrackedRequest {
                        broker: rdkafka_sys::rd_kafka_mock_request_id(r),
                        api_key: rdkafka_sys::rd_kafka_mock_request_api_key(r),
                        micros: rdkafka_sys::rd_kafka_mock_request_timestamp(r),
                    }
                })
                .collect();
            rdkafka_sys::rd_kafka_mock_request_destroy_array(requests, count);
            out
        }
    }

    /// The source's high watermark of each partition (ListOffsets, no
    /// Fetch); asked again while a moved leader makes it retriable.
    fn ends(&self, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        (0..partitions)
            .map(|p| {
                let started = Instant::now();
                loop {
                    match self.offsets.fetch_watermarks(topic, p, IO_TIMEOUT) {
                        Ok((_, high)) => break (p, high),
                        Err(e) if started.elapsed() < IO_TIMEOUT => {
                            eprintln!("watermarks of {topic}-{p}: {e}; asking again");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        Err(e) => panic!("watermarks of {topic}-{p} at the source: {e}"),
                    }
                }
            })
            .collect()
    }
}

/// Requests per (broker, API key), for messages.
fn request_counts(requests: &[TrackedRequest]) -> BTreeMap<(i32, i16), usize> {
    let mut counts = BTreeMap::new();
    for r in requests {
        *counts.entry((r.broker, r.api_key)).or_default() += 1;
    }
    counts
}

/// Produces one record per key to `topic`-`partition` of `bootstrap` and
/// waits until all are acknowledged.
fn produce(bootstrap: &str, topic: &str, partition: i32, keys: &[String], idempotent: bool) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", idempotent.to_string())
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    for key in keys {
        let value = format!("value of {key}");
        producer
            .send(BaseRecord::to(topic).partition(partition).key(key).payload(&value))
            .unwrap_or_else(|(e, _)| panic!("queue {key} for {topic}-{partition}: {e}"));
    }
    producer
        .flush(DEADLINE)
        .unwrap_or_else(|e| panic!("flush to {topic}-{partition} at {bootstrap}: {e}"));
}

fn keys(prefix: &str, partition: i32, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|n| format!("{prefix}-{partition}-{n}")).collect()
}

/// Produces `per_partition` records to each partition of `topic` in one
/// committed transaction (the mock writes no COMMIT marker).
fn produce_transaction(bootstrap: &str, topic: &str, partitions: i32, per_partition: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", "control-cli-txn")
        .create()
        .expect("transactional producer");
    producer.init_transactions(DEADLINE).expect("init transactions");
    producer.begin_transaction().expect("begin");
    for p in 0..partitions {
        for key in keys("txn", p, 0..per_partition) {
            producer
                .send(BaseRecord::to(topic).partition(p).key(&key).payload("in a transaction"))
                .expect("queued");
        }
    }
    producer.commit_transaction(DEADLINE).expect("commit");
}

// ---------------------------------------------------------------------------
// The agent process and the CLI
// ---------------------------------------------------------------------------

/// A `ringmirror run` process; its log (stderr) goes to a file.
struct AgentProcess {
    child: ChildGuard,
    log_path: PathBuf,
    /// `http://127.0.0.1:PORT` of the admin API.
    admin: String,
    /// `127.0.0.1:PORT` of the Kafka listener.
    listener: String,
}

/// The `addr=` field of the first log line holding `message`.
fn logged_addr(log: &str, message: &str) -> Option<String> {
    log.lines().filter(|l| l.contains(message)).find_map(|l| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .map(|a| a.trim_matches('"').to_owned())
    })
}

fn write_agent_config(dir: &Path, data_dir: &Path) -> PathBuf {
    let path = dir.join("ringmirror.toml");
    std::fs::write(
        &path,
        format!(
            r#"
data_dir = {data_dir:?}
shards = 2
[listener]
address = "127.0.0.1:0"
[admin]
address = "127.0.0.1:0"
[log]
segment_bytes = 65536
preallocate_bytes = 65536
prefault_bytes = 65536
segment_index_bytes = 65536
"#
        ),
    )
    .expect("write config");
    path
}

impl AgentProcess {
    /// Starts the agent and waits until its admin API and listener are up
    /// (their ports, picked by the kernel, are read from its log).
    fn start(config: &Path, log_path: PathBuf) -> Self {
        Self::start_with(config, log_path, &[])
    }

    /// [`AgentProcess::start`] with more environment (a crash point).
    fn start_with(config: &Path, log_path: PathBuf, env: &[(&str, &str)]) -> Self {
        let child = common::run_agent_binary(config, &log_path, env);
        Self::started(child, log_path)
    }

    /// The agent with `mount` on a tmpfs of `size_kib` of its own (a mount
    /// namespace of its own: nothing is mounted on the host), `ballast_kib`
    /// of it taken by a file `ballast` there.
    fn start_on_small_disk(config: &Path, log_path: PathBuf, mount: &Path, size_kib: u64, ballast_kib: u64) -> Self {
        let mut command = Command::new("unshare");
        // Root needs no user namespace to mount (and keeps its memlock limit).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            command.arg("--map-root-user");
        }
        command
            .args(["--mount", "sh", "-c"])
            .arg(r#"mount -t tmpfs -o size="$1k" tmpfs "$0" && head -c "$2k" /dev/zero >"$0/ballast" && exec "$3" run --config "$4""#)
            .arg(mount)
            .arg(size_kib.to_string())
            .arg(ballast_kib.to_string())
            .arg(env!("CARGO_BIN_EXE_ringmirror"))
            .arg(config);
        common::agent_process_setup(&mut command, &log_path);
        let child = ChildGuard::spawn(&mut command, "ringmirror run on a small tmpfs").expect("start unshare");
        Self::started(child, log_path)
    }

    /// Waits until the admin API and listener of `child` are up.
    fn started(child: ChildGuard, log_path: PathBuf) -> Self {
        let mut agent = Self {
            child,
            log_path,
            admin: String::new(),
            listener: String::new(),
        };
        let started = Instant::now();
        loop {
            agent.assert_running();
            let log = agent.log();
            if let (Some(admin), Some(listener)) = (
                logged_addr(&log, "admin API listening"),
                logged_addr(&log, "serving Kafka clients"),
            ) {
                agent.admin = format!("http://{admin}");
                agent.listener = listener;
                return agent;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "the agent did not start within {DEADLINE:?}; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        common::strip_ansi(&std::fs::read_to_string(&self.log_path).unwrap_or_default())
    }

    /// The last lines of the log, for failure messages.
    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    fn assert_running(&mut self) {
        if !self.child.is_running() {
            let status = self.child.child().wait().expect("reap agent");
            panic!("the agent exited early ({status}); its log:\n{}", self.log());
        }
    }

    /// SIGTERM; checks that it stops cleanly.
    fn terminate(mut self) -> String {
        self.child.signal(libc::SIGTERM);
        let Some(status) = self.child.wait_timeout(DEADLINE) else {
            panic!(
                "the agent did not exit within {DEADLINE:?} of SIGTERM; its log:\n{}",
                self.log()
            );
        };
        let log = self.log();
        assert!(
            status.success(),
            "the agent exited with {status} on SIGTERM; log:\n{log}"
        );
        assert!(log.contains("agent stopped cleanly"), "log:\n{log}");
        log
    }

    /// `ringmirror mirror create dr --bootstrap-servers .. --topics ..`
    /// with `extra` arguments; it must be accepted.
    fn create_mirror(&self, bootstrap: &str, topics: &str, extra: &[&str]) -> String {
        self.define_mirror("create", bootstrap, topics, extra)
    }

    /// `mirror update`: the whole definition again, as the CLI takes it.
    fn update_mirror(&self, bootstrap: &str, topics: &str, extra: &[&str]) -> String {
        self.define_mirror("update", bootstrap, topics, extra)
    }

    fn define_mirror(&self, verb: &str, bootstrap: &str, topics: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "mirror",
            verb,
            "dr",
            "--bootstrap-servers",
            bootstrap,
            "--topics",
            topics,
        ];
        args.extend_from_slice(extra);
        self.cli_ok(&args)
    }

    /// `ringmirror <args> --admin <this agent>`.
    fn cli(&self, args: &[&str]) -> CliRun {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ringmirror"));
        command.args(args).args(["--admin", &self.admin]);
        run_cli(command, args)
    }

    /// A CLI command that must succeed; its stdout.
    fn cli_ok(&self, args: &[&str]) -> String {
        let run = self.cli(args);
        assert!(
            run.status.success(),
            "`ringmirror {}` failed ({}):\nstdout:\n{}\nstderr:\n{}\nagent log:\n{}",
            args.join(" "),
            run.status,
            run.stdout,
            run.stderr,
            self.log_tail()
        );
        run.stdout
    }

    /// A CLI command that must be refused: exit code 1 and a message on
    /// stderr holding every one of `says`.
    fn cli_refused(&self, args: &[&str], says: &[&str]) {
        let run = self.cli(args);
        assert_eq!(
            run.status.code(),
            Some(1),
            "`ringmirror {}` should be refused with exit code 1:\nstdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        for s in says {
            assert!(
                run.stderr.contains(s),
                "`ringmirror {}`: {s:?} missing from the message:\n{}",
                args.join(" "),
                run.stderr
            );
        }
    }

    /// `status --json`: every mirrored partition.
    fn status(&self) -> Vec<PartitionView> {
        let out = self.cli_ok(&["status", "--json"]);
        let answer: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("status --json printed no JSON ({e}):\n{out}"));
        assert_eq!(answer["answer"], "status", "{answer}");
        serde_json::from_value(answer["partitions"].clone()).unwrap_or_else(|e| panic!("partitions ({e}): {answer}"))
    }

    /// Polls `status --json` until `done` holds (bounded by [`DEADLINE`]).
    fn wait_status(&mut self, what: &str, mut done: impl FnMut(&Status) -> bool) -> Status {
        let started = Instant::now();
        loop {
            self.assert_running();
            let status = Status(self.status());
            if done(&status) {
                return status;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "timed out after {DEADLINE:?} waiting for {what}; last status:\n{status:#?}\nagent log (tail):\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

struct CliRun {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs a CLI command with a deadline (killed if it passes).
fn run_cli(mut command: Command, args: &[&str]) -> CliRun {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut command, format!("ringmirror {}", args.join(" "))).expect("start the CLI");
    let mut out_pipe = child.child().stdout.take().expect("piped");
    let mut err_pipe = child.child().stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let Some(status) = child.wait_timeout(DEADLINE) else {
        panic!("`ringmirror {}` did not finish within {DEADLINE:?}", args.join(" "));
    };
    CliRun {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// What `status --json` said.
#[derive(Debug)]
struct Status(Vec<PartitionView>);

impl Status {
    fn get(&self, topic: &str, partition: i32) -> Option<&PartitionView> {
        self.0
            .iter()
            .find(|v| v.mirror == "dr" && v.topic == topic && v.partition == partition)
    }

    fn of(&self, topic: &str, partition: i32) -> &PartitionView {
        self.get(topic, partition)
            .unwrap_or_else(|| panic!("no {topic}-{partition} in {self:#?}"))
    }

    fn state(&self, topic: &str, partition: i32) -> Option<&str> {
        self.get(topic, partition).map(|v| v.state.as_str())
    }

    /// Every partition of `ends` MIRRORING, with the destination and the
    /// source offset the status shows both at the source's high watermark.
    fn caught_up(&self, topic: &str, ends: &BTreeMap<i32, i64>) -> bool {
        ends.iter().all(|(&p, &end)| {
            self.get(topic, p).is_some_and(|v| {
                v.state == "MIRRORING" && v.destination_offset == end && v.source_offset == end && v.lag_messages == 0
            })
        })
    }

    fn all_in(&self, topic: &str, partitions: i32, state: &str) -> bool {
        (0..partitions).all(|p| self.state(topic, p) == Some(state))
    }
}

// ---------------------------------------------------------------------------
// Raw Kafka requests (for what the rdkafka crate does not expose)
// ---------------------------------------------------------------------------

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn connect(addr: &str) -> KafkaConnection {
    KafkaConnection::connect(addr, IO_TIMEOUT).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// The latest offset of `topic`-`partition` (ListOffsets, READ_UNCOMMITTED).
fn latest_offset(addr: &str, topic: &str, partition: i32) -> i64 {
    let request = ListOffsetsRequest::default().with_topics(vec![
        ListOffsetsTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(-1),
            ]),
    ]);
    let r: ListOffsetsResponse = connect(addr)
        .request(ApiKey::ListOffsets as i16, 5, &request)
        .expect("ListOffsets");
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets {topic}-{partition} at {addr}");
    p.offset
}

/// Each partition's leader epoch in our Metadata answer.
fn metadata_leader_epochs(addr: &str, topic: &str) -> BTreeMap<i32, i32> {
    let request = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(s(topic)))),
    ]));
    let r: MetadataResponse = connect(addr)
        .request(ApiKey::Metadata as i16, 9, &request)
        .expect("Metadata");
    let t = &r.topics[0];
    assert_eq!(t.error_code, 0, "Metadata of {topic}");
    t.partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "Metadata of {topic}-{}", p.partition_index);
            (p.partition_index, p.leader_epoch)
        })
        .collect()
}

/// A raw Produce of one small batch; the partition's error code.
fn produce_raw(addr: &str, topic: &str, partition: i32) -> i16 {
    let batch = BatchBuilder {
        records: vec![BuildRecord {
            timestamp: 1_700_000_000_000,
            key: Some(b"raw".to_vec()),
            value: Some(b"must not land".to_vec()),
            headers: Vec::new(),
        }],
        ..BatchBuilder::default()
    }
    .build();
    let request = ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(s(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(Bytes::from(batch))),
                ]),
        ]);
    let r: ProduceResponse = connect(addr)
        .request(ApiKey::Produce as i16, 7, &request)
        .expect("Produce");
    r.responses[0].partition_responses[0].error_code
}

/// CreateTopics at the agent: a local (writable) topic.
fn create_local_topic(addr: &str, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(partitions)
            .with_replication_factor(1),
    ]);
    let r: CreateTopicsResponse = connect(addr)
        .request(ApiKey::CreateTopics as i16, 5, &request)
        .expect("CreateTopics");
    assert_eq!(r.topics[0].error_code, 0, "CreateTopics {topic}: {:?}", r.topics[0]);
}

/// (offset, leader epoch) that `group` has committed for each partition of
/// `topic`, asked of the group's coordinator (OffsetFetch v6).
fn committed_offsets(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, (i64, i32)> {
    let first = bootstrap.split(',').next().expect("a broker");
    let r: FindCoordinatorResponse = connect(first)
        .request(
            ApiKey::FindCoordinator as i16,
            1,
            &FindCoordinatorRequest::default().with_key(s(group)).with_key_type(0),
        )
        .expect("FindCoordinator");
    assert_eq!(r.error_code, 0, "FindCoordinator of {group}: {r:?}");
    let coordinator = format!("{}:{}", r.host.as_str(), r.port);
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes((0..partitions).collect()),
        ]));
    let r: OffsetFetchResponse = connect(&coordinator)
        .request(ApiKey::OffsetFetch as i16, 6, &request)
        .expect("OffsetFetch");
    assert_eq!(r.error_code, 0, "OffsetFetch of {group}: {r:?}");
    r.topics[0]
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "OffsetFetch of {group} {topic}-{}", p.partition_index);
            (p.partition_index, (p.committed_offset, p.committed_leader_epoch))
        })
        .collect()
}

/// One batch as stored: (base offset, next offset, leader epoch, control, bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
struct BatchInfo {
    base: i64,
    next: i64,
    epoch: i32,
    control: bool,
    bytes: Vec<u8>,
}

fn batch_infos(batches: &[(i64, Vec<u8>)]) -> Vec<BatchInfo> {
    batches
        .iter()
        .map(|(base, bytes)| {
            let b = RecordBatch::new(&bytes[..]).expect("one whole batch");
            BatchInfo {
                base: *base,
                next: b.next_offset(),
                epoch: b.partition_leader_epoch(),
                control: b.is_control(),
                bytes: bytes.clone(),
            }
        })
        .collect()
}

/// Every batch the agent serves of `topic`-`partition`, from offset 0.
fn destination_batches(addr: &str, topic: &str, partition: i32) -> Vec<BatchInfo> {
    let (responses, _) = connect(addr)
        .fetch_all(topic, partition, 0, 10_000)
        .unwrap_or_else(|e| panic!("fetch {topic}-{partition} from the agent: {e}"));
    batch_infos(&responses.into_iter().flatten().collect::<Vec<_>>())
}

/// (offset, key) of every data record of `batches`.
fn data_records(batches: &[BatchInfo]) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for b in batches.iter().filter(|b| !b.control) {
        let batch = RecordBatch::new(&b.bytes[..]).expect("one whole batch");
        for r in decode_records(&batch, common::MAX_DECOMPRESSED_BYTES).expect("decode records") {
            let key = String::from_utf8(r.key.expect("every record has a key")).expect("utf-8 key");
            out.push((r.offset, key));
        }
    }
    out
}

/// Consumes `topic`-`partition` of the source from the beginning in group
/// `group` (offsets stored as records are handed out, with their leader
/// epochs) and commits right after the record at `target - 1`.
fn consume_and_commit_at_source(bootstrap: &str, group: &str, topic: &str, partition: i32, target: i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "true")
        .set("isolation.level", "read_uncommitted")
        .create()
        .expect("source consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < DEADLINE,
            "{topic}-{partition}: the source consumer did not reach offset {target}"
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                assert!(m.offset() < target, "{topic}-{partition}: skipped past {target}");
                if m.offset() == target - 1 {
                    break;
                }
            }
            Some(Err(e)) => panic!("source consumer: {e}"),
            None => {}
        }
    }
    consumer
        .commit_consumer_state(CommitMode::Sync)
        .expect("commit at the source");
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// Create, mirror, pause (no Fetch reaches the source), resume, refused
/// requests, stop (failover: writable, DLE > SLE), and a consumer group
/// committed at the source resuming at the destination.
#[test]
fn cli_creates_pauses_resumes_and_fails_over_a_mirror() {
    const TOPIC: &str = "orders";
    const PARTITIONS: i32 = 2;
    const GROUP: &str = "g";

    let source = Source::start(3);
    let mock = source.mock();
    mock.create_topic(TOPIC, PARTITIONS, 1).expect("source topic");
    // Epoch 0: keyed records; epoch 1: a committed transaction; epoch 2: more.
    for p in 0..PARTITIONS {
        produce(&source.bootstrap, TOPIC, p, &keys("a", p, 0..30), true);
        mock.partition_leader(TOPIC, p, Some((p + 1) % 3 + 1))
            .expect("move the leader");
    }
    produce_transaction(&source.bootstrap, TOPIC, PARTITIONS, 10);
    for p in 0..PARTITIONS {
        mock.partition_leader(TOPIC, p, Some((p + 2) % 3 + 1))
            .expect("move the leader");
        produce(&source.bootstrap, TOPIC, p, &keys("b", p, 0..30), false);
    }
    let ends = source.ends(TOPIC, PARTITIONS);
    assert!(ends.values().all(|&e| e == 70), "source ends {ends:?}");

    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));
    let started = Instant::now();

    // ---- create ----
    let create = [
        "mirror",
        "create",
        "dr",
        "--bootstrap-servers",
        &source.bootstrap,
        "--topics",
        TOPIC,
        "--fetch-max-wait-ms",
        "100",
        "--metadata-refresh-interval-ms",
        "1000",
    ];
    let out = agent.cli_ok(&create);
    assert!(out.contains("create dr: accepted"), "{out}");
    agent.wait_status("the mirror to catch up", |s| s.caught_up(TOPIC, &ends));

    let list: serde_json::Value = serde_json::from_str(&agent.cli_ok(&["mirror", "list", "--json"])).unwrap();
    let mirrors = list["mirrors"].as_array().expect("mirrors");
    assert_eq!(mirrors.len(), 1, "{list}");
    assert_eq!(mirrors[0]["name"], "dr");
    assert_eq!(mirrors[0]["partitions"], PARTITIONS);
    assert_eq!(mirrors[0]["states"], serde_json::json!({"MIRRORING": PARTITIONS}));
    let table = agent.cli_ok(&["status"]);
    for p in 0..PARTITIONS {
        let row = ["dr", TOPIC, &p.to_string(), "MIRRORING", "70", "70", "0", "0.0"];
        assert!(
            table.lines().any(|l| l.split_whitespace().eq(row)),
            "no row {row:?} in the status table:\n{table}"
        );
    }
    let table = agent.cli_ok(&["mirror", "list"]);
    assert!(
        table.contains("NAME") && table.contains("dr") && table.contains("MIRRORING=2"),
        "{table}"
    );
    let described: serde_json::Value =
        serde_json::from_str(&agent.cli_ok(&["mirror", "describe", "dr", "--json"])).unwrap();
    let mirror = &described["mirror"];
    assert_eq!(mirror["config"]["topics"], serde_json::json!([TOPIC]), "{described}");
    assert_eq!(mirror["topics"], serde_json::json!([TOPIC]), "{described}");
    assert!(mirror["source_cluster_id"].is_string(), "{described}");
    assert_eq!(mirror["partitions"].as_array().map(Vec::len), Some(2), "{described}");
    let text = agent.cli_ok(&["mirror", "describe", "dr"]);
    assert!(text.contains("topics mirrored:") && text.contains(TOPIC), "{text}");
    assert_eq!(text.matches("MIRRORING").count(), 2, "{text}");

    // A mirror topic is read-only.
    for p in 0..PARTITIONS {
        assert_eq!(produce_raw(&agent.listener, TOPIC, p), READ_ONLY_TOPIC, "partition {p}");
    }

    // ---- pause: not one Fetch reaches the source ----
    let out = agent.cli_ok(&["mirror", "pause", "dr"]);
    assert!(out.contains("pause dr: accepted (2 partitions)"), "{out}");
    agent.wait_status("PAUSED", |s| s.all_in(TOPIC, PARTITIONS, "PAUSED"));
    // PAUSED is shown once the fetchers have let the partitions go: from
    // then on, not one Fetch may reach the source.
    source.track_requests();
    for p in 0..PARTITIONS {
        produce(&source.bootstrap, TOPIC, p, &keys("c", p, 0..20), false);
    }
    let grown = source.ends(TOPIC, PARTITIONS);
    assert!(grown.values().all(|&e| e == 90), "source ends {grown:?}");
    std::thread::sleep(Duration::from_secs(2));

    // Refused requests say why (while the window goes on).
    agent.cli_refused(&["mirror", "pause", "dr", TOPIC], &["already paused", "HTTP 409"]);
    agent.cli_refused(
        &["mirror", "pause", "nosuch"],
        &["unknown mirror", "nosuch", "HTTP 404"],
    );
    agent.cli_refused(&create, &["exists", "HTTP 409"]);
    agent.cli_refused(
        &["mirror", "resume", "dr", "other"],
        &["\"other\" is not in mirror", "HTTP 404"],
    );

    let during = source.tracked();
    let fetches: Vec<&TrackedRequest> = during.iter().filter(|r| r.api_key == FETCH).collect();
    assert!(
        fetches.is_empty(),
        "paused, yet {} Fetch requests reached the source (brokers {:?}); every request while paused, per (broker, api key): {:?}; \
         in order as (broker, api key, µs since the first): {:?}\nagent log (tail):\n{}",
        fetches.len(),
        fetches.iter().map(|r| r.broker).collect::<BTreeSet<_>>(),
        request_counts(&during),
        during
            .iter()
            .map(|r| (r.broker, r.api_key, r.micros - during[0].micros))
            .collect::<Vec<_>>(),
        agent.log_tail()
    );
    let paused = Status(agent.status());
    for p in 0..PARTITIONS {
        let v = paused.of(TOPIC, p);
        assert_eq!(
            (v.state.as_str(), v.destination_offset),
            ("PAUSED", ends[&p]),
            "partition {p} moved while paused"
        );
        assert_eq!(latest_offset(&agent.listener, TOPIC, p), ends[&p], "partition {p}");
    }

    // ---- resume: fetching starts again and catches up ----
    source.track_requests();
    let out = agent.cli_ok(&["mirror", "resume", "dr"]);
    assert!(out.contains("resume dr: accepted (2 partitions)"), "{out}");
    agent.wait_status("the resumed mirror to catch up", |s| s.caught_up(TOPIC, &grown));
    let after = source.tracked();
    source.stop_tracking();
    assert!(
        after.iter().any(|r| r.api_key == FETCH),
        "resumed, but no Fetch reached the source: {:?}",
        request_counts(&after)
    );

    // ---- group "g" commits at the source, with the record's leader epoch ----
    let targets: BTreeMap<i32, i64> = [(0, 55), (1, 48)].into();
    for (&p, &target) in &targets {
        consume_and_commit_at_source(&source.bootstrap, GROUP, TOPIC, p, target);
    }
    let source_batches: BTreeMap<i32, Vec<BatchInfo>> = (0..PARTITIONS)
        .map(|p| {
            let log = common::source_partition_log(&source.bootstrap, TOPIC, p, DEADLINE);
            assert_eq!(log.high_watermark, grown[&p]);
            (p, batch_infos(&log.batches))
        })
        .collect();
    let committed = committed_offsets(&source.bootstrap, GROUP, TOPIC, PARTITIONS);
    for (&p, &target) in &targets {
        let holding = source_batches[&p]
            .iter()
            .find(|b| b.base < target && target <= b.next)
            .expect("the batch of the last consumed record");
        assert_eq!(
            committed[&p],
            (target, holding.epoch),
            "partition {p}: the source's committed (offset, leader epoch)"
        );
        assert_eq!(
            holding.epoch, 2,
            "partition {p}: committed in the source's latest epoch"
        );
    }
    let max_source_epoch = source_batches.values().flatten().map(|b| b.epoch).max().unwrap();
    assert_eq!(max_source_epoch, 2, "source leader epochs 0, 1, 2");

    // ---- stop (failover) ----
    let out = agent.cli_ok(&["mirror", "stop", "dr"]);
    assert!(out.contains("stop dr: accepted (2 partitions)"), "{out}");
    let stopped = agent.wait_status("STOPPED", |s| s.all_in(TOPIC, PARTITIONS, "STOPPED"));
    let ended: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, latest_offset(&agent.listener, TOPIC, p)))
        .collect();
    for p in 0..PARTITIONS {
        // The transaction the mock never marked is aborted, and a
        // MIRROR_PID_RESET follows: two markers after the mirrored data.
        assert_eq!(ended[&p], grown[&p] + 2, "partition {p}: the end after the markers");
        assert_eq!(stopped.of(TOPIC, p).destination_offset, ended[&p], "partition {p}");
    }
    agent.cli_refused(&["mirror", "stop", "dr", TOPIC], &["being stopped", "HTTP 409"]);

    // Ordinary clients write to it now.
    for p in 0..PARTITIONS {
        produce(&agent.listener, TOPIC, p, &keys("local", p, 0..10), true);
        assert_eq!(
            latest_offset(&agent.listener, TOPIC, p),
            ended[&p] + 10,
            "partition {p}"
        );
    }
    let metadata_epochs = metadata_leader_epochs(&agent.listener, TOPIC);
    let status = Status(agent.status());
    for p in 0..PARTITIONS {
        let ours = destination_batches(&agent.listener, TOPIC, p);
        let (mirrored, after_stop): (Vec<&BatchInfo>, Vec<&BatchInfo>) = ours.iter().partition(|b| b.base < grown[&p]);
        // The mirrored part is the source's, byte for byte.
        assert_eq!(
            mirrored.len(),
            source_batches[&p].len(),
            "partition {p}: mirrored batches"
        );
        for (o, s) in mirrored.iter().zip(&source_batches[&p]) {
            assert_eq!(
                (o.base, &o.bytes),
                (s.base, &s.bytes),
                "partition {p}: batch at {}",
                s.base
            );
        }
        let local: Vec<&&BatchInfo> = after_stop.iter().filter(|b| !b.control).collect();
        assert!(
            !local.is_empty() && after_stop.iter().any(|b| b.control),
            "partition {p}: markers and local batches after the mirrored data; (base, epoch, control): {:?}",
            after_stop
                .iter()
                .map(|b| (b.base, b.epoch, b.control))
                .collect::<Vec<_>>()
        );
        for b in &after_stop {
            assert!(
                b.epoch > max_source_epoch,
                "partition {p}: the batch at {} written after the stop carries leader epoch {}, not above the mirrored {max_source_epoch}",
                b.base,
                b.epoch
            );
        }
        let dle = metadata_epochs[&p];
        assert!(
            dle > max_source_epoch,
            "partition {p}: Metadata's leader epoch {dle} must be above every mirrored batch's ({max_source_epoch})"
        );
        for b in &local {
            assert_eq!(
                b.epoch, dle,
                "partition {p}: local writes carry the leader epoch Metadata shows"
            );
        }
        assert_eq!(
            status.of(TOPIC, p).destination_leader_epoch,
            dle,
            "partition {p}: the status' destination leader epoch"
        );
    }

    // ---- group "g" resumes at the destination ----
    // Metadata sync of group offsets comes later: commit what the source has.
    let offsets: Vec<(i32, i64, i32)> = committed.iter().map(|(&p, &(o, e))| (p, o, e)).collect();
    common::admin_commit(&agent.listener, GROUP, TOPIC, &offsets, "");
    let mut expected: BTreeSet<(i32, i64, String)> = BTreeSet::new();
    for p in 0..PARTITIONS {
        let (from, _) = committed[&p];
        let mirrored: Vec<(i64, String)> = data_records(&source_batches[&p]);
        expected.extend(mirrored.into_iter().filter(|(o, _)| *o >= from).map(|(o, k)| (p, o, k)));
        expected.extend(
            keys("local", p, 0..10)
                .into_iter()
                .enumerate()
                .map(|(n, k)| (p, ended[&p] + n as i64, k)),
        );
    }
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &agent.listener)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .create()
        .expect("destination consumer");
    consumer.subscribe(&[TOPIC]).expect("subscribe");
    let mut received: Vec<(i32, i64, String)> = Vec::new();
    let resumed = Instant::now();
    while received.len() < expected.len() {
        assert!(
            resumed.elapsed() < DEADLINE,
            "group {GROUP:?} did not get its records at the destination within {DEADLINE:?} (a committed leader epoch above the destination's makes librdkafka refresh metadata forever): {} of {} received; missing {:?}\nagent log (tail):\n{}",
            received.len(),
            expected.len(),
            expected
                .iter()
                .filter(|e| !received.contains(e))
                .take(10)
                .collect::<Vec<_>>(),
            agent.log_tail()
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let key = String::from_utf8(m.key().expect("keyed").to_vec()).expect("utf-8 key");
                let record = (m.partition(), m.offset(), key);
                assert!(
                    expected.contains(&record),
                    "group {GROUP:?} received {record:?}, not a record after its committed offsets {committed:?}"
                );
                received.push(record);
            }
            Some(Err(e)) => panic!("destination consumer: {e}"),
            None => {}
        }
    }
    let distinct: BTreeSet<(i32, i64, String)> = received.iter().cloned().collect();
    assert_eq!(distinct.len(), received.len(), "records received twice");
    assert_eq!(distinct, expected);
    drop(consumer);

    agent.terminate();
    eprintln!(
        "create → pause → resume → failover → group resumed in {:.1?}: mirrored epochs up to {max_source_epoch}, \
         Metadata leader epochs after the stop {metadata_epochs:?}, committed (offset, epoch) {committed:?}",
        started.elapsed()
    );
}

/// `mirror pause dr` (no topics) when every partition is already paused
/// is refused as already paused, like `mirror pause dr <topic>`.
#[test]
fn pausing_a_paused_mirror_again_is_refused() {
    const TOPIC: &str = "again";
    let source = Source::start(1);
    source.mock().create_topic(TOPIC, 1, 1).expect("source topic");
    produce(&source.bootstrap, TOPIC, 0, &keys("a", 0, 0..5), false);
    let ends = source.ends(TOPIC, 1);
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));
    agent.create_mirror(&source.bootstrap, TOPIC, &["--fetch-max-wait-ms", "100"]);
    agent.wait_status("the mirror to catch up", |s| s.caught_up(TOPIC, &ends));
    agent.cli_ok(&["mirror", "pause", "dr"]);
    agent.wait_status("PAUSED", |s| s.all_in(TOPIC, 1, "PAUSED"));
    agent.cli_refused(&["mirror", "pause", "dr"], &["already paused", "HTTP 409"]);
    agent.terminate();
}

/// `mirror update` reaches partitions that are already mirroring, without
/// a restart: at a caught-up source each Fetch waits `fetch_max_wait_ms`
/// there (the mock honours it), so the rate of Fetch requests shows the
/// wait in force. Mirroring goes on across the change.
#[test]
fn mirror_update_changes_the_fetch_wait_of_running_partitions() {
    const TOPIC: &str = "tuned";
    const WINDOW: Duration = Duration::from_secs(2);
    let source = Source::start(1);
    source.mock().create_topic(TOPIC, 1, 1).expect("source topic");
    produce(&source.bootstrap, TOPIC, 0, &keys("a", 0, 0..5), false);
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));
    agent.create_mirror(&source.bootstrap, TOPIC, &["--fetch-max-wait-ms", "1000"]);
    let ends = source.ends(TOPIC, 1);
    agent.wait_status("the mirror to catch up", |s| s.caught_up(TOPIC, &ends));
    let fetches_in_window = || {
        source.track_requests();
        let from = monotonic_micros();
        std::thread::sleep(WINDOW);
        let to = monotonic_micros();
        let n = source
            .tracked()
            .iter()
            .filter(|r| r.api_key == FETCH && (from..to).contains(&r.micros))
            .count();
        source.stop_tracking();
        n
    };
    let slow = fetches_in_window();
    assert!(
        slow <= 4,
        "{slow} Fetch requests in {WINDOW:?} with a 1000 ms fetch wait"
    );
    agent.update_mirror(&source.bootstrap, TOPIC, &["--fetch-max-wait-ms", "10"]);
    // The Fetch waiting at the source when the update lands still has the old wait.
    std::thread::sleep(Duration::from_millis(1500));
    let fast = fetches_in_window();
    assert!(
        fast >= 20,
        "{fast} Fetch requests in {WINDOW:?} after the fetch wait was updated to 10 ms (before: {slow})"
    );
    produce(&source.bootstrap, TOPIC, 0, &keys("b", 0, 0..5), false);
    let ends = source.ends(TOPIC, 1);
    agent.wait_status("the mirror to catch up after the update", |s| {
        s.caught_up(TOPIC, &ends) && s.all_in(TOPIC, 1, "MIRRORING")
    });
    agent.terminate();
}

/// Changing a mirror's servers to another cluster's moves nothing there:
/// the data plane does not act on metadata from a cluster other than the
/// one it follows (the control plane halts the mirror's sync for the same
/// reason), so a partition that leaves its fetcher waits instead of
/// fetching — and truncating against — another cluster's log, and
/// mirrors again once the servers are put back.
#[test]
fn servers_of_another_cluster_are_not_fetched_from() {
    const TOPIC: &str = "pinned";
    const OFFSET_FOR_LEADER_EPOCH: i16 = 23;
    const LIST_OFFSETS: i16 = 2;
    let a = Source::start(1);
    let b = Source::start(1);
    for source in [&a, &b] {
        source.mock().create_topic(TOPIC, 1, 1).expect("source topic");
    }
    produce(&a.bootstrap, TOPIC, 0, &keys("a", 0, 0..5), false);
    produce(&b.bootstrap, TOPIC, 0, &keys("b", 0, 0..2), false);
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));
    let refresh = ["--fetch-max-wait-ms", "50", "--metadata-refresh-interval-ms", "200"];
    agent.create_mirror(&a.bootstrap, TOPIC, &refresh);
    let ends = a.ends(TOPIC, 1);
    agent.wait_status("the mirror to catch up", |s| s.caught_up(TOPIC, &ends));
    let before = destination_batches(&agent.listener, TOPIC, 0);
    agent.update_mirror(&b.bootstrap, TOPIC, &refresh);
    b.track_requests();
    // A's broker goes away: the partition leaves its fetcher for fresh
    // metadata, which only B's servers would give.
    a.mock().broker_down(1).expect("A's broker down");
    let deadline = Instant::now() + DEADLINE;
    while !(agent.log().contains("not acting on its metadata")
        && agent.log().contains("cannot connect to source broker"))
    {
        assert!(Instant::now() < deadline, "no refusal logged:\n{}", agent.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Time for the fetcher to give up on A and hand the partition back.
    std::thread::sleep(Duration::from_secs(4));
    let at_b: Vec<i16> = b
        .tracked()
        .iter()
        .map(|r| r.api_key)
        .filter(|k| [FETCH, OFFSET_FOR_LEADER_EPOCH, LIST_OFFSETS].contains(k))
        .collect();
    b.stop_tracking();
    assert!(
        at_b.is_empty(),
        "the agent sent partition requests (API keys {at_b:?}) to another cluster"
    );
    assert_eq!(
        destination_batches(&agent.listener, TOPIC, 0),
        before,
        "the mirrored log changed"
    );
    let status = agent.wait_status("the partition to stay mirrored", |_| true);
    assert_ne!(status.state(TOPIC, 0), Some("STOPPED"), "the partition was stopped");
    // The operator puts A's servers back: mirroring carries on from A.
    a.mock().broker_up(1).expect("A's broker up");
    agent.update_mirror(&a.bootstrap, TOPIC, &refresh);
    produce(&a.bootstrap, TOPIC, 0, &keys("a", 0, 5..8), false);
    let ends = a.ends(TOPIC, 1);
    agent.wait_status("the mirror to catch up with A again", |s| s.caught_up(TOPIC, &ends));
    agent.terminate();
}

// ---------------------------------------------------------------------------
// A DR copy on a small disk, and what happens to it in PREPARING
// ---------------------------------------------------------------------------

/// The topic the small-disk tests fill.
const FILL: &str = "fill";
/// A second topic of the mirror (a mirror names at least one).
const KEEP: &str = "keep";
/// The first segment of `fill-0`, which stays the same file when the copy is kept.
const FIRST_SEGMENT: &str = "00000000000000000000.log";

/// An agent whose data directory is on a tmpfs of its own, 32 MiB with 27
/// MiB of it ballast: its state (~3 MiB) and about 2 MiB of records fit.
struct SmallDisk {
    agent: AgentProcess,
    /// Where the tmpfs is mounted (in the agent's mount namespace).
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        let config = write_agent_config(dir.path(), &mount.join("data"));
        // 3 MiB free: less than the ~3 MB of filler with its indexes (the
        // agent's own logs reserve little ahead of their data).
        let agent =
            AgentProcess::start_on_small_disk(&config, dir.path().join("agent.log"), &mount, 32 << 10, 29 << 10);
        Self {
            agent,
            mount,
            _dir: dir,
        }
    }

    /// `path` under the mount, as seen from outside the agent's mount namespace.
    fn outside(&mut self, path: &str) -> PathBuf {
        let pid = self.agent.child.child().id();
        PathBuf::from(format!("/proc/{pid}/root"))
            .join(self.mount.strip_prefix("/").unwrap())
            .join(path)
    }

    /// The inode of `fill-0`'s first segment file.
    fn first_segment_inode(&mut self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let path = self.outside(&format!("data/{FILL}-0/{FIRST_SEGMENT}"));
        std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .ino()
    }

    /// Produces to `fill` at `source` until `fill-0` goes FAILED on the
    /// full disk; returns what the agent kept serving.
    fn fill_until_failed(&mut self, source: &str) -> Vec<(i64, Vec<u8>)> {
        produce_filler(source, FILL, 0..3000);
        let failed = self.agent.wait_status("the partition to fail on the full disk", |s| {
            s.state(FILL, 0) == Some("FAILED")
        });
        let error = failed.of(FILL, 0).error.clone().unwrap_or_default();
        assert!(
            error.contains("No space left on device"),
            "FAILED with {error:?}, not the disk's error"
        );
        let kept = served_batches(&self.agent.listener, FILL);
        let all = served_batches(source, FILL);
        assert!(
            !kept.is_empty() && kept.len() < all.len(),
            "kept {} of {} batches",
            kept.len(),
            all.len()
        );
        assert!(
            all.starts_with(&kept),
            "the batches served while the disk is full are not the source's prefix"
        );
        kept
    }

    /// Frees the space, from outside the agent's mount namespace.
    fn free_space(&mut self) {
        let ballast = self.outside("ballast");
        std::fs::remove_file(&ballast).unwrap_or_else(|e| panic!("remove {}: {e}", ballast.display()));
    }

    /// Waits until `fill-0` is MIRRORING at `source`'s log end, then checks
    /// that the copy was kept: its first segment is still the file
    /// `inode`, `ringmirror_partition_truncations_total` is 0, the bytes
    /// mirrored (since the partition was last added) are `expected_bytes`
    /// — nothing was fetched twice — and it is `source`'s log, byte for byte.
    fn assert_kept(&mut self, what: &str, source: &str, inode: u64, expected_bytes: u64) {
        let ends = BTreeMap::from([(0, latest_offset(source, FILL, 0))]);
        self.agent
            .wait_status(&format!("mirroring to catch up after {what}"), |s| {
                s.caught_up(FILL, &ends) && s.all_in(FILL, 1, "MIRRORING")
            });
        assert_eq!(
            self.first_segment_inode(),
            inode,
            "{what}: the first segment is another file"
        );
        assert_eq!(
            partition_metric(&self.agent, "ringmirror_partition_truncations_total", FILL),
            0,
            "{what}: the log was truncated"
        );
        assert_eq!(
            partition_metric(&self.agent, "ringmirror_partition_bytes_mirrored_total", FILL),
            expected_bytes,
            "{what}: bytes fetched and appended"
        );
        let mirrored = served_batches(&self.agent.listener, FILL);
        let all = served_batches(source, FILL);
        assert_eq!(mirrored.len(), all.len(), "{what}: batch count");
        assert!(
            mirrored == all,
            "{what}: the mirrored log is not the source's, byte for byte"
        );
    }
}

/// Produces a record `k<i>` with a 1000-byte value for every `i` of
/// `range` to `topic`-0 of `bootstrap`, flushing every 100.
fn produce_filler(bootstrap: &str, topic: &str, range: std::ops::Range<usize>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let value = vec![b'v'; 1000];
    for i in range {
        let key = format!("k{i}");
        producer
            .send(BaseRecord::to(topic).partition(0).key(&key).payload(&value))
            .unwrap_or_else(|(e, _)| panic!("queue record {i}: {e}"));
        if i % 100 == 99 {
            producer.flush(DEADLINE).expect("flush");
        }
    }
    producer.flush(DEADLINE).expect("flush");
}

/// Every batch `addr` serves of `topic`-0, as stored (offset, bytes).
fn served_batches(addr: &str, topic: &str) -> Vec<(i64, Vec<u8>)> {
    let (responses, _) = connect(addr)
        .fetch_all(topic, 0, 0, 10_000)
        .unwrap_or_else(|e| panic!("fetch from {addr}: {e}"));
    responses.into_iter().flatten().collect()
}

/// Bytes of the batches of `batches` from offset `from` on.
fn bytes_from(batches: &[(i64, Vec<u8>)], from: i64) -> u64 {
    batches
        .iter()
        .filter(|(base, _)| *base >= from)
        .map(|(_, b)| b.len() as u64)
        .sum()
}

/// The value of partition metric `name` of mirror `dr`'s `topic`-0 in the
/// agent's `/metrics`.
fn partition_metric(agent: &AgentProcess, name: &str, topic: &str) -> u64 {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(IO_TIMEOUT))
        .build()
        .into();
    let text = http
        .get(format!("{}/metrics", agent.admin))
        .call()
        .and_then(|mut r| r.body_mut().read_to_string())
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    let series = format!(r#"{name}{{mirror="dr",topic="{topic}",partition="0"}} "#);
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
}

/// How often the agent has logged that a partition is no longer mirrored.
fn removals_logged(agent: &AgentProcess) -> usize {
    agent.log().matches("partition no longer mirrored").count()
}

/// A full disk: the partition that cannot append goes FAILED with the
/// disk's error and keeps serving every batch it had (byte-identical to
/// the source's); the agent goes on (admin API, listener); once space is
/// freed, the retries carry on mirroring from the log end, and the result
/// is the source's log, byte for byte, with no gap or duplicate. The
/// automatic retry goes through PREPARING, where the mock answers no last
/// mirror epoch (-1): the copy is kept all the same — the same first
/// segment file, no truncation, only the new batches fetched.
#[test]
fn a_full_disk_fails_the_partition_and_mirroring_resumes_once_space_is_freed() {
    let source = Source::start(1);
    source.mock().create_topic(FILL, 1, 1).expect("source topic");
    let mut disk = SmallDisk::start();
    disk.agent
        .create_mirror(&source.bootstrap, FILL, &["--fetch-max-wait-ms", "50"]);
    disk.fill_until_failed(&source.bootstrap);
    let inode = disk.first_segment_inode();
    disk.free_space();
    // Counted since the partition was added: every batch once.
    let all = served_batches(&source.bootstrap, FILL);
    disk.assert_kept("the automatic retry", &source.bootstrap, inode, bytes_from(&all, 0));
    let log = disk.agent.terminate();
    assert!(log.contains("No space left on device"), "the full disk was not logged");
}

/// Every operator path back through PREPARING keeps a DR copy whose
/// source answers no last mirror epoch for it (-1): `mirror restart` of a
/// partition FAILED on a full disk, `remove-topics` then `add-topics`, and
/// `mirror delete` then `mirror create`. Each time the partition resumes
/// at its log end — the same first segment file, no truncation, only the
/// batches produced since fetched — and ends as the source's log, byte
/// for byte. `source` serves topics `fill` and [`KEEP`] (one partition
/// each; the mirror keeps naming `keep` when `fill` is removed).
fn operator_paths_keep_the_dr_copy(source: &str) {
    let mut disk = SmallDisk::start();
    let quick = ["--fetch-max-wait-ms", "50"];
    let topics = format!("{FILL},{KEEP}");
    disk.agent.create_mirror(source, &topics, &quick);
    disk.fill_until_failed(source);
    // The automatic retries fail on the full disk too; after two, the next
    // is seconds away, so the restart below is the operator's.
    disk.agent.wait_status("two automatic retries to fail", |s| {
        s.get(FILL, 0)
            .is_some_and(|v| v.state == "FAILED" && v.retry_attempt >= 2)
    });
    let inode = disk.first_segment_inode();
    disk.free_space();
    disk.agent.cli_ok(&["mirror", "restart", "dr", FILL]);
    let all = served_batches(source, FILL);
    disk.assert_kept("mirror restart", source, inode, bytes_from(&all, 0));
    assert_eq!(
        Status(disk.agent.status()).of(FILL, 0).retry_attempt,
        0,
        "resumed by the restart, not an automatic retry"
    );

    // Caught up: the log ends where the source does.
    let end = latest_offset(source, FILL, 0);
    let removed = removals_logged(&disk.agent);
    disk.agent.cli_ok(&["mirror", "remove-topics", "dr", FILL]);
    common::wait_until(DEADLINE, "the shard to let the partition go", || {
        (removals_logged(&disk.agent) > removed)
            .then_some(())
            .ok_or_else(|| disk.agent.log_tail())
    });
    produce_filler(source, FILL, 3000..3200);
    disk.agent.cli_ok(&["mirror", "add-topics", "dr", FILL]);
    let all = served_batches(source, FILL);
    disk.assert_kept("remove-topics and add-topics", source, inode, bytes_from(&all, end));

    // Caught up: the log ends where the source does.
    let end = latest_offset(source, FILL, 0);
    let removed = removals_logged(&disk.agent);
    disk.agent.cli_ok(&["mirror", "delete", "dr"]);
    common::wait_until(DEADLINE, "the shard to let the partition go", || {
        (removals_logged(&disk.agent) > removed)
            .then_some(())
            .ok_or_else(|| disk.agent.log_tail())
    });
    produce_filler(source, FILL, 3200..3400);
    disk.agent.create_mirror(source, &topics, &quick);
    let all = served_batches(source, FILL);
    disk.assert_kept("mirror delete and mirror create", source, inode, bytes_from(&all, end));
    disk.agent.terminate();
}

#[test]
fn operator_paths_keep_a_dr_copy_of_the_mock() {
    let source = Source::start(1);
    for topic in [FILL, KEEP] {
        source.mock().create_topic(topic, 1, 1).expect("source topic");
    }
    operator_paths_keep_the_dr_copy(&source.bootstrap);
}

/// The same with another agent as the source: it answers
/// DescribeClusterMirrors (API 99), with -1 for a topic of its own.
#[test]
fn operator_paths_keep_a_dr_copy_of_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let source = AgentProcess::start(&config, dir.path().join("source.log"));
    for topic in [FILL, KEEP] {
        create_local_topic(&source.listener, topic, 1);
    }
    operator_paths_keep_the_dr_copy(&source.listener);
    source.terminate();
}

/// The instant `GET /status` shows PAUSED, no Fetch may reach the source
/// any more (README: pausing "stops fetching (no Fetch request reaches
/// the source for those partitions)"; DESIGN: PAUSED means no fetcher).
/// Pause/resume rounds, each looking for a Fetch that arrives at the
/// source after the status said PAUSED; `fetch_max_wait_ms = 5` keeps the
/// fetchers sending, so a late Fetch shows in nearly every round.
#[test]
fn no_fetch_reaches_the_source_once_paused_is_shown() {
    const TOPIC: &str = "paused";
    const ROUNDS: usize = 15;
    let source = Source::start(1);
    source.mock().create_topic(TOPIC, 2, 1).expect("source topic");
    for p in 0..2 {
        produce(&source.bootstrap, TOPIC, p, &keys("a", p, 0..5), false);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));
    agent.create_mirror(&source.bootstrap, TOPIC, &["--fetch-max-wait-ms", "5"]);
    // The CLI's own client, in process: a CLI process per request would
    // take longer to start than the race lasts.
    let client = ringmirror::cli_admin::AdminClient::new(Some(&agent.admin));
    let states = |client: &ringmirror::cli_admin::AdminClient| -> Vec<String> {
        let answer = client.request("GET", "/status", None).expect("status");
        let views: Vec<PartitionView> = serde_json::from_value(answer["partitions"].clone()).expect("partitions");
        views.into_iter().map(|v| v.state).collect()
    };
    for round in 0..ROUNDS {
        let ends = source.ends(TOPIC, 2);
        agent.wait_status("the mirror to catch up", |s| s.caught_up(TOPIC, &ends));
        source.track_requests();
        client.request("POST", "/mirrors/dr/pause", None).expect("pause");
        // PAUSING until the fetchers have let the partitions go.
        let asked = std::time::Instant::now();
        while states(&client) != ["PAUSED", "PAUSED"] {
            assert!(asked.elapsed() < DEADLINE, "round {round}: {:?}", states(&client));
            std::thread::sleep(Duration::from_millis(1));
        }
        let shown = monotonic_micros();
        std::thread::sleep(Duration::from_millis(300));
        let tracked = source.tracked();
        // (1 ms of slack: a request read just before `shown` may be logged just after.)
        let late: Vec<i64> = tracked
            .iter()
            .filter(|r| r.api_key == FETCH && r.micros > shown + 1000)
            .map(|r| r.micros - shown)
            .collect();
        assert!(
            late.is_empty(),
            "round {round}: {} Fetch requests reached the source after GET /status showed PAUSED, at +µs {late:?}; \
             the agent's last log lines:\n{}",
            late.len(),
            agent
                .log()
                .lines()
                .rev()
                .take(8)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        client.request("POST", "/mirrors/dr/resume", None).expect("resume");
        for p in 0..2 {
            produce(&source.bootstrap, TOPIC, p, &keys("b", p, round..round + 1), false);
        }
    }
    source.stop_tracking();
    agent.terminate();
}

/// CLOCK_MONOTONIC in µs: the clock of the mock's request timestamps.
fn monotonic_micros() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid out-pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}

/// A restart keeps every partition's state: MIRRORING catches up, PAUSED
/// does not move while the source grows, STOPPED stays writable, FAILED
/// stays failed with its error (and `mirror restart` starts it over).
#[test]
fn a_restarted_agent_keeps_mirroring_paused_stopped_and_failed_partitions() {
    const A: &str = "ra";
    const B: &str = "rb";
    const C: &str = "rc";
    /// Exists at the destination as a local topic before the mirror
    /// discovers it through `topics_include`.
    const LOCAL: &str = "inc-local";
    const PARTITIONS: i32 = 2;

    let source = Source::start(1);
    let mock = source.mock();
    for t in [A, B, C] {
        mock.create_topic(t, PARTITIONS, 1).expect("source topic");
        for p in 0..PARTITIONS {
            produce(&source.bootstrap, t, p, &keys(t, p, 0..20), false);
        }
    }
    mock.create_topic(LOCAL, 1, 1).expect("source topic");
    produce(&source.bootstrap, LOCAL, 0, &keys(LOCAL, 0, 0..5), false);

    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let mut agent = AgentProcess::start(&config, dir.path().join("agent-1.log"));
    create_local_topic(&agent.listener, LOCAL, 1);
    agent.create_mirror(
        &source.bootstrap,
        &format!("{A},{B},{C}"),
        &[
            "--topics-include",
            "inc-.*",
            "--fetch-max-wait-ms",
            "100",
            "--metadata-refresh-interval-ms",
            "1000",
        ],
    );
    let ends: BTreeMap<&str, BTreeMap<i32, i64>> = [A, B, C].iter().map(|&t| (t, source.ends(t, PARTITIONS))).collect();
    let failed_error = |s: &Status| {
        s.get(LOCAL, 0)
            .filter(|v| v.state == "FAILED")
            .and_then(|v| v.error.clone())
    };
    let first = agent.wait_status("everything mirrored, the local topic FAILED", |s| {
        [A, B, C].iter().all(|t| s.caught_up(t, &ends[t])) && failed_error(s).is_some()
    });
    let error = failed_error(&first).unwrap();
    assert!(error.contains("local topic"), "the FAILED partition's error: {error}");

    agent.cli_ok(&["mirror", "pause", "dr", B]);
    agent.cli_ok(&["mirror", "stop", "dr", C]);
    agent.wait_status("rb PAUSED, rc STOPPED", |s| {
        s.all_in(B, PARTITIONS, "PAUSED") && s.all_in(C, PARTITIONS, "STOPPED")
    });
    let described = agent.cli_ok(&["mirror", "describe", "dr"]);
    assert!(
        described.contains(&format!("dr/{LOCAL}-0: {error}")),
        "describe shows the FAILED partition's error:\n{described}"
    );
    let c_ends: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, latest_offset(&agent.listener, C, p)))
        .collect();
    agent.terminate();

    // The source grows while the agent is down.
    for t in [A, B] {
        for p in 0..PARTITIONS {
            produce(&source.bootstrap, t, p, &keys(&format!("{t}-more"), p, 0..10), false);
        }
    }
    let grown: BTreeMap<&str, BTreeMap<i32, i64>> = [A, B].iter().map(|&t| (t, source.ends(t, PARTITIONS))).collect();

    let mut agent = AgentProcess::start(&config, dir.path().join("agent-2.log"));
    let restarted = Status(agent.status());
    for p in 0..PARTITIONS {
        assert_eq!(restarted.state(A, p), Some("MIRRORING"), "{restarted:#?}");
        assert_eq!(restarted.state(B, p), Some("PAUSED"), "{restarted:#?}");
        assert_eq!(restarted.state(C, p), Some("STOPPED"), "{restarted:#?}");
    }
    // FAILED, or PREPARING if its retry is already under way.
    assert!(
        matches!(restarted.state(LOCAL, 0), Some("FAILED" | "PREPARING")),
        "{restarted:#?}"
    );

    // MIRRORING catches up.
    agent.wait_status("ra to catch up after the restart", |s| s.caught_up(A, &grown[A]));
    // PAUSED stays paused while the source is ahead.
    std::thread::sleep(Duration::from_secs(2));
    let status = Status(agent.status());
    for p in 0..PARTITIONS {
        let v = status.of(B, p);
        assert_eq!(v.state, "PAUSED");
        assert_eq!(v.destination_offset, ends[B][&p], "rb-{p} moved while paused");
        assert_eq!(latest_offset(&agent.listener, B, p), ends[B][&p], "rb-{p}");
        assert!(grown[B][&p] > ends[B][&p]);
    }
    // STOPPED stays writable.
    for p in 0..PARTITIONS {
        produce(&agent.listener, C, p, &keys("rc-local", p, 0..5), true);
        assert_eq!(latest_offset(&agent.listener, C, p), c_ends[&p] + 5, "rc-{p}");
    }
    // FAILED stays failed, with its error.
    let failed = agent.wait_status("inc-local FAILED again, retried at least twice", |s| {
        failed_error(s).is_some() && s.of(LOCAL, 0).retry_attempt >= 2
    });
    assert_eq!(failed_error(&failed).as_deref(), Some(error.as_str()));
    let attempts_before = failed.of(LOCAL, 0).retry_attempt;

    // An operator restart starts it over (attempts from 0), and it fails again.
    let started = Instant::now();
    loop {
        let run = agent.cli(&["mirror", "restart", "dr", LOCAL]);
        if run.status.success() {
            assert!(
                run.stdout.contains("restart dr: accepted (1 partitions)") && run.stdout.contains(LOCAL),
                "{}",
                run.stdout
            );
            break;
        }
        // Caught between an automatic retry's PREPARING and its failure.
        assert!(
            run.stderr.contains("no FAILED partition") && started.elapsed() < DEADLINE,
            "mirror restart: {}",
            run.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let again = agent.wait_status("inc-local FAILED after the operator's restart", |s| {
        failed_error(s).is_some() && s.of(LOCAL, 0).retry_attempt < attempts_before
    });
    assert_eq!(failed_error(&again).as_deref(), Some(error.as_str()));
    // And the paused topic resumes.
    agent.cli_ok(&["mirror", "resume", "dr", B]);
    agent.wait_status("rb to catch up once resumed", |s| s.caught_up(B, &grown[B]));
    agent.terminate();
}

/// Waits for the agent to kill itself at `point` (SIGKILL, as `kill -9`).
fn wait_crashed(mut agent: AgentProcess, point: &str) {
    use std::os::unix::process::ExitStatusExt;
    let status = agent
        .child
        .wait_timeout(DEADLINE)
        .unwrap_or_else(|| panic!("no crash at {point} within {DEADLINE:?}; log:\n{}", agent.log_tail()));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{point}: {status}");
    assert!(
        agent.log().contains("crash point reached"),
        "{point}: {}",
        agent.log_tail()
    );
}

/// Restart in the passing states: the agent is killed right after it wrote
/// PREPARING, PAUSING or EPOCH_FENCING (before acting on it) and, restarted,
/// carries on from the stored state: the partition gets placed and mirrors,
/// gets paused (and fetches nothing), gets its bumped epoch.
#[test]
fn a_restart_carries_on_from_preparing_pausing_and_epoch_fencing() {
    use rdkafka::mocking::MockCluster;
    const TOPIC: &str = "passing";
    let source = Source::start(2);
    let mock: MockCluster<'_, DefaultProducerContext> = source.mock();
    mock.create_topic(TOPIC, 1, 1).expect("source topic");
    mock.partition_leader(TOPIC, 0, Some(1)).expect("leader");
    produce(&source.bootstrap, TOPIC, 0, &keys("a", 0, 0..10), false);
    let create = |agent: &AgentProcess| {
        agent.create_mirror(&source.bootstrap, TOPIC, &[]);
    };
    let caught_up = |agent: &mut AgentProcess| {
        let ends = source.ends(TOPIC, 1);
        agent.wait_status("MIRRORING and caught up", |s| {
            s.state(TOPIC, 0) == Some("MIRRORING") && s.caught_up(TOPIC, &ends)
        });
    };

    // PREPARING: written for the new partition, then the crash.
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let point = "prepare:preparing-written";
    let agent = AgentProcess::start_with(&config, dir.path().join("1.log"), &[("RINGMIRROR_CRASH_AT", point)]);
    create(&agent);
    wait_crashed(agent, point);
    let mut agent = AgentProcess::start(&config, dir.path().join("2.log"));
    caught_up(&mut agent);
    agent.terminate();

    // PAUSING: written, then the crash before the shard heard of it.
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let point = "pause:pausing-written";
    let mut agent = AgentProcess::start_with(&config, dir.path().join("1.log"), &[("RINGMIRROR_CRASH_AT", point)]);
    create(&agent);
    caught_up(&mut agent);
    let _ = agent.cli(&["mirror", "pause", "dr"]);
    wait_crashed(agent, point);
    let mut agent = AgentProcess::start(&config, dir.path().join("2.log"));
    let paused = agent.wait_status("PAUSED", |s| s.state(TOPIC, 0) == Some("PAUSED"));
    produce(&source.bootstrap, TOPIC, 0, &keys("b", 0, 0..10), false);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        agent
            .wait_status("still PAUSED", |s| s.state(TOPIC, 0) == Some("PAUSED"))
            .of(TOPIC, 0)
            .destination_offset,
        paused.of(TOPIC, 0).destination_offset,
        "a paused partition fetched after the restart"
    );
    agent.cli_ok(&["mirror", "resume", "dr"]);
    caught_up(&mut agent);
    agent.terminate();

    // EPOCH_FENCING: the source's leader moves until a bump is due; the
    // bumped epoch is written, then the crash before it was applied.
    let dir = tempfile::tempdir().unwrap();
    let config = write_agent_config(dir.path(), &dir.path().join("data"));
    let point = "epoch:fencing-written";
    let mut agent = AgentProcess::start_with(&config, dir.path().join("1.log"), &[("RINGMIRROR_CRASH_AT", point)]);
    create(&agent);
    caught_up(&mut agent);
    let first = agent.status()[0].destination_leader_epoch;
    let mut moves = 0;
    while agent.child.is_running() {
        assert!(
            moves < 20,
            "no epoch bump after {moves} leader moves; log:\n{}",
            agent.log_tail()
        );
        moves += 1;
        mock.partition_leader(TOPIC, 0, Some(1 + moves % 2))
            .expect("move the leader");
        produce(
            &source.bootstrap,
            TOPIC,
            0,
            &keys("c", 0, moves as usize..moves as usize + 1),
            false,
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_crashed(agent, point);
    let mut agent = AgentProcess::start(&config, dir.path().join("2.log"));
    caught_up(&mut agent);
    let bumped = agent.status()[0].destination_leader_epoch;
    assert!(bumped > first, "the bump was kept: {first} -> {bumped}");
    let metadata_epoch = metadata_leader_epochs(&agent.listener, TOPIC)[&0];
    let source_epoch = destination_batches(&agent.listener, TOPIC, 0)
        .iter()
        .map(|b| b.epoch)
        .max()
        .expect("mirrored batches");
    assert!(
        metadata_epoch >= bumped && metadata_epoch > source_epoch,
        "Metadata says {metadata_epoch}; stored {bumped}; batches up to {source_epoch}"
    );
    agent.terminate();
}
