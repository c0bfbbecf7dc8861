//! ACL enforcement at our listener (`[listener] authorizer = "acl"`),
//! against real clients: a SASL listener with users admin (a super user),
//! alice and bob. The ACLs are created through CreateAcls by admin.
//!
//! - alice (READ on topic `orders` and on group `g`) lists `orders` (kcat)
//!   and consumes it in group `g` with kafka-python, committing her
//!   offsets; bob's kcat does not list `orders`, and consuming it fails
//!   with the topic authorization error (kcat, kafka-python); bob's raw
//!   requests get TOPIC / GROUP / CLUSTER_AUTHORIZATION_FAILED, and
//!   ListGroups does not show him `g` (it does alice and admin).
//! - A DENY for alice on a PREFIXED pattern beats her ALLOW.
//! - bob's produce (kcat) is refused without WRITE, accepted with it.
//! - With `authorizer = "none"` a DENY-everything ACL changes nothing.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse,
    CreateAclsRequest, CreateAclsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeAclsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_dataplane::security::acls::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType,
};
use ringmirror_protocol::sasl::Mechanism;
use serde_json::Value;

use common::{KafkaConnection, sasl_connect};

const IO_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "orders";
const GROUP: &str = "g";
const RECORDS: usize = 20;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

fn step(started: Instant, what: &str) {
    eprintln!("{:>8.3} s  {what}", started.elapsed().as_secs_f64());
}

fn config(data_dir: &Path, authorizer: &str) -> AgentConfig {
    let acl = if authorizer == "acl" {
        "super_users = [\"User:admin\"]"
    } else {
        ""
    };
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        sasl_mechanisms = ["PLAIN"]
        authorizer = "{authorizer}"
        {acl}
        [[listener.users]]
        name = "admin"
        password = "admin-pw"
        [[listener.users]]
        name = "alice"
        password = "alice-pw"
        [[listener.users]]
        name = "bob"
        password = "bob-pw"
        "#
    ))
    .expect("agent config")
}

fn login(addr: &str, user: &str) -> KafkaConnection {
    sasl_connect(addr, Mechanism::Plain, user, &format!("{user}-pw"), IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("{user} logs in: {e}"))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    operation: AclOperation,
    permission_type: AclPermissionType,
) -> AclBinding {
    AclBinding::from_any_host(resource_type, name, pattern_type, principal, operation, permission_type)
}

fn create_acls(conn: &mut KafkaConnection, bindings: &[AclBinding]) -> Vec<i16> {
    let request = CreateAclsRequest::default().with_creations(bindings.iter().map(AclBinding::to_creation).collect());
    let r: CreateAclsResponse = conn
        .request(ApiKey::CreateAcls as i16, 2, &request)
        .expect("CreateAcls");
    r.results.iter().map(|r| r.error_code).collect()
}

fn create_topic(conn: &mut KafkaConnection, topic: &str) -> i16 {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(s(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let r: CreateTopicsResponse = conn
        .request(ApiKey::CreateTopics as i16, 5, &request)
        .expect("CreateTopics");
    r.topics[0].error_code
}

/// The topics of an all-topics Metadata, with their error codes.
fn metadata(conn: &mut KafkaConnection, topics: Option<&[&str]>) -> Vec<(String, i16)> {
    let request = MetadataRequest::default().with_topics(topics.map(|ts| {
        ts.iter()
            .map(|t| {
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(TopicName(s(t))))
            })
            .collect()
    }));
    let r: MetadataResponse = conn.request(ApiKey::Metadata as i16, 9, &request).expect("Metadata");
    r.topics
        .iter()
        .map(|t| (t.name.as_ref().map_or(String::new(), |n| n.0.to_string()), t.error_code))
        .collect()
}

fn fetch_error(conn: &mut KafkaConnection) -> i16 {
    conn.fetch(TOPIC, 0, 0, 1 << 20).expect("Fetch").error_code
}

fn end_offset(conn: &mut KafkaConnection) -> (i16, i64) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ]),
        ]);
    let r: ListOffsetsResponse = conn
        .request(ApiKey::ListOffsets as i16, 4, &request)
        .expect("ListOffsets");
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.offset)
}

