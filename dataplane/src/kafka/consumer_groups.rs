//! ConsumerGroupHeartbeat and ConsumerGroupDescribe on a client connection
//! (KIP-848): each request becomes a call on the coordinator of the group's
//! shard ([`crate::groups::consumer_protocol`]), its answer a response of the
//! request's version. Both are answered at once: nothing in this protocol
//! waits for other members.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopicPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, RequestHeader, TopicName,
};
use uuid::Uuid;

use super::groups::{on_coordinator, s};
use crate::groups::assignors;
use crate::groups::codes::*;
use crate::groups::consumer_protocol::{HeartbeatRequest, HeartbeatResult, TopicMetadata};
use crate::kafka::connection::ClientConnection;
use crate::kafka::response::Response;
use crate::partition::catalog::Catalog;
use crate::security::acls::{AclOperation, ResourceType};

/// "Authorized operations not requested".
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// ConsumerGroupDescribe v1's `MemberType` of a member using the consumer
/// protocol (Kafka's `MemberType.CONSUMER`).
const MEMBER_TYPE_CONSUMER: i8 = 1;

fn topic_metadata(catalog: &Catalog, name: &str) -> Option<TopicMetadata> {
    let topic = catalog.topic(name)?;
    // Partitions are numbered from 0; a gap ends what can be assigned.
    let partitions = (0..).take_while(|p| topic.partitions.contains_key(p)).count();
    Some(TopicMetadata {
        id: Uuid::from_bytes(topic.id),
        partitions: i32::try_from(partitions).unwrap_or(i32::MAX),
    })
}

fn decoded(header: &RequestHeader, host: String, r: ConsumerGroupHeartbeatRequest) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: r.group_id.0.to_string(),
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        instance_id: r.instance_id.map(|v| v.to_string()),
        rack_id: r.rack_id.map(|v| v.to_string()),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topic_names: r
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: r.subscribed_topic_regex.map(|v| v.to_string()),
        server_assignor: r.server_assignor.map(|v| v.to_string()),
        owned: r.topic_partitions.map(|topics| {
            let mut owned = assignors::Assignment::new();
            for t in topics {
                owned.entry(t.topic_id).or_default().extend(t.partitions);
            }
            owned
        }),
        client_id: header.client_id.as_deref().unwrap_or_default().to_owned(),
        client_host: host,
    }
}

fn response(result: HeartbeatResult) -> ConsumerGroupHeartbeatResponse {
    let assignment = result.assignment.map(|a| {
        let topics = a
            .into_iter()
            .map(|(id, ps)| {
                TopicPartitions::default()
                    .with_topic_id(id)
                    .with_partitions(ps.into_iter().collect())
            })
            .collect();
        Assignment::default().with_topic_partitions(topics)
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(result.error)
        .with_error_message(result.error_message.as_deref().map(s))
        .with_member_id((!result.member_id.is_empty()).then(|| s(&result.member_id)))
        .with_member_epoch(result.member_epoch)
        .with_heartbeat_interval_ms(result.heartbeat_interval_ms)
        .with_assignment(assignment)
}

/// ConsumerGroupHeartbeat: READ on the group (Kafka's
/// `handleConsumerGroupHeartbeat`), then the coordinator's answer.
pub(super) async fn heartbeat(
    conn: &mut ClientConnection,
    header: &RequestHeader,
    r: ConsumerGroupHeartbeatRequest,
) -> Response {
    let version = header.request_api_version;
    let group = r.group_id.0.to_string();
    let body = if conn.authz_restricted() && !conn.authorized(AclOperation::Read, ResourceType::Group, &group) {
        ConsumerGroupHeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED)
    } else {
        let catalog = conn.catalog.get();
        let req = decoded(header, conn.peer_host(), r);
        let result = on_coordinator(&conn.access, &group, move |c, now| {
            c.consumer_heartbeat(req, &|name| topic_metadata(&catalog, name), now)
        })
        .await;
        result.map_or_else(
            || ConsumerGroupHeartbeatResponse::default().with_error_code(COORDINATOR_NOT_AVAILABLE),
            response,
        )
    };
    Response::kafka(ApiKey::ConsumerGroupHeartbeat, version, header.correlation_id, &body)
}

fn described_assignment(catalog: &Catalog, a: &assignors::Assignment) -> DescribedAssignment {
    let topics = a
        .iter()
        .map(|(id, ps)| {
            let name = catalog.topic_by_id(id.as_bytes()).map_or("", |t| t.name.as_str());
            DescribedTopicPartitions::default()
                .with_topic_id(*id)
                .with_topic_name(TopicName(s(name)))
                .with_partitions(ps.iter().copied().collect())
        })
        .collect();
    DescribedAssignment::default().with_topic_partitions(topics)
}

/// ConsumerGroupDescribe: DESCRIBE on each group (Kafka's
/// `handleConsumerGroupDescribe`), each group as its coordinator has it.
pub(super) async fn describe(
    conn: &mut ClientConnection,
    header: &RequestHeader,
    r: ConsumerGroupDescribeRequest,
) -> Response {
    let version = header.request_api_version;
    let catalog = conn.catalog.get();
    let mut groups = Vec::with_capacity(r.group_ids.len());
    for group in r.group_ids {
        let out = DescribedGroup::default()
            .with_group_id(group.clone())
            .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
        let name = group.0.to_string();
        if conn.authz_restricted() && !conn.authorized(AclOperation::Describe, ResourceType::Group, &name) {
            groups.push(out.with_error_code(GROUP_AUTHORIZATION_FAILED));
            continue;
        }
        let found = on_coordinator(&conn.access, &name.clone(), move |c, _| {
            c.describe_consumer_group(&name)
        })
        .await;
        groups.push(match found {
            None => out.with_error_code(COORDINATOR_NOT_AVAILABLE),
            Some(Err((code, message))) => out.with_error_code(code).with_error_message(Some(s(&message))),
            Some(Ok(d)) => {
                let none = assignors::Assignment::new();
                let members = d
                    .members
                    .iter()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(&m.id))
                            .with_instance_id(m.instance_id.as_deref().map(s))
                            .with_rack_id(m.rack_id.as_deref().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host))
                            .with_subscribed_topic_names(m.subscribed_topics.iter().map(|t| TopicName(s(t))).collect())
                            .with_assignment(described_assignment(&catalog, &m.assigned))
                            .with_target_assignment(described_assignment(
                                &catalog,
                                d.target.get(&m.id).unwrap_or(&none),
                            ))
                    })
                    .map(|m| {
                        if version >= 1 {
                            m.with_member_type(MEMBER_TYPE_CONSUMER)
                        } else {
                            m
                        }
                    })
                    .collect();
                out.with_group_state(s(d.state.name()))
                    .with_group_epoch(d.group_epoch)
                    .with_assignment_epoch(d.assignment_epoch)
                    .with_assignor_name(s(d.assignor))
                    .with_members(members)
            }
        });
    }
    let body = ConsumerGroupDescribeResponse::default().with_groups(groups);
    Response::kafka(ApiKey::ConsumerGroupDescribe, version, header.correlation_id, &body)
}
