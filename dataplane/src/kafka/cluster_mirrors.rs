//! DescribeClusterMirrors (KIP-1279's API 99, ours as the prototype lays
//! it out): each mirror as the control plane last reported it, and the
//! last mirror epochs a peer looks up for its LME truncation. DESCRIBE on
//! the cluster is checked first.

use bytes::BytesMut;

use super::connection::ClientConnection;
use super::handlers::AUTHORIZED_OPERATIONS_OMITTED;
use super::response::Response;
use crate::partition::mirror_reports::{MirrorReport, MirrorReports};
use crate::security::acls::AclOperation;
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::request::ServedApi;
use ringmirror_protocol::wire::describe_cluster_mirrors::{
    DescribeClusterMirrorsRequest, DescribeClusterMirrorsResponse, DescribedMirror, DescribedPartition, DescribedTopic,
    PartitionLastMirrorEpoch, TopicLastMirrorEpochs,
};

/// A DescribeClusterMirrors entry for a mirror name we do not know. The
/// KIP proposes UNKNOWN_CLUSTER_MIRROR, whose code is not assigned yet;
/// until then, Kafka's RESOURCE_NOT_FOUND ("a request illegally referred to
/// a resource that does not exist") says the same.
const RESOURCE_NOT_FOUND: i16 = 91;

/// The answer to a DescribeClusterMirrors request, encoded by hand
/// (kafka-protocol does not know the API).
pub(super) fn handle(
    conn: &ClientConnection,
    version: i16,
    correlation_id: i32,
    r: &DescribeClusterMirrorsRequest,
) -> Response {
    // Ours, not Kafka's: DESCRIBE on the cluster.
    let body = if conn.authorized_cluster(AclOperation::Describe) {
        describe_cluster_mirrors(&conn.mirror_reports.current(), r)
    } else {
        DescribeClusterMirrorsResponse {
            error_code: ec::CLUSTER_AUTHORIZATION_FAILED,
            ..Default::default()
        }
    };
    Response::encoded(
        ServedApi::DescribeClusterMirrors,
        version,
        correlation_id,
        |buf: &mut BytesMut| body.encode(buf).map_err(|e| e.to_string()),
    )
}

