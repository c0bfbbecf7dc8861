//! ElectLeaders (API 43, what `kafka-leader-election` asks): an agent is a
//! cluster of one node, every partition has one replica, and that replica
//! leads — so no election is ever needed. Answered as Kafka's controller
//! answers a partition whose preferred leader leads
//! (`ReplicationControlManager.electLeaders` / `electLeader`, reached
//! through `ControllerApis.handleElectLeaders`):
//!
//! * ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top
//!   and for every partition named (`ElectLeadersRequest.getErrorResponse`).
//! * An election type other than PREFERRED (0) or UNCLEAN (1):
//!   INVALID_REQUEST, the same way.
//! * A named partition we have: ELECTION_NOT_NEEDED, for either type (its
//!   preferred replica leads; for UNCLEAN, it has a leader). One we do not
//!   have: UNKNOWN_TOPIC_OR_PARTITION with Kafka's message.
//! * No partitions named (null): every topic, each with only the
//!   partitions that needed an election — none here, so every topic
//!   comes with an empty list.
//!
//! It changes nothing.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::partition::catalog::Catalog;
use ringmirror_protocol::error_codes as ec;

/// Kafka's `ElectionType`s.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

fn partition_result(partition: i32, code: i16, message: Option<String>) -> PartitionResult {
    PartitionResult::default()
        .with_partition_id(partition)
        .with_error_code(code)
        .with_error_message(message.map(StrBytes::from_string))
}

/// Every partition named by `request`, each answered `code` with `message`;
/// and `code` at the top (Kafka's answer to a request it refuses whole).
fn refused(request: &ElectLeadersRequest, code: i16, message: &str) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| partition_result(p, code, Some(message.to_owned())))
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default()
        .with_error_code(code)
        .with_replica_election_results(results)
}

/// Answers ElectLeaders; `cluster_alter` is whether the client may ALTER
/// the cluster.
pub fn elect_leaders(catalog: &Catalog, cluster_alter: bool, request: &ElectLeadersRequest) -> ElectLeadersResponse {
    if !cluster_alter {
        return refused(
            request,
            ec::CLUSTER_AUTHORIZATION_FAILED,
            "Cluster authorization failed.",
        );
    }
    if !matches!(request.election_type, PREFERRED | UNCLEAN) {
        let message = format!("Unknown election type {}", request.election_type);
        return refused(request, ec::INVALID_REQUEST, &message);
    }
    let results = match &request.topic_partitions {
        // Every topic; partitions that need no election are left out.
        None => catalog
            .topics()
            .map(|t| ReplicaElectionResult::default().with_topic(TopicName(StrBytes::from_string(t.name.clone()))))
            .collect(),
        Some(topics) => topics
            .iter()
            .map(|t| {
                let name: &str = &t.topic.0;
                let partitions = t
                    .partitions
                    .iter()
                    .map(|&p| match catalog.topic(name) {
                        None => partition_result(
                            p,
                            ec::UNKNOWN_TOPIC_OR_PARTITION,
                            Some(format!("No such topic as {name}")),
                        ),
                        Some(topic) if !topic.partitions.contains_key(&p) => partition_result(
                            p,
                            ec::UNKNOWN_TOPIC_OR_PARTITION,
                            Some(format!("No such partition as {name}-{p}")),
                        ),
                        // Kafka's `ApiError(ELECTION_NOT_NEEDED)` carries the
                        // error's default message.
                        Some(_) => partition_result(
                            p,
                            ec::ELECTION_NOT_NEEDED,
                            Some("Leader election not needed for topic partition.".to_owned()),
                        ),
                    })
                    .collect();
                ReplicaElectionResult::default()
                    .with_topic(t.topic.clone())
                    .with_partition_result(partitions)
            })
            .collect(),
    };
    ElectLeadersResponse::default()
        .with_error_code(ec::NONE)
        .with_replica_election_results(results)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;

    use super::*;
    use crate::partition::catalog::ServerIdentity;

    fn catalog() -> Catalog {
        let mut c = Catalog::new(ServerIdentity::default());
        c.add_partition("a", None, 0, 0, None);
        c.add_partition("a", None, 1, 1, None);
        c.add_partition("m", None, 0, 1, Some("dr"));
        c
    }

    fn named(topics: &[(&str, &[i32])]) -> ElectLeadersRequest {
        let topics = topics
            .iter()
            .map(|(t, ps)| {
                TopicPartitions::default()
                    .with_topic(TopicName(StrBytes::from_string((*t).to_owned())))
                    .with_partitions(ps.to_vec())
            })
            .collect();
        ElectLeadersRequest::default().with_topic_partitions(Some(topics))
    }

    fn codes(response: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
        response
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(|p| (t.topic.0.to_string(), p.partition_id, p.error_code))
            })
            .collect()
    }

    #[test]
    fn named_partitions_need_no_election_and_unknown_ones_are_unknown() {
        for election_type in [PREFERRED, UNCLEAN] {
            let request = named(&[("a", &[1, 0, 7]), ("m", &[0]), ("nope", &[0])]).with_election_type(election_type);
            let response = elect_leaders(&catalog(), true, &request);
            assert_eq!(response.error_code, ec::NONE);
            let not_needed = ec::ELECTION_NOT_NEEDED;
            let unknown = ec::UNKNOWN_TOPIC_OR_PARTITION;
            assert_eq!(
                codes(&response),
                [
                    ("a".into(), 1, not_needed),
                    ("a".into(), 0, not_needed),
                    ("a".into(), 7, unknown),
                    ("m".into(), 0, not_needed),
                    ("nope".into(), 0, unknown),
                ]
            );
            let messages: Vec<_> = response
                .replica_election_results
                .iter()
                .flat_map(|t| &t.partition_result)
                .map(|p| p.error_message.as_deref().unwrap_or_default().to_owned())
                .collect();
            assert_eq!(messages[2], "No such partition as a-7");
            assert_eq!(messages[4], "No such topic as nope");
        }
    }

    #[test]
    fn all_partitions_list_every_topic_without_partitions() {
        let all = ElectLeadersRequest::default().with_topic_partitions(None);
        let response = elect_leaders(&catalog(), true, &all);
        let topics: Vec<_> = response
            .replica_election_results
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partition_result.len()))
            .collect();
        assert_eq!(topics, [("a".to_owned(), 0), ("m".to_owned(), 0)]);
        // An empty list names no partition.
        let none = elect_leaders(&catalog(), true, &ElectLeadersRequest::default());
        assert!(none.replica_election_results.is_empty());
    }

    #[test]
    fn refusals_name_every_partition_with_the_top_level_error() {
        let request = named(&[("a", &[0, 1])]);
        let response = elect_leaders(&catalog(), false, &request);
        assert_eq!(response.error_code, ec::CLUSTER_AUTHORIZATION_FAILED);
        assert_eq!(
            codes(&response),
            [
                ("a".into(), 0, ec::CLUSTER_AUTHORIZATION_FAILED),
                ("a".into(), 1, ec::CLUSTER_AUTHORIZATION_FAILED)
            ]
        );
        let response = elect_leaders(&catalog(), true, &request.with_election_type(2));
        assert_eq!(response.error_code, ec::INVALID_REQUEST);
        assert_eq!(codes(&response).len(), 2);
        let all = ElectLeadersRequest::default().with_topic_partitions(None);
        let everything = elect_leaders(&catalog(), false, &all);
        assert_eq!(
            (everything.error_code, everything.replica_election_results.len()),
            (ec::CLUSTER_AUTHORIZATION_FAILED, 0)
        );
    }
}
