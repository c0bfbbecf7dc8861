//! A mirror's definition: its name, source cluster, topic selection and
//! fetch settings. Read from the agent's TOML file, created and changed
//! through the admin API, and persisted in `__mirror_state`; compiled here
//! into what the data plane fetches with ([`MirrorSettings`]) and which
//! source topics the mirror covers ([`TopicSelection`]).

use std::collections::BTreeSet;
use std::path::PathBuf;

use ringmirror_dataplane::client::{ClientCertFiles, ConnectionOptions, TlsClientConfig};
use ringmirror_dataplane::fetch::{IngestMode, MirrorSettings};
use ringmirror_protocol::sasl::{Mechanism, Password, SaslClientConfig, Secret};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    pub name: String,
    pub bootstrap_servers: Vec<String>,
    /// Topics to mirror by name.
    #[serde(default)]
    pub topics: Vec<String>,
    /// Also mirror every source topic matching this regex (whole name).
    #[serde(default, alias = "mirror_topics_include")]
    pub topics_include: Option<String>,
    /// Never mirror topics matching this regex (whole name).
    #[serde(default = "default_topics_exclude", alias = "mirror_topics_exclude")]
    pub topics_exclude: String,
    /// Consumer groups whose committed offsets are synced from the source
    /// (regex on whole group ids; default every group).
    #[serde(default = "default_groups_include", alias = "mirror_groups_include")]
    pub groups_include: String,
    /// Groups never synced (regex; wins over include).
    #[serde(default, alias = "mirror_groups_exclude")]
    pub groups_exclude: Option<String>,
    /// ACL bindings synced from the source (rules; default every topic and
    /// group ACL; `[]`: none).
    #[serde(default, alias = "mirror_acls_include")]
    pub acls_include: crate::metadata_sync::acl_sync::AclFilterSetting,
    #[serde(default = "default_fetch_max_bytes")]
    pub fetch_max_bytes: i32,
    #[serde(default = "default_fetch_partition_max_bytes", alias = "max_partition_fetch_bytes")]
    pub fetch_partition_max_bytes: i32,
    #[serde(default = "default_fetch_max_wait_ms", alias = "fetch_wait_max_ms")]
    pub fetch_max_wait_ms: u64,
    #[serde(default = "default_fetch_min_bytes")]
    pub fetch_min_bytes: i32,
    #[serde(
        default = "default_metadata_refresh_ms",
        alias = "mirror_metadata_refresh_interval_ms"
    )]
    pub metadata_refresh_interval_ms: u64,
    /// A topic absent at the source (by name and by topic id, same cluster
    /// id) is stopped only after this many metadata rounds in a row found
    /// it absent ...
    #[serde(default = "default_topic_deletion_confirm_rounds")]
    pub topic_deletion_confirm_rounds: u32,
    /// ... spread over at least this long (from the first absent answer).
    #[serde(default = "default_topic_deletion_confirm_ms")]
    pub topic_deletion_confirm_ms: u64,
    /// How record bytes reach the log: "mmap" (received straight into the
    /// segment), "aligned_copy" (a page-aligned buffer, then one copy) or
    /// "uring" (as aligned_copy, the copy done by the kernel via io_uring)
    /// or "uring_sqpoll" (the same through a ring with a kernel submission
    /// thread).
    #[serde(default)]
    pub ingest: IngestMode,
    /// How we reach the source, as Kafka's `security.protocol`:
    /// "plaintext", "ssl" (TLS), "sasl_plaintext" or "sasl_ssl" (SASL
    /// inside TLS).
    #[serde(default, skip_serializing_if = "SecurityProtocol::is_plaintext")]
    pub security_protocol: SecurityProtocol,
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with "sasl_plaintext").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<Mechanism>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// Kept in `__mirror_state`; shown as "***" in API answers, never
    /// logged. A definition sent back with "***" keeps the stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<Secret>,
    /// A file on the agent's host holding the password (instead of
    /// `sasl_password`), read at each connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl_password_file: Option<PathBuf>,
    /// With "ssl"/"sasl_ssl": a PEM file of the CA certificates that sign
    /// the source's certificates, on the agent's host, read at each connect
    /// (default: the system's CA store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_ca_location: Option<PathBuf>,
    /// With "ssl"/"sasl_ssl": "https" (the default) checks that the
    /// source's certificate names the host connected to; "" or "none"
    /// checks only its chain (Kafka's setting of the same name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_endpoint_identification_algorithm: Option<String>,
    /// With "ssl"/"sasl_ssl", for sources that require client
    /// certificates (mutual TLS): a PEM file of our certificate chain, and
    /// one of its unencrypted private key (PKCS#8, PKCS#1 or SEC1), both on
    /// the agent's host and read at each connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_certificate_location: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssl_key_location: Option<PathBuf>,
}

