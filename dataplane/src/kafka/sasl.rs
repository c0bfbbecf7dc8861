//! SASL on our listener, as a Kafka broker's SASL_PLAINTEXT listener does
//! it (`SaslServerAuthenticator`): until a connection has authenticated it
//! may send ApiVersions and SaslHandshake, then the tokens of the exchange
//! — in SaslAuthenticate requests after a v1 handshake (KIP-152), or raw
//! size-prefixed frames after a v0 one. Anything else closes the
//! connection, as does a failed exchange (after a SaslAuthenticate answer
//! with SASL_AUTHENTICATION_FAILED and Kafka's message) or an unsupported
//! mechanism (after the handshake's answer with UNSUPPORTED_SASL_MECHANISM
//! and the enabled list), 100 ms after the answer (Kafka's
//! `connection.failed.authentication.delay.ms`). Frames before
//! authentication are bounded by Kafka's `sasl.server.max.receive.size`
//! (512 KiB).
//!
//! A connection's principal is `User:<name>` once authenticated, and
//! `User:ANONYMOUS` on a listener without SASL, kept on the connection
//! for ACL enforcement.
//!
//! SaslHandshake and SaslAuthenticate are advertised by ApiVersions on
//! every listener, as Kafka does (its API list does not depend on the
//! listener's security protocol); where there is nothing to authenticate
//! — a listener without SASL, or a connection that already has — they are
//! answered with ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers them.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::handlers;
use super::response::Response;
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::request::{Request, RequestError, SaslRequest, ServedApi, decode_request};
use ringmirror_protocol::sasl::{ANONYMOUS_PRINCIPAL, Mechanism, SaslServerConfig, ServerExchange, ServerStep};

/// The largest frame a connection may send before it has authenticated
/// (Kafka's `sasl.server.max.receive.size` default).
pub const MAX_UNAUTHENTICATED_REQUEST_BYTES: usize = 512 * 1024;

/// How long a connection that failed to authenticate stays open after its
/// answer (Kafka's `connection.failed.authentication.delay.ms` default),
/// so that clients read the error rather than a closed connection.
pub const FAILED_AUTHENTICATION_CLOSE_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

enum State {
    /// Authenticated, or a listener without SASL: every request is served.
    Open,
    /// Waiting for SaslHandshake (ApiVersions may come first).
    Handshake,
    /// After SaslHandshake v1: SaslAuthenticate requests carry the tokens.
    Framed(ServerExchange),
    /// After SaslHandshake v0: the next frames are raw tokens.
    Raw(ServerExchange),
}

/// A connection's authentication: its principal and where its exchange is.
pub struct ConnectionAuth {
    principal: String,
    state: State,
}

impl ConnectionAuth {
    /// A connection to a listener with `sasl` (or without SASL).
    pub fn new(sasl: Option<&Arc<SaslServerConfig>>) -> Self {
        Self {
            principal: ANONYMOUS_PRINCIPAL.into(),
            state: if sasl.is_some() { State::Handshake } else { State::Open },
        }
    }

    /// `User:<name>` once authenticated; `User:ANONYMOUS` without SASL
    /// (and before authentication).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// Whether every request is served (authenticated, or no SASL).
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open)
    }

    /// Whether the next frame is a raw token (after SaslHandshake v0).
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.state, State::Raw(_))
    }
}

/// Why a connection is closed before it authenticated (for the log).
pub type Close = String;

/// The answer to one frame before authentication (possibly none), and
/// whether the connection goes on after it (`Err`: it is closed once the
/// answer is sent).
pub(super) type Step = (Response, Result<(), Close>);

/// Takes one frame of a connection that has not authenticated yet.
pub(super) async fn before_authentication(conn: &mut ClientConnection, frame: Bytes) -> Step {
    if conn.auth.expects_raw_token() {
        return raw_token(conn, &frame);
    }
    let (header, request) = match decode_request(frame) {
        Ok(decoded) => decoded,
        Err(RequestError::UnsupportedVersion {
            api: ServedApi::ApiVersions,
            correlation_id,
            ..
        }) => return (handlers::unsupported_api_versions(correlation_id), Ok(())),
        Err(e) => return (Response::None, Err(format!("before SASL authentication: {e}"))),
    };
    let api = header.request_api_key;
    match (request, &conn.auth.state) {
        (request @ Request::ApiVersions(_), State::Handshake) => {
            (handlers::handle(conn, header, request).await, Ok(()))
        }
        (Request::Sasl(SaslRequest::Handshake(r)), State::Handshake) => handshake(conn, &header, &r),
        (Request::Sasl(SaslRequest::Authenticate(r)), State::Framed(_)) => authenticate(conn, &header, &r),
        _ => (
            Response::None,
            Err(format!("unexpected request (API key {api}) during SASL authentication")),
        ),
    }
}

