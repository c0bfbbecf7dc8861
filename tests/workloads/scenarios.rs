//! The workloads Kafka runs, driven with Kafka's own libraries (the Java
//! driver's `streams-count`, `txn-*` and `group-member` commands): a Kafka
//! Streams count with exactly-once processing and what its output must
//! be, the transaction scenarios and what a cluster shows of them, a
//! KIP-848 group's join, rebalance, commit and resume — and the test
//! binary's shared Kafka cluster ([`cluster`]), the reference views
//! computed there once, and a plain agent to run them at ([`local_agent`]).
//! Each scenario runs against any bootstrap address and returns what it
//! saw, without what differs between two clusters (ids, times); the tests
//! compare.
//!
//! It only drives clients and reads what they print; every wait is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::common;
use crate::common::kafka::{
    Background, KafkaCluster, KafkaClusterSpec, driver, kafka_tool, member_records, spawn_driver,
};

/// Bounds each wait of these tests on Kafka, the agent or a workload.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// Each test starts several JVMs (a Streams application, group members, a
/// Connect worker) beside the cluster's four: one test at a time.
static WORKLOADS: Mutex<()> = Mutex::new(());

pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    WORKLOADS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn cluster() -> &'static KafkaCluster {
    KafkaCluster::shared(|| {
        KafkaClusterSpec::default()
            // A timed-out transaction is aborted within a test's time.
            .with("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500")
            // KIP-848 members heartbeat (and learn of rebalances) quickly.
            .with("group.consumer.min.heartbeat.interval.ms", "500")
            .with("group.consumer.heartbeat.interval.ms", "500")
            .with("group.consumer.min.session.timeout.ms", "6000")
            .with("group.consumer.session.timeout.ms", "6000")
    })
}

/// The agent's `[groups]` table with the KIP-848 timing of [`cluster`]:
/// members heartbeat every 500 ms and are fenced after 6 s.
const QUICK_GROUPS: &str = r#"
    [groups]
    consumer_min_heartbeat_interval_ms = 500
    consumer_heartbeat_interval_ms = 500
    consumer_min_session_timeout_ms = 6000
    consumer_session_timeout_ms = 6000
"#;

/// A plain agent (two shards, mirroring nothing, KIP-848 groups timed as
/// [`cluster`]'s) serving on loopback with its data under `dir`, with
/// `topics` (name, partitions) created at it by Kafka's admin client; and
/// its listener's address.
pub fn local_agent(dir: &Path, topics: &[(&str, i32)]) -> (ringmirror::agent::Agent, String) {
    // The table follows the listener's settings in the agent's TOML.
    let config = common::serving_config(&dir.join("data"), QUICK_GROUPS);
    assert_eq!(config.groups.consumer_heartbeat_interval_ms, 500, "[groups] taken");
    let agent = ringmirror::agent::Agent::start(config).expect("agent");
    let bootstrap = agent.listener_addr().expect("listening").to_string();
    for (topic, partitions) in topics {
        driver(
            "create-topic",
            &bootstrap,
            &[
                "--topic",
                topic,
                "--partitions",
                &partitions.to_string(),
                "--replication",
                "1",
            ],
        );
    }
    (agent, bootstrap)
}

pub const TRANSACTIONS_COMMAND: &str = "org.apache.kafka.tools.TransactionsCommand";
pub const GROUPS_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";

/// A `record <partition> <offset> <key> <value> <headers>` line of the driver.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub value: String,
}

pub fn records(lines: &[String]) -> Vec<Record> {
    let mut out: Vec<Record> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("record "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Record {
                partition: f[0].parse().expect("partition"),
                offset: f[1].parse().expect("offset"),
                key: f[2].to_owned(),
                value: f.get(3).copied().unwrap_or_default().to_owned(),
            }
        })
        .collect();
    out.sort();
    out
}

