//! `ringmirror mirror …`, `ringmirror status` and `ringmirror acls …`: the
//! operator's CLI over a running agent's admin API (see
//! `ringmirror_control::admin::http` for the routes).
//!
//! The client is ureq, blocking: one request per command (or per redraw
//! with `status --watch`), so nothing here needs an async runtime. An
//! `https://` URL is spoken with rustls, trusting the CA file of
//! `--admin-ca-location` (or `$RINGMIRROR_ADMIN_CA_LOCATION`), else the
//! system's CA store.
//! Answers print as aligned tables, or as the API's JSON with `--json`. A
//! refused request prints the server's message and exits 1 (through `main`).
//! With `--admin-token-file` (or `$RINGMIRROR_ADMIN_TOKEN_FILE`) every
//! request carries the file's bearer token; a 401 says whether the token
//! was refused or missing, never what it is; a 403 names the error
//! (`CLUSTER_MIRROR_AUTHORIZATION_FAILED`) and what was refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use ringmirror_control::admin::http::AdminToken;
use ringmirror_control::admin::{
    AclsBody, AdminAnswer, ErrorBody, MirrorAcl, MirrorDescription, MirrorSummary, PartitionView, TopicsBody,
    VerifyBody, VerifyJob,
};
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_dataplane::security::acls::{AclOperation, AclPermissionType, PatternType};
use ringmirror_storage::clock::now_ms;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

/// The environment variable naming the admin API's URL.
pub const ADMIN_ENV: &str = "RINGMIRROR_ADMIN";

/// The environment variable naming the file that holds the admin API's
/// bearer token.
pub const ADMIN_TOKEN_FILE_ENV: &str = "RINGMIRROR_ADMIN_TOKEN_FILE";

/// The environment variable naming the PEM file of the CAs that sign the
/// admin API's certificate.
pub const ADMIN_CA_LOCATION_ENV: &str = "RINGMIRROR_ADMIN_CA_LOCATION";

