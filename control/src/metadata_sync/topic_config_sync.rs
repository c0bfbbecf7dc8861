//! Topic config sync (issue 6; DESIGN.md, "MirrorMetadataManager": "align
//! configs"): once per metadata round, each mirrored topic's config
//! overrides are read from the source, so the destination serves (and,
//! after failover, applies) the same settings. Config differences are
//! overwritten from the source, except the [`EXCLUDED_CONFIGS`].
//!
//! One round ([`fetch_topic_configs`]):
//!
//! 1. **Describe**: DescribeConfigs (resource type topic) at the source for
//!    the mirrored topics, up to [`TOPICS_PER_REQUEST`] per request, without
//!    synonyms or documentation. Any broker answers for topic resources.
//! 2. **Keep the overrides**: entries whose config source is
//!    DYNAMIC_TOPIC_CONFIG (1) — what `kafka-configs --alter --entity-type
//!    topics` or CreateTopics set on the topic itself. Broker-level values
//!    and defaults are not the topic's: the destination's own defaults
//!    apply to them, as MirrorMaker 2 (`use.defaults.from = target`) and
//!    Cluster Linking do.
//! 3. **Drop** sensitive entries (their value is never sent), entries
//!    without a value, and the [`EXCLUDED_CONFIGS`] (and
//!    [`EXCLUDED_CONFIG_PREFIXES`]); each is listed in
//!    [`TopicConfigs::skipped`] with why.
//!
//! The caller compares with what it holds ([`diff`] → [`ConfigChanges`],
//! for logs and `mirror describe`), persists the new overrides in
//! `__mirror_state` (`MirrorStateStore::put_topic_configs`) and publishes
//! them to the listener's catalog (`CatalogHandle::publish_topic_configs`),
//! where DescribeConfigs serves them as DYNAMIC_TOPIC_CONFIG. A change at
//! the source thus arrives within one round.
//!
//! A topic missing at the source (UNKNOWN_TOPIC_OR_PARTITION) is absent
//! from the answer; so is a topic the source answered with another error
//! ([`fetch_topic_configs_report`] says which, and why). Absent never means
//! "no overrides": the caller keeps what it has (deleted source topics are
//! the metadata round's business).
//!
//! Versions: DescribeConfigs v1–v4 (the `kafka-protocol` crate, as Kafka 4,
//! has no v0; a source that only speaks v0 — Kafka before 1.1 — is refused
//! with [`ClientError::NoCommonVersion`]). A source that does not serve
//! DescribeConfigs at all, such as librdkafka's mock cluster, gets the same
//! error, naming DescribeConfigs: the caller skips config sync for that
//! source (it is not a connection failure). Errors that end the round:
//! only those of the connection itself (I/O, framing, decoding).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{ClientError, Connection};
use ringmirror_protocol::error_codes as codes;
use serde::{Deserialize, Serialize};

/// DescribeConfigs resource type of topics.
const RESOURCE_TOPIC: i8 = 2;
/// DescribeConfigs config source of a topic's own settings.
pub const DYNAMIC_TOPIC_CONFIG: i8 = 1;
/// The DescribeConfigs versions used here (the highest both sides speak).
const DESCRIBE_CONFIGS_VERSIONS: (i16, i16) = (1, 4);
/// Topics per DescribeConfigs request, which keeps each answer small.
pub const TOPICS_PER_REQUEST: usize = 100;

