//! The small requests a mirror partition needs besides Fetch: ListOffsets
//! (the source's log start and end) and OffsetForLeaderEpoch (where the
//! source's epoch ends, for replication truncation).

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::ClientError;
use ringmirror_storage::log::TopicPartition;

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

/// What the source answered for one partition to [`fetch_partition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFetch {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Whole and partial batches from the one holding the fetch offset.
    pub records: bytes::Bytes,
}

/// Fetch versions for [`fetch_partition`]: topics by name (before v13).
const PLAIN_FETCH_VERSION_MIN: i16 = 4;
const PLAIN_FETCH_VERSION_MAX: i16 = 12;

/// One partition's bytes from `offset` (at most about `max_bytes`, at
/// least one batch), with a plain consumer Fetch (READ_UNCOMMITTED, no
/// session, no wait) decoded whole: off the hot path (divergence checks
/// and `mirror verify`). `Ok(Err(code))` on a partition error.
pub async fn fetch_partition(
    conn: &mut Connection,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    offset: i64,
    max_bytes: i32,
) -> Result<Result<PartitionFetch, i16>, ClientError> {
    use kafka_protocol::messages::FetchRequest;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};

    let version = conn.version_for::<FetchRequest>(PLAIN_FETCH_VERSION_MIN, PLAIN_FETCH_VERSION_MAX)?;
    let mut partition = FetchPartition::default();
    partition.partition = tp.partition;
    partition.current_leader_epoch = current_leader_epoch;
    partition.fetch_offset = offset;
    partition.partition_max_bytes = max_bytes;
    let mut topic = FetchTopic::default();
    topic.topic = TopicName(StrBytes::from_string(tp.topic.clone()));
    topic.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.replica_id = (-1).into();
    request.max_wait_ms = 0;
    request.min_bytes = 1;
    request.max_bytes = max_bytes;
    request.isolation_level = 0;
    request.session_id = 0;
    request.session_epoch = -1;
    request.topics = vec![topic];
    let response = conn.request(&request, version).await?;
    if response.error_code != 0 {
        return Ok(Err(response.error_code));
    }
    let p = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == tp.partition)
        .ok_or_else(|| no_answer(conn, "Fetch", version, tp))?;
    Ok(if p.error_code == 0 {
        Ok(PartitionFetch {
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            records: p.records.clone().unwrap_or_default(),
        })
    } else {
        Err(p.error_code)
    })
}