/// DescribeClusterMirrors: the mirrors asked for (all when none are
/// named), each with its topics and partitions as last reported, and the
/// answers to the LME lookups (response tag 0).
///
/// * A name we do not know gets an entry with RESOURCE_NOT_FOUND and no
///   topics.
/// * A looked-up partition gets the highest LME that the mirrors holding
///   it report (mirrors from a cluster other than the requester's are
///   skipped, see [`MirrorReports::last_mirror_epochs`]). A topic id or
///   partition we do not mirror gets -1 ("none"): the requester then
///   truncates the whole partition, which is always safe.
/// * Authorized operations are never given (i32::MIN): the listener does
///   not authorize yet.
fn describe_cluster_mirrors(
    reports: &MirrorReports,
    request: &DescribeClusterMirrorsRequest,
) -> DescribeClusterMirrorsResponse {
    let described = |name: &str, report: &MirrorReport| DescribedMirror {
        error_code: ec::NONE,
        mirror_name: name.to_owned(),
        authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
        topics: report
            .topics
            .iter()
            .map(|(topic, t)| DescribedTopic {
                topic_name: topic.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|(&partition_index, p)| DescribedPartition {
                        partition_index,
                        source_offset: p.source_offset,
                        destination_offset: p.destination_offset,
                        lag: p.lag,
                        state: p.state.name().into(),
                        retry_attempt: p.retry_attempt,
                        error_message: p.error_message.clone(),
                        last_mirror_epoch: p.last_mirror_epoch.get(),
                    })
                    .collect(),
            })
            .collect(),
    };
    let mirrors = if request.mirror_names.is_empty() {
        reports.mirrors.iter().map(|(name, m)| described(name, m)).collect()
    } else {
        request
            .mirror_names
            .iter()
            .map(|name| match reports.mirrors.get(name) {
                Some(m) => described(name, m),
                None => DescribedMirror {
                    error_code: RESOURCE_NOT_FOUND,
                    mirror_name: name.clone(),
                    authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
                    topics: Vec::new(),
                },
            })
            .collect()
    };
    let last_mirror_epochs = if request.last_mirror_epoch_lookups.is_empty() {
        Vec::new()
    } else {
        let epochs = reports.last_mirror_epochs(request.cluster_id.as_deref());
        request
            .last_mirror_epoch_lookups
            .iter()
            .map(|lookup| TopicLastMirrorEpochs {
                topic_id: lookup.topic_id,
                partitions: lookup
                    .partitions
                    .iter()
                    .map(|&partition_index| PartitionLastMirrorEpoch {
                        partition_index,
                        last_mirror_epoch: epochs
                            .get(&(lookup.topic_id, partition_index))
                            .copied()
                            .unwrap_or_default()
                            .get(),
                    })
                    .collect(),
            })
            .collect()
    };
    DescribeClusterMirrorsResponse {
        throttle_time_ms: 0,
        error_code: ec::NONE,
        error_message: None,
        mirrors,
        last_mirror_epochs,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::partition::mirror_reports::{PartitionReport, TopicReport};
    use ringmirror_protocol::wire::describe_cluster_mirrors::LastMirrorEpochLookup;

    fn reports() -> MirrorReports {
        let partition = |lme| PartitionReport {
            source_offset: 10,
            destination_offset: 8,
            lag: 2,
            state: crate::partition::MirrorPartitionState::Mirroring,
            last_mirror_epoch: crate::partition::LastMirrorEpoch::new(lme),
            ..PartitionReport::default()
        };
        let topic = TopicReport {
            topic_id: [1; 16],
            partitions: BTreeMap::from([(0, partition(4)), (1, partition(6))]),
        };
        let mirror = MirrorReport {
            source_cluster_id: Some("A".into()),
            topics: BTreeMap::from([("t".into(), topic)]),
            ..MirrorReport::default()
        };
        MirrorReports {
            mirrors: BTreeMap::from([("dr".into(), mirror), ("idle".into(), MirrorReport::default())]),
        }
    }

    #[test]
    fn no_names_describe_every_mirror() {
        let response = describe_cluster_mirrors(&reports(), &DescribeClusterMirrorsRequest::default());
        let names: Vec<_> = response.mirrors.iter().map(|m| m.mirror_name.as_str()).collect();
        assert_eq!(names, ["dr", "idle"]);
        let p = &response.mirrors[0].topics[0].partitions[1];
        assert_eq!(
            (
                p.partition_index,
                p.source_offset,
                p.destination_offset,
                p.lag,
                p.last_mirror_epoch
            ),
            (1, 10, 8, 2, 6)
        );
        assert_eq!(p.state, "MIRRORING");
        assert_eq!(response.mirrors[0].authorized_operations, AUTHORIZED_OPERATIONS_OMITTED);
        assert!(response.last_mirror_epochs.is_empty());
    }

    #[test]
    fn unknown_names_are_answered_with_an_error_entry() {
        let request = DescribeClusterMirrorsRequest {
            mirror_names: vec!["nope".into(), "dr".into()],
            ..DescribeClusterMirrorsRequest::default()
        };
        let response = describe_cluster_mirrors(&reports(), &request);
        let entries: Vec<_> = response
            .mirrors
            .iter()
            .map(|m| (m.mirror_name.as_str(), m.error_code, m.topics.len()))
            .collect();
        assert_eq!(entries, [("nope", RESOURCE_NOT_FOUND, 0), ("dr", ec::NONE, 1)]);
    }

    #[test]
    fn lookups_answer_every_partition_asked_about() {
        let request = DescribeClusterMirrorsRequest {
            cluster_id: Some("A".into()),
            last_mirror_epoch_lookups: vec![
                LastMirrorEpochLookup {
                    topic_id: [1; 16],
                    partitions: vec![1, 0, 7],
                },
                LastMirrorEpochLookup {
                    topic_id: [2; 16],
                    partitions: vec![0],
                },
            ],
            ..DescribeClusterMirrorsRequest::default()
        };
        let response = describe_cluster_mirrors(&reports(), &request);
        let answers: Vec<_> = response
            .last_mirror_epochs
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_id[0], p.partition_index, p.last_mirror_epoch))
            })
            .collect();
        assert_eq!(answers, [(1, 1, 6), (1, 0, 4), (1, 7, -1), (2, 0, -1)]);
        // Asked by a cluster the mirror does not come from: nothing applies.
        let other = DescribeClusterMirrorsRequest {
            cluster_id: Some("B".into()),
            ..request
        };
        let response = describe_cluster_mirrors(&reports(), &other);
        assert!(
            response
                .last_mirror_epochs
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.last_mirror_epoch == -1)
        );
    }
}
