//! Who may use the admin API, and for what: bearer tokens to callers
//! (authentication), and each route's operation on a mirror checked
//! against the ClusterMirror ACLs (authorization, KIP-1279).
//!
//! **Callers.** A request's `Authorization: Bearer <token>` names one:
//! * the admin token (`[admin] token_file`, [`AdminToken`]) — a superuser,
//!   allowed everything: the simple mode, and the only one without a
//!   principals file;
//! * a token of the principals file (`[admin] principals_file`,
//!   [`AdminPrincipals`]) — the request acts as that principal
//!   (`User:<name>`) and the ClusterMirror ACLs decide;
//! * with neither configured, anyone ([`Caller::Anyone`]): the API is open.
//!
//! Only tokens' SHA-256 digests are kept. A presented token's digest is
//! compared with every known one in constant time (no early exit, no
//! dependence on where a guess differs); neither a token nor the header
//! is logged or echoed.
//!
//! **The principals file**, read at start (a change takes a restart): one
//! principal per line, its type and name, spaces, and `sha256:` with the
//! 64 hex digits of its token's SHA-256; `#` starts a comment, blank lines
//! are skipped. Several lines may name one principal (token rotation); a
//! digest may appear once, and may not be the admin token's. An error
//! names the file and the line, never the line's text (a token pasted by
//! mistake stays out of the log).
//!
//! ```text
//! # printf %s "$token" | sha256sum
//! User:oncall   sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! User:grafana  sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
//! ```
//!
//! **Authorization** ([`Access`]) follows Kafka's StandardAuthorizer
//! (`ringmirror_dataplane::security::authorizer::decide`) on the
//! ClusterMirror resource named by the mirror: an ACL applies to its
//! literal name, `*`, or a PREFIXED pattern the name starts with; DENY
//! beats ALLOW; ALL allows every operation; READ, WRITE, DELETE and ALTER
//! imply DESCRIBE; host `*` or the client's IP address; a mirror no ACL
//! names is closed to principals (no `allow.everyone.if.no.acl.found`).
//! A refusal is 403 [`CLUSTER_MIRROR_AUTHORIZATION_FAILED`], the error
//! the KIP's prototype adds (code 144). Listings — mirrors, `/status`,
//! `/metrics` — keep only the mirrors the caller may DESCRIBE. The
//! ClusterMirror ACLs themselves (`/acls`) are listed and changed by the
//! admin token only (Kafka asks ALTER on the cluster for that; a
//! principal is refused with [`CLUSTER_AUTHORIZATION_FAILED`]).

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use axum::http::{HeaderMap, header};
use ringmirror_dataplane::security::AclStore;
use ringmirror_dataplane::security::acls::{AclBinding, AclBindingFilter, AclOperation, ResourceType};
use ringmirror_dataplane::security::authorizer::decide;
use ringmirror_protocol::sasl::Secret;
use subtle::ConstantTimeEq;

use crate::admin::AdminAnswer;

/// Largest token file read: a token is tens of bytes; the bound keeps a
/// wrong path (a log, a device) from being read whole.
pub const TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// Largest principals file read: one line per token, ~90 bytes each.
pub const PRINCIPALS_FILE_BYTES_MAX: u64 = 1 << 20;

/// The error kind of a request refused for its credentials (401).
pub const UNAUTHORIZED: &str = "unauthorized";

/// The error kind of a mirror operation the caller may not do (403): the
/// name the KIP-1279 prototype gives it (error code 144).
pub const CLUSTER_MIRROR_AUTHORIZATION_FAILED: &str = "CLUSTER_MIRROR_AUTHORIZATION_FAILED";

/// The error kind of an ACL listing or change by a principal (403):
/// Kafka's answer to DescribeAcls or CreateAcls without the cluster's
/// DESCRIBE or ALTER.
pub const CLUSTER_AUTHORIZATION_FAILED: &str = "CLUSTER_AUTHORIZATION_FAILED";

/// The admin API's bearer token: what the server requires and the CLI
/// sends. Visible ASCII without spaces (it travels in an HTTP header);
/// `Debug` shows `***`, so it never reaches a log line or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Secret);

