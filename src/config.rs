//! The agent's TOML configuration: the data directory, shard count, log
//! settings, the client listener, and the mirrors (source cluster, topics,
//! fetch settings).
//!
//! ```toml
//! data_dir = "/var/lib/ringmirror"
//! shards = 2                      # default: one per core
//!
//! [log]
//! segment_bytes = 1073741824
//!
//! [listener]                     # serve Kafka clients (optional)
//! address = "0.0.0.0:9092"
//! advertised_host = "mirror-1.example.com"
//! sasl_mechanisms = ["SCRAM-SHA-256"]   # optional: clients must authenticate
//! authorizer = "acl"              # optional: enforce the ACLs (default "none")
//! auto_create_topics_enable = true   # Kafka's auto.create.topics.enable
//! num_partitions = 1                 # Kafka's num.partitions
//! super_users = ["User:admin"]
//! [[listener.users]]
//! name = "reader"
//! password = "..."
//!
//! [groups]                       # consumer groups (optional; Kafka's defaults)
//! consumer_heartbeat_interval_ms = 5000
//! consumer_session_timeout_ms = 45000
//!
//! [admin]                        # the admin API and /metrics (optional)
//! address = "127.0.0.1:9644"
//! token_file = "/etc/ringmirror/admin-token"  # optional: require a bearer token
//! principals_file = "/etc/ringmirror/admin-principals"  # optional: per-mirror ACLs
//! ssl_certificate_location = "/etc/ringmirror/admin.pem"  # optional: HTTPS
//! ssl_key_location = "/etc/ringmirror/admin.key"
//!
//! [[mirror]]
//! name = "dr"
//! bootstrap_servers = ["kafka-1:9092"]
//! topics = ["orders"]             # and/or:
//! topics_include = "payments\\..*"
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use ringmirror_control::admin::http::{AdminPrincipals, AdminSecurity, AdminToken};
pub use ringmirror_control::mirror::MirrorConfig;
use ringmirror_protocol::sasl::{Mechanism, Secret};
use ringmirror_storage::log::LogConfig;
use serde::Deserialize;