/// How long connecting to the admin API may take (TLS handshake included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the CLI finds the admin API.
#[derive(Args, Debug)]
pub struct AdminArgs {
    /// The agent's admin API URL [default: $RINGMIRROR_ADMIN, else http://127.0.0.1:9644].
    #[arg(long, global = true, value_name = "URL")]
    pub admin: Option<String>,
    /// A file holding the admin API's bearer token (the agent's `[admin]
    /// token_file`) [default: $RINGMIRROR_ADMIN_TOKEN_FILE, else none].
    #[arg(long, global = true, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
    /// A PEM file of the CAs that sign the admin API's certificate, for an
    /// https:// URL [default: $RINGMIRROR_ADMIN_CA_LOCATION, else the
    /// system's CA store].
    #[arg(long, global = true, value_name = "PATH")]
    pub admin_ca_location: Option<PathBuf>,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum MirrorCommand {
    /// Create a mirror from flags, or from a TOML file in a `[[mirror]]` table's shape (flags override the file).
    Create(Box<CreateArgs>),
    /// Replace a mirror's definition (same arguments as create; the name
    /// must be the mirror's): topics no longer selected stop, new ones start.
    Update(Box<CreateArgs>),
    /// Run the mirror's metadata sync (topics, configs, groups, ACLs) now.
    Sync {
        /// The mirror's name.
        name: String,
    },
    /// List the mirrors with their partition counts per state.
    List,
    /// Show a mirror's definition, sync status and partitions.
    Describe {
        /// The mirror's name.
        name: String,
    },
    /// Add topics to a mirror (by name).
    AddTopics {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated.
        #[arg(required = true, value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Remove topics from a mirror: their partitions stop being fetched (the data stays).
    RemoveTopics {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated.
        #[arg(required = true, value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Pause mirroring of the named topics (default: all of the mirror's topics).
    Pause {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Resume paused topics (default: all).
    Resume {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Fail over: stop mirroring the topics and make them writable (default: all).
    Stop {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Restart FAILED partitions of the topics (default: all).
    Restart {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Compare every batch the topics' (default: all) partitions hold with
    /// the source's (CRCs and lengths), online and rate-limited; prints per
    /// partition `identical` or the first differing offset. Exit status 0:
    /// identical, 1: a difference, 3: could not complete.
    Verify {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
        /// Compare batches from this offset on (default: the log start).
        #[arg(long, default_value_t = 0)]
        from_offset: i64,
        /// At most this many MiB of our batches read per second and partition.
        #[arg(long, default_value_t = 32)]
        rate_mib_per_s: u64,
    },
    /// Compare the last batches of the topics' (default: all) partitions
    /// with the source's now; a difference is cut and shown by `describe`.
    Check {
        /// The mirror's name.
        name: String,
        /// Topics, space- or comma-separated; none: every topic of the mirror.
        #[arg(value_delimiter = ',')]
        topics: Vec<String>,
    },
    /// Forget a mirror: its partitions stop being fetched and stay on disk, read-only.
    Delete {
        /// The mirror's name.
        name: String,
    },
}

/// `ringmirror acls …`: the ClusterMirror ACLs — who may create, alter or
/// describe which mirrors through the admin API. Listing and changing
/// them takes the admin token.
#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// List the ClusterMirror ACLs.
    List,
    /// Allow (or with --deny, deny) a principal operations on mirrors.
    Create(AclArgs),
    /// Delete exactly these ACLs (the same flags as create).
    Delete(AclArgs),
}

/// One or more ClusterMirror ACLs: one per operation.
#[derive(Args, Debug, Clone)]
pub struct AclArgs {
    /// The principal: User:<name>, or User:* for every one.
    #[arg(long)]
    pub principal: String,
    /// Operations, comma-separated: create, alter, describe, all.
    #[arg(long = "operation", required = true, value_delimiter = ',')]
    pub operations: Vec<AclOperation>,
    /// The mirror's name, or * for every mirror (with --prefixed: a prefix of names).
    #[arg(long)]
    pub mirror: String,
    /// --mirror is a prefix (a PREFIXED pattern).
    #[arg(long)]
    pub prefixed: bool,
    /// Deny rather than allow (a DENY wins over any ALLOW).
    #[arg(long)]
    pub deny: bool,
    /// The client IP address the ACLs apply to; * is any.
    #[arg(long, default_value = "*")]
    pub host: String,
}

impl AclArgs {
    fn body(&self) -> AclsBody {
        let acls = self
            .operations
            .iter()
            .map(|&operation| MirrorAcl {
                principal: self.principal.clone(),
                operation,
                mirror: self.mirror.clone(),
                pattern_type: if self.prefixed {
                    PatternType::Prefixed
                } else {
                    PatternType::Literal
                },
                permission_type: if self.deny {
                    AclPermissionType::Deny
                } else {
                    AclPermissionType::Allow
                },
                host: self.host.clone(),
            })
            .collect();
        AclsBody { acls }
    }
}

/// `mirror create`: the mirror's definition. Every flag is a
/// `MirrorConfig` field; unset ones take the file's value or the default.
#[derive(Args, Debug, Clone)]
pub struct CreateArgs {
    /// The mirror's name (unique).
    #[arg(required_unless_present = "file")]
    pub name: Option<String>,
    /// A TOML file holding the definition (the keys of a `[[mirror]]` table, at top level).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Source brokers, host:port, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        required_unless_present = "file",
        value_name = "HOST:PORT"
    )]
    pub bootstrap_servers: Vec<String>,
    /// Topics to mirror by name, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Also mirror topics matching this regex (whole name).
    #[arg(long, value_name = "REGEX")]
    pub topics_include: Option<String>,
    /// Never mirror topics matching this regex [default: __.*].
    #[arg(long, value_name = "REGEX")]
    pub topics_exclude: Option<String>,
    /// `fetch.max.bytes` of each Fetch [default: 50 MiB].
    #[arg(long, value_name = "BYTES")]
    pub fetch_max_bytes: Option<i32>,
    /// `max.partition.fetch.bytes` [default: 1 MiB].
    #[arg(long, value_name = "BYTES")]
    pub fetch_partition_max_bytes: Option<i32>,
    /// `fetch.wait.max.ms` [default: 500].
    #[arg(long, value_name = "MS")]
    pub fetch_max_wait_ms: Option<u64>,
    /// `fetch.min.bytes` [default: 1].
    #[arg(long, value_name = "BYTES")]
    pub fetch_min_bytes: Option<i32>,
    /// How often the source's metadata is read [default: 30000].
    #[arg(long, value_name = "MS")]
    pub metadata_refresh_interval_ms: Option<u64>,
    /// Metadata rounds in a row that must find a topic absent at the
    /// source (by name and id) before it is stopped [default: 3].
    #[arg(long, value_name = "ROUNDS")]
    pub topic_deletion_confirm_rounds: Option<u32>,
    /// How long a topic must be absent at the source, at least, before it
    /// is stopped [default: 120000].
    #[arg(long, value_name = "MS")]
    pub topic_deletion_confirm_ms: Option<u64>,
    /// How record bytes reach the log [default: uring].
    #[arg(long, value_parser = ["uring", "aligned_copy", "mmap"])]
    pub ingest: Option<String>,
    /// How the source is reached [default: plaintext].
    #[arg(long, value_parser = ["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"])]
    pub security_protocol: Option<String>,
    /// A PEM file on the agent's host of the CAs that sign the source's
    /// certificates (with ssl/sasl_ssl) [default: the system's CA store].
    #[arg(long, value_name = "PATH")]
    pub ssl_ca_location: Option<PathBuf>,
    /// "https" checks the certificate's host name, "none" does not (with
    /// ssl/sasl_ssl) [default: https].
    #[arg(long, value_name = "ALGORITHM", value_parser = ["https", "none", ""])]
    pub ssl_endpoint_identification_algorithm: Option<String>,
    /// Our client certificate chain (PEM) for sources that require one,
    /// with --ssl-key-location.
    #[arg(long, value_name = "PATH")]
    pub ssl_certificate_location: Option<PathBuf>,
    /// The client certificate's unencrypted private key (PEM).
    #[arg(long, value_name = "PATH")]
    pub ssl_key_location: Option<PathBuf>,
    /// SASL mechanism (with sasl_plaintext/sasl_ssl).
    #[arg(long, value_parser = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])]
    pub sasl_mechanism: Option<String>,
    #[arg(long, value_name = "USER")]
    pub sasl_username: Option<String>,
    /// SASL password (visible to other local users in the process list:
    /// prefer --sasl-password-file, or `sasl_password` in --file).
    #[arg(long, value_name = "PASSWORD")]
    pub sasl_password: Option<String>,
    /// A file on the agent's host holding the SASL password, read by the
    /// agent at each connect.
    #[arg(long, value_name = "PATH")]
    pub sasl_password_file: Option<PathBuf>,
}

impl CreateArgs {
    /// The definition: the file's table (if any) with the flags laid over
    /// it, then MirrorConfig's own defaults, normalized and validated here
    /// so that a typo fails before anything is sent.
    fn config(&self) -> anyhow::Result<MirrorConfig> {
        let mut table = match &self.file {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
                toml::from_str::<toml::Table>(&text).with_context(|| format!("in {}", path.display()))?
            }
            None => toml::Table::new(),
        };
        let mut set = |key: &str, value: Option<toml::Value>| {
            if let Some(v) = value {
                table.insert(key.into(), v);
            }
        };
        let list = |v: &[String]| {
            (!v.is_empty()).then(|| toml::Value::Array(v.iter().cloned().map(toml::Value::String).collect()))
        };
        set("name", self.name.clone().map(toml::Value::String));
        set("bootstrap_servers", list(&self.bootstrap_servers));
        set("topics", list(&self.topics));
        set("topics_include", self.topics_include.clone().map(toml::Value::String));
        set("topics_exclude", self.topics_exclude.clone().map(toml::Value::String));
        set("fetch_max_bytes", self.fetch_max_bytes.map(|v| v.into()));
        set(
            "fetch_partition_max_bytes",
            self.fetch_partition_max_bytes.map(|v| v.into()),
        );
        set("fetch_max_wait_ms", self.fetch_max_wait_ms.map(|v| (v as i64).into()));
        set("fetch_min_bytes", self.fetch_min_bytes.map(|v| v.into()));
        set(
            "metadata_refresh_interval_ms",
            self.metadata_refresh_interval_ms.map(|v| (v as i64).into()),
        );
        set(
            "topic_deletion_confirm_rounds",
            self.topic_deletion_confirm_rounds.map(|v| i64::from(v).into()),
        );
        set(
            "topic_deletion_confirm_ms",
            self.topic_deletion_confirm_ms.map(|v| (v as i64).into()),
        );
        set("ingest", self.ingest.clone().map(toml::Value::String));
        set(
            "security_protocol",
            self.security_protocol.clone().map(toml::Value::String),
        );
        set(
            "ssl_ca_location",
            self.ssl_ca_location
                .as_ref()
                .map(|p| toml::Value::String(p.display().to_string())),
        );
        for (key, path) in [
            ("ssl_certificate_location", &self.ssl_certificate_location),
            ("ssl_key_location", &self.ssl_key_location),
        ] {
            set(key, path.as_ref().map(|p| toml::Value::String(p.display().to_string())));
        }
        set(
            "ssl_endpoint_identification_algorithm",
            self.ssl_endpoint_identification_algorithm
                .clone()
                .map(toml::Value::String),
        );
        set("sasl_mechanism", self.sasl_mechanism.clone().map(toml::Value::String));
        set("sasl_username", self.sasl_username.clone().map(toml::Value::String));
        set("sasl_password", self.sasl_password.clone().map(toml::Value::String));
        set(
            "sasl_password_file",
            self.sasl_password_file
                .as_ref()
                .map(|p| toml::Value::String(p.display().to_string())),
        );
        let origin = match &self.file {
            Some(path) => format!("mirror definition ({})", path.display()),
            None => "mirror definition".to_owned(),
        };
        let mut config: MirrorConfig = toml::Value::Table(table).try_into().context(origin)?;
        config.normalize();
        config.validate()?;
        Ok(config)
    }
}

/// A blocking client of the admin API.
pub struct AdminClient {
    base: String,
    http: ureq::Agent,
    /// Sent as `Authorization: Bearer` with every request, when set.
    token: Option<AdminToken>,
}

impl AdminClient {
    /// The client `args` describe: `--admin` (see [`new`](Self::new)) and
    /// the token in `--admin-token-file`, else in the file
    /// `$RINGMIRROR_ADMIN_TOKEN_FILE` names, else none.
    pub fn from_args(args: &AdminArgs) -> anyhow::Result<Self> {
        let from_env = |name: &str| {
            std::env::var_os(name)
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
        };
        let token_file = args.admin_token_file.clone().or_else(|| from_env(ADMIN_TOKEN_FILE_ENV));
        let ca_location = args
            .admin_ca_location
            .clone()
            .or_else(|| from_env(ADMIN_CA_LOCATION_ENV));
        let mut client = Self::new(args.admin.as_deref());
        if let Some(path) = &ca_location {
            client = client.with_ca_location(path)?;
        }
        Ok(match token_file {
            Some(path) => client.with_token(AdminToken::read_file(&path)?),
            None => client,
        })
    }

    /// Sends `token` as a bearer token with every request.
    pub fn with_token(mut self, token: AdminToken) -> Self {
        self.token = Some(token);
        self
    }

    /// `url`: the `--admin` flag; else `$RINGMIRROR_ADMIN`; else the
    /// default address. A URL without a scheme is taken as `http://`; an
    /// `https://` one trusts the system's CA store (none read: every
    /// certificate is refused) unless [`with_ca_location`](Self::with_ca_location).
    pub fn new(url: Option<&str>) -> Self {
        let url = url
            .map(str::to_owned)
            .or_else(|| std::env::var(ADMIN_ENV).ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| format!("http://{}", ringmirror_control::admin::http::DEFAULT_ADDRESS));
        let base = if url.contains("://") {
            url
        } else {
            format!("http://{url}")
        };
        let base = base.trim_end_matches('/').to_owned();
        let roots = if base.starts_with("https://") {
            ringmirror_dataplane::client::ca_certificates(None).unwrap_or_default()
        } else {
            Vec::new()
        };
        Self {
            http: http_agent(&base, &roots),
            base,
            token: None,
        }
    }

    /// Trusts the CAs of the PEM file `path` for an `https://` URL (read
    /// here: a bad file fails before anything is sent).
    pub fn with_ca_location(mut self, path: &Path) -> anyhow::Result<Self> {
        let roots = ringmirror_dataplane::client::ca_certificates(Some(path))
            .map_err(anyhow::Error::msg)
            .context("the admin API's CA file (--admin-ca-location)")?;
        self.http = http_agent(&self.base, &roots);
        Ok(self)
    }

    /// One request; the JSON answer, or the server's message as the error.
    pub fn request(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        if let Some(token) = &self.token {
            // ureq drops it if a redirect leads elsewhere (the API never redirects).
            request = request.header("authorization", token.authorization());
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = request
            .body(body)
            .with_context(|| format!("bad admin API URL {url:?}"))?;
        let mut response = self
            .http
            .run(request)
            .with_context(|| format!("cannot reach the admin API at {}", self.base))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .with_context(|| format!("reading the answer to {method} {url}"))?;
        if status == 401 {
            let reason = match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => e.message,
                Err(_) => text.trim().to_owned(),
            };
            match self.token {
                Some(_) => bail!("the admin API at {} refused the token: {reason} (HTTP 401)", self.base),
                None => bail!(
                    "the admin API at {} requires a token: {reason} (HTTP 401); give the file holding it \
                     with --admin-token-file PATH or ${ADMIN_TOKEN_FILE_ENV}",
                    self.base
                ),
            }
        }
        if status == 403 {
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => bail!("{}: {} (HTTP 403)", e.error, e.message),
                Err(_) => bail!("HTTP 403 from {method} {url}: {}", text.trim()),
            }
        }
        if status >= 400 {
            match serde_json::from_str::<ErrorBody>(&text) {
                Ok(e) => bail!("{} (HTTP {status})", e.message),
                Err(_) => bail!("HTTP {status} from {method} {url}: {}", text.trim()),
            }
        }
        serde_json::from_str(&text).with_context(|| format!("the answer to {method} {url} is not JSON: {text}"))
    }
}

/// The HTTP client of `base`: over HTTPS, rustls (ring) trusting `roots`.
fn http_agent(base: &str, roots: &[CertificateDer<'static>]) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        // The server gives the coordinator 30 s; leave room for that answer.
        .timeout_global(Some(
            ringmirror_control::admin::http::REPLY_TIMEOUT + Duration::from_secs(10),
        ));
    if base.starts_with("https://") {
        let roots = roots.iter().map(|der| ureq::tls::Certificate::from_der(der).to_owned());
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::from(roots))
                .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .build(),
        );
    }
    config.build().into()
}

/// The exit status of `mirror verify` when it could not complete.
pub const VERIFY_INCOMPLETE_EXIT: u8 = 3;

/// Runs one `mirror` subcommand and returns what to print and the exit
/// status (0 but for `verify`: see [`VerifyJob::exit_code`]).
pub fn mirror(args: &AdminArgs, command: MirrorCommand) -> anyhow::Result<(String, u8)> {
    let client = AdminClient::from_args(args)?;
    if let MirrorCommand::Verify {
        name,
        topics,
        from_offset,
        rate_mib_per_s,
    } = command
    {
        let body = VerifyBody {
            topics,
            from_offset,
            bytes_per_s: rate_mib_per_s.saturating_mul(1 << 20),
        };
        let job = verify(&client, &name, &body)?;
        let code = job.exit_code();
        let text = if args.json {
            format!("{}\n", serde_json::to_string_pretty(&job)?)
        } else {
            verify_report(&job)
        };
        return Ok((text, code));
    }
    let topics = |topics: Vec<String>| Some(serde_json::json!(TopicsBody { topics }));
    let path = |name: &str, rest: &str| format!("/mirrors/{}{rest}", path_segment(name));
    let (verb, answer) = match command {
        MirrorCommand::Create(create) => {
            let config = create.config()?;
            (
                "create",
                client.request("POST", "/mirrors", Some(serde_json::json!(config)))?,
            )
        }
        MirrorCommand::Update(update) => {
            let config = update.config()?;
            let route = path(&config.name, "");
            (
                "update",
                client.request("PUT", &route, Some(serde_json::json!(config)))?,
            )
        }
        MirrorCommand::Sync { name } => ("sync", client.request("POST", &path(&name, "/sync"), None)?),
        MirrorCommand::List => ("list", client.request("GET", "/mirrors", None)?),
        MirrorCommand::Describe { name } => ("describe", client.request("GET", &path(&name, ""), None)?),
        MirrorCommand::Delete { name } => ("delete", client.request("DELETE", &path(&name, ""), None)?),
        MirrorCommand::AddTopics { name, topics: t } => (
            "add-topics",
            client.request("POST", &path(&name, "/topics"), topics(t))?,
        ),
        MirrorCommand::RemoveTopics { name, topics: t } => (
            "remove-topics",
            client.request("DELETE", &path(&name, "/topics"), topics(t))?,
        ),
        MirrorCommand::Pause { name, topics: t } => {
            ("pause", client.request("POST", &path(&name, "/pause"), topics(t))?)
        }
        MirrorCommand::Resume { name, topics: t } => {
            ("resume", client.request("POST", &path(&name, "/resume"), topics(t))?)
        }
        MirrorCommand::Stop { name, topics: t } => ("stop", client.request("POST", &path(&name, "/stop"), topics(t))?),
        MirrorCommand::Restart { name, topics: t } => {
            ("restart", client.request("POST", &path(&name, "/restart"), topics(t))?)
        }
        MirrorCommand::Check { name, topics: t } => {
            ("check", client.request("POST", &path(&name, "/check"), topics(t))?)
        }
        MirrorCommand::Verify { .. } => unreachable!("answered above"),
    };
    if args.json {
        return Ok((format!("{}\n", serde_json::to_string_pretty(&answer)?), 0));
    }
    Ok((render(verb, answer)?, 0))
}

/// How often `mirror verify` asks how far the verification got.
const VERIFY_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Starts a verification of `name` and waits until every partition has a result.
fn verify(client: &AdminClient, name: &str, body: &VerifyBody) -> anyhow::Result<VerifyJob> {
    let route = format!("/mirrors/{}/verify", path_segment(name));
    let job = |answer: Value| -> anyhow::Result<VerifyJob> {
        match serde_json::from_value(answer.clone()) {
            Ok(AdminAnswer::Verify { job }) => Ok(job),
            _ => bail!("unexpected answer from the admin API: {answer}"),
        }
    };
    let started = job(client.request("POST", &route, Some(serde_json::json!(body)))?)?;
    let mut current = started.clone();
    while !current.done {
        std::thread::sleep(VERIFY_POLL_INTERVAL);
        current = job(client.request("GET", &route, None)?)?;
        if current.id != started.id {
            bail!("another verification of {name} started meanwhile (job {})", current.id);
        }
    }
    Ok(current)
}

/// Per partition `identical`, the first differing offset, or why not done.
fn verify_report(job: &VerifyJob) -> String {
    let mut partitions = job.partitions.clone();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let mut out = String::new();
    for p in &partitions {
        let verdict = match (p.result.as_str(), p.first_differing_offset, &p.error) {
            ("identical", ..) => format!("identical ({} batches, {} bytes)", p.batches_compared, p.bytes_compared),
            ("differs", Some(offset), _) => format!("differs at offset {offset}"),
            (_, _, Some(error)) => format!("not completed: {error}"),
            (result, ..) => result.to_owned(),
        };
        let _ = writeln!(out, "{}-{}: {verdict}", p.topic, p.partition);
    }
    if partitions.is_empty() {
        let _ = writeln!(out, "no mirroring partition to verify in {}", job.mirror);
    }
    out
}

/// Runs one `acls` subcommand and returns what to print.
pub fn acls(args: &AdminArgs, command: AclCommand) -> anyhow::Result<String> {
    let client = AdminClient::from_args(args)?;
    let (verb, answer) = match command {
        AclCommand::List => ("list", client.request("GET", "/acls", None)?),
        AclCommand::Create(acl) => (
            "create",
            client.request("POST", "/acls", Some(serde_json::json!(acl.body())))?,
        ),
        AclCommand::Delete(acl) => (
            "delete",
            client.request("DELETE", "/acls", Some(serde_json::json!(acl.body())))?,
        ),
    };
    if args.json {
        return Ok(format!(
            "{}
",
            serde_json::to_string_pretty(&answer)?
        ));
    }
    render(verb, answer)
}

/// `ringmirror status`: the partitions table once, or redrawn every
/// interval until Ctrl-C with `watch`.
pub fn status(args: &AdminArgs, watch: bool, interval: Duration) -> anyhow::Result<()> {
    use std::io::Write;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let client = AdminClient::from_args(args)?;
    let screen = |answer: anyhow::Result<Value>| -> anyhow::Result<String> {
        let answer = answer?;
        if args.json {
            // One JSON document per line while watching, so it can be piped.
            return Ok(if watch {
                format!("{answer}\n")
            } else {
                format!("{}\n", serde_json::to_string_pretty(&answer)?)
            });
        }
        render("status", answer)
    };
    if !watch {
        print!("{}", screen(client.request("GET", "/status", None))?);
        return Ok(());
    }
    // Ctrl-C ends the watch between redraws, leaving the last table on screen.
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&interrupted))?;
    }
    let mut out = std::io::stdout().lock();
    while !interrupted.load(Ordering::Acquire) {
        let drawn = screen(client.request("GET", "/status", None));
        if args.json {
            // An unreachable agent is worth a line on stderr, not the end of the watch.
            match drawn {
                Ok(line) => out.write_all(line.as_bytes())?,
                Err(e) => eprintln!("error: {e:#}"),
            }
        } else {
            let body = drawn.unwrap_or_else(|e| format!("error: {e:#}\n"));
            let heading = format!(
                "ringmirror status  {}  every {} ms  {}  (Ctrl-C to stop)\n\n",
                client.base,
                interval.as_millis(),
                utc_time(now_ms())
            );
            // Home the cursor and clear the screen, then draw.
            write!(out, "\x1b[H\x1b[2J{heading}{body}")?;
        }
        out.flush()?;
        let until = std::time::Instant::now() + interval;
        while std::time::Instant::now() < until && !interrupted.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
    Ok(())
}

