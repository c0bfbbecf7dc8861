//! Topologies of several in-process agents driven through the mirror
//! coordinator (KIP-1279 states, `__mirror_state`, the admin requests):
//!
//! - Failback (KIP-1279's scenario B): A's local topic is mirrored by B; B
//!   fails over and takes writes while A writes on (a divergent tail);
//!   then A mirrors the topic back from B and its log converges on B's,
//!   byte for byte, offset for offset. A's tail is cut by replication
//!   truncation when it is in the epoch B mirrored last (A's local topic),
//!   and by LME truncation when A's epoch moved on after B's copy (A was
//!   itself a mirror, of librdkafka's mock cluster, and failed over too).
//! - Fan-out: two agents mirror the same topic from A.
//! - Fan-in: one agent mirrors topic `x` from an agent and `y` from
//!   librdkafka's mock cluster; a third mirror claiming `x` from the mock
//!   (which has an `x` too) is refused and never placed.
//!
//! A chain of agents through the coordinator (mock → A → B, both agents
//! running `[[mirror]]` configurations, which the coordinator carries out)
//! is `serve_chain::a_chain_of_agents_mirrors_the_source_byte_for_byte`.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::{AgentConfig, MirrorConfig};
use ringmirror_control::admin::{AdminAnswer, AdminRequest, PartitionView};
use ringmirror_dataplane::client::mirror_epochs::last_mirror_epochs;
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::{SourceMetadata, fetch_source_metadata};
use ringmirror_storage::batch::{BatchBuilder, BuildRecord, RecordBatch, decode_records};
use ringmirror_storage::log::TopicPartition;

/// Every wait in these tests is bounded by this.
const DEADLINE: Duration = Duration::from_secs(60);
const SEGMENT_BYTES: u64 = 65536;

/// Captures what the coordinator and the agents log (info and up); the
/// guard prints it if the test fails.
fn capture() -> common::logs::LogsOnFailure {
    common::logs::capture("info")
}

/// Prints how long the test has run at a step (shown with `--nocapture`).
fn step(started: Instant, what: &str) {
    eprintln!("{:>8.3} s  {what}", started.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------
// Agents
// ---------------------------------------------------------------------------

/// (mirror name, bootstrap, topics)
type MirrorSpec<'a> = (&'a str, &'a str, &'a [&'a str]);

/// An agent serving on `address` (port 0: a free one) with 2 shards and
/// small segments, running `mirrors` (quick fetches; source metadata
/// refreshed every `refresh_ms`).
fn agent_config_at(data_dir: &Path, address: &str, mirrors: &[MirrorSpec], refresh_ms: u64) -> AgentConfig {
    let mut text = format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [log]
        segment_bytes = {SEGMENT_BYTES}
        [listener]
        address = {address:?}
        "#
    );
    for (name, bootstrap, topics) in mirrors {
        let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
        text.push_str(&format!(
            r#"
            [[mirror]]
            name = {name:?}
            bootstrap_servers = [{bootstrap:?}]
            topics = [{topics}]
            fetch_max_wait_ms = 50
            fetch_partition_max_bytes = 32768
            metadata_refresh_interval_ms = {refresh_ms}
            "#
        ));
    }
    AgentConfig::parse(&text).expect("agent config")
}

/// [`agent_config_at`] on a free port, refreshing every second.
fn agent_config(data_dir: &Path, mirrors: &[MirrorSpec]) -> AgentConfig {
    agent_config_at(data_dir, "127.0.0.1:0", mirrors, 1000)
}

/// B of a failback: mirrors `orders` from A as "from-a", whose source
/// metadata is read at start and then only every 30 s. After the failover
/// nothing needs it, and B's shards keep refreshing it from A: a refresh
/// sent while A stops is never answered (see
/// `a_stopped_agent_releases_its_listener`), and B's stop then waits 30 s
/// for its I/O timeout.
fn failback_b_config(data_dir: &Path, a_addr: &str) -> AgentConfig {
    agent_config_at(data_dir, "127.0.0.1:0", &[("from-a", a_addr, &[ORDERS])], 30_000)
}

/// A mirror definition for `AdminRequest::CreateMirror`, with the same
/// quick settings as [`agent_config`]'s.
fn mirror_definition(name: &str, bootstrap: &str, topics: &[&str]) -> MirrorConfig {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "bootstrap_servers": [bootstrap],
        "topics": topics,
        "fetch_max_wait_ms": 50,
        "fetch_partition_max_bytes": 32768,
        "metadata_refresh_interval_ms": 1000,
    }))
    .expect("mirror definition")
}