/// The user the agent authenticates as at its own SASL listener (the
/// control plane's group and ACL sync connections), with a random
/// password made at each start; no configured user may take the name.
pub const AGENT_SASL_USER: &str = "__ringmirror_agent";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub data_dir: PathBuf,
    /// Shard executors; default: one per available core.
    #[serde(default)]
    pub shards: Option<usize>,
    /// How often recovery points are checkpointed while running (Kafka's
    /// `log.flush.offset.checkpoint.interval.ms`); bounds the re-scan after a crash.
    #[serde(default = "default_offset_checkpoint_interval_ms")]
    pub offset_checkpoint_interval_ms: u64,
    /// Telemetry events (progress, fetch statistics, checkpoint offsets)
    /// that may wait in each event queue before more are dropped and
    /// counted; state events (acknowledgements, stops) are never dropped.
    #[serde(default = "default_telemetry_events_queued_max")]
    pub telemetry_events_queued_max: usize,
    #[serde(default)]
    pub log: LogConfig,
    /// Where Kafka clients connect; without it the agent serves no clients.
    #[serde(default)]
    pub listener: Option<ListenerConfig>,
    /// The admin API (HTTP/JSON) and `/metrics`; without it there is none.
    #[serde(default)]
    pub admin: Option<AdminConfig>,
    /// The group coordinators' settings (Kafka's `group.consumer.*`).
    #[serde(default)]
    pub groups: GroupsConfig,
    /// Partitions of the `__mirror_state` log that mirror partitions hash
    /// onto (Kafka's `mirror.topic.num.partitions`).
    #[serde(default = "default_mirror_topic_num_partitions")]
    pub mirror_topic_num_partitions: u32,
    #[serde(default, rename = "mirror")]
    pub mirrors: Vec<MirrorConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Address to bind (every shard accepts on it); port 0 picks a free one.
    pub address: std::net::SocketAddr,
    /// Host clients are told to connect to; default: the bound address
    /// (127.0.0.1 when bound to all interfaces).
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// Port clients are told to connect to (behind a proxy or NAT);
    /// default: the bound port.
    #[serde(default)]
    pub advertised_port: Option<u16>,
    /// This agent's broker id in Metadata answers.
    #[serde(default, alias = "broker_id")]
    pub node_id: i32,
    /// Cluster id clients see; default: generated once and kept in
    /// `meta.properties` in the data directory.
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// Largest request a client may send (Kafka's `socket.request.max.bytes`).
    #[serde(default = "default_max_request_bytes", alias = "socket_request_max_bytes")]
    pub max_request_bytes: usize,
    /// Send records with sendfile (no copy) rather than through a buffer.
    #[serde(default = "default_true")]
    pub zero_copy: bool,
    /// Close a connection that sends nothing for this long.
    #[serde(default = "default_connections_max_idle_ms")]
    pub connections_max_idle_ms: u64,
    /// "each_shard" (SO_REUSEPORT) or "one_acceptor" (shard 0 hands
    /// connections out in turn).
    #[serde(default)]
    pub accept: ringmirror_dataplane::kafka::AcceptMode,
    /// SASL mechanisms clients must authenticate with (PLAIN,
    /// SCRAM-SHA-256, SCRAM-SHA-512); empty (the default): no SASL.
    #[serde(default)]
    pub sasl_mechanisms: Vec<Mechanism>,
    /// The users SASL authenticates (`[[listener.users]]`).
    #[serde(default)]
    pub users: Vec<ListenerUser>,
    /// A TOML file with more `[[users]]` (name, password), read at start.
    #[serde(default)]
    pub users_file: Option<PathBuf>,
    /// "none" (the default: ACLs are stored and served, not enforced) or
    /// "acl" (enforced, Kafka's StandardAuthorizer semantics; needs SASL).
    #[serde(default)]
    pub authorizer: ringmirror_dataplane::security::AuthorizerMode,
    /// Principals (`User:name`) allowed everything (Kafka's `super.users`).
    /// The agent's own principal always is.
    #[serde(default)]
    pub super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`: whether a resource no ACL
    /// names is open to everyone.
    #[serde(default)]
    pub allow_everyone_if_no_acl_found: bool,
    /// TLS on every connection (a Kafka SSL listener, SASL_SSL with
    /// `sasl_mechanisms`): PEM files of the certificate chain and its
    /// unencrypted private key, read at start. Both or neither.
    #[serde(default)]
    pub ssl_certificate_location: Option<PathBuf>,
    #[serde(default)]
    pub ssl_key_location: Option<PathBuf>,
    /// Kafka's `auto.create.topics.enable`: a Metadata request naming a
    /// topic the agent does not have creates it as a local topic (unless
    /// the request says not to, the name is internal, or a mirror's topic
    /// filter covers it).
    #[serde(default = "default_true")]
    pub auto_create_topics_enable: bool,
    /// Kafka's `num.partitions`: partitions of an auto-created topic, and
    /// of a CreateTopics topic that leaves the count to the broker.
    #[serde(default = "default_num_partitions")]
    pub num_partitions: i32,
    /// Kafka's `default.replication.factor`: 1, the only one an agent (its
    /// partitions' one replica) can give.
    #[serde(default = "default_replication_factor")]
    pub default_replication_factor: i16,
}

/// A user of the listener's SASL authentication. SCRAM credentials are
/// derived from the password at start (random salt, 4096 iterations).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerUser {
    pub name: String,
    pub password: Secret,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    users: Vec<ListenerUser>,
}

impl ListenerConfig {
    /// Every SASL user: the table's, then the users file's.
    pub fn sasl_users(&self) -> anyhow::Result<Vec<ListenerUser>> {
        let mut users = self.users.clone();
        if let Some(path) = &self.users_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read the listener's users_file {}", path.display()))?;
            let file: UsersFile =
                toml::from_str(&text).with_context(|| format!("in the listener's users_file {}", path.display()))?;
            users.extend(file.users);
        }
        let mut names = std::collections::BTreeSet::new();
        for u in &users {
            anyhow::ensure!(!u.name.is_empty(), "[listener] a SASL user has an empty name");
            anyhow::ensure!(
                u.name != AGENT_SASL_USER,
                "[listener] the SASL user name {AGENT_SASL_USER:?} is the agent's own"
            );
            anyhow::ensure!(
                !u.password.expose().is_empty(),
                "[listener] SASL user {:?} has an empty password",
                u.name
            );
            anyhow::ensure!(
                names.insert(&u.name),
                "[listener] SASL user {:?} is defined twice",
                u.name
            );
        }
        Ok(users)
    }

    fn validate(&self) -> anyhow::Result<()> {
        let has_users = !self.users.is_empty() || self.users_file.is_some();
        if self.sasl_mechanisms.is_empty() {
            anyhow::ensure!(
                !has_users,
                "[listener] users need sasl_mechanisms (which SASL mechanisms to accept)"
            );
        } else {
            anyhow::ensure!(has_users, "[listener] sasl_mechanisms need users (or a users_file)");
            self.sasl_users()?;
        }
        self.tls()?;
        anyhow::ensure!(
            self.num_partitions >= 1,
            "[listener] num_partitions must be at least 1, not {}",
            self.num_partitions
        );
        anyhow::ensure!(
            self.default_replication_factor == 1,
            "[listener] default_replication_factor must be 1 (this agent is its partitions' only replica), not {}",
            self.default_replication_factor
        );
        self.validate_authorizer()
    }

    /// The listener's settings for the topics it creates by itself.
    pub fn topic_creation(&self) -> ringmirror_dataplane::kafka::TopicCreation {
        ringmirror_dataplane::kafka::TopicCreation {
            auto_create_topics_enable: self.auto_create_topics_enable,
            num_partitions: self.num_partitions,
        }
    }

    /// The listener's TLS settings (`None`: in clear).
    pub fn tls(&self) -> anyhow::Result<Option<Arc<ringmirror_dataplane::kafka::tls::ServerConfig>>> {
        server_tls("listener", &self.ssl_certificate_location, &self.ssl_key_location)
    }

    /// How the agent's own connections to this listener set up TLS: they
    /// trust exactly its certificate, whatever name it holds.
    pub fn own_tls_client(&self) -> Option<ringmirror_dataplane::client::TlsClientConfig> {
        self.ssl_certificate_location
            .clone()
            .map(|certificate| ringmirror_dataplane::client::TlsClientConfig {
                pinned_certificate: Some(certificate),
                ..Default::default()
            })
    }

    fn validate_authorizer(&self) -> anyhow::Result<()> {
        use ringmirror_dataplane::security::AuthorizerMode;
        if self.authorizer == AuthorizerMode::None {
            anyhow::ensure!(
                self.super_users.is_empty() && !self.allow_everyone_if_no_acl_found,
                "[listener] super_users and allow_everyone_if_no_acl_found need authorizer = \"acl\""
            );
            return Ok(());
        }
        anyhow::ensure!(
            !self.sasl_mechanisms.is_empty(),
            "[listener] authorizer = \"acl\" needs sasl_mechanisms: without SASL every client, \
             the agent's own sync included, is User:ANONYMOUS"
        );
        for u in &self.super_users {
            anyhow::ensure!(
                u.split_once(':').is_some_and(|(t, n)| !t.is_empty() && !n.is_empty()),
                "[listener] super user {u:?} is not a principal of the form Type:name (User:admin)"
            );
        }
        Ok(())
    }

    /// The authorizer's settings.
    pub fn authorizer_settings(&self) -> ringmirror_dataplane::security::AuthorizerSettings {
        ringmirror_dataplane::security::AuthorizerSettings {
            mode: self.authorizer,
            super_users: self.super_users.clone(),
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        }
    }
}

/// `[groups]`: the consumer group protocol's (KIP-848) timing, named and
/// bounded as Kafka's broker configs `group.consumer.*` (Kafka's
/// `GroupCoordinatorConfig`: the same defaults, each at least 1, the
/// interval and the session timeout within their bounds, the interval
/// shorter than the session timeout).
///
/// ```toml
/// [groups]
/// consumer_heartbeat_interval_ms = 5000
/// consumer_session_timeout_ms = 45000
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GroupsConfig {
    /// `group.consumer.heartbeat.interval.ms`: how often members are told
    /// to heartbeat.
    pub consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.min.heartbeat.interval.ms`
    pub consumer_min_heartbeat_interval_ms: i32,
    /// `group.consumer.max.heartbeat.interval.ms`
    pub consumer_max_heartbeat_interval_ms: i32,
    /// `group.consumer.session.timeout.ms`: a member silent this long is
    /// fenced and its partitions go to the others.
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.min.session.timeout.ms`
    pub consumer_min_session_timeout_ms: i32,
    /// `group.consumer.max.session.timeout.ms`
    pub consumer_max_session_timeout_ms: i32,
}