/// Every record of `topic` at `bootstrap` read at `isolation`, keys as
/// strings and values as `values` (digest, string, long).
pub fn read(bootstrap: &str, topic: &str, isolation: &str, values: &str) -> Vec<Record> {
    records(&driver(
        "consume",
        bootstrap,
        &[
            "--topic",
            topic,
            "--isolation",
            isolation,
            "--keys",
            "string",
            "--values",
            values,
            "--idle-ms",
            "2500",
        ],
    ))
}

/// (log end offset, last stable offset) of `topic`-`partition` at `bootstrap`.
pub fn end_offsets(bootstrap: &str, topic: &str, partition: i32) -> (i64, i64) {
    let mut c = common::KafkaConnection::connect(bootstrap, Duration::from_secs(10)).expect("connect");
    let mut latest = |isolation_level: i8| {
        let request = ListOffsetsRequest::default()
            .with_isolation_level(isolation_level)
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(-1),
                    ]),
            ]);
        let r: ListOffsetsResponse = c.request(ApiKey::ListOffsets as i16, 5, &request).expect("ListOffsets");
        r.topics[0].partitions[0].offset
    };
    (latest(0), latest(1))
}

// ---------------------------------------------------------------------------
// Kafka Streams with exactly-once processing
// ---------------------------------------------------------------------------

/// The number of distinct words in the Streams input (`w0`…`w6`).
pub const WORDS: usize = 7;

/// One Streams application and its topics: input and output created by
/// the test, the repartition topic and the changelog by the application.
pub struct StreamsApp {
    pub app_id: String,
    pub input: String,
    pub output: String,
}

impl StreamsApp {
    pub fn new(name: &str) -> Self {
        Self {
            app_id: format!("{name}-app"),
            input: format!("{name}-in"),
            output: format!("{name}-out"),
        }
    }

    /// The topics Streams makes (`Streams.java`'s names).
    pub fn internal_topics(&self) -> [String; 2] {
        [
            format!("{}-by-word-repartition", self.app_id),
            format!("{}-counts-changelog", self.app_id),
        ]
    }

    /// Starts the application against `bootstrap` with a fresh state dir
    /// under `dir` (its host is new: everything restored from the
    /// changelog), holding each record `delay_ms`, stopping after
    /// `idle_ms` without one (0: until stopped).
    pub fn start(&self, bootstrap: &str, dir: &Path, delay_ms: u32, idle_ms: u32) -> Background {
        self.start_with(bootstrap, dir, delay_ms, idle_ms, &[])
    }

    /// [`start`](Self::start) with more driver arguments (`--prop k=v`).
    pub fn start_with(&self, bootstrap: &str, dir: &Path, delay_ms: u32, idle_ms: u32, extra: &[&str]) -> Background {
        let state = tempfile::tempdir_in(dir).expect("state dir").keep();
        let (delay_ms, idle_ms) = (delay_ms.to_string(), idle_ms.to_string());
        let mut args = vec![
            "--app-id",
            &self.app_id,
            "--input",
            &self.input,
            "--output",
            &self.output,
            "--state-dir",
            state.to_str().expect("utf-8 path"),
            "--record-delay-ms",
            &delay_ms,
            "--idle-ms",
            &idle_ms,
        ];
        args.extend_from_slice(extra);
        spawn_driver("streams-count", bootstrap, &args)
    }

    /// Runs the application at `bootstrap` (each record held 10 ms) until
    /// a third of the `records` input records are processed, kills it
    /// (SIGKILL, a transaction open), then runs a new instance (empty
    /// state: restored from the changelog) until it has been idle 4 s.
    pub fn run_across_a_crash(&self, bootstrap: &str, dir: &Path, records: usize) {
        self.run_until_killed(bootstrap, dir, records);
        self.run_until_idle(bootstrap, dir);
    }

