//! The unplanned failover (issue 17): a Kafka Streams `exactly_once_v2`
//! count runs at Kafka while an agent mirrors its topics through a proxy;
//! the proxy is cut (every connection dropped, new ones refused: the
//! source is gone for the agent, while Kafka stays up for the test to read
//! its true state), the application goes on at Kafka until it has
//! committed once more and is then killed — what it committed after the
//! cut is the window —, `mirror stop` runs at the agent, and a new
//! instance of the application carries on at the agent.
//!
//! The windows, measured per partition and printed:
//! - **data**: the source's log end (read at Kafka after the cut) minus
//!   the copy's log end when the mirror stopped, and the records committed
//!   at the source that are not committed in the copy;
//! - **committed offsets**: the group's committed offset at Kafka minus
//!   the offset the copy had synced (after the stop's clamp).
//!
//! Group offsets reach the copy through the periodic sync, apart from the
//! data (KIP-1279 says as much: exactly-once atomicity is not kept across
//! an unplanned stop), so after the stop the copy can hold a transaction's
//! records without its offsets. What is asserted is what holds whatever
//! the timing: the copy's batches are the source's, byte for byte, up to
//! its log end; it commits nothing the source did not; what the new
//! instance processes is exactly what lies past the synced offsets; and
//! each word's counts differ from the run without failover only by what
//! the windows hold — repeats from input inside the committed-offset
//! window, losses and repeated counts from records inside the data window.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use ringmirror_control::admin::AdminRequest;
use ringmirror_storage::batch::{ControlRecord, ControlType, decode_records};
use ringmirror_storage::log::TopicPartition;

use crate::common;
use crate::common::cut_proxy::CutProxy;
use crate::common::kafka::Background;
use crate::scenarios::*;

const PARTITIONS: i32 = 3;

/// One record: offset, key, value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    offset: i64,
    key: String,
    value: Vec<u8>,
}

/// One partition as a raw Fetch sees it: its batches up to the high
/// watermark, and the records a READ_COMMITTED reader gets.
struct PartitionView {
    high_watermark: i64,
    batches: common::Batches,
    committed: Vec<Rec>,
}

impl PartitionView {
    /// Reads `topic`-`partition` at `bootstrap` (Kafka or the agent) and
    /// applies the markers as a READ_COMMITTED reader does: a
    /// transaction's records count once its producer's COMMIT marker
    /// follows them; an ABORT, or no marker yet, hides them.
    fn read(bootstrap: &str, topic: &str, partition: i32) -> Self {
        let log = common::source_partition_log(bootstrap, topic, partition, DEADLINE);
        let mut open: HashMap<i64, Vec<Rec>> = HashMap::new();
        let mut committed = Vec::new();
        for (_, bytes) in &log.batches {
            let batch = common::batch_view(bytes);
            if batch.is_control() {
                let control = ControlRecord::decode(&batch).expect("a control record");
                let records = open.remove(&batch.producer_id()).unwrap_or_default();
                if control.control_type == ControlType::Commit {
                    committed.extend(records);
                }
                continue;
            }
            let records = decode_records(&batch, common::MAX_DECOMPRESSED_BYTES)
                .expect("records")
                .into_iter()
                .map(|r| Rec {
                    offset: r.offset,
                    key: String::from_utf8(r.key.unwrap_or_default()).expect("a string key"),
                    value: r.value.unwrap_or_default(),
                });
            if batch.is_transactional() {
                open.entry(batch.producer_id()).or_default().extend(records);
            } else {
                committed.extend(records);
            }
        }
        committed.sort_by_key(|r| r.offset);
        Self {
            high_watermark: log.high_watermark,
            batches: log.batches,
            committed,
        }
    }
}

/// `group`'s committed offsets of `topic` at the binary's Kafka cluster,
/// asked of each broker until its coordinator answers.
fn committed_at_kafka(group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let c = cluster();
    common::wait_until(DEADLINE, "the group's coordinator answers", || {
        let mut errors = Vec::new();
        for id in c.broker_ids() {
            match common::try_committed_offsets(c.broker_addr(id), group, topic, PARTITIONS) {
                Ok(offsets) => return Ok(offsets),
                Err(code) => errors.push(code),
            }
        }
        Err(format!("error codes {errors:?}"))
    })
}

