//! One Kafka connection: TLS (see [`super::tls`]), framing, correlation
//! ids, ApiVersions negotiation, SASL authentication (see [`super::sasl`]), whole-frame requests for small messages (typed by `kafka-protocol`, or
//! encoded by hand for the APIs it does not know), and streaming access to
//! the receive buffer for Fetch responses.
//!
//! One request is in flight at a time; a connection belongs to one task on
//! one shard and is never shared.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::error::ClientError;
use super::tls::{self, TlsClientConfig};
use crate::transport::Transport;
use ringmirror_protocol::sasl::SaslClientConfig;

/// Receive buffer for everything but record bytes: response headers and
/// small responses. Sized to hold a typical Metadata response in one read.
const RECV_BUFFER_BYTES: usize = 64 * 1024;
/// Header versions of the APIs `kafka-protocol` does not know: all of them
/// are flexible (every API added since KIP-482 is).
const FLEXIBLE_REQUEST_HEADER_VERSION: i16 = 2;
const FLEXIBLE_RESPONSE_HEADER_VERSION: i16 = 1;

#[derive(Debug, Clone)]
pub struct ConnectionOptions {
    pub client_id: String,
    pub connect_timeout: Duration,
    /// Bound on any socket read or write: a silent broker cannot hang us.
    pub io_timeout: Duration,
    /// The largest response frame accepted.
    pub max_response_bytes: usize,
    /// SASL authentication after ApiVersions (`None`: none).
    pub sasl: Option<SaslClientConfig>,
    /// TLS from the first byte (`None`: in clear).
    pub tls: Option<TlsClientConfig>,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            client_id: "ringmirror".into(),
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            max_response_bytes: 256 * 1024 * 1024,
            sasl: None,
            tls: None,
        }
    }
}

pub struct Connection {
    addr: String,
    stream: Transport,
    options: ConnectionOptions,
    next_correlation_id: i32,
    /// Broker's supported version range per API key.
    versions: HashMap<i16, (i16, i16)>,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    tx: BytesMut,
}

fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Fetch) => "Fetch",
        Ok(ApiKey::Metadata) => "Metadata",
        Ok(ApiKey::ListOffsets) => "ListOffsets",
        Ok(ApiKey::OffsetForLeaderEpoch) => "OffsetForLeaderEpoch",
        Ok(ApiKey::ApiVersions) => "ApiVersions",
        Ok(ApiKey::Produce) => "Produce",
        Ok(ApiKey::SaslHandshake) => "SaslHandshake",
        Ok(ApiKey::SaslAuthenticate) => "SaslAuthenticate",
        _ => "request",
    }
}

/// The error of the first exchange on a new connection, made clear where
/// it is a TLS alert the server sent after the handshake: under TLS 1.3 a
/// server checks the client's certificate after the client considers the
/// handshake done, so a server that requires one (Kafka's
/// `ssl.client.auth=required`) and got none, or refused ours, answers our
/// first request with an alert (Kafka: `bad_certificate`).
fn explain_tls_refusal(source: std::io::Error, options: &ConnectionOptions) -> std::io::Error {
    use rustls::AlertDescription as Alert;
    let Some(tls) = &options.tls else {
        return source;
    };
    let alert = match source.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(
            alert @ (Alert::BadCertificate
            | Alert::CertificateRequired
            | Alert::CertificateUnknown
            | Alert::UnknownCA
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::CertificateRevoked),
        )) => *alert,
        _ => return source,
    };
    let why = if tls.client_cert.is_some() {
        "the source refused our client certificate (ssl_certificate_location)"
    } else {
        "the source requires a client certificate: set ssl_certificate_location and ssl_key_location"
    };
    std::io::Error::new(
        source.kind(),
        format!("TLS handshake refused, received fatal alert {alert:?}: {why}"),
    )
}

