//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks
//! them (`ScramSaslClient`, `ScramSaslServer`, `ScramMessages`,
//! `ScramFormatter`):
//!
//! ```text
//! client-first  n,,n=<saslname>,r=<client nonce>[,<ext>=<value>...]
//! server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
//! client-final  c=biws,r=<nonce>,p=<base64 ClientProof>
//! server-final  v=<base64 ServerSignature>   (or e=<error>)
//! ```
//!
//! No channel binding (`n` or `y` GS2 flag; `p=` is refused), user names
//! with `=2C`/`=3D` escapes, passwords as UTF-8 bytes (Kafka does no
//! SASLprep), iterations within Kafka's bounds (4096–16384). The server
//! keeps only the salted keys (StoredKey, ServerKey) of each user.
//!
//! Every parser here reads bytes from the network and returns an error
//! for anything malformed, never panics (property tests below).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::{AuthFailure, ClientStep, Mechanism, SaslServerConfig, Secret, ServerStep, random_bytes};

/// Kafka's bounds on SCRAM iterations (`ScramMechanism`): fewer is
/// refused by its clients and servers, and so by ours.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;
/// What Kafka uses when it creates a credential without a count.
pub const DEFAULT_ITERATIONS: u32 = MIN_ITERATIONS;
/// Bytes of randomness in our nonces (base64 in the messages).
const NONCE_BYTES: usize = 24;
const SALT_BYTES: usize = 24;

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    pub fn mechanism(self) -> Mechanism {
        match self {
            Self::Sha256 => Mechanism::ScramSha256,
            Self::Sha512 => Mechanism::ScramSha512,
        }
    }

    pub fn output_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Self::Sha512 => {
                let mut mac = <Hmac<Sha512> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::digest(data).to_vec(),
            Self::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// RFC 5802's Hi(): PBKDF2 with HMAC of this hash.
    fn hi(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.output_len()];
        match self {
            Self::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out),
            Self::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out),
        }
        out
    }

    fn client_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, b"Client Key")
    }

    fn server_key(self, salted_password: &[u8]) -> Vec<u8> {
        self.hmac(salted_password, b"Server Key")
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// What a server keeps of a user's password for one SCRAM mechanism.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `password` with `salt` and `iterations`.
    pub fn derive(hash: Hash, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let salted = hash.hi(password, salt, iterations);
        Self {
            salt: salt.to_vec(),
            iterations,
            stored_key: hash.digest(&hash.client_key(&salted)),
            server_key: hash.server_key(&salted),
        }
    }

    /// The credential of `password` with a fresh random salt.
    pub fn generate(hash: Hash, password: &[u8], iterations: u32) -> Result<Self, String> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "SCRAM iterations must be {MIN_ITERATIONS}..={MAX_ITERATIONS}, not {iterations}"
            ));
        }
        let salt: [u8; SALT_BYTES] = random_bytes()?;
        Ok(Self::derive(hash, password, &salt, iterations))
    }
}

/// A fresh nonce: random bytes in base64 (printable, no comma).
fn new_nonce() -> Result<String, String> {
    let bytes: [u8; NONCE_BYTES] = random_bytes()?;
    Ok(BASE64.encode(bytes))
}

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

/// A user name as a SCRAM saslname: `=` as `=3D`, `,` as `=2C`.
pub fn encode_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A saslname decoded; any other `=` escape, or a NUL, is an error.
pub fn decode_saslname(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(r) = after.strip_prefix("2C") {
            out.push(',');
            rest = r;
        } else if let Some(r) = after.strip_prefix("3D") {
            out.push('=');
            rest = r;
        } else {
            return Err("a name has an '=' that is not =2C or =3D".into());
        }
    }
    out.push_str(rest);
    if out.contains('\0') {
        return Err("a name holds a NUL".into());
    }
    Ok(out)
}

/// A nonce: printable ASCII but `,`, at least one character.
fn check_nonce(nonce: &str) -> Result<&str, String> {
    if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return Err("the nonce is empty or not printable ASCII".into());
    }
    Ok(nonce)
}

