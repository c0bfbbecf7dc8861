//! Answers to every request except Fetch (see `fetch.rs`): ApiVersions,
//! Metadata, ListOffsets, OffsetForLeaderEpoch, DescribeCluster, DescribeLogDirs
//! (`log_dirs.rs`),
//! DescribeConfigs, DescribeAcls, CreateAcls, DeleteAcls (answered by
//! `security::acls`), DescribeClusterMirrors; Produce,
//! CreateTopics and InitProducerId are in `write.rs`. Partition facts come
//! from the owning shard's log through `ShardAccess::query`; mirror facts
//! from the control plane's reports. With `[listener] authorizer = "acl"`
//! each request is authorized here first (see `authorizer.rs`).

use std::sync::Arc;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, CreateAclsResponse, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, InitProducerIdResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, RequestHeader,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::connection::ClientConnection;
use super::fetch;
use super::log_dirs;
use super::response::Response;
use super::write;
use crate::partition::catalog::Catalog;
use crate::partition::mirror_reports::{MirrorReport, MirrorReports};
use crate::partition::registry::{PartitionFn, ServedPartition};
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::request::{Request, SUPPORTED_APIS, ServedApi};
use ringmirror_protocol::wire::describe_cluster_mirrors::{
    DescribeClusterMirrorsRequest, DescribeClusterMirrorsResponse, DescribedMirror, DescribedPartition, DescribedTopic,
    PartitionLastMirrorEpoch, TopicLastMirrorEpochs,
};
use ringmirror_storage::log::{PartitionLog, TopicPartition};

/// ListOffsets special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// "Authorized operations not requested" in Metadata and DescribeCluster.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// DescribeConfigs resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources: the topic's own setting (an override,
/// DYNAMIC_TOPIC_CONFIG), a setting of the agent's configuration file
/// (STATIC_BROKER_CONFIG), a built-in default (DEFAULT_CONFIG).
const SOURCE_TOPIC_CONFIG: i8 = 1;
const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
const SOURCE_DEFAULT_CONFIG: i8 = 5;
/// READ_COMMITTED in ListOffsets and Fetch.
pub const READ_COMMITTED: i8 = 1;
/// A DescribeClusterMirrors entry for a mirror name we do not know. The
/// KIP proposes UNKNOWN_CLUSTER_MIRROR, whose code is not assigned yet;
/// until then, Kafka's RESOURCE_NOT_FOUND ("a request illegally referred to
/// a resource that does not exist") says the same.
const RESOURCE_NOT_FOUND: i16 = 91;

