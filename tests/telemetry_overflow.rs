//! State acknowledgements are never lost behind telemetry. The agent
//! mirrors librdkafka's mock cluster with a tiny telemetry bound
//! (`telemetry_events_queued_max = 4`) while a producer floods one topic,
//! so progress and checkpoint events overflow their queue the whole time.
//! The events thread is held (an observer that waits on a gate) while many
//! partitions of the other topic are paused, and again while they are
//! stopped: every `Paused` and every `MirrorEnded` waits in the queue while
//! telemetry is dropped, and once the thread goes on every partition
//! reaches PAUSED, then STOPPED, at the offsets the source holds — while
//! the flooded topic goes on mirroring.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::BaseRecord;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::admin::{AdminAnswer, AdminRequest, ShardEventMetrics};
use ringmirror_storage::log::TopicPartition;

use common::{describe_mirror, wait_until};

/// Partitions paused and stopped while telemetry overflows.
const PARTITIONS: i32 = 24;
/// Records in each of them before the pause.
const RECORDS_PER_PARTITION: u64 = 5;
const DEADLINE: Duration = Duration::from_secs(60);
/// How long the held events thread waits at most (bounds a failing test).
const HOLD_MAX: Duration = Duration::from_secs(90);

/// Holds the agent's events thread while closed.
#[derive(Default)]
struct Gate {
    closed: Mutex<bool>,
    opened: Condvar,
    /// Set while the events thread waits here.
    holding: AtomicBool,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let closed = self.closed.lock().unwrap();
        self.holding.store(*closed, Ordering::SeqCst);
        drop(
            self.opened
                .wait_timeout_while(closed, HOLD_MAX, |closed| *closed)
                .unwrap(),
        );
        self.holding.store(false, Ordering::SeqCst);
    }
}

fn config(data_dir: &std::path::Path, bootstrap: &str) -> AgentConfig {
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        telemetry_events_queued_max = 4
        [[mirror]]
        name = "dr"
        bootstrap_servers = [{bootstrap:?}]
        topics = ["flood", "quiet"]
        fetch_max_wait_ms = 50
        metadata_refresh_interval_ms = 1000
        "#
    ))
    .expect("config")
}

fn shard_events(agent: &Agent) -> ShardEventMetrics {
    match agent.admin(AdminRequest::Metrics) {
        Ok(AdminAnswer::Metrics { metrics }) => metrics.shard_events.expect("the agent measures its queues"),
        other => panic!("metrics answered {other:?}"),
    }
}

/// The states of `topic`'s partitions, by partition.
fn states(agent: &Agent, topic: &str) -> Vec<(i32, String)> {
    let mut states: Vec<(i32, String)> = describe_mirror(agent, "dr")
        .partitions
        .into_iter()
        .filter(|p| p.topic == topic)
        .map(|p| (p.partition, p.state))
        .collect();
    states.sort();
    states
}

fn all_in(agent: &Agent, topic: &str, state: &str) -> Result<(), String> {
    let states = states(agent, topic);
    let count = states.iter().filter(|(_, s)| s == state).count();
    if count == PARTITIONS as usize {
        Ok(())
    } else {
        Err(format!("{count} of {PARTITIONS} {state}: {states:?}"))
    }
}