fn attribute<'a>(part: Option<&'a str>, key: &str, what: &str) -> Result<&'a str, String> {
    part.and_then(|p| p.strip_prefix(key))
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| format!("{what}: no {key}= attribute where one is due"))
}

/// Extensions (`k=v` with an alphabetic key) after the fixed attributes.
fn extensions<'a>(parts: impl Iterator<Item = &'a str>, what: &str) -> Result<Vec<(&'a str, &'a str)>, String> {
    parts
        .map(|p| {
            p.split_once('=')
                .filter(|(k, _)| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic()))
                .ok_or_else(|| format!("{what}: malformed attribute"))
        })
        .collect()
}

fn base64_value(value: &str, what: &str) -> Result<Vec<u8>, String> {
    BASE64.decode(value).map_err(|_| format!("{what}: not valid base64"))
}

fn utf8<'a>(message: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(message).map_err(|_| format!("{what}: not UTF-8"))
}

/// The client-first message, as the server reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst<'a> {
    /// `n,,` or `n,a=<authzid>,` (or `y,...`): echoed in the final message.
    pub gs2_header: &'a str,
    pub authzid: Option<String>,
    pub user: String,
    pub nonce: &'a str,
    /// The message without the GS2 header (part of the AuthMessage).
    pub bare: &'a str,
}

pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst<'_>, String> {
    const WHAT: &str = "client-first message";
    let message = utf8(message, WHAT)?;
    let (flag, rest) = message
        .split_once(',')
        .ok_or_else(|| format!("{WHAT}: no GS2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(format!("{WHAT}: channel binding is not supported")),
        _ => return Err(format!("{WHAT}: bad GS2 channel binding flag")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(|| format!("{WHAT}: no GS2 header"))?;
    let authzid = match authzid {
        "" => None,
        a => Some(decode_saslname(
            a.strip_prefix("a=")
                .ok_or_else(|| format!("{WHAT}: bad authorization id"))?,
        )?),
    };
    let gs2_header = &message[..message.len() - bare.len()];
    let mut parts = bare.split(',');
    let first = parts.next();
    if first.is_some_and(|p| p.starts_with("m=")) {
        return Err(format!("{WHAT}: mandatory extensions are not supported"));
    }
    let user = decode_saslname(attribute(first, "n", WHAT)?)?;
    if user.is_empty() {
        return Err(format!("{WHAT}: empty user name"));
    }
    let nonce = check_nonce(attribute(parts.next(), "r", WHAT)?)?;
    for (key, value) in extensions(parts, WHAT)? {
        if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
            return Err(format!("{WHAT}: delegation tokens are not supported"));
        }
    }
    Ok(ClientFirst {
        gs2_header,
        authzid,
        user,
        nonce,
        bare,
    })
}

/// The server-first message, as the client reads it: (nonce, salt,
/// iterations).
pub fn parse_server_first(message: &[u8]) -> Result<(&str, Vec<u8>, u32), String> {
    const WHAT: &str = "server-first message";
    let message = utf8(message, WHAT)?;
    let mut parts = message.split(',');
    let first = parts.next();
    if first.is_some_and(|p| p.starts_with("m=")) {
        return Err(format!("{WHAT}: mandatory extensions are not supported"));
    }
    let nonce = check_nonce(attribute(first, "r", WHAT)?)?;
    let salt = base64_value(attribute(parts.next(), "s", WHAT)?, WHAT)?;
    let iterations = attribute(parts.next(), "i", WHAT)?;
    let iterations: u32 = iterations
        .parse()
        .ok()
        .filter(|_| iterations.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("{WHAT}: bad iteration count"))?;
    extensions(parts, WHAT)?;
    Ok((nonce, salt, iterations))
}

/// The client-final message, as the server reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFinal<'a> {
    pub channel_binding: Vec<u8>,
    pub nonce: &'a str,
    /// Everything before `,p=` (part of the AuthMessage).
    pub without_proof: &'a str,
    pub proof: Vec<u8>,
}