fn handshake(conn: &mut ClientConnection, header: &RequestHeader, r: &SaslHandshakeRequest) -> Step {
    let Some(config) = conn.settings.sasl.clone() else {
        return (Response::None, Err("SASL state without SASL settings".into()));
    };
    let version = header.request_api_version;
    // Kafka compares names exactly (`sasl.enabled.mechanisms` contains it).
    let chosen = Mechanism::ALL.into_iter().find(|m| m.name() == r.mechanism.as_str());
    let exchange = chosen.and_then(|m| config.start(m));
    let body = SaslHandshakeResponse::default()
        .with_error_code(if exchange.is_some() {
            ec::NONE
        } else {
            ec::UNSUPPORTED_SASL_MECHANISM
        })
        .with_mechanisms(
            config
                .mechanisms()
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect(),
        );
    let response = Response::kafka(ApiKey::SaslHandshake, version, header.correlation_id, &body);
    let Some(exchange) = exchange else {
        let close = format!(
            "the client asked for SASL mechanism {:?}, which is not enabled",
            r.mechanism.as_str()
        );
        return (response, Err(close));
    };
    conn.auth.state = if version == 0 {
        State::Raw(exchange)
    } else {
        State::Framed(exchange)
    };
    (response, Ok(()))
}

/// One step of the exchange: `Ok(Some(token))` to send, having recorded
/// the principal if that was the last one; `Err` on failure (the client's
/// message, and ours for the log).
fn step(conn: &mut ClientConnection, token: &[u8]) -> Result<Vec<u8>, (String, Close)> {
    let (State::Framed(exchange) | State::Raw(exchange)) = &mut conn.auth.state else {
        return Err(("Unexpected SASL token".into(), "a token outside an exchange".into()));
    };
    let mechanism = exchange.mechanism();
    match exchange.step(token) {
        Ok(ServerStep::Continue(challenge)) => Ok(challenge),
        Ok(ServerStep::Done { user, response }) => {
            conn.auth.principal = format!("User:{user}");
            conn.auth.state = State::Open;
            tracing::debug!(
                peer = conn.peer_host(),
                principal = conn.auth.principal,
                %mechanism,
                "authenticated"
            );
            Ok(response)
        }
        Err(failure) => Err((
            failure.client_message,
            format!("SASL {mechanism} authentication failed: {}", failure.detail),
        )),
    }
}

fn authenticate(conn: &mut ClientConnection, header: &RequestHeader, r: &SaslAuthenticateRequest) -> Step {
    let version = header.request_api_version;
    let (body, next) = match step(conn, &r.auth_bytes) {
        Ok(token) => (
            SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(token)),
            Ok(()),
        ),
        Err((message, close)) => (
            SaslAuthenticateResponse::default()
                .with_error_code(ec::SASL_AUTHENTICATION_FAILED)
                .with_error_message(Some(StrBytes::from_string(message))),
            Err(close),
        ),
    };
    // Session lifetime 0: no re-authentication (KIP-368) is asked for.
    let response = Response::kafka(ApiKey::SaslAuthenticate, version, header.correlation_id, &body);
    (response, next)
}

/// A raw token after SaslHandshake v0: answered with a raw frame, or the
/// connection closes (v0 has no way to say why).
fn raw_token(conn: &mut ClientConnection, token: &[u8]) -> Step {
    match step(conn, token) {
        Ok(response) => (Response::RawToken(response), Ok(())),
        Err((_, close)) => (Response::None, Err(close)),
    }
}

/// SaslHandshake or SaslAuthenticate where there is nothing to
/// authenticate (a listener without SASL, or done already): answered with
/// ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers them.
pub(super) fn after_authentication(header: &RequestHeader, request: SaslRequest) -> Response {
    let version = header.request_api_version;
    let id = header.correlation_id;
    match request {
        SaslRequest::Handshake(_) => {
            let body = SaslHandshakeResponse::default().with_error_code(ec::ILLEGAL_SASL_STATE);
            Response::kafka(ApiKey::SaslHandshake, version, id, &body)
        }
        SaslRequest::Authenticate(_) => {
            let body = SaslAuthenticateResponse::default()
                .with_error_code(ec::ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate request received after successful authentication",
                )));
            Response::kafka(ApiKey::SaslAuthenticate, version, id, &body)
        }
    }
}