/// Topic configs never synced from the source, with why. The choices follow
/// MirrorMaker 2's `config.properties.exclude` default and Confluent
/// Cluster Linking's list of configs a mirror topic does not take from its
/// source — settings that describe the source cluster's replicas, racks or
/// storage rather than the topic's data.
///
/// Unlike MirrorMaker 2, `message.timestamp.type` and the timestamp bounds
/// (`message.timestamp.difference.max.ms`, `…before.max.ms`,
/// `…after.max.ms`) *are* synced: MirrorMaker 2 produces the records anew,
/// so LogAppendTime would restamp them and the bounds would refuse old
/// ones; we append the source's batches as they are (their timestamp type
/// is in their attributes), and after failover the topic should stamp and
/// bound new records as the source did.
pub const EXCLUDED_CONFIGS: &[(&str, &str)] = &[
    (
        "leader.replication.throttled.replicas",
        "replication throttle: names the source's partition/broker pairs",
    ),
    (
        "follower.replication.throttled.replicas",
        "replication throttle: names the source's partition/broker pairs",
    ),
    (
        "confluent.placement.constraints",
        "replica placement: the source cluster's racks and observers",
    ),
    (
        "min.insync.replicas",
        "durability of the destination's own replicas: depends on its replication factor",
    ),
    (
        "unclean.leader.election.enable",
        "availability choice of the destination cluster",
    ),
    (
        "remote.storage.enable",
        "tiered storage: depends on the destination's remote storage",
    ),
    (
        "local.retention.ms",
        "tiered storage: depends on the destination's remote storage",
    ),
    (
        "local.retention.bytes",
        "tiered storage: depends on the destination's remote storage",
    ),
    (
        "remote.log.copy.disable",
        "tiered storage: depends on the destination's remote storage",
    ),
    (
        "remote.log.delete.on.disable",
        "tiered storage: depends on the destination's remote storage",
    ),
    (
        "confluent.key.schema.validation",
        "broker-side schema validation against the source's schema registry",
    ),
    (
        "confluent.value.schema.validation",
        "broker-side schema validation against the source's schema registry",
    ),
    (
        "confluent.key.subject.name.strategy",
        "broker-side schema validation against the source's schema registry",
    ),
    (
        "confluent.value.subject.name.strategy",
        "broker-side schema validation against the source's schema registry",
    ),
];

/// Prefixes of topic configs never synced, with why.
pub const EXCLUDED_CONFIG_PREFIXES: &[(&str, &str)] = &[(
    "confluent.tier.",
    "Confluent tiered storage: depends on the destination's remote storage",
)];

/// Why a sensitive override is not synced.
pub const SENSITIVE: &str = "sensitive: the source does not disclose its value";
/// Why an override without a value is not synced.
pub const NO_VALUE: &str = "the source gave no value";

/// Why `name` is never synced, if it is in the exclude list.
pub fn excluded(name: &str) -> Option<&'static str> {
    EXCLUDED_CONFIGS
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| EXCLUDED_CONFIG_PREFIXES.iter().find(|(p, _)| name.starts_with(p)))
        .map(|(_, why)| *why)
}

/// One source topic's overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigs {
    /// What the destination takes: the source's topic-level overrides minus
    /// those skipped.
    pub configs: BTreeMap<String, String>,
    /// Overrides at the source that are not synced, and why (no values:
    /// some are sensitive).
    pub skipped: BTreeMap<String, String>,
}

/// The answer of one round, with what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicConfigReport {
    /// Each topic the source described.
    pub topics: BTreeMap<String, TopicConfigs>,
    /// Topics the source does not have (UNKNOWN_TOPIC_OR_PARTITION).
    pub missing: BTreeSet<String>,
    /// Topics the source did not describe, and why (an error code, no
    /// answer for the topic).
    pub errors: BTreeMap<String, String>,
}

/// A changed value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedValue {
    pub old: String,
    pub new: String,
}

/// What a sync changes in a topic's overrides ([`diff`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChanges {
    /// New overrides and their values.
    pub added: BTreeMap<String, String>,
    /// Overrides whose value changed.
    pub changed: BTreeMap<String, ChangedValue>,
    /// Overrides gone, with the values they had.
    pub removed: BTreeMap<String, String>,
}

impl ConfigChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// How many keys changed in any way.
    pub fn len(&self) -> usize {
        self.added.len() + self.changed.len() + self.removed.len()
    }
}

/// `added a=1, changed b: 1 -> 2, removed c` (or `no changes`).
impl fmt::Display for ConfigChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no changes");
        }
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            let items: Vec<_> = self.added.iter().map(|(k, v)| format!("{k}={v}")).collect();
            parts.push(format!("added {}", items.join(", ")));
        }
        if !self.changed.is_empty() {
            let items: Vec<_> = self
                .changed
                .iter()
                .map(|(k, c)| format!("{k}: {} -> {}", c.old, c.new))
                .collect();
            parts.push(format!("changed {}", items.join(", ")));
        }
        if !self.removed.is_empty() {
            let items: Vec<_> = self.removed.keys().map(String::as_str).collect();
            parts.push(format!("removed {}", items.join(", ")));
        }
        f.write_str(&parts.join("; "))
    }
}