/// An agent mirroring, as mirror "dr", `topics` (and `mirror`'s TOML
/// lines) of the binary's Kafka cluster through a [`CutProxy`] in front
/// of every broker; its data under `dir`.
fn mirror_through_proxy(dir: &Path, topics: &[&str], mirror: &str) -> (CutProxy, ringmirror::agent::Agent) {
    let c = cluster();
    let brokers: Vec<String> = c
        .broker_ids()
        .into_iter()
        .map(|id| c.broker_addr(id).to_owned())
        .collect();
    let proxy = CutProxy::start(&brokers);
    let agent = common::kafka::mirror_agent(&dir.join("data"), &proxy.bootstrap, topics, "", "", mirror);
    (proxy, agent)
}

/// The application (as [`StreamsApp::start`]) with Streams' purge of
/// consumed repartition records off: the test counts them afterwards.
fn start_app(app: &StreamsApp, bootstrap: &str, dir: &Path, delay_ms: u32, idle_ms: u32) -> Background {
    app.start_with(
        bootstrap,
        dir,
        delay_ms,
        idle_ms,
        &["--prop", "repartition.purge.interval.ms=600000"],
    )
}

/// The word a record of `topic` is about: the input's value, the key elsewhere.
fn word(app: &StreamsApp, topic: &str, r: &Rec) -> String {
    if topic == app.input {
        String::from_utf8(r.value.clone()).expect("a word")
    } else {
        r.key.clone()
    }
}

/// A count the application output (Kafka's LongSerializer).
fn count(r: &Rec) -> i64 {
    i64::from_be_bytes(r.value.as_slice().try_into().expect("an 8-byte count"))
}

/// Per word, how many of `records` of `topic` are about it.
fn per_word<'a>(app: &StreamsApp, topic: &str, records: impl Iterator<Item = &'a Rec>) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for r in records {
        *out.entry(word(app, topic, r)).or_default() += 1;
    }
    out
}

