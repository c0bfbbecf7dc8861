//! What runs on Kafka must run on after a failover to the agent (issue
//! 17): Java transactional producers, a Kafka Streams application with
//! exactly-once processing, Kafka Connect in distributed mode, and consumer
//! groups on KIP-848's protocol — each with Kafka's own libraries (the
//! Java driver's `streams-count`, `txn-*` and `group-member` commands, and
//! Connect's own `ConnectDistributed`).
//!
//! - **Reference runs at Kafka alone**: what each workload does at Apache
//!   Kafka 4.3.1 (a KRaft cluster of one controller and three brokers, one
//!   per test binary): the Streams output across a crash of the
//!   application, the transactions' READ_COMMITTED views and
//!   `kafka-transactions list`/`describe`, a KIP-848 group joining,
//!   rebalancing when a member leaves, committing and resuming, and a
//!   Connect worker keeping its connectors, their offsets and statuses
//!   across a restart. The tests at the agent compare with these.
//! - **Kafka Connect at the agent**: the same worker with its config,
//!   offset and status topics at our listener (local compacted topics).
//!
//! The workloads themselves are in `tests/common/workloads.rs`, shared
//! with `tests/kafka_failover_workloads.rs` (the same workloads at the
//! agent after a failover). Each starts several JVMs, so the tests take
//! turns ([`one_at_a_time`]); every wait is bounded and waits on a
//! condition.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use common::kafka::{Background, driver, kafka_tool};
use common::workloads::*;

/// The reference run: the application counts at Kafka and crashes
/// (SIGKILL) mid-stream with a transaction open; a new instance on a new
/// host (empty state dir) restores from the changelog, goes on from the
/// committed offsets, and the output read committed holds each count once
/// — as without the crash. The failover test does the same with the agent
/// in the crash's place.
#[test]
fn kafka_streams_exactly_once_at_kafka_counts_each_record_once_across_a_crash() {
    const RECORDS: usize = 300;
    let _turn = one_at_a_time();
    let c = cluster();
    let app = StreamsApp::new("wl-streams-ref");
    c.create_topic(&app.input, 3, &[]);
    c.create_topic(&app.output, 3, &[]);
    streams_input(&c.bootstrap, &app.input, 0, RECORDS);
    let dir = tempfile::tempdir().unwrap();

    app.run_across_a_crash(&c.bootstrap, dir.path(), RECORDS);
    let counts = app.counts(&c.bootstrap);
    assert_eq!(duplicates(&counts), vec![], "no count output twice");
    assert_eq!(counts, expected_counts(0..RECORDS), "each word counted 1…n, once each");
    for topic in app.internal_topics() {
        let described = driver("describe-topic", &c.bootstrap, &["--topic", &topic]);
        assert!(described[0].ends_with(" 3"), "{topic}: three partitions: {described:?}");
    }
}

#[test]
fn transactions_at_kafka_commit_abort_fence_a_zombie_and_time_out() {
    let _turn = one_at_a_time();
    let view = kafka_txn_view();
    let keys = |prefix: &'static str, n: usize| (0..n).map(move |i| format!("{prefix}{i}"));
    let committed: Vec<String> = keys("c", 5).chain(keys("b", 3)).collect();
    assert_eq!(
        view.committed, committed,
        "READ_COMMITTED: the committed transaction and the newer producer's, nothing after the open one"
    );
    assert_eq!(
        view.uncommitted,
        5 + 4 + 3 + 3 + 2 + 2,
        "READ_UNCOMMITTED: every record written (the zombie's last send refused)"
    );
    assert!(
        view.zombie.ends_with("ProducerFencedException") || view.zombie.ends_with("InvalidProducerEpochException"),
        "the zombie is fenced: {view:#?}"
    );
    assert_eq!(
        view.timed_out.0, "CompleteAbort",
        "the coordinator aborted it: {view:#?}"
    );
    assert_ne!(view.timed_out.1, "committed", "{view:#?}");
    let state = |id: &str| view.listed.get(&format!("{TXN_PREFIX}-{id}")).map(String::as_str);
    assert_eq!(state("commit"), Some("CompleteCommit"), "{view:#?}");
    assert_eq!(state("abort"), Some("CompleteAbort"), "{view:#?}");
    assert_eq!(state("zombie"), Some("CompleteCommit"), "{view:#?}");
    assert_eq!(state("timeout"), Some("CompleteAbort"), "{view:#?}");
    assert_eq!(state("open"), Some("Ongoing"), "{view:#?}");
    let open = &view.described[&format!("{TXN_PREFIX}-open")];
    assert_eq!(
        open,
        &("Ongoing".to_owned(), "900000".to_owned(), "<topic>-0".to_owned()),
        "{view:#?}"
    );
}

