//! Issue 13, defect 2: a mirrored topic is stopped as deleted (STOPPED,
//! writable — not undone without a failback) only when the source says so
//! by name and by topic id over several rounds and some time, never from
//! one answer.
//!
//! - librdkafka's mock behind a Metadata-rewriting proxy
//!   (`common::metadata_proxy`): one round answering
//!   UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID, listings without the
//!   topic, and TOPIC_AUTHORIZATION_FAILED for many rounds leave it
//!   MIRRORING; it keeps mirroring new data, byte for byte (no marker
//!   appended, nothing cut); the authorization error is a sync error in
//!   `mirror describe` and `ringmirror_mirror_topic_sync_errors`.
//! - Another ringmirror agent as the source, restarted without the topic
//!   (deleted) or with it created again (recreated, a new topic id): the
//!   topic is reported pending ("absent since …, round k of n", a
//!   recreation alerted and counted) and stopped only once the confirmation
//!   window has run out, with its data kept and served.
//!
//! The confirmation is kept small here (3 rounds, 1.5 s, rounds every
//! 200 ms) so each test runs in seconds.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::admin::{AdminAnswer, AdminRequest, MirrorMetrics};
use ringmirror_control::metadata_sync::deletion::TopicCheck;
use ringmirror_storage::log::TopicPartition;

use common::metadata_proxy::{MetadataProxy, Rule};

const DEADLINE: Duration = Duration::from_secs(60);
const REFRESH_MS: u64 = 200;
const CONFIRM_ROUNDS: u32 = 3;
// Long enough that a loaded machine still polls the pending check inside it.
const CONFIRM_MS: u64 = 3000;

fn produce(bootstrap: &str, topic: &str, count: u64, seed: u64) {
    mock_source::produce(bootstrap, topic, 1, count, "none", seed).unwrap_or_else(|e| panic!("produce: {e}"));
}

/// Mirror "dr" of `topics` from `source` (with `include`, the rounds list
/// all topics), with the small confirmation window.
fn mirror_config(dir: &Path, source: &str, topics: &[&str], include: Option<&str>) -> AgentConfig {
    let mut config = common::serving_mirror_config(dir, source, topics, "");
    let m = &mut config.mirrors[0];
    m.metadata_refresh_interval_ms = REFRESH_MS;
    m.topic_deletion_confirm_rounds = CONFIRM_ROUNDS;
    m.topic_deletion_confirm_ms = CONFIRM_MS;
    m.topics_include = include.map(str::to_owned);
    config
}

/// The state of `topic`-0 of mirror "dr".
fn state(agent: &Agent, topic: &str) -> String {
    common::partition_state(agent, "dr", topic, 0)
}

fn assert_mirroring(agent: &Agent, topic: &str) {
    assert_eq!(state(agent, topic), "MIRRORING", "{topic} left MIRRORING");
}

fn checks(agent: &Agent, topic: &str) -> Vec<TopicCheck> {
    common::describe_mirror(agent, "dr")
        .topic_checks
        .into_iter()
        .filter(|c| c.topic == topic)
        .collect()
}

fn mirror_metrics(agent: &Agent) -> MirrorMetrics {
    match agent.admin(AdminRequest::Metrics).expect("metrics") {
        AdminAnswer::Metrics { metrics } => metrics.mirrors.into_iter().find(|m| m.mirror == "dr").expect("dr"),
        other => panic!("{other:?}"),
    }
}

fn metrics_text(agent: &Agent) -> String {
    match agent.admin(AdminRequest::Metrics).expect("metrics") {
        AdminAnswer::Metrics { metrics } => ringmirror_control::admin::metrics::render(&metrics),
        other => panic!("{other:?}"),
    }
}

fn end(bootstrap: &str, topic: &str) -> BTreeMap<i32, i64> {
    BTreeMap::from([(0, common::source_high_watermark(bootstrap, topic, 0, DEADLINE))])
}

/// Mirrors `orders` from the mock through the proxy; returns the mock,
/// the proxy, the data dir and the agent, caught up.
fn mirrored_through_proxy(
    include: Option<&str>,
) -> (
    MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    MetadataProxy,
    tempfile::TempDir,
    Agent,
) {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("orders", 1, 1).expect("create topic");
    produce(&bootstrap, "orders", 200, 0);
    let proxy = MetadataProxy::start(&bootstrap);
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(mirror_config(dir.path(), &proxy.addr.to_string(), &["orders"], include)).expect("agent");
    common::wait_mirrored(&agent, "orders", &end(&bootstrap, "orders"), DEADLINE);
    assert_mirroring(&agent, "orders");
    (cluster, proxy, dir, agent)
}

/// More data at the source arrives; then, stopped, our log is the source's
/// byte for byte (no MIRROR_PID_RESET appended, nothing cut).
fn still_mirrors(
    cluster: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    dir: &Path,
    agent: Agent,
    seed: u64,
) {
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap, "orders", 100, seed);
    common::wait_mirrored(&agent, "orders", &end(&bootstrap, "orders"), DEADLINE);
    assert_mirroring(&agent, "orders");
    agent.stop().expect("clean stop");
    common::assert_mirrors_source(dir, &bootstrap, &[TopicPartition::new("orders", 0)]);
}