/// The answer to one request (the session writes it).
pub async fn handle(conn: &mut ClientConnection, header: RequestHeader, request: Request) -> Response {
    let version = header.request_api_version;
    let id = header.correlation_id;
    match request {
        Request::ApiVersions(r) => api_versions(version, id, &r),
        Request::Metadata(r) => {
            let body = metadata(conn, version, r).await;
            Response::kafka(ApiKey::Metadata, version, id, &body)
        }
        Request::Fetch(r) => Response::Fetch(fetch::handle_fetch(conn, version, id, r).await),
        Request::ListOffsets(mut r) => {
            // DESCRIBE on each topic (Kafka's handleListOffsetRequest).
            let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Describe, |t| &t.name.0);
            let mut body = list_offsets(conn, version, r).await;
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
            Response::kafka(ApiKey::ListOffsets, version, id, &body)
        }
        Request::OffsetForLeaderEpoch(mut r) => {
            // DESCRIBE on each topic (Kafka's handleOffsetForLeaderEpochRequest).
            let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Describe, |t| &t.topic.0);
            let mut body = offset_for_leader_epoch(conn, r).await;
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
            Response::kafka(ApiKey::OffsetForLeaderEpoch, version, id, &body)
        }
        Request::DescribeCluster(r) => {
            let body = describe_cluster(&conn.catalog.get(), &r);
            Response::kafka(ApiKey::DescribeCluster, version, id, &body)
        }
        Request::DescribeLogDirs(r) => {
            let body = log_dirs::describe_log_dirs(conn, r).await;
            Response::kafka(ApiKey::DescribeLogDirs, version, id, &body)
        }
        Request::DescribeConfigs(r) => {
            let body = describe_configs(conn, r).await;
            Response::kafka(ApiKey::DescribeConfigs, version, id, &body)
        }
        Request::DescribeAcls(r) => {
            // DESCRIBE on the cluster (Kafka's AclApis.handleDescribeAcls).
            let body = if conn.authorized_cluster(AclOperation::Describe) {
                describe_acls(&conn.acls, &r)
            } else {
                DescribeAclsResponse::default()
                    .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                    .with_error_message(Some(str("Cluster authorization failed.")))
            };
            Response::kafka(ApiKey::DescribeAcls, version, id, &body)
        }
        Request::CreateAcls(r) => {
            // ALTER on the cluster (Kafka's AclApis.handleCreateAcls).
            let body = if conn.authorized_cluster(AclOperation::Alter) {
                crate::security::acls::create_acls_response(&conn.acls, &r, conn.authz.enabled())
            } else {
                let results = r
                    .creations
                    .iter()
                    .map(|_| {
                        AclCreationResult::default()
                            .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                            .with_error_message(Some(str("Cluster authorization failed.")))
                    })
                    .collect();
                CreateAclsResponse::default().with_results(results)
            };
            Response::kafka(ApiKey::CreateAcls, version, id, &body)
        }
        Request::DeleteAcls(r) => {
            // ALTER on the cluster (Kafka's AclApis.handleDeleteAcls).
            let body = if conn.authorized_cluster(AclOperation::Alter) {
                crate::security::acls::delete_acls_response(&conn.acls, &r, conn.authz.enabled())
            } else {
                let results = r
                    .filters
                    .iter()
                    .map(|_| {
                        DeleteAclsFilterResult::default()
                            .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                            .with_error_message(Some(str("Cluster authorization failed.")))
                    })
                    .collect();
                DeleteAclsResponse::default().with_filter_results(results)
            };
            Response::kafka(ApiKey::DeleteAcls, version, id, &body)
        }
        Request::Produce(mut r) => {
            let acks = r.acks;
            if !matches!(acks, -1..=1) {
                let body = write::refuse_produce(&r, version, ec::INVALID_REQUIRED_ACKS);
                return Response::kafka(ApiKey::Produce, version, id, &body);
            }
            // WRITE on each topic (Kafka's handleProduceRequest);
            // a transactional batch is verified with its coordinator in
            // `write::produce`.
            let denied = take_unauthorized(conn, &mut r.topic_data, AclOperation::Write, |t| &t.name.0);
            let mut body = write::produce(conn, version, r).await;
            if !denied.is_empty() {
                let refused = ProduceRequest::default().with_topic_data(denied);
                let refused = write::refuse_produce(&refused, version, ec::TOPIC_AUTHORIZATION_FAILED);
                body.responses.extend(refused.responses);
            }
            // acks=0: the client expects no response at all.
            if acks == 0 {
                return Response::None;
            }
            Response::kafka(ApiKey::Produce, version, id, &body)
        }
        Request::CreateTopics(mut r) => {
            // CREATE on the cluster or on each topic (Kafka's
            // handleCreateTopicsRequest).
            let denied = if conn.authorized_cluster(AclOperation::Create) {
                Vec::new()
            } else {
                take_unauthorized(conn, &mut r.topics, AclOperation::Create, |t| &t.name.0)
            };
            let mut body = write::create_topics(conn, version, r).await;
            body.topics.extend(denied.into_iter().map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(Some(str("Authorization failed.")))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            }));
            Response::kafka(ApiKey::CreateTopics, version, id, &body)
        }
        Request::CreatePartitions(mut r) => {
            // ALTER on each topic (Kafka's handleCreatePartitionsRequest).
            let denied = take_unauthorized(conn, &mut r.topics, AclOperation::Alter, |t| &t.name.0);
            let mut body = write::create_partitions(conn, r).await;
            body.results.extend(denied.into_iter().map(|t| {
                CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
                    .with_error_message(Some(str("Authorization failed.")))
            }));
            Response::kafka(ApiKey::CreatePartitions, version, id, &body)
        }
        Request::InitProducerId(r) => {
            // Idempotent producers: IDEMPOTENT_WRITE on the cluster or
            // WRITE on some topic (Kafka's handleInitProducerIdRequest);
            // transactional ones go to their id's coordinator.
            let body = if r.transactional_id.is_some() {
                super::transactions::init_producer_id(conn, &r).await
            } else if !conn.authorized_idempotent_write() {
                InitProducerIdResponse::default()
                    .with_error_code(ec::CLUSTER_AUTHORIZATION_FAILED)
                    .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                    .with_producer_epoch(-1)
            } else {
                write::init_producer_id(conn, &r)
            };
            Response::kafka(ApiKey::InitProducerId, version, id, &body)
        }
        Request::Group(r) => super::groups::handle(conn, &header, r).await,
        Request::Transaction(r) => super::transactions::handle(conn, &header, r).await,
        Request::Sasl(r) => super::sasl::after_authentication(&header, r),
        Request::DescribeClusterMirrors(r) => {
            // Ours, not Kafka's: DESCRIBE on the cluster.
            let body = if conn.authorized_cluster(AclOperation::Describe) {
                describe_cluster_mirrors(&conn.mirror_reports.current(), &r)
            } else {
                DescribeClusterMirrorsResponse {
                    error_code: ec::CLUSTER_AUTHORIZATION_FAILED,
                    ..Default::default()
                }
            };
            Response::encoded(ServedApi::DescribeClusterMirrors, version, id, |buf| {
                body.encode(buf).map_err(|e| e.to_string())
            })
        }
    }
}

