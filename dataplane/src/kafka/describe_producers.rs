//! DescribeProducers (API 61, what `kafka-transactions describe-producers`
//! and `find-hanging` ask): each partition's active producers from its
//! log's producer state — producer id, epoch, last sequence, last
//! timestamp, coordinator epoch, and the first offset of its open
//! transaction (-1: none) — as Kafka's `KafkaApis.handleDescribeProducersRequest`,
//! `ReplicaManager.activeProducerState` and `UnifiedLog.activeProducers`
//! answer. A mirrored partition's producers are the source's: its batches
//! are the source's bytes, and producer state is rebuilt from them.
//!
//! It only reads producer state; it never changes it.

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::handlers::per_partition;
use crate::partition::registry::ServedPartition;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::log::PartitionLog;

/// The active producers of one partition, by producer id (Kafka's order is
/// its map's; a sorted one reads the same to every client).
fn active_producers(_p: &ServedPartition, log: &PartitionLog, _: &()) -> Vec<ProducerState> {
    let mut producers: Vec<ProducerState> = log
        .producer_state()
        .producers()
        .map(|e| {
            ProducerState::default()
                .with_producer_id(ProducerId(e.producer_id))
                .with_producer_epoch(i32::from(e.producer_epoch))
                .with_last_sequence(e.last_sequence)
                .with_last_timestamp(e.last_timestamp)
                .with_coordinator_epoch(e.coordinator_epoch)
                .with_current_txn_start_offset(e.current_txn_first_offset.unwrap_or(-1))
        })
        .collect();
    producers.sort_by_key(|p| p.producer_id.0);
    producers
}

/// Kafka's `ApiError` for an error without a message of its own carries
/// the error's default message.
fn error_message(code: i16) -> Option<StrBytes> {
    let message = match code {
        ec::TOPIC_AUTHORIZATION_FAILED => "Topic authorization failed.",
        ec::UNKNOWN_TOPIC_OR_PARTITION => "This server does not host this topic-partition.",
        _ => return None,
    };
    Some(StrBytes::from_static_str(message))
}

/// Answers DescribeProducers. Per topic, in Kafka's order of checks: a name
/// that is not a topic name (INVALID_TOPIC_EXCEPTION), READ on the topic
/// (TOPIC_AUTHORIZATION_FAILED), a topic we do not have
/// (UNKNOWN_TOPIC_OR_PARTITION) — each given to every partition asked;
/// then per partition: one the topic does not have is
/// UNKNOWN_TOPIC_OR_PARTITION, one whose log is not open on its shard
/// NOT_LEADER_OR_FOLLOWER (`ReplicaManager.getPartitionOrError`).
pub async fn describe_producers(
    conn: &mut ClientConnection,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let catalog = conn.catalog.get();
    let topic_errors: Vec<Option<(i16, Option<StrBytes>)>> = request
        .topics
        .iter()
        .map(|t| {
            let name: &str = &t.name.0;
            if let Err(message) = ringmirror_storage::limits::check_topic_name(name) {
                Some((ec::INVALID_TOPIC_EXCEPTION, Some(StrBytes::from_string(message))))
            } else if !conn.authorized(AclOperation::Read, ResourceType::Topic, name) {
                Some((
                    ec::TOPIC_AUTHORIZATION_FAILED,
                    error_message(ec::TOPIC_AUTHORIZATION_FAILED),
                ))
            } else if catalog.topic(name).is_none() {
                Some((
                    ec::UNKNOWN_TOPIC_OR_PARTITION,
                    error_message(ec::UNKNOWN_TOPIC_OR_PARTITION),
                ))
            } else {
                None
            }
        })
        .collect();
    // Only the partitions of topics that passed are asked about.
    let asked: Vec<(&str, &[i32])> = request
        .topics
        .iter()
        .zip(&topic_errors)
        .map(|(t, error)| {
            let partitions: &[i32] = if error.is_none() { &t.partition_indexes } else { &[] };
            (&*t.name.0, partitions)
        })
        .collect();
    let answers = per_partition(
        conn,
        &asked,
        |&(name, partitions)| (name, partitions),
        |&p| (p, ()),
        active_producers,
        |&p, producers| (p, producers),
    )
    .await;
    let topics = request
        .topics
        .iter()
        .zip(topic_errors)
        .zip(answers)
        .map(|((t, topic_error), answers)| {
            let partitions = match topic_error {
                Some((code, message)) => t
                    .partition_indexes
                    .iter()
                    .map(|&p| {
                        PartitionResponse::default()
                            .with_partition_index(p)
                            .with_error_code(code)
                            .with_error_message(message.clone())
                    })
                    .collect(),
                None => answers
                    .into_iter()
                    .map(|(p, producers)| {
                        let partition = PartitionResponse::default().with_partition_index(p);
                        match producers {
                            Some(producers) => partition.with_error_code(ec::NONE).with_active_producers(producers),
                            None => {
                                let code = if catalog.owner(&t.name.0, p).is_some() {
                                    ec::NOT_LEADER_OR_FOLLOWER
                                } else {
                                    ec::UNKNOWN_TOPIC_OR_PARTITION
                                };
                                // Without a message, as Kafka's `activeProducerState`.
                                partition.with_error_code(code)
                            }
                        }
                    })
                    .collect(),
            };
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
