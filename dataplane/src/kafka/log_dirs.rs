//! DescribeLogDirs (what `kafka-log-dirs` and Kafka's Admin
//! `describeLogDirs` ask): the data directory as the agent's one log
//! directory, each served partition's size in it, and the file system's
//! total and usable bytes — the answer of Kafka's
//! `ReplicaManager.describeLogDirs` for a broker with one `log.dirs` entry.
//! A partition is never a "future" replica here and has no offset lag.

use std::path::Path;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::handlers::per_partition;
use crate::partition::registry::ServedPartition;
use crate::security::acls::AclOperation;
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::log::PartitionLog;

fn partition_size(_p: &ServedPartition, log: &PartitionLog, _: &()) -> u64 {
    log.size_bytes()
}

/// (total, usable) bytes of the file system holding `dir`; -1 each if unknown.
fn file_system_bytes(dir: &Path) -> (i64, i64) {
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return (-1, -1);
    };
    // SAFETY: statvfs(3) with a NUL-terminated path and a zeroed out-struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return (-1, -1);
    }
    let block = st.f_frsize as i64;
    (st.f_blocks as i64 * block, st.f_bavail as i64 * block)
}

/// Answers DescribeLogDirs; CLUSTER_AUTHORIZATION_FAILED without DESCRIBE
/// on the cluster (Kafka's `KafkaApis.handleDescribeLogDirsRequest`).
pub async fn describe_log_dirs(
    conn: &mut ClientConnection,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    if !conn.authorized_cluster(AclOperation::Describe) {
        return DescribeLogDirsResponse::default().with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED);
    }
    let catalog = conn.catalog.get();
    // Null topics: every partition served here.
    let wanted: Vec<(String, Vec<i32>)> = match request.topics {
        None => catalog
            .topics()
            .map(|t| (t.name.clone(), t.partitions.keys().copied().collect()))
            .collect(),
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect(),
    };
    let sizes = per_partition(
        conn,
        &wanted,
        |t| (t.0.as_str(), t.1.as_slice()),
        |&p| (p, ()),
        partition_size,
        |&p, size| size.map(|bytes| (p, bytes)),
    )
    .await;
    // Partitions not served here are left out, as Kafka leaves out those
    // it has no replica of.
    let topics: Vec<DescribeLogDirsTopic> = wanted
        .iter()
        .zip(sizes)
        .filter_map(|((name, _), sizes)| {
            let partitions: Vec<DescribeLogDirsPartition> = sizes
                .into_iter()
                .flatten()
                .map(|(p, bytes)| {
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(bytes as i64)
                        .with_offset_lag(0)
                        .with_is_future_key(false)
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name.clone())))
                    .with_partitions(partitions)
            })
        })
        .collect();
    let dir = conn.access.local.data_dir();
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let (total_bytes, usable_bytes) = file_system_bytes(&dir);
    let result = DescribeLogDirsResult::default()
        .with_error_code(ec::NONE)
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(topics)
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes);
    DescribeLogDirsResponse::default().with_results(vec![result])
}