#[test]
fn one_round_answering_unknown_topic_leaves_it_mirroring() {
    let _logs = common::logs::capture("ringmirror_control=info,warn");
    let (cluster, proxy, dir, agent) = mirrored_through_proxy(None);
    proxy.set("orders", Some(Rule::Deleted));
    // The round saw it absent by name and by id: counted, not acted on.
    let seen = common::wait_until(DEADLINE, "the absence counted", || {
        assert_mirroring(&agent, "orders");
        checks(&agent, "orders")
            .into_iter()
            .find(|c| c.kind == "deleted")
            .ok_or_else(|| "no pending check".to_string())
    });
    proxy.set("orders", None);
    assert!(seen.round >= 1 && seen.by_id, "{seen:?}");
    assert_eq!((seen.rounds_min, seen.confirm_ms), (CONFIRM_ROUNDS, CONFIRM_MS));
    // The next round finds it: the count starts again from nothing.
    common::wait_until(DEADLINE, "the check reset", || {
        assert_mirroring(&agent, "orders");
        let pending = checks(&agent, "orders");
        if pending.is_empty() {
            Ok(())
        } else {
            Err(format!("{pending:?}"))
        }
    });
    assert_eq!(mirror_metrics(&agent).topic_deletions_pending, 0);
    still_mirrors(&cluster, dir.path(), agent, 1000);
}

#[test]
fn listings_without_the_topic_leave_it_mirroring() {
    // With topics_include, every round lists all topics.
    let (cluster, proxy, dir, agent) = mirrored_through_proxy(Some("orders|other"));
    proxy.set("orders", Some(Rule::Unlisted));
    common::wait_until(DEADLINE, "listings without orders", || {
        assert_mirroring(&agent, "orders");
        // Asked by name and id, the source has it: not even pending.
        assert_eq!(checks(&agent, "orders"), []);
        match proxy.rewritten() {
            (n, _) if n >= 3 => Ok(()),
            (n, _) => Err(format!("{n} listings rewritten")),
        }
    });
    proxy.set("orders", None);
    still_mirrors(&cluster, dir.path(), agent, 2000);
}

