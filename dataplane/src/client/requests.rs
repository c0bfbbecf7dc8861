//! The small requests a mirror partition needs besides Fetch: ListOffsets
//! (the source's log start and end) and OffsetForLeaderEpoch (where the
//! source's epoch ends, for replication truncation).

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::ClientError;
use crate::log::TopicPartition;

/// The error for a response that has no entry for the partition asked about.
fn no_answer(conn: &Connection, api: &'static str, version: i16, tp: &TopicPartition) -> ClientError {
    ClientError::Decode {
        addr: conn.addr().into(),
        api,
        version,
        reason: format!("no answer for {tp}"),
    }
}

/// ListOffsets special timestamps.
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const LATEST_TIMESTAMP: i64 = -1;

/// The offset for `timestamp` (or EARLIEST/LATEST) of one partition:
/// `Ok(Err(code))` when the broker answered with an error code.
pub async fn list_offset(
    conn: &mut Connection,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    timestamp: i64,
) -> Result<Result<i64, i16>, ClientError> {
    let version = conn.version_for::<ListOffsetsRequest>(1, 7)?;
    let mut partition = ListOffsetsPartition::default();
    partition.partition_index = tp.partition;
    partition.current_leader_epoch = current_leader_epoch;
    partition.timestamp = timestamp;
    let mut topic = ListOffsetsTopic::default();
    topic.name = TopicName(StrBytes::from_string(tp.topic.clone()));
    topic.partitions = vec![partition];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = (-1).into();
    request.topics = vec![topic];
    let response = conn.request(&request, version).await?;
    let p = response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == tp.partition)
        .ok_or_else(|| no_answer(conn, "ListOffsets", version, tp))?;
    Ok(if p.error_code == 0 {
        Ok(p.offset)
    } else {
        Err(p.error_code)
    })
}

/// The source's (epoch, end offset) for our `epoch` of one partition, as
/// OffsetForLeaderEpoch answers: `Ok(Err(code))` on a partition error.
pub async fn end_offset_for_epoch(
    conn: &mut Connection,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    epoch: i32,
) -> Result<Result<(i32, i64), i16>, ClientError> {
    let version = conn.version_for::<OffsetForLeaderEpochRequest>(2, 4)?;
    let mut partition = OffsetForLeaderPartition::default();
    partition.partition = tp.partition;
    partition.current_leader_epoch = current_leader_epoch;
    partition.leader_epoch = epoch;
    let mut topic = OffsetForLeaderTopic::default();
    topic.topic = TopicName(StrBytes::from_string(tp.topic.clone()));
    topic.partitions = vec![partition];
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = (-1).into();
    request.topics = vec![topic];
    let response = conn.request(&request, version).await?;
    let p = response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition == tp.partition)
        .ok_or_else(|| no_answer(conn, "OffsetForLeaderEpoch", version, tp))?;
    Ok(if p.error_code == 0 {
        Ok((p.leader_epoch, p.end_offset))
    } else {
        Err(p.error_code)
    })
}