fn listener(agent: &Agent) -> String {
    agent.listener_addr().expect("the agent listens").to_string()
}

fn partitions(topic: &str, count: i32) -> Vec<TopicPartition> {
    (0..count).map(|p| TopicPartition::new(topic, p)).collect()
}

/// Every partition of `mirror` as the coordinator reports it.
fn views(agent: &Agent, mirror: &str) -> Vec<PartitionView> {
    match agent.admin(AdminRequest::Status).expect("status") {
        AdminAnswer::Status { partitions } => partitions.into_iter().filter(|v| v.mirror == mirror).collect(),
        other => panic!("status answered {other:?}"),
    }
}

/// Waits until each of `tps` is in `state` in `mirror`; returns their views.
fn wait_state(agent: &Agent, mirror: &str, tps: &[TopicPartition], state: &str) -> Vec<PartitionView> {
    common::wait_until(DEADLINE, &format!("{mirror}: {tps:?} {state}"), || {
        let all = views(agent, mirror);
        let found: Vec<&PartitionView> = tps
            .iter()
            .filter_map(|tp| {
                all.iter()
                    .find(|v| v.topic == tp.topic && v.partition == tp.partition && v.state == state)
            })
            .collect();
        if found.len() == tps.len() {
            Ok(found.into_iter().cloned().collect())
        } else {
            Err(format!("{all:?}"))
        }
    })
}

/// Waits until `mirror`'s logs of `tps` reach the ends `addr` serves.
fn wait_caught_up(agent: &Agent, mirror: &str, source: &str, tps: &[TopicPartition]) {
    let ends: BTreeMap<&TopicPartition, i64> = tps.iter().map(|tp| (tp, served(source, tp).high_watermark)).collect();
    common::wait_until(DEADLINE, &format!("{mirror} catching up with {source}"), || {
        let status = agent.status();
        let behind: Vec<String> = ends
            .iter()
            .filter_map(|(tp, &end)| {
                let s = status.get(&(mirror.to_owned(), (*tp).clone()));
                s.is_none_or(|s| s.log_end_offset < end)
                    .then(|| format!("{tp}: want {end}, have {s:?}"))
            })
            .collect();
        if behind.is_empty() {
            Ok(())
        } else {
            Err(behind.join("; "))
        }
    });
}

/// Produces records `seed..seed + count` (numbered values, see
/// `mock_source::record_value`) round-robin over `topic`'s partitions
/// with an idempotent librdkafka producer, in small batches.
fn produce(bootstrap: &str, topic: &str, partitions: i32, count: u64, codec: &str, seed: u64) {
    mock_source::produce(bootstrap, topic, partitions, count, codec, seed)
        .unwrap_or_else(|e| panic!("produce to {topic} at {bootstrap}: {e}"));
}

// ---------------------------------------------------------------------------
// What agents serve and store
// ---------------------------------------------------------------------------

/// Every batch of a partition as raw Fetches from `addr` see it.
fn served(addr: &str, tp: &TopicPartition) -> common::SourcePartitionLog {
    common::source_partition_log(addr, &tp.topic, tp.partition, DEADLINE)
}

/// Why `ours` (named `name`) is not `theirs` byte for byte, offset for
/// offset, with the same log start and high watermark.
fn differences(
    name: &str,
    tp: &TopicPartition,
    ours: &common::SourcePartitionLog,
    theirs: &common::SourcePartitionLog,
) -> Result<(), String> {
    if (ours.log_start_offset, ours.high_watermark) != (theirs.log_start_offset, theirs.high_watermark) {
        return Err(format!(
            "{name} {tp}: log start and high watermark ({}, {}), expected ({}, {})",
            ours.log_start_offset, ours.high_watermark, theirs.log_start_offset, theirs.high_watermark
        ));
    }
    if ours.batches.len() != theirs.batches.len() {
        return Err(format!(
            "{name} {tp}: {} batches, expected {}",
            ours.batches.len(),
            theirs.batches.len()
        ));
    }
    for ((o_off, o), (t_off, t)) in ours.batches.iter().zip(&theirs.batches) {
        if o_off != t_off {
            return Err(format!(
                "{name} {tp}: a batch at {o_off} where the other has one at {t_off}"
            ));
        }
        if o != t {
            return Err(format!("{name} {tp}: the batch at {o_off} differs in its bytes"));
        }
    }
    Ok(())
}

