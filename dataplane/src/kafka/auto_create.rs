//! Topic auto-creation from Metadata, Kafka's `auto.create.topics.enable`
//! (`KafkaApis.handleTopicMetadataRequest`, `getTopicMetadata` and
//! `AutoTopicCreationManager`): a Metadata request naming a topic we do
//! not have creates it as a local topic with `num.partitions` partitions,
//! when the agent allows it and the request does
//! (`allow_auto_topic_creation`, v4+; always before). It decides the
//! answer for every unknown name a Metadata request asks about:
//!
//! * not a topic name: INVALID_TOPIC_EXCEPTION, created or not;
//! * creation off (the setting, the request, or a request for all topics):
//!   UNKNOWN_TOPIC_OR_PARTITION;
//! * an internal topic (`__consumer_offsets`, `__transaction_state`,
//!   `__share_group_state`, the agent's own `__ringmirror…`): never made
//!   by Metadata here — the agent's coordinators hold their state
//!   themselves — UNKNOWN_TOPIC_OR_PARTITION;
//! * a name a mirror on this agent covers (its topic filter): never
//!   created, UNKNOWN_TOPIC_OR_PARTITION, as for any unknown topic. The
//!   mirror creates the topic from its source, byte for byte at the
//!   source's offsets; a local topic made first under its name would
//!   collide with it (the mirror cannot write into a local log, and the
//!   records produced to it would not be the source's);
//! * without CREATE on the cluster or the topic: TOPIC_AUTHORIZATION_FAILED;
//! * else the topic is created, and this answer is still
//!   UNKNOWN_TOPIC_OR_PARTITION: Kafka's broker forwards the creation to
//!   its controller and answers before it is done, and Kafka's clients
//!   ask again (the producer and consumer retry metadata until
//!   `max.block.ms` / their poll's timeout). The next Metadata finds it.

use std::collections::HashMap;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::write;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;

/// Kafka's broker settings for topics it creates by itself, by Kafka's
/// names: `auto.create.topics.enable` (default true) and `num.partitions`
/// (default 1). `default.replication.factor` is always 1 here (an agent is
/// its partitions' only replica; the configuration refuses another).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicCreation {
    pub auto_create_topics_enable: bool,
    /// Partitions of an auto-created topic, and of a CreateTopics topic
    /// that leaves its count to the broker (-1).
    pub num_partitions: i32,
}

impl Default for TopicCreation {
    fn default() -> Self {
        Self {
            auto_create_topics_enable: true,
            num_partitions: 1,
        }
    }
}

/// Kafka's internal topics (`Topic.isInternal`) and the agent's own.
pub fn is_internal(topic: &str) -> bool {
    matches!(
        topic,
        "__consumer_offsets" | "__transaction_state" | "__share_group_state"
    ) || topic.starts_with(write::RESERVED_PREFIX)
}

/// The answer for each of `unknown` (names a Metadata request asks about
/// that the catalog does not hold), creating those that may be created.
/// `allowed`: the request allows auto-creation (and asks for named topics,
/// not all).
pub async fn unknown_topics(conn: &mut ClientConnection, allowed: bool, unknown: &[String]) -> HashMap<String, i16> {
    let enabled = allowed && conn.settings.topic_creation.auto_create_topics_enable;
    let mut answers = HashMap::new();
    let mut creatable = Vec::new();
    let reports = conn.mirror_reports.current();
    for name in unknown {
        let code = if ringmirror_storage::limits::check_topic_name(name).is_err() {
            ec::INVALID_TOPIC_EXCEPTION
        } else if !enabled || is_internal(name) {
            ec::UNKNOWN_TOPIC_OR_PARTITION
        } else if let Some(mirror) = reports.covering(name) {
            tracing::debug!(topic = name, mirror, "not auto-creating a topic a mirror covers");
            ec::UNKNOWN_TOPIC_OR_PARTITION
        } else if !conn.authorized_cluster(AclOperation::Create)
            && !conn.authorized(AclOperation::Create, ResourceType::Topic, name)
        {
            ec::TOPIC_AUTHORIZATION_FAILED
        } else {
            creatable.push(name.clone());
            ec::UNKNOWN_TOPIC_OR_PARTITION
        };
        answers.insert(name.clone(), code);
    }
    if !creatable.is_empty() {
        let partitions = conn.settings.topic_creation.num_partitions;
        let topics = creatable
            .iter()
            .map(|name| {
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.clone())))
                    .with_num_partitions(partitions)
                    .with_replication_factor(-1)
            })
            .collect();
        let request = CreateTopicsRequest::default().with_topics(topics);
        let created = write::create_topics(conn, CREATE_TOPICS_VERSION, request).await;
        for t in created.topics {
            // Another client's request may have made it first; whatever
            // failed is logged by CreateTopics and tried again by the next
            // Metadata.
            if t.error_code == ec::NONE {
                tracing::info!(topic = %t.name.0, partitions, "auto-created a topic (Metadata)");
            }
        }
    }
    answers
}

/// The CreateTopics version auto-creation answers itself with (its
/// answer is only logged).
const CREATE_TOPICS_VERSION: i16 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_names_are_kafka_s_and_ours() {
        for name in [
            "__consumer_offsets",
            "__transaction_state",
            "__share_group_state",
            "__ringmirror_x",
        ] {
            assert!(is_internal(name), "{name}");
        }
        for name in ["orders", "__orders", "_consumer_offsets", "__consumer_offsets2"] {
            assert!(!is_internal(name), "{name}");
        }
        assert_eq!(
            TopicCreation::default(),
            TopicCreation {
                auto_create_topics_enable: true,
                num_partitions: 1
            }
        );
    }
}