    /// Runs the application at `bootstrap` (each record held 10 ms) until
    /// a third of the `records` input records are processed, and kills it
    /// (SIGKILL, a transaction open).
    pub fn run_until_killed(&self, bootstrap: &str, dir: &Path, records: usize) {
        let mut first = self.start(bootstrap, dir, 10, 0);
        first.wait_for_line(DEADLINE, "RUNNING", |l| l == "state RUNNING");
        common::wait_until(DEADLINE, "a third of the input processed", || {
            let n = processed(&first);
            if n >= records / 3 {
                Ok(())
            } else {
                Err(format!("{n} processed"))
            }
        });
        first.kill();
    }

    /// Runs a new instance at `bootstrap` (empty state: restored from the
    /// changelog, input read from the group's committed offsets) until it
    /// has been idle 4 s.
    pub fn run_until_idle(&self, bootstrap: &str, dir: &Path) {
        let second = self.start(bootstrap, dir, 0, 4000);
        let (status, lines) = second.wait_exit(DEADLINE * 2);
        assert!(status.success(), "{status}: {lines:#?}");
    }

    /// (word, count) of every output record read committed at `bootstrap`, sorted.
    pub fn counts(&self, bootstrap: &str) -> Vec<(String, i64)> {
        let mut counts: Vec<(String, i64)> = read(bootstrap, &self.output, "read_committed", "long")
            .into_iter()
            .map(|r| (r.key, r.value.parse().expect("a count")))
            .collect();
        counts.sort();
        counts
    }
}

/// Produces input records `from..to` at `bootstrap` (all at once).
pub fn streams_input(bootstrap: &str, topic: &str, from: usize, to: usize) {
    let lines = driver(
        "streams-input",
        bootstrap,
        &[
            "--topic",
            topic,
            "--from",
            &from.to_string(),
            "--to",
            &to.to_string(),
            "--words",
            &WORDS.to_string(),
        ],
    );
    assert_eq!(lines.iter().filter(|l| l.starts_with("produced ")).count(), to - from);
}

/// What the application must output for the input indices `input`,
/// whatever the order it saw them in: each word `w<i % WORDS>` with the
/// counts 1…n, once each, for the n records of that word.
pub fn expected_counts(input: impl IntoIterator<Item = usize>) -> Vec<(String, i64)> {
    let mut per_word: BTreeMap<String, i64> = BTreeMap::new();
    for i in input {
        *per_word.entry(format!("w{}", i % WORDS)).or_default() += 1;
    }
    let mut out: Vec<(String, i64)> = per_word
        .into_iter()
        .flat_map(|(word, n)| (1..=n).map(move |c| (word.clone(), c)))
        .collect();
    out.sort();
    out
}

/// The (word, count) pairs that appear more than once.
pub fn duplicates(counts: &[(String, i64)]) -> Vec<(String, i64)> {
    let mut seen = BTreeSet::new();
    counts.iter().filter(|c| !seen.insert(*c)).cloned().collect()
}

/// How many input records the application has handed to its count step.
pub fn processed(app: &Background) -> usize {
    app.lines().iter().filter(|l| l.starts_with("processed ")).count()
}

// ---------------------------------------------------------------------------
// Transactional producers
// ---------------------------------------------------------------------------

/// What a cluster shows of [`transaction_scenarios`], without what differs
/// between any two clusters (producer ids, coordinator ids, times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    /// Keys read READ_COMMITTED from the scenarios' first offset, in order.
    pub committed: Vec<String>,
    /// How many records READ_UNCOMMITTED readers see from there.
    pub uncommitted: usize,
    /// The zombie's answer to its last send and commit: the first
    /// exception's class.
    pub zombie: String,
    /// The coordinator's state for the timed-out transaction, and the
    /// producer's answer to its late commit (the first exception's class).
    pub timed_out: (String, String),
    /// `kafka-transactions list`: state by transactional id (the scenarios' ids).
    pub listed: BTreeMap<String, String>,
    /// `kafka-transactions describe`: (state, timeout ms, partitions with
    /// the topic's name as `<topic>`) by transactional id.
    pub described: BTreeMap<String, (String, String, String)>,
    /// `kafka-transactions describe-producers` of the partition: each
    /// producer's current transaction's start offset ("None": none;
    /// offsets here and below counted from the scenarios' first), sorted. Not its id (which differs between clusters), nor its epoch
    /// and last sequence once a marker ended its transaction: at
    /// transaction version 2 each marker bumps the epoch, and the producer
    /// state forgets the old epoch's sequences (Kafka's
    /// `ProducerStateEntry.maybeUpdateProducerEpoch`).
    pub producers: Vec<String>,
    /// The open transaction's row there: (epoch, coordinator epoch, last
    /// sequence, start offset) — no marker has been written for it.
    pub open_producer: (String, String, String, String),
    /// `kafka-transactions find-hanging` of the partition, counting every
    /// open transaction as old enough (`--max-transaction-timeout 0`): its
    /// rows' (partition, start offset). The open transaction is known to
    /// its coordinator, so it is not hanging.
    pub hanging: Vec<(String, String)>,
}

