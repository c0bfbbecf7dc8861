//! Source cluster metadata: brokers, partition leaders and leader epochs,
//! topic ids and the cluster id, from a Metadata request. What we write
//! again is checked here, where it enters ([`ringmirror_storage::limits`]): an answer
//! with a cluster id we could not record is refused whole, a topic whose
//! name is not a Kafka topic name is answered as INVALID_TOPIC_EXCEPTION.

use std::collections::HashMap;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::client::{ClientError, Connection};
use ringmirror_protocol::error_codes::INVALID_TOPIC_EXCEPTION;
use ringmirror_storage::limits::{check_cluster_id, check_topic_name, shown};
use ringmirror_storage::log::TopicPartition;

/// Where a source partition lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePartition {
    pub leader: i32,
    pub leader_epoch: i32,
    pub topic_id: [u8; 16],
    pub error_code: i16,
}

#[derive(Debug, Clone, Default)]
pub struct SourceMetadata {
    pub cluster_id: Option<String>,
    /// Broker id → "host:port".
    pub brokers: HashMap<i32, String>,
    pub partitions: HashMap<TopicPartition, SourcePartition>,
    /// Topic → (topic id, partition count), for discovery.
    pub topics: HashMap<String, ([u8; 16], i32)>,
    /// Topics answered with an error instead (such as 3,
    /// UNKNOWN_TOPIC_OR_PARTITION: the source has no such topic).
    pub topic_errors: HashMap<String, i16>,
    /// Whether every topic was asked for (a topic missing from the answer
    /// is then not at the source).
    pub all_topics: bool,
}

/// Asks for metadata of `topics` (all topics when `None`).
pub async fn fetch_source_metadata(
    conn: &mut Connection,
    topics: Option<&[String]>,
) -> Result<SourceMetadata, ClientError> {
    let version = conn.version_for::<MetadataRequest>(1, 12)?;
    let mut request = MetadataRequest::default();
    request.allow_auto_topic_creation = false;
    request.topics = topics.map(|names| {
        names
            .iter()
            .map(|n| {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(TopicName(StrBytes::from_string(n.clone())));
                t
            })
            .collect()
    });
    let response = conn.request(&request, version).await?;
    let cluster_id = response.cluster_id.map(|c| c.to_string());
    if let Some(id) = &cluster_id {
        check_cluster_id(id).map_err(|reason| ClientError::Decode {
            addr: conn.addr().to_owned(),
            api: "Metadata",
            version,
            reason,
        })?;
    }
    let mut out = SourceMetadata {
        cluster_id,
        brokers: response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect(),
        all_topics: topics.is_none(),
        ..SourceMetadata::default()
    };
    for topic in response.topics {
        let Some(name) = topic.name else { continue };
        let name = name.0.to_string();
        let topic_id = *topic.topic_id.as_bytes();
        if let Err(reason) = check_topic_name(&name) {
            tracing::warn!(
                topic = shown(&name),
                reason,
                "the source names a topic Kafka would not; not mirroring it"
            );
            out.topic_errors.insert(name, INVALID_TOPIC_EXCEPTION);
            continue;
        }
        if topic.error_code != 0 {
            tracing::debug!(topic = name, code = topic.error_code, "source topic metadata error");
            out.topic_errors.insert(name, topic.error_code);
            continue;
        }
        out.topics
            .insert(name.clone(), (topic_id, topic.partitions.len() as i32));
        for p in topic.partitions {
            out.partitions.insert(
                TopicPartition::new(name.clone(), p.partition_index),
                SourcePartition {
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    topic_id,
                    error_code: p.error_code,
                },
            );
        }
    }
    Ok(out)
}
