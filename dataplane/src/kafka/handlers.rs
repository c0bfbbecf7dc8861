//! The dispatch of every request a connection sends once it may (after
//! SASL, if any): each API family's handler answers with a [`Response`],
//! which the session (`listener.rs`) writes; no handler writes to the
//! socket. Families: ApiVersions (here), Metadata and DescribeCluster
//! (`metadata.rs`), Fetch (`fetch.rs`), ListOffsets and
//! OffsetForLeaderEpoch (`log_offsets.rs`), DescribeConfigs
//! (`configs.rs`), DescribeLogDirs (`log_dirs.rs`), the ACL APIs
//! (`acls.rs`), Produce, CreateTopics, CreatePartitions and InitProducerId
//! (`write.rs`), the group APIs (`groups/`, `consumer_groups.rs`), the
//! transaction APIs (`transactions.rs`), SaslHandshake and
//! SaslAuthenticate after authentication (`sasl.rs`) and
//! DescribeClusterMirrors (`cluster_mirrors.rs`). Partition facts come
//! from the owning shard's log through `ShardAccess::query`; mirror facts
//! from the control plane's reports. With `[listener] authorizer = "acl"`
//! each handler authorizes its request first (see `authorizer.rs`), as
//! Kafka's `KafkaApis` does.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::response::Response;
use super::{acls, cluster_mirrors, configs, fetch, log_dirs, log_offsets, metadata, write};
use crate::partition::registry::PartitionFn;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::request::{Request, SUPPORTED_APIS};
use ringmirror_storage::log::TopicPartition;

/// "Authorized operations not requested" in Metadata, DescribeCluster
/// and DescribeClusterMirrors.
pub(super) const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// The answer to one request (the session writes it).
pub async fn handle(conn: &mut ClientConnection, header: RequestHeader, request: Request) -> Response {
    let version = header.request_api_version;
    let id = header.correlation_id;
    match request {
        Request::ApiVersions(r) => api_versions(version, id, &r),
        Request::Metadata(r) => {
            let body = metadata::metadata(conn, version, r).await;
            Response::kafka(ApiKey::Metadata, version, id, &body)
        }
        Request::Fetch(r) => Response::Fetch(fetch::handle_fetch(conn, version, id, r).await),
        Request::ListOffsets(r) => {
            let body = log_offsets::list_offsets(conn, version, r).await;
            Response::kafka(ApiKey::ListOffsets, version, id, &body)
        }
        Request::OffsetForLeaderEpoch(r) => {
            let body = log_offsets::offset_for_leader_epoch(conn, r).await;
            Response::kafka(ApiKey::OffsetForLeaderEpoch, version, id, &body)
        }
        Request::DescribeCluster(r) => {
            let body = metadata::describe_cluster(&conn.catalog.get(), &r);
            Response::kafka(ApiKey::DescribeCluster, version, id, &body)
        }
        Request::DescribeLogDirs(r) => {
            let body = log_dirs::describe_log_dirs(conn, r).await;
            Response::kafka(ApiKey::DescribeLogDirs, version, id, &body)
        }
        Request::DescribeConfigs(r) => {
            let body = configs::describe_configs(conn, r).await;
            Response::kafka(ApiKey::DescribeConfigs, version, id, &body)
        }
        Request::DescribeAcls(r) => Response::kafka(ApiKey::DescribeAcls, version, id, &acls::describe_acls(conn, &r)),
        Request::CreateAcls(r) => Response::kafka(ApiKey::CreateAcls, version, id, &acls::create_acls(conn, &r)),
        Request::DeleteAcls(r) => Response::kafka(ApiKey::DeleteAcls, version, id, &acls::delete_acls(conn, &r)),
        Request::Produce(r) => match write::handle_produce(conn, version, r).await {
            Some(body) => Response::kafka(ApiKey::Produce, version, id, &body),
            // acks=0: the client expects no response at all.
            None => Response::None,
        },
        Request::CreateTopics(r) => {
            let body = write::handle_create_topics(conn, version, r).await;
            Response::kafka(ApiKey::CreateTopics, version, id, &body)
        }
        Request::CreatePartitions(r) => {
            let body = write::handle_create_partitions(conn, r).await;
            Response::kafka(ApiKey::CreatePartitions, version, id, &body)
        }
        Request::InitProducerId(r) => {
            let body = write::handle_init_producer_id(conn, &r).await;
            Response::kafka(ApiKey::InitProducerId, version, id, &body)
        }
        Request::DescribeProducers(r) => {
            // READ on each topic, in `describe_producers`.
            let body = super::describe_producers::describe_producers(conn, r).await;
            Response::kafka(ApiKey::DescribeProducers, version, id, &body)
        }
        Request::ElectLeaders(r) => {
            // ALTER on the cluster (Kafka's ControllerApis.handleElectLeaders).
            let allowed = conn.authorized_cluster(AclOperation::Alter);
            let body = super::elect_leaders::elect_leaders(&conn.catalog.get(), allowed, &r);
            Response::kafka(ApiKey::ElectLeaders, version, id, &body)
        }
        Request::Group(r) => super::groups::handle(conn, &header, r).await,
        Request::Transaction(r) => super::transactions::handle(conn, &header, r).await,
        Request::Sasl(r) => super::sasl::after_authentication(&header, r),
        Request::DescribeClusterMirrors(r) => cluster_mirrors::handle(conn, version, id, &r),
    }
}

/// Takes the items of `items` (topics of a request) whose topic the
/// connection may not `operation`, keeping the others in order.
pub(super) fn take_unauthorized<T>(
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

pub(super) fn str(s: &str) -> StrBytes {
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