pub fn parse_client_final(message: &[u8]) -> Result<ClientFinal<'_>, String> {
    const WHAT: &str = "client-final message";
    let message = utf8(message, WHAT)?;
    let (without_proof, proof) = message.rsplit_once(",p=").ok_or_else(|| format!("{WHAT}: no proof"))?;
    let proof = base64_value(proof, WHAT)?;
    let mut parts = without_proof.split(',');
    let channel_binding = base64_value(attribute(parts.next(), "c", WHAT)?, WHAT)?;
    let nonce = check_nonce(attribute(parts.next(), "r", WHAT)?)?;
    extensions(parts, WHAT)?;
    Ok(ClientFinal {
        channel_binding,
        nonce,
        without_proof,
        proof,
    })
}

/// The server-final message, as the client reads it: the server's
/// signature, or the error it sent (`e=`).
pub fn parse_server_final(message: &[u8]) -> Result<Result<Vec<u8>, String>, String> {
    const WHAT: &str = "server-final message";
    let message = utf8(message, WHAT)?;
    let mut parts = message.split(',');
    let first = parts.next().unwrap_or_default();
    if let Some(error) = first.strip_prefix("e=") {
        return Ok(Err(error.to_owned()));
    }
    let signature = base64_value(attribute(Some(first), "v", WHAT)?, WHAT)?;
    extensions(parts, WHAT)?;
    Ok(Ok(signature))
}

fn auth_message(client_first_bare: &str, server_first: &str, client_final_without_proof: &str) -> String {
    format!("{client_first_bare},{server_first},{client_final_without_proof}")
}

// ---------------------------------------------------------------------------
// Client
// ---------------------------------------------------------------------------

enum ClientState {
    ServerFirst,
    ServerFinal { server_signature: Vec<u8> },
    Done,
}

/// Our side of a SCRAM exchange with a broker.
pub struct ScramClient {
    hash: Hash,
    password: Secret,
    nonce: String,
    client_first_bare: String,
    state: ClientState,
}

impl ScramClient {
    pub fn new(hash: Hash, username: &str, password: Secret) -> Result<Self, String> {
        Ok(Self::with_nonce(hash, username, password, new_nonce()?))
    }

    /// With a given nonce (the RFC's test vectors).
    pub fn with_nonce(hash: Hash, username: &str, password: Secret, nonce: String) -> Self {
        Self {
            hash,
            password,
            client_first_bare: format!("n={},r={nonce}", encode_saslname(username)),
            nonce,
            state: ClientState::ServerFirst,
        }
    }

    /// The first message (no authorization id, no channel binding).
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Takes the server's server-first (answered with our client-final)
    /// or server-final (checked: the server must prove it knows our
    /// credential) message.
    pub fn step(&mut self, server: &[u8]) -> Result<ClientStep, String> {
        match std::mem::replace(&mut self.state, ClientState::Done) {
            ClientState::ServerFirst => {
                let (nonce, salt, iterations) = parse_server_first(server)?;
                if nonce.len() <= self.nonce.len() || !nonce.starts_with(&self.nonce) {
                    return Err("the server's nonce does not extend ours".into());
                }
                if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                    return Err(format!(
                        "the server asks for {iterations} iterations, outside Kafka's {MIN_ITERATIONS}..={MAX_ITERATIONS}"
                    ));
                }
                let server_first = utf8(server, "server-first message")?;
                let hash = self.hash;
                let salted = hash.hi(self.password.expose().as_bytes(), &salt, iterations);
                let client_key = hash.client_key(&salted);
                let stored_key = hash.digest(&client_key);
                // c=biws: base64 of the GS2 header "n,,".
                let without_proof = format!("c={},r={nonce}", BASE64.encode("n,,"));
                let auth = auth_message(&self.client_first_bare, server_first, &without_proof);
                let proof = xor(&client_key, &hash.hmac(&stored_key, auth.as_bytes()));
                let server_signature = hash.hmac(&hash.server_key(&salted), auth.as_bytes());
                self.state = ClientState::ServerFinal { server_signature };
                Ok(ClientStep::Send(
                    format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
                ))
            }
            ClientState::ServerFinal { server_signature } => match parse_server_final(server)? {
                Err(error) => Err(format!("the server refused: {error}")),
                Ok(signature) if bool::from(signature.ct_eq(&server_signature)) => Ok(ClientStep::Done),
                Ok(_) => Err("the server's signature does not verify: it does not hold our credential".into()),
            },
            ClientState::Done => Err("the exchange is already over".into()),
        }
    }
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