#[test]
fn kafka_streams_exactly_once_after_an_unplanned_failover_differs_only_by_the_windows() {
    const RECORDS: usize = 1500;
    let _turn = one_at_a_time();
    let _logs = common::logs::capture("info");
    let c = cluster();
    let app = StreamsApp::new("wl-up-streams");
    c.create_topic(&app.input, PARTITIONS, &[]);
    c.create_topic(&app.output, PARTITIONS, &[]);
    streams_input(&c.bootstrap, &app.input, 0, RECORDS);
    let dir = tempfile::tempdir().unwrap();
    let (proxy, agent) = mirror_through_proxy(dir.path(), &[], r#"topics_include = "wl-up-streams-.*""#);
    let ours = agent.listener_addr().expect("listening").to_string();
    let [repartition, changelog] = app.internal_topics();
    let topics = [
        app.input.clone(),
        app.output.clone(),
        repartition.clone(),
        changelog.clone(),
    ];

    // The application at Kafka, each record held 40 ms: mid-stream for a
    // minute, so it still has input to commit after the cut however long
    // the mirror takes to place every topic and sync offsets (at 10 ms, a
    // clean-clone run reached the cut 23 s in, with all input processed,
    // and no commit came after it).
    let mut running = start_app(&app, &c.bootstrap, dir.path(), 40, 0);
    running.wait_for_line(DEADLINE, "RUNNING", |l| l == "state RUNNING");
    common::wait_until(
        DEADLINE,
        "every topic mirrored, counts among them, some of the group's offsets synced",
        || {
            let status = agent.status();
            let unplaced: Vec<String> = topics
                .iter()
                .flat_map(|t| (0..PARTITIONS).map(move |p| TopicPartition::new(t, p)))
                .filter(|tp| !status.contains_key(&("dr".to_owned(), tp.clone())))
                .map(|tp| tp.to_string())
                .collect();
            let synced =
                [&app.input, &repartition].map(|t| common::committed_offsets(&ours, &app.app_id, t, PARTITIONS));
            // The count step has output (and the copy holds some of it).
            let counted: i64 = (0..PARTITIONS)
                .filter_map(|p| status.get(&("dr".to_owned(), TopicPartition::new(&app.output, p))))
                .map(|s| s.log_end_offset)
                .sum();
            if unplaced.is_empty()
                && synced.iter().any(|s| !s.is_empty())
                && counted > 0
                && processed(&running) >= RECORDS / 5
            {
                Ok(())
            } else {
                let d = common::describe_mirror(&agent, "dr");
                Err(format!(
                    "not placed: {unplaced:?}; synced {synced:?}; {counted} counts mirrored; group sync: {:?} {:?}; {:?}",
                    d.groups_synced_ms, d.groups, d.sync_error
                ))
            }
        },
    );

    // The disaster: the agent loses the source; the application goes on at
    // Kafka until it has committed again, then dies with it.
    proxy.cut();
    let sum = |offsets: &BTreeMap<i32, i64>| offsets.values().sum::<i64>();
    let at_cut =
        sum(&committed_at_kafka(&app.app_id, &app.input)) + sum(&committed_at_kafka(&app.app_id, &repartition));
    common::wait_until(DEADLINE, "the application commits at Kafka after the cut", || {
        let now =
            sum(&committed_at_kafka(&app.app_id, &app.input)) + sum(&committed_at_kafka(&app.app_id, &repartition));
        if now > at_cut { Ok(()) } else { Err(format!("{now}")) }
    });
    // (Committing at Kafka after the cut, it was mid-stream when cut.)
    println!("input records processed at Kafka: {}", processed(&running));
    running.kill();

    // The source's true state, read at Kafka after the cut.
    let source: BTreeMap<(String, i32), PartitionView> = topics
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| (t.clone(), p)))
        .map(|(t, p)| {
            let view = PartitionView::read(&c.bootstrap, &t, p);
            ((t, p), view)
        })
        .collect();
    let committed_source: BTreeMap<&String, BTreeMap<i32, i64>> = [&app.input, &repartition]
        .into_iter()
        .map(|t| (t, committed_at_kafka(&app.app_id, t)))
        .collect();

    // The operator fails over; the source does not answer.
    let stop_started = Instant::now();
    agent
        .admin(AdminRequest::Stop {
            mirror: "dr".into(),
            topics: topics.to_vec(),
        })
        .expect("mirror stop");
    let stop_answered = stop_started.elapsed();
    for t in &topics {
        common::kafka::wait_failed_over(&agent, t, PARTITIONS, DEADLINE);
    }
    let stop_done = stop_started.elapsed();
    println!(
        "mirror stop with the source cut: answered in {stop_answered:?}, every partition writable after {stop_done:?}"
    );
    assert!(
        stop_answered < Duration::from_secs(10),
        "mirror stop waits for a source that refuses connections: {stop_answered:?}"
    );

    // The copy at the stop: the source's batches up to where it stopped,
    // then only its own markers, at the epoch the failover began.
    let status = agent.status();
    let mut copy: BTreeMap<(String, i32), PartitionView> = BTreeMap::new();
    let mut mirrored_end: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut ended: BTreeMap<(String, i32), i64> = BTreeMap::new();
    println!(
        "data window (per partition: source log end - copy's log end at the stop; records committed at the source, not in the copy):"
    );
    let mut window_records: BTreeMap<(String, i32), Vec<Rec>> = BTreeMap::new();
    for ((t, p), at_source) in &source {
        let (end, epoch) = status[&("dr".to_owned(), TopicPartition::new(t, *p))]
            .mirroring_ended
            .expect("ended");
        let view = PartitionView::read(&ours, t, *p);
        let ours_end = view
            .batches
            .iter()
            .find(|(_, b)| common::batch_view(b).partition_leader_epoch() >= epoch)
            .map_or(end, |(base, _)| *base);
        for (base, bytes) in view.batches.iter().filter(|(base, _)| *base >= ours_end) {
            let batch = common::batch_view(bytes);
            let control = batch
                .is_control()
                .then(|| ControlRecord::decode(&batch).unwrap().control_type);
            assert!(
                matches!(control, Some(ControlType::Abort | ControlType::MirrorPidReset)),
                "{t}-{p}: past the mirrored end at {base}, only the stop's markers: {control:?}"
            );
        }
        let mirrored: Vec<_> = view.batches.iter().filter(|(base, _)| *base < ours_end).collect();
        let theirs: Vec<_> = at_source.batches.iter().filter(|(base, _)| *base < ours_end).collect();
        assert!(
            mirrored == theirs,
            "{t}-{p}: the copy's batches below {ours_end} are the source's, byte for byte"
        );
        assert!(
            ours_end <= at_source.high_watermark,
            "{t}-{p}: nothing the source lacks"
        );
        // Committed here only what the source committed.
        let theirs_committed: HashMap<i64, &Rec> = at_source.committed.iter().map(|r| (r.offset, r)).collect();
        for r in &view.committed {
            assert_eq!(
                theirs_committed.get(&r.offset),
                Some(&r),
                "{t}-{p}: committed in the copy, committed at the source"
            );
        }
        let here: BTreeSet<i64> = view.committed.iter().map(|r| r.offset).collect();
        let missing: Vec<Rec> = at_source
            .committed
            .iter()
            .filter(|r| !here.contains(&r.offset))
            .cloned()
            .collect();
        println!(
            "  {t}-{p}: {} - {ours_end} = {} offsets; {} records",
            at_source.high_watermark,
            at_source.high_watermark - ours_end,
            missing.len()
        );
        window_records.insert((t.clone(), *p), missing);
        mirrored_end.insert((t.clone(), *p), ours_end);
        ended.insert((t.clone(), *p), end);
        copy.insert((t.clone(), *p), view);
    }

    // The committed-offset window.
    let synced: BTreeMap<&String, BTreeMap<i32, i64>> = [&app.input, &repartition]
        .into_iter()
        .map(|t| (t, common::committed_offsets(&ours, &app.app_id, t, PARTITIONS)))
        .collect();
    println!("committed-offset window (per partition: Kafka's committed offset - the copy's synced offset):");
    let mut offsets_window = 0;
    for t in [&app.input, &repartition] {
        for p in 0..PARTITIONS {
            let at_kafka = committed_source[t].get(&p).copied().unwrap_or(0);
            let here = synced[t].get(&p).copied().unwrap_or(0);
            assert!(
                here <= mirrored_end[&(t.clone(), p)],
                "{t}-{p}: the synced offset {here} is within the copy"
            );
            println!("  {t}-{p}: {at_kafka} - {here} = {}", at_kafka - here);
            offsets_window += at_kafka - here;
        }
    }
    assert!(
        offsets_window > 0,
        "the application committed at Kafka after the cut: the window is not empty"
    );

    // What the copy holds of each word at the stop, per part.
    let in_range = |t: &String, from: &BTreeMap<i32, i64>, to: Option<&BTreeMap<i32, i64>>| {
        let records: Vec<&Rec> = (0..PARTITIONS)
            .flat_map(|p| {
                let lo = from.get(&p).copied().unwrap_or(0);
                let hi = to
                    .map_or(i64::MAX, |to| to.get(&p).copied().unwrap_or(0))
                    .min(mirrored_end[&(t.clone(), p)]);
                copy[&(t.clone(), p)]
                    .committed
                    .iter()
                    .filter(move |r| r.offset >= lo && r.offset < hi)
            })
            .collect();
        per_word(&app, t, records.into_iter())
    };
    let windowed = |t: &String| {
        per_word(
            &app,
            t,
            (0..PARTITIONS).flat_map(|p| window_records[&(t.clone(), p)].iter()),
        )
    };
    let processed_here_expected = {
        let mut both = in_range(&app.input, &synced[&app.input], None);
        for (w, n) in in_range(&repartition, &synced[&repartition], None) {
            *both.entry(w).or_default() += n;
        }
        both
    };
    let repeated_max = {
        let mut both = in_range(&app.input, &synced[&app.input], Some(&committed_source[&app.input]));
        for (w, n) in in_range(
            &repartition,
            &synced[&repartition],
            Some(&committed_source[&repartition]),
        ) {
            *both.entry(w).or_default() += n;
        }
        both
    };
    let (changelog_window, repartition_window, output_window) =
        (windowed(&changelog), windowed(&repartition), windowed(&app.output));
    let before: BTreeMap<String, Vec<i64>> = {
        let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for p in 0..PARTITIONS {
            for r in &copy[&(app.output.clone(), p)].committed {
                out.entry(r.key.clone()).or_default().push(count(r));
            }
        }
        out
    };

    // A new instance at the agent, same application.id, empty state.
    let second = start_app(&app, &ours, dir.path(), 0, 4000);
    let (exit, lines) = second.wait_exit(DEADLINE * 2);
    assert!(exit.success(), "{exit}: {lines:#?}");
    let mut after: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let view = PartitionView::read(&ours, &app.output, p);
        for r in view
            .committed
            .iter()
            .filter(|r| r.offset >= ended[&(app.output.clone(), p)])
        {
            after.entry(r.key.clone()).or_default().push(count(r));
        }
    }

    let input_words = expected_counts(0..RECORDS);
    let mut totals = (0i64, 0i64, 0i64, 0i64);
    println!("per word: no-failover count, copy's output at the stop, output after, processed again (bound), lost");
    for w in (0..WORDS).map(|i| format!("w{i}")) {
        let n = input_words.iter().filter(|(x, _)| *x == w).count() as i64;
        let mut before_w = before.get(&w).cloned().unwrap_or_default();
        before_w.sort_unstable();
        let a = before_w.len() as i64;
        assert_eq!(
            before_w,
            (1..=a).collect::<Vec<_>>(),
            "{w}: the copy's output is a prefix of the run without failover"
        );
        let mut new_w = after.get(&w).cloned().unwrap_or_default();
        new_w.sort_unstable();
        let restored = new_w.first().map_or(a, |c| c - 1);
        let last = new_w.last().copied().unwrap_or(a).max(a);
        assert_eq!(
            new_w,
            (restored + 1..=restored + new_w.len() as i64).collect::<Vec<_>>(),
            "{w}: the new instance counts on from its restored state, once each"
        );
        assert_eq!(
            new_w.len() as i64,
            processed_here_expected.get(&w).copied().unwrap_or(0),
            "{w}: the new instance processed exactly the input and repartition records past the synced offsets"
        );
        let repeated_pairs = before_w.iter().filter(|c| new_w.contains(c)).count() as i64;
        let gap = (restored - a).max(0);
        let excess = last - n;
        let (cl, rep, out, bound) = (
            changelog_window.get(&w).copied().unwrap_or(0),
            repartition_window.get(&w).copied().unwrap_or(0),
            output_window.get(&w).copied().unwrap_or(0),
            repeated_max.get(&w).copied().unwrap_or(0),
        );
        println!(
            "  {w}: {n}; 1..{a}; {}..{last}; final count {excess:+} ({bound} in the committed-offset window); {repeated_pairs} counts output twice, {gap} skipped",
            restored + 1
        );
        assert!(
            excess <= bound,
            "{w}: processed again only inside the committed-offset window"
        );
        assert!(excess >= -(cl + rep), "{w}: lost only what the data window held");
        assert!(
            repeated_pairs <= cl,
            "{w}: a count output twice only where the copy's changelog lacked it"
        );
        assert!(
            gap <= out,
            "{w}: a count skipped only where the copy's output lacked it"
        );
        totals.0 += excess.max(0);
        totals.1 += (-excess).max(0);
        totals.2 += repeated_pairs;
        totals.3 += gap;
    }
    println!(
        "totals: {} input records counted again, {} lost, {} counts output twice, {} skipped",
        totals.0, totals.1, totals.2, totals.3
    );
    agent.stop().expect("clean stop");
}

