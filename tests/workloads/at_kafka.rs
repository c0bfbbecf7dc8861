//! The reference runs at Apache Kafka 4.3.1 alone (the binary's shared
//! cluster): the Streams output across a crash of the application, the
//! transactions' READ_COMMITTED views and `kafka-transactions
//! list`/`describe`/`describe-producers`/`find-hanging`, a KIP-848 group joining, rebalancing when a member
//! leaves, committing and resuming, and a Connect worker keeping its
//! connectors, their offsets and statuses across a restart. The tests at
//! the agent, and after a failover, compare with these.

use crate::common::kafka::driver;
use crate::connect::kafka_connect_view;
use crate::scenarios::*;

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
    // describe-producers: five producers (the zombie and its successor
    // share a producer id), one with its transaction open since the
    // offset after the timed-out transaction's marker; find-hanging:
    // none, its coordinator knows the open one.
    let open_at = (5 + 1 + 4 + 1 + 3 + 1 + 3 + 1 + 2 + 1).to_string();
    let mut producers = vec!["None".to_owned(); 4];
    producers.insert(0, open_at.clone());
    assert_eq!(view.producers, producers, "{view:#?}");
    assert_eq!(
        view.open_producer,
        ("0".to_owned(), "-1".to_owned(), "1".to_owned(), open_at),
        "epoch 0, no marker yet, two records: {view:#?}"
    );
    assert_eq!(view.hanging, vec![], "{view:#?}");
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
    kip848_group_reads_every_record_once(&c.bootstrap, "wl-848-ref", "wl-848-ref-group");
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