impl Connection {
    /// Connects to `addr`, negotiates API versions and, configured so,
    /// authenticates (SASL).
    pub async fn connect(addr: &str, options: ConnectionOptions) -> Result<Self, ClientError> {
        // Kafka clients fall back to ApiVersions v0-2 when a broker cannot
        // answer v3 (the librdkafka mock cluster sends a malformed v3 reply).
        let mut last_error = None;
        for version in [3, 2, 0] {
            let mut conn = Self::open(addr, options.clone()).await?;
            match conn.negotiate(version).await {
                Ok(()) => {
                    if let Some(sasl) = &options.sasl {
                        super::sasl::authenticate(&mut conn, sasl).await?;
                    }
                    return Ok(conn);
                }
                Err(ClientError::Io { addr, op, source }) => {
                    return Err(ClientError::Io {
                        source: explain_tls_refusal(source, &options),
                        addr,
                        op,
                    });
                }
                Err(e) => {
                    tracing::debug!(addr, version, error = %e, "ApiVersions failed; trying an older version");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.expect("tried at least once"))
    }

    async fn open(addr: &str, options: ConnectionOptions) -> Result<Self, ClientError> {
        let resolved: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|source| ClientError::Io {
                addr: addr.into(),
                op: "resolve",
                source,
            })?
            .next()
            .ok_or_else(|| ClientError::Resolve { addr: addr.into() })?;
        let io = |op| {
            move |source| ClientError::Io {
                addr: addr.into(),
                op,
                source,
            }
        };
        let stream = TcpStream::connect_timeout(resolved, options.connect_timeout)
            .await
            .map_err(|e| io("connect")(e.into()))?;
        stream.set_nodelay(true).map_err(|e| io("set nodelay")(e.into()))?;
        stream
            .set_read_timeout(Some(options.io_timeout))
            .map_err(|e| io("set read timeout")(e.into()))?;
        stream
            .set_write_timeout(Some(options.io_timeout))
            .map_err(|e| io("set write timeout")(e.into()))?;
        let stream = match &options.tls {
            None => Transport::Plain(stream),
            Some(config) => {
                let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let tls = tls::handshake(config, host, stream)
                    .await
                    .map_err(io("TLS handshake"))?;
                Transport::Tls(Box::new(futures_rustls::TlsStream::Client(tls)))
            }
        };
        Ok(Self {
            addr: addr.into(),
            stream,
            options,
            next_correlation_id: 1,
            versions: HashMap::new(),
            rx: vec![0; RECV_BUFFER_BYTES],
            rx_start: 0,
            rx_end: 0,
            tx: BytesMut::with_capacity(4096),
        })
    }

    async fn negotiate(&mut self, version: i16) -> Result<(), ClientError> {
        let mut request = ApiVersionsRequest::default();
        if version >= 3 {
            request.client_software_name = StrBytes::from_static_str("ringmirror");
            request.client_software_version = StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
        }
        let response = self.request(&request, version).await?;
        if response.error_code != 0 {
            return Err(ClientError::ErrorCode {
                addr: self.addr.clone(),
                api: "ApiVersions",
                code: response.error_code,
            });
        }
        self.versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The options this connection was made with (for more connections
    /// to the same cluster: same client id, timeouts and credentials).
    pub fn options(&self) -> &ConnectionOptions {
        &self.options
    }

    fn io_error(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> ClientError + use<> {
        let addr = self.addr.clone();
        move |source| ClientError::Io { addr, op, source }
    }

    /// The highest version of `R` both sides speak within `ours`.
    pub fn version_for<R: Request>(&self, ours_min: i16, ours_max: i16) -> Result<i16, ClientError> {
        self.version_for_key(R::KEY, api_name(R::KEY), ours_min, ours_max)
    }

    /// The highest version of the API `api_key` (named `api` in errors)
    /// both sides speak within `ours`.
    pub fn version_for_key(
        &self,
        api_key: i16,
        api: &'static str,
        ours_min: i16,
        ours_max: i16,
    ) -> Result<i16, ClientError> {
        let (min, max) = self.versions.get(&api_key).copied().unwrap_or((0, -1));
        let version = ours_max.min(max);
        if version < ours_min.max(min) {
            return Err(ClientError::NoCommonVersion {
                addr: self.addr.clone(),
                api,
                ours_min,
                ours_max,
            });
        }
        Ok(version)
    }

    /// Whether the broker's ApiVersions answer listed the API `api_key`.
    pub fn advertises(&self, api_key: i16) -> bool {
        self.versions.contains_key(&api_key)
    }

    /// Sends one request and returns its correlation id.
    pub async fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<i32, ClientError> {
        self.send_frame(R::KEY, api_name(R::KEY), version, R::header_version(version), |buf| {
            request.encode(buf, version).map_err(|e| e.to_string())
        })
        .await
    }

    /// Sends one request whose body `encode` writes, after a header at
    /// `header_version`; returns its correlation id.
    async fn send_frame(
        &mut self,
        api_key: i16,
        api: &'static str,
        version: i16,
        header_version: i16,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);
        let mut header = RequestHeader::default();
        header.request_api_key = api_key;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        header.client_id = Some(StrBytes::from_string(self.options.client_id.clone()));
        let encode_err = |reason: String| ClientError::Encode {
            addr: self.addr.clone(),
            api,
            version,
            reason,
        };
        self.tx.clear();
        self.tx.extend_from_slice(&[0; 4]);
        header
            .encode(&mut self.tx, header_version)
            .map_err(|e| encode_err(e.to_string()))?;
        encode(&mut self.tx).map_err(encode_err)?;
        let len = (self.tx.len() - 4) as i32;
        self.tx[..4].copy_from_slice(&len.to_be_bytes());
        let addr = &self.addr;
        let sent = match self.stream.write_all(&self.tx).await {
            // TLS holds written bytes until flushed.
            Ok(()) => self.stream.flush().await,
            Err(e) => Err(e),
        };
        sent.map_err(|source| ClientError::Io {
            addr: addr.clone(),
            op: "send",
            source,
        })?;
        Ok(correlation_id)
    }

    /// Sends `request` and decodes the whole response frame.
    pub async fn request<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, ClientError> {
        let correlation_id = self.send(request, version).await?;
        let mut buf = self
            .receive_response(
                correlation_id,
                api_name(R::KEY),
                version,
                R::Response::header_version(version),
            )
            .await?;
        let response = R::Response::decode(&mut buf, version).map_err(|e| ClientError::Decode {
            addr: self.addr.clone(),
            api: api_name(R::KEY),
            version,
            reason: e.to_string(),
        })?;
        if !buf.is_empty() {
            // As Kafka's Java client does: fields we do not know are not an
            // error (the librdkafka mock sends a stray byte after Metadata v12).
            tracing::debug!(
                addr = self.addr,
                api = api_name(R::KEY),
                version,
                left_over = buf.len(),
                "ignoring trailing bytes"
            );
        }
        Ok(response)
    }

    /// Sends a request to an API `kafka-protocol` does not know (`api_key`,
    /// named `api` in errors), whose body `encode` writes, and returns the
    /// body of the response for the caller's own decoder.
    pub async fn request_encoded(
        &mut self,
        api_key: i16,
        api: &'static str,
        version: i16,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<Bytes, ClientError> {
        let correlation_id = self
            .send_frame(api_key, api, version, FLEXIBLE_REQUEST_HEADER_VERSION, encode)
            .await?;
        self.receive_response(correlation_id, api, version, FLEXIBLE_RESPONSE_HEADER_VERSION)
            .await
    }

    /// Reads the next response frame whole and returns its body, after
    /// checking that its header (at `header_version`) answers
    /// `correlation_id`.
    async fn receive_response(
        &mut self,
        correlation_id: i32,
        api: &'static str,
        version: i16,
        header_version: i16,
    ) -> Result<Bytes, ClientError> {
        let frame_len = self.read_frame_len().await?;
        let mut frame = vec![0u8; frame_len];
        self.read_exact_into(&mut frame).await?;
        let mut buf = Bytes::from(frame);
        let header = ResponseHeader::decode(&mut buf, header_version).map_err(|e| ClientError::Decode {
            addr: self.addr.clone(),
            api,
            version,
            reason: e.to_string(),
        })?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                addr: self.addr.clone(),
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        Ok(buf)
    }

    /// Reads the 4-byte size prefix of the next response frame.
    pub async fn read_frame_len(&mut self) -> Result<usize, ClientError> {
        let mut len = [0u8; 4];
        self.read_exact_into(&mut len).await?;
        let len = i32::from_be_bytes(len);
        let limit = self.options.max_response_bytes;
        usize::try_from(len)
            .ok()
            .filter(|&l| l <= limit)
            .ok_or(ClientError::FrameTooLarge {
                addr: self.addr.clone(),
                len: len.max(0) as usize,
                limit,
            })
    }

    /// Bytes received but not yet consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.rx[self.rx_start..self.rx_end]
    }

    /// Marks `n` buffered bytes as consumed.
    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.rx_end - self.rx_start, "consumed more than was buffered");
        self.rx_start += n;
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        }
    }

