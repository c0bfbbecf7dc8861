//! The broker APIs Kafka's tools and clients use beside the workloads
//! (issue 17), at a plain agent and compared with Apache Kafka 4.3.1 where
//! a tool prints something: `kafka-leader-election` (ElectLeaders) for
//! named partitions and for all, and topic auto-creation from Metadata
//! (`auto.create.topics.enable`, `num.partitions`) with Kafka's Java
//! producer and with raw Metadata requests — refused for internal and
//! invalid names, for requests that say so, when the setting is off, and
//! for a name a mirror's topic filter covers. (`kafka-transactions
//! describe-producers` and `find-hanging` are in the transaction scenarios'
//! views, see `scenarios::transaction_scenarios`.)

use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::common;
use crate::common::kafka::{driver, tool_output};
use crate::scenarios::*;

const LEADER_ELECTION_COMMAND: &str = "org.apache.kafka.tools.LeaderElectionCommand";

/// `kafka-leader-election` at `bootstrap` with `args`: (exit code, stdout).
fn leader_election(bootstrap: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["--bootstrap-server", bootstrap, "--election-type", "PREFERRED"];
    all.extend_from_slice(args);
    let output = tool_output(LEADER_ELECTION_COMMAND, &all);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A partition whose preferred leader leads and one the topic does not
/// have, named in a JSON file: the tool prints the same at Kafka and at
/// the agent (no election needed; the unknown partition's error with the
/// controller's message) and exits 1 at both. For all partitions it
/// prints nothing of the topic (partitions that need no election are left
/// out), and at the agent, where none ever needs one, nothing at all.
#[test]
fn leader_election_at_the_agent_prints_what_kafka_prints() {
    const TOPIC: &str = "wl-elect";
    let _turn = one_at_a_time();
    let c = cluster();
    c.create_topic(TOPIC, 1, &[]);
    let dir = tempfile::tempdir().unwrap();
    let (agent, ours) = local_agent(dir.path(), &[(TOPIC, 1)]);
    let json = dir.path().join("partitions.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"partitions": [{{"topic": "{TOPIC}", "partition": 0}}, {{"topic": "{TOPIC}", "partition": 9}}]}}"#
        ),
    )
    .unwrap();
    let named = ["--path-to-json-file", json.to_str().expect("utf-8 path")];

    let at_kafka = leader_election(&c.bootstrap, &named);
    assert_eq!(at_kafka.0, Some(1), "one partition could not be elected: {at_kafka:?}");
    assert!(
        at_kafka
            .1
            .contains(&format!("Valid replica already elected for partitions {TOPIC}-0")),
        "{at_kafka:?}"
    );
    assert!(
        at_kafka.1.contains(&format!("No such partition as {TOPIC}-9")),
        "{at_kafka:?}"
    );
    assert_eq!(leader_election(&ours, &named), at_kafka, "as at Kafka");

    let all = ["--all-topic-partitions"];
    let ours_all = leader_election(&ours, &all);
    assert_eq!(ours_all, (Some(0), String::new()), "no election needed anywhere");
    let kafka_all = leader_election(&c.bootstrap, &all);
    assert!(!kafka_all.1.contains(TOPIC), "{kafka_all:?}");
    agent.stop().expect("clean stop");
}

/// A raw Metadata request (v12, or `version`) for `topic` at `bootstrap`:
/// (error code, partitions, is_internal).
fn metadata(bootstrap: &str, version: i16, topic: &str, allow_auto_topic_creation: bool) -> (i16, usize, bool) {
    let mut c = common::KafkaConnection::connect(bootstrap, Duration::from_secs(10)).expect("connect");
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(topic.to_owned())))),
        ]))
        .with_allow_auto_topic_creation(allow_auto_topic_creation);
    let r: MetadataResponse = c.request(ApiKey::Metadata as i16, version, &request).expect("Metadata");
    let t = &r.topics[0];
    (t.error_code, t.partitions.len(), t.is_internal)
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_TOPIC_EXCEPTION: i16 = 17;