fn kcat(addr: &str, user: &str, args: &[&str], input: &str) -> common::ClientOutput {
    let mut cmd = Command::new("kcat");
    cmd.args([
        "-b",
        addr,
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=PLAIN",
    ])
    .args(["-X", &format!("sasl.username={user}")])
    .args(["-X", &format!("sasl.password={user}-pw")])
    .args(["-m", "5"])
    .args(args);
    common::run_client(cmd, &format!("kcat {user} {}", args.join(" ")), input, CLIENT_TIMEOUT)
}

/// `tests/py/acl_clients.py consume`: kafka-python consumes `orders` in
/// group `g`; its JSON.
fn kafka_python_consume(addr: &str, user: &str, timeout_s: u32) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/acl_clients.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script)
        .arg("consume")
        .args(["--bootstrap", addr, "--topic", TOPIC, "--group", GROUP])
        .args(["--username", user, "--password", &format!("{user}-pw")])
        .args(["--count", &RECORDS.to_string(), "--timeout", &timeout_s.to_string()]);
    let out = common::run_client(cmd, &format!("acl_clients.py consume {user}"), "", CLIENT_TIMEOUT);
    assert_ne!(out.status.code(), Some(3), "kafka-python is missing: {}", out.stderr);
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("acl_clients.py printed no JSON ({e}): {}\n{}", out.stdout, out.stderr))
}

fn committed(conn: &mut KafkaConnection) -> (i16, i64) {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes(vec![0]),
        ]));
    let r: OffsetFetchResponse = conn
        .request(ApiKey::OffsetFetch as i16, 5, &request)
        .expect("OffsetFetch");
    if r.error_code != 0 {
        return (r.error_code, -1);
    }
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

fn commit(conn: &mut KafkaConnection, group: &str) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ]);
    let r: OffsetCommitResponse = conn
        .request(ApiKey::OffsetCommit as i16, 5, &request)
        .expect("OffsetCommit");
    r.topics[0].partitions[0].error_code
}

fn records(n: usize) -> String {
    (0..n).map(|i| format!("record-{i}\n")).collect()
}