impl Default for GroupsConfig {
    fn default() -> Self {
        Self {
            consumer_heartbeat_interval_ms: 5_000,
            consumer_min_heartbeat_interval_ms: 5_000,
            consumer_max_heartbeat_interval_ms: 15_000,
            consumer_session_timeout_ms: 45_000,
            consumer_min_session_timeout_ms: 45_000,
            consumer_max_session_timeout_ms: 60_000,
        }
    }
}

impl GroupsConfig {
    /// Kafka's checks, in `GroupCoordinatorConfig`'s order, with its names.
    fn validate(&self) -> anyhow::Result<()> {
        for (name, value) in [
            ("consumer_heartbeat_interval_ms", self.consumer_heartbeat_interval_ms),
            (
                "consumer_min_heartbeat_interval_ms",
                self.consumer_min_heartbeat_interval_ms,
            ),
            (
                "consumer_max_heartbeat_interval_ms",
                self.consumer_max_heartbeat_interval_ms,
            ),
            ("consumer_session_timeout_ms", self.consumer_session_timeout_ms),
            ("consumer_min_session_timeout_ms", self.consumer_min_session_timeout_ms),
            ("consumer_max_session_timeout_ms", self.consumer_max_session_timeout_ms),
        ] {
            anyhow::ensure!(value >= 1, "[groups] {name} must be at least 1");
        }
        let ordered = [
            (
                self.consumer_min_heartbeat_interval_ms,
                self.consumer_max_heartbeat_interval_ms,
                "consumer_max_heartbeat_interval_ms must be greater than or equal to consumer_min_heartbeat_interval_ms",
            ),
            (
                self.consumer_min_heartbeat_interval_ms,
                self.consumer_heartbeat_interval_ms,
                "consumer_heartbeat_interval_ms must be greater than or equal to consumer_min_heartbeat_interval_ms",
            ),
            (
                self.consumer_heartbeat_interval_ms,
                self.consumer_max_heartbeat_interval_ms,
                "consumer_heartbeat_interval_ms must be less than or equal to consumer_max_heartbeat_interval_ms",
            ),
            (
                self.consumer_min_session_timeout_ms,
                self.consumer_max_session_timeout_ms,
                "consumer_max_session_timeout_ms must be greater than or equal to consumer_min_session_timeout_ms",
            ),
            (
                self.consumer_min_session_timeout_ms,
                self.consumer_session_timeout_ms,
                "consumer_session_timeout_ms must be greater than or equal to consumer_min_session_timeout_ms",
            ),
            (
                self.consumer_session_timeout_ms,
                self.consumer_max_session_timeout_ms,
                "consumer_session_timeout_ms must be less than or equal to consumer_max_session_timeout_ms",
            ),
        ];
        for (low, high, message) in ordered {
            anyhow::ensure!(low <= high, "[groups] {message}");
        }
        anyhow::ensure!(
            self.consumer_heartbeat_interval_ms < self.consumer_session_timeout_ms,
            "[groups] consumer_heartbeat_interval_ms must be less than consumer_session_timeout_ms"
        );
        Ok(())
    }

