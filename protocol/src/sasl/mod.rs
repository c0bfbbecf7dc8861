//! SASL authentication, both sides, as Kafka speaks it: the mechanisms
//! PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677), with the
//! messages Kafka's `ScramSaslClient`/`ScramSaslServer` and
//! `PlainSaslServer` exchange, carried by SaslHandshake and SaslAuthenticate
//! (KIP-43, KIP-152).
//!
//! * [`ClientExchange`] — our side of an exchange with a source broker
//!   (see `client::Connection`, which frames it).
//! * [`SaslServerConfig`] and [`ServerExchange`] — the listener's users
//!   (SCRAM credentials derived once at start: random salt, 4096
//!   iterations, as Kafka's defaults) and one connection's exchange (see
//!   `kafka::sasl`, which frames it).
//! * [`Secret`] — a password that prints as `***` in every `Debug` and
//!   `Display`, so that no log line or error carries it.
//!
//! Every message from the network is parsed without panicking: a
//! malformed one is an error (see the property tests in [`scram`]).

pub mod plain;
pub mod scram;

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What a redacted secret shows.
pub const REDACTED: &str = "***";

/// The principal of a connection that did not authenticate (Kafka's
/// `KafkaPrincipal.ANONYMOUS`).
pub const ANONYMOUS_PRINCIPAL: &str = "User:ANONYMOUS";

/// A SASL mechanism we speak, named as Kafka names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [Mechanism::Plain, Mechanism::ScramSha256, Mechanism::ScramSha512];

    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (case-insensitive, as Kafka clients'
    /// `sasl.mechanism` values are usually written upper case).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name().eq_ignore_ascii_case(name))
    }

    /// The SCRAM hash of a SCRAM mechanism.
    pub fn scram_hash(self) -> Option<scram::Hash> {
        match self {
            Self::Plain => None,
            Self::ScramSha256 => Some(scram::Hash::Sha256),
            Self::ScramSha512 => Some(scram::Hash::Sha512),
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mechanism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::from_name(s)
            .ok_or_else(|| format!("unknown SASL mechanism {s:?} (supported: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"))
    }
}

/// A secret (a password): `Debug` and `Display` show [`REDACTED`], so it
/// never reaches a log line or an error message by accident. Serialized
/// in clear — for the agent's own state and the request that sets it;
/// API answers carry a redacted copy.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself: only where it is used (hashed, or sent to the
    /// broker), never formatted.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The placeholder API answers show instead of a secret.
    pub fn redacted() -> Self {
        Self(REDACTED.into())
    }

    /// Whether this is the placeholder (a definition read back from the
    /// API and sent again keeps the stored secret).
    pub fn is_redacted(&self) -> bool {
        self.0 == REDACTED
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Where a client's password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Password {
    Inline(Secret),
    /// Read at each connect (so a rotated password is picked up); one
    /// trailing line break is dropped.
    File(PathBuf),
}

impl Password {
    pub fn read(&self) -> Result<Secret, String> {
        match self {
            Self::Inline(secret) => Ok(secret.clone()),
            Self::File(path) => read_password_file(path),
        }
    }
}

/// The password in `path`: its text without one trailing line break.
pub fn read_password_file(path: &std::path::Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the SASL password file {}: {e}", path.display()))?;
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(format!("the SASL password file {} is empty", path.display()));
    }
    Ok(Secret::new(password))
}

/// How we authenticate to a broker (a mirror's source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslClientConfig {
    pub mechanism: Mechanism,
    pub username: String,
    pub password: Password,
}

/// What the client sends next.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientStep {
    /// Another token for the server.
    Send(Vec<u8>),
    /// The exchange is complete and the server is verified (SCRAM).
    Done,
}

/// Our side of one authentication exchange with a broker.
pub enum ClientExchange {
    Plain(Option<Vec<u8>>),
    Scram(scram::ScramClient),
}

impl ClientExchange {
    /// Starts an exchange for `username` with `password`; returns it and
    /// the first token to send.
    pub fn start(mechanism: Mechanism, username: &str, password: &Secret) -> Result<(Self, Vec<u8>), String> {
        match mechanism.scram_hash() {
            None => Ok((Self::Plain(None), plain::client_token(username, password))),
            Some(hash) => {
                let client = scram::ScramClient::new(hash, username, password.clone())?;
                let first = client.client_first();
                Ok((Self::Scram(client), first))
            }
        }
    }

    /// Takes the server's answer to our last token.
    pub fn step(&mut self, server: &[u8]) -> Result<ClientStep, String> {
        match self {
            // PLAIN's one token is answered with nothing (Kafka sends an
            // empty token); success is the answer's error code.
            Self::Plain(_) => Ok(ClientStep::Done),
            Self::Scram(client) => client.step(server),
        }
    }
}

