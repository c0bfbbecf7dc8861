//! ACLs (issue 6, "ACL create and delete"): the listener's DescribeAcls,
//! CreateAcls and DeleteAcls at every version it serves, persisted across
//! a restart; and ACL sync (`ringmirror_control::metadata_sync::acl_sync`) run from a
//! glommio executor as the control plane runs it:
//!
//! - agent A as the source, agent B (mirroring a topic of A) as the
//!   destination: A's topic and group ACLs are created at B, an ACL
//!   deleted at A is deleted at B on the next round, and B's ACLs outside
//!   the include setting are left alone;
//! - librdkafka's mock cluster as the source: it serves no DescribeAcls,
//!   so the round reports "not supported" and changes nothing.
//!
//! rdkafka 0.39's AdminClient has no ACL calls (and kcat none either), so
//! the ACL APIs are spoken raw, with `common::KafkaConnection`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateAclsRequest, CreateAclsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::mocking::MockCluster;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_control::metadata_sync::acl_sync::{
    AclFilterSetting, AclIncludeRule, AclSyncReport, SOURCE_WITHOUT_DESCRIBE_ACLS, sync_acls,
};
use ringmirror_dataplane::client::{Connection, ConnectionOptions};
use ringmirror_dataplane::security::acls::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType, codes,
};

use common::KafkaConnection;

const IO_TIMEOUT: Duration = Duration::from_secs(10);
const ACL_VERSIONS: std::ops::RangeInclusive<i16> = 1..=3;
const TOPIC: &str = "orders";

fn listener_only(dir: &Path) -> AgentConfig {
    AgentConfig::parse(&format!(
        "data_dir = {dir:?}\nshards = 2\n[listener]\naddress = \"127.0.0.1:0\"\n"
    ))
    .expect("agent config")
}

fn addr(agent: &Agent) -> String {
    agent.listener_addr().expect("listening").to_string()
}

fn connect(addr: &str) -> KafkaConnection {
    KafkaConnection::connect(addr, IO_TIMEOUT).expect("connect")
}

#[allow(clippy::too_many_arguments)]
fn acl(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    host: &str,
    operation: AclOperation,
    permission_type: AclPermissionType,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: host.into(),
        operation,
        permission_type,
    }
}

fn topic_read(name: &str, principal: &str) -> AclBinding {
    acl(
        ResourceType::Topic,
        name,
        PatternType::Literal,
        principal,
        "*",
        AclOperation::Read,
        AclPermissionType::Allow,
    )
}

fn create(addr: &str, version: i16, bindings: &[AclBinding]) -> Vec<i16> {
    let request = CreateAclsRequest::default().with_creations(bindings.iter().map(AclBinding::to_creation).collect());
    let r: CreateAclsResponse = connect(addr)
        .request(ApiKey::CreateAcls as i16, version, &request)
        .unwrap_or_else(|e| panic!("CreateAcls v{version}: {e}"));
    r.results.iter().map(|r| r.error_code).collect()
}

fn describe_with(addr: &str, version: i16, filter: &AclBindingFilter) -> BTreeSet<AclBinding> {
    let r: DescribeAclsResponse = connect(addr)
        .request(ApiKey::DescribeAcls as i16, version, &filter.to_describe_request())
        .unwrap_or_else(|e| panic!("DescribeAcls v{version}: {e}"));
    assert_eq!(
        r.error_code,
        codes::NONE,
        "DescribeAcls v{version}: {:?}",
        r.error_message
    );
    let (bindings, unreadable) = AclBinding::from_describe_response(&r);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    let set: BTreeSet<AclBinding> = bindings.into_iter().collect();
    // Each resource once, with all of its ACLs.
    let resources: BTreeSet<_> = set
        .iter()
        .map(|b| (b.resource_type, b.resource_name.clone(), b.pattern_type))
        .collect();
    assert_eq!(
        r.resources.len(),
        resources.len(),
        "DescribeAcls v{version} groups by resource"
    );
    set
}

fn describe(addr: &str) -> BTreeSet<AclBinding> {
    describe_with(addr, 3, &AclBindingFilter::any())
}