/// Asserts that each agent of `agents` (name, address) serves exactly what
/// `source` serves of every partition of `tps`.
fn assert_serve_the_same(source: &str, agents: &[(&str, &str)], tps: &[TopicPartition]) {
    for tp in tps {
        let expected = served(source, tp);
        assert!(!expected.batches.is_empty(), "{tp}: the source holds data");
        for &(name, addr) in agents {
            if let Err(e) = differences(name, tp, &served(addr, tp), &expected) {
                panic!("{e}");
            }
        }
    }
}

/// Asserts that the stopped agents' data dirs hold the same logs of `tps`:
/// the same batches at the same offsets, log start and end, and
/// leader-epoch caches; and that offsets run without gap or overlap.
fn assert_same_logs_on_disk(expected: (&str, &Path), others: &[(&str, &Path)], tps: &[TopicPartition]) {
    let theirs = common::mirrored_partition_logs(expected.1, tps);
    for (tp, t) in &theirs {
        assert!(
            !t.batches.is_empty(),
            "{} {tp}: no data (a check of nothing)",
            expected.0
        );
        let mut next = t.log_start_offset;
        for (base, bytes) in &t.batches {
            assert_eq!(*base, next, "{} {tp}: a gap or an overlap at {base}", expected.0);
            next = common::batch_view(bytes).next_offset();
        }
        assert_eq!(next, t.log_end_offset, "{} {tp}: log end", expected.0);
    }
    for (name, dir) in others {
        let ours = common::mirrored_partition_logs(dir, tps);
        for (tp, t) in &theirs {
            let o = &ours[tp];
            assert_eq!(
                (o.log_start_offset, o.log_end_offset),
                (t.log_start_offset, t.log_end_offset),
                "{name} {tp}: log start and end on disk, against {}",
                expected.0
            );
            assert_eq!(o.batches.len(), t.batches.len(), "{name} {tp}: batches on disk");
            for ((o_off, o_bytes), (t_off, t_bytes)) in o.batches.iter().zip(&t.batches) {
                assert_eq!(o_off, t_off, "{name} {tp}: batch offsets on disk");
                assert!(o_bytes == t_bytes, "{name} {tp}: the batch at {o_off} differs on disk");
            }
            assert_eq!(o.epochs, t.epochs, "{name} {tp}: leader-epoch caches");
        }
    }
}

/// What a record of a partition says: its number for numbered values
/// (`value-<n>-…`), else its value as text; control batches are skipped.
fn record_names(batches: &common::Batches) -> Vec<String> {
    let mut out = Vec::new();
    for (_, bytes) in batches {
        let batch = RecordBatch::new(&bytes[..]).expect("a batch");
        if batch.is_control() {
            continue;
        }
        for record in decode_records(&batch, common::MAX_DECOMPRESSED_BYTES).expect("records") {
            let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
            let name = value
                .strip_prefix("value-")
                .and_then(|rest| rest.split('-').next())
                .map_or(value.clone(), str::to_owned);
            out.push(name);
        }
    }
    out
}

/// Numbered records in `from..to` among `names`.
fn numbered_in(names: &[String], from: u64, to: u64) -> usize {
    names
        .iter()
        .filter_map(|n| n.parse::<u64>().ok())
        .filter(|n| (from..to).contains(n))
        .count()
}

// ---------------------------------------------------------------------------
// Our Kafka client, on a glommio executor of its own
// ---------------------------------------------------------------------------

/// The metadata an agent answers for `topics`, as a mirror's coordinator reads it.
fn metadata(addr: &str, topics: &[&str]) -> SourceMetadata {
    let addr = addr.to_owned();
    let topics: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
    common::on_glommio(move || async move {
        let mut conn = Connection::connect(&addr, ConnectionOptions::default())
            .await
            .expect("connect");
        fetch_source_metadata(&mut conn, Some(&topics)).await.expect("metadata")
    })
}

/// The last mirror epochs `addr` answers for `partitions` of `topic_id`,
/// asked on behalf of `cluster_id` (DescribeClusterMirrors).
fn lmes_at(addr: &str, cluster_id: &str, topic_id: [u8; 16], partitions: Vec<i32>) -> BTreeMap<([u8; 16], i32), i32> {
    let (addr, cluster_id) = (addr.to_owned(), cluster_id.to_owned());
    common::on_glommio(move || async move {
        let mut conn = Connection::connect(&addr, ConnectionOptions::default())
            .await
            .expect("connect");
        last_mirror_epochs(&mut conn, &cluster_id, &[(topic_id, partitions)])
            .await
            .expect("last mirror epochs")
            .into_iter()
            .map(|(partition, lme)| (partition, lme.get()))
            .collect()
    })
}