/// Credentials of one listener user.
struct UserCredentials {
    /// SHA-256 of the password, for PLAIN (compared in constant time).
    plain: Option<[u8; 32]>,
    scram_sha256: Option<scram::ScramCredential>,
    scram_sha512: Option<scram::ScramCredential>,
}

/// The listener's SASL settings: the enabled mechanisms and the users'
/// credentials (only what each enabled mechanism needs: a password hash
/// for PLAIN, SCRAM's salted keys for SCRAM). Its `Debug` names the
/// mechanisms and users, never a credential.
pub struct SaslServerConfig {
    mechanisms: Vec<Mechanism>,
    users: HashMap<String, UserCredentials>,
}

impl fmt::Debug for SaslServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut users: Vec<&String> = self.users.keys().collect();
        users.sort();
        f.debug_struct("SaslServerConfig")
            .field("mechanisms", &self.mechanisms)
            .field("users", &users)
            .finish()
    }
}

impl SaslServerConfig {
    /// Derives the credentials of `users` (name, password) for
    /// `mechanisms`; SCRAM with a random salt per user and mechanism and
    /// `iterations` (Kafka's default: [`scram::DEFAULT_ITERATIONS`]).
    pub fn new(
        mechanisms: &[Mechanism],
        users: impl IntoIterator<Item = (String, Secret)>,
        iterations: u32,
    ) -> Result<Self, String> {
        if mechanisms.is_empty() {
            return Err("no SASL mechanism enabled".into());
        }
        let mut enabled: Vec<Mechanism> = Vec::new();
        for m in mechanisms {
            if !enabled.contains(m) {
                enabled.push(*m);
            }
        }
        let derive = |m: Mechanism, password: &Secret| -> Result<Option<scram::ScramCredential>, String> {
            match m.scram_hash() {
                Some(hash) if enabled.contains(&m) => {
                    scram::ScramCredential::generate(hash, password.expose().as_bytes(), iterations).map(Some)
                }
                _ => Ok(None),
            }
        };
        let mut map = HashMap::new();
        for (name, password) in users {
            if name.is_empty() {
                return Err("a SASL user has an empty name".into());
            }
            if password.expose().is_empty() {
                return Err(format!("SASL user {name:?} has an empty password"));
            }
            let credentials = UserCredentials {
                plain: enabled
                    .contains(&Mechanism::Plain)
                    .then(|| plain::password_digest(password.expose().as_bytes())),
                scram_sha256: derive(Mechanism::ScramSha256, &password)?,
                scram_sha512: derive(Mechanism::ScramSha512, &password)?,
            };
            if map.insert(name.clone(), credentials).is_some() {
                return Err(format!("SASL user {name:?} is defined twice"));
            }
        }
        Ok(Self {
            mechanisms: enabled,
            users: map,
        })
    }

    /// The enabled mechanisms, in the configured order (what a
    /// SaslHandshake answer lists).
    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// Whether `user` is known.
    pub fn has_user(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// A new exchange with a client that chose `mechanism` (which must be
    /// enabled: `None` otherwise).
    pub fn start(self: &Arc<Self>, mechanism: Mechanism) -> Option<ServerExchange> {
        self.mechanisms
            .contains(&mechanism)
            .then(|| match mechanism.scram_hash() {
                None => ServerExchange::Plain {
                    config: Arc::clone(self),
                },
                Some(hash) => ServerExchange::Scram(scram::ScramServer::new(hash, Arc::clone(self))),
            })
    }

    fn scram_credential(&self, hash: scram::Hash, user: &str) -> Option<&scram::ScramCredential> {
        let c = self.users.get(user)?;
        match hash {
            scram::Hash::Sha256 => c.scram_sha256.as_ref(),
            scram::Hash::Sha512 => c.scram_sha512.as_ref(),
        }
    }

    fn plain_digest(&self, user: &str) -> Option<&[u8; 32]> {
        self.users.get(user)?.plain.as_ref()
    }
}

/// What the server sends next.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// A challenge; the exchange goes on.
    Continue(Vec<u8>),
    /// Authenticated as `user`; `response` is the last token for the
    /// client (SCRAM's server signature, empty for PLAIN).
    Done { user: String, response: Vec<u8> },
}

/// A refused authentication: what the client is told (Kafka's messages,
/// which never say whether the user exists), and what our log says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    pub client_message: String,
    /// For the log: the reason, and the user name when it was read (never
    /// a password or a raw token).
    pub detail: String,
}

/// One client's exchange at our listener.
pub enum ServerExchange {
    Plain { config: Arc<SaslServerConfig> },
    Scram(scram::ScramServer),
}

