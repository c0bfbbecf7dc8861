//! Requests as they arrive: the frame's header, checked against the APIs
//! and versions we serve, and the body decoded with the `kafka-protocol`
//! schemas. Anything we cannot take comes back as a [`RequestError`] that
//! says what was wrong and whether the client gets an answer (an
//! ApiVersions request at a version we do not speak) or the connection is
//! closed (what Kafka brokers do for the rest).

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DescribeAclsRequest, DescribeClusterRequest, DescribeConfigsRequest, FetchRequest,
    ListOffsetsRequest, MetadataRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader,
};
use kafka_protocol::protocol::Decodable;

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
    T::decode(body, version)
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
    let header = RequestHeader::decode(&mut body, api.request_header_version(version)).map_err(malformed)?;
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
