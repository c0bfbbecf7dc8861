//! Requests as they arrive: the frame's header, checked against the APIs
//! and versions we serve, and the body decoded with the `kafka-protocol`
//! schemas, or with our own for the APIs it does not know
//! (`DescribeClusterMirrors`, see [`crate::wire::describe_cluster_mirrors`]).
//! Anything we cannot take comes back as a [`RequestError`] that says what
//! was wrong and whether the client gets an answer (an ApiVersions request
//! at a version we do not speak) or the connection is closed (what Kafka
//! brokers do for the rest).

use std::panic::AssertUnwindSafe;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
    ListTransactionsRequest,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest, DescribeGroupsRequest, DescribeShareGroupOffsetsRequest, FindCoordinatorRequest,
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest,
    SaslAuthenticateRequest, SaslHandshakeRequest, ShareGroupDescribeRequest, SyncGroupRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DescribeAclsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeLogDirsRequest,
    DescribeProducersRequest, ElectLeadersRequest, FetchRequest, InitProducerIdRequest, ListOffsetsRequest,
    MetadataRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader,
};
use kafka_protocol::protocol::Decodable;

use crate::wire::describe_cluster_mirrors::{self, DescribeClusterMirrorsRequest};
use crate::wire::share_group_offsets;

/// The group requests, decoded.
#[derive(Debug)]
pub enum GroupRequest {
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    ShareGroupDescribe(ShareGroupDescribeRequest),
    DescribeShareGroupOffsets(DescribeShareGroupOffsetsRequest),
    AlterShareGroupOffsets(AlterShareGroupOffsetsRequest),
    DeleteShareGroupOffsets(DeleteShareGroupOffsetsRequest),
    /// KIP-848's consumer group protocol.
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest),
}

/// The transaction coordinator's requests (InitProducerId aside).
#[derive(Debug)]
pub enum TransactionRequest {
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    EndTxn(EndTxnRequest),
    DescribeTransactions(DescribeTransactionsRequest),
    ListTransactions(ListTransactionsRequest),
}

/// The SASL requests.
#[derive(Debug)]
pub enum SaslRequest {
    Handshake(SaslHandshakeRequest),
    Authenticate(SaslAuthenticateRequest),
}

/// An API we serve, with Kafka's key as its value (`api as i16`). It is
/// not [`ApiKey`] because `kafka-protocol` does not know every API we serve
/// (KIP-1279's `DescribeClusterMirrors`, key 99). It compares equal to the
/// `ApiKey` of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i16)]
pub enum ServedApi {
    Produce = ApiKey::Produce as i16,
    Fetch = ApiKey::Fetch as i16,
    ListOffsets = ApiKey::ListOffsets as i16,
    Metadata = ApiKey::Metadata as i16,
    OffsetCommit = ApiKey::OffsetCommit as i16,
    OffsetFetch = ApiKey::OffsetFetch as i16,
    FindCoordinator = ApiKey::FindCoordinator as i16,
    JoinGroup = ApiKey::JoinGroup as i16,
    Heartbeat = ApiKey::Heartbeat as i16,
    LeaveGroup = ApiKey::LeaveGroup as i16,
    SyncGroup = ApiKey::SyncGroup as i16,
    DescribeGroups = ApiKey::DescribeGroups as i16,
    ListGroups = ApiKey::ListGroups as i16,
    ApiVersions = ApiKey::ApiVersions as i16,
    CreateTopics = ApiKey::CreateTopics as i16,
    DeleteGroups = ApiKey::DeleteGroups as i16,
    InitProducerId = ApiKey::InitProducerId as i16,
    OffsetForLeaderEpoch = ApiKey::OffsetForLeaderEpoch as i16,
    DescribeAcls = ApiKey::DescribeAcls as i16,
    CreateAcls = ApiKey::CreateAcls as i16,
    DeleteAcls = ApiKey::DeleteAcls as i16,
    DescribeConfigs = ApiKey::DescribeConfigs as i16,
    CreatePartitions = ApiKey::CreatePartitions as i16,
    DescribeCluster = ApiKey::DescribeCluster as i16,
    DescribeLogDirs = ApiKey::DescribeLogDirs as i16,
    ShareGroupDescribe = ApiKey::ShareGroupDescribe as i16,
    DescribeShareGroupOffsets = ApiKey::DescribeShareGroupOffsets as i16,
    AlterShareGroupOffsets = ApiKey::AlterShareGroupOffsets as i16,
    DeleteShareGroupOffsets = ApiKey::DeleteShareGroupOffsets as i16,
    ConsumerGroupHeartbeat = ApiKey::ConsumerGroupHeartbeat as i16,
    ConsumerGroupDescribe = ApiKey::ConsumerGroupDescribe as i16,
    SaslHandshake = ApiKey::SaslHandshake as i16,
    SaslAuthenticate = ApiKey::SaslAuthenticate as i16,
    AddPartitionsToTxn = ApiKey::AddPartitionsToTxn as i16,
    TxnOffsetCommit = ApiKey::TxnOffsetCommit as i16,
    AddOffsetsToTxn = ApiKey::AddOffsetsToTxn as i16,
    EndTxn = ApiKey::EndTxn as i16,
    DescribeTransactions = ApiKey::DescribeTransactions as i16,
    ListTransactions = ApiKey::ListTransactions as i16,
    DescribeProducers = ApiKey::DescribeProducers as i16,
    ElectLeaders = ApiKey::ElectLeaders as i16,
    DescribeClusterMirrors = describe_cluster_mirrors::API_KEY,
}

