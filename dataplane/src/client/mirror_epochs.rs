//! A peer's last mirror epochs (LME), for failback (KIP-1279). Before
//! mirroring back from a cluster that mirrored from us, we ask it for the
//! LME of each partition with `DescribeClusterMirrors` (API 99; see
//! [`ringmirror_protocol::wire::describe_cluster_mirrors`]). Then we truncate our log at
//! the start offset of the first epoch above it (DESIGN.md, "Log
//! convergence"). A source that does not know API 99 (plain Kafka) never
//! mirrored from anyone: every LME is -1, "truncate all".

use std::collections::BTreeMap;

use super::connection::Connection;
use super::error::ClientError;
use crate::partition::LastMirrorEpoch;
use ringmirror_protocol::wire::describe_cluster_mirrors::{
    API_KEY, DescribeClusterMirrorsRequest, DescribeClusterMirrorsResponse, LastMirrorEpochLookup, VERSION,
};

/// The API's name in errors.
const API_NAME: &str = "DescribeClusterMirrors";

/// The LME of every looked-up (topic id, partition) at the peer behind
/// `conn`, asked on behalf of the cluster `requesting_cluster_id` (ours: the
/// peer counts only mirrors whose source it is). Each partition gets an
/// answer: -1 when the peer does not know API 99, or knows nothing of the
/// partition, or its answer leaves the partition out. -1 is always safe:
/// the caller truncates the whole partition and mirrors it again.
///
/// A peer that lists API 99 without version 0 is an error
/// ([`ClientError::NoCommonVersion`]), not -1: it may well hold the epochs.
pub async fn last_mirror_epochs(
    conn: &mut Connection,
    requesting_cluster_id: &str,
    lookups: &[([u8; 16], Vec<i32>)],
) -> Result<BTreeMap<([u8; 16], i32), LastMirrorEpoch>, ClientError> {
    let mut epochs: BTreeMap<([u8; 16], i32), LastMirrorEpoch> = lookups
        .iter()
        .flat_map(|(topic_id, partitions)| partitions.iter().map(|&p| ((*topic_id, p), LastMirrorEpoch::NONE)))
        .collect();
    if epochs.is_empty() || !conn.advertises(API_KEY) {
        return Ok(epochs);
    }
    let version = conn.version_for_key(API_KEY, API_NAME, VERSION, VERSION)?;
    let request = DescribeClusterMirrorsRequest {
        cluster_id: Some(requesting_cluster_id.to_owned()),
        last_mirror_epoch_lookups: lookups
            .iter()
            .map(|(topic_id, partitions)| LastMirrorEpochLookup {
                topic_id: *topic_id,
                partitions: partitions.clone(),
            })
            .collect(),
        ..DescribeClusterMirrorsRequest::default()
    };
    let body = conn
        .request_encoded(API_KEY, API_NAME, version, |buf| {
            request.encode(buf).map_err(|e| e.to_string())
        })
        .await?;
    let response = DescribeClusterMirrorsResponse::decode(&body).map_err(|e| ClientError::Decode {
        addr: conn.addr().into(),
        api: API_NAME,
        version,
        reason: e.to_string(),
    })?;
    if response.error_code != 0 {
        return Err(ClientError::ErrorCode {
            addr: conn.addr().into(),
            api: API_NAME,
            code: response.error_code,
        });
    }
    // Answers for partitions we did not ask about are ignored; a partition
    // answered twice keeps the higher epoch, as the peer's mirrors do.
    for topic in &response.last_mirror_epochs {
        for p in &topic.partitions {
            if let Some(epoch) = epochs.get_mut(&(topic.topic_id, p.partition_index)) {
                *epoch = LastMirrorEpoch::new(p.last_mirror_epoch).max(*epoch);
            }
        }
    }
    Ok(epochs)
}
