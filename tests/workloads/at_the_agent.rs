//! The workloads at a plain agent, on local topics, with Kafka's own Java
//! clients and tools: the transaction scenarios (commit, abort, a zombie
//! fenced, a transaction the coordinator times out, one left open) show
//! what they show at Apache Kafka 4.3.1 — the READ_COMMITTED and
//! READ_UNCOMMITTED views, the producers' answers, `kafka-transactions
//! list` and `describe`, compared with the reference run at Kafka; an
//! agent killed (SIGKILL) under an open transaction: after its restart the
//! transaction completes (or is aborted by its timeout), the last stable
//! offset moves, nothing is left hanging; Kafka Streams with
//! `exactly_once_v2` counting across a crash of the application; a Kafka
//! Connect worker with its config, offset and status topics here; a
//! KIP-848 group joining, rebalancing, committing and resuming.

use std::path::Path;

use crate::common;
use crate::common::kafka::{driver, kafka_tool, spawn_driver};
use crate::connect::{ConnectScenario, kafka_connect_view};
use crate::scenarios::*;

#[test]
fn transaction_scenarios_at_the_agent_show_what_kafka_shows() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (agent, ours) = local_agent(dir.path(), &[("wl-txn-agent", 1)]);
    assert_txn_view_as_at_kafka(transaction_scenarios(&ours, "wl-txn-agent", 0));
    agent.stop().expect("clean stop");
}

/// A `ringmirror run` process's configuration: a plain agent (two shards)
/// listening on `port`.
fn write_agent_config(dir: &Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("ringmirror.toml");
    let data_dir = dir.join("data");
    std::fs::write(
        &path,
        format!("data_dir = {data_dir:?}\nshards = 2\n[listener]\naddress = \"127.0.0.1:{port}\"\n"),
    )
    .expect("write the configuration");
    path
}

