//! A local topic's configs from CreateTopics (API 19) at our listener, with
//! librdkafka's admin client: the configs Kafka accepts are kept — answered
//! by DescribeConfigs as the topic's own (DYNAMIC_TOPIC_CONFIG), kept in
//! each partition's marker (partitions added later too) and published
//! again after a restart — and the others refused as Kafka refuses them
//! (INVALID_CONFIG, nothing created). Kafka Connect needs this: it creates
//! its config, offset and status topics with `cleanup.policy=compact` and
//! stops unless DescribeConfigs says so.

mod common;

use std::path::Path;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;
use ringmirror::agent::Agent;
use ringmirror_dataplane::partition::registry::LOCAL_TOPIC_MARKER;
use ringmirror_storage::topic_config;

const DEADLINE: Duration = Duration::from_secs(60);

fn admin_client(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(DEADLINE))
}

/// The topic's configs DescribeConfigs answers as its own (name, value).
fn own_configs(admin: &AdminClient<DefaultClientContext>, topic: &str) -> Vec<(String, String)> {
    let described =
        futures_lite::future::block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &options()))
            .expect("describe configs");
    let resource = described[0].as_ref().expect("the topic's configs");
    resource
        .entries
        .iter()
        .filter(|e| e.source == ConfigSource::DynamicTopic)
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn start(data_dir: &Path) -> (Agent, String) {
    let agent = Agent::start(common::serving_config(data_dir, "")).expect("agent");
    let addr = agent.listener_addr().expect("listening").to_string();
    (agent, addr)
}

#[test]
fn create_topics_keeps_the_configs_kafka_accepts_across_restarts_and_refuses_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (agent, addr) = start(&data);
    let admin = admin_client(&addr);
    let compacted = NewTopic::new("compacted", 2, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("retention.ms", "-1");
    let unknown = NewTopic::new("unknown-config", 1, TopicReplication::Fixed(1)).set("no.such.config", "1");
    let bad_value = NewTopic::new("bad-value", 1, TopicReplication::Fixed(1)).set("retention.ms", "abc");
    let results = futures_lite::future::block_on(admin.create_topics([&compacted, &unknown, &bad_value], &options()))
        .expect("create topics");
    assert_eq!(results[0], Ok("compacted".to_owned()));
    for (result, topic) in results[1..].iter().zip(["unknown-config", "bad-value"]) {
        assert_eq!(
            result,
            &Err((topic.to_owned(), RDKafkaErrorCode::InvalidConfig)),
            "Kafka's INVALID_CONFIG"
        );
        assert!(!data.join(format!("{topic}-0")).exists(), "{topic}: nothing created");
    }
    let wanted = vec![
        ("cleanup.policy".to_owned(), "compact".to_owned()),
        ("min.cleanable.dirty.ratio".to_owned(), "0.01".to_owned()),
        ("retention.ms".to_owned(), "-1".to_owned()),
    ];
    let mut described = own_configs(&admin, "compacted");
    described.sort();
    assert_eq!(described, wanted, "DescribeConfigs: the topic's own settings");

    let grown =
        futures_lite::future::block_on(admin.create_partitions(&[NewPartitions::new("compacted", 3)], &options()))
            .expect("create partitions");
    assert_eq!(grown[0], Ok("compacted".to_owned()));
    for p in 0..3 {
        let marker = std::fs::read_to_string(data.join(format!("compacted-{p}")).join(LOCAL_TOPIC_MARKER))
            .expect("the local topic marker");
        let kept: Vec<(String, String)> = topic_config::decode(&marker).into_iter().collect();
        assert_eq!(kept, wanted, "partition {p}'s marker");
    }
    drop(admin);
    agent.stop().expect("clean stop");

    let (agent, addr) = start(&data);
    let admin = admin_client(&addr);
    let mut described = own_configs(&admin, "compacted");
    described.sort();
    assert_eq!(described, wanted, "after a restart, from the markers");
    drop(admin);
    agent.stop().expect("clean stop");
}
