//! Issue 13, defect 4: PAUSED means no fetchers and no metadata sync
//! (KIP-1279). Agent B mirrors a topic from agent A and is paused; then,
//! at A, an ACL is created, the topic's configs change, a consumer group
//! commits, and the topic grows a partition with data. While B stays
//! paused (several metadata rounds), none of it reaches B: the ACL is not
//! created, the configs stay, the group has no offsets, and the new
//! partition shows PAUSED with nothing fetched. After resume all of it
//! arrives, the new partition's data byte for byte.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, CreateAclsRequest, CreateAclsResponse};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::admin::{AdminAnswer, AdminRequest};
use ringmirror_dataplane::security::acls::{AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType};
use ringmirror_storage::log::TopicPartition;

const DEADLINE: Duration = Duration::from_secs(60);
const TOPIC: &str = "grow";
/// Metadata rounds B runs while paused before the test looks.
const PAUSED_ROUNDS: usize = 5;

fn source_config(dir: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        "data_dir = {dir:?}\nshards = 1\n[listener]\naddress = \"127.0.0.1:0\"\n"
    ))
    .expect("source config")
}

fn produce(bootstrap: &str, partitions: i32, count: u64, seed: u64) {
    mock_source::produce(bootstrap, TOPIC, partitions, count, "none", seed).unwrap_or_else(|e| panic!("produce: {e}"));
}

fn configs(retention_ms: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("retention.ms".to_owned(), retention_ms.to_owned())])
}

/// B's synced configs of the topic, as its listener serves them.
fn configs_at(agent: &Agent) -> Option<BTreeMap<String, String>> {
    agent.catalog().snapshot().topic_configs(TOPIC).cloned()
}

fn alice_reads() -> AclBinding {
    AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: TOPIC.into(),
        pattern_type: PatternType::Literal,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: AclOperation::Read,
        permission_type: AclPermissionType::Allow,
    }
}

fn create_acl(addr: &str, binding: &AclBinding) {
    let request = CreateAclsRequest::default().with_creations(vec![binding.to_creation()]);
    let response: CreateAclsResponse = common::KafkaConnection::connect(addr, DEADLINE)
        .expect("connect")
        .request(ApiKey::CreateAcls as i16, 3, &request)
        .expect("CreateAcls");
    assert_eq!(response.results[0].error_code, 0);
}