/// How a mirror connects to its source (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    #[default]
    #[serde(alias = "PLAINTEXT")]
    Plaintext,
    #[serde(alias = "SSL")]
    Ssl,
    #[serde(alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[serde(alias = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    pub fn is_plaintext(&self) -> bool {
        *self == Self::Plaintext
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// Its name in settings and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }
}

fn default_groups_include() -> String {
    ".*".into()
}

fn default_topics_exclude() -> String {
    "__.*".into()
}
fn default_fetch_max_bytes() -> i32 {
    50 * 1024 * 1024
}
fn default_fetch_partition_max_bytes() -> i32 {
    1024 * 1024
}
fn default_fetch_max_wait_ms() -> u64 {
    500
}
fn default_fetch_min_bytes() -> i32 {
    1
}
fn default_metadata_refresh_ms() -> u64 {
    30_000
}
fn default_topic_deletion_confirm_rounds() -> u32 {
    3
}
fn default_topic_deletion_confirm_ms() -> u64 {
    120_000
}

/// Why a mirror definition is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mirror {mirror:?}: {reason}")]
pub struct InvalidMirror {
    pub mirror: String,
    pub reason: String,
}

impl MirrorConfig {
    /// Splits comma-separated bootstrap entries ("h1:9092,h2:9092", as
    /// Kafka clients take them) and drops empty ones.
    pub fn normalize(&mut self) {
        self.bootstrap_servers = self
            .bootstrap_servers
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
    }