/// The human rendering of an answer.
fn render(verb: &str, answer: Value) -> anyhow::Result<String> {
    let answer: AdminAnswer = serde_json::from_value(answer.clone())
        .with_context(|| format!("unexpected answer from the admin API: {answer}"))?;
    Ok(match answer {
        AdminAnswer::Accepted { mirror, partitions } => {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for p in partitions {
                by_topic.entry(p.topic).or_default().push(p.partition);
            }
            let count: usize = by_topic.values().map(Vec::len).sum();
            let mut out = format!("{verb} {mirror}: accepted ({count} partitions)\n");
            for (topic, mut ps) in by_topic {
                ps.sort_unstable();
                let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                let _ = writeln!(out, "  {topic}: {}", ps.join(", "));
            }
            out
        }
        AdminAnswer::Mirrors { mirrors } => mirrors_table(&mirrors),
        AdminAnswer::Mirror { mirror } => describe(&mirror),
        AdminAnswer::Status { partitions } => partitions_table(partitions),
        AdminAnswer::Metrics { .. } => bail!("unexpected metrics answer to {verb}"),
        AdminAnswer::Acls { acls } => acls_table(verb, acls),
        AdminAnswer::Verify { job } => verify_report(&job),
    })
}

/// ClusterMirror ACLs: all of them (`list`), or those a change made.
fn acls_table(verb: &str, acls: Vec<MirrorAcl>) -> String {
    let mut out = match verb {
        "create" => format!("created {} ACL(s) (those already there are not counted)\n", acls.len()),
        "delete" => format!("deleted {} ACL(s)\n", acls.len()),
        _ => String::new(),
    };
    if acls.is_empty() {
        return out;
    }
    let rows = acls
        .into_iter()
        .map(|a| {
            vec![
                a.principal,
                a.permission_type.to_string(),
                a.operation.to_string(),
                a.mirror,
                a.pattern_type.to_string(),
                a.host,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            ("PRINCIPAL", false),
            ("PERMISSION", false),
            ("OPERATION", false),
            ("MIRROR", false),
            ("PATTERN", false),
            ("HOST", false),
        ],
        rows,
    ));
    out
}

