//! SASL/PLAIN (RFC 4616): one client token, `authzid NUL authcid NUL
//! passwd`, checked as Kafka's `PlainSaslServer` checks it (exactly three
//! tokens; a non-empty authorization id must be the user name) and
//! answered with an empty token. The failure messages are Kafka's.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{AuthFailure, SaslServerConfig, Secret, ServerStep};

/// The client's one token (no authorization id, as Kafka clients send it).
pub fn client_token(username: &str, password: &Secret) -> Vec<u8> {
    let mut token = Vec::with_capacity(2 + username.len() + password.expose().len());
    token.push(0);
    token.extend_from_slice(username.as_bytes());
    token.push(0);
    token.extend_from_slice(password.expose().as_bytes());
    token
}

/// What PLAIN keeps of a password: its SHA-256.
pub fn password_digest(password: &[u8]) -> [u8; 32] {
    Sha256::digest(password).into()
}

fn failed(client_message: &str, detail: String) -> AuthFailure {
    AuthFailure {
        client_message: client_message.into(),
        detail,
    }
}

/// Checks the client's token against `config`'s users.
pub(super) fn server_step(config: &SaslServerConfig, token: &[u8]) -> Result<ServerStep, AuthFailure> {
    let parts: Vec<&[u8]> = token.split(|&b| b == 0).collect();
    let [authzid, user, password] = parts[..] else {
        let message = format!("Invalid SASL/PLAIN response: expected 3 tokens, got {}", parts.len());
        return Err(failed(&message, message.clone()));
    };
    let Ok(user) = std::str::from_utf8(user) else {
        return Err(failed(
            "Authentication failed: Invalid username or password",
            "the user name is not UTF-8".into(),
        ));
    };
    if user.is_empty() {
        return Err(failed(
            "Authentication failed: username not specified",
            "no user name".into(),
        ));
    }
    if password.is_empty() {
        return Err(failed(
            "Authentication failed: password not specified",
            format!("user {user:?}: no password"),
        ));
    }
    let Some(expected) = config.plain_digest(user) else {
        return Err(failed(
            "Authentication failed: Invalid username or password",
            format!("unknown user {user:?}"),
        ));
    };
    if !bool::from(password_digest(password).ct_eq(expected)) {
        return Err(failed(
            "Authentication failed: Invalid username or password",
            format!("user {user:?}: wrong password"),
        ));
    }
    if !authzid.is_empty() && authzid != user.as_bytes() {
        return Err(failed(
            "Authentication failed: Client requested an authorization id that is different from username",
            format!("user {user:?} asked for another authorization id"),
        ));
    }
    Ok(ServerStep::Done {
        user: user.to_owned(),
        response: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl::Mechanism;

    fn config() -> SaslServerConfig {
        SaslServerConfig::new(&[Mechanism::Plain], [("alice".to_string(), Secret::new("pw"))], 4096).unwrap()
    }

    #[test]
    fn checks_tokens_as_kafka_does() {
        let c = config();
        let step = |t: &[u8]| server_step(&c, t);
        assert_eq!(
            step(b"\0alice\0pw"),
            Ok(ServerStep::Done {
                user: "alice".into(),
                response: vec![]
            })
        );
        assert!(step(b"alice\0alice\0pw").is_ok());
        let msg = |t: &[u8]| step(t).unwrap_err().client_message;
        assert_eq!(
            msg(b"\0alice\0nope"),
            "Authentication failed: Invalid username or password"
        );
        assert_eq!(msg(b"\0bob\0pw"), "Authentication failed: Invalid username or password");
        assert_eq!(msg(b"\0\0pw"), "Authentication failed: username not specified");
        assert_eq!(msg(b"\0alice\0"), "Authentication failed: password not specified");
        assert_eq!(
            msg(b"alice\0pw"),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 2"
        );
        assert_eq!(
            msg(b"\0a\0b\0c"),
            "Invalid SASL/PLAIN response: expected 3 tokens, got 4"
        );
        assert!(msg(b"bob\0alice\0pw").contains("authorization id"));
        let detail = step(b"\0alice\0nope").unwrap_err().detail;
        assert!(detail.contains("alice") && !detail.contains("nope"), "{detail}");
    }
}
