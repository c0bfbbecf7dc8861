//! The workloads on a copy after a failover from Kafka: each starts at the
//! binary's Kafka cluster, an agent mirrors its topics (the application's
//! input and output, Streams' changelog and repartition topics, Connect's
//! config, offset and status topics — Kafka's own `__consumer_offsets`
//! and `__transaction_state` are not mirrored; group offsets come through
//! the group sync), the mirror is stopped (`mirror stop`, the README's
//! failover), and the workload carries on at the agent.
//!
//! The failover here is the planned one: the application is stopped at
//! Kafka (killed, for Streams, with a transaction open), the mirror
//! catches up, and the window — what the source holds that the copy does
//! not, per partition, when the mirror stops — is measured and must be
//! empty; what a workload shows after it is then compared with the run
//! without failover, record for record.

use std::collections::BTreeMap;
use std::path::Path;

use ringmirror::agent::Agent;
use ringmirror_control::admin::AdminRequest;
use ringmirror_storage::log::TopicPartition;

use crate::common;
use crate::common::kafka::kafka_tool;
use crate::connect::{ConnectScenario, ConnectView, kafka_connect_view};
use crate::scenarios::*;

/// An agent mirroring, as mirror "dr", the topics of the binary's Kafka
/// cluster whose names match `topics_include`.
fn mirror_of(dir: &Path, topics_include: &str) -> (Agent, String) {
    let agent = common::kafka::mirror_agent(
        &dir.join("data"),
        &cluster().bootstrap,
        &[],
        "",
        "",
        &format!("topics_include = {topics_include:?}"),
    );
    let bootstrap = agent.listener_addr().expect("listening").to_string();
    (agent, bootstrap)
}

/// A partition's log end at Kafka and in the agent's copy when the mirror
/// stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AtStop {
    source_end: i64,
    mirrored_end: i64,
}

/// What a failover measured and left: per partition, the ends when the
/// mirror stopped (their difference is the window: records committed at
/// the source but not in the copy), and the copy's log end after the
/// failover's markers.
struct FailedOver {
    at_stop: BTreeMap<(String, i32), AtStop>,
    ended: BTreeMap<(String, i32), i64>,
}

impl FailedOver {
    /// Records the source holds that the copy did not when it stopped.
    fn window(&self) -> BTreeMap<(String, i32), i64> {
        self.at_stop
            .iter()
            .filter(|(_, e)| e.source_end != e.mirrored_end)
            .map(|(tp, e)| (tp.clone(), e.source_end - e.mirrored_end))
            .collect()
    }
}

/// The planned failover of `topics` (name, partitions) of mirror "dr":
/// waits until the copy holds what Kafka holds of every partition, notes
/// both ends, runs `mirror stop` on them, and waits until every partition
/// has ended mirroring (its markers written, writable).
fn fail_over(agent: &Agent, topics: &[(&str, i32)]) -> FailedOver {
    let source = &cluster().bootstrap;
    let partitions: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|&(t, n)| (0..n).map(move |p| (t.to_owned(), p)))
        .collect();
    let at_stop = common::wait_until(DEADLINE, "the copy holds what Kafka holds", || {
        let status = agent.status();
        let ends: BTreeMap<(String, i32), AtStop> = partitions
            .iter()
            .map(|(t, p)| {
                let mirrored_end = status
                    .get(&("dr".to_owned(), TopicPartition::new(t, *p)))
                    .map_or(-1, |s| s.log_end_offset);
                let source_end = common::source_partition_log(source, t, *p, DEADLINE).high_watermark;
                (
                    (t.clone(), *p),
                    AtStop {
                        source_end,
                        mirrored_end,
                    },
                )
            })
            .collect();
        if ends.values().all(|e| e.source_end == e.mirrored_end) {
            Ok(ends)
        } else {
            Err(format!("{ends:?}"))
        }
    });
    agent
        .admin(AdminRequest::Stop {
            mirror: "dr".into(),
            topics: topics.iter().map(|(t, _)| (*t).to_owned()).collect(),
        })
        .expect("mirror stop");
    let mut ended = BTreeMap::new();
    for &(topic, n) in topics {
        for (p, end) in common::kafka::wait_failed_over(agent, topic, n, DEADLINE) {
            ended.insert((topic.to_owned(), p), end);
        }
    }
    FailedOver { at_stop, ended }
}

/// `group`'s committed offsets of `topic` at Kafka by partition, as
/// `kafka-consumer-groups --describe` shows them (partitions without one
/// left out).
fn committed_at_kafka(group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let text = kafka_tool(GROUPS_COMMAND, &cluster().bootstrap, &["--describe", "--group", group]);
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&topic) {
                return None;
            }
            Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?))
        })
        .collect()
}