#[test]
fn kip848_group_at_kafka_joins_rebalances_on_a_leave_commits_and_resumes() {
    let _turn = one_at_a_time();
    let c = cluster();
    c.create_topic("wl-848-ref", 4, &[]);
    driver(
        "produce",
        &c.bootstrap,
        &["--topic", "wl-848-ref", "--count", "120", "--idempotent"],
    );
    let read = kip848_join_rebalance_commit_resume(&c.bootstrap, "wl-848-ref", "wl-848-ref-group");
    let unique: BTreeSet<(i32, i64)> = read.iter().copied().collect();
    assert_eq!(unique.len(), read.len(), "no record read twice");
    assert_eq!(unique.len(), 120 + 40 + 30, "every record read");
    let described = kafka_tool(
        GROUPS_COMMAND,
        &c.bootstrap,
        &["--describe", "--group", "wl-848-ref-group"],
    );
    let lag: Vec<&str> = described
        .lines()
        .filter(|l| l.contains("wl-848-ref "))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    assert_eq!(lag, vec!["0"; 4], "committed to the end: {described}");
}

// ---------------------------------------------------------------------------
// Kafka Connect (distributed)
// ---------------------------------------------------------------------------

/// A Connect worker in distributed mode (its own JVM), with its REST API on loopback.
struct ConnectWorker {
    process: Background,
    rest: String,
}

impl ConnectWorker {
    /// Starts a worker whose group, config, offset and status topics are
    /// `<tag>-…` at `bootstrap`; its properties file is written in `dir`.
    /// Returns once its REST API answers.
    fn start(bootstrap: &str, tag: &str, dir: &Path, rest_addr: &str) -> Self {
        let properties = dir.join(format!("{tag}-worker.properties"));
        std::fs::write(
            &properties,
            format!(
                "bootstrap.servers={bootstrap}\n\
                 group.id={tag}-workers\n\
                 key.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 value.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 config.storage.topic={tag}-configs\n\
                 offset.storage.topic={tag}-offsets\n\
                 status.storage.topic={tag}-status\n\
                 config.storage.replication.factor=-1\n\
                 offset.storage.replication.factor=-1\n\
                 status.storage.replication.factor=-1\n\
                 offset.storage.partitions=3\n\
                 status.storage.partitions=2\n\
                 offset.flush.interval.ms=500\n\
                 scheduled.rebalance.max.delay.ms=1000\n\
                 listeners=http://{rest_addr}\n\
                 plugin.discovery=only_scan\n"
            ),
        )
        .expect("write the worker's properties");
        let mut java = common::kafka::java_with(
            "org.apache.kafka.connect.cli.ConnectDistributed",
            "-Xmx256m",
            common::kafka::QUICK_JVM_FLAGS,
        );
        java.arg(&properties);
        let mut process = Background::spawn(java, format!("Connect worker {tag}"));
        let rest = format!("http://{rest_addr}");
        let started = std::time::Instant::now();
        while rest_call("GET", &format!("{rest}/connectors"), None).is_err() {
            assert!(
                process.is_running() && started.elapsed() < DEADLINE,
                "the Connect worker's REST API did not answer within {DEADLINE:?}:\n{}",
                errors(&process)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Self { process, rest }
    }

    fn get(&self, path: &str) -> serde_json::Value {
        rest_call("GET", &format!("{}{path}", self.rest), None)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.process.stderr_tail()))
    }

    fn put(&self, path: &str, body: serde_json::Value) -> serde_json::Value {
        rest_call("PUT", &format!("{}{path}", self.rest), Some(body))
            .unwrap_or_else(|e| panic!("PUT {path}: {e}\n{}", self.process.stderr_tail()))
    }

