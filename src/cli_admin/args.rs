//! The admin CLI's arguments: where the admin API is, the `mirror` and
//! `acls` subcommands, and a mirror's definition from flags and a file.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use ringmirror_control::admin::{AclsBody, MirrorAcl};
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_dataplane::security::acls::{AclOperation, AclPermissionType, PatternType};

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
    pub(super) fn body(&self) -> AclsBody {
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
    #[arg(long, value_parser = ["uring", "uring_sqpoll", "aligned_copy", "mmap"])]
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
    pub(super) fn config(&self) -> anyhow::Result<MirrorConfig> {
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