#[test]
fn authorization_errors_for_many_rounds_never_stop_a_topic() {
    let (cluster, proxy, dir, agent) = mirrored_through_proxy(Some("orders|other"));
    let bootstrap = cluster.bootstrap_servers();
    proxy.set("orders", Some(Rule::Denied));
    let window = Duration::from_millis(2 * CONFIRM_MS);
    let rounds_past = 3 * (CONFIRM_ROUNDS as usize + 2);
    let mut produced = false;
    common::wait_until(DEADLINE, "many denied rounds", || {
        assert_mirroring(&agent, "orders");
        let shown = checks(&agent, "orders");
        assert!(shown.iter().all(|c| c.kind == "sync_error"), "{shown:?}");
        if !produced && !shown.is_empty() {
            // It keeps mirroring new data meanwhile.
            produce(&bootstrap, "orders", 50, 3000);
            common::wait_mirrored(&agent, "orders", &end(&bootstrap, "orders"), DEADLINE);
            produced = true;
        }
        let (n, first) = proxy.rewritten();
        let long_enough = first.is_some_and(|t| t.elapsed() >= window) && n >= rounds_past;
        if produced && long_enough {
            Ok(shown)
        } else {
            Err(format!("{n} answers rewritten; {shown:?}"))
        }
    });
    let shown = checks(&agent, "orders");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].error_code, Some(29), "TOPIC_AUTHORIZATION_FAILED");
    let metrics = mirror_metrics(&agent);
    assert_eq!((metrics.topic_sync_errors, metrics.topic_deletions_pending), (1, 0));
    assert!(
        metrics_text(&agent)
            .lines()
            .any(|l| l == r#"ringmirror_mirror_topic_sync_errors{mirror="dr"} 1"#),
        "{}",
        metrics_text(&agent)
    );
    // Granted again: the sync error goes.
    proxy.set("orders", None);
    common::wait_until(DEADLINE, "the sync error cleared", || {
        match checks(&agent, "orders").as_slice() {
            [] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(mirror_metrics(&agent).topic_sync_errors, 0);
    still_mirrors(&cluster, dir.path(), agent, 4000);
}

// ---------------------------------------------------------------------------
// An agent as the source: a real deletion, and a recreation
// ---------------------------------------------------------------------------

fn source_config(dir: &Path, addr: &str) -> AgentConfig {
    AgentConfig::parse(&format!(
        "data_dir = {dir:?}\nshards = 1\n[listener]\naddress = {addr:?}\n"
    ))
    .expect("source config")
}

/// The topic id `addr` reports for `topic`.
/// Source agent A serves a doomed topic and `kept`; agent B mirrors both.
/// A is restarted without the doomed one (and, with `recreate`, creates it
/// again: a new topic id). B must report the pending deletion and stop it
/// only once the window ran out; `kept` mirrors on; the doomed topic's data
/// stays served.
fn stopped_only_after_the_window(recreate: bool) {
    // Each variant its own topic: the captured log is the binary's.
    let doomed = if recreate { "reborn" } else { "gone" };
    let _logs = common::logs::capture("ringmirror_control=info,warn");
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a_addr = common::tansu::free_addr();
    let a = Agent::start(source_config(a_dir.path(), &a_addr)).expect("source agent");
    // B reaches A through a forwarding proxy, so A may come back on
    // another port (its old one lingers in TIME_WAIT).
    let proxy = MetadataProxy::start(&a_addr);
    for topic in [doomed, "kept"] {
        common::create_topic(&a_addr, topic, 1, DEADLINE);
        produce(&a_addr, topic, 100, 0);
    }
    let old_id = common::topic_id(&a_addr, doomed, DEADLINE);
    let b = Agent::start(mirror_config(
        b_dir.path(),
        &proxy.addr.to_string(),
        &[doomed, "kept"],
        None,
    ))
    .expect("agent");
    let b_addr = b.listener_addr().unwrap().to_string();
    for topic in [doomed, "kept"] {
        common::wait_mirrored(&b, topic, &end(&a_addr, topic), DEADLINE);
    }
    let before = common::source_partition_log(&b_addr, doomed, 0, DEADLINE);

    a.stop().expect("source stops");
    std::fs::remove_dir_all(a_dir.path().join(format!("{doomed}-0"))).expect("delete the topic's partition");
    a_addr = common::tansu::free_addr();
    let a = Agent::start(source_config(a_dir.path(), &a_addr)).expect("source agent again");
    proxy.set_upstream(&a_addr);
    let mut new_id = None;
    if recreate {
        common::create_topic(&a_addr, doomed, 1, DEADLINE);
        produce(&a_addr, doomed, 10, 500);
        new_id = Some(common::topic_id(&a_addr, doomed, DEADLINE));
        assert_ne!(new_id.as_deref(), Some(old_id.as_str()));
    }
    produce(&a_addr, "kept", 50, 1000);
    let kind = if recreate { "recreated" } else { "deleted" };

    // Pending first, for the whole window; then STOPPED.
    let mut first: Option<TopicCheck> = None;
    let mut last: Option<TopicCheck> = None;
    let mut max_round = 0;
    let stopped_at = common::wait_until(DEADLINE, "doomed stopping", || {
        let state = state(&b, doomed);
        let now = ringmirror_storage::clock::now_ms();
        if state == "STOPPING" || state == "STOPPED" {
            return Ok(now);
        }
        assert_eq!(state, "MIRRORING");
        if let Some(check) = checks(&b, doomed).into_iter().next() {
            // A round between A's restart and the new topic saw it deleted.
            assert!(check.kind == kind || check.kind == "deleted", "{check:?}");
            assert_eq!(check.topic_id, old_id);
            if check.kind == "recreated" {
                assert_eq!(check.new_topic_id, new_id, "{check:?}");
            }
            max_round = max_round.max(check.round);
            first.get_or_insert(check.clone());
            last = Some(check);
        }
        Err(format!("{state}; pending {first:?}"))
    });
    common::wait_until(DEADLINE, "doomed STOPPED", || match state(&b, doomed).as_str() {
        "STOPPED" => Ok(()),
        other => Err(other.to_owned()),
    });
    let first = first.expect("the pending deletion was shown before it was acted on");
    assert_eq!(last.map(|c| c.kind).as_deref(), Some(kind));
    assert!(
        stopped_at >= first.since_ms + CONFIRM_MS,
        "stopped {} ms after the first absent answer, before the {CONFIRM_MS} ms window ran out",
        stopped_at - first.since_ms
    );
    assert!(max_round >= CONFIRM_ROUNDS - 1, "rounds shown pending: {max_round}");
    let metrics = mirror_metrics(&b);
    assert_eq!(metrics.topic_recreations, u64::from(recreate), "{metrics:?}");
    let alerts = common::logs::lines_with(&["WARN", "topic recreated at the source", &format!("topic=\"{doomed}\"")]);
    assert_eq!(
        alerts.len(),
        usize::from(recreate),
        "one WARN per new topic id: {alerts:?}"
    );
    assert_eq!(metrics.topic_deletions_pending, 0);
    // The data stays, served, closed by the failover marker.
    let after = common::source_partition_log(&b_addr, doomed, 0, DEADLINE);
    assert_eq!(after.batches[..before.batches.len()], before.batches[..]);
    assert_eq!(after.batches.len(), before.batches.len() + 1, "one MIRROR_PID_RESET");
    // The other topic mirrors on.
    common::wait_mirrored(&b, "kept", &end(&a_addr, "kept"), DEADLINE);
    assert_mirroring(&b, "kept");
    b.stop().expect("stop B");
    a.stop().expect("stop A");
}

#[test]
fn a_topic_deleted_at_an_agent_source_is_stopped_after_the_window_not_before() {
    stopped_only_after_the_window(false);
}

#[test]
fn a_topic_recreated_at_an_agent_source_is_reported_and_stopped_only_after_confirmation() {
    stopped_only_after_the_window(true);
}