impl AdminToken {
    /// `token` without its surrounding whitespace; the reason it cannot be
    /// a token otherwise (the reason never quotes it).
    pub fn new(token: &str) -> Result<Self, &'static str> {
        let token = token.trim_ascii();
        if token.is_empty() {
            return Err("is empty");
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "holds a space or a character that is not visible ASCII, which cannot be sent \
                 in an HTTP header (make one with `openssl rand -hex 32`)",
            );
        }
        Ok(Self(Secret::new(token)))
    }

    /// Reads the token from `path` (at most [`TOKEN_FILE_BYTES_MAX`]
    /// bytes; surrounding whitespace and line breaks dropped). The error
    /// names the path, never the content.
    pub fn read_file(path: &Path) -> anyhow::Result<Self> {
        let bytes = read_bounded(path, TOKEN_FILE_BYTES_MAX, "admin token file")?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| anyhow::anyhow!("the admin token file {} holds bytes that are not ASCII", path.display()))?;
        Self::new(text).map_err(|reason| anyhow::anyhow!("the admin token file {} {reason}", path.display()))
    }

    /// The token itself: only where it is sent, never formatted.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The `Authorization` header's value that carries it.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.expose())
    }

    fn digest(&self) -> TokenDigest {
        TokenDigest::of(self.expose().as_bytes())
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminToken({:?})", self.0)
    }
}

/// At most `max` bytes of the file at `path` (`what` names it in errors).
fn read_bounded(path: &Path, max: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(max + 1).read_to_end(&mut bytes))
        .with_context(|| format!("cannot read the {what} {}", path.display()))?;
    anyhow::ensure!(
        bytes.len() as u64 <= max,
        "the {what} {} is larger than {max} bytes: not a {what}",
        path.display()
    );
    Ok(bytes)
}

/// What the server keeps of a token: its SHA-256 (the digest SASL/PLAIN
/// keeps of a password).
#[derive(Clone, Copy, PartialEq, Eq)]
struct TokenDigest([u8; 32]);

impl TokenDigest {
    fn of(token: &[u8]) -> Self {
        Self(ringmirror_protocol::sasl::plain::password_digest(token))
    }

    /// Whether the digests are equal, in time independent of both.
    fn matches(&self, other: &TokenDigest) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

/// The principals of the principals file, each with its tokens' digests.
#[derive(Clone)]
pub struct AdminPrincipals {
    entries: Vec<(String, TokenDigest)>,
}

impl std::fmt::Debug for AdminPrincipals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminPrincipals")
            .field("tokens", &self.entries.len())
            .finish()
    }
}

impl AdminPrincipals {
    /// Reads the principals file at `path` (format in the module
    /// documentation; at most [`PRINCIPALS_FILE_BYTES_MAX`] bytes).
    pub fn read_file(path: &Path) -> anyhow::Result<Self> {
        let bytes = read_bounded(path, PRINCIPALS_FILE_BYTES_MAX, "admin principals file")?;
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            anyhow::anyhow!(
                "the admin principals file {} holds bytes that are not UTF-8",
                path.display()
            )
        })?;
        Self::parse(text).map_err(|e| anyhow::anyhow!("the admin principals file {}: {e}", path.display()))
    }

    /// The principals of a file's text; the error names a line (from 1),
    /// never its text.
    pub fn parse(text: &str) -> Result<Self, String> {
        const SHAPE: &str = "expected `User:<name> sha256:<64 hex digits>`";
        let mut entries: Vec<(String, TokenDigest)> = Vec::new();
        let mut lines_of = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let content = line.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let mut fields = content.split_ascii_whitespace();
            let (Some(principal), Some(hash), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(format!("line {number}: {SHAPE}"));
            };
            let valid_principal = principal
                .split_once(':')
                .is_some_and(|(kind, name)| !kind.is_empty() && !name.is_empty() && name != "*");
            if !valid_principal {
                return Err(format!(
                    "line {number}: the principal is not of the form Type:name (User:alice; `*` is no name)"
                ));
            }
            let digest = hash
                .strip_prefix("sha256:")
                .and_then(parse_hex_digest)
                .ok_or_else(|| format!("line {number}: the token hash is not sha256:<64 hex digits>: {SHAPE}"))?;
            if let Some(i) = entries.iter().position(|(_, d)| *d == digest) {
                return Err(format!(
                    "line {number}: the same token hash as line {}: a token names one principal",
                    lines_of[i]
                ));
            }
            entries.push((principal.to_owned(), digest));
            lines_of.push(number);
        }
        Ok(Self { entries })
    }

    /// How many tokens the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal whose token has `digest`: every entry is compared,
    /// each in constant time.
    fn find(&self, digest: &TokenDigest) -> Option<&str> {
        let mut found = None;
        for (principal, known) in &self.entries {
            if known.matches(digest) {
                found = Some(principal.as_str());
            }
        }
        found
    }
}