    /// The settings each shard's group coordinator runs with.
    pub fn coordinator_config(&self) -> ringmirror_dataplane::groups::GroupConfig {
        ringmirror_dataplane::groups::GroupConfig {
            consumer_heartbeat_interval_ms: self.consumer_heartbeat_interval_ms,
            consumer_session_timeout_ms: self.consumer_session_timeout_ms,
            ..Default::default()
        }
    }
}

/// `[admin]`: the admin API (HTTP/JSON) and `/metrics`.
///
/// ```toml
/// [admin]
/// address = "0.0.0.0:9644"
/// token_file = "/etc/ringmirror/admin-token"   # optional: require a bearer token
/// principals_file = "/etc/ringmirror/admin-principals"   # optional: principals and ACLs
/// ssl_certificate_location = "/etc/ringmirror/admin.pem" # optional: HTTPS
/// ssl_key_location = "/etc/ringmirror/admin.key"
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address the admin API binds; port 0 picks a free one. Loopback by
    /// default; bound elsewhere without a `token_file`, the API is open to
    /// the network (the agent warns at start).
    #[serde(default = "default_admin_address")]
    pub address: std::net::SocketAddr,
    /// A file holding the bearer token every request but `GET /health`
    /// must carry (`Authorization: Bearer <token>`); surrounding whitespace
    /// and line breaks are dropped. Read at start: a missing, unreadable or
    /// empty file is a configuration error (naming the path, never the
    /// content). None (the default): no authentication.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// A file of principals (`User:<name>`) and their tokens' SHA-256
    /// (`ringmirror_control::admin::auth` has the format): a principal's
    /// requests are authorized by the ClusterMirror ACLs. Read at start,
    /// errors naming the file and line. None (the default): no principals.
    #[serde(default)]
    pub principals_file: Option<PathBuf>,
    /// HTTPS: PEM files of the certificate chain and its unencrypted
    /// private key, read at start; both or neither. None: plain HTTP.
    #[serde(default)]
    pub ssl_certificate_location: Option<PathBuf>,
    #[serde(default)]
    pub ssl_key_location: Option<PathBuf>,
}

impl AdminConfig {
    /// The bearer token the API requires, read from `token_file`; `None`
    /// without one.
    pub fn token(&self) -> anyhow::Result<Option<AdminToken>> {
        self.token_file
            .as_deref()
            .map(|path| AdminToken::read_file(path).context("[admin] token_file"))
            .transpose()
    }

    /// The principals of `principals_file`; `None` without one.
    pub fn principals(&self) -> anyhow::Result<Option<AdminPrincipals>> {
        self.principals_file
            .as_deref()
            .map(|path| AdminPrincipals::read_file(path).context("[admin] principals_file"))
            .transpose()
    }

    /// The API's TLS settings (`None`: plain HTTP).
    pub fn tls(&self) -> anyhow::Result<Option<Arc<ringmirror_dataplane::kafka::tls::ServerConfig>>> {
        server_tls("admin", &self.ssl_certificate_location, &self.ssl_key_location)
    }