/// The first exception class of a driver line `<prefix> <class>: <message>
/// <- <cause class>: …` other than the future's ExecutionException.
pub fn first_exception(line: &str, prefix: &str) -> String {
    line.strip_prefix(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in {line:?}"))
        .split(" <- ")
        .filter_map(|e| e.trim().split(':').next())
        .find(|class| *class != "java.util.concurrent.ExecutionException")
        .unwrap_or_else(|| panic!("no exception in {line:?}"))
        .to_owned()
}

/// `kafka-transactions`' rows (a header line naming `TransactionalId`,
/// then rows) as name → value maps; a last column left empty is "".
pub fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    table_under(text, "TransactionalId")
}

/// A table's rows (a header line with the column `column`, then rows) as
/// name → value maps; a last column left empty is "".
pub fn table_under(text: &str, column: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .skip_while(|l| !l.split_whitespace().any(|n| n == column));
    let Some(header) = lines.next() else {
        panic!("no table with a {column} column in {text:?}");
    };
    let names: Vec<&str> = header.split_whitespace().collect();
    lines
        .map(|row| {
            let values: Vec<&str> = row.split_whitespace().collect();
            names
                .iter()
                .enumerate()
                .map(|(i, n)| ((*n).to_owned(), values.get(i).copied().unwrap_or_default().to_owned()))
                .collect()
        })
        .collect()
}

/// One transaction of `count` records (keys `<keys><i>`) to partition 0 of
/// `topic` at `bootstrap` by the transactional id `id`, ended by `outcome`
/// (commit, abort, or open: the producer halts with it open); `extra` are
/// more driver arguments. The driver's lines.
pub fn produce_transaction(
    bootstrap: &str,
    topic: &str,
    id: &str,
    outcome: &str,
    keys: &str,
    count: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args = vec![
        "--topic",
        topic,
        "--partition",
        "0",
        "--transactional",
        id,
        "--txn",
        outcome,
        "--key-prefix",
        keys,
        "--count",
        count,
    ];
    args.extend_from_slice(extra);
    driver("produce", bootstrap, &args)
}