/// What changes from the overrides `old` to `new`.
pub fn diff(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> ConfigChanges {
    let mut changes = ConfigChanges::default();
    for (key, value) in new {
        match old.get(key) {
            None => {
                changes.added.insert(key.clone(), value.clone());
            }
            Some(was) if was != value => {
                changes.changed.insert(
                    key.clone(),
                    ChangedValue {
                        old: was.clone(),
                        new: value.clone(),
                    },
                );
            }
            Some(_) => {}
        }
    }
    for (key, value) in old {
        if !new.contains_key(key) {
            changes.removed.insert(key.clone(), value.clone());
        }
    }
    changes
}

/// A topic's overrides from its DescribeConfigs result (of v1+, where each
/// entry says its config source).
pub fn topic_configs_from(result: &DescribeConfigsResult) -> TopicConfigs {
    let mut out = TopicConfigs::default();
    for entry in &result.configs {
        if entry.config_source != DYNAMIC_TOPIC_CONFIG {
            continue;
        }
        let name = entry.name.to_string();
        let why = if entry.is_sensitive {
            Some(SENSITIVE)
        } else {
            excluded(&name)
        };
        match (why, &entry.value) {
            (None, Some(value)) => {
                out.configs.insert(name, value.to_string());
            }
            (None, None) => {
                out.skipped.insert(name, NO_VALUE.to_owned());
            }
            (Some(why), _) => {
                out.skipped.insert(name, why.to_owned());
            }
        }
    }
    out
}

fn describe_request(version: i16, topics: &[String]) -> DescribeConfigsRequest {
    let resources = topics
        .iter()
        .map(|t| {
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(StrBytes::from_string(t.clone()))
                .with_configuration_keys(None)
        })
        .collect();
    let request = DescribeConfigsRequest::default()
        .with_resources(resources)
        .with_include_synonyms(false);
    if version >= 3 {
        request.with_include_documentation(false)
    } else {
        request
    }
}

/// The client names APIs it does not know "request"; say which one failed.
fn named(e: ClientError) -> ClientError {
    const API: &str = "DescribeConfigs";
    match e {
        ClientError::Decode {
            addr, version, reason, ..
        } => ClientError::Decode {
            addr,
            api: API,
            version,
            reason,
        },
        ClientError::Encode {
            addr, version, reason, ..
        } => ClientError::Encode {
            addr,
            api: API,
            version,
            reason,
        },
        other => other,
    }
}

/// Sorts one DescribeConfigs response for the `asked` topics into `report`.
fn take_results(results: &[DescribeConfigsResult], asked: &[String], report: &mut TopicConfigReport) {
    let mut answered = BTreeSet::new();
    for result in results {
        let name = result.resource_name.to_string();
        if result.resource_type != RESOURCE_TOPIC || !asked.contains(&name) || !answered.insert(name.clone()) {
            continue;
        }
        match result.error_code {
            codes::NONE => {
                report.topics.insert(name, topic_configs_from(result));
            }
            codes::UNKNOWN_TOPIC_OR_PARTITION => {
                report.missing.insert(name);
            }
            code => {
                let message = result.error_message.as_deref().unwrap_or_default();
                let error = if message.is_empty() {
                    format!("DescribeConfigs error code {code}")
                } else {
                    format!("DescribeConfigs error code {code}: {message}")
                };
                report.errors.insert(name, error);
            }
        }
    }
    for topic in asked {
        if !answered.contains(topic) {
            report
                .errors
                .insert(topic.clone(), "not in the source's DescribeConfigs answer".into());
        }
    }
}

/// The config overrides of `topics` at the source, with the topics the
/// source does not have and those it could not describe; see the module
/// documentation. `Err` only when the connection fails or the source
/// serves no DescribeConfigs version we speak.
pub async fn fetch_topic_configs_report(
    source: &mut Connection,
    topics: &[String],
) -> Result<TopicConfigReport, ClientError> {
    let mut report = TopicConfigReport::default();
    let topics: Vec<String> = topics.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
    if topics.is_empty() {
        return Ok(report);
    }
    let (min, max) = DESCRIBE_CONFIGS_VERSIONS;
    let version = source.version_for_key(ApiKey::DescribeConfigs as i16, "DescribeConfigs", min, max)?;
    for chunk in topics.chunks(TOPICS_PER_REQUEST) {
        let response = source
            .request(&describe_request(version, chunk), version)
            .await
            .map_err(named)?;
        take_results(&response.results, chunk, &mut report);
    }
    for (topic, error) in &report.errors {
        tracing::warn!(
            source = source.addr(),
            topic,
            error,
            "cannot read a source topic's configs"
        );
    }
    Ok(report)
}

/// The config overrides of `topics` at the source, minus the
/// [`EXCLUDED_CONFIGS`] and sensitive ones. A topic missing at the source
/// (or that the source could not describe, logged) is absent from the map.
/// `Err` only when the connection fails or the source serves no
/// DescribeConfigs version we speak (librdkafka's mock cluster:
/// [`ClientError::NoCommonVersion`]).
pub async fn fetch_topic_configs(
    source: &mut Connection,
    topics: &[String],
) -> Result<BTreeMap<String, TopicConfigs>, ClientError> {
    Ok(fetch_topic_configs_report(source, topics).await?.topics)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use glommio::net::TcpListener;
    use glommio::{LocalExecutorBuilder, Placement};
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, DescribeConfigsResponse};
    use kafka_protocol::protocol::{Decodable, Encodable};
    use ringmirror_dataplane::client::ConnectionOptions;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn entry(name: &str, value: Option<&str>, source: i8, sensitive: bool) -> DescribeConfigsResourceResult {
        DescribeConfigsResourceResult::default()
            .with_name(StrBytes::from_string(name.to_owned()))
            .with_value(value.map(|v| StrBytes::from_string(v.to_owned())))
            .with_config_source(source)
            .with_is_sensitive(sensitive)
    }

    fn result(topic: &str, code: i16, configs: Vec<DescribeConfigsResourceResult>) -> DescribeConfigsResult {
        DescribeConfigsResult::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_owned()))
            .with_error_code(code)
            .with_configs(configs)
    }

    /// What a Kafka broker answers for a topic with overrides: its own
    /// settings, broker-level ones, defaults, a throttle, a secret.
    fn orders() -> DescribeConfigsResult {
        result(
            "orders",
            0,
            vec![
                entry("cleanup.policy", Some("compact,delete"), DYNAMIC_TOPIC_CONFIG, false),
                entry("retention.ms", Some("86400000"), DYNAMIC_TOPIC_CONFIG, false),
                entry(
                    "message.timestamp.type",
                    Some("LogAppendTime"),
                    DYNAMIC_TOPIC_CONFIG,
                    false,
                ),
                entry("segment.bytes", Some("1073741824"), 5, false),
                entry("compression.type", Some("zstd"), 4, false),
                entry("max.message.bytes", Some("2000000"), 2, false),
                entry("min.insync.replicas", Some("2"), DYNAMIC_TOPIC_CONFIG, false),
                entry(
                    "leader.replication.throttled.replicas",
                    Some("0:1,1:2"),
                    DYNAMIC_TOPIC_CONFIG,
                    false,
                ),
                entry(
                    "confluent.tier.local.hotset.ms",
                    Some("1000"),
                    DYNAMIC_TOPIC_CONFIG,
                    false,
                ),
                entry("custom.secret", None, DYNAMIC_TOPIC_CONFIG, true),
                entry("custom.empty", None, DYNAMIC_TOPIC_CONFIG, false),
            ],
        )
    }

    fn expected_orders() -> TopicConfigs {
        let skipped = |name: &str| (name.to_owned(), excluded(name).expect("excluded").to_owned());
        TopicConfigs {
            configs: map(&[
                ("cleanup.policy", "compact,delete"),
                ("message.timestamp.type", "LogAppendTime"),
                ("retention.ms", "86400000"),
            ]),
            skipped: BTreeMap::from([
                skipped("min.insync.replicas"),
                skipped("leader.replication.throttled.replicas"),
                skipped("confluent.tier.local.hotset.ms"),
                ("custom.secret".to_owned(), SENSITIVE.to_owned()),
                ("custom.empty".to_owned(), NO_VALUE.to_owned()),
            ]),
        }
    }

    #[test]
    fn the_exclude_list_covers_throttles_placement_and_storage() {
        for name in [
            "leader.replication.throttled.replicas",
            "follower.replication.throttled.replicas",
            "confluent.placement.constraints",
            "min.insync.replicas",
            "unclean.leader.election.enable",
            "remote.storage.enable",
            "local.retention.ms",
            "confluent.tier.enable",
            "confluent.value.schema.validation",
        ] {
            assert!(excluded(name).is_some(), "{name}");
        }
        for name in [
            "cleanup.policy",
            "retention.ms",
            "retention.bytes",
            "max.message.bytes",
            "message.timestamp.type",
            "message.timestamp.difference.max.ms",
            "compression.type",
            "min.compaction.lag.ms",
            "confluent.placement",
            "confluent.tie",
        ] {
            assert_eq!(excluded(name), None, "{name}");
        }
        let names: BTreeSet<_> = EXCLUDED_CONFIGS.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), EXCLUDED_CONFIGS.len(), "no duplicates");
        assert!(
            EXCLUDED_CONFIGS
                .iter()
                .chain(EXCLUDED_CONFIG_PREFIXES)
                .all(|(_, why)| !why.is_empty())
        );
    }

    #[test]
    fn only_the_topic_s_own_settings_are_kept() {
        assert_eq!(topic_configs_from(&orders()), expected_orders());
        assert_eq!(topic_configs_from(&result("t", 0, vec![])), TopicConfigs::default());
    }

    #[test]
    fn diff_names_added_changed_and_removed_keys() {
        let old = map(&[("a", "1"), ("b", "1"), ("c", "1")]);
        let new = map(&[("a", "1"), ("b", "2"), ("d", "4")]);
        let changes = diff(&old, &new);
        assert_eq!(changes.added, map(&[("d", "4")]));
        assert_eq!(
            changes.changed,
            BTreeMap::from([(
                "b".to_owned(),
                ChangedValue {
                    old: "1".into(),
                    new: "2".into()
                }
            )])
        );
        assert_eq!(changes.removed, map(&[("c", "1")]));
        assert_eq!(changes.len(), 3);
        assert_eq!(changes.to_string(), "added d=4; changed b: 1 -> 2; removed c");
        assert!(diff(&new, &new).is_empty());
        assert_eq!(diff(&new, &new).to_string(), "no changes");
        assert_eq!(diff(&BTreeMap::new(), &new).added, new);
        assert_eq!(diff(&new, &BTreeMap::new()).removed, new);
        let json = serde_json::to_value(&changes).unwrap();
        assert_eq!(json["changed"]["b"]["new"], "2");
    }

    #[test]
    fn results_are_sorted_into_configs_missing_and_errors() {
        let asked: Vec<String> = ["orders", "gone", "secret", "silent"].map(String::from).into();
        let mut forbidden = result("secret", 29, vec![]);
        forbidden.error_message = Some(StrBytes::from_static_str("Topic authorization failed."));
        let results = vec![
            orders(),
            result("gone", codes::UNKNOWN_TOPIC_OR_PARTITION, vec![]),
            forbidden,
            // Not asked, another resource type, a second answer: ignored.
            result("other", 0, vec![entry("retention.ms", Some("1"), 1, false)]),
            result("orders", 0, vec![]).with_resource_type(4),
            result("orders", 0, vec![]),
        ];
        let mut report = TopicConfigReport::default();
        take_results(&results, &asked, &mut report);
        assert_eq!(
            report.topics,
            BTreeMap::from([("orders".to_owned(), expected_orders())])
        );
        assert_eq!(report.missing, BTreeSet::from(["gone".to_owned()]));
        assert_eq!(
            report.errors,
            map(&[
                ("secret", "DescribeConfigs error code 29: Topic authorization failed."),
                ("silent", "not in the source's DescribeConfigs answer"),
            ])
        );
    }

    // ---- against a fake broker, at every version ----

    /// A broker that speaks DescribeConfigs up to `max` (not at all: None)
    /// and answers from `results`.
    #[derive(Default)]
    struct Fake {
        max: Option<i16>,
        results: Vec<DescribeConfigsResult>,
        seen: Seen,
    }

    /// Each DescribeConfigs request: (version, topics, include_synonyms,
    /// include_documentation).
    type Seen = Vec<(i16, Vec<String>, bool, bool)>;

    impl crate::fake_broker::Answer for Fake {
        fn answer(&mut self, api: ApiKey, version: i16, buf: &mut &[u8]) -> Vec<u8> {
            let mut out = Vec::new();
            match api {
                ApiKey::ApiVersions => {
                    ApiVersionsRequest::decode(buf, version).unwrap();
                    let mut keys = vec![
                        ApiVersion::default()
                            .with_api_key(ApiKey::ApiVersions as i16)
                            .with_max_version(3),
                    ];
                    if let Some(max) = self.max {
                        keys.push(
                            ApiVersion::default()
                                .with_api_key(ApiKey::DescribeConfigs as i16)
                                .with_min_version(0)
                                .with_max_version(max),
                        );
                    }
                    ApiVersionsResponse::default()
                        .with_api_keys(keys)
                        .encode(&mut out, version)
                        .unwrap();
                }
                ApiKey::DescribeConfigs => {
                    let r = DescribeConfigsRequest::decode(buf, version).unwrap();
                    assert!(
                        r.resources
                            .iter()
                            .all(|r| r.resource_type == RESOURCE_TOPIC && r.configuration_keys.is_none())
                    );
                    let topics: Vec<String> = r.resources.iter().map(|r| r.resource_name.to_string()).collect();
                    self.seen
                        .push((version, topics.clone(), r.include_synonyms, r.include_documentation));
                    let results = topics
                        .iter()
                        .map(|t| {
                            self.results
                                .iter()
                                .find(|r| r.resource_name.as_str() == t)
                                .cloned()
                                .unwrap_or_else(|| result(t, codes::UNKNOWN_TOPIC_OR_PARTITION, vec![]))
                        })
                        .collect();
                    DescribeConfigsResponse::default()
                        .with_results(results)
                        .encode(&mut out, version)
                        .unwrap();
                }
                other => panic!("unexpected {other:?}"),
            }
            out
        }
    }

    /// Runs `topics` through [`fetch_topic_configs_report`] against a fake
    /// broker set up as `fake`; returns the result and the requests seen.
    fn fetch_from(fake: Fake, topics: Vec<String>) -> (Result<TopicConfigReport, String>, Seen) {
        LocalExecutorBuilder::new(Placement::Unbound)
            .name("topic-config-sync-test")
            .io_memory(1 << 20)
            .spawn(move || async move {
                let fake = Rc::new(RefCell::new(fake));
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap().to_string();
                glommio::spawn_local(crate::fake_broker::serve(listener, Rc::clone(&fake))).detach();
                let mut conn = Connection::connect(&addr, ConnectionOptions::default()).await.unwrap();
                let result = fetch_topic_configs_report(&mut conn, &topics)
                    .await
                    .map_err(|e| e.to_string());
                let seen = std::mem::take(&mut fake.borrow_mut().seen);
                (result, seen)
            })
            .expect("executor")
            .join()
            .expect("join")
    }

    #[test]
    fn every_version_is_read_alike() {
        for max in 1..=4 {
            let fake = Fake {
                max: Some(max),
                results: vec![orders()],
                ..Fake::default()
            };
            let (report, seen) = fetch_from(fake, vec!["orders".into(), "gone".into(), "orders".into()]);
            let report = report.unwrap_or_else(|e| panic!("v{max}: {e}"));
            assert_eq!(
                report.topics,
                BTreeMap::from([("orders".to_owned(), expected_orders())]),
                "v{max}"
            );
            assert_eq!(report.missing, BTreeSet::from(["gone".to_owned()]), "v{max}");
            assert!(report.errors.is_empty(), "v{max}: {:?}", report.errors);
            assert_eq!(
                seen,
                [(max, vec!["gone".to_owned(), "orders".to_owned()], false, false)],
                "one request, each topic once"
            );
        }
    }

    #[test]
    fn many_topics_are_asked_in_chunks() {
        let topics: Vec<String> = (0..TOPICS_PER_REQUEST + 5).map(|i| format!("t{i:04}")).collect();
        let results = topics
            .iter()
            .map(|t| result(t, 0, vec![entry("retention.ms", Some(t), DYNAMIC_TOPIC_CONFIG, false)]))
            .collect();
        let fake = Fake {
            max: Some(4),
            results,
            ..Fake::default()
        };
        let (report, seen) = fetch_from(fake, topics.clone());
        let report = report.unwrap();
        assert_eq!(report.topics.len(), topics.len());
        assert_eq!(report.topics["t0104"].configs, map(&[("retention.ms", "t0104")]));
        let sizes: Vec<_> = seen.iter().map(|(_, t, _, _)| t.len()).collect();
        assert_eq!(sizes, [TOPICS_PER_REQUEST, 5]);
    }

    #[test]
    fn a_source_without_describe_configs_is_a_clear_error_and_no_topics_ask_nothing() {
        let (report, seen) = fetch_from(Fake::default(), vec!["orders".into()]);
        let error = report.unwrap_err();
        assert!(error.contains("no common version of DescribeConfigs"), "{error}");
        assert!(seen.is_empty());
        let (report, seen) = fetch_from(Fake::default(), vec![]);
        assert_eq!(report.unwrap(), TopicConfigReport::default());
        assert!(seen.is_empty());
    }
}