    /// Everything that guards the API, read from its files (the ACL store
    /// is the agent's to add).
    pub fn security(&self) -> anyhow::Result<AdminSecurity> {
        Ok(AdminSecurity {
            token: self.token()?,
            principals: self.principals()?,
            acls: None,
            tls: self.tls()?,
        })
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.security().map(drop)
    }
}

/// A server's TLS settings from the `[table]`'s certificate and key files
/// (`None`: in clear); both or neither.
fn server_tls(
    table: &str,
    certificate: &Option<PathBuf>,
    key: &Option<PathBuf>,
) -> anyhow::Result<Option<Arc<ringmirror_dataplane::kafka::tls::ServerConfig>>> {
    match (certificate, key) {
        (None, None) => Ok(None),
        (Some(certificate), Some(key)) => ringmirror_dataplane::kafka::tls::server_config(certificate, key)
            .map(Some)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("[{table}] ssl_certificate_location/ssl_key_location")),
        _ => anyhow::bail!("[{table}] ssl_certificate_location and ssl_key_location go together"),
    }
}

fn default_admin_address() -> std::net::SocketAddr {
    ringmirror_control::admin::http::DEFAULT_ADDRESS
        .parse()
        .expect("a valid default address")
}

fn default_num_partitions() -> i32 {
    1
}

fn default_replication_factor() -> i16 {
    1
}

fn default_mirror_topic_num_partitions() -> u32 {
    50
}

fn default_connections_max_idle_ms() -> u64 {
    ringmirror_dataplane::kafka::CONNECTIONS_MAX_IDLE_DEFAULT.as_millis() as u64
}

fn default_max_request_bytes() -> usize {
    ringmirror_dataplane::kafka::MAX_REQUEST_BYTES_DEFAULT
}
fn default_true() -> bool {
    true
}

fn default_offset_checkpoint_interval_ms() -> u64 {
    10_000
}

fn default_telemetry_events_queued_max() -> usize {
    ringmirror_dataplane::fetch::TELEMETRY_EVENTS_QUEUED_MAX_DEFAULT
}