/// A source that stops answering (a network partition: connections stay
/// open, nothing is refused, nothing answers) while the agent has a Fetch
/// and a metadata request out: `mirror stop` is answered once its last
/// group offset sync has given up (5 s), not after the requests' I/O
/// timeouts, and every partition ends right after with everything it had
/// mirrored, then its MIRROR_PID_RESET marker.
#[test]
fn mirror_stop_is_prompt_when_the_source_stops_answering() {
    const TOPIC: &str = "wl-up-silent";
    let _turn = one_at_a_time();
    let _logs = common::logs::capture("info");
    let c = cluster();
    c.create_topic(TOPIC, PARTITIONS, &[]);
    common::kafka::driver(
        "produce",
        &c.bootstrap,
        &["--topic", TOPIC, "--count", "300", "--idempotent"],
    );
    let dir = tempfile::tempdir().unwrap();
    let (proxy, agent) = mirror_through_proxy(dir.path(), &[TOPIC], "");
    let mirrored = common::kafka::wait_caught_up(&agent, &c.bootstrap, TOPIC, PARTITIONS, DEADLINE);

    proxy.silence();
    // Fetchers long-poll every 50 ms and metadata rounds run every second:
    // both have a request out that nothing will answer.
    common::wait_until(DEADLINE, "a Fetch and a Metadata request unanswered", || {
        let (fetches, metadata) = (proxy.swallowed(1), proxy.swallowed(3));
        if fetches > 0 && metadata > 0 {
            Ok(())
        } else {
            Err(format!("{fetches} Fetch, {metadata} Metadata"))
        }
    });
    let started = Instant::now();
    agent
        .admin(AdminRequest::Stop {
            mirror: "dr".into(),
            topics: vec![TOPIC.into()],
        })
        .expect("mirror stop");
    let answered = started.elapsed();
    let ended = common::kafka::wait_failed_over(&agent, TOPIC, PARTITIONS, DEADLINE);
    let done = started.elapsed();
    println!("mirror stop with the source silent: answered in {answered:?}, every partition writable after {done:?}");
    let expected: BTreeMap<i32, i64> = mirrored.iter().map(|(p, end)| (*p, end + 1)).collect();
    assert_eq!(ended, expected, "every mirrored record kept, then MIRROR_PID_RESET");
    // The I/O timeouts are 10 s (control) and 30 s (fetch): well above these.
    assert!(answered < Duration::from_secs(9), "answered after {answered:?}");
    assert!(done < Duration::from_secs(12), "ended after {done:?}");
    proxy.cut();
    agent.stop().expect("clean stop");
}