/// Kafka Streams with `exactly_once_v2`: the count runs at Kafka and is
/// killed mid-stream (a transaction open); the mirror copies its input,
/// output, repartition and changelog topics, and the group sync its
/// committed offsets (once more at `mirror stop`); after the failover a
/// new instance with the same application.id and an empty state dir
/// starts at the agent, restores from the copied changelog, goes on from
/// the synced offsets, and counts 60 more records produced at the agent.
/// Read committed, the output holds each count 1…n once — what the run
/// without failover outputs; the window at the stop is empty, so no count
/// is missing.
#[test]
fn kafka_streams_exactly_once_carries_on_at_the_agent_after_a_failover() {
    const RECORDS: usize = 300;
    const MORE: usize = 60;
    let _turn = one_at_a_time();
    let c = cluster();
    let app = StreamsApp::new("wl-fo-streams");
    c.create_topic(&app.input, 3, &[]);
    c.create_topic(&app.output, 3, &[]);
    streams_input(&c.bootstrap, &app.input, 0, RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let (agent, ours) = mirror_of(dir.path(), "wl-fo-streams-.*");

    app.run_until_killed(&c.bootstrap, dir.path(), RECORDS);
    let [repartition, changelog] = app.internal_topics();
    let topics = [
        (app.input.as_str(), 3),
        (app.output.as_str(), 3),
        (repartition.as_str(), 3),
        (changelog.as_str(), 3),
    ];
    let failed_over = fail_over(&agent, &topics);
    assert_eq!(
        failed_over.window(),
        BTreeMap::new(),
        "nothing committed at Kafka is missing here"
    );
    let at_kafka = committed_at_kafka(&app.app_id, &app.input);
    assert!(!at_kafka.is_empty(), "the application committed its input at Kafka");
    assert_eq!(
        common::committed_offsets(&ours, &app.app_id, &app.input, 3),
        at_kafka,
        "the application's input offsets, synced"
    );

    streams_input(&ours, &app.input, RECORDS, RECORDS + MORE);
    app.run_until_idle(&ours, dir.path());
    let counts = app.counts(&ours);
    assert_eq!(duplicates(&counts), vec![], "no count output twice");
    assert_eq!(
        counts,
        expected_counts(0..RECORDS + MORE),
        "each word counted 1…n, once each, as without the failover"
    );
    agent.stop().expect("clean stop");
}

/// Transactions on a failed-over topic: at Kafka a transaction committed
/// and one left open (its producer gone, its timeout far away) when the
/// mirror stops; the stop's ABORT marker closes the open one here, so
/// READ_COMMITTED readers see only the committed records and the last
/// stable offset is the log end. Then the transaction scenarios run on the
/// now writable topic and show what they show at Kafka.
#[test]
fn transactions_run_on_a_failed_over_topic_and_one_open_at_the_source_is_aborted() {
    const TOPIC: &str = "wl-fo-txn";
    let _turn = one_at_a_time();
    let c = cluster();
    c.create_topic(TOPIC, 1, &[]);
    let produce = |id: &str, outcome: &str, keys: &str, count: &str| {
        let long_timeout = ["--prop", "transaction.timeout.ms=900000"];
        produce_transaction(&c.bootstrap, TOPIC, id, outcome, keys, count, &long_timeout)
    };
    produce("wl-fo-source-commit", "commit", "s", "6");
    produce("wl-fo-source-open", "open", "u", "4");
    let dir = tempfile::tempdir().unwrap();
    let (agent, ours) = mirror_of(dir.path(), TOPIC);

    let failed_over = fail_over(&agent, &[(TOPIC, 1)]);
    assert_eq!(failed_over.window(), BTreeMap::new());
    let at_stop = failed_over.at_stop[&(TOPIC.to_owned(), 0)];
    let ended = failed_over.ended[&(TOPIC.to_owned(), 0)];
    assert_eq!(
        ended,
        at_stop.mirrored_end + 2,
        "an ABORT marker for the open transaction, then MIRROR_PID_RESET"
    );
    assert_eq!(
        end_offsets(&ours, TOPIC, 0),
        (ended, ended),
        "the last stable offset is not held by the source's open transaction"
    );
    let keys = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    let committed: Vec<String> = read(&ours, TOPIC, "read_committed", "digest")
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(committed, keys("s", 6), "the open transaction's records are invisible");

    assert_txn_view_as_at_kafka(transaction_scenarios(&ours, TOPIC, ended));
    agent.stop().expect("clean stop");
}

/// Kafka Connect: a worker runs at Kafka (FileStream source and sink)
/// until the sink file holds the first 50 lines and stops; the mirror
/// copies its config, offset and status topics and the lines topic, the
/// group sync the sink's committed offsets; after the failover a worker
/// with the same topics at the agent finds its connectors, runs them, and
/// the source goes on from its stored file position, the sink from its
/// committed offset: the sink file ends up holding every line once, and
/// the lines topic every line once (nothing produced twice).
#[test]
fn connect_worker_carries_on_at_the_agent_after_a_failover() {
    let _turn = one_at_a_time();
    let at_kafka = kafka_connect_view().clone();
    let c = cluster();
    let dir = tempfile::tempdir().unwrap();
    let scenario = ConnectScenario::new("wl-fo-connect", dir.path());
    let lines = scenario.lines_topic();
    c.create_topic(&lines, 1, &[]);
    let (agent, ours) = mirror_of(dir.path(), "wl-fo-connect-.*");

    let offsets_before = scenario.first_run(&c.bootstrap);
    // Connect's topics, as the worker's properties make them.
    let topics = [
        ("wl-fo-connect-configs", 1),
        ("wl-fo-connect-offsets", 3),
        ("wl-fo-connect-status", 2),
        (lines.as_str(), 1),
    ];
    let failed_over = fail_over(&agent, &topics);
    assert_eq!(failed_over.window(), BTreeMap::new());
    let lines_ended = failed_over.ended[&(lines.clone(), 0)];
    assert_eq!(lines_ended, 50 + 1, "the 50 lines, then MIRROR_PID_RESET");

    let (connectors, offsets_after) = scenario.second_run(&ours);
    let here = scenario.view(connectors, offsets_before, offsets_after);
    assert_eq!(
        here.offsets_after.1,
        lines_ended + 30,
        "the sink committed the 30 new lines, written after the marker"
    );
    let here_as_at_kafka = ConnectView {
        offsets_after: (here.offsets_after.0, at_kafka.offsets_after.1),
        ..here
    };
    assert_eq!(here_as_at_kafka, at_kafka, "as at Kafka");
    let written = read(&ours, &lines, "read_uncommitted", "string");
    assert_eq!(written.len(), 80, "each line produced once: {written:#?}");
    agent.stop().expect("clean stop");
}