// ---------------------------------------------------------------------------
// Failback
// ---------------------------------------------------------------------------

const ORDERS: &str = "orders";
/// Records produced to the first source before B mirrors it, at B after
/// its failover, and at A after B's copy (A's divergent tail).
const FIRST: (u64, u64) = (0, 400);
const B_AFTER_FAILOVER: (u64, u64) = (100_000, 100);
const A_DIVERGENT: (u64, u64) = (200_000, 300);

/// How many of the numbered records `seed..seed + count` each of `tps`
/// holds at `addr`.
fn count_records(addr: &str, tps: &[TopicPartition], (seed, count): (u64, u64)) -> Vec<usize> {
    tps.iter()
        .map(|tp| numbered_in(&record_names(&served(addr, tp).batches), seed, seed + count))
        .collect()
}

/// The highest leader epoch of the batches `addr` serves of `tp`.
fn highest_epoch(addr: &str, tp: &TopicPartition) -> i32 {
    served(addr, tp)
        .batches
        .iter()
        .map(|(_, b)| common::batch_view(b).partition_leader_epoch())
        .max()
        .expect("batches")
}

/// B's answer to A's last-mirror-epoch lookup for `tps`, with the checks
/// every failback needs: B recorded A's cluster id as its mirror
/// `b_mirror`'s source, so A's lookup counts that mirror and gets a real
/// epoch — `expected` per partition, the epoch B mirrored last, as B's
/// status says — while another cluster's lookup gets -1.
fn check_lmes(b: &Agent, b_mirror: &str, a_addr: &str, tps: &[TopicPartition], expected: &[i32]) {
    let b_addr = listener(b);
    let a_cluster = metadata(a_addr, &[ORDERS]).cluster_id.expect("A has a cluster id");
    let topic_id = metadata(&b_addr, &[ORDERS]).topics[ORDERS].0;
    assert_eq!(
        common::describe_mirror(b, b_mirror).source_cluster_id.as_deref(),
        Some(a_cluster.as_str()),
        "B's mirror {b_mirror} records A's cluster id as its source's"
    );
    let partitions: Vec<i32> = tps.iter().map(|tp| tp.partition).collect();
    // The coordinator publishes its reports for the listener on its next
    // round after the state change.
    let lmes = common::wait_until(DEADLINE, "B's last mirror epochs published", || {
        let lmes = lmes_at(&b_addr, &a_cluster, topic_id, partitions.clone());
        if lmes.values().all(|&lme| lme != -1) {
            Ok(lmes)
        } else {
            Err(format!("{lmes:?}"))
        }
    });
    let views = views(b, b_mirror);
    for (tp, &expected) in tps.iter().zip(expected) {
        let lme = lmes[&(topic_id, tp.partition)];
        assert_ne!(lme, -1, "{tp}: B answers A with a real last mirror epoch");
        assert_eq!(lme, expected, "{tp}: the LME is the epoch B mirrored last");
        let view = views.iter().find(|v| v.partition == tp.partition).expect("view");
        assert_eq!(view.last_mirror_epoch, lme, "{tp}: B's status shows the same LME");
        assert!(
            view.destination_leader_epoch > lme,
            "{tp}: B writes above the LME: {view:?}"
        );
    }
    let others = lmes_at(&b_addr, "some-other-cluster", topic_id, partitions);
    assert!(
        others.values().all(|&lme| lme == -1),
        "another cluster's lookup does not count B's mirror from A: {others:?}"
    );
}

/// Fails over `mirror`'s `orders` at `agent` and waits until it is STOPPED.
fn fail_over(agent: &Agent, mirror: &str, tps: &[TopicPartition]) {
    agent
        .admin(AdminRequest::Stop {
            mirror: mirror.into(),
            topics: vec![ORDERS.into()],
        })
        .unwrap_or_else(|e| panic!("stop {mirror}: {e}"));
    wait_state(agent, mirror, tps, "STOPPED");
}