/// Runs every transaction scenario against partition 0 of `topic` at
/// `bootstrap` (records from `from_offset` on), with transactional ids
/// `<TXN_PREFIX>-…`, in this order: a committed transaction, an aborted one,
/// a zombie fenced by a newer producer with its id, one the coordinator
/// aborts when it outlives its 2 s timeout, and one left open (its
/// producer halts) — then reads the partition at both isolation levels
/// and asks `kafka-transactions` (`list`, `describe`, `describe-producers`,
/// `find-hanging`).
pub fn transaction_scenarios(bootstrap: &str, topic: &str, from_offset: i64) -> TxnView {
    let id = |name: &str| format!("{TXN_PREFIX}-{name}");
    let produce = |name: &str, outcome: &str, keys: &str, count: &str, extra: &[&str]| {
        produce_transaction(bootstrap, topic, &id(name), outcome, keys, count, extra)
    };
    produce("commit", "commit", "c", "5", &[]);
    produce("abort", "abort", "x", "4", &[]);
    let zombie = driver(
        "txn-zombie",
        bootstrap,
        &["--topic", topic, "--transactional", &id("zombie"), "--count", "3"],
    );
    let zombie = zombie
        .iter()
        .find(|l| l.starts_with("a-fenced ") || *l == "a-committed")
        .cloned()
        .unwrap_or_else(|| panic!("the zombie's outcome: {zombie:#?}"));
    let timeout = driver(
        "txn-timeout",
        bootstrap,
        &[
            "--topic",
            topic,
            "--transactional",
            &id("timeout"),
            "--timeout-ms",
            "2000",
            "--count",
            "2",
        ],
    );
    let state = timeout
        .iter()
        .find_map(|l| l.strip_prefix("coordinator "))
        .unwrap_or_else(|| panic!("the coordinator's state: {timeout:#?}"))
        .to_owned();
    let late_commit = timeout
        .iter()
        .find(|l| l.starts_with("commit-failed ") || *l == "committed")
        .cloned()
        .unwrap_or_else(|| panic!("the late commit: {timeout:#?}"));
    produce("open", "open", "o", "2", &["--prop", "transaction.timeout.ms=900000"]);

    let from =
        |records: Vec<Record>| -> Vec<Record> { records.into_iter().filter(|r| r.offset >= from_offset).collect() };
    let committed = from(read(bootstrap, topic, "read_committed", "digest"))
        .into_iter()
        .map(|r| r.key)
        .collect();
    let uncommitted = from(read(bootstrap, topic, "read_uncommitted", "digest")).len();
    let ids = ["commit", "abort", "zombie", "timeout", "open"].map(id);
    let listed = table(&kafka_tool(TRANSACTIONS_COMMAND, bootstrap, &["list"]))
        .into_iter()
        .filter(|row| ids.contains(&row["TransactionalId"]))
        .map(|row| (row["TransactionalId"].clone(), row["TransactionState"].clone()))
        .collect();
    let described = ids
        .iter()
        .map(|txn| {
            let text = kafka_tool(
                TRANSACTIONS_COMMAND,
                bootstrap,
                &["describe", "--transactional-id", txn],
            );
            let row = table(&text)
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("describe {txn}: {text}"));
            let partitions = row["TopicPartitions"].replace(topic, "<topic>");
            (
                txn.clone(),
                (
                    row["TransactionState"].clone(),
                    row["TransactionTimeoutMs"].clone(),
                    partitions,
                ),
            )
        })
        .collect();
    // Offsets from `from_offset` on, as at any cluster ("None" stays).
    let relative = |offset: &str| {
        offset
            .parse::<i64>()
            .map_or_else(|_| offset.to_owned(), |o| (o - from_offset).to_string())
    };
    let partition = ["--topic", topic, "--partition", "0"];
    let text = kafka_tool(
        TRANSACTIONS_COMMAND,
        bootstrap,
        &[&["describe-producers"][..], &partition].concat(),
    );
    let rows = table_under(&text, "ProducerId");
    let mut producers: Vec<String> = rows
        .iter()
        .map(|r| relative(&r["CurrentTransactionStartOffset"]))
        .collect();
    producers.sort();
    let open: Vec<_> = rows
        .iter()
        .filter(|r| r["CurrentTransactionStartOffset"] != "None")
        .map(|r| {
            (
                r["ProducerEpoch"].clone(),
                r["LatestCoordinatorEpoch"].clone(),
                r["LastSequence"].clone(),
                relative(&r["CurrentTransactionStartOffset"]),
            )
        })
        .collect();
    let [open_producer] = <[_; 1]>::try_from(open).unwrap_or_else(|_| panic!("one open transaction: {text}"));
    let text = kafka_tool(
        TRANSACTIONS_COMMAND,
        bootstrap,
        &[&["find-hanging", "--max-transaction-timeout", "0"][..], &partition].concat(),
    );
    let hanging = table_under(&text, "StartOffset")
        .into_iter()
        .map(|r| (r["Partition"].clone(), relative(&r["StartOffset"])))
        .collect();
    TxnView {
        producers,
        open_producer,
        hanging,
        committed,
        uncommitted,
        zombie: if zombie == "a-committed" {
            zombie
        } else {
            first_exception(&zombie, "a-fenced")
        },
        timed_out: (
            state,
            if late_commit == "committed" {
                late_commit
            } else {
                first_exception(&late_commit, "commit-failed")
            },
        ),
        listed,
        described,
    }
}