    /// Checks what the data plane relies on: a name, a source, a topic
    /// selection with valid regexes, positive fetch sizes.
    pub fn validate(&self) -> Result<(), InvalidMirror> {
        let invalid = |reason: String| InvalidMirror {
            mirror: self.name.clone(),
            reason,
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 249
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !name_ok {
            return Err(invalid("a mirror name is 1-249 characters of [a-zA-Z0-9._-]".into()));
        }
        if self.bootstrap_servers.is_empty() {
            return Err(invalid("has no bootstrap_servers".into()));
        }
        if self.topics.is_empty() && self.topics_include.is_none() {
            return Err(invalid("names no topics (topics or topics_include)".into()));
        }
        TopicSelection::new(self).map_err(|e| invalid(e.to_string()))?;
        self.group_filter()
            .map_err(|e| invalid(format!("groups_include/groups_exclude: {e}")))?;
        self.acls_include
            .validate()
            .map_err(|e| invalid(format!("acls_include: {e}")))?;
        if self.fetch_partition_max_bytes <= 0 || self.fetch_max_bytes <= 0 {
            return Err(invalid("fetch sizes must be positive".into()));
        }
        if self.topic_deletion_confirm_rounds == 0 {
            return Err(invalid(
                "topic_deletion_confirm_rounds must be at least 1 (a deletion is never taken from no answer)".into(),
            ));
        }
        self.validate_security().map_err(invalid)
    }

    /// The SASL settings: complete with "sasl_plaintext"/"sasl_ssl",
    /// absent otherwise; the TLS settings only with "ssl"/"sasl_ssl".
    fn validate_security(&self) -> Result<(), String> {
        let protocol = self.security_protocol;
        let any_tls = self.ssl_ca_location.is_some()
            || self.ssl_endpoint_identification_algorithm.is_some()
            || self.ssl_certificate_location.is_some()
            || self.ssl_key_location.is_some();
        if any_tls && !protocol.uses_tls() {
            return Err("ssl_* settings need security_protocol = \"ssl\" or \"sasl_ssl\"".into());
        }
        for (name, path) in [
            ("ssl_ca_location", &self.ssl_ca_location),
            ("ssl_certificate_location", &self.ssl_certificate_location),
            ("ssl_key_location", &self.ssl_key_location),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(format!("{name} is empty"));
            }
        }
        if self.ssl_certificate_location.is_some() != self.ssl_key_location.is_some() {
            return Err("ssl_certificate_location and ssl_key_location go together".into());
        }
        if let Some(algorithm) = &self.ssl_endpoint_identification_algorithm
            && !matches!(algorithm.as_str(), "https" | "" | "none")
        {
            return Err(format!(
                "ssl_endpoint_identification_algorithm {algorithm:?}: \"https\" checks the host name, \"\" or \"none\" does not"
            ));
        }
        let any_sasl = self.sasl_mechanism.is_some()
            || self.sasl_username.is_some()
            || self.sasl_password.is_some()
            || self.sasl_password_file.is_some();
        if !protocol.uses_sasl() {
            return if any_sasl {
                Err("sasl_* settings need security_protocol = \"sasl_plaintext\" or \"sasl_ssl\"".into())
            } else {
                Ok(())
            };
        }
        let name = protocol.name();
        if self.sasl_mechanism.is_none() {
            return Err(format!(
                "security_protocol {name} needs sasl_mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            ));
        }
        if self.sasl_username.as_deref().is_none_or(str::is_empty) {
            return Err(format!("security_protocol {name} needs sasl_username"));
        }
        match (&self.sasl_password, &self.sasl_password_file) {
            (None, None) => Err(format!(
                "security_protocol {name} needs sasl_password or sasl_password_file"
            )),
            (Some(_), Some(_)) => Err("sasl_password and sasl_password_file are exclusive".into()),
            (Some(p), None) if p.expose().is_empty() => Err("sasl_password is empty".into()),
            (Some(p), None) if p.is_redacted() => Err(format!(
                "sasl_password is the placeholder {:?} API answers show, not a password",
                ringmirror_protocol::sasl::REDACTED
            )),
            // The file is read at each connect, on the agent's host (a CLI
            // elsewhere cannot check it).
            (Some(_), None) | (None, Some(_)) => Ok(()),
        }
    }

    /// How the mirror authenticates to its source (`None`: no SASL).
    pub fn sasl_client(&self) -> Option<SaslClientConfig> {
        if !self.security_protocol.uses_sasl() {
            return None;
        }
        let password = match (&self.sasl_password, &self.sasl_password_file) {
            (_, Some(path)) => Password::File(path.clone()),
            (Some(p), None) => Password::Inline(p.clone()),
            (None, None) => return None,
        };
        Some(SaslClientConfig {
            mechanism: self.sasl_mechanism?,
            username: self.sasl_username.clone()?,
            password,
        })
    }

    /// How the mirror's connections set up TLS (`None`: in clear).
    pub fn tls_client(&self) -> Option<TlsClientConfig> {
        self.security_protocol.uses_tls().then(|| TlsClientConfig {
            ca_file: self.ssl_ca_location.clone(),
            verify_hostname: self
                .ssl_endpoint_identification_algorithm
                .as_deref()
                .is_none_or(|a| a == "https"),
            client_cert: self
                .ssl_certificate_location
                .clone()
                .zip(self.ssl_key_location.clone())
                .map(|(certificate, key)| ClientCertFiles { certificate, key }),
            pinned_certificate: None,
        })
    }

    /// This definition as API answers show it: the password as "***".
    pub fn redacted(&self) -> Self {
        let mut shown = self.clone();
        if shown.sasl_password.is_some() {
            shown.sasl_password = Some(Secret::redacted());
        }
        shown
    }

    /// A definition sent with the "***" an answer showed keeps `stored`'s
    /// password.
    pub fn keep_password_of(&mut self, stored: &MirrorConfig) {
        if self.sasl_password.as_ref().is_some_and(Secret::is_redacted) {
            self.sasl_password.clone_from(&stored.sasl_password);
        }
    }

    /// Which consumer groups' offsets are synced.
    pub fn group_filter(&self) -> Result<crate::metadata_sync::groups::GroupFilter, regex::Error> {
        crate::metadata_sync::groups::GroupFilter::new(
            std::iter::empty::<String>(),
            Some(&self.groups_include),
            self.groups_exclude.as_deref(),
        )
    }

    /// How much evidence a deletion at the source needs.
    pub fn deletion_policy(&self) -> crate::metadata_sync::deletion::ConfirmPolicy {
        crate::metadata_sync::deletion::ConfirmPolicy {
            rounds_min: self.topic_deletion_confirm_rounds,
            confirm: std::time::Duration::from_millis(self.topic_deletion_confirm_ms),
        }
    }

    /// What the data plane fetches this mirror's partitions with.
    pub fn settings(&self) -> MirrorSettings {
        MirrorSettings {
            name: self.name.clone(),
            bootstrap_servers: self.bootstrap_servers.clone(),
            fetch_max_bytes: self.fetch_max_bytes,
            fetch_partition_max_bytes: self.fetch_partition_max_bytes,
            fetch_max_wait_ms: self.fetch_max_wait_ms,
            fetch_min_bytes: self.fetch_min_bytes,
            metadata_refresh_ms: self.metadata_refresh_interval_ms,
            ingest: self.ingest,
            connection: ConnectionOptions {
                client_id: format!("ringmirror-{}", self.name),
                sasl: self.sasl_client(),
                tls: self.tls_client(),
                ..ConnectionOptions::default()
            },
            ..MirrorSettings::default()
        }
    }
}

/// Which regex failed to compile.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {source}")]
pub struct BadPattern {
    field: &'static str,
    source: regex::Error,
}

/// A mirror's topic selection, compiled: named topics and topics matching
/// the include regex, minus topics matching the exclude regex (which wins,
/// also over named topics). Regexes match whole names.
#[derive(Debug, Clone)]
pub struct TopicSelection {
    named: BTreeSet<String>,
    include: Option<regex::Regex>,
    exclude: regex::Regex,
}

impl TopicSelection {
    pub fn new(m: &MirrorConfig) -> Result<Self, BadPattern> {
        let whole = |r: &str| format!("^(?:{r})$");
        Ok(Self {
            named: m.topics.iter().cloned().collect(),
            include: m
                .topics_include
                .as_deref()
                .map(|r| regex::Regex::new(&whole(r)))
                .transpose()
                .map_err(|source| BadPattern {
                    field: "topics_include",
                    source,
                })?,
            exclude: regex::Regex::new(&whole(&m.topics_exclude)).map_err(|source| BadPattern {
                field: "topics_exclude",
                source,
            })?,
        })
    }

    pub fn wants(&self, topic: &str) -> bool {
        (self.named.contains(topic) || self.include.as_ref().is_some_and(|r| r.is_match(topic)))
            && !self.exclude.is_match(topic)
    }

    /// Topics named explicitly.
    pub fn named(&self) -> &BTreeSet<String> {
        &self.named
    }

    /// The metadata request's topic list: all topics when a regex is in play.
    pub fn request_topics(&self) -> Option<Vec<String>> {
        self.include.is_none().then(|| self.named.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(toml_text: &str) -> MirrorConfig {
        let mut m: MirrorConfig = toml::from_str(toml_text).unwrap();
        m.normalize();
        m
    }

    #[test]
    fn defaults_apply_and_definitions_round_trip_through_json() {
        let m = mirror("name = \"dr\"\nbootstrap_servers = [\"a:1, b:2\"]\ntopics = [\"orders\"]");
        assert_eq!(m.bootstrap_servers, ["a:1", "b:2"]);
        assert_eq!((m.fetch_max_wait_ms, m.topics_exclude.as_str()), (500, "__.*"));
        assert_eq!(
            (m.topic_deletion_confirm_rounds, m.topic_deletion_confirm_ms),
            (3, 120_000)
        );
        m.validate().unwrap();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<MirrorConfig>(&json).unwrap(), m);
    }

    #[test]
    fn invalid_definitions_say_why() {
        let base = "bootstrap_servers = [\"h:1\"]\n";
        let err = |t: &str| mirror(t).validate().unwrap_err().to_string();
        assert!(err(&format!("name = \"a b\"\n{base}topics = [\"t\"]")).contains("mirror name"));
        assert!(err(&format!("name = \"a\"\n{base}")).contains("names no topics"));
        assert!(err(&format!("name = \"a\"\n{base}topics_include = \"(\"")).contains("topics_include"));
        assert!(err("name = \"a\"\nbootstrap_servers = []\ntopics = [\"t\"]").contains("bootstrap"));
        assert!(
            err(&format!(
                "name = \"a\"\n{base}topics = [\"t\"]\ntopic_deletion_confirm_rounds = 0"
            ))
            .contains("at least 1")
        );
    }

    #[test]
    fn tls_settings_are_checked_and_reach_the_data_plane() {
        let base = "name = \"a\"\nbootstrap_servers = [\"h:1\"]\ntopics = [\"t\"]\n";
        let err = |t: &str| mirror(&format!("{base}{t}")).validate().unwrap_err().to_string();
        assert!(err("ssl_ca_location = \"/ca.pem\"").contains("need security_protocol"));
        assert!(err("security_protocol = \"ssl\"\nssl_ca_location = \"\"").contains("empty"));
        assert!(
            err("security_protocol = \"ssl\"\nssl_endpoint_identification_algorithm = \"http\"")
                .contains("ssl_endpoint_identification_algorithm")
        );
        assert!(err("security_protocol = \"SASL_SSL\"").contains("sasl_ssl needs sasl_mechanism"));
        assert!(err("security_protocol = \"ssl\"\nssl_certificate_location = \"/c.pem\"").contains("go together"));
        let mutual = mirror(&format!(
            "{base}security_protocol = \"ssl\"\nssl_certificate_location = \"/c.pem\"\nssl_key_location = \"/k.pem\""
        ));
        mutual.validate().unwrap();
        assert_eq!(
            mutual.tls_client().and_then(|t| t.client_cert),
            Some(ClientCertFiles {
                certificate: "/c.pem".into(),
                key: "/k.pem".into()
            })
        );

        let plain = mirror(base);
        assert_eq!((plain.tls_client(), plain.settings().connection.tls), (None, None));
        let ssl = mirror(&format!(
            "{base}security_protocol = \"SSL\"\nssl_ca_location = \"/ca.pem\""
        ));
        ssl.validate().unwrap();
        let expected = TlsClientConfig {
            ca_file: Some("/ca.pem".into()),
            verify_hostname: true,
            client_cert: None,
            pinned_certificate: None,
        };
        assert_eq!(ssl.settings().connection.tls, Some(expected));
        assert_eq!(ssl.sasl_client(), None);
        let json = serde_json::to_string(&ssl).unwrap();
        assert_eq!(serde_json::from_str::<MirrorConfig>(&json).unwrap(), ssl);

        let sasl_ssl = mirror(&format!(
            "{base}security_protocol = \"sasl_ssl\"\nssl_endpoint_identification_algorithm = \"\"\n\
             sasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"\nsasl_password = \"p\""
        ));
        sasl_ssl.validate().unwrap();
        let connection = sasl_ssl.settings().connection;
        assert_eq!(
            connection.tls,
            Some(TlsClientConfig {
                ca_file: None,
                verify_hostname: false,
                client_cert: None,
                pinned_certificate: None,
            })
        );
        assert_eq!(connection.sasl.map(|s| s.mechanism), Some(Mechanism::Plain));
    }

    #[test]
    fn sasl_settings_are_checked_and_the_password_is_redacted() {
        let base = "name = \"a\"\nbootstrap_servers = [\"h:1\"]\ntopics = [\"t\"]\n";
        let err = |t: &str| mirror(&format!("{base}{t}")).validate().unwrap_err().to_string();
        assert!(err("sasl_username = \"u\"").contains("need security_protocol"));
        assert!(err("security_protocol = \"sasl_plaintext\"").contains("needs sasl_mechanism"));
        let sasl = "security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n";
        assert!(err(sasl).contains("needs sasl_username"));
        assert!(err(&format!("{sasl}sasl_username = \"u\"")).contains("needs sasl_password"));
        let both = format!("{sasl}sasl_username = \"u\"\nsasl_password = \"p\"\nsasl_password_file = \"/x\"");
        assert!(err(&both).contains("exclusive"));
        let file = mirror(&format!(
            "{base}{sasl}sasl_username = \"u\"\nsasl_password_file = \"/etc/pw\""
        ));
        file.validate().unwrap();
        assert_eq!(file.sasl_client().unwrap().password, Password::File("/etc/pw".into()));
        assert!(err(&format!("{sasl}sasl_username = \"u\"\nsasl_password = \"***\"")).contains("placeholder"));
        let tls = toml::from_str::<MirrorConfig>(&format!("{base}security_protocol = \"tls\""));
        assert!(tls.unwrap_err().to_string().contains("unknown variant `tls`"));

        let m = mirror(&format!(
            "{base}{sasl}sasl_username = \"u\"\nsasl_password = \"hunter2\""
        ));
        m.validate().unwrap();
        let client = m
            .settings()
            .connection
            .sasl
            .expect("SASL settings reach the data plane");
        assert_eq!(
            (client.mechanism, client.username.as_str()),
            (Mechanism::ScramSha512, "u")
        );
        assert!(!format!("{m:?} {:?}", m.settings()).contains("hunter2"));
        // Stored in clear (the agent's own state), answered redacted.
        let stored = serde_json::to_string(&m).unwrap();
        assert!(stored.contains("\"sasl_password\":\"hunter2\""), "{stored}");
        let shown = serde_json::to_string(&m.redacted()).unwrap();
        assert!(
            shown.contains("\"sasl_password\":\"***\"") && !shown.contains("hunter2"),
            "{shown}"
        );
        // Sent back as shown, the stored password stays.
        let mut again = m.redacted();
        again.keep_password_of(&m);
        assert_eq!(again, m);
        // A plaintext mirror's JSON is what it was before SASL existed.
        let plain = mirror(base);
        assert!(!serde_json::to_string(&plain).unwrap().contains("sasl") && plain.settings().connection.sasl.is_none());
    }

    #[test]
    fn exclude_wins_over_named_and_included_topics() {
        let m = mirror(
            "name = \"a\"\nbootstrap_servers = [\"h:1\"]\ntopics = [\"__x\", \"t\"]\ntopics_include = \"pay.*\"",
        );
        let s = TopicSelection::new(&m).unwrap();
        assert!(s.wants("t") && s.wants("payments") && !s.wants("__x") && !s.wants("xpay"));
        assert_eq!(s.request_topics(), None);
    }
}
