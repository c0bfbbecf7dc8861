//! SASL authentication of a fresh connection, as Kafka's clients do it
//! (`SaslClientAuthenticator`, KIP-152): after ApiVersions, SaslHandshake
//! v1 names the mechanism, then SaslAuthenticate (the highest version both
//! sides speak, v0–v2) carries each token of the exchange. The broker's
//! error message comes back in the error; the password never does.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::ClientError;
use ringmirror_protocol::error_codes as ec;
use ringmirror_protocol::sasl::{ClientExchange, ClientStep, SaslClientConfig};

/// SCRAM takes two round trips and PLAIN one; a server asking for more is
/// not one we understand.
const MAX_ROUND_TRIPS: usize = 4;

/// Authenticates `conn` (ApiVersions done) with `sasl`.
pub(super) async fn authenticate(conn: &mut Connection, sasl: &SaslClientConfig) -> Result<(), ClientError> {
    let addr = conn.addr().to_owned();
    let failed = |reason: String| ClientError::SaslAuthentication {
        addr: addr.clone(),
        mechanism: sasl.mechanism,
        username: sasl.username.clone(),
        reason,
    };
    let password = sasl.password.read().map_err(&failed)?;
    if !conn.advertises(ApiKey::SaslHandshake as i16) {
        return Err(failed(
            "the broker does not offer SaslHandshake: it speaks no SASL".into(),
        ));
    }
    let version = conn.version_for::<SaslHandshakeRequest>(1, 1)?;
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
    let response = conn.request(&handshake, version).await?;
    match response.error_code {
        ec::NONE => {}
        ec::UNSUPPORTED_SASL_MECHANISM => {
            let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::SaslMechanism {
                addr: addr.clone(),
                mechanism: sasl.mechanism,
                enabled: if enabled.is_empty() {
                    "none".into()
                } else {
                    enabled.join(", ")
                },
            });
        }
        ec::ILLEGAL_SASL_STATE => {
            return Err(failed(
                "the broker refused the SASL handshake (ILLEGAL_SASL_STATE): its listener is not SASL (security_protocol plaintext?)".into(),
            ));
        }
        code => {
            return Err(ClientError::ErrorCode {
                addr: addr.clone(),
                api: "SaslHandshake",
                code,
            });
        }
    }
    let version = conn.version_for::<SaslAuthenticateRequest>(0, 2)?;
    let (mut exchange, mut token) =
        ClientExchange::start(sasl.mechanism, &sasl.username, &password).map_err(&failed)?;
    for _ in 0..MAX_ROUND_TRIPS {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let response = conn.request(&request, version).await?;
        if response.error_code != ec::NONE {
            let code = response.error_code;
            let name = if code == ec::SASL_AUTHENTICATION_FAILED {
                "SASL_AUTHENTICATION_FAILED".to_string()
            } else {
                format!("error code {code}")
            };
            return Err(failed(match response.error_message {
                Some(message) if !message.is_empty() => format!("{message} ({name})"),
                _ => name,
            }));
        }
        match exchange.step(&response.auth_bytes).map_err(&failed)? {
            ClientStep::Send(next) => token = next,
            ClientStep::Done => {
                tracing::debug!(
                    addr,
                    mechanism = %sasl.mechanism,
                    user = sasl.username,
                    "authenticated"
                );
                return Ok(());
            }
        }
    }
    Err(failed(format!(
        "the exchange did not end after {MAX_ROUND_TRIPS} round trips"
    )))
}
