//! Apache Kafka as a test peer: the KRaft cluster, Kafka's tools and the
//! Java driver come from the `ringmirror-kafka-harness` crate (shared with
//! `perf/`); this module re-exports it and adds what the tests need that
//! depends on the agent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ringmirror_storage::log::TopicPartition;

// Test binaries that do not start Kafka compile this module too.
#[allow(unused_imports)]
pub use ringmirror_kafka_harness::*;

/// Kafka's tool `class` (e.g. `org.apache.kafka.tools.TopicCommand`) run
/// against `bootstrap` with `args`; its stdout (panics unless it exits 0).
pub fn kafka_tool(class: &str, bootstrap: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    tool(class, &all)
}

/// An in-process agent serving on loopback and mirroring `topics` from
/// `bootstrap` as mirror "dr" with quick fetch and metadata settings;
/// `listener`, `log` and `mirror` are TOML lines added to the `[listener]`,
/// `[log]` and `[[mirror]]` tables.
pub fn mirror_agent(
    data_dir: &Path,
    bootstrap: &str,
    topics: &[&str],
    listener: &str,
    log: &str,
    mirror: &str,
) -> ringmirror::agent::Agent {
    let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
    let config = ringmirror::config::AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        {listener}
        [log]
        {log}
        [[mirror]]
        name = "dr"
        bootstrap_servers = [{bootstrap:?}]
        topics = [{topics}]
        fetch_max_wait_ms = 50
        metadata_refresh_interval_ms = 1000
        {mirror}
        "#
    ))
    .expect("agent config");
    ringmirror::agent::Agent::start(config).expect("agent")
}

/// Waits (bounded by `deadline`) until mirror "dr" of `agent` holds every
/// partition of `topic` up to the high watermark `source` reports now;
/// returns those ends.
pub fn wait_caught_up(
    agent: &ringmirror::agent::Agent,
    source: &str,
    topic: &str,
    partitions: i32,
    deadline: Duration,
) -> BTreeMap<i32, i64> {
    let ends: BTreeMap<i32, i64> = (0..partitions)
        .map(|p| {
            (
                p,
                super::source_partition_log(source, topic, p, deadline).high_watermark,
            )
        })
        .collect();
    super::wait_mirrored(agent, topic, &ends, deadline);
    ends
}

/// Waits (bounded by `deadline`) until every partition of `topic` has
/// ended mirroring "dr" (failover); returns each one's log end after the
/// markers.
pub fn wait_failed_over(
    agent: &ringmirror::agent::Agent,
    topic: &str,
    partitions: i32,
    deadline: Duration,
) -> BTreeMap<i32, i64> {
    super::wait_until(deadline, "mirroring ended", || {
        let status = agent.status();
        let ended: BTreeMap<i32, i64> = (0..partitions)
            .filter_map(|p| {
                let s = status.get(&("dr".to_string(), TopicPartition::new(topic, p)))?;
                Some((p, s.mirroring_ended?.0))
            })
            .collect();
        if ended.len() == partitions as usize {
            Ok(ended)
        } else {
            Err(format!("{status:?}"))
        }
    })
}

/// (partition, offset) of the `record` lines the Java driver's
/// `group-member` and `consume` commands print.
pub fn member_records(lines: &[String]) -> Vec<(i32, i64)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("record "))
        .map(|l| {
            let mut f = l.split(' ');
            (
                f.next().and_then(|p| p.parse().ok()).expect("partition"),
                f.next().and_then(|o| o.parse().ok()).expect("offset"),
            )
        })
        .collect()
}