/// Partition → state of the topic's partitions at B.
fn states(agent: &Agent) -> BTreeMap<i32, String> {
    match agent.admin(AdminRequest::Status).expect("status") {
        AdminAnswer::Status { partitions } => partitions
            .into_iter()
            .filter(|p| p.topic == TOPIC)
            .map(|p| (p.partition, p.state))
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn log_end(agent: &Agent, partition: i32) -> i64 {
    agent
        .status()
        .get(&("dr".to_string(), TopicPartition::new(TOPIC, partition)))
        .map_or(0, |s| s.log_end_offset)
}

fn change(agent: &Agent, pause: bool) {
    let request = if pause {
        AdminRequest::Pause {
            mirror: "dr".into(),
            topics: vec![],
        }
    } else {
        AdminRequest::Resume {
            mirror: "dr".into(),
            topics: vec![],
        }
    };
    agent.admin(request).expect("pause or resume");
}

#[test]
fn a_paused_mirror_syncs_nothing_and_new_partitions_start_paused() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Agent::start(source_config(a_dir.path())).expect("source agent");
    let a_addr = a.listener_addr().unwrap().to_string();
    common::create_topic(&a_addr, TOPIC, 1, DEADLINE);
    a.catalog().publish_topic_configs(TOPIC, configs("86400000"));
    produce(&a_addr, 1, 50, 0);

    let mut config = common::serving_mirror_config(b_dir.path(), &a_addr, &[TOPIC], "");
    config.mirrors[0].metadata_refresh_interval_ms = 200;
    let b = Agent::start(config).expect("agent");
    let b_addr = b.listener_addr().unwrap().to_string();
    let end = |p| common::source_high_watermark(&a_addr, TOPIC, p, DEADLINE);
    common::wait_mirrored(&b, TOPIC, &BTreeMap::from([(0, end(0))]), DEADLINE);
    common::wait_until(DEADLINE, "configs synced", || match configs_at(&b) {
        Some(c) if c == configs("86400000") => Ok(()),
        other => Err(format!("{other:?}")),
    });

    change(&b, true);
    common::wait_until(DEADLINE, "PAUSED", || match states(&b).get(&0).map(String::as_str) {
        Some("PAUSED") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let paused = common::describe_mirror(&b, "dr");

    // Meanwhile at A.
    create_acl(&a_addr, &alice_reads());
    a.catalog().publish_topic_configs(TOPIC, configs("3600000"));
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &a_addr)
        .create()
        .expect("admin client");
    let grown =
        futures_lite::future::block_on(admin.create_partitions(&[NewPartitions::new(TOPIC, 2)], &AdminOptions::new()))
            .expect("create partitions");
    assert!(matches!(&grown[0], Ok(t) if t == TOPIC), "{grown:?}");
    produce(&a_addr, 2, 60, 1000);
    let ends = BTreeMap::from([(0, end(0)), (1, end(1))]);
    assert!(ends[&1] > 0);
    common::admin_commit(&a_addr, "billing", TOPIC, &[(0, 10, -1), (1, 5, -1)], "");

    // The new partition appears PAUSED, never fetching.
    common::wait_until(DEADLINE, "grow-1 PAUSED", || {
        let states = states(&b);
        let new = states.get(&1).map(String::as_str);
        assert!(!matches!(new, Some("MIRRORING" | "EPOCH_FENCING")), "{states:?}");
        assert_eq!(states.get(&0).map(String::as_str), Some("PAUSED"));
        match new {
            Some("PAUSED") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    // Several more rounds while paused.
    let mut rounds = BTreeSet::new();
    let d = common::wait_until(DEADLINE, "rounds while paused", || {
        let d = common::describe_mirror(&b, "dr");
        rounds.insert(d.last_sync_ms);
        if rounds.len() > PAUSED_ROUNDS {
            Ok(d)
        } else {
            Err(format!("{} rounds", rounds.len()))
        }
    });
    assert!(states(&b).values().all(|s| s == "PAUSED"), "{:?}", states(&b));
    assert_eq!(
        (log_end(&b, 0), log_end(&b, 1)),
        (50, 0),
        "nothing fetched while paused"
    );
    assert_eq!(common::acls_at(&b_addr), [], "no ACL synced while paused");
    assert_eq!(d.acls_synced_ms, paused.acls_synced_ms);
    assert_eq!(
        configs_at(&b),
        Some(configs("86400000")),
        "no config synced while paused"
    );
    assert_eq!(d.topic_configs_synced_ms, paused.topic_configs_synced_ms);
    assert_eq!(
        common::committed_offsets(&b_addr, "billing", TOPIC, 2),
        BTreeMap::new(),
        "no group offsets synced while paused"
    );

    // Resumed: everything held back arrives.
    change(&b, false);
    common::wait_mirrored(&b, TOPIC, &ends, DEADLINE);
    common::wait_until(DEADLINE, "synced after resume", || {
        let acls = common::acls_at(&b_addr);
        let configs_now = configs_at(&b);
        let committed = common::committed_offsets(&b_addr, "billing", TOPIC, 2);
        if acls == [alice_reads()]
            && configs_now == Some(configs("3600000"))
            && committed == BTreeMap::from([(0, 10), (1, 5)])
        {
            Ok(())
        } else {
            Err(format!("{acls:?} {configs_now:?} {committed:?}"))
        }
    });
    assert!(states(&b).values().all(|s| s == "MIRRORING"), "{:?}", states(&b));
    b.stop().expect("stop B");
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new(TOPIC, p)).collect();
    common::assert_mirrors_source(b_dir.path(), &a_addr, &tps);
    a.stop().expect("stop A");
}
