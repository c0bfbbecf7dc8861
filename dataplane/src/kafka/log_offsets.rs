//! A partition log's offsets as clients ask for them: ListOffsets (the
//! start, the end or the last stable offset, by timestamp, the largest
//! timestamp) and OffsetForLeaderEpoch (where an epoch ends), each read on
//! the partition's owning shard; and the leader-epoch check Fetch shares.
//! DESCRIBE on each topic is checked first (Kafka's
//! `handleListOffsetRequest`, `handleOffsetForLeaderEpochRequest`).

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};

use super::connection::ClientConnection;
use super::handlers::{per_partition, take_unauthorized};
use crate::partition::registry::ServedPartition;
use crate::security::acls::AclOperation;
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::log::PartitionLog;

/// ListOffsets special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// READ_COMMITTED in ListOffsets and Fetch.
pub const READ_COMMITTED: i8 = 1;

/// ListOffsets; a topic the principal may not DESCRIBE is answered
/// TOPIC_AUTHORIZATION_FAILED.
pub(super) async fn list_offsets(
    conn: &mut ClientConnection,
    version: i16,
    mut r: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Describe, |t| &t.name.0);
    let mut body = list_offsets_of(conn, version, r).await;
    body.topics.extend(denied.into_iter().map(|t| {
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1)
            })
            .collect();
        ListOffsetsTopicResponse::default()
            .with_name(t.name)
            .with_partitions(partitions)
    }));
    body
}

/// OffsetForLeaderEpoch; a topic the principal may not DESCRIBE is
/// answered TOPIC_AUTHORIZATION_FAILED.
pub(super) async fn offset_for_leader_epoch(
    conn: &mut ClientConnection,
    mut r: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Describe, |t| &t.topic.0);
    let mut body = offset_for_leader_epoch_of(conn, r).await;
    body.topics.extend(denied.into_iter().map(|t| {
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                EpochEndOffset::default()
                    .with_partition(p.partition)
                    .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
                    .with_leader_epoch(-1)
                    .with_end_offset(-1)
            })
            .collect();
        OffsetForLeaderTopicResult::default()
            .with_topic(t.topic)
            .with_partitions(partitions)
    }));
    body
}

/// FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when a client's view of the
/// leader epoch differs from ours (-1: the client does not say).
pub fn check_leader_epoch(p: &ServedPartition, current_leader_epoch: i32) -> i16 {
    let ours = p.leader_epoch.get();
    if current_leader_epoch < 0 || current_leader_epoch == ours {
        ec::NONE
    } else if current_leader_epoch < ours {
        ec::FENCED_LEADER_EPOCH
    } else {
        ec::UNKNOWN_LEADER_EPOCH
    }
}

struct OffsetQuery {
    timestamp: i64,
    current_leader_epoch: i32,
    isolation_level: i8,
}

/// (error, timestamp, offset, leader epoch) for one ListOffsets partition.
fn lookup_offset(p: &ServedPartition, log: &PartitionLog, q: &OffsetQuery) -> (i16, i64, i64, i32) {
    let code = check_leader_epoch(p, q.current_leader_epoch);
    if code != ec::NONE {
        return (code, -1, -1, -1);
    }
    let epoch_at = |offset: i64| log.epoch_cache().epoch_for_offset(offset).unwrap_or(-1);
    match q.timestamp {
        LATEST => {
            let end = if q.isolation_level == READ_COMMITTED {
                log.last_stable_offset()
            } else {
                log.log_end_offset()
            };
            (ec::NONE, -1, end, log.epoch_cache().latest().map_or(-1, |e| e.epoch))
        }
        EARLIEST => (ec::NONE, -1, log.log_start_offset(), epoch_at(log.log_start_offset())),
        MAX_TIMESTAMP => match log.max_timestamp() {
            Ok(Some(found)) => (ec::NONE, found.timestamp, found.offset, epoch_at(found.offset)),
            Ok(None) => (ec::NONE, -1, -1, -1),
            Err(e) => {
                tracing::error!(dir = %log.dir().display(), error = %e, "max-timestamp lookup failed");
                (ec::KAFKA_STORAGE_ERROR, -1, -1, -1)
            }
        },
        ts if ts >= 0 => match log.offset_for_timestamp(ts) {
            Ok(Some(found)) => (ec::NONE, found.timestamp, found.offset, epoch_at(found.offset)),
            Ok(None) => (ec::NONE, -1, -1, -1),
            Err(e) => {
                tracing::error!(dir = %log.dir().display(), error = %e, "timestamp lookup failed");
                (ec::KAFKA_STORAGE_ERROR, -1, -1, -1)
            }
        },
        _ => (ec::INVALID_REQUEST, -1, -1, -1),
    }
}

async fn list_offsets_of(
    conn: &mut ClientConnection,
    version: i16,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let isolation_level = request.isolation_level;
    let answers = per_partition(
        conn,
        &request.topics,
        |t| (&t.name.0, &t.partitions),
        |p| {
            let q = OffsetQuery {
                timestamp: p.timestamp,
                current_leader_epoch: p.current_leader_epoch,
                isolation_level,
            };
            (p.partition_index, q)
        },
        lookup_offset,
        |p, found| {
            let (code, timestamp, offset, epoch) = found.unwrap_or((ec::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1));
            ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_error_code(code)
                .with_timestamp(timestamp)
                .with_offset(offset)
                // Responses carry the epoch from v4 on.
                .with_leader_epoch(if version >= 4 { epoch } else { -1 })
        },
    )
    .await;
    let topics = request
        .topics
        .iter()
        .zip(answers)
        .map(|(t, partitions)| {
            ListOffsetsTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

struct EpochQuery {
    current_leader_epoch: i32,
    leader_epoch: i32,
}

fn epoch_end(p: &ServedPartition, log: &PartitionLog, q: &EpochQuery) -> (i16, i32, i64) {
    let code = check_leader_epoch(p, q.current_leader_epoch);
    if code != ec::NONE {
        return (code, -1, -1);
    }
    let (epoch, end) = log.end_offset_for_epoch(q.leader_epoch);
    (ec::NONE, epoch, end)
}

async fn offset_for_leader_epoch_of(
    conn: &mut ClientConnection,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let answers = per_partition(
        conn,
        &request.topics,
        |t| (&t.topic.0, &t.partitions),
        |p| {
            let q = EpochQuery {
                current_leader_epoch: p.current_leader_epoch,
                leader_epoch: p.leader_epoch,
            };
            (p.partition, q)
        },
        epoch_end,
        |p, found| {
            let (code, epoch, end) = found.unwrap_or((ec::UNKNOWN_TOPIC_OR_PARTITION, -1, -1));
            EpochEndOffset::default()
                .with_partition(p.partition)
                .with_error_code(code)
                .with_leader_epoch(epoch)
                .with_end_offset(end)
        },
    )
    .await;
    let topics = request
        .topics
        .iter()
        .zip(answers)
        .map(|(t, partitions)| {
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