#[test]
fn acls_are_enforced_for_real_clients() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(config(dir.path(), "acl")).expect("start the agent");
    let addr = agent.listener_addr().expect("a listener").to_string();
    let mut admin = login(&addr, "admin");
    assert_eq!(create_topic(&mut admin, TOPIC), 0);
    let out = kcat(&addr, "admin", &["-P", "-t", TOPIC, "-p", "0"], &records(RECORDS));
    assert!(out.status.success(), "admin produces: {}", out.stderr);
    assert_eq!(end_offset(&mut admin), (0, RECORDS as i64));
    step(started, "admin (super user) created and filled orders");

    // Nobody else can do anything yet (allow_everyone_if_no_acl_found is off).
    let mut bob = login(&addr, "bob");
    assert!(metadata(&mut bob, None).is_empty(), "bob sees no topic");
    assert_eq!(create_topic(&mut bob, "bobs"), TOPIC_AUTHORIZATION_FAILED);
    let alice_read = [
        acl(
            ResourceType::Topic,
            TOPIC,
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermissionType::Allow,
        ),
        acl(
            ResourceType::Group,
            GROUP,
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
            AclPermissionType::Allow,
        ),
    ];
    assert_eq!(create_acls(&mut bob, &alice_read), [CLUSTER_AUTHORIZATION_FAILED; 2]);
    let r: DescribeAclsResponse = bob
        .request(
            ApiKey::DescribeAcls as i16,
            2,
            &AclBindingFilter::any().to_describe_request(),
        )
        .expect("DescribeAcls");
    assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
    assert_eq!(create_acls(&mut admin, &alice_read), [0, 0]);
    step(started, "bob may not create ACLs; admin created alice's");

    // alice: metadata (kcat), a group consumer (kafka-python).
    let out = kcat(&addr, "alice", &["-L"], "");
    assert!(out.status.success(), "alice kcat -L: {}", out.stderr);
    assert!(
        out.stdout.contains("topic \"orders\""),
        "alice lists orders:\n{}",
        out.stdout
    );
    let json = kafka_python_consume(&addr, "alice", 15);
    assert_eq!(json["count"], RECORDS, "alice consumes orders in group g: {json}");
    assert_eq!(committed(&mut login(&addr, "alice")), (0, RECORDS as i64));
    step(
        started,
        "alice listed orders (kcat) and consumed it in group g (kafka-python)",
    );

    // bob: orders is not listed; asked by name, refused.
    let out = kcat(&addr, "bob", &["-L"], "");
    assert!(out.status.success(), "bob kcat -L: {}", out.stderr);
    assert!(!out.stdout.contains("\"orders\""), "bob lists orders:\n{}", out.stdout);
    let out = kcat(
        &addr,
        "bob",
        &["-C", "-t", TOPIC, "-p", "0", "-o", "beginning", "-e"],
        "",
    );
    assert!(!out.status.success(), "bob consumed orders: {}", out.stdout);
    assert!(
        out.stderr.to_lowercase().contains("topic authorization failed"),
        "kcat's error for bob: {}",
        out.stderr
    );
    assert_eq!(
        metadata(&mut bob, Some(&[TOPIC])),
        [(TOPIC.to_string(), TOPIC_AUTHORIZATION_FAILED)]
    );
    assert_eq!(fetch_error(&mut bob), TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(end_offset(&mut bob).0, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(commit(&mut bob, GROUP), GROUP_AUTHORIZATION_FAILED);
    assert_eq!(committed(&mut bob).0, GROUP_AUTHORIZATION_FAILED);
    // The group APIs.
    let groups = |conn: &mut KafkaConnection| -> Vec<String> {
        let r: ListGroupsResponse = conn
            .request(ApiKey::ListGroups as i16, 4, &ListGroupsRequest::default())
            .expect("ListGroups");
        r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
    };
    assert_eq!(groups(&mut login(&addr, "alice")), [GROUP]);
    assert!(groups(&mut bob).is_empty(), "bob may not describe g");
    assert_eq!(groups(&mut admin), [GROUP]);
    let r: DescribeGroupsResponse = bob
        .request(
            ApiKey::DescribeGroups as i16,
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
        )
        .expect("DescribeGroups");
    assert_eq!(r.groups[0].error_code, GROUP_AUTHORIZATION_FAILED);
    let r: DeleteGroupsResponse = bob
        .request(
            ApiKey::DeleteGroups as i16,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(GROUP))]),
        )
        .expect("DeleteGroups");
    assert_eq!(r.results[0].error_code, GROUP_AUTHORIZATION_FAILED);
    let r: FindCoordinatorResponse = bob
        .request(
            ApiKey::FindCoordinator as i16,
            3,
            &FindCoordinatorRequest::default().with_key(s(GROUP)),
        )
        .expect("FindCoordinator");
    assert_eq!(r.error_code, GROUP_AUTHORIZATION_FAILED);
    let r: ShareGroupDescribeResponse = bob
        .request(
            ApiKey::ShareGroupDescribe as i16,
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("sg"))]),
        )
        .expect("ShareGroupDescribe");
    assert_eq!(r.groups[0].error_code, GROUP_AUTHORIZATION_FAILED);
    // KIP-848: READ on the group to heartbeat, DESCRIBE to describe it.
    let r: ConsumerGroupHeartbeatResponse = bob
        .request(
            ApiKey::ConsumerGroupHeartbeat as i16,
            1,
            &common::consumer_group_join(GROUP, "bob-1", TOPIC),
        )
        .expect("ConsumerGroupHeartbeat");
    assert_eq!(r.error_code, GROUP_AUTHORIZATION_FAILED);
    let r: ConsumerGroupDescribeResponse = bob
        .request(
            ApiKey::ConsumerGroupDescribe as i16,
            1,
            &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
        )
        .expect("ConsumerGroupDescribe");
    assert_eq!(r.groups[0].error_code, GROUP_AUTHORIZATION_FAILED);
    // With READ on the group, the topic is what bob lacks.
    let bob_group = acl(
        ResourceType::Group,
        GROUP,
        PatternType::Literal,
        "User:bob",
        AclOperation::Read,
        AclPermissionType::Allow,
    );
    assert_eq!(create_acls(&mut admin, &[bob_group]), [0]);
    assert_eq!(commit(&mut bob, GROUP), TOPIC_AUTHORIZATION_FAILED);
    let json = kafka_python_consume(&addr, "bob", 5);
    assert!(
        json["error"]
            .as_str()
            .is_some_and(|e| e.contains("TopicAuthorizationFailed") || e.contains("Topic orders is not authorized")),
        "kafka-python's error for bob: {json}"
    );
    step(started, "bob is refused orders (kcat, kafka-python, raw requests)");

    // A DENY on a prefix beats alice's ALLOW.
    let deny = acl(
        ResourceType::Topic,
        "ord",
        PatternType::Prefixed,
        "User:alice",
        AclOperation::Read,
        AclPermissionType::Deny,
    );
    assert_eq!(create_acls(&mut admin, &[deny]), [0]);
    let mut alice = login(&addr, "alice");
    assert_eq!(fetch_error(&mut alice), TOPIC_AUTHORIZATION_FAILED);
    // A DENY READ does not deny DESCRIBE, which her READ ALLOW implies.
    assert_eq!(end_offset(&mut alice), (0, RECORDS as i64));
    step(started, "a PREFIXED DENY beats the ALLOW");

    // OffsetFetch by a principal who may read the group but not describe
    // its topic: a named topic is refused per partition, an "all topics"
    // answer leaves it out — before v8 (topics) and from v8 (groups).
    let bob_group = acl(
        ResourceType::Group,
        GROUP,
        PatternType::Literal,
        "User:bob",
        AclOperation::Read,
        AclPermissionType::Allow,
    );
    assert_eq!(create_acls(&mut admin, &[bob_group]), [0]);
    assert_eq!(committed(&mut bob), (TOPIC_AUTHORIZATION_FAILED, -1));
    let all: OffsetFetchResponse = bob
        .request(
            ApiKey::OffsetFetch as i16,
            5,
            &OffsetFetchRequest::default().with_group_id(GroupId(s(GROUP))),
        )
        .expect("OffsetFetch v5");
    assert_eq!((all.error_code, all.topics.len()), (0, 0), "{all:?}");
    let mut v8 = |topics: Option<Vec<OffsetFetchRequestTopics>>| -> OffsetFetchResponse {
        let group = OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_topics(topics);
        bob.request(
            ApiKey::OffsetFetch as i16,
            8,
            &OffsetFetchRequest::default().with_groups(vec![group]),
        )
        .expect("OffsetFetch v8")
    };
    let named = v8(Some(vec![
        OffsetFetchRequestTopics::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_indexes(vec![0]),
    ]));
    let p = &named.groups[0].topics[0].partitions[0];
    assert_eq!((p.error_code, p.committed_offset), (TOPIC_AUTHORIZATION_FAILED, -1));
    let everything = v8(None);
    assert_eq!(
        (everything.groups[0].error_code, everything.groups[0].topics.len()),
        (0, 0)
    );
    step(started, "OffsetFetch hides the topic bob may not describe");

    // Produce: refused without WRITE, accepted with it.
    let out = kcat(&addr, "bob", &["-P", "-t", TOPIC, "-p", "0"], &records(3));
    assert!(
        out.stderr.to_lowercase().contains("authorization failed"),
        "kcat's error for bob's produce: {} {}",
        out.status,
        out.stderr
    );
    assert_eq!(end_offset(&mut admin), (0, RECORDS as i64));
    let write = acl(
        ResourceType::Topic,
        TOPIC,
        PatternType::Literal,
        "User:bob",
        AclOperation::Write,
        AclPermissionType::Allow,
    );
    assert_eq!(create_acls(&mut admin, &[write]), [0]);
    let out = kcat(&addr, "bob", &["-P", "-t", TOPIC, "-p", "0"], &records(3));
    assert!(out.status.success(), "bob produces with WRITE: {}", out.stderr);
    assert_eq!(end_offset(&mut admin), (0, RECORDS as i64 + 3));
    step(started, "bob's produce refused without WRITE, accepted with it");
    agent.stop().expect("stop");
}

#[test]
fn without_an_authorizer_acls_are_not_enforced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = Agent::start(config(dir.path(), "none")).expect("start the agent");
    let addr = agent.listener_addr().expect("a listener").to_string();
    let mut bob = login(&addr, "bob");
    let deny_all = acl(
        ResourceType::Topic,
        "*",
        PatternType::Literal,
        "User:*",
        AclOperation::All,
        AclPermissionType::Deny,
    );
    assert_eq!(create_acls(&mut bob, &[deny_all]), [0]);
    assert_eq!(create_topic(&mut bob, TOPIC), 0);
    let out = kcat(&addr, "bob", &["-P", "-t", TOPIC, "-p", "0"], &records(2));
    assert!(out.status.success(), "bob produces: {}", out.stderr);
    assert_eq!(metadata(&mut bob, None), [(TOPIC.to_string(), 0)]);
    assert_eq!(end_offset(&mut bob), (0, 2));
    assert_eq!(fetch_error(&mut bob), 0);
    agent.stop().expect("stop");
}