/// A mirrors `orders` back from B as mirror `name`, claiming its own
/// topic; waits until A's partitions are MIRRORING and A serves exactly
/// what B serves, then checks the records: A's divergent tail is gone,
/// B's writes after its failover and what B had copied are there.
fn fail_back(a: &Agent, b: &Agent, name: &str, tps: &[TopicPartition]) {
    let (a_addr, b_addr) = (listener(a), listener(b));
    a.admin(AdminRequest::CreateMirror {
        config: mirror_definition(name, &b_addr, &[ORDERS]),
    })
    .unwrap_or_else(|e| panic!("create {name} at A: {e}"));
    wait_state(a, name, tps, "MIRRORING");
    common::wait_until(DEADLINE, "A converging on B", || {
        tps.iter()
            .try_for_each(|tp| differences("A", tp, &served(&a_addr, tp), &served(&b_addr, tp)))
    });
    let half = |(_, count): (u64, u64)| vec![count as usize / 2; tps.len()];
    assert_eq!(
        count_records(&a_addr, tps, A_DIVERGENT),
        vec![0; tps.len()],
        "A's divergent records are gone"
    );
    assert_eq!(
        count_records(&a_addr, tps, B_AFTER_FAILOVER),
        half(B_AFTER_FAILOVER),
        "A holds B's writes"
    );
    assert_eq!(
        count_records(&a_addr, tps, FIRST),
        half(FIRST),
        "A keeps what B had copied"
    );
}

/// Asserts that A logged a truncation of each of `tps` by its mirror
/// `mirror` (`message` and `field`=the expected offset in one line).
fn assert_truncated(
    mirror: &str,
    message: &str,
    field: &str,
    tps: &[TopicPartition],
    to: &BTreeMap<TopicPartition, i64>,
) {
    let quoted = format!("mirror={mirror:?}");
    for tp in tps {
        // Logged by the agent's events thread right after it hands the
        // event to the coordinator: poll.
        common::wait_until(DEADLINE, &format!("{tp}: \"{message}\" to {}", to[tp]), || {
            let line =
                common::logs::lines_with(&[message, &quoted, &format!("tp={tp} "), &format!("{field}={}", to[tp])]);
            if line.is_empty() {
                Err(format!(
                    "logged: {:#?}",
                    common::logs::lines_with(&[&quoted, &format!("tp={tp} "), "truncat"])
                ))
            } else {
                Ok(())
            }
        });
    }
}

const READ_ONLY_TOPIC: i16 = 134;

/// The error code of a one-record Produce (v7, acks=all) to `tp` at
/// `addr`, sent raw: librdkafka does not know READ_ONLY_TOPIC, and the
/// rdkafka crate's conversion of an unknown code in a delivery report is
/// undefined behaviour (a SIGSEGV here).
fn produce_error(addr: &str, tp: &TopicPartition) -> i16 {
    let batch = BatchBuilder {
        records: vec![BuildRecord {
            timestamp: 1_700_000_000_000,
            value: Some(b"must not be written".to_vec()),
            ..BuildRecord::default()
        }],
        ..BatchBuilder::default()
    }
    .build();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(tp.partition)
                        .with_records(Some(bytes::Bytes::from(batch))),
                ]),
        ]);
    let mut conn = common::KafkaConnection::connect(addr, Duration::from_secs(10)).expect("connect");
    let response: ProduceResponse = conn.request(ApiKey::Produce as i16, 7, &request).expect("produce");
    response.responses[0].partition_responses[0].error_code
}