impl ServedApi {
    /// The `kafka-protocol` key, for the APIs it knows.
    pub fn kafka(self) -> Option<ApiKey> {
        match self {
            Self::DescribeClusterMirrors => None,
            known => ApiKey::try_from(known as i16).ok(),
        }
    }

    /// The request header version for `version` of this API. APIs that
    /// `kafka-protocol` does not know are all flexible (every API added
    /// since KIP-482 is), so their requests have header v2.
    pub fn request_header_version(self, version: i16) -> i16 {
        self.kafka().map_or(2, |api| api.request_header_version(version))
    }

    /// The response header version, by the same rule (v1 when flexible).
    pub fn response_header_version(self, version: i16) -> i16 {
        self.kafka().map_or(1, |api| api.response_header_version(version))
    }
}

impl TryFrom<i16> for ServedApi {
    type Error = ();

    fn try_from(key: i16) -> Result<Self, ()> {
        SUPPORTED_APIS
            .iter()
            .map(|&(api, _, _)| api)
            .find(|&api| api as i16 == key)
            .ok_or(())
    }
}

impl PartialEq<ApiKey> for ServedApi {
    fn eq(&self, other: &ApiKey) -> bool {
        self.kafka() == Some(*other)
    }
}

/// The APIs we serve and the versions of each (what ApiVersions advertises).
pub const SUPPORTED_APIS: &[(ServedApi, i16, i16)] = &[
    (ServedApi::Produce, 3, 9),
    (ServedApi::Fetch, 4, 16),
    (ServedApi::ListOffsets, 1, 7),
    (ServedApi::Metadata, 1, 12),
    (ServedApi::DescribeConfigs, 1, 4),
    (ServedApi::DescribeAcls, 1, 3),
    (ServedApi::CreateAcls, 1, 3),
    (ServedApi::DeleteAcls, 1, 3),
    (ServedApi::ApiVersions, 0, 3),
    (ServedApi::OffsetForLeaderEpoch, 2, 4),
    (ServedApi::DescribeCluster, 0, 1),
    (ServedApi::DescribeLogDirs, 1, 4),
    (ServedApi::CreateTopics, 2, 7),
    (ServedApi::CreatePartitions, 0, 3),
    (ServedApi::InitProducerId, 0, 4),
    // Transactions at `transaction.version` 1 (see `crate::transactions`):
    // AddPartitionsToTxn v4+ is the brokers' batched form (KIP-890
    // verification); clients send up to v3.
    (ServedApi::AddPartitionsToTxn, 0, 5),
    (ServedApi::AddOffsetsToTxn, 0, 4),
    (ServedApi::EndTxn, 0, 4),
    (ServedApi::TxnOffsetCommit, 0, 4),
    (ServedApi::DescribeTransactions, 0, 0),
    (ServedApi::ListTransactions, 0, 2),
    // Each partition's active producers (`kafka-transactions
    // describe-producers`, `find-hanging`).
    (ServedApi::DescribeProducers, 0, 0),
    // One replica per partition: every preferred leader leads.
    (ServedApi::ElectLeaders, 0, 2),
    (ServedApi::FindCoordinator, 0, 5),
    (ServedApi::JoinGroup, 0, 9),
    (ServedApi::SyncGroup, 0, 5),
    (ServedApi::Heartbeat, 0, 4),
    (ServedApi::LeaveGroup, 0, 5),
    (ServedApi::OffsetCommit, 2, 9),
    (ServedApi::OffsetFetch, 1, 9),
    (ServedApi::ListGroups, 0, 5),
    (ServedApi::DescribeGroups, 0, 6),
    (ServedApi::DeleteGroups, 0, 2),
    // Share groups' start offsets and description only (no share consumers).
    (ServedApi::ShareGroupDescribe, 1, 1),
    (
        ServedApi::DescribeShareGroupOffsets,
        0,
        share_group_offsets::MAX_VERSION,
    ),
    (ServedApi::AlterShareGroupOffsets, 0, 0),
    (ServedApi::DeleteShareGroupOffsets, 0, 0),
    // KIP-848's consumer group protocol, as Kafka 4 brokers offer it (v1:
    // the member id is chosen by the client).
    (ServedApi::ConsumerGroupHeartbeat, 0, 1),
    (ServedApi::ConsumerGroupDescribe, 0, 1),
    // Advertised on every listener, as Kafka does (see `kafka::sasl`).
    (ServedApi::SaslHandshake, 0, 1),
    (ServedApi::SaslAuthenticate, 0, 2),
    (
        ServedApi::DescribeClusterMirrors,
        describe_cluster_mirrors::VERSION,
        describe_cluster_mirrors::VERSION,
    ),
];