/// The transactional ids of [`transaction_scenarios`] are `<TXN_PREFIX>-…`
/// at every cluster, so that their views compare.
pub const TXN_PREFIX: &str = "wl-txn";

/// The scenarios at Kafka, run once per test binary: what the agent must show.
pub fn kafka_txn_view() -> &'static TxnView {
    static VIEW: OnceLock<TxnView> = OnceLock::new();
    VIEW.get_or_init(|| {
        let c = cluster();
        c.create_topic("wl-txn-ref", 1, &[]);
        transaction_scenarios(&c.bootstrap, "wl-txn-ref", 0)
    })
}

/// Asserts that `here`, the scenarios at the agent, shows what they show at
/// Kafka. The late commit of the timed-out transaction is the one answer
/// that depends on the transaction version: the reference cluster
/// finalizes version 2, where the coordinator's fencing epoch counts as
/// the producer's next one and the commit meets CompleteAbort
/// (INVALID_TXN_STATE); the agent answers as Kafka at version 1
/// (`TransactionCoordinator.endTransactionWithTV1`: an epoch older than the
/// coordinator's is PRODUCER_FENCED). Either way the commit fails. The
/// agent finalizes no `transaction.version` feature in ApiVersions, so
/// Kafka's clients run version 1 with it (EndTxn v4 at most), and a Kafka
/// cluster at version 1 gives the same client PRODUCER_FENCED: the answers
/// differ with the version, not between Kafka and the agent. Answering
/// INVALID_TXN_STATE would take version 2 itself (an epoch bump at every
/// EndTxn, EndTxn v5 returning it, partitions added by Produce v12).
pub fn assert_txn_view_as_at_kafka(mut here: TxnView) {
    let at_kafka = kafka_txn_view();
    assert_eq!(
        here.timed_out.1, "org.apache.kafka.common.errors.ProducerFencedException",
        "{here:#?}"
    );
    here.timed_out.1 = at_kafka.timed_out.1.clone();
    assert_eq!(&here, at_kafka, "as at Kafka");
}

// ---------------------------------------------------------------------------
// Consumer groups on KIP-848's protocol
// ---------------------------------------------------------------------------