fn mirrors_table(mirrors: &[MirrorSummary]) -> String {
    let rows = mirrors
        .iter()
        .map(|m| {
            let states: Vec<String> = m.states.iter().map(|(s, n)| format!("{s}={n}")).collect();
            vec![
                m.name.clone(),
                m.bootstrap_servers.join(","),
                m.source_cluster_id.clone().unwrap_or_else(|| "-".into()),
                m.partitions.to_string(),
                states.join(" "),
            ]
        })
        .collect();
    table(
        &[
            ("NAME", false),
            ("BOOTSTRAP-SERVERS", false),
            ("SOURCE-CLUSTER", false),
            ("PARTITIONS", true),
            ("STATES", false),
        ],
        rows,
    )
}

/// A mirror's security settings, the password as "***" whatever the
/// answer held.
fn security(c: &MirrorConfig) -> String {
    match c.sasl_client() {
        None => "plaintext".into(),
        Some(sasl) => {
            let password = match &c.sasl_password_file {
                Some(path) => format!("from {}", path.display()),
                None => ringmirror_protocol::sasl::REDACTED.into(),
            };
            format!(
                "sasl_plaintext {} user={} password={password}",
                sasl.mechanism, sasl.username
            )
        }
    }
}

fn describe(d: &MirrorDescription) -> String {
    let c = &d.config;
    let or_dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
    let fields = [
        ("name", c.name.clone()),
        ("bootstrap servers", c.bootstrap_servers.join(", ")),
        ("source cluster id", or_dash(d.source_cluster_id.as_deref())),
        ("created", utc_time(d.created_ms)),
        ("topics (named)", c.topics.join(", ")),
        ("topics include", or_dash(c.topics_include.as_deref())),
        ("topics exclude", c.topics_exclude.clone()),
        ("topics mirrored", d.topics.join(", ")),
        (
            "fetch",
            format!(
                "max_bytes={} partition_max_bytes={} max_wait_ms={} min_bytes={}",
                c.fetch_max_bytes, c.fetch_partition_max_bytes, c.fetch_max_wait_ms, c.fetch_min_bytes
            ),
        ),
        (
            "metadata refresh",
            format!("every {} ms", c.metadata_refresh_interval_ms),
        ),
        (
            "topic deletion",
            format!(
                "confirmed after {} rounds over at least {} ms",
                c.topic_deletion_confirm_rounds, c.topic_deletion_confirm_ms
            ),
        ),
        (
            "ingest",
            serde_json::json!(c.ingest).as_str().unwrap_or_default().to_owned(),
        ),
        (
            "last sync",
            d.last_sync_ms.map(utc_time).unwrap_or_else(|| "never".into()),
        ),
        ("sync error", or_dash(d.sync_error.as_deref())),
        ("security", security(c)),
        (
            "groups",
            format!(
                "{} (exclude: {})",
                c.groups_include,
                or_dash(c.groups_exclude.as_deref())
            ),
        ),
        ("acls", if d.acls.is_empty() { "-".into() } else { d.acls.clone() }),
        (
            "groups synced",
            d.groups_synced_ms.map(utc_time).unwrap_or_else(|| "never".into()),
        ),
    ];
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in fields {
        let _ = writeln!(out, "{:<width$} {value}", format!("{key}:"));
    }
    for (topic, outcome) in &d.topic_configs {
        let _ = writeln!(out, "  topic {topic} configs: {outcome}");
    }
    for check in &d.topic_checks {
        let _ = writeln!(out, "  topic {}: {}", check.topic, topic_check(check));
    }
    for (group, outcome) in &d.groups {
        let _ = writeln!(out, "  group {group}: {outcome}");
    }
    for e in &d.partition_events {
        let _ = writeln!(
            out,
            "  partition {}-{}: diverged from the source at offset {}, truncated to {} ({} bytes lost) at {}",
            e.topic,
            e.partition,
            e.first_differing_offset,
            e.truncated_to,
            e.bytes_lost,
            utc_time(e.at_ms)
        );
    }
    out.push('\n');
    out.push_str(&partitions_table(d.partitions.clone()));
    out
}