/// The smallest frame that can hold a request header (key, version,
/// correlation id, null client id).
pub const REQUEST_HEADER_BYTES_MIN: usize = 10;

/// The versions of `api` we serve.
pub fn supported_versions(api: ServedApi) -> (i16, i16) {
    SUPPORTED_APIS
        .iter()
        .find(|(key, _, _)| *key == api)
        .map_or((0, -1), |&(_, min, max)| (min, max))
}

#[derive(Debug)]
pub enum Request {
    ApiVersions(ApiVersionsRequest),
    Metadata(MetadataRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    DescribeCluster(DescribeClusterRequest),
    DescribeLogDirs(DescribeLogDirsRequest),
    DescribeConfigs(DescribeConfigsRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    Produce(ProduceRequest),
    CreateTopics(CreateTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    InitProducerId(InitProducerIdRequest),
    DescribeProducers(DescribeProducersRequest),
    ElectLeaders(ElectLeadersRequest),
    /// The group coordinator's APIs.
    Group(GroupRequest),
    /// The transaction coordinator's APIs (InitProducerId aside).
    Transaction(TransactionRequest),
    DescribeClusterMirrors(DescribeClusterMirrorsRequest),
    /// SaslHandshake and SaslAuthenticate (see `kafka::sasl`).
    Sasl(SaslRequest),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("request of {len} bytes is shorter than a request header")]
    TooShort { len: usize },
    #[error("unknown API key {api_key}")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("{api:?} v{version} is not served (we serve v{min}-v{max})")]
    UnsupportedVersion {
        api: ServedApi,
        version: i16,
        min: i16,
        max: i16,
        correlation_id: i32,
    },
    #[error("{api:?} is not served")]
    UnsupportedApi { api: ApiKey, correlation_id: i32 },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ServedApi,
        version: i16,
        correlation_id: i32,
        reason: String,
    },
}

fn decode<T: Decodable>(body: &mut Bytes, version: i16) -> anyhow::Result<T> {
    guarded(|| T::decode(body, version))
}

/// Runs a `kafka-protocol` decode, turning a panic inside it into an error:
/// the decoders are not ours and read bytes from the network, and a panic
/// would unwind through the shard's executor and take down every
/// connection and partition it runs. Unwind safety is asserted because a
/// failed decode leaves nothing behind but the frame, which is dropped.
fn guarded<T>(decode: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    std::panic::catch_unwind(AssertUnwindSafe(decode)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        Err(anyhow::anyhow!("the decoder panicked: {what}"))
    })
}