    /// (connector state, task states) of `name`, once the worker reports them.
    fn status(&self, name: &str) -> Result<(String, Vec<String>), String> {
        let status = rest_call("GET", &format!("{}/connectors/{name}/status", self.rest), None)?;
        let connector = status["connector"]["state"].as_str().unwrap_or_default().to_owned();
        let tasks = status["tasks"]
            .as_array()
            .map(|t| {
                t.iter()
                    .map(|t| t["state"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        Ok((connector, tasks))
    }

    fn wait_running(&self, name: &str) {
        common::wait_until(DEADLINE, &format!("{name} RUNNING"), || match self.status(name) {
            Ok((c, t)) if c == "RUNNING" && t == ["RUNNING"] => Ok(()),
            other => Err(format!("{other:?}\n{}", self.process.stderr_tail())),
        });
    }

    /// A graceful stop (SIGTERM: tasks stopped, offsets flushed, the group left).
    fn stop(self) {
        let (status, _) = self.process.terminate(DEADLINE);
        assert!(stopped_cleanly(status), "the worker stopped: {status}");
    }
}

/// The error lines of a JVM's log and their causes, for failure messages.
fn errors(process: &Background) -> String {
    let lines: Vec<String> = process
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("ERROR") || l.starts_with("Caused by") || l.contains("Exception:"))
        .collect();
    lines.join("\n")
}

/// One call to a Connect REST API; the answer's JSON, or why there is none.
fn rest_call(method: &str, url: &str, body: Option<serde_json::Value>) -> Result<serde_json::Value, String> {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string()).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let mut response = http.run(request).map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// What a cluster shows of [`connect_scenario`], with the tag's names as `<tag>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConnectView {
    /// The connectors the restarted worker lists (from its config topic).
    connectors: Vec<String>,
    /// The source's file position and the sink's topic offset before the
    /// restart and after it (from the offset topic and the sink's group).
    offsets_before: (i64, i64),
    offsets_after: (i64, i64),
    /// The sink's file: exactly the source's lines, once each.
    sink_file_is_source_file: bool,
}

/// The source connector's file position and the sink's committed offset, through the REST API.
fn connector_offsets(worker: &ConnectWorker, tag: &str) -> Result<(i64, i64), String> {
    let source = rest_call("GET", &format!("{}/connectors/{tag}-source/offsets", worker.rest), None)?;
    let sink = rest_call("GET", &format!("{}/connectors/{tag}-sink/offsets", worker.rest), None)?;
    let position = source["offsets"][0]["offset"]["position"]
        .as_i64()
        .ok_or(format!("source offsets {source}"))?;
    let offset = sink["offsets"][0]["offset"]["kafka_offset"]
        .as_i64()
        .ok_or(format!("sink offsets {sink}"))?;
    Ok((position, offset))
}

/// Waits until the sink file holds `lines` lines, the source connector's
/// stored position is the end of `source_file` and the sink has committed
/// `lines`; returns those offsets as the REST API shows them.
fn wait_caught_up(worker: &ConnectWorker, tag: &str, source_file: &Path, sink_file: &Path, lines: i64) -> (i64, i64) {
    let size = std::fs::metadata(source_file).expect("the source file").len() as i64;
    common::wait_until(DEADLINE, "the connectors caught up", || {
        let written = lines_of(sink_file).len() as i64;
        let offsets = connector_offsets(worker, tag)?;
        if written == lines && offsets == (size, lines) {
            Ok(offsets)
        } else {
            Err(format!(
                "{written} lines, offsets {offsets:?}\n{}",
                worker.process.stderr_tail()
            ))
        }
    })
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A Connect worker with its topics at `bootstrap` runs a FileStreamSource
/// connector (a file of 50 lines → topic `<tag>-lines`) and a
/// FileStreamSink (that topic → another file) until the sink file holds
/// every line; it is stopped, 30 lines are appended, and a new worker
/// with the same topics carries on: the connectors come back from the
/// config topic, RUNNING (statuses), the source from its stored file
/// position and the sink from its committed offset — the sink file ends
/// up holding every line once.
fn connect_scenario(bootstrap: &str, tag: &str, dir: &Path) -> ConnectView {
    let source_file = dir.join(format!("{tag}-in.txt"));
    let sink_file = dir.join(format!("{tag}-out.txt"));
    let text = |from: usize, to: usize| (from..to).map(|i| format!("line-{i}\n")).collect::<String>();
    std::fs::write(&source_file, text(0, 50)).expect("the source file");
    let rest_addr = common::kafka::free_addr();
    let worker = ConnectWorker::start(bootstrap, tag, dir, &rest_addr);
    let topic = format!("{tag}-lines");
    worker.put(
        &format!("/connectors/{tag}-source/config"),
        serde_json::json!({
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1",
            "file": source_file,
            "topic": topic,
        }),
    );
    worker.put(
        &format!("/connectors/{tag}-sink/config"),
        serde_json::json!({
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1",
            "file": sink_file,
            "topics": topic,
        }),
    );
    worker.wait_running(&format!("{tag}-source"));
    worker.wait_running(&format!("{tag}-sink"));
    let offsets_before = wait_caught_up(&worker, tag, &source_file, &sink_file, 50);
    worker.stop();

    std::fs::OpenOptions::new()
        .append(true)
        .open(&source_file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text(50, 80).as_bytes()))
        .expect("append to the source file");
    let worker = ConnectWorker::start(bootstrap, tag, dir, &rest_addr);
    let mut connectors: Vec<String> = common::wait_until(DEADLINE, "the connectors are back", || {
        let listed = worker.get("/connectors");
        let names: Vec<String> = listed
            .as_array()
            .map(|a| a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if names.len() == 2 {
            Ok(names)
        } else {
            Err(format!("{listed}"))
        }
    });
    connectors.sort();
    worker.wait_running(&format!("{tag}-source"));
    worker.wait_running(&format!("{tag}-sink"));
    let offsets_after = wait_caught_up(&worker, tag, &source_file, &sink_file, 80);
    worker.stop();
    ConnectView {
        connectors: connectors.into_iter().map(|n| n.replace(tag, "<tag>")).collect(),
        offsets_before,
        offsets_after,
        sink_file_is_source_file: lines_of(&sink_file) == lines_of(&source_file),
    }
}

/// Connect's view at Kafka, run once per test binary: what the agent must show.
fn kafka_connect_view() -> &'static ConnectView {
    static VIEW: OnceLock<ConnectView> = OnceLock::new();
    VIEW.get_or_init(|| {
        let c = cluster();
        c.create_topic("wl-connect-ref-lines", 1, &[]);
        let dir = tempfile::tempdir().unwrap();
        connect_scenario(&c.bootstrap, "wl-connect-ref", dir.path())
    })
}

#[test]
fn connect_worker_at_kafka_keeps_connectors_offsets_and_statuses_across_a_restart() {
    let _turn = one_at_a_time();
    let view = kafka_connect_view();
    assert_eq!(view.connectors, ["<tag>-sink", "<tag>-source"]);
    let line_bytes = |n: i64| (0..n).map(|i| format!("line-{i}\n").len() as i64).sum::<i64>();
    assert_eq!(view.offsets_before, (line_bytes(50), 50), "{view:#?}");
    assert_eq!(view.offsets_after, (line_bytes(80), 80), "{view:#?}");
    assert!(view.sink_file_is_source_file, "every line once: {view:#?}");
}

/// Kafka Connect needs no transactions (exactly-once source support is
/// off by default): its config, offset and status topics are local
/// compacted topics at our listener, its workers a classic group with
/// protocol type "connect". The same worker and connectors as at Kafka,
/// through the same restart, show the same.
#[test]
fn connect_worker_at_the_agent_keeps_connectors_offsets_and_statuses_across_a_restart() {
    let _turn = one_at_a_time();
    let at_kafka = kafka_connect_view().clone();
    let dir = tempfile::tempdir().unwrap();
    let agent = ringmirror::agent::Agent::start(common::serving_config(&dir.path().join("data"), "")).expect("agent");
    let ours = agent.listener_addr().expect("listening").to_string();
    driver(
        "create-topic",
        &ours,
        &[
            "--topic",
            "wl-connect-agent-lines",
            "--partitions",
            "1",
            "--replication",
            "1",
        ],
    );
    let here = connect_scenario(&ours, "wl-connect-agent", dir.path());
    assert_eq!(here, at_kafka, "as at Kafka");
    agent.stop().expect("clean stop");
}