struct Pending {
    user: String,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    client_nonce: String,
    nonce: String,
    credential: ScramCredential,
}

enum ServerState {
    ClientFirst,
    ClientFinal(Box<Pending>),
    Over,
}

/// One client's SCRAM exchange at our listener.
pub struct ScramServer {
    hash: Hash,
    config: std::sync::Arc<SaslServerConfig>,
    /// Set by tests (the RFC's vectors); random otherwise.
    fixed_nonce: Option<String>,
    state: ServerState,
}

impl ScramServer {
    pub fn new(hash: Hash, config: std::sync::Arc<SaslServerConfig>) -> Self {
        Self {
            hash,
            config,
            fixed_nonce: None,
            state: ServerState::ClientFirst,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.hash.mechanism()
    }

    /// What Kafka tells a client for every SCRAM failure but a wrong
    /// authorization id: nothing about which part was wrong.
    fn failed(&self, detail: String) -> AuthFailure {
        AuthFailure {
            client_message: format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                self.mechanism()
            ),
            detail,
        }
    }

    pub fn step(&mut self, message: &[u8]) -> Result<ServerStep, AuthFailure> {
        match std::mem::replace(&mut self.state, ServerState::Over) {
            ServerState::ClientFirst => {
                let first = parse_client_first(message).map_err(|e| self.failed(e))?;
                let Some(credential) = self.config.scram_credential(self.hash, &first.user) else {
                    return Err(self.failed(format!("unknown user {:?}", first.user)));
                };
                if first.authzid.as_ref().is_some_and(|a| *a != first.user) {
                    return Err(AuthFailure {
                        client_message:
                            "Authentication failed: Client requested an authorization id that is different from username"
                                .into(),
                        detail: format!("user {:?} asked for another authorization id", first.user),
                    });
                }
                let server_nonce = match &self.fixed_nonce {
                    Some(n) => n.clone(),
                    None => new_nonce().map_err(|e| self.failed(e))?,
                };
                let nonce = format!("{}{server_nonce}", first.nonce);
                let server_first = format!(
                    "r={nonce},s={},i={}",
                    BASE64.encode(&credential.salt),
                    credential.iterations
                );
                self.state = ServerState::ClientFinal(Box::new(Pending {
                    user: first.user,
                    gs2_header: first.gs2_header.to_owned(),
                    client_first_bare: first.bare.to_owned(),
                    server_first: server_first.clone(),
                    client_nonce: first.nonce.to_owned(),
                    nonce,
                    credential: credential.clone(),
                }));
                Ok(ServerStep::Continue(server_first.into_bytes()))
            }
            ServerState::ClientFinal(p) => {
                let user = &p.user;
                let last = parse_client_final(message).map_err(|e| self.failed(format!("user {user:?}: {e}")))?;
                if last.channel_binding != p.gs2_header.as_bytes() {
                    return Err(self.failed(format!("user {user:?}: the channel binding is not the GS2 header")));
                }
                // The nonce agreed, or (librdkafka before 2.6.1, which
                // prepends its own nonce once more) the client's nonce and
                // then the one agreed: Kafka 3.8.1-3.9 accepts any nonce
                // ending with the agreed one. The proof covers it either way.
                let doubled = last
                    .nonce
                    .strip_prefix(p.client_nonce.as_str())
                    .is_some_and(|rest| rest == p.nonce);
                if last.nonce != p.nonce && !doubled {
                    return Err(self.failed(format!("user {user:?}: the nonce is not the one agreed")));
                }
                let hash = self.hash;
                if last.proof.len() != hash.output_len() {
                    return Err(self.failed(format!("user {user:?}: the proof has the wrong length")));
                }
                let auth = auth_message(&p.client_first_bare, &p.server_first, last.without_proof);
                let client_signature = hash.hmac(&p.credential.stored_key, auth.as_bytes());
                let client_key = xor(&last.proof, &client_signature);
                if !bool::from(hash.digest(&client_key).ct_eq(&p.credential.stored_key)) {
                    return Err(self.failed(format!("user {user:?}: invalid credentials")));
                }
                let signature = hash.hmac(&p.credential.server_key, auth.as_bytes());
                Ok(ServerStep::Done {
                    user: p.user.clone(),
                    response: format!("v={}", BASE64.encode(signature)).into_bytes(),
                })
            }
            ServerState::Over => Err(self.failed("a token after the exchange ended".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::sasl::UserCredentials;

    // RFC 7677, section 3: SCRAM-SHA-256, user "user", password "pencil".
    const C1: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const S1: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const C2: &str =
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const S2: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    /// A server whose only user is the RFC's, with the RFC's salt
    /// (derived once: PBKDF2 is slow in test builds).
    fn rfc_config() -> Arc<SaslServerConfig> {
        static CONFIG: std::sync::LazyLock<Arc<SaslServerConfig>> = std::sync::LazyLock::new(derive_rfc_config);
        Arc::clone(&CONFIG)
    }

    fn derive_rfc_config() -> Arc<SaslServerConfig> {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential = ScramCredential::derive(Hash::Sha256, b"pencil", &salt, 4096);
        let mut users = HashMap::new();
        users.insert(
            "user".to_string(),
            UserCredentials {
                plain: Some(crate::sasl::plain::password_digest(b"pencil")),
                scram_sha256: Some(credential),
                scram_sha512: None,
            },
        );
        Arc::new(SaslServerConfig {
            mechanisms: vec![Mechanism::Plain, Mechanism::ScramSha256],
            users,
        })
    }

    fn rfc_server() -> ScramServer {
        let mut server = ScramServer::new(Hash::Sha256, rfc_config());
        server.fixed_nonce = Some("%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0".into());
        server
    }

    #[test]
    fn client_follows_the_rfc_7677_test_vector() {
        let mut client = ScramClient::with_nonce(
            Hash::Sha256,
            "user",
            Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(client.client_first(), C1.as_bytes());
        assert_eq!(client.step(S1.as_bytes()), Ok(ClientStep::Send(C2.as_bytes().to_vec())));
        assert_eq!(client.step(S2.as_bytes()), Ok(ClientStep::Done));
    }

    #[test]
    fn server_follows_the_rfc_7677_test_vector() {
        let mut server = rfc_server();
        assert_eq!(
            server.step(C1.as_bytes()),
            Ok(ServerStep::Continue(S1.as_bytes().to_vec()))
        );
        assert_eq!(
            server.step(C2.as_bytes()),
            Ok(ServerStep::Done {
                user: "user".into(),
                response: S2.as_bytes().to_vec()
            })
        );
        assert!(server.step(C2.as_bytes()).is_err(), "a token after the end");
    }

    #[test]
    fn a_client_refuses_a_server_that_does_not_know_the_password() {
        let mut client = ScramClient::with_nonce(
            Hash::Sha256,
            "user",
            Secret::new("pencil"),
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        client.step(S1.as_bytes()).unwrap();
        let forged = format!("v={}", BASE64.encode([7u8; 32]));
        assert!(client.step(forged.as_bytes()).unwrap_err().contains("does not verify"));
        let mut client = ScramClient::with_nonce(Hash::Sha256, "user", Secret::new("pencil"), "abc".into());
        assert!(client.step(b"r=xyz123,s=QUJD,i=4096").unwrap_err().contains("nonce"));
        let mut client = ScramClient::with_nonce(Hash::Sha256, "user", Secret::new("pencil"), "abc".into());
        assert!(
            client
                .step(b"r=abcdef,s=QUJD,i=4095")
                .unwrap_err()
                .contains("iterations")
        );
        let mut client = ScramClient::with_nonce(Hash::Sha256, "user", Secret::new("pencil"), "abc".into());
        client.step(b"r=abcdef,s=QUJD,i=4096").unwrap();
        assert_eq!(
            client.step(b"e=invalid-proof").unwrap_err(),
            "the server refused: invalid-proof"
        );
    }

    #[test]
    fn the_server_checks_proof_nonce_binding_and_authzid() {
        let mut server = rfc_server();
        server.step(C1.as_bytes()).unwrap();
        let bad_proof = C2.replace("p=dHzb", "p=dHzc");
        let failure = server.step(bad_proof.as_bytes()).unwrap_err();
        assert_eq!(
            failure.client_message,
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
        );
        assert!(failure.detail.contains("invalid credentials"), "{failure:?}");

        let mut server = rfc_server();
        server.step(C1.as_bytes()).unwrap();
        let other_nonce = C2.replace("$k0,p", "$k1,p");
        assert!(
            server
                .step(other_nonce.as_bytes())
                .unwrap_err()
                .detail
                .contains("nonce")
        );

        // librdkafka before 2.6.1 sends the client nonce twice; the proof
        // then covers that message.
        let mut client = ScramClient::with_nonce(Hash::Sha256, "user", Secret::new("pencil"), "abc".into());
        let mut server = rfc_server();
        let ServerStep::Continue(first) = server.step(&client.client_first()).unwrap() else {
            panic!("a challenge")
        };
        let ClientStep::Send(last) = client.step(&first).unwrap() else {
            panic!("a final message")
        };
        let doubled = String::from_utf8(last).unwrap().replace(",r=abc", ",r=abcabc");
        let failure = server.step(doubled.as_bytes()).unwrap_err();
        assert!(
            failure.detail.contains("invalid credentials"),
            "the nonce is accepted, the proof is not"
        );
        // With the proof over the doubled nonce, as librdkafka computes it.
        let mut server = rfc_server();
        server.step(C1.as_bytes()).unwrap();
        let hash = Hash::Sha256;
        let salted = hash.hi(b"pencil", &BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(), 4096);
        let client_key = hash.client_key(&salted);
        let without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let auth = auth_message("n=user,r=rOprNGfwEbeRWgbNEkqO", S1, without_proof);
        let proof = xor(&client_key, &hash.hmac(&hash.digest(&client_key), auth.as_bytes()));
        let last = format!("{without_proof},p={}", BASE64.encode(proof));
        assert!(matches!(server.step(last.as_bytes()), Ok(ServerStep::Done { .. })));
        let mut server = rfc_server();
        server.step(C1.as_bytes()).unwrap();
        let tripled = C2.replace("r=rOpr", "r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqOrOpr");
        assert!(server.step(tripled.as_bytes()).unwrap_err().detail.contains("nonce"));

        let mut server = rfc_server();
        server.step(C1.as_bytes()).unwrap();
        let binding = C2.replace("c=biws", "c=eSws");
        assert!(
            server
                .step(binding.as_bytes())
                .unwrap_err()
                .detail
                .contains("channel binding")
        );

        let mut server = rfc_server();
        let failure = server.step(b"n,a=admin,n=user,r=abc").unwrap_err();
        assert!(failure.client_message.contains("authorization id"), "{failure:?}");
        // The same authorization id as the user is fine (and binds "n,a=user,").
        let mut server = rfc_server();
        assert!(matches!(
            server.step(b"n,a=user,n=user,r=abc"),
            Ok(ServerStep::Continue(_))
        ));

        let mut server = rfc_server();
        assert!(
            server
                .step(b"n,,n=nobody,r=abc")
                .unwrap_err()
                .detail
                .contains("unknown user")
        );
    }

    #[test]
    fn messages_parse_as_kafka_writes_them() {
        let first = parse_client_first(b"n,,n=a=2Cb=3Dc,r=xyz,tokenauth=false").unwrap();
        assert_eq!(
            (first.gs2_header, first.user.as_str(), first.nonce, first.bare),
            ("n,,", "a,b=c", "xyz", "n=a=2Cb=3Dc,r=xyz,tokenauth=false")
        );
        assert!(
            parse_client_first(b"n,,n=u,r=x,tokenauth=true")
                .unwrap_err()
                .contains("delegation")
        );
        assert!(
            parse_client_first(b"p=tls-unique,,n=u,r=x")
                .unwrap_err()
                .contains("channel binding")
        );
        assert!(
            parse_client_first(b"n,,m=ext,n=u,r=x")
                .unwrap_err()
                .contains("mandatory")
        );
        assert!(parse_client_first(b"n,,n=a=2Xb,r=x").is_err());
        assert!(parse_client_first(b"n,,n=,r=x").is_err());
        assert!(parse_client_first(b"n,,n=u,r=a b").is_err());
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        assert_eq!(
            parse_server_first(b"r=abc,s=QUJD,i=4096,x=y").unwrap(),
            ("abc", b"ABC".to_vec(), 4096)
        );
        assert!(parse_server_first(b"r=abc,s=QUJD,i=+4096").is_err());
        assert!(parse_server_first(b"r=abc,s=QUJD,i=99999999999").is_err());
        assert!(parse_server_first(b"r=abc,s=!!,i=4096").is_err());
        let last = parse_client_final(C2.as_bytes()).unwrap();
        assert_eq!(last.channel_binding, b"n,,");
        assert_eq!(last.proof.len(), 32);
        assert!(parse_client_final(b"c=biws,r=abc").is_err());
        assert_eq!(
            parse_server_final(b"e=unknown-user").unwrap(),
            Err("unknown-user".into())
        );
        assert!(parse_server_final(b"x=1").is_err());
        assert!(parse_server_first(&[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn sha512_client_and_server_agree_and_keys_have_its_length() {
        let c = ScramCredential::generate(Hash::Sha512, b"pw", 4096).unwrap();
        assert_eq!((c.stored_key.len(), c.server_key.len(), c.iterations), (64, 64, 4096));
        assert!(ScramCredential::generate(Hash::Sha512, b"pw", 4095).is_err());
        assert!(ScramCredential::generate(Hash::Sha512, b"pw", 16385).is_err());
        let d = ScramCredential::generate(Hash::Sha512, b"pw", 4096).unwrap();
        assert_ne!(c.salt, d.salt, "salts are random");
    }

    /// Valid messages of a whole exchange, for mutation.
    fn valid_client_messages() -> (Vec<u8>, Vec<u8>) {
        (C1.as_bytes().to_vec(), C2.as_bytes().to_vec())
    }

    fn mutate(mut bytes: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
        for &(at, kind, value) in edits {
            let at = if bytes.is_empty() { 0 } else { at % (bytes.len() + 1) };
            match kind % 3 {
                0 if at < bytes.len() => bytes[at] = value,
                1 => bytes.insert(at, value),
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => {}
            }
        }
        bytes
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The server never panics on what a client sends, first or final,
        /// and only the exact exchange authenticates.
        #[test]
        fn the_server_takes_any_client_bytes(
            first in proptest::collection::vec(any::<u8>(), 0..200),
            last in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut server = rfc_server();
            let _ = server.step(&first);
            let _ = server.step(&last);
            let _ = server.step(&last);
            let mut server = rfc_server();
            server.step(C1.as_bytes()).unwrap();
            prop_assert!(server.step(&last).is_err());
        }

        #[test]
        fn the_server_takes_mutated_client_messages(
            edits1 in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6),
            edits2 in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6),
        ) {
            let (c1, c2) = valid_client_messages();
            let m1 = mutate(c1.clone(), &edits1);
            let m2 = mutate(c2.clone(), &edits2);
            let mut server = rfc_server();
            if server.step(&m1).is_ok() && server.step(&m2).is_ok() {
                // Only the very messages of the exchange pass the proof.
                prop_assert!(m1 == c1 && m2 == c2);
            }
            let plain = rfc_config();
            let _ = crate::sasl::plain::server_step(&plain, &m1);
            let _ = crate::sasl::plain::server_step(&plain, &m2);
        }
    }

    proptest! {
        // Each case derives the salted password (PBKDF2): fewer of them.
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The client never panics on what a server sends.
        #[test]
        fn the_client_takes_any_server_bytes(
            first in proptest::collection::vec(any::<u8>(), 0..200),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6),
        ) {
            let client = || ScramClient::with_nonce(Hash::Sha256, "user", Secret::new("pencil"), "rOprNGfwEbeRWgbNEkqO".into());
            let mut c = client();
            let _ = c.step(&first);
            let _ = c.step(&first);
            let mut c = client();
            let _ = c.step(&mutate(S1.as_bytes().to_vec(), &edits));
            let mut c = client();
            c.step(S1.as_bytes()).unwrap();
            let _ = c.step(&mutate(S2.as_bytes().to_vec(), &edits));
        }
    }
}