/// Decodes one request frame (without its size prefix).
pub fn decode_request(frame: Bytes) -> Result<(RequestHeader, Request), RequestError> {
    if frame.len() < REQUEST_HEADER_BYTES_MIN {
        return Err(RequestError::TooShort { len: frame.len() });
    }
    let mut fixed = &frame[..8];
    let (api_key, version, correlation_id) = (fixed.get_i16(), fixed.get_i16(), fixed.get_i32());
    // Served APIs first: some are unknown to kafka-protocol's ApiKey.
    let Ok(api) = ServedApi::try_from(api_key) else {
        return Err(match ApiKey::try_from(api_key) {
            Ok(api) => RequestError::UnsupportedApi { api, correlation_id },
            Err(()) => RequestError::UnknownApi {
                api_key,
                correlation_id,
            },
        });
    };
    let (min, max) = supported_versions(api);
    if !(min..=max).contains(&version) {
        return Err(RequestError::UnsupportedVersion {
            api,
            version,
            min,
            max,
            correlation_id,
        });
    }
    let malformed = |reason: anyhow::Error| RequestError::Malformed {
        api,
        version,
        correlation_id,
        reason: format!("{reason:#}"),
    };
    let mut body = frame;
    let header_version = api.request_header_version(version);
    let header = guarded(|| RequestHeader::decode(&mut body, header_version)).map_err(malformed)?;
    let Some(kafka_api) = api.kafka() else {
        // The one API kafka-protocol does not know (see ServedApi::kafka),
        // decoded by hand, from the body as a slice.
        let request = DescribeClusterMirrorsRequest::decode(&body).map_err(|e| malformed(e.into()))?;
        return Ok((header, Request::DescribeClusterMirrors(request)));
    };
    let body = &mut body;
    let request = match kafka_api {
        ApiKey::ApiVersions => Request::ApiVersions(decode(body, version).map_err(malformed)?),
        ApiKey::Metadata => Request::Metadata(decode(body, version).map_err(malformed)?),
        ApiKey::Fetch => Request::Fetch(decode(body, version).map_err(malformed)?),
        ApiKey::ListOffsets => Request::ListOffsets(decode(body, version).map_err(malformed)?),
        ApiKey::OffsetForLeaderEpoch => Request::OffsetForLeaderEpoch(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeCluster => Request::DescribeCluster(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeLogDirs => Request::DescribeLogDirs(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeConfigs => Request::DescribeConfigs(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeAcls => Request::DescribeAcls(decode(body, version).map_err(malformed)?),
        ApiKey::CreateAcls => Request::CreateAcls(decode(body, version).map_err(malformed)?),
        ApiKey::DeleteAcls => Request::DeleteAcls(decode(body, version).map_err(malformed)?),
        ApiKey::Produce => Request::Produce(decode(body, version).map_err(malformed)?),
        ApiKey::CreateTopics => Request::CreateTopics(decode(body, version).map_err(malformed)?),
        ApiKey::CreatePartitions => Request::CreatePartitions(decode(body, version).map_err(malformed)?),
        ApiKey::InitProducerId => Request::InitProducerId(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeProducers => Request::DescribeProducers(decode(body, version).map_err(malformed)?),
        ApiKey::ElectLeaders => Request::ElectLeaders(decode(body, version).map_err(malformed)?),
        ApiKey::FindCoordinator => {
            Request::Group(GroupRequest::FindCoordinator(decode(body, version).map_err(malformed)?))
        }
        ApiKey::JoinGroup => Request::Group(GroupRequest::JoinGroup(decode(body, version).map_err(malformed)?)),
        ApiKey::SyncGroup => Request::Group(GroupRequest::SyncGroup(decode(body, version).map_err(malformed)?)),
        ApiKey::Heartbeat => Request::Group(GroupRequest::Heartbeat(decode(body, version).map_err(malformed)?)),
        ApiKey::LeaveGroup => Request::Group(GroupRequest::LeaveGroup(decode(body, version).map_err(malformed)?)),
        ApiKey::OffsetCommit => Request::Group(GroupRequest::OffsetCommit(decode(body, version).map_err(malformed)?)),
        ApiKey::OffsetFetch => Request::Group(GroupRequest::OffsetFetch(decode(body, version).map_err(malformed)?)),
        ApiKey::ListGroups => Request::Group(GroupRequest::ListGroups(decode(body, version).map_err(malformed)?)),
        ApiKey::DescribeGroups => {
            Request::Group(GroupRequest::DescribeGroups(decode(body, version).map_err(malformed)?))
        }
        ApiKey::DeleteGroups => Request::Group(GroupRequest::DeleteGroups(decode(body, version).map_err(malformed)?)),
        ApiKey::ShareGroupDescribe => Request::Group(GroupRequest::ShareGroupDescribe(
            decode(body, version).map_err(malformed)?,
        )),
        // v1 (KIP-1226) changed only the response: its request is v0's.
        ApiKey::DescribeShareGroupOffsets => Request::Group(GroupRequest::DescribeShareGroupOffsets(
            decode(body, 0).map_err(malformed)?,
        )),
        ApiKey::AlterShareGroupOffsets => Request::Group(GroupRequest::AlterShareGroupOffsets(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::DeleteShareGroupOffsets => Request::Group(GroupRequest::DeleteShareGroupOffsets(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::ConsumerGroupHeartbeat => Request::Group(GroupRequest::ConsumerGroupHeartbeat(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::ConsumerGroupDescribe => Request::Group(GroupRequest::ConsumerGroupDescribe(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::AddPartitionsToTxn => Request::Transaction(TransactionRequest::AddPartitionsToTxn(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::AddOffsetsToTxn => Request::Transaction(TransactionRequest::AddOffsetsToTxn(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::TxnOffsetCommit => {
            Request::Group(GroupRequest::TxnOffsetCommit(decode(body, version).map_err(malformed)?))
        }
        ApiKey::EndTxn => Request::Transaction(TransactionRequest::EndTxn(decode(body, version).map_err(malformed)?)),
        ApiKey::DescribeTransactions => Request::Transaction(TransactionRequest::DescribeTransactions(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::ListTransactions => Request::Transaction(TransactionRequest::ListTransactions(
            decode(body, version).map_err(malformed)?,
        )),
        ApiKey::SaslHandshake => Request::Sasl(SaslRequest::Handshake(decode(body, version).map_err(malformed)?)),
        ApiKey::SaslAuthenticate => Request::Sasl(SaslRequest::Authenticate(decode(body, version).map_err(malformed)?)),
        api => return Err(RequestError::UnsupportedApi { api, correlation_id }),
    };
    Ok((header, request))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn header(api: ServedApi, version: i16) -> BytesMut {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        buf
    }

    fn frame<T: Encodable>(api: ServedApi, version: i16, body: &T) -> Bytes {
        let mut buf = header(api, version);
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn mirrors_frame(request: &DescribeClusterMirrorsRequest) -> Bytes {
        let mut buf = header(ServedApi::DescribeClusterMirrors, 0);
        request.encode(&mut buf).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_every_supported_version_of_metadata() {
        for version in 1..=12 {
            let (header, request) =
                decode_request(frame(ServedApi::Metadata, version, &MetadataRequest::default())).unwrap();
            assert_eq!(header.correlation_id, 42);
            assert!(matches!(request, Request::Metadata(_)));
        }
    }

    #[test]
    fn refuses_what_we_do_not_serve() {
        let f = frame(ServedApi::Fetch, 17, &FetchRequest::default());
        assert!(matches!(
            decode_request(f),
            Err(RequestError::UnsupportedVersion { correlation_id: 42, .. })
        ));
        let mut unknown = BytesMut::new();
        unknown.put_i16(999);
        unknown.put_i16(0);
        unknown.put_i32(7);
        unknown.put_i16(-1);
        assert!(matches!(
            decode_request(unknown.freeze()),
            Err(RequestError::UnknownApi {
                api_key: 999,
                correlation_id: 7
            })
        ));
        assert_eq!(
            decode_request(Bytes::from_static(&[0; 4])).unwrap_err(),
            RequestError::TooShort { len: 4 }
        );
        let mut unserved = BytesMut::new();
        unserved.put_i16(ApiKey::DeleteTopics as i16);
        unserved.put_i16(0);
        unserved.put_i32(8);
        unserved.put_i16(-1);
        assert_eq!(
            decode_request(unserved.freeze()).unwrap_err(),
            RequestError::UnsupportedApi {
                api: ApiKey::DeleteTopics,
                correlation_id: 8
            }
        );
    }

    #[test]
    fn served_apis_carry_kafkas_keys() {
        for &(api, _, _) in SUPPORTED_APIS {
            assert_eq!(ServedApi::try_from(api as i16), Ok(api));
            match api.kafka() {
                Some(key) => {
                    assert_eq!(key as i16, api as i16);
                    assert!(api == key);
                }
                None => assert_eq!(api, ServedApi::DescribeClusterMirrors),
            }
        }
        assert_eq!(ServedApi::DescribeClusterMirrors as i16, 99);
        assert_eq!(ServedApi::DescribeClusterMirrors.request_header_version(0), 2);
        assert_eq!(ServedApi::DescribeClusterMirrors.response_header_version(0), 1);
        // ApiVersions responses keep header v0 whatever the version.
        assert_eq!(ServedApi::ApiVersions.response_header_version(3), 0);
        assert!(ServedApi::try_from(ApiKey::DeleteTopics as i16).is_err());
    }

    #[test]
    fn describe_cluster_mirrors_reaches_its_decoder() {
        let request = DescribeClusterMirrorsRequest {
            mirror_names: vec!["dr".into()],
            cluster_id: Some("A".into()),
            ..DescribeClusterMirrorsRequest::default()
        };
        let (decoded_header, decoded) = decode_request(mirrors_frame(&request)).unwrap();
        assert_eq!(
            (decoded_header.request_api_key, decoded_header.correlation_id),
            (99, 42)
        );
        assert!(matches!(decoded, Request::DescribeClusterMirrors(r) if r == request));
        let mut v1 = header(ServedApi::DescribeClusterMirrors, 1);
        request.encode(&mut v1).unwrap();
        assert!(matches!(
            decode_request(v1.freeze()),
            Err(RequestError::UnsupportedVersion {
                api: ServedApi::DescribeClusterMirrors,
                version: 1,
                min: 0,
                max: 0,
                correlation_id: 42
            })
        ));
    }

    /// A request of a served kind with kafka-protocol's defaults.
    fn default_frame(api: ServedApi, version: i16) -> Bytes {
        use kafka_protocol::messages as km;
        match api {
            ServedApi::Produce => frame(api, version, &ProduceRequest::default()),
            ServedApi::Fetch => frame(api, version, &FetchRequest::default()),
            ServedApi::ListOffsets => frame(api, version, &ListOffsetsRequest::default()),
            ServedApi::Metadata => frame(api, version, &MetadataRequest::default()),
            ServedApi::DescribeConfigs => frame(api, version, &DescribeConfigsRequest::default()),
            ServedApi::DescribeAcls => frame(api, version, &DescribeAclsRequest::default()),
            ServedApi::CreateAcls => frame(api, version, &CreateAclsRequest::default()),
            ServedApi::DeleteAcls => frame(api, version, &DeleteAclsRequest::default()),
            ServedApi::ApiVersions => frame(api, version, &ApiVersionsRequest::default()),
            ServedApi::OffsetForLeaderEpoch => frame(api, version, &OffsetForLeaderEpochRequest::default()),
            ServedApi::DescribeCluster => frame(api, version, &DescribeClusterRequest::default()),
            ServedApi::DescribeLogDirs => frame(api, version, &km::DescribeLogDirsRequest::default()),
            ServedApi::CreateTopics => frame(api, version, &CreateTopicsRequest::default()),
            ServedApi::CreatePartitions => frame(api, version, &CreatePartitionsRequest::default()),
            ServedApi::InitProducerId => frame(api, version, &InitProducerIdRequest::default()),
            ServedApi::FindCoordinator => frame(api, version, &km::FindCoordinatorRequest::default()),
            ServedApi::JoinGroup => frame(api, version, &km::JoinGroupRequest::default()),
            ServedApi::SyncGroup => frame(api, version, &km::SyncGroupRequest::default()),
            ServedApi::Heartbeat => frame(api, version, &km::HeartbeatRequest::default()),
            ServedApi::LeaveGroup => frame(api, version, &km::LeaveGroupRequest::default()),
            ServedApi::OffsetCommit => frame(api, version, &km::OffsetCommitRequest::default()),
            ServedApi::OffsetFetch => frame(api, version, &km::OffsetFetchRequest::default()),
            ServedApi::ListGroups => frame(api, version, &km::ListGroupsRequest::default()),
            ServedApi::DescribeGroups => frame(api, version, &km::DescribeGroupsRequest::default()),
            ServedApi::DeleteGroups => frame(api, version, &km::DeleteGroupsRequest::default()),
            ServedApi::ShareGroupDescribe => frame(api, version, &km::ShareGroupDescribeRequest::default()),
            ServedApi::DescribeShareGroupOffsets => {
                let mut buf = header(api, version);
                km::DescribeShareGroupOffsetsRequest::default()
                    .encode(&mut buf, 0)
                    .unwrap();
                buf.freeze()
            }
            ServedApi::AlterShareGroupOffsets => frame(api, version, &km::AlterShareGroupOffsetsRequest::default()),
            ServedApi::DeleteShareGroupOffsets => frame(api, version, &km::DeleteShareGroupOffsetsRequest::default()),
            ServedApi::SaslHandshake => frame(api, version, &km::SaslHandshakeRequest::default()),
            ServedApi::SaslAuthenticate => frame(api, version, &km::SaslAuthenticateRequest::default()),
            ServedApi::AddPartitionsToTxn => frame(api, version, &km::AddPartitionsToTxnRequest::default()),
            ServedApi::AddOffsetsToTxn => frame(api, version, &km::AddOffsetsToTxnRequest::default()),
            ServedApi::TxnOffsetCommit => frame(api, version, &km::TxnOffsetCommitRequest::default()),
            ServedApi::EndTxn => frame(api, version, &km::EndTxnRequest::default()),
            ServedApi::DescribeTransactions => frame(api, version, &km::DescribeTransactionsRequest::default()),
            ServedApi::ListTransactions => frame(api, version, &km::ListTransactionsRequest::default()),
            ServedApi::DescribeProducers => frame(api, version, &km::DescribeProducersRequest::default()),
            ServedApi::ElectLeaders => frame(api, version, &km::ElectLeadersRequest::default()),
            ServedApi::ConsumerGroupHeartbeat => frame(api, version, &km::ConsumerGroupHeartbeatRequest::default()),
            ServedApi::ConsumerGroupDescribe => frame(api, version, &km::ConsumerGroupDescribeRequest::default()),
            ServedApi::DescribeClusterMirrors => mirrors_frame(&DescribeClusterMirrorsRequest::default()),
        }
    }

    mod consumer_group_heartbeat_round_trip {
        use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
        use kafka_protocol::messages::{GroupId, TopicName};
        use kafka_protocol::protocol::StrBytes;
        use proptest::prelude::*;

        use super::*;

        fn text() -> impl Strategy<Value = StrBytes> {
            "[a-z0-9._-]{0,12}".prop_map(StrBytes::from_string)
        }

        prop_compose! {
            fn heartbeat()(
                group in text(),
                member in text(),
                epoch in -2i32..1000,
                instance in proptest::option::of(text()),
                rack in proptest::option::of(text()),
                rebalance_timeout_ms in -1i32..600_000,
                topics in proptest::option::of(proptest::collection::vec(text(), 0..4)),
                regex in proptest::option::of(text()),
                assignor in proptest::option::of(text()),
                owned in proptest::option::of(proptest::collection::vec(
                    (any::<u128>(), proptest::collection::vec(0i32..64, 0..5)), 0..4)),
            ) -> ConsumerGroupHeartbeatRequest {
                ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(group))
                    .with_member_id(member)
                    .with_member_epoch(epoch)
                    .with_instance_id(instance)
                    .with_rack_id(rack)
                    .with_rebalance_timeout_ms(rebalance_timeout_ms)
                    .with_subscribed_topic_names(topics.map(|ts| ts.into_iter().map(TopicName).collect()))
                    .with_subscribed_topic_regex(regex)
                    .with_server_assignor(assignor)
                    .with_topic_partitions(owned.map(|ts| {
                        ts.into_iter()
                            .map(|(id, ps)| {
                                TopicPartitions::default()
                                    .with_topic_id(uuid::Uuid::from_u128(id))
                                    .with_partitions(ps)
                            })
                            .collect()
                    }))
            }
        }

        proptest! {
            /// Every heartbeat a client can send decodes to itself, at both
            /// versions, and every cut of it is refused as malformed.
            #[test]
            fn heartbeats_decode_to_what_was_sent(request in heartbeat(), version in 0i16..=1) {
                // The regex field is v1's (KIP-848's regex subscriptions).
                let request = if version == 0 { request.with_subscribed_topic_regex(None) } else { request };
                let f = frame(ServedApi::ConsumerGroupHeartbeat, version, &request);
                let (_, decoded) = decode_request(f.clone()).unwrap();
                let Request::Group(GroupRequest::ConsumerGroupHeartbeat(decoded)) = decoded else {
                    panic!("decoded as {decoded:?}");
                };
                prop_assert_eq!(decoded, request);
                for len in REQUEST_HEADER_BYTES_MIN..f.len() {
                    let refused = matches!(decode_request(f.slice(..len)), Err(RequestError::Malformed { .. }));
                    prop_assert!(refused, "a cut to {} bytes was not refused", len);
                }
            }
        }
    }

    #[test]
    fn every_served_version_decodes_and_every_cut_of_it_is_refused() {
        for &(api, min, max) in SUPPORTED_APIS {
            for version in min..=max {
                let f = default_frame(api, version);
                let (header, _) = decode_request(f.clone()).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
                assert_eq!(
                    (
                        header.request_api_key,
                        header.request_api_version,
                        header.correlation_id
                    ),
                    (api as i16, version, 42)
                );
                for len in 0..f.len() {
                    match decode_request(f.slice(..len)) {
                        Err(RequestError::TooShort { .. }) => assert!(len < REQUEST_HEADER_BYTES_MIN),
                        Err(RequestError::Malformed { correlation_id: 42, .. }) => {}
                        other => panic!("{api:?} v{version} cut to {len} bytes: {other:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_panicking_decoder_is_an_error() {
        let err = guarded::<()>(|| panic!("index out of bounds")).unwrap_err();
        assert_eq!(err.to_string(), "the decoder panicked: index out of bounds");
        let code = 7;
        let err = guarded::<()>(|| panic!("bad tag {code}")).unwrap_err();
        assert_eq!(err.to_string(), "the decoder panicked: bad tag 7");
        assert_eq!(guarded(|| Ok(5)).unwrap(), 5);
    }

    #[test]
    fn a_truncated_body_is_malformed() {
        let f = frame(
            ServedApi::Metadata,
            4,
            &MetadataRequest::default().with_topics(Some(vec![Default::default()])),
        );
        let cut = f.slice(..f.len() - 3);
        assert!(matches!(decode_request(cut), Err(RequestError::Malformed { .. })));
    }
}