fn parse_hex_digest(hex: &str) -> Option<TokenDigest> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(TokenDigest(out))
}

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No token or principals configured: the API is open to anyone.
    Anyone,
    /// The admin token's bearer: a superuser.
    Admin,
    /// A principal of the principals file.
    Principal(String),
}

/// The admin API's authentication and the ACLs it authorizes with.
pub struct AdminAuth {
    token: Option<TokenDigest>,
    principals: Option<AdminPrincipals>,
    acls: Option<Arc<AclStore>>,
}

impl AdminAuth {
    /// From the admin token, the principals and the agent's ACLs. A
    /// principals file needs the ACLs, and may not hold the admin token.
    pub fn new(
        token: Option<&AdminToken>,
        principals: Option<AdminPrincipals>,
        acls: Option<Arc<AclStore>>,
    ) -> anyhow::Result<Self> {
        let token = token.map(AdminToken::digest);
        if let Some(principals) = &principals {
            anyhow::ensure!(acls.is_some(), "admin principals need the agent's ACL store");
            if let Some(token) = &token {
                anyhow::ensure!(
                    principals.find(token).is_none(),
                    "the admin token (token_file) is also a principal's token in principals_file: \
                     it would be a superuser and a principal at once"
                );
            }
        }
        Ok(Self {
            token,
            principals,
            acls,
        })
    }

    /// No authentication: the API is open.
    pub fn open() -> Self {
        Self {
            token: None,
            principals: None,
            acls: None,
        }
    }

    /// Whether requests must carry a token.
    pub fn required(&self) -> bool {
        self.token.is_some() || self.principals.is_some()
    }

    /// What guards the API, for the start-up log line.
    pub fn mode(&self) -> &'static str {
        match (self.token.is_some(), self.principals.is_some()) {
            (false, false) => "none",
            (true, false) => "bearer token",
            (false, true) => "principals and ClusterMirror ACLs",
            (true, true) => "bearer token, principals and ClusterMirror ACLs",
        }
    }

    /// The agent's ACLs, for `/acls`.
    pub fn acls(&self) -> Option<&Arc<AclStore>> {
        self.acls.as_ref()
    }

    /// The caller a request's headers name: one `Authorization` header,
    /// the `Bearer` scheme (any case, RFC 7235), a known token. The reason
    /// if not (never quoting what was presented).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, &'static str> {
        if !self.required() {
            return Ok(Caller::Anyone);
        }
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(if headers.contains_key(header::AUTHORIZATION) {
                "more than one Authorization header"
            } else {
                "the admin API requires a bearer token (Authorization: Bearer <token>)"
            });
        };
        let value = value.as_bytes().trim_ascii();
        let scheme_end = value.iter().position(|&b| b == b' ').unwrap_or(value.len());
        let (scheme, credentials) = value.split_at(scheme_end);
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return Err("the admin API takes only bearer tokens (Authorization: Bearer <token>)");
        }
        let presented = TokenDigest::of(credentials.trim_ascii());
        // Both are looked at whatever the first says.
        let admin = self.token.as_ref().is_some_and(|t| t.matches(&presented));
        let principal = self.principals.as_ref().and_then(|p| p.find(&presented));
        match (admin, principal) {
            (true, _) => Ok(Caller::Admin),
            (false, Some(p)) => Ok(Caller::Principal(p.to_owned())),
            (false, None) => Err("the bearer token is not the admin API's"),
        }
    }

    /// What `caller`, connected from `host` (an IP address), may do: for
    /// a principal, with the ClusterMirror ACLs as they are now.
    pub fn access(&self, caller: Caller, host: String) -> Access {
        let bindings = match (&caller, &self.acls) {
            (Caller::Principal(_), Some(acls)) => acls.describe(&AclBindingFilter {
                resource_type: ResourceType::ClusterMirror,
                ..AclBindingFilter::any()
            }),
            _ => Vec::new(),
        };
        Access {
            caller,
            host,
            bindings: Arc::new(bindings),
        }
    }
}

/// A refused operation: the error kind and what was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    pub error: &'static str,
    pub message: String,
}

/// What one request's caller may do (see the module documentation).
#[derive(Clone, Debug)]
pub struct Access {
    caller: Caller,
    host: String,
    /// The ClusterMirror ACLs, for a principal; empty otherwise.
    bindings: Arc<Vec<AclBinding>>,
}