/// Takes the items of `items` (topics of a request) whose topic the
/// connection may not `operation`, keeping the others in order.
fn take_unauthorized<T>(
    conn: &ClientConnection,
    items: &mut Vec<T>,
    operation: AclOperation,
    name: impl Fn(&T) -> &str,
) -> Vec<T> {
    if !conn.authz_restricted() {
        return Vec::new();
    }
    let (allowed, denied) = std::mem::take(items)
        .into_iter()
        .partition(|t| conn.authorized(operation, ResourceType::Topic, name(t)));
    *items = allowed;
    denied
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn api_version_list() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|&(key, min, max)| {
            ApiVersion::default()
                .with_api_key(key as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

fn api_versions(version: i16, id: i32, _request: &ApiVersionsRequest) -> Response {
    let body = ApiVersionsResponse::default().with_api_keys(api_version_list());
    Response::kafka(ApiKey::ApiVersions, version, id, &body)
}

/// An ApiVersions request at a version we do not speak gets a v0 answer
/// with UNSUPPORTED_VERSION and our list, so the client can retry lower.
pub fn unsupported_api_versions(id: i32) -> Response {
    let body = ApiVersionsResponse::default()
        .with_error_code(ec::UNSUPPORTED_VERSION)
        .with_api_keys(api_version_list());
    Response::kafka(ApiKey::ApiVersions, 0, id, &body)
}

fn leader_epoch(p: &ServedPartition, _log: &PartitionLog, _: &()) -> i32 {
    p.leader_epoch.get()
}

fn broker(catalog: &Catalog) -> MetadataResponseBroker {
    let me = &catalog.identity;
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(me.node_id))
        .with_host(str(&me.host))
        .with_port(i32::from(me.port))
}

async fn metadata(conn: &mut ClientConnection, version: i16, request: MetadataRequest) -> MetadataResponse {
    let catalog = conn.catalog.get();
    let node = catalog.identity.node_id;
    // (name, id) of each topic asked about, in order; all when null.
    let wanted: Vec<(Option<String>, Option<[u8; 16]>)> = match &request.topics {
        None => catalog.topics().map(|t| (Some(t.name.clone()), Some(t.id))).collect(),
        Some(topics) => topics
            .iter()
            .map(|t| match &t.name {
                Some(name) => (Some(name.0.to_string()), None),
                None => (
                    catalog.topic_by_id(t.topic_id.as_bytes()).map(|e| e.name.clone()),
                    Some(*t.topic_id.as_bytes()),
                ),
            })
            .collect(),
    };
    // DESCRIBE on each topic (Kafka's KafkaApis.handleTopicMetadataRequest):
    // a listing of all topics leaves out the others; a topic asked for by
    // name or id is answered TOPIC_AUTHORIZATION_FAILED.
    let describable = |name: &str| conn.authorized(AclOperation::Describe, ResourceType::Topic, name);
    let (wanted, denied): (Vec<_>, Vec<_>) = if request.topics.is_none() {
        (
            wanted
                .into_iter()
                .filter(|(n, _)| n.as_deref().is_some_and(describable))
                .collect(),
            Vec::new(),
        )
    } else {
        wanted
            .into_iter()
            .partition(|(n, _)| n.as_deref().is_none_or(describable))
    };
    let mut items = Vec::new();
    for (name, _) in &wanted {
        if let Some(entry) = name.as_deref().and_then(|n| catalog.topic(n)) {
            for (&partition, p) in &entry.partitions {
                items.push((p.shard, TopicPartition::new(entry.name.clone(), partition), ()));
            }
        }
    }
    let epochs = conn.access.query(items.clone(), leader_epoch).await;
    let epoch_of = |tp: &TopicPartition| items.iter().position(|(_, t, _)| t == tp).and_then(|i| epochs[i]);
    let denied = denied.into_iter().map(|(name, id)| {
        // Asked by id: the name is not told.
        let by_id = id.is_some();
        MetadataResponseTopic::default()
            .with_error_code(ec::TOPIC_AUTHORIZATION_FAILED)
            .with_name(name.filter(|_| !by_id).map(|n| TopicName(str(&n))))
            .with_topic_id(Uuid::from_bytes(id.filter(|_| version >= 10).unwrap_or_default()))
            .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
    });
    let topics = wanted
        .into_iter()
        .map(|(name, id)| {
            let Some(entry) = name.as_deref().and_then(|n| catalog.topic(n)) else {
                let code = if name.is_none() {
                    ec::UNKNOWN_TOPIC_ID
                } else {
                    ec::UNKNOWN_TOPIC_OR_PARTITION
                };
                return MetadataResponseTopic::default()
                    .with_error_code(code)
                    .with_name(name.map(|n| TopicName(str(&n))))
                    .with_topic_id(Uuid::from_bytes(id.filter(|_| version >= 10).unwrap_or_default()))
                    .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            };
            let partitions = entry
                .partitions
                .keys()
                .map(|&partition| {
                    let epoch = epoch_of(&TopicPartition::new(entry.name.clone(), partition));
                    MetadataResponsePartition::default()
                        .with_error_code(if epoch.is_some() {
                            ec::NONE
                        } else {
                            ec::LEADER_NOT_AVAILABLE
                        })
                        .with_partition_index(partition)
                        .with_leader_id(BrokerId(node))
                        .with_leader_epoch(epoch.filter(|_| version >= 7).unwrap_or(-1))
                        .with_replica_nodes(vec![BrokerId(node)])
                        .with_isr_nodes(vec![BrokerId(node)])
                })
                .collect();
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(str(&entry.name))))
                .with_topic_id(Uuid::from_bytes(if version >= 10 { entry.id } else { [0; 16] }))
                .with_partitions(partitions)
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
        })
        .chain(denied)
        .collect();
    MetadataResponse::default()
        .with_brokers(vec![broker(&catalog)])
        .with_cluster_id(Some(str(&catalog.identity.cluster_id)))
        .with_controller_id(BrokerId(node))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
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

/// For requests shaped topics → partitions: asks `f` about each partition
/// on its owning shard and builds each partition's answer with `answer`
/// (given `None` for a partition this agent does not serve). Returns the
/// answers per topic, in request order.
pub(super) async fn per_partition<T, P, Q, R, O>(
    conn: &mut ClientConnection,
    topics: &[T],
    partitions: impl Fn(&T) -> (&str, &[P]),
    question: impl Fn(&P) -> (i32, Q),
    f: PartitionFn<Q, R>,
    answer: impl Fn(&P, Option<R>) -> O,
) -> Vec<Vec<O>>
where
    Q: Send + 'static,
    R: Send + 'static,
{
    let catalog = conn.catalog.get();
    let mut slots = Vec::new();
    let mut items = Vec::new();
    for t in topics {
        let (topic, parts) = partitions(t);
        for p in parts {
            let (partition, q) = question(p);
            slots.push(catalog.owner(topic, partition).map(|shard| {
                items.push((shard, TopicPartition::new(topic, partition), q));
                items.len() - 1
            }));
        }
    }
    let mut answers: Vec<Option<R>> = conn.access.query(items, f).await;
    let mut slots = slots.into_iter();
    topics
        .iter()
        .map(|t| {
            partitions(t)
                .1
                .iter()
                .map(|p| answer(p, slots.next().flatten().and_then(|i| answers[i].take())))
                .collect()
        })
        .collect()
}

async fn list_offsets(conn: &mut ClientConnection, version: i16, request: ListOffsetsRequest) -> ListOffsetsResponse {
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

async fn offset_for_leader_epoch(
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

fn describe_cluster(catalog: &Arc<Catalog>, _request: &DescribeClusterRequest) -> DescribeClusterResponse {
    let me = &catalog.identity;
    DescribeClusterResponse::default()
        .with_cluster_id(str(&me.cluster_id))
        .with_controller_id(BrokerId(me.node_id))
        .with_endpoint_type(1)
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(me.node_id))
                .with_host(str(&me.host))
                .with_port(i32::from(me.port)),
        ])
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// A topic's configs as Kafka names them, from its log's settings, each
/// with its source: the agent's file when it differs from the built-in
/// default, else the default. Never DYNAMIC_TOPIC_CONFIG: a topic's own
/// settings are its overrides in the catalog ([`with_overrides`]), so a
/// peer syncing configs from us takes exactly those.
fn topic_configs(_p: &ServedPartition, log: &PartitionLog, _: &()) -> Vec<(&'static str, String, i8)> {
    ringmirror_storage::topic_config::log_settings(log.config())
        .into_iter()
        .map(|(name, value, differs)| {
            let source = if differs {
                SOURCE_STATIC_BROKER_CONFIG
            } else {
                SOURCE_DEFAULT_CONFIG
            };
            (name, value, source)
        })
        .collect()
}

/// A topic's configs as DescribeConfigs answers them: its overrides from
/// the catalog (DYNAMIC_TOPIC_CONFIG, in place of the log's value of the
/// same name, the others after the log's settings, by name), and the log's
/// settings for the rest.
fn with_overrides(
    log_settings: Vec<(&'static str, String, i8)>,
    overrides: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String, i8)> {
    let mut configs: Vec<(String, String, i8)> = log_settings
        .into_iter()
        .map(|(name, value, source)| match overrides.get(name) {
            Some(v) => (name.to_owned(), v.clone(), SOURCE_TOPIC_CONFIG),
            None => (name.to_owned(), value, source),
        })
        .collect();
    let extra: Vec<_> = overrides
        .iter()
        .filter(|(name, _)| !configs.iter().any(|(n, _, _)| n == *name))
        .map(|(name, value)| (name.clone(), value.clone(), SOURCE_TOPIC_CONFIG))
        .collect();
    configs.extend(extra);
    configs
}

async fn describe_configs(conn: &mut ClientConnection, request: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let catalog = conn.catalog.get();
    let mut results = Vec::new();
    for resource in &request.resources {
        let name = resource.resource_name.to_string();
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        // DESCRIBE_CONFIGS on the topic, or on the cluster for a broker
        // (Kafka's ConfigHelper / handleDescribeConfigsRequest).
        let denied = match resource.resource_type {
            RESOURCE_TOPIC if !conn.authorized(AclOperation::DescribeConfigs, ResourceType::Topic, &name) => {
                Some(ec::TOPIC_AUTHORIZATION_FAILED)
            }
            RESOURCE_BROKER if !conn.authorized_cluster(AclOperation::DescribeConfigs) => {
                Some(ec::CLUSTER_AUTHORIZATION_FAILED)
            }
            _ => None,
        };
        if let Some(code) = denied {
            results.push(
                result
                    .with_error_code(code)
                    .with_error_message(Some(str("Authorization failed."))),
            );
            continue;
        }
        let configs = match resource.resource_type {
            RESOURCE_TOPIC => {
                let Some(topic) = catalog.topic(&name) else {
                    results.push(
                        result
                            .with_error_code(ec::UNKNOWN_TOPIC_OR_PARTITION)
                            .with_error_message(Some(str("unknown topic"))),
                    );
                    continue;
                };
                let owner = topic.partitions.iter().next().map(|(&p, e)| (p, e.shard));
                let log_settings = match owner {
                    Some((partition, shard)) => {
                        let item = (shard, TopicPartition::new(name.clone(), partition), ());
                        conn.access
                            .query(vec![item], topic_configs)
                            .await
                            .pop()
                            .flatten()
                            .unwrap_or_default()
                    }
                    None => Vec::new(),
                };
                with_overrides(log_settings, &topic.configs)
            }
            RESOURCE_BROKER => Vec::new(),
            _ => {
                results.push(
                    result
                        .with_error_code(ec::INVALID_REQUEST)
                        .with_error_message(Some(str("unsupported resource type"))),
                );
                continue;
            }
        };
        let wanted = |key: &str| {
            resource
                .configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|k| &**k == key))
        };
        let configs = configs
            .into_iter()
            .filter(|(k, _, _)| wanted(k))
            .map(|(k, v, source)| {
                DescribeConfigsResourceResult::default()
                    .with_name(StrBytes::from_string(k))
                    .with_value(Some(StrBytes::from_string(v)))
                    .with_read_only(true)
                    .with_config_source(source)
            })
            .collect();
        results.push(result.with_configs(configs));
    }
    DescribeConfigsResponse::default().with_results(results)
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

/// The stored ACLs the request's filter matches (see `security::acls`;
/// enforced by `security::authorizer` when `authorizer = "acl"`).
fn describe_acls(acls: &crate::security::acls::AclStore, request: &DescribeAclsRequest) -> DescribeAclsResponse {
    crate::security::acls::describe_acls_response(acls, request)
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

    #[test]
    fn overrides_replace_log_settings_and_come_as_the_topic_s_own() {
        let log = vec![
            ("cleanup.policy", "delete".to_owned(), SOURCE_DEFAULT_CONFIG),
            ("segment.bytes", "100".to_owned(), SOURCE_STATIC_BROKER_CONFIG),
        ];
        let overrides = BTreeMap::from([
            ("retention.ms".to_owned(), "60000".to_owned()),
            ("cleanup.policy".to_owned(), "compact".to_owned()),
        ]);
        let own = |n: &str, v: &str, s| (n.to_owned(), v.to_owned(), s);
        assert_eq!(
            with_overrides(log.clone(), &overrides),
            [
                own("cleanup.policy", "compact", SOURCE_TOPIC_CONFIG),
                own("segment.bytes", "100", SOURCE_STATIC_BROKER_CONFIG),
                own("retention.ms", "60000", SOURCE_TOPIC_CONFIG),
            ]
        );
        assert_eq!(
            with_overrides(log, &BTreeMap::new()),
            [
                own("cleanup.policy", "delete", SOURCE_DEFAULT_CONFIG),
                own("segment.bytes", "100", SOURCE_STATIC_BROKER_CONFIG),
            ]
        );
    }
}