/// With `auto.create.topics.enable` (the default) and `num.partitions = 3`:
/// Kafka's Java producer writes to a topic nobody created — the topic is
/// made with three partitions and holds the records. The Metadata request
/// that makes a topic is answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
/// broker answers while its controller creates it, and the next one finds
/// it (v1, before the request could say no, creates too). Never created:
/// a topic a request with `allow_auto_topic_creation = false` names, an
/// internal topic, an invalid name (INVALID_TOPIC_EXCEPTION), a name a
/// mirror on the agent covers.
#[test]
fn metadata_auto_creates_topics_with_num_partitions_unless_refused() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = common::serving_config(&dir.path().join("data"), "num_partitions = 3");
    let agent = ringmirror::agent::Agent::start(config).expect("agent");
    let ours = agent.listener_addr().expect("listening").to_string();

    let produced = driver("produce", &ours, &["--topic", "wl-auto", "--count", "12"]);
    let produced: Vec<&String> = produced.iter().filter(|l| l.starts_with("produced ")).collect();
    assert_eq!(produced.len(), 12, "{produced:?}");
    assert_eq!(metadata(&ours, 12, "wl-auto", false), (0, 3, false), "num.partitions");
    let records = read(&ours, "wl-auto", "read_uncommitted", "digest");
    assert_eq!(records.len(), 12, "every record in the auto-created topic");
    assert!(records.iter().all(|r| (0..3).contains(&r.partition)));

    // The first answer, then the topic.
    assert_eq!(
        metadata(&ours, 12, "wl-auto-raw", true),
        (UNKNOWN_TOPIC_OR_PARTITION, 0, false)
    );
    assert_eq!(metadata(&ours, 12, "wl-auto-raw", true), (0, 3, false));
    assert_eq!(metadata(&ours, 1, "wl-auto-v1", true).0, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(metadata(&ours, 1, "wl-auto-v1", true), (0, 3, false));
    // Refused: asked not to, internal, invalid.
    for (topic, code, internal) in [
        ("wl-auto-not-allowed", UNKNOWN_TOPIC_OR_PARTITION, false),
        ("__transaction_state", UNKNOWN_TOPIC_OR_PARTITION, true),
        ("__ringmirror_x", UNKNOWN_TOPIC_OR_PARTITION, true),
        ("not/a/topic", INVALID_TOPIC_EXCEPTION, false),
    ] {
        let allow = topic != "wl-auto-not-allowed";
        for _ in 0..2 {
            assert_eq!(metadata(&ours, 12, topic, allow), (code, 0, internal), "{topic}");
        }
    }
    agent.stop().expect("clean stop");

    // Off: the producer waits for the topic until `max.block.ms`.
    let config = common::serving_config(&dir.path().join("off"), "auto_create_topics_enable = false");
    let agent = ringmirror::agent::Agent::start(config).expect("agent");
    let ours = agent.listener_addr().expect("listening").to_string();
    let output = tool_output(
        "ringmirror.kafka.Driver",
        &[
            "produce",
            "--bootstrap",
            &ours,
            "--topic",
            "wl-auto-off",
            "--count",
            "1",
            "--prop",
            "max.block.ms=2000",
        ],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("Topic wl-auto-off not present in metadata after 2000 ms"),
        "{text}"
    );
    assert_eq!(
        metadata(&ours, 12, "wl-auto-off", true),
        (UNKNOWN_TOPIC_OR_PARTITION, 0, false)
    );
    assert_eq!(
        metadata(&ours, 12, "wl-auto-off", false).0,
        UNKNOWN_TOPIC_OR_PARTITION,
        "not created"
    );
    agent.stop().expect("clean stop");

    // A name a mirror covers (its source has no such topic yet): not made
    // here, where the mirror would make it from the source.
    let agent = common::kafka::mirror_agent(
        &dir.path().join("mirror"),
        &cluster().bootstrap,
        &["wl-auto-covered"],
        "",
        "",
        "",
    );
    let ours = agent.listener_addr().expect("listening").to_string();
    for _ in 0..2 {
        assert_eq!(
            metadata(&ours, 12, "wl-auto-covered", true),
            (UNKNOWN_TOPIC_OR_PARTITION, 0, false)
        );
    }
    assert_eq!(
        metadata(&ours, 12, "wl-auto-uncovered", true).0,
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(metadata(&ours, 12, "wl-auto-uncovered", true), (0, 1, false));
    agent.stop().expect("clean stop");
}