/// KIP-1279's failback, scenario B: A's local topic is mirrored by B; B
/// fails over and takes writes; A writes on (its divergent tail, in the
/// epoch B mirrored last); A then mirrors `orders` back from B. A's
/// partitions go PREPARING → MIRRORING, B answers A's lookup with a real
/// last mirror epoch, LME truncation finds no epoch above it in A's log,
/// and replication truncation (the diverging epoch in B's Fetch answer)
/// cuts A's tail where B's copy of that epoch ends; A ends with B's log,
/// byte for byte.
#[test]
fn failback_converges_the_old_source_on_the_failed_over_copy() {
    let _logs = capture();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tps = partitions(ORDERS, 2);
    let started = Instant::now();

    // A: a local topic, several batches per partition; B mirrors it.
    let a = Agent::start(agent_config(dir_a.path(), &[])).expect("start A");
    let a_addr = listener(&a);
    common::create_topic(&a_addr, ORDERS, 2, DEADLINE);
    produce(&a_addr, ORDERS, 2, FIRST.1, "lz4", FIRST.0);
    step(started, "A has orders");
    let b = Agent::start(failback_b_config(dir_b.path(), &a_addr)).expect("start B");
    let b_addr = listener(&b);
    wait_caught_up(&b, "from-a", &a_addr, &tps);
    wait_state(&b, "from-a", &tps, "MIRRORING");
    assert_serve_the_same(&a_addr, &[("B", &b_addr)], &tps);
    let copied: BTreeMap<TopicPartition, i64> = tps
        .iter()
        .map(|tp| {
            let log = served(&a_addr, tp);
            assert!(log.batches.len() >= 3, "{tp}: several batches ({})", log.batches.len());
            (tp.clone(), log.high_watermark)
        })
        .collect();
    let a_epochs: Vec<i32> = tps.iter().map(|tp| highest_epoch(&a_addr, tp)).collect();

    step(started, "B mirrors A");
    // Both sides move on: B fails over and takes writes; A writes on.
    fail_over(&b, "from-a", &tps);
    step(started, "B failed over");
    produce(&b_addr, ORDERS, 2, B_AFTER_FAILOVER.1, "gzip", B_AFTER_FAILOVER.0);
    step(started, "B written to");
    produce(&a_addr, ORDERS, 2, A_DIVERGENT.1, "lz4", A_DIVERGENT.0);
    step(started, "A written to");
    assert_eq!(
        count_records(&a_addr, &tps, A_DIVERGENT),
        vec![A_DIVERGENT.1 as usize / 2; 2],
        "A holds its divergent tail"
    );
    assert_eq!(
        tps.iter().map(|tp| highest_epoch(&a_addr, tp)).collect::<Vec<_>>(),
        a_epochs,
        "A's tail is in the epoch B mirrored last"
    );
    check_lmes(&b, "from-a", &a_addr, &tps, &a_epochs);

    step(started, "LMEs checked");
    fail_back(&a, &b, "from-b", &tps);
    step(started, "A failed back");
    assert_truncated(
        "from-b",
        "log truncated to converge with the source",
        "to_offset",
        &tps,
        &copied,
    );
    for tp in &tps {
        let key = ("from-b".to_owned(), tp.clone());
        let status = &a.status()[&key];
        assert!(
            status.truncations >= 1,
            "{tp}: replication truncation counted: {status:?}"
        );
    }
    // A's topic is a mirror topic now: read-only.
    assert_eq!(
        produce_error(&a_addr, &tps[0]),
        READ_ONLY_TOPIC,
        "A's orders is read-only while mirrored from B"
    );

    // The mirror first: stopping a source first leaves its mirror's
    // in-flight Fetch hanging (see `a_stopped_agent_releases_its_listener`).
    step(started, "checked");
    a.stop().expect("A stops cleanly");
    step(started, "A stopped");
    b.stop().expect("B stops cleanly");
    step(started, "B stopped");
    assert_same_logs_on_disk(("B", dir_b.path()), &[("A", dir_a.path())], &tps);
    eprintln!("failback, same epoch: {:?}", started.elapsed());
}

/// Failback where A's epoch moved on after B's copy: M → A → B, both A and
/// B fail over (A's failover bumps its epoch), both take writes; A then
/// mirrors back from B. LME truncation cuts A at the start of its first
/// epoch above B's last mirror epoch — exactly where B's copy ends — and A
/// ends with B's log. With `delete_seed`, A's own stopped mirror from M is
/// deleted before (the partitions stay, local); without, it stays STOPPED.
fn failback_above_the_last_mirror_epoch(delete_seed: bool) {
    let _logs = capture();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tps = partitions(ORDERS, 2);
    let started = Instant::now();

    let m = MockCluster::new(1).expect("mock cluster");
    m.create_topic(ORDERS, 2, 1).expect("create orders at M");
    let m_addr = m.bootstrap_servers();
    produce(&m_addr, ORDERS, 2, FIRST.1, "lz4", FIRST.0);
    let a = Agent::start(agent_config(dir_a.path(), &[("seed", &m_addr, &[ORDERS])])).expect("start A");
    let a_addr = listener(&a);
    let b = Agent::start(failback_b_config(dir_b.path(), &a_addr)).expect("start B");
    let b_addr = listener(&b);
    wait_caught_up(&a, "seed", &m_addr, &tps);
    wait_caught_up(&b, "from-a", &a_addr, &tps);
    assert_serve_the_same(&a_addr, &[("B", &b_addr)], &tps);
    let copied: BTreeMap<TopicPartition, i64> = tps
        .iter()
        .map(|tp| (tp.clone(), served(&a_addr, tp).high_watermark))
        .collect();
    let m_epochs: Vec<i32> = tps.iter().map(|tp| highest_epoch(&a_addr, tp)).collect();

    fail_over(&b, "from-a", &tps);
    produce(&b_addr, ORDERS, 2, B_AFTER_FAILOVER.1, "gzip", B_AFTER_FAILOVER.0);
    fail_over(&a, "seed", &tps);
    produce(&a_addr, ORDERS, 2, A_DIVERGENT.1, "lz4", A_DIVERGENT.0);
    for (tp, m_epoch) in tps.iter().zip(&m_epochs) {
        assert!(
            highest_epoch(&a_addr, tp) > *m_epoch,
            "{tp}: A's failover moved its epoch on"
        );
    }
    check_lmes(&b, "from-a", &a_addr, &tps, &m_epochs);

    if delete_seed {
        a.admin(AdminRequest::DeleteMirror { mirror: "seed".into() })
            .expect("delete seed");
    }
    let name = format!("from-b-{}", if delete_seed { "seed-deleted" } else { "seed-stopped" });
    fail_back(&a, &b, &name, &tps);
    assert_truncated(
        &name,
        "log truncated above the source's last mirror epoch",
        "to",
        &tps,
        &copied,
    );

    a.stop().expect("A stops cleanly");
    b.stop().expect("B stops cleanly");
    assert_same_logs_on_disk(("B", dir_b.path()), &[("A", dir_a.path())], &tps);
    eprintln!(
        "failback above the LME (delete_seed {delete_seed}): {:?}",
        started.elapsed()
    );
}