impl ServerExchange {
    pub fn mechanism(&self) -> Mechanism {
        match self {
            Self::Plain { .. } => Mechanism::Plain,
            Self::Scram(s) => s.mechanism(),
        }
    }

    /// Takes the client's next token.
    pub fn step(&mut self, token: &[u8]) -> Result<ServerStep, AuthFailure> {
        match self {
            Self::Plain { config } => plain::server_step(config, token),
            Self::Scram(s) => s.step(token),
        }
    }
}

/// `N` random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes from the operating system: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        let c = SaslClientConfig {
            mechanism: Mechanism::ScramSha512,
            username: "alice".into(),
            password: Password::Inline(s.clone()),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        let config = SaslServerConfig::new(&Mechanism::ALL, [("alice".to_string(), s)], scram::MIN_ITERATIONS).unwrap();
        let debug = format!("{config:?}");
        assert!(debug.contains("alice") && !debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn mechanisms_parse_by_kafka_name() {
        for m in Mechanism::ALL {
            assert_eq!(m.name().parse::<Mechanism>(), Ok(m));
        }
        assert_eq!("scram-sha-256".parse::<Mechanism>(), Ok(Mechanism::ScramSha256));
        assert!("GSSAPI".parse::<Mechanism>().unwrap_err().contains("supported: PLAIN"));
    }

    #[test]
    fn password_files_lose_one_trailing_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        std::fs::write(&path, "s3cret\r\n").unwrap();
        assert_eq!(read_password_file(&path).unwrap().expose(), "s3cret");
        std::fs::write(&path, "a b\n\n").unwrap();
        assert_eq!(read_password_file(&path).unwrap().expose(), "a b\n");
        std::fs::write(&path, "\n").unwrap();
        assert!(read_password_file(&path).unwrap_err().contains("is empty"));
        let missing = read_password_file(&dir.path().join("nope")).unwrap_err();
        assert!(missing.contains("cannot read the SASL password file"), "{missing}");
    }

    /// Every mechanism: our client against our server, right and wrong
    /// passwords, unknown users.
    #[test]
    fn client_and_server_agree_for_every_mechanism() {
        let users = [
            ("alice".to_string(), Secret::new("alice-secret")),
            ("b,o=b".to_string(), Secret::new("pässword")),
        ];
        let config = Arc::new(SaslServerConfig::new(&Mechanism::ALL, users, scram::MIN_ITERATIONS).unwrap());
        for m in Mechanism::ALL {
            for (user, password, ok) in [
                ("alice", "alice-secret", true),
                ("b,o=b", "pässword", true),
                ("alice", "not-the-password", false),
                ("mallory", "alice-secret", false),
            ] {
                let outcome = exchange(&config, m, user, password);
                match (ok, outcome) {
                    (true, Ok(principal)) => assert_eq!(principal, user),
                    (false, Err(failure)) => {
                        assert!(!failure.client_message.contains(password), "{failure:?}");
                        assert!(!failure.detail.contains(password), "{failure:?}");
                    }
                    (ok, outcome) => panic!("{m} {user}/{password}: expected ok={ok}, got {outcome:?}"),
                }
            }
        }
    }

    /// Runs a whole exchange; the authenticated user or the failure.
    fn exchange(
        config: &Arc<SaslServerConfig>,
        m: Mechanism,
        user: &str,
        password: &str,
    ) -> Result<String, AuthFailure> {
        let mut server = config.start(m).expect("enabled");
        let (mut client, mut token) = ClientExchange::start(m, user, &Secret::new(password)).unwrap();
        loop {
            match server.step(&token)? {
                ServerStep::Continue(challenge) => match client.step(&challenge).unwrap() {
                    ClientStep::Send(next) => token = next,
                    ClientStep::Done => panic!("client done before the server"),
                },
                ServerStep::Done { user, response } => {
                    assert_eq!(client.step(&response).unwrap(), ClientStep::Done);
                    return Ok(user);
                }
            }
        }
    }

    #[test]
    fn only_enabled_mechanisms_start() {
        let config = Arc::new(
            SaslServerConfig::new(
                &[Mechanism::ScramSha256],
                [("a".to_string(), Secret::new("p"))],
                scram::MIN_ITERATIONS,
            )
            .unwrap(),
        );
        assert!(config.start(Mechanism::Plain).is_none());
        assert!(config.start(Mechanism::ScramSha512).is_none());
        assert!(config.start(Mechanism::ScramSha256).is_some());
        let dup = [("a".to_string(), Secret::new("p")), ("a".to_string(), Secret::new("q"))];
        assert!(
            SaslServerConfig::new(&[Mechanism::Plain], dup, 4096)
                .unwrap_err()
                .contains("twice")
        );
        assert!(SaslServerConfig::new(&[], [], 4096).is_err());
    }
}
