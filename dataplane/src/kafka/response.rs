//! What a handler answers: a [`Response`] the session writes to the
//! socket, in request order. Handlers never write; building the answer
//! (and encoding it) is theirs, sending it is the session's
//! (`listener.rs`).
//!
//! A response is an encoded frame (size, header, body), except a Fetch
//! response, which carries the file ranges its records are sent from
//! (sendfile, no copy through user space), and a raw SASL token.

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use ringmirror_protocol::request::ServedApi;
use ringmirror_protocol::wire::EncodedFetchResponse;

/// A handler's answer to one request.
pub enum Response {
    /// A whole response frame: the size prefix, the header and the body.
    Frame(BytesMut),
    /// A Fetch response: its encoded fields, and the segment file ranges
    /// whose records go between them.
    Fetch(EncodedFetchResponse),
    /// A raw SASL token (after a v0 SaslHandshake): its size, then its
    /// bytes.
    RawToken(Vec<u8>),
    /// No answer at all (Produce with acks=0).
    None,
    /// Our own response failed to encode: a bug, logged where it was
    /// found; the client is disconnected rather than sent a broken frame.
    Unencodable(String),
}

impl Response {
    /// A response encoded by kafka-protocol, at the request's `version`.
    pub fn kafka<T: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &T) -> Self {
        let frame = response_frame(api.response_header_version(version), correlation_id, |buf| {
            body.encode(buf, version).map_err(|e| e.to_string())
        });
        Self::framed(frame, &api, version)
    }

    /// A response whose body `encode` writes: for the APIs kafka-protocol
    /// does not know, or not wholly, encoded by hand (see
    /// `ringmirror_protocol::wire`).
    pub fn encoded(
        api: ServedApi,
        version: i16,
        correlation_id: i32,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Self {
        let frame = response_frame(api.response_header_version(version), correlation_id, encode);
        Self::framed(frame, &api, version)
    }

    fn framed(frame: Result<BytesMut, String>, api: &dyn std::fmt::Debug, version: i16) -> Self {
        match frame {
            Ok(frame) => Self::Frame(frame),
            Err(e) => {
                tracing::error!(?api, version, error = %e, "cannot encode response");
                Self::Unencodable(e)
            }
        }
    }
}

/// A response frame: the size prefix, the header at `header_version`, and
/// the body `encode` writes.
fn response_frame(
    header_version: i16,
    correlation_id: i32,
    encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
) -> Result<BytesMut, String> {
    let mut buf = BytesMut::with_capacity(128);
    buf.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .map_err(|e| e.to_string())?;
    encode(&mut buf)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf)
}
