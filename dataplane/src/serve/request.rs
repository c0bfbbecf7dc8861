//! Requests as they arrive: the frame's header, checked against the APIs
//! and versions we serve, and the body decoded with the `kafka-protocol`
//! schemas. Anything we cannot take comes back as a [`RequestError`] that
//! says what was wrong and whether the client gets an answer (an
//! ApiVersions request at a version we do not speak) or the connection is
//! closed (what Kafka brokers do for the rest).

use std::panic::AssertUnwindSafe;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreateTopicsRequest, DescribeAclsRequest, DescribeClusterRequest,
    DescribeConfigsRequest, FetchRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader,
};
use kafka_protocol::protocol::Decodable;

use super::groups::api::GroupRequest;

/// The APIs we serve and the versions of each (what ApiVersions advertises).
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 9),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::FindCoordinator, 0, 5),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
];

/// The smallest frame that can hold a request header (key, version,
/// correlation id, null client id).
pub const REQUEST_HEADER_BYTES_MIN: usize = 10;

/// The versions of `api` we serve.
pub fn supported_versions(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|&(_, min, max)| (min, max))
}

#[derive(Debug)]
pub enum Request {
    ApiVersions(ApiVersionsRequest),
    Metadata(MetadataRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    DescribeCluster(DescribeClusterRequest),
    DescribeConfigs(DescribeConfigsRequest),
    DescribeAcls(DescribeAclsRequest),
    Produce(ProduceRequest),
    CreateTopics(CreateTopicsRequest),
    InitProducerId(InitProducerIdRequest),
    /// The group coordinator's APIs.
    Group(GroupRequest),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("request of {len} bytes is shorter than a request header")]
    TooShort { len: usize },
    #[error("unknown API key {api_key}")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("{api:?} v{version} is not served (we serve v{min}-v{max})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
        correlation_id: i32,
    },
    #[error("{api:?} is not served")]
    UnsupportedApi { api: ApiKey, correlation_id: i32 },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
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
    let api = ApiKey::try_from(api_key).map_err(|()| RequestError::UnknownApi {
        api_key,
        correlation_id,
    })?;
    let (min, max) = supported_versions(api).ok_or(RequestError::UnsupportedApi { api, correlation_id })?;
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
    let body = &mut body;
    let request = match api {
        ApiKey::ApiVersions => Request::ApiVersions(decode(body, version).map_err(malformed)?),
        ApiKey::Metadata => Request::Metadata(decode(body, version).map_err(malformed)?),
        ApiKey::Fetch => Request::Fetch(decode(body, version).map_err(malformed)?),
        ApiKey::ListOffsets => Request::ListOffsets(decode(body, version).map_err(malformed)?),
        ApiKey::OffsetForLeaderEpoch => Request::OffsetForLeaderEpoch(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeCluster => Request::DescribeCluster(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeConfigs => Request::DescribeConfigs(decode(body, version).map_err(malformed)?),
        ApiKey::DescribeAcls => Request::DescribeAcls(decode(body, version).map_err(malformed)?),
        ApiKey::Produce => Request::Produce(decode(body, version).map_err(malformed)?),
        ApiKey::CreateTopics => Request::CreateTopics(decode(body, version).map_err(malformed)?),
        ApiKey::InitProducerId => Request::InitProducerId(decode(body, version).map_err(malformed)?),
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
        _ => return Err(RequestError::UnsupportedApi { api, correlation_id }),
    };
    Ok((header, request))
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn frame<T: Encodable>(api: ApiKey, version: i16, body: &T) -> Bytes {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")))
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_every_supported_version_of_metadata() {
        for version in 1..=12 {
            let (header, request) =
                decode_request(frame(ApiKey::Metadata, version, &MetadataRequest::default())).unwrap();
            assert_eq!(header.correlation_id, 42);
            assert!(matches!(request, Request::Metadata(_)));
        }
    }

    #[test]
    fn refuses_what_we_do_not_serve() {
        let f = frame(ApiKey::Fetch, 17, &FetchRequest::default());
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
    }

    /// A request of a served kind with kafka-protocol's defaults.
    fn default_frame(api: ApiKey, version: i16) -> Bytes {
        use kafka_protocol::messages as km;
        match api {
            ApiKey::Produce => frame(api, version, &ProduceRequest::default()),
            ApiKey::Fetch => frame(api, version, &FetchRequest::default()),
            ApiKey::ListOffsets => frame(api, version, &ListOffsetsRequest::default()),
            ApiKey::Metadata => frame(api, version, &MetadataRequest::default()),
            ApiKey::DescribeConfigs => frame(api, version, &DescribeConfigsRequest::default()),
            ApiKey::DescribeAcls => frame(api, version, &DescribeAclsRequest::default()),
            ApiKey::ApiVersions => frame(api, version, &ApiVersionsRequest::default()),
            ApiKey::OffsetForLeaderEpoch => frame(api, version, &OffsetForLeaderEpochRequest::default()),
            ApiKey::DescribeCluster => frame(api, version, &DescribeClusterRequest::default()),
            ApiKey::CreateTopics => frame(api, version, &CreateTopicsRequest::default()),
            ApiKey::InitProducerId => frame(api, version, &InitProducerIdRequest::default()),
            ApiKey::FindCoordinator => frame(api, version, &km::FindCoordinatorRequest::default()),
            ApiKey::JoinGroup => frame(api, version, &km::JoinGroupRequest::default()),
            ApiKey::SyncGroup => frame(api, version, &km::SyncGroupRequest::default()),
            ApiKey::Heartbeat => frame(api, version, &km::HeartbeatRequest::default()),
            ApiKey::LeaveGroup => frame(api, version, &km::LeaveGroupRequest::default()),
            ApiKey::OffsetCommit => frame(api, version, &km::OffsetCommitRequest::default()),
            ApiKey::OffsetFetch => frame(api, version, &km::OffsetFetchRequest::default()),
            ApiKey::ListGroups => frame(api, version, &km::ListGroupsRequest::default()),
            ApiKey::DescribeGroups => frame(api, version, &km::DescribeGroupsRequest::default()),
            ApiKey::DeleteGroups => frame(api, version, &km::DeleteGroupsRequest::default()),
            _ => unreachable!("{api:?} is not served"),
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
            ApiKey::Metadata,
            4,
            &MetadataRequest::default().with_topics(Some(vec![Default::default()])),
        );
        let cut = f.slice(..f.len() - 3);
        assert!(matches!(decode_request(cut), Err(RequestError::Malformed { .. })));
    }
}
