//! KIP-848's consumer group protocol at a plain agent (issue 17 item 2),
//! through raw requests: advertised versions, a heartbeat at each version,
//! ConsumerGroupDescribe and ListGroups of a consumer group, and Kafka's
//! answers where a group id belongs to the classic protocol. Kafka's own
//! Java consumer with `group.protocol=consumer` runs the workloads'
//! KIP-848 scenario at the agent in `tests/workloads/at_the_agent.rs`.

mod common;

use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId, ListGroupsRequest, ListGroupsResponse,
};
use kafka_protocol::protocol::StrBytes;

const GROUP_ID_NOT_FOUND: i16 = 69;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;

fn start_agent(dir: &std::path::Path) -> (ringmirror::agent::Agent, String) {
    let agent = ringmirror::agent::Agent::start(common::serving_config(&dir.join("data"), "")).expect("agent");
    let addr = agent.listener_addr().expect("listening").to_string();
    (agent, addr)
}

fn heartbeat(
    c: &mut common::KafkaConnection,
    version: i16,
    r: &ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    c.request(ApiKey::ConsumerGroupHeartbeat as i16, version, r)
        .expect("ConsumerGroupHeartbeat")
}

#[test]
fn the_protocol_apis_answer_as_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, addr) = start_agent(dir.path());
    common::create_topic(&addr, "t", 3, Duration::from_secs(30));
    let mut c = common::KafkaConnection::connect(&addr, Duration::from_secs(10)).expect("connect");
    let advertised = c.advertised_versions();
    for key in [ApiKey::ConsumerGroupHeartbeat, ApiKey::ConsumerGroupDescribe] {
        assert_eq!(advertised.get(&(key as i16)), Some(&(0, 1)), "{key:?}");
    }

    // v0: the coordinator names the member; v1: the member names itself.
    let first = heartbeat(&mut c, 0, &common::consumer_group_join("g", "", "t"));
    assert_eq!((first.error_code, first.member_epoch), (0, 1), "{first:?}");
    let named = first.member_id.clone().expect("a member id");
    let partitions: usize = first
        .assignment
        .as_ref()
        .expect("an assignment")
        .topic_partitions
        .iter()
        .map(|t| t.partitions.len())
        .sum();
    assert_eq!(partitions, 3, "a lone member gets every partition");
    let second = heartbeat(&mut c, 1, &common::consumer_group_join("g", "m-two", "t"));
    assert_eq!((second.error_code, second.member_epoch), (0, 2), "{second:?}");
    assert_eq!(second.member_id.as_deref(), Some("m-two"));
    let ahead = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("g")))
        .with_member_id(named.clone())
        .with_member_epoch(9);
    assert_eq!(heartbeat(&mut c, 1, &ahead).error_code, FENCED_MEMBER_EPOCH);
    let stranger = ahead.clone().with_member_id(StrBytes::from_static_str("nobody"));
    assert_eq!(heartbeat(&mut c, 1, &stranger).error_code, UNKNOWN_MEMBER_ID);

    for version in 0..=1 {
        let described: ConsumerGroupDescribeResponse = c
            .request(
                ApiKey::ConsumerGroupDescribe as i16,
                version,
                &ConsumerGroupDescribeRequest::default().with_group_ids(vec![
                    GroupId(StrBytes::from_static_str("g")),
                    GroupId(StrBytes::from_static_str("absent")),
                ]),
            )
            .expect("ConsumerGroupDescribe");
        let g = &described.groups[0];
        assert_eq!(g.error_code, 0, "{g:?}");
        assert_eq!(
            (g.group_state.as_str(), g.group_epoch, g.assignor_name.as_str()),
            ("Reconciling", 2, "uniform")
        );
        assert_eq!(g.members.len(), 2);
        assert!(g.members.iter().all(|m| m.subscribed_topic_names.len() == 1));
        assert_eq!(described.groups[1].error_code, GROUP_ID_NOT_FOUND);
    }
    let listed: ListGroupsResponse = c
        .request(
            ApiKey::ListGroups as i16,
            5,
            &ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_static_str("consumer")]),
        )
        .expect("ListGroups");
    let listed: Vec<(&str, &str, &str)> = listed
        .groups
        .iter()
        .map(|g| (g.group_id.as_str(), g.group_type.as_str(), g.protocol_type.as_str()))
        .collect();
    assert_eq!(listed, [("g", "consumer", "consumer")]);

    // A group that only holds offsets (as group-offset sync writes them)
    // becomes a consumer group when a consumer-protocol member joins.
    common::admin_commit(&addr, "classic", "t", &[(0, 1, -1)], "");
    let classic = heartbeat(&mut c, 1, &common::consumer_group_join("classic", "m", "t"));
    assert_eq!(
        classic.error_code, 0,
        "an offsets-only classic group is taken over: {classic:?}"
    );
    agent.stop().expect("clean stop");
}