/// (error code, bindings matched) per filter.
fn delete(addr: &str, version: i16, filters: &[AclBindingFilter]) -> Vec<(i16, BTreeSet<AclBinding>)> {
    let request = DeleteAclsRequest::default().with_filters(filters.iter().map(|f| f.to_delete_filter()).collect());
    let r: DeleteAclsResponse = connect(addr)
        .request(ApiKey::DeleteAcls as i16, version, &request)
        .unwrap_or_else(|e| panic!("DeleteAcls v{version}: {e}"));
    r.filter_results
        .iter()
        .map(|f| {
            let matched = f
                .matching_acls
                .iter()
                .map(|m| {
                    assert_eq!(m.error_code, codes::NONE);
                    AclBinding::from_wire(
                        m.resource_type,
                        &m.resource_name,
                        m.pattern_type,
                        &m.principal,
                        &m.host,
                        m.operation,
                        m.permission_type,
                    )
                    .expect("known codes")
                })
                .collect();
            (f.error_code, matched)
        })
        .collect()
}

fn set(bindings: &[&AclBinding]) -> BTreeSet<AclBinding> {
    bindings.iter().map(|&b| b.clone()).collect()
}

#[test]
fn acls_are_created_described_deleted_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(listener_only(dir.path())).expect("agent");
    let a = addr(&agent);

    let r: ApiVersionsResponse = connect(&a)
        .request(ApiKey::ApiVersions as i16, 3, &ApiVersionsRequest::default())
        .expect("ApiVersions");
    for api in [ApiKey::DescribeAcls, ApiKey::CreateAcls, ApiKey::DeleteAcls] {
        let listed = r.api_keys.iter().find(|k| k.api_key == api as i16).expect("advertised");
        assert_eq!((listed.min_version, listed.max_version), (1, 3), "{api:?}");
    }

    let alice_orders = topic_read(TOPIC, "User:alice");
    let bob_pay = acl(
        ResourceType::Topic,
        "pay",
        PatternType::Prefixed,
        "User:bob",
        "*",
        AclOperation::Write,
        AclPermissionType::Allow,
    );
    let alice_group = acl(
        ResourceType::Group,
        "g1",
        PatternType::Literal,
        "User:alice",
        "*",
        AclOperation::Read,
        AclPermissionType::Allow,
    );
    let admin = acl(
        ResourceType::Cluster,
        "kafka-cluster",
        PatternType::Literal,
        "User:admin",
        "*",
        AclOperation::Alter,
        AclPermissionType::Allow,
    );
    let carol_any_topic = acl(
        ResourceType::Topic,
        "*",
        PatternType::Literal,
        "User:carol",
        "10.0.0.1",
        AclOperation::Describe,
        AclPermissionType::Deny,
    );
    let misnamed_cluster = AclBinding {
        resource_name: "my-cluster".into(),
        ..admin.clone()
    };
    let no_principal_type = AclBinding {
        principal: "alice".into(),
        ..alice_orders.clone()
    };
    // Every version of CreateAcls; per-creation errors; a duplicate is no error.
    assert_eq!(create(&a, 1, &[alice_orders.clone(), bob_pay.clone()]), [0, 0]);
    assert_eq!(
        create(&a, 2, &[alice_group.clone(), misnamed_cluster]),
        [0, codes::INVALID_REQUEST]
    );
    assert_eq!(
        create(
            &a,
            3,
            &[
                admin.clone(),
                carol_any_topic.clone(),
                alice_orders.clone(),
                no_principal_type
            ]
        ),
        [0, 0, 0, codes::INVALID_REQUEST]
    );
    let all = set(&[&alice_orders, &bob_pay, &alice_group, &admin, &carol_any_topic]);
    for v in ACL_VERSIONS {
        assert_eq!(describe_with(&a, v, &AclBindingFilter::any()), all, "DescribeAcls v{v}");
        // MATCH: what applies to a topic — its literal, the wildcard, prefixes.
        let applies_to = |topic: &str| AclBindingFilter {
            resource_type: ResourceType::Topic,
            resource_name: Some(topic.into()),
            pattern_type: PatternType::Match,
            ..AclBindingFilter::any()
        };
        assert_eq!(
            describe_with(&a, v, &applies_to(TOPIC)),
            set(&[&alice_orders, &carol_any_topic])
        );
        assert_eq!(
            describe_with(&a, v, &applies_to("payments")),
            set(&[&bob_pay, &carol_any_topic])
        );
        let alice = AclBindingFilter {
            principal: Some("User:alice".into()),
            ..AclBindingFilter::any()
        };
        assert_eq!(describe_with(&a, v, &alice), set(&[&alice_orders, &alice_group]));
    }
    // A filter with UNKNOWN elements matches nothing (Kafka refuses it).
    for v in ACL_VERSIONS {
        let r: DescribeAclsResponse = connect(&a)
            .request(
                ApiKey::DescribeAcls as i16,
                v,
                &DescribeAclsRequest::default().with_resource_type_filter(1),
            )
            .expect("DescribeAcls");
        assert_eq!((r.error_code, r.resources.len()), (codes::NONE, 0), "DescribeAcls v{v}");
    }

    // Every version of DeleteAcls: the matching ACLs come back.
    assert_eq!(
        delete(&a, 1, &[AclBindingFilter::exact(&carol_any_topic)]),
        [(0, set(&[&carol_any_topic]))]
    );
    let alice = AclBindingFilter {
        principal: Some("User:alice".into()),
        ..AclBindingFilter::any()
    };
    let nothing = AclBindingFilter {
        resource_type: ResourceType::Topic,
        resource_name: Some("nothing".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(
        delete(&a, 2, &[alice, nothing.clone()]),
        [(0, set(&[&alice_orders, &alice_group])), (0, BTreeSet::new())]
    );
    let unknown_filter = AclBindingFilter::any().to_delete_filter().with_permission_type(0);
    let r: DeleteAclsResponse = connect(&a)
        .request(
            ApiKey::DeleteAcls as i16,
            3,
            &DeleteAclsRequest::default().with_filters(vec![unknown_filter, nothing.to_delete_filter()]),
        )
        .expect("DeleteAcls");
    let outcome: Vec<(i16, usize)> = r
        .filter_results
        .iter()
        .map(|f| (f.error_code, f.matching_acls.len()))
        .collect();
    assert_eq!(outcome, [(codes::INVALID_REQUEST, 0), (0, 0)]);
    let left = set(&[&bob_pay, &admin]);
    assert_eq!(describe(&a), left);

    // Persisted: a new agent on the same data directory serves the same ACLs.
    agent.stop().expect("stop");
    let agent = Agent::start(listener_only(dir.path())).expect("restart");
    let a = addr(&agent);
    assert_eq!(describe(&a), left);
    // And keeps taking changes.
    assert_eq!(create(&a, 3, std::slice::from_ref(&alice_orders)), [0]);
    assert_eq!(delete(&a, 3, &[AclBindingFilter::exact(&admin)]), [(0, set(&[&admin]))]);
    agent.stop().expect("stop");
    let agent = Agent::start(listener_only(dir.path())).expect("restart");
    assert_eq!(describe(&addr(&agent)), set(&[&alice_orders, &bob_pay]));
    agent.stop().expect("stop");
}

/// One sync round from `source` into `destination`, as the control plane
/// runs it.
fn sync(source: &str, destination: &str, include: &AclFilterSetting) -> AclSyncReport {
    let (source, destination, include) = (source.to_owned(), destination.to_owned(), include.clone());
    common::on_glommio(move || async move {
        let options = ConnectionOptions {
            client_id: "acl-sync-test".into(),
            connect_timeout: IO_TIMEOUT,
            io_timeout: IO_TIMEOUT,
            ..ConnectionOptions::default()
        };
        let mut source = Connection::connect(&source, options.clone()).await.expect("source");
        let mut destination = Connection::connect(&destination, options).await.expect("destination");
        sync_acls(&mut source, &mut destination, &include).await.expect("sync")
    })
}

fn create_local_topic(addr: &str, topic: &str) {
    let request = CreateTopicsRequest::default().with_timeout_ms(10_000).with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let r: CreateTopicsResponse = connect(addr)
        .request(ApiKey::CreateTopics as i16, 5, &request)
        .expect("CreateTopics");
    assert_eq!(r.topics[0].error_code, 0, "CreateTopics {topic}: {:?}", r.topics[0]);
}

fn sorted(bindings: &[AclBinding]) -> BTreeSet<AclBinding> {
    bindings.iter().cloned().collect()
}

#[test]
fn acls_follow_the_source_agent_within_the_include_setting() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let agent_a = Agent::start(listener_only(dir_a.path())).expect("agent A");
    let a = addr(&agent_a);
    create_local_topic(&a, TOPIC);
    // B mirrors A's topic, as a destination cluster does.
    let agent_b = Agent::start(common::serving_mirror_config(dir_b.path(), &a, &[TOPIC], "")).expect("agent B");
    let b = addr(&agent_b);

    let alice_orders = topic_read(TOPIC, "User:alice");
    let bob_pay = acl(
        ResourceType::Topic,
        "pay",
        PatternType::Prefixed,
        "User:bob",
        "*",
        AclOperation::Write,
        AclPermissionType::Allow,
    );
    let alice_group = acl(
        ResourceType::Group,
        "g1",
        PatternType::Literal,
        "User:alice",
        "*",
        AclOperation::Read,
        AclPermissionType::Allow,
    );
    // Not a topic or group ACL: outside the default include setting.
    let admin = acl(
        ResourceType::Cluster,
        "kafka-cluster",
        PatternType::Literal,
        "User:admin",
        "*",
        AclOperation::Alter,
        AclPermissionType::Allow,
    );
    assert_eq!(
        create(
            &a,
            3,
            &[
                alice_orders.clone(),
                bob_pay.clone(),
                alice_group.clone(),
                admin.clone()
            ]
        ),
        [0; 4]
    );
    // At B: one of its own outside the setting (stays), one inside it that
    // the source does not have (goes).
    let b_own = acl(
        ResourceType::TransactionalId,
        "tx",
        PatternType::Literal,
        "User:carol",
        "*",
        AclOperation::Write,
        AclPermissionType::Allow,
    );
    let stale = acl(
        ResourceType::Topic,
        "stale",
        PatternType::Literal,
        "User:eve",
        "*",
        AclOperation::Read,
        AclPermissionType::Deny,
    );
    assert_eq!(create(&b, 3, &[b_own.clone(), stale.clone()]), [0, 0]);

    let default = AclFilterSetting::default();
    let report = sync(&a, &b, &default);
    assert!(report.supported(), "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(sorted(&report.created), set(&[&alice_orders, &bob_pay, &alice_group]));
    assert_eq!(report.deleted, [stale]);
    assert_eq!(report.unchanged, 0);
    assert_eq!(describe(&b), set(&[&alice_orders, &bob_pay, &alice_group, &b_own]));

    // Nothing to do the next round.
    let report = sync(&a, &b, &default);
    assert!(!report.changed(), "{report:?}");
    assert_eq!(report.unchanged, 3);

    // Deleted at A: deleted at B on the next round.
    assert_eq!(
        delete(&a, 3, &[AclBindingFilter::exact(&alice_group)]),
        [(0, set(&[&alice_group]))]
    );
    let report = sync(&a, &b, &default);
    assert_eq!(
        (report.created.len(), report.deleted.clone()),
        (0, vec![alice_group.clone()])
    );
    assert_eq!(describe(&b), set(&[&alice_orders, &bob_pay, &b_own]));

    // A narrower setting (topics named "orders"): a new ACL at A outside
    // it is not created at B, and B's topic ACLs outside it are not deleted
    // even once A drops them.
    let carol_orders = topic_read(TOPIC, "User:carol");
    let carol_other = topic_read("other", "User:carol");
    assert_eq!(create(&a, 3, &[carol_orders.clone(), carol_other.clone()]), [0, 0]);
    assert_eq!(
        delete(&a, 3, &[AclBindingFilter::exact(&bob_pay)]),
        [(0, set(&[&bob_pay]))]
    );
    let orders_only = AclFilterSetting::rules([AclIncludeRule::named(ResourceType::Topic, "orders")]);
    let report = sync(&a, &b, &orders_only);
    assert_eq!(
        (report.created.clone(), report.deleted.len()),
        (vec![carol_orders.clone()], 0)
    );
    assert_eq!(report.unchanged, 1);
    assert_eq!(describe(&b), set(&[&alice_orders, &carol_orders, &bob_pay, &b_own]));
    // An empty setting syncs nothing.
    let report = sync(&a, &b, &AclFilterSetting::none());
    assert_eq!(report, AclSyncReport::default());
    // The default again: the rest follows.
    let report = sync(&a, &b, &default);
    assert_eq!(
        (report.created.clone(), report.deleted.clone()),
        (vec![carol_other.clone()], vec![bob_pay])
    );
    assert_eq!(describe(&b), set(&[&alice_orders, &carol_orders, &carol_other, &b_own]));

    agent_b.stop().expect("stop B");
    agent_a.stop().expect("stop A");
}

#[test]
fn a_source_without_acl_apis_changes_nothing() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let source = bootstrap.split(',').next().expect("a broker").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(listener_only(dir.path())).expect("agent");
    let b = addr(&agent);
    let ours = topic_read(TOPIC, "User:alice");
    assert_eq!(create(&b, 3, std::slice::from_ref(&ours)), [0]);

    for include in [AclFilterSetting::default(), AclFilterSetting::all()] {
        let report = sync(&source, &b, &include);
        assert_eq!(
            report.unsupported.as_deref(),
            Some(SOURCE_WITHOUT_DESCRIBE_ACLS),
            "{report:?}"
        );
        assert!(!report.changed() && report.errors.is_empty(), "{report:?}");
    }
    assert_eq!(describe(&b), set(&[&ours]));
    agent.stop().expect("stop");
}