impl Access {
    /// Anyone, for everything (no authentication configured).
    pub fn open() -> Self {
        Self {
            caller: Caller::Anyone,
            host: String::new(),
            bindings: Arc::default(),
        }
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Whether the caller may do `operation` on the mirror `mirror`.
    pub fn may(&self, operation: AclOperation, mirror: &str) -> bool {
        match &self.caller {
            Caller::Anyone | Caller::Admin => true,
            Caller::Principal(principal) => decide(
                &self.bindings,
                false,
                principal,
                &self.host,
                operation,
                ResourceType::ClusterMirror,
                mirror,
            ),
        }
    }

    /// [`Self::may`], or the refusal (logged at debug).
    pub fn check(&self, operation: AclOperation, mirror: &str) -> Result<(), Forbidden> {
        match &self.caller {
            Caller::Principal(principal) if !self.may(operation, mirror) => {
                tracing::debug!(principal, host = self.host, %operation, mirror, "admin API: not authorized");
                Err(Forbidden {
                    error: CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                    message: format!("{principal} is not authorized to {operation} ClusterMirror {mirror:?}"),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether the caller may list and change the ClusterMirror ACLs:
    /// the admin token (or anyone, on an open API).
    pub fn check_acl_admin(&self) -> Result<(), Forbidden> {
        match &self.caller {
            Caller::Anyone | Caller::Admin => Ok(()),
            Caller::Principal(principal) => Err(Forbidden {
                error: CLUSTER_AUTHORIZATION_FAILED,
                message: format!(
                    "{principal} may not list or change ACLs: only the admin token (token_file) does, \
                     here; on the listener, ALTER on the cluster"
                ),
            }),
        }
    }

    /// A listing with only the mirrors the caller may DESCRIBE (other
    /// answers as they are).
    pub fn filter(&self, answer: AdminAnswer) -> AdminAnswer {
        let visible = |mirror: &str| self.may(AclOperation::Describe, mirror);
        match answer {
            AdminAnswer::Mirrors { mut mirrors } => {
                mirrors.retain(|m| visible(&m.name));
                AdminAnswer::Mirrors { mirrors }
            }
            AdminAnswer::Status { mut partitions } => {
                partitions.retain(|p| visible(&p.mirror));
                AdminAnswer::Status { partitions }
            }
            AdminAnswer::Metrics { mut metrics } => {
                metrics.partitions.retain(|p| visible(&p.view.mirror));
                metrics.mirrors.retain(|m| visible(&m.mirror));
                AdminAnswer::Metrics { metrics }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use ringmirror_dataplane::security::acls::{AclPermissionType, PatternType};

    use super::*;

    fn sha256_hex(token: &str) -> String {
        TokenDigest::of(token.as_bytes())
            .0
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn tokens_are_trimmed_visible_ascii_and_never_formatted() {
        let token = AdminToken::new(" \t abc-DEF_123.~+/=\r\n").unwrap();
        assert_eq!(token.expose(), "abc-DEF_123.~+/=");
        assert_eq!(token.authorization(), "Bearer abc-DEF_123.~+/=");
        assert_eq!(format!("{token:?}"), "AdminToken(***)");
        for bad in ["", " \n\t ", "two words", "tab\tinside", "caf\u{e9}", "nul\0"] {
            let err = AdminToken::new(bad).unwrap_err();
            assert!(!err.contains(bad.trim()) || bad.trim().is_empty(), "{err}");
        }
        assert_eq!(AdminToken::new("\n").unwrap_err(), "is empty");
        assert!(AdminToken::new("two words").unwrap_err().contains("visible ASCII"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  hunter2-token \n").unwrap();
        assert_eq!(AdminToken::read_file(&file).unwrap().expose(), "hunter2-token");
        let err = |content: &[u8]| {
            std::fs::write(&file, content).unwrap();
            let e = format!("{:#}", AdminToken::read_file(&file).unwrap_err());
            assert!(e.contains(&file.display().to_string()), "{e}");
            e
        };
        assert!(err(b"").ends_with("is empty"));
        assert!(err(b"\n\n").ends_with("is empty"));
        let e = err(b"hunter2 token\n");
        assert!(e.contains("visible ASCII") && !e.contains("hunter2"), "{e}");
        let e = err(b"hunter2\xff");
        assert!(e.contains("not ASCII") && !e.contains("hunter2"), "{e}");
        let e = err(&vec![b'a'; TOKEN_FILE_BYTES_MAX as usize + 1]);
        assert!(e.contains("larger than 4096 bytes"), "{e}");
        std::fs::write(&file, vec![b'a'; TOKEN_FILE_BYTES_MAX as usize]).unwrap();
        assert_eq!(AdminToken::read_file(&file).unwrap().expose().len(), 4096);
        let missing = dir.path().join("missing");
        let e = format!("{:#}", AdminToken::read_file(&missing).unwrap_err());
        assert!(
            e.starts_with(&format!("cannot read the admin token file {}: ", missing.display())),
            "{e}"
        );
        let e = format!("{:#}", AdminToken::read_file(dir.path()).unwrap_err());
        assert!(e.contains("cannot read the admin token file"), "{e}");
    }

    #[test]
    fn digests_match_only_the_token() {
        let d = AdminToken::new("token").unwrap().digest();
        assert!(d.matches(&TokenDigest::of(b"token")));
        for other in [&b""[..], b"toke", b"token ", b"tokem", b"Token", b"tokentoken"] {
            assert!(!d.matches(&TokenDigest::of(other)), "{other:?}");
        }
        // The file's form is the hex SHA-256 sha256sum prints.
        assert_eq!(
            sha256_hex("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn the_principals_file_maps_token_digests_to_principals() {
        let text = format!(
            "# who manages mirrors\n\nUser:oncall  sha256:{}\n  User:grafana\tsha256:{}  # read-only\nUser:oncall sha256:{}\n",
            sha256_hex("oncall-1"),
            sha256_hex("grafana").to_uppercase(),
            sha256_hex("oncall-2"),
        );
        let principals = AdminPrincipals::parse(&text).unwrap();
        assert_eq!(principals.len(), 3);
        assert_eq!(format!("{principals:?}"), "AdminPrincipals { tokens: 3 }");
        let find = |token: &str| principals.find(&TokenDigest::of(token.as_bytes())).map(str::to_owned);
        assert_eq!(find("oncall-1").as_deref(), Some("User:oncall"));
        assert_eq!(find("oncall-2").as_deref(), Some("User:oncall"));
        assert_eq!(find("grafana").as_deref(), Some("User:grafana"));
        assert_eq!(find("grafana "), None);
        assert_eq!(find(&sha256_hex("grafana")), None, "the hash is no token");
        assert!(AdminPrincipals::parse("# nothing\n").unwrap().is_empty());

        let secret = "pasted-raw-token-0123456789";
        let hash = sha256_hex("x");
        for (text, says) in [
            (
                "User:a\n".to_owned(),
                "line 1: expected `User:<name> sha256:<64 hex digits>`",
            ),
            (
                format!("\nUser:a {secret}\n"),
                "line 2: the token hash is not sha256:<64 hex digits>",
            ),
            (
                format!("User:a sha256:{}\n", &hash[1..]),
                "line 1: the token hash is not",
            ),
            (
                format!("User:a sha256:{}zz\n", &hash[2..]),
                "line 1: the token hash is not",
            ),
            (format!("User:a sha256:{hash} {secret}\n"), "line 1: expected"),
            (
                format!("{secret} sha256:{hash}\n"),
                "line 1: the principal is not of the form Type:name",
            ),
            (
                format!("User:* sha256:{hash}\n"),
                "line 1: the principal is not of the form",
            ),
            (
                format!(":a sha256:{hash}\n"),
                "line 1: the principal is not of the form",
            ),
            (
                format!("User:a sha256:{hash}\n#\nUser:b sha256:{hash}\n"),
                "line 3: the same token hash as line 1",
            ),
        ] {
            let e = AdminPrincipals::parse(&text).unwrap_err();
            assert!(e.starts_with(says), "{text:?}: {e}");
            assert!(!e.contains(secret), "{e}");
        }

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("principals");
        std::fs::write(&file, format!("User:a sha256:{hash}\nUser:b {secret}\n")).unwrap();
        let e = format!("{:#}", AdminPrincipals::read_file(&file).unwrap_err());
        assert!(
            e.starts_with(&format!("the admin principals file {}: line 2: ", file.display())) && !e.contains(secret),
            "{e}"
        );
        let e = format!(
            "{:#}",
            AdminPrincipals::read_file(&dir.path().join("nope")).unwrap_err()
        );
        assert!(e.starts_with("cannot read the admin principals file"), "{e}");
    }

    #[test]
    fn callers_are_the_admin_a_principal_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let acls = Arc::new(AclStore::open(dir.path().join("acls")).unwrap());
        let principals = AdminPrincipals::parse(&format!("User:ro sha256:{}\n", sha256_hex("ro-token"))).unwrap();
        let admin = AdminToken::new("admin-token").unwrap();
        let auth = AdminAuth::new(Some(&admin), Some(principals.clone()), Some(Arc::clone(&acls))).unwrap();
        assert!(auth.required());
        assert_eq!(auth.authenticate(&bearer("admin-token")), Ok(Caller::Admin));
        assert_eq!(
            auth.authenticate(&bearer("ro-token")),
            Ok(Caller::Principal("User:ro".into()))
        );
        assert_eq!(
            auth.authenticate(&bearer("nope")),
            Err("the bearer token is not the admin API's")
        );
        assert!(auth.authenticate(&HeaderMap::new()).is_err());
        // Principals only: no superuser.
        let auth = AdminAuth::new(None, Some(principals.clone()), Some(Arc::clone(&acls))).unwrap();
        assert!(auth.authenticate(&bearer("admin-token")).is_err());
        // Nothing configured: open.
        assert_eq!(AdminAuth::open().authenticate(&HeaderMap::new()), Ok(Caller::Anyone));
        // The admin token may not also be a principal's; principals need ACLs.
        let clash = AdminToken::new("ro-token").unwrap();
        let e = AdminAuth::new(Some(&clash), Some(principals.clone()), Some(acls))
            .err()
            .unwrap();
        assert!(format!("{e}").contains("also a principal's token"), "{e}");
        assert!(AdminAuth::new(None, Some(principals), None).is_err());
    }

    fn mirror_acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
        perm: AclPermissionType,
    ) -> AclBinding {
        AclBinding::from_any_host(ResourceType::ClusterMirror, name, pattern, principal, op, perm)
    }

    #[test]
    fn principals_get_what_the_cluster_mirror_acls_say() {
        use AclOperation::{All, Alter, Create, Describe, Read};
        use AclPermissionType::{Allow, Deny};
        use PatternType::{Literal, Prefixed};
        let dir = tempfile::tempdir().unwrap();
        let acls = Arc::new(AclStore::open(dir.path().join("acls")).unwrap());
        acls.create(&[
            mirror_acl("dr", Literal, "User:ro", Describe, Allow),
            mirror_acl("*", Literal, "User:ops", Alter, Allow),
            mirror_acl("secret", Literal, "User:ops", All, Deny),
            mirror_acl("prod-", Prefixed, "User:dev", Create, Allow),
            mirror_acl("x", Literal, "User:reader", Read, Allow),
            // Another resource type's ACL of the same name counts for nothing.
            AclBinding::from_any_host(ResourceType::Topic, "dr", Literal, "User:dev", All, Allow),
        ])
        .unwrap();
        let principals = AdminPrincipals::parse("").unwrap();
        let auth = AdminAuth::new(None, Some(principals), Some(acls)).unwrap();
        let access = |p: &str| auth.access(Caller::Principal(p.into()), "127.0.0.1".into());
        let (ro, ops, dev, reader) = (
            access("User:ro"),
            access("User:ops"),
            access("User:dev"),
            access("User:reader"),
        );
        assert!(ro.may(Describe, "dr"));
        assert!(!ro.may(Alter, "dr") && !ro.may(Describe, "other") && !ro.may(Create, "dr"));
        // ALTER implies DESCRIBE; `*` is every mirror; DENY beats ALLOW.
        assert!(ops.may(Alter, "dr") && ops.may(Describe, "anything"));
        assert!(!ops.may(Alter, "secret") && !ops.may(Describe, "secret"));
        assert!(!ops.may(Create, "dr"));
        // A prefix; CREATE implies nothing else.
        assert!(dev.may(Create, "prod-eu") && !dev.may(Create, "staging"));
        assert!(!dev.may(Describe, "prod-eu") && !dev.may(Describe, "dr"));
        // READ implies DESCRIBE, as in Kafka.
        assert!(reader.may(Describe, "x") && !reader.may(Alter, "x"));
        assert_eq!(
            ro.check(Alter, "dr"),
            Err(Forbidden {
                error: "CLUSTER_MIRROR_AUTHORIZATION_FAILED",
                message: r#"User:ro is not authorized to ALTER ClusterMirror "dr""#.into(),
            })
        );
        assert_eq!(ro.check_acl_admin().unwrap_err().error, "CLUSTER_AUTHORIZATION_FAILED");
        for everyone in [auth.access(Caller::Admin, "h".into()), Access::open()] {
            assert!(everyone.may(Create, "any") && everyone.check_acl_admin().is_ok());
        }
    }
}