/// A pending deletion (or a sync error) of a mirrored topic, in words.
fn topic_check(c: &ringmirror_control::metadata_sync::deletion::TopicCheck) -> String {
    let brokers = c.brokers.iter().map(i32::to_string).collect::<Vec<_>>().join(", ");
    let evidence = if c.by_id { "by name and id" } else { "by name" };
    let pending = format!(
        "round {} of {} (and at least {} ms); brokers {brokers}; {evidence}",
        c.round, c.rounds_min, c.confirm_ms
    );
    match c.kind.as_str() {
        "sync_error" => format!(
            "sync error: {} at {} (not stopped for it)",
            ringmirror_control::metadata_sync::deletion::error_name(c.error_code.unwrap_or_default()),
            utc_time(c.since_ms)
        ),
        "recreated" => format!(
            "recreated at the source as {}; {} absent since {}, {pending}",
            c.new_topic_id.as_deref().unwrap_or("-"),
            c.topic_id,
            utc_time(c.since_ms)
        ),
        _ => format!("absent at the source since {}, {pending}", utc_time(c.since_ms)),
    }
}

/// The status table, sorted, with each partition's error (if any) below.
fn partitions_table(mut partitions: Vec<PartitionView>) -> String {
    partitions.sort_by(|a, b| (&a.mirror, &a.topic, a.partition).cmp(&(&b.mirror, &b.topic, b.partition)));
    let offset = |o: i64| if o < 0 { "-".to_owned() } else { o.to_string() };
    let rows = partitions
        .iter()
        .map(|p| {
            vec![
                p.mirror.clone(),
                p.topic.clone(),
                p.partition.to_string(),
                p.state.clone(),
                offset(p.source_offset),
                offset(p.destination_offset),
                p.lag_messages.to_string(),
                format!("{:.1}", p.lag_seconds),
            ]
        })
        .collect();
    let mut out = table(
        &[
            ("MIRROR", false),
            ("TOPIC", false),
            ("PARTITION", true),
            ("STATE", false),
            ("SOURCE-OFFSET", true),
            ("DEST-OFFSET", true),
            ("LAG", true),
            ("LAG-S", true),
        ],
        rows,
    );
    for p in partitions.iter().filter(|p| p.error.is_some()) {
        let _ = writeln!(
            out,
            "{}/{}-{}: {}",
            p.mirror,
            p.topic,
            p.partition,
            p.error.as_deref().unwrap_or_default()
        );
    }
    out
}