#[test]
fn failback_cuts_the_old_source_above_the_last_mirror_epoch() {
    failback_above_the_last_mirror_epoch(true);
}

/// The same with A's own mirror from M left STOPPED (not deleted): its
/// partitions are local and writable, no longer mirrored, so a named
/// topic of another mirror may claim them.
#[test]
fn failback_claims_a_topic_whose_own_mirror_is_stopped() {
    failback_above_the_last_mirror_epoch(false);
}

/// An agent stopped in-process lets go of its address: nothing accepts
/// connections there any more, and an agent can start on it again
/// (a restart, or failback tests that restart a source).
#[test]
fn a_stopped_agent_releases_its_listener() {
    let _logs = capture();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config(dir.path(), &[])).expect("start");
    let addr = listener(&agent);
    common::create_topic(&addr, "t", 1, DEADLINE);
    agent.stop().expect("stop");
    let refused = std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2));
    assert!(refused.is_err(), "{addr} still accepts connections after stop");
    let again = Agent::start(agent_config_at(dir.path(), &addr, &[], 1000)).expect("start again on the same address");
    again.stop().expect("stop");
}

// ---------------------------------------------------------------------------
// Fan-out
// ---------------------------------------------------------------------------

/// A → B and A → C: two agents mirror A's topic, while A takes more writes;
/// both serve and store exactly A's log.
#[test]
fn two_agents_mirror_the_same_topic_byte_for_byte() {
    let _logs = capture();
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let tps = partitions("events", 3);
    let started = Instant::now();

    let a = Agent::start(agent_config(dirs[0].path(), &[])).expect("start A");
    let a_addr = listener(&a);
    common::create_topic(&a_addr, "events", 3, DEADLINE);
    produce(&a_addr, "events", 3, 600, "lz4", 0);
    let b = Agent::start(agent_config(dirs[1].path(), &[("fan-out-b", &a_addr, &["events"])])).expect("start B");
    let c = Agent::start(agent_config(dirs[2].path(), &[("fan-out-c", &a_addr, &["events"])])).expect("start C");
    wait_caught_up(&b, "fan-out-b", &a_addr, &tps);
    wait_caught_up(&c, "fan-out-c", &a_addr, &tps);
    // More writes while both mirror.
    produce(&a_addr, "events", 3, 300, "gzip", 10_000);
    wait_caught_up(&b, "fan-out-b", &a_addr, &tps);
    wait_caught_up(&c, "fan-out-c", &a_addr, &tps);
    wait_state(&b, "fan-out-b", &tps, "MIRRORING");
    wait_state(&c, "fan-out-c", &tps, "MIRRORING");
    let (b_addr, c_addr) = (listener(&b), listener(&c));
    assert_serve_the_same(&a_addr, &[("B", &b_addr), ("C", &c_addr)], &tps);

    c.stop().expect("C stops cleanly");
    b.stop().expect("B stops cleanly");
    a.stop().expect("A stops cleanly");
    assert_same_logs_on_disk(
        ("A", dirs[0].path()),
        &[("B", dirs[1].path()), ("C", dirs[2].path())],
        &tps,
    );
    eprintln!("fan-out: {:?}", started.elapsed());
}

// ---------------------------------------------------------------------------
// Fan-in
// ---------------------------------------------------------------------------