fn start_agent_process(config: &Path, log: &Path, bootstrap: &str) -> common::ChildGuard {
    let agent = common::run_agent_binary(config, log, &[]);
    common::wait_until(DEADLINE, "the agent listens", || {
        std::net::TcpStream::connect(bootstrap)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    agent
}

/// The producer holds a transaction open (5 records sent, and offset 5
/// committed in it for a group) when the agent is killed; the agent
/// restarts on the same port, and the producer then commits. The
/// coordinator's log kept the transaction: the commit is accepted and its
/// marker written (had it been refused, the coordinator would abort it at
/// its timeout) — either way it ends, the last stable offset reaches the
/// log end, READ_COMMITTED readers see the records exactly when it
/// committed, and the group's offset, kept pending across the kill, is
/// committed with them or dropped.
#[test]
fn a_transaction_open_when_the_agent_is_killed_ends_after_its_restart() {
    const TOPIC: &str = "wl-txn-crash";
    const ID: &str = "wl-txn-crash-holder";
    const GROUP: &str = "wl-txn-crash-group";
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let bootstrap = format!("127.0.0.1:{port}");
    let config = write_agent_config(dir.path(), port);
    let log = dir.path().join("agent.log");
    let agent = start_agent_process(&config, &log, &bootstrap);
    driver(
        "create-topic",
        &bootstrap,
        &["--topic", TOPIC, "--partitions", "1", "--replication", "1"],
    );
    let go = dir.path().join("go");
    let mut holder = spawn_driver(
        "txn-hold",
        &bootstrap,
        &[
            "--topic",
            TOPIC,
            "--transactional",
            ID,
            "--go-file",
            go.to_str().expect("utf-8 path"),
            "--count",
            "5",
            "--offsets-group",
            GROUP,
        ],
    );
    holder.wait_for_line(DEADLINE, "the transaction is open", |l| l == "holding");
    let (end, stable) = end_offsets(&bootstrap, TOPIC, 0);
    assert_eq!((end, stable), (5, 0), "five records in an open transaction");
    assert!(
        common::committed_offsets(&bootstrap, GROUP, TOPIC, 1).is_empty(),
        "the transaction's offset is pending"
    );
    let status = agent.kill();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );

    let agent = start_agent_process(&config, &log, &bootstrap);
    std::fs::write(&go, "").expect("go");
    let (status, lines) = holder.wait_exit(DEADLINE);
    assert!(status.success(), "{status}: {lines:#?}");
    let outcome = lines.last().cloned().unwrap_or_default();
    let committed = outcome == "committed";
    assert!(committed || outcome.starts_with("failed "), "{lines:#?}");
    let ended = if committed { "CompleteCommit" } else { "CompleteAbort" };
    common::wait_until(DEADLINE, "the transaction ends", || {
        let text = kafka_tool(
            TRANSACTIONS_COMMAND,
            &bootstrap,
            &["describe", "--transactional-id", ID],
        );
        let state = table(&text).first().map(|row| row["TransactionState"].clone());
        if state.as_deref() == Some(ended) {
            Ok(())
        } else {
            Err(format!("{state:?}"))
        }
    });
    common::wait_until(DEADLINE, "the last stable offset reaches the log end", || {
        let (end, stable) = end_offsets(&bootstrap, TOPIC, 0);
        if end == stable && end == 6 {
            Ok(())
        } else {
            Err(format!("end {end}, stable {stable}"))
        }
    });
    let keys: Vec<String> = read(&bootstrap, TOPIC, "read_committed", "digest")
        .into_iter()
        .map(|r| r.key)
        .collect();
    let expected: Vec<String> = if committed {
        (0..5).map(|i| format!("h{i}")).collect()
    } else {
        Vec::new()
    };
    assert_eq!(keys, expected, "{outcome}");
    // The offset committed in the transaction, pending across the kill,
    // follows its outcome.
    let offsets = common::committed_offsets(&bootstrap, GROUP, TOPIC, 1);
    let expected_offsets = if committed { [(0, 5)].into() } else { Default::default() };
    assert_eq!(offsets, expected_offsets, "{outcome}");
    let status = agent.kill();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
}

/// Kafka Streams with `exactly_once_v2` at the agent, on local topics: the
/// same count as at Kafka (the reference in `at_kafka`), its
/// application killed mid-stream with a transaction open and a new
/// instance (empty state) restoring from the changelog: each count is
/// output once.
#[test]
fn kafka_streams_exactly_once_at_the_agent_counts_each_record_once_across_a_crash() {
    const RECORDS: usize = 300;
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let app = StreamsApp::new("wl-streams-agent");
    let (agent, ours) = local_agent(dir.path(), &[(&app.input, 3), (&app.output, 3)]);
    streams_input(&ours, &app.input, 0, RECORDS);

    app.run_across_a_crash(&ours, dir.path(), RECORDS);
    let counts = app.counts(&ours);
    assert_eq!(duplicates(&counts), vec![], "no count output twice");
    assert_eq!(counts, expected_counts(0..RECORDS), "each word counted 1…n, once each");
    agent.stop().expect("clean stop");
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
    let scenario = ConnectScenario::new("wl-connect-agent", dir.path());
    let (agent, ours) = local_agent(dir.path(), &[(&scenario.lines_topic(), 1)]);
    let here = scenario.run(&ours);
    assert_eq!(here, at_kafka, "as at Kafka");
    agent.stop().expect("clean stop");
}

/// Kafka's Java consumer with `group.protocol=consumer` (KIP-848) on a
/// local topic: the scenario and checks of the reference run at Kafka (no
/// record read twice, every record read, lag 0 in `kafka-consumer-groups
/// --describe`).
#[test]
fn java_consumers_on_the_consumer_protocol_join_rebalance_commit_and_resume() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (topic, group) = ("wl-848-agent", "wl-848-agent-group");
    let (agent, ours) = local_agent(dir.path(), &[(topic, 4)]);
    kip848_group_reads_every_record_once(&ours, topic, group);
    agent.stop().expect("clean stop");
}
