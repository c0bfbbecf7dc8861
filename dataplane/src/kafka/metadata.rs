//! Metadata and DescribeCluster: this agent as a cluster of one node
//! that leads every partition it serves, each partition with the leader
//! epoch its owning shard holds. A topic the principal may not DESCRIBE
//! is left out of a listing and refused where it was named (Kafka's
//! `handleTopicMetadataRequest`).

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse, TopicName,
};
use uuid::Uuid;

use super::connection::ClientConnection;
use super::handlers::{AUTHORIZED_OPERATIONS_OMITTED, str};
use crate::partition::catalog::Catalog;
use crate::partition::registry::ServedPartition;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::log::{PartitionLog, TopicPartition};

fn leader_epoch(p: &ServedPartition, _log: &PartitionLog, _: &()) -> i32 {
    p.leader_epoch.get()
}

fn broker(catalog: &Catalog) -> MetadataResponseBroker {
    let me = &catalog.identity;
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(me.node_id))
        .with_host(str(&me.host))
        .with_port(i32::from(me.port))
}

pub(super) async fn metadata(conn: &mut ClientConnection, version: i16, request: MetadataRequest) -> MetadataResponse {
    let catalog = conn.catalog.get();
    let node = catalog.identity.node_id;
    // (name, id) of each topic asked about, in order; all when null.
    let wanted: Vec<(Option<String>, Option<[u8; 16]>)> = match &request.topics {
        None => catalog.topics().map(|t| (Some(t.name.clone()), Some(t.id))).collect(),
        Some(topics) => topics
            .iter()
            .map(|t| match &t.name {
                Some(name) => (Some(name.0.to_string()), None),
                None => (
                    catalog.topic_by_id(t.topic_id.as_bytes()).map(|e| e.name.clone()),
                    Some(*t.topic_id.as_bytes()),
                ),
            })
            .collect(),
    };
    // DESCRIBE on each topic (Kafka's KafkaApis.handleTopicMetadataRequest):
    // a listing of all topics leaves out the others; a topic asked for by
    // name or id is answered TOPIC_AUTHORIZATION_FAILED.
    let describable = |name: &str| conn.authorized(AclOperation::Describe, ResourceType::Topic, name);
    let (wanted, denied): (Vec<_>, Vec<_>) = if request.topics.is_none() {
        (
            wanted
                .into_iter()
                .filter(|(n, _)| n.as_deref().is_some_and(describable))
                .collect(),
            Vec::new(),
        )
    } else {
        wanted
            .into_iter()
            .partition(|(n, _)| n.as_deref().is_none_or(describable))
    };
    // Named topics we do not have: each one's answer, and auto-creation
    // (see `auto_create`).
    let unknown: Vec<String> = wanted
        .iter()
        .filter_map(|(name, id)| name.as_ref().filter(|n| id.is_none() && catalog.topic(n).is_none()))
        .cloned()
        .collect();
    let allow_auto_creation = request.topics.is_some() && request.allow_auto_topic_creation;
    let unknown = super::auto_create::unknown_topics(conn, allow_auto_creation, &unknown).await;
    let mut items = Vec::new();
    for (name, _) in &wanted {
        if let Some(entry) = name.as_deref().and_then(|n| catalog.topic(n)) {
            for (&partition, p) in &entry.partitions {
                items.push((p.shard, TopicPartition::new(entry.name.clone(), partition), ()));
            }
        }
    }
    let epochs = conn.access.query(items.clone(), leader_epoch).await;
    let epoch_of = |tp: &TopicPartition| items.iter().position(|(_, t, _)| t == tp).and_then(|i| epochs[i]);
    let denied = denied.into_iter().map(|(name, id)| {
        // Asked by id: the name is not told.
        let by_id = id.is_some();
        MetadataResponseTopic::default()
            .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
            .with_name(name.filter(|_| !by_id).map(|n| TopicName(str(&n))))
            .with_topic_id(Uuid::from_bytes(id.filter(|_| version >= 10).unwrap_or_default()))
            .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
    });
    let topics = wanted
        .into_iter()
        .map(|(name, id)| {
            let Some(entry) = name.as_deref().and_then(|n| catalog.topic(n)) else {
                let code = match &name {
                    None => ec::UNKNOWN_TOPIC_ID,
                    Some(n) => unknown.get(n).copied().unwrap_or(ec::UNKNOWN_TOPIC_OR_PARTITION),
                };
                let internal = name.as_deref().is_some_and(super::auto_create::is_internal);
                return MetadataResponseTopic::default()
                    .with_error_code(code)
                    .with_is_internal(internal)
                    .with_name(name.map(|n| TopicName(str(&n))))
                    .with_topic_id(Uuid::from_bytes(id.filter(|_| version >= 10).unwrap_or_default()))
                    .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            };
            let partitions = entry
                .partitions
                .keys()
                .map(|&partition| {
                    let epoch = epoch_of(&TopicPartition::new(entry.name.clone(), partition));
                    MetadataResponsePartition::default()
                        .with_error_code(if epoch.is_some() {
                            ec::NONE
                        } else {
                            ec::LEADER_NOT_AVAILABLE
                        })
                        .with_partition_index(partition)
                        .with_leader_id(BrokerId(node))
                        .with_leader_epoch(epoch.filter(|_| version >= 7).unwrap_or(-1))
                        .with_replica_nodes(vec![BrokerId(node)])
                        .with_isr_nodes(vec![BrokerId(node)])
                })
                .collect();
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(str(&entry.name))))
                .with_topic_id(Uuid::from_bytes(if version >= 10 { entry.id } else { [0; 16] }))
                .with_partitions(partitions)
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
        })
        .chain(denied)
        .collect();
    MetadataResponse::default()
        .with_brokers(vec![broker(&catalog)])
        .with_cluster_id(Some(str(&catalog.identity.cluster_id)))
        .with_controller_id(BrokerId(node))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

pub(super) fn describe_cluster(catalog: &Arc<Catalog>, _request: &DescribeClusterRequest) -> DescribeClusterResponse {
    let me = &catalog.identity;
    DescribeClusterResponse::default()
        .with_cluster_id(str(&me.cluster_id))
        .with_controller_id(BrokerId(me.node_id))
        .with_endpoint_type(1)
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(me.node_id))
                .with_host(str(&me.host))
                .with_port(i32::from(me.port)),
        ])
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