/// S1 (an agent, topic `x` of 2 partitions) and S2 (librdkafka's mock
/// cluster, topics `y` and `x` of `s2_x_partitions`) into B: B serves `x`
/// as S1's and `y` as S2's; a third mirror claiming `x` from S2 is refused
/// ("already mirrored by another mirror", logged once for the topic) and places nothing, and B's `x`
/// goes on following S1, with S1's topic id and partitions.
fn fan_in(s2_x_partitions: i32) {
    let _logs = capture();
    let third = format!("x-from-s2-{s2_x_partitions}");
    let (dir_s1, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (x, y) = (partitions("x", 2), partitions("y", 2));
    let started = Instant::now();

    let s1 = Agent::start(agent_config(dir_s1.path(), &[])).expect("start S1");
    let s1_addr = listener(&s1);
    common::create_topic(&s1_addr, "x", 2, DEADLINE);
    produce(&s1_addr, "x", 2, 400, "lz4", 0);
    let s2 = MockCluster::new(1).expect("mock cluster");
    s2.create_topic("y", 2, 1).expect("create y");
    s2.create_topic("x", s2_x_partitions, 1).expect("create x at S2");
    let s2_addr = s2.bootstrap_servers();
    produce(&s2_addr, "y", 2, 400, "gzip", 50_000);
    produce(
        &s2_addr,
        "x",
        s2_x_partitions,
        50 * s2_x_partitions as u64,
        "none",
        70_000,
    );

    let b = Agent::start(agent_config(
        dir_b.path(),
        &[("x-from-s1", &s1_addr, &["x"]), ("y-from-s2", &s2_addr, &["y"])],
    ))
    .expect("start B");
    let b_addr = listener(&b);
    wait_caught_up(&b, "x-from-s1", &s1_addr, &x);
    wait_caught_up(&b, "y-from-s2", &s2_addr, &y);
    wait_state(&b, "x-from-s1", &x, "MIRRORING");
    wait_state(&b, "y-from-s2", &y, "MIRRORING");
    assert_serve_the_same(&s1_addr, &[("B", &b_addr)], &x);
    assert_serve_the_same(&s2_addr, &[("B", &b_addr)], &y);

    // A third mirror claims x from S2: created, but x is not placed.
    b.admin(AdminRequest::CreateMirror {
        config: mirror_definition(&third, &s2_addr, &["x"]),
    })
    .expect("the mirror itself is created");
    common::wait_until(DEADLINE, &format!("{third} refusing x"), || {
        // Refused for the whole topic, once (not per partition, not every round).
        let refused = common::logs::lines_with(&[
            "already mirrored by another mirror",
            &format!("mirror={third:?}"),
            "topic=\"x\"",
        ]);
        let synced = common::describe_mirror(&b, &third);
        if refused.len() == 1 && synced.topics.contains(&"x".to_owned()) {
            Ok(())
        } else {
            Err(format!("refused {refused:?}, {synced:?}"))
        }
    });
    // Another metadata round (1 s) changes nothing.
    std::thread::sleep(Duration::from_millis(1500));
    let claimed = views(&b, &third);
    assert!(claimed.is_empty(), "{third} placed nothing: {claimed:?}");
    let changed = common::logs::lines_with(&[&format!("mirror={third:?}"), "partition state"]);
    assert!(
        changed.is_empty(),
        "no partition of {third} changed state: {changed:#?}"
    );
    let s1_x_id = metadata(&s1_addr, &["x"]).topics["x"];
    assert_eq!(
        metadata(&b_addr, &["x"]).topics["x"],
        s1_x_id,
        "B's x is S1's (topic id, partitions)"
    );

    // B's x goes on following S1.
    produce(&s1_addr, "x", 2, 200, "gzip", 20_000);
    wait_caught_up(&b, "x-from-s1", &s1_addr, &x);
    assert_serve_the_same(&s1_addr, &[("B", &b_addr)], &x);
    assert!(views(&b, &third).is_empty());

    b.stop().expect("B stops cleanly");
    assert!(!dir_b.path().join("x-2").exists(), "B holds no partition of S2's x");
    common::assert_mirrors_source(dir_b.path(), &s1_addr, &x);
    common::assert_mirrors_source(dir_b.path(), &s2_addr, &y);
    s1.stop().expect("S1 stops cleanly");
    eprintln!("fan-in (S2's x: {s2_x_partitions} partitions): {:?}", started.elapsed());
}

#[test]
fn two_sources_into_one_agent_and_a_conflicting_claim_is_refused() {
    fan_in(2);
}

/// The same when S2's `x` has a partition S1's has not: that partition
/// must not be placed either (B's `x` is S1's topic; it would get a third
/// partition holding S2's data under another topic id).
#[test]
fn a_conflicting_claim_places_no_partition_of_the_topic() {
    fan_in(3);
}