/// The partitions of a member's last `assigned …` line (empty: none yet).
pub fn assignment(member: &Background) -> BTreeSet<i32> {
    member
        .lines()
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("assigned "))
        .map(|a| a.split(',').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

pub fn wait_assigned(member: &Background, what: &str, wanted: impl Fn(&BTreeSet<i32>) -> bool) -> BTreeSet<i32> {
    common::wait_until(DEADLINE, what, || {
        let a = assignment(member);
        if wanted(&a) {
            Ok(a)
        } else {
            Err(format!("{a:?}: {:?}", member.lines().last()))
        }
    })
}

/// A JVM stopped by SIGTERM exits 143 once its shutdown hooks are done.
pub fn stopped_cleanly(status: std::process::ExitStatus) -> bool {
    status.success() || status.code() == Some(128 + libc::SIGTERM)
}

pub fn start_member(bootstrap: &str, group: &str, topic: &str, extra: &[&str]) -> Background {
    let mut args = vec!["--group", group, "--topic", topic, "--protocol", "consumer"];
    args.extend_from_slice(extra);
    spawn_driver("group-member", bootstrap, &args)
}

/// A KIP-848 group on `topic` (4 partitions, `first` records already in
/// it) at `bootstrap`: member A joins and takes every partition; B joins
/// and the partitions are shared; B leaves and A takes them all again; 40
/// more records are read by A, which commits and leaves; 30 more, and a
/// new member C resumes from the committed offsets. Returns every
/// (partition, offset) read, by any member, in the order read per member.
pub fn kip848_join_rebalance_commit_resume(bootstrap: &str, topic: &str, group: &str) -> Vec<(i32, i64)> {
    let all: BTreeSet<i32> = (0..4).collect();
    let a = start_member(bootstrap, group, topic, &[]);
    wait_assigned(&a, "A holds every partition", |p| *p == all);
    let b = start_member(bootstrap, group, topic, &[]);
    let shared = wait_assigned(&b, "B gets a share", |p| !p.is_empty());
    wait_assigned(&a, "A gives up B's share", |p| p.is_disjoint(&shared) && !p.is_empty());
    let (status, b_lines) = b.terminate(DEADLINE);
    assert!(stopped_cleanly(status), "B left cleanly: {status} {b_lines:#?}");
    assert_eq!(b_lines.last().map(String::as_str), Some("closed"));
    wait_assigned(&a, "A takes every partition back", |p| *p == all);
    let more = driver(
        "produce",
        bootstrap,
        &["--topic", topic, "--count", "40", "--idempotent"],
    );
    let more: BTreeSet<(i32, i64)> = more
        .iter()
        .filter_map(|l| l.strip_prefix("produced "))
        .map(|l| {
            let (p, o) = l.split_once(' ').expect("partition offset");
            (p.parse().expect("partition"), o.parse().expect("offset"))
        })
        .collect();
    common::wait_until(DEADLINE, "A reads and commits the new records", || {
        let read: BTreeSet<(i32, i64)> = member_records(&a.lines()).into_iter().collect();
        if read.is_superset(&more) {
            Ok(())
        } else {
            Err(format!("{} of 40", more.intersection(&read).count()))
        }
    });
    // A member stops between polls, after committing what it read.
    let (status, a_lines) = a.terminate(DEADLINE);
    assert!(stopped_cleanly(status), "A left cleanly: {status}");
    driver(
        "produce",
        bootstrap,
        &["--topic", topic, "--count", "30", "--idempotent"],
    );
    let c = start_member(bootstrap, group, topic, &["--idle-ms", "3000"]);
    let (status, c_lines) = c.wait_exit(DEADLINE);
    assert!(status.success(), "C: {status} {c_lines:#?}");
    let mut read = member_records(&a_lines);
    read.extend(member_records(&b_lines));
    let resumed = member_records(&c_lines);
    assert_eq!(
        resumed.len(),
        30,
        "C resumes from the committed offsets: only the 30 new records"
    );
    read.extend(resumed);
    read
}

/// The KIP-848 scenario on `topic` (4 partitions, empty) at `bootstrap`,
/// with 120 records in it first, and what it must show wherever it runs:
/// no record read twice, every record read, and the group committed to the
/// end (lag 0 on each partition in `kafka-consumer-groups --describe`).
pub fn kip848_group_reads_every_record_once(bootstrap: &str, topic: &str, group: &str) {
    driver(
        "produce",
        bootstrap,
        &["--topic", topic, "--count", "120", "--idempotent"],
    );
    let read = kip848_join_rebalance_commit_resume(bootstrap, topic, group);
    let unique: BTreeSet<(i32, i64)> = read.iter().copied().collect();
    assert_eq!(unique.len(), read.len(), "no record read twice");
    assert_eq!(unique.len(), 120 + 40 + 30, "every record read");
    let described = kafka_tool(GROUPS_COMMAND, bootstrap, &["--describe", "--group", group]);
    let lag: Vec<&str> = described
        .lines()
        .filter(|l| l.contains(&format!("{topic} ")))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    assert_eq!(lag, vec!["0"; 4], "committed to the end: {described}");
}