/// Columns aligned to their widest cell (`true`: right-aligned, for
/// numbers), two spaces apart, no trailing spaces.
fn table(headers: &[(&str, bool)], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|(h, _)| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for ((cell, width), (_, right)) in row.iter().zip(&widths).zip(headers) {
            if !line.is_empty() {
                line.push_str("  ");
            }
            let pad = width - cell.chars().count();
            if *right {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Percent-encodes a path segment (mirror names are plain, but a typo
/// should reach the server as the name typed, not as another path).
fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS UTC` (days to a civil date by Howard Hinnant's
/// algorithm; not worth a date crate for two fields).
fn utc_time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_dates_format() {
        let t = table(
            &[("NAME", false), ("N", true)],
            vec![vec!["a".into(), "1".into()], vec!["longer".into(), "100".into()]],
        );
        assert_eq!(t, "NAME      N\na         1\nlonger  100\n");
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn create_flags_override_the_file_and_defaults_apply() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.toml");
        std::fs::write(
            &file,
            "name = \"dr\"\nbootstrap_servers = [\"f:1\"]\ntopics = [\"a\"]\n",
        )
        .unwrap();
        let args = CreateArgs {
            name: None,
            file: Some(file),
            bootstrap_servers: vec!["x:1".into(), "y:2".into()],
            topics: vec![],
            topics_include: None,
            topics_exclude: None,
            fetch_max_bytes: Some(1024),
            fetch_partition_max_bytes: None,
            fetch_max_wait_ms: Some(100),
            fetch_min_bytes: None,
            metadata_refresh_interval_ms: None,
            topic_deletion_confirm_rounds: Some(5),
            topic_deletion_confirm_ms: None,
            ingest: Some("mmap".into()),
            security_protocol: None,
            ssl_ca_location: None,
            ssl_endpoint_identification_algorithm: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            sasl_password_file: None,
        };
        let c = args.config().unwrap();
        assert_eq!(
            (c.name.as_str(), c.topics.as_slice()),
            ("dr", ["a".to_owned()].as_slice())
        );
        assert_eq!(c.bootstrap_servers, ["x:1", "y:2"]);
        assert_eq!(
            (c.fetch_max_bytes, c.fetch_max_wait_ms, c.fetch_min_bytes),
            (1024, 100, 1)
        );
        assert_eq!(c.ingest, ringmirror_dataplane::fetch::IngestMode::Mmap);
        assert_eq!(
            (c.topic_deletion_confirm_rounds, c.topic_deletion_confirm_ms),
            (5, 120_000)
        );
        let tls = CreateArgs {
            security_protocol: Some("ssl".into()),
            ssl_ca_location: Some("/etc/ca.pem".into()),
            ssl_endpoint_identification_algorithm: Some("none".into()),
            ..args.clone()
        }
        .config()
        .unwrap();
        assert_eq!(
            tls.tls_client(),
            Some(ringmirror_dataplane::client::TlsClientConfig {
                ca_file: Some("/etc/ca.pem".into()),
                verify_hostname: false,
                client_cert: None,
                pinned_certificate: None,
            })
        );
        let bad = CreateArgs {
            topics_include: None,
            file: None,
            name: Some("dr".into()),
            ..args
        };
        // No topics at all: refused before anything is sent.
        assert!(format!("{:#}", bad.config().unwrap_err()).contains("names no topics"));
    }
}