/// Holds the events thread, then waits until its queue is full: a
/// telemetry event dropped after that. Nothing drains the queue while it is
/// held (and a dropped progress report is sent again), so it stays full.
fn hold_until_full(gate: &Gate, agent: &Agent) -> u64 {
    gate.set_closed(true);
    wait_until(DEADLINE, "events thread held", || {
        if gate.holding.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    wait_dropping(agent, shard_events(agent).telemetry_dropped)
}

/// Waits until telemetry has been dropped again since `since`.
fn wait_dropping(agent: &Agent, since: u64) -> u64 {
    wait_until(DEADLINE, "telemetry overflowing", || {
        let dropped = shard_events(agent).telemetry_dropped;
        if dropped > since {
            Ok(dropped)
        } else {
            Err(format!("{dropped} dropped"))
        }
    })
}

/// Waits until the acknowledgements of one command per partition wait in
/// the queues, and checks that nothing else does: one per partition.
fn wait_acknowledgements_queued(agent: &Agent) {
    let queued = wait_until(DEADLINE, "acknowledgements queued", || {
        let queued = shard_events(agent).state_queued;
        if queued >= PARTITIONS as u64 {
            Ok(queued)
        } else {
            Err(format!("{queued} state events queued"))
        }
    });
    assert_eq!(queued, PARTITIONS as u64, "one acknowledgement per partition");
}

/// Makes `change` of every quiet partition with the events thread held
/// and its queue full: the acknowledgements wait (the partitions stay
/// `during`) while telemetry goes on being dropped; let through, they
/// move every partition to `after`. Returns the telemetry dropped so far.
fn change_while_overflowing(
    gate: &Gate,
    agent: &Agent,
    change: impl FnOnce() -> anyhow::Result<Vec<TopicPartition>>,
    during: &str,
    after: &str,
) -> u64 {
    let dropped = hold_until_full(gate, agent);
    let changed = change().expect("accepted");
    assert_eq!(changed.len(), PARTITIONS as usize);
    wait_acknowledgements_queued(agent);
    let dropped = wait_dropping(agent, dropped);
    all_in(agent, "quiet", during).expect("nothing acknowledged while held");
    gate.set_closed(false);
    wait_until(DEADLINE, &format!("every partition {after}"), || {
        all_in(agent, "quiet", after)
    });
    dropped
}

#[test]
fn pause_and_stop_of_many_partitions_are_acknowledged_while_telemetry_overflows() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("flood", 2, 1).expect("create flood");
    cluster.create_topic("quiet", PARTITIONS, 1).expect("create quiet");
    mock_source::produce(
        &bootstrap,
        "quiet",
        PARTITIONS,
        RECORDS_PER_PARTITION * PARTITIONS as u64,
        "none",
        0,
    )
    .expect("produce");

    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let held = Arc::clone(&gate);
    let agent = Agent::start_observed(config(dir.path(), &bootstrap), Box::new(move |_| held.pass())).expect("agent");
    let quiet_end = RECORDS_PER_PARTITION as i64;
    wait_until(DEADLINE, "quiet mirrored", || {
        all_in(&agent, "quiet", "MIRRORING")?;
        let status = agent.status();
        let behind: Vec<i32> = (0..PARTITIONS)
            .filter(|&p| {
                status
                    .get(&("dr".to_string(), TopicPartition::new("quiet", p)))
                    .is_none_or(|s| s.log_end_offset != quiet_end)
            })
            .collect();
        if behind.is_empty() {
            Ok(())
        } else {
            Err(format!("behind: {behind:?}"))
        }
    });

    // A producer that keeps the flood topic's fetchers reporting.
    let flooding = Arc::new(AtomicBool::new(true));
    let flooder = {
        let (flooding, bootstrap) = (Arc::clone(&flooding), bootstrap.clone());
        std::thread::spawn(move || {
            let producer = mock_source::producer(&bootstrap, "none", &[]).expect("producer");
            let mut sent = 0u64;
            while flooding.load(Ordering::Relaxed) {
                let value = format!("flood-{sent}");
                let partition = (sent % 2) as i32;
                if producer
                    .send(BaseRecord::<str, str>::to("flood").partition(partition).payload(&value))
                    .is_ok()
                {
                    sent += 1;
                }
                producer.poll(Duration::from_millis(1));
            }
            mock_source::flush(&producer).expect("flood acknowledged");
            sent
        })
    };

    // Pause, then stop (failover), each with the events thread held and
    // telemetry overflowing.
    let paused = change_while_overflowing(&gate, &agent, || agent.pause("dr", "quiet"), "PAUSING", "PAUSED");
    let stopped = change_while_overflowing(
        &gate,
        &agent,
        || agent.end_mirroring("dr", "quiet"),
        "STOPPING",
        "STOPPED",
    );
    let dropped = paused.max(stopped);

    // Each ended after the source's records, with its MIRROR_PID_RESET.
    let status = agent.status();
    for p in 0..PARTITIONS {
        let s = &status[&("dr".to_string(), TopicPartition::new("quiet", p))];
        let (writable_from, _) = s.mirroring_ended.expect("mirroring ended");
        assert_eq!(writable_from, quiet_end + 1, "partition {p}: {s:?}");
    }
    // The flood topic went on meanwhile, and still does.
    assert_eq!(states(&agent, "flood").len(), 2);
    for (partition, state) in states(&agent, "flood") {
        assert_eq!(state, "MIRRORING", "flood-{partition}");
    }
    flooding.store(false, Ordering::Relaxed);
    let sent = flooder.join().expect("flooder");
    wait_until(DEADLINE, "flood mirrored", || {
        let status = agent.status();
        let mirrored: i64 = (0..2)
            .filter_map(|p| status.get(&("dr".to_string(), TopicPartition::new("flood", p))))
            .map(|s| s.log_end_offset)
            .sum();
        if mirrored == sent as i64 {
            Ok(())
        } else {
            Err(format!("{mirrored} of {sent}"))
        }
    });
    assert_eq!(shard_events(&agent).state_queued, 0);
    let text = match agent.admin(AdminRequest::Metrics) {
        Ok(AdminAnswer::Metrics { metrics }) => ringmirror_control::admin::metrics::render(&metrics),
        other => panic!("metrics answered {other:?}"),
    };
    let line = text
        .lines()
        .find(|l| l.starts_with("ringmirror_shard_events_dropped_total "))
        .unwrap_or_else(|| panic!("no drop counter in:\n{text}"));
    let shown: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(shown >= dropped, "{line}: at least {dropped} dropped");
    agent.stop().expect("clean stop");
}