impl AgentConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut config: Self = toml::from_str(text)?;
        for m in &mut config.mirrors {
            m.normalize();
        }
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        // With an admin API, mirrors can be created while running.
        anyhow::ensure!(
            !self.mirrors.is_empty() || self.listener.is_some() || self.admin.is_some(),
            "no [[mirror]], no [listener] and no [admin] configured: nothing to do"
        );
        anyhow::ensure!(
            self.mirror_topic_num_partitions > 0,
            "mirror_topic_num_partitions must be at least 1"
        );
        anyhow::ensure!(
            self.telemetry_events_queued_max > 0,
            "telemetry_events_queued_max must be at least 1"
        );
        if let Some(listener) = &self.listener {
            listener.validate()?;
        }
        if let Some(admin) = &self.admin {
            admin.validate()?;
        }
        self.groups.validate()?;
        let mut names = std::collections::BTreeSet::new();
        for m in &self.mirrors {
            anyhow::ensure!(names.insert(&m.name), "mirror name {:?} is used twice", m.name);
            m.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config_and_applies_defaults() {
        let c = AgentConfig::parse(
            r#"
            data_dir = "/tmp/x"
            shards = 2
            [log]
            segment_bytes = 1048576
            [[mirror]]
            name = "dr"
            bootstrap_servers = ["127.0.0.1:9092"]
            topics = ["orders"]
            topics_include = "pay.*"
            "#,
        )
        .unwrap();
        assert_eq!(c.shards, Some(2));
        assert_eq!(c.log.segment_bytes, 1048576);
        assert_eq!(c.log.index_interval_bytes, 4096);
        let m = &c.mirrors[0];
        assert_eq!((m.fetch_max_wait_ms, m.topics_exclude.as_str()), (500, "__.*"));
    }

    #[test]
    fn groups_table_defaults_as_kafka_and_is_validated_as_kafka_validates() {
        let groups = |table: &str| AgentConfig::parse(&format!("data_dir = \"/x\"\n[admin]\n[groups]\n{table}"));
        let c = AgentConfig::parse("data_dir = \"/x\"\n[admin]").unwrap();
        assert_eq!(c.groups, GroupsConfig::default());
        let coordinator = c.groups.coordinator_config();
        assert_eq!(
            (
                coordinator.consumer_heartbeat_interval_ms,
                coordinator.consumer_session_timeout_ms
            ),
            (5_000, 45_000)
        );
        // As the tests' Kafka cluster: quick heartbeats, lowered bounds.
        let quick = groups(
            "consumer_min_heartbeat_interval_ms = 500\nconsumer_heartbeat_interval_ms = 500\n\
             consumer_min_session_timeout_ms = 6000\nconsumer_session_timeout_ms = 6000",
        )
        .unwrap();
        let coordinator = quick.groups.coordinator_config();
        assert_eq!(
            (
                coordinator.consumer_heartbeat_interval_ms,
                coordinator.consumer_session_timeout_ms
            ),
            (500, 6_000)
        );
        for (table, refusal) in [
            (
                "consumer_heartbeat_interval_ms = 0",
                "consumer_heartbeat_interval_ms must be at least 1",
            ),
            (
                "consumer_session_timeout_ms = -5",
                "consumer_session_timeout_ms must be at least 1",
            ),
            (
                "consumer_heartbeat_interval_ms = 1000",
                "consumer_heartbeat_interval_ms must be greater than or equal to consumer_min_heartbeat_interval_ms",
            ),
            (
                "consumer_heartbeat_interval_ms = 20000",
                "consumer_heartbeat_interval_ms must be less than or equal to consumer_max_heartbeat_interval_ms",
            ),
            (
                "consumer_min_heartbeat_interval_ms = 20000",
                "consumer_max_heartbeat_interval_ms must be greater than or equal to consumer_min_heartbeat_interval_ms",
            ),
            (
                "consumer_session_timeout_ms = 30000",
                "consumer_session_timeout_ms must be greater than or equal to consumer_min_session_timeout_ms",
            ),
            (
                "consumer_session_timeout_ms = 90000",
                "consumer_session_timeout_ms must be less than or equal to consumer_max_session_timeout_ms",
            ),
            (
                "consumer_max_session_timeout_ms = 30000",
                "consumer_max_session_timeout_ms must be greater than or equal to consumer_min_session_timeout_ms",
            ),
            // Kafka's own example: both 50000, within bounds of 45000..60000.
            (
                "consumer_min_heartbeat_interval_ms = 45000\nconsumer_max_heartbeat_interval_ms = 60000\n\
                 consumer_heartbeat_interval_ms = 50000\nconsumer_session_timeout_ms = 50000",
                "consumer_heartbeat_interval_ms must be less than consumer_session_timeout_ms",
            ),
            ("consumer_heartbeat_intervall_ms = 500", "unknown field"),
        ] {
            let refused = format!("{:#}", groups(table).unwrap_err());
            assert!(refused.contains(refusal), "{table}: {refused}");
        }
    }

    #[test]
    fn telemetry_queue_bound_defaults_and_is_never_zero() {
        let c = AgentConfig::parse("data_dir = \"/x\"\n[admin]").unwrap();
        assert_eq!(c.telemetry_events_queued_max, 4096);
        let c = AgentConfig::parse("data_dir = \"/x\"\ntelemetry_events_queued_max = 4\n[admin]").unwrap();
        assert_eq!(c.telemetry_events_queued_max, 4);
        let refused = AgentConfig::parse("data_dir = \"/x\"\ntelemetry_events_queued_max = 0\n[admin]").unwrap_err();
        assert!(refused.to_string().contains("at least 1"), "{refused}");
    }

    #[test]
    fn admin_table_and_state_partitions_default_sensibly() {
        let c = AgentConfig::parse("data_dir = \"/x\"\n[listener]\naddress = \"127.0.0.1:0\"").unwrap();
        assert!(c.admin.is_none());
        assert_eq!(c.mirror_topic_num_partitions, 50);
        // An admin API alone is enough: mirrors can be created through it.
        let c = AgentConfig::parse("data_dir = \"/x\"\nmirror_topic_num_partitions = 8\n[admin]").unwrap();
        assert_eq!(c.admin.unwrap().address, "127.0.0.1:9644".parse().unwrap());
        assert_eq!(c.mirror_topic_num_partitions, 8);
        let c = AgentConfig::parse("data_dir = \"/x\"\n[admin]\naddress = \"0.0.0.0:0\"").unwrap();
        assert_eq!(c.admin.unwrap().address, "0.0.0.0:0".parse().unwrap());
    }

    #[test]
    fn admin_principals_and_tls_files_are_read_at_parse() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("principals");
        let config = |extra: &str| format!("data_dir = \"/x\"\n[admin]\n{extra}\n");
        let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        std::fs::write(&file, format!("# ops\nUser:ops sha256:{hash}\n")).unwrap();
        let admin = AgentConfig::parse(&config(&format!("principals_file = {file:?}")))
            .unwrap()
            .admin
            .unwrap();
        assert_eq!(admin.principals().unwrap().expect("principals").len(), 1);
        let security = admin.security().unwrap();
        assert!(security.token.is_none() && security.tls.is_none() && security.acls.is_none());
        // A bad line: the file and line named, not the line.
        std::fs::write(&file, "User:ops raw-secret-token\n").unwrap();
        let e = format!(
            "{:#}",
            AgentConfig::parse(&config(&format!("principals_file = {file:?}"))).unwrap_err()
        );
        assert!(
            e.starts_with(&format!(
                "[admin] principals_file: the admin principals file {}: line 1: ",
                file.display()
            )) && !e.contains("raw-secret-token"),
            "{e}"
        );
        // TLS: both files or neither; unreadable ones named.
        let e = format!(
            "{:#}",
            AgentConfig::parse(&config("ssl_certificate_location = \"/x.pem\"")).unwrap_err()
        );
        assert_eq!(e, "[admin] ssl_certificate_location and ssl_key_location go together");
        let e = format!(
            "{:#}",
            AgentConfig::parse(&config(
                "ssl_certificate_location = \"/no/cert.pem\"\nssl_key_location = \"/no/key.pem\""
            ))
            .unwrap_err()
        );
        assert!(
            e.starts_with("[admin] ssl_certificate_location/ssl_key_location: /no/cert.pem"),
            "{e}"
        );
    }

    #[test]
    fn admin_token_file_is_read_at_parse_and_its_errors_name_only_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin-token");
        let config = |path: &Path| format!("data_dir = \"/x\"\n[admin]\ntoken_file = {path:?}\n");
        std::fs::write(&file, "\n  0123456789abcdef-token \r\n").unwrap();
        let admin = AgentConfig::parse(&config(&file)).unwrap().admin.unwrap();
        assert_eq!(admin.token_file.as_deref(), Some(file.as_path()));
        let token = admin.token().unwrap().expect("a token");
        assert_eq!(token.expose(), "0123456789abcdef-token");
        assert!(!format!("{admin:?} {token:?}").contains("0123456789abcdef"));
        // No token_file: no token.
        let admin = AgentConfig::parse("data_dir = \"/x\"\n[admin]").unwrap().admin.unwrap();
        assert!(admin.token_file.is_none() && admin.token().unwrap().is_none());

        let err = |path: &Path| format!("{:#}", AgentConfig::parse(&config(path)).unwrap_err());
        for empty in ["", "\n", "  \t\r\n"] {
            std::fs::write(&file, empty).unwrap();
            assert_eq!(
                err(&file),
                format!("[admin] token_file: the admin token file {} is empty", file.display())
            );
        }
        let missing = dir.path().join("missing");
        let e = err(&missing);
        assert!(
            e.starts_with(&format!(
                "[admin] token_file: cannot read the admin token file {}: ",
                missing.display()
            )),
            "{e}"
        );
        std::fs::write(&file, "secret with spaces\n").unwrap();
        let e = err(&file);
        assert!(
            e.contains(&file.display().to_string()) && e.contains("visible ASCII"),
            "{e}"
        );
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn listener_tls_settings_need_both_files_and_say_which_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let parse = |extra: &str| {
            AgentConfig::parse(&format!(
                "data_dir = \"/x\"\n[listener]\naddress = \"127.0.0.1:0\"\n{extra}"
            ))
        };
        let err = |extra: &str| format!("{:#}", parse(extra).unwrap_err());
        assert!(err("ssl_certificate_location = \"/c.pem\"").contains("go together"));
        let missing = dir.path().join("missing.pem");
        let both = format!("ssl_certificate_location = {missing:?}\nssl_key_location = {missing:?}");
        assert!(err(&both).contains("missing.pem"), "{}", err(&both));
        let not_pem = dir.path().join("cert.pem");
        std::fs::write(&not_pem, "not a certificate\n").unwrap();
        let empty = format!("ssl_certificate_location = {not_pem:?}\nssl_key_location = {missing:?}");
        assert!(err(&empty).contains("no certificate"), "{}", err(&empty));
        let plain = parse("").unwrap().listener.unwrap();
        assert!(plain.tls().unwrap().is_none() && plain.own_tls_client().is_none());
    }

    #[test]
    fn listener_sasl_settings() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("users.toml");
        std::fs::write(&file, "[[users]]\nname = \"bob\"\npassword = \"bob-secret\"\n").unwrap();
        let c = AgentConfig::parse(&format!(
            r#"
            data_dir = "/x"
            [listener]
            address = "127.0.0.1:0"
            sasl_mechanisms = ["PLAIN", "SCRAM-SHA-512"]
            users_file = {file:?}
            [[listener.users]]
            name = "alice"
            password = "alice-secret"
            "#
        ))
        .unwrap();
        let l = c.listener.unwrap();
        assert_eq!(l.sasl_mechanisms, [Mechanism::Plain, Mechanism::ScramSha512]);
        let users: Vec<String> = l.sasl_users().unwrap().into_iter().map(|u| u.name).collect();
        assert_eq!(users, ["alice", "bob"]);
        assert!(!format!("{l:?}").contains("alice-secret"));

        let err = |t: &str| {
            format!(
                "{:#}",
                AgentConfig::parse(&format!(
                    "data_dir = \"/x\"\n[listener]\naddress = \"127.0.0.1:0\"\n{t}"
                ))
                .unwrap_err()
            )
        };
        assert!(err("sasl_mechanisms = [\"PLAIN\"]").contains("need users"));
        assert!(err("[[listener.users]]\nname = \"a\"\npassword = \"p\"").contains("need sasl_mechanisms"));
        assert!(
            err("sasl_mechanisms = [\"GSSAPI\"]\n[[listener.users]]\nname = \"a\"\npassword = \"p\"")
                .contains("unknown variant")
        );
        assert!(
            err("sasl_mechanisms = [\"PLAIN\"]\n[[listener.users]]\nname = \"__ringmirror_agent\"\npassword = \"p\"")
                .contains("the agent's own")
        );
        assert!(
            err("sasl_mechanisms = [\"PLAIN\"]\nusers_file = \"/nonexistent\"").contains("users_file /nonexistent")
        );
    }

    #[test]
    fn listener_topic_creation_takes_kafka_s_names_and_defaults() {
        let base = "data_dir = \"/x\"\n[listener]\naddress = \"127.0.0.1:0\"\n";
        let l = AgentConfig::parse(base).unwrap().listener.unwrap();
        assert_eq!(
            (
                l.auto_create_topics_enable,
                l.num_partitions,
                l.default_replication_factor
            ),
            (true, 1, 1)
        );
        assert_eq!(
            l.topic_creation(),
            ringmirror_dataplane::kafka::TopicCreation::default()
        );
        let l = AgentConfig::parse(&format!(
            "{base}auto_create_topics_enable = false\nnum_partitions = 3\n"
        ))
        .unwrap()
        .listener
        .unwrap();
        assert_eq!(
            l.topic_creation(),
            ringmirror_dataplane::kafka::TopicCreation {
                auto_create_topics_enable: false,
                num_partitions: 3
            }
        );
        let err = |t: &str| format!("{:#}", AgentConfig::parse(&format!("{base}{t}")).unwrap_err());
        assert!(err("num_partitions = 0").contains("at least 1"));
        assert!(err("default_replication_factor = 3").contains("only replica"));
    }

    #[test]
    fn listener_authorizer_settings() {
        use ringmirror_dataplane::security::AuthorizerMode;
        assert_eq!(
            format!("User:{AGENT_SASL_USER}"),
            ringmirror_dataplane::security::authorizer::AGENT_PRINCIPAL
        );
        let base = "data_dir = \"/x\"\n[listener]\naddress = \"127.0.0.1:0\"\n";
        let sasl = "sasl_mechanisms = [\"PLAIN\"]\n";
        let user = "[[listener.users]]\nname = \"a\"\npassword = \"p\"\n";
        let l = AgentConfig::parse(base).unwrap().listener.unwrap();
        assert_eq!(l.authorizer, AuthorizerMode::None);
        assert!(l.super_users.is_empty() && !l.allow_everyone_if_no_acl_found);
        let c = AgentConfig::parse(&format!(
            "{base}{sasl}authorizer = \"acl\"\nsuper_users = [\"User:admin\"]\nallow_everyone_if_no_acl_found = true\n{user}"
        ))
        .unwrap();
        let s = c.listener.unwrap().authorizer_settings();
        assert_eq!(s.mode, AuthorizerMode::Acl);
        assert_eq!(s.super_users, ["User:admin"]);
        assert!(s.allow_everyone_if_no_acl_found);
        let err = |t: &str| format!("{:#}", AgentConfig::parse(&format!("{base}{t}")).unwrap_err());
        assert!(err("authorizer = \"acl\"").contains("needs sasl_mechanisms"));
        assert!(err("authorizer = \"ranger\"").contains("unknown variant"));
        assert!(err("super_users = [\"User:admin\"]").contains("need authorizer"));
        assert!(
            err(&format!(
                "{sasl}authorizer = \"acl\"\nsuper_users = [\"admin\"]\n{user}"
            ))
            .contains("Type:name")
        );
    }

    #[test]
    fn rejects_bad_configs_with_a_reason() {
        let err = |t: &str| format!("{:#}", AgentConfig::parse(t).unwrap_err());
        assert!(err(r#"data_dir = "/x""#).contains("nothing to do"));
        assert!(err("data_dir = \"/x\"\nmirror_topic_num_partitions = 0\n[admin]").contains("at least 1"));
        assert!(err("data_dir = \"/x\"\n[admin]\nport = 1").contains("unknown field"));
        assert!(
            err("data_dir = \"/x\"\n[[mirror]]\nname = \"a\"\nbootstrap_servers = [\"h:1\"]")
                .contains("names no topics")
        );
        assert!(err("data_dir = \"/x\"\nbogus = 1").contains("unknown field"));
        assert!(
            err("data_dir = \"/x\"\n[[mirror]]\nname = \"a\"\nbootstrap_servers = [\"h:1\"]\ntopics_include = \"(\"")
                .contains("topics_include")
        );
    }
}