    /// Receives more bytes into the buffer, at most `limit` more (so a
    /// read never runs past the current frame). Returns how many arrived.
    pub async fn fill(&mut self, limit: usize) -> Result<usize, ClientError> {
        if self.rx_start > 0 && self.rx_end == self.rx.len() {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        let room = (self.rx.len() - self.rx_end).min(limit);
        if room == 0 {
            return Ok(0);
        }
        let error = self.io_error("receive");
        let n = self
            .stream
            .read(&mut self.rx[self.rx_end..self.rx_end + room])
            .await
            .map_err(error)?;
        if n == 0 {
            return Err(self.io_error("receive")(std::io::ErrorKind::UnexpectedEof.into()));
        }
        self.rx_end += n;
        Ok(n)
    }

    /// Fills `dst` with the next bytes of the stream: first what is
    /// buffered, then straight from the socket into `dst` (no extra copy).
    pub async fn read_exact_into(&mut self, dst: &mut [u8]) -> Result<(), ClientError> {
        let from_buffer = dst.len().min(self.rx_end - self.rx_start);
        dst[..from_buffer].copy_from_slice(&self.rx[self.rx_start..self.rx_start + from_buffer]);
        self.consume(from_buffer);
        if from_buffer < dst.len() {
            let error = self.io_error("receive");
            self.stream.read_exact(&mut dst[from_buffer..]).await.map_err(error)?;
        }
        Ok(())
    }

    /// Discards the next `n` bytes of the stream.
    pub async fn skip(&mut self, mut n: usize) -> Result<(), ClientError> {
        while n > 0 {
            if self.buffered().is_empty() {
                self.fill(n).await?;
            }
            let take = n.min(self.buffered().len());
            self.consume(take);
            n -= take;
        }
        Ok(())
    }
}
