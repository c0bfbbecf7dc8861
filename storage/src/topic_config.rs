//! The topic configs a client may set on a local topic (CreateTopics), as
//! Kafka 4.3 defines them (`LogConfig`'s `ConfigDef` in Kafka's storage
//! module: names, types and bounds), checked with Kafka's error messages;
//! and their text form in a local partition's marker file, which keeps
//! them across restarts (one `name=value` line each).
//!
//! It also maps Kafka's names to the log's settings and back: the
//! cleaner's and retention's settings for a topic (its overrides win over
//! the log's), and the log's settings under Kafka's names for
//! DescribeConfigs. What a setting does is the log's and the shard's.

use std::collections::BTreeMap;

use crate::log::{CleanOptions, CleanupPolicy, LogConfig};

/// Topic config overrides by name.
pub type TopicConfigMap = BTreeMap<String, String>;

/// What values a topic config takes (Kafka's `ConfigDef.Type` and validator).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A LONG at least `min` (`None`: any).
    Long(Option<i64>),
    /// An INT within `[min, max]`.
    Int(i32, i32),
    /// A DOUBLE within `[min, max]`.
    Double(f64, f64),
    Boolean,
    /// A STRING, one of these.
    OneOf(&'static [&'static str]),
    /// A LIST whose items are each one of these (the list may be empty).
    ListOf(&'static [&'static str]),
    /// A LIST of `<partition>:<broker>` pairs, or `*` (the throttled replicas).
    ReplicaList,
    /// gzip's level: an INT from 1 to 9, or -1 (the codec's default).
    GzipLevel,
}

/// Every topic config Kafka 4.3 accepts (`LogConfig.configNames()`), with its kind.
const TOPIC_CONFIGS: &[(&str, Kind)] = &[
    ("cleanup.policy", Kind::ListOf(&["compact", "delete"])),
    ("compression.gzip.level", Kind::GzipLevel),
    ("compression.lz4.level", Kind::Int(1, 17)),
    (
        "compression.type",
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    ("compression.zstd.level", Kind::Int(-131_072, 22)),
    ("delete.retention.ms", Kind::Long(Some(0))),
    ("file.delete.delay.ms", Kind::Long(Some(0))),
    ("flush.messages", Kind::Long(Some(1))),
    ("flush.ms", Kind::Long(Some(0))),
    ("follower.replication.throttled.replicas", Kind::ReplicaList),
    ("index.interval.bytes", Kind::Int(0, i32::MAX)),
    ("internal.segment.bytes", Kind::Int(i32::MIN, i32::MAX)),
    ("leader.replication.throttled.replicas", Kind::ReplicaList),
    ("local.retention.bytes", Kind::Long(Some(-2))),
    ("local.retention.ms", Kind::Long(Some(-2))),
    ("max.compaction.lag.ms", Kind::Long(Some(1))),
    ("max.message.bytes", Kind::Int(0, i32::MAX)),
    ("message.timestamp.after.max.ms", Kind::Long(Some(0))),
    ("message.timestamp.before.max.ms", Kind::Long(Some(0))),
    ("message.timestamp.type", Kind::OneOf(&["CreateTime", "LogAppendTime"])),
    ("min.cleanable.dirty.ratio", Kind::Double(0.0, 1.0)),
    ("min.compaction.lag.ms", Kind::Long(Some(0))),
    ("min.insync.replicas", Kind::Int(1, i32::MAX)),
    ("preallocate", Kind::Boolean),
    ("remote.log.copy.disable", Kind::Boolean),
    ("remote.log.delete.on.disable", Kind::Boolean),
    ("remote.storage.enable", Kind::Boolean),
    ("retention.bytes", Kind::Long(None)),
    ("retention.ms", Kind::Long(Some(-1))),
    ("segment.bytes", Kind::Int(1_048_576, i32::MAX)),
    ("segment.index.bytes", Kind::Int(4, i32::MAX)),
    ("segment.jitter.ms", Kind::Long(Some(0))),
    ("segment.ms", Kind::Long(Some(1))),
    ("unclean.leader.election.enable", Kind::Boolean),
];

/// Checks one config a client sets on a topic; the error is Kafka's
/// message for it (answered with INVALID_CONFIG). Kafka's ConfigDef trims
/// values before parsing them, and so does this check.
pub fn validate(name: &str, value: Option<&str>) -> Result<(), String> {
    let Some(&(_, kind)) = TOPIC_CONFIGS.iter().find(|(n, _)| *n == name) else {
        return Err(format!("Unknown topic config name: {name}"));
    };
    // ControllerConfigurationValidator refuses null values of topic configs.
    let Some(raw) = value else {
        return Err(format!("Null value not supported for topic configs: {name}"));
    };
    let value = raw.trim();
    let invalid = |why: String| Err(format!("Invalid value {raw} for configuration {name}: {why}"));
    match kind {
        Kind::Long(min) => match value.parse::<i64>() {
            Err(_) => invalid("Not a number of type LONG".into()),
            Ok(v) if min.is_some_and(|m| v < m) => invalid(format!("Value must be at least {}", min.unwrap_or(0))),
            Ok(_) => Ok(()),
        },
        Kind::Int(min, max) => match value.parse::<i32>() {
            Err(_) => invalid("Not a number of type INT".into()),
            Ok(v) if v < min => invalid(format!("Value must be at least {min}")),
            Ok(v) if v > max => invalid(format!("Value must be no more than {max}")),
            Ok(_) => Ok(()),
        },
        Kind::Double(min, max) => match value.parse::<f64>() {
            Err(_) => invalid("Not a number of type DOUBLE".into()),
            Ok(v) if v < min => invalid(format!("Value must be at least {min}")),
            Ok(v) if v > max => invalid(format!("Value must be no more than {max}")),
            Ok(_) => Ok(()),
        },
        Kind::Boolean => match value.to_ascii_lowercase().as_str() {
            "true" | "false" => Ok(()),
            _ => invalid("Expected value to be either true or false".into()),
        },
        Kind::OneOf(allowed) => {
            if allowed.contains(&value) {
                Ok(())
            } else {
                invalid(format!("String must be one of: {}", allowed.join(", ")))
            }
        }
        Kind::ListOf(allowed) => {
            let items = value.split(',').map(str::trim).filter(|i| !i.is_empty());
            match items.into_iter().find(|i| !allowed.contains(i)) {
                Some(_) => invalid(format!("String must be one of: {}", allowed.join(", "))),
                None => Ok(()),
            }
        }
        Kind::GzipLevel => match value.parse::<i32>() {
            Err(_) => invalid("Not a number of type INT".into()),
            Ok(v) if v == -1 || (1..=9).contains(&v) => Ok(()),
            Ok(_) => invalid("Value must be between 1 and 9 or equal to -1".into()),
        },
        Kind::ReplicaList => {
            let pair = |i: &str| {
                i.split_once(':')
                    .is_some_and(|(p, b)| p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok())
            };
            let items: Vec<&str> = value.split(',').map(str::trim).filter(|i| !i.is_empty()).collect();
            if items == ["*"] || items.iter().all(|i| pair(i)) {
                Ok(())
            } else {
                // Kafka shows the value as the list it parsed.
                Err(format!(
                    "Invalid value [{}] for configuration {name}: {name} must be the literal '*' or a list of \
                     replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                    items.join(", ")
                ))
            }
        }
    }
}

/// The text of a local partition's marker file for these configs: one
/// `name=value` line each. Validated values never hold a line break.
pub fn encode(configs: &TopicConfigMap) -> String {
    configs
        .iter()
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect()
}

/// The configs [`encode`] wrote; lines without `=` (none are written) are
/// skipped. An empty text (a marker of an older version, or of a topic that
/// became local by failover, whose configs the control plane keeps) is none.
pub fn decode(text: &str) -> TopicConfigMap {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// How the cleaner treats a partition of a topic with these settings:
/// `None` unless it is compacted (`cleanup.policy` `compact` or
/// `compact,delete`). The topic's overrides, by Kafka name, win over the
/// log's settings.
pub fn clean_options(config: &LogConfig, overrides: Option<&TopicConfigMap>) -> Option<CleanOptions> {
    let get = |name: &str| overrides.and_then(|o| o.get(name));
    let compact = match get("cleanup.policy") {
        Some(policy) => policy.split(',').any(|p| p.trim() == "compact"),
        None => config.cleanup_policy == CleanupPolicy::Compact,
    };
    if !compact {
        return None;
    }
    let mut options = CleanOptions::from_config(config);
    if let Some(ms) = get("delete.retention.ms").and_then(|v| v.parse().ok()) {
        options.delete_retention_ms = ms;
    }
    if let Some(ratio) = get("min.cleanable.dirty.ratio").and_then(|v| v.parse().ok()) {
        options.min_cleanable_ratio = Some(ratio);
    }
    Some(options)
}

/// Retention's limits for a partition of a topic with these settings, as
/// (`retention.ms`, `retention.bytes`), `None` for no limit: `None` as a
/// whole unless the cleanup policy deletes and one limit is set. The
/// topic's overrides, by Kafka name, win over the log's settings.
pub fn retention_limits(config: &LogConfig, overrides: Option<&TopicConfigMap>) -> Option<(Option<u64>, Option<u64>)> {
    let get = |name: &str| overrides.and_then(|o| o.get(name));
    let deletes = match get("cleanup.policy") {
        Some(policy) => policy.split(',').any(|p| p.trim() == "delete"),
        None => config.cleanup_policy == CleanupPolicy::Delete,
    };
    if !deletes {
        return None;
    }
    // -1 is Kafka's "no limit".
    let limit = |name: &str, default: Option<u64>| match get(name).map(|v| v.parse::<i64>()) {
        Some(Ok(v)) => u64::try_from(v).ok(),
        _ => default,
    };
    let retention_ms = limit("retention.ms", config.retention_ms);
    let retention_bytes = limit("retention.bytes", config.retention_bytes);
    if retention_ms.is_none() && retention_bytes.is_none() {
        return None;
    }
    Some((retention_ms, retention_bytes))
}

/// The log's settings under Kafka's topic config names, each with whether
/// it differs from the built-in default.
pub fn log_settings(c: &LogConfig) -> Vec<(&'static str, String, bool)> {
    let d = LogConfig::default();
    vec![
        (
            "cleanup.policy",
            match c.cleanup_policy {
                CleanupPolicy::Delete => "delete",
                CleanupPolicy::Compact => "compact",
            }
            .to_string(),
            c.cleanup_policy != d.cleanup_policy,
        ),
        (
            "delete.retention.ms",
            c.delete_retention_ms.to_string(),
            c.delete_retention_ms != d.delete_retention_ms,
        ),
        (
            "segment.bytes",
            c.segment_bytes.to_string(),
            c.segment_bytes != d.segment_bytes,
        ),
        ("segment.ms", c.segment_ms.to_string(), c.segment_ms != d.segment_ms),
        (
            "segment.index.bytes",
            c.segment_index_bytes.to_string(),
            c.segment_index_bytes != d.segment_index_bytes,
        ),
        (
            "index.interval.bytes",
            c.index_interval_bytes.to_string(),
            c.index_interval_bytes != d.index_interval_bytes,
        ),
        (
            "flush.messages",
            c.flush_messages.to_string(),
            c.flush_messages != d.flush_messages,
        ),
        ("flush.ms", c.flush_ms.to_string(), c.flush_ms != d.flush_ms),
        (
            "max.message.bytes",
            c.max_batch_bytes.to_string(),
            c.max_batch_bytes != d.max_batch_bytes,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_overrides_win_over_the_log_settings() {
        let compact = LogConfig {
            cleanup_policy: CleanupPolicy::Compact,
            ..LogConfig::default()
        };
        let overrides = |pairs: &[(&str, &str)]| -> TopicConfigMap {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert!(clean_options(&LogConfig::default(), None).is_none());
        let options = clean_options(&compact, None).unwrap();
        assert_eq!(options.delete_retention_ms, 86_400_000);
        assert_eq!(options.min_cleanable_ratio, Some(0.5));
        let synced = overrides(&[
            ("cleanup.policy", "compact, delete"),
            ("delete.retention.ms", "1000"),
            ("min.cleanable.dirty.ratio", "0.1"),
        ]);
        let options = clean_options(&LogConfig::default(), Some(&synced)).unwrap();
        assert_eq!(
            (options.delete_retention_ms, options.min_cleanable_ratio),
            (1000, Some(0.1))
        );
        assert!(clean_options(&compact, Some(&overrides(&[("cleanup.policy", "delete")]))).is_none());
    }

    /// Kafka 4.3.1's answers (`LogConfig.validate` on the same values).
    #[test]
    fn values_are_checked_as_kafka_checks_them() {
        let ok = [
            ("cleanup.policy", "compact"),
            ("cleanup.policy", "compact, delete"),
            ("cleanup.policy", ""),
            ("retention.ms", "-1"),
            ("retention.bytes", "-5"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("preallocate", "TRUE"),
            ("segment.bytes", " 1048576 "),
            ("leader.replication.throttled.replicas", "*"),
            ("follower.replication.throttled.replicas", "0:1,1:2"),
            ("compression.type", "zstd"),
        ];
        for (name, value) in ok {
            assert_eq!(validate(name, Some(value)), Ok(()), "{name}={value}");
        }
        let refused = [
            (
                "retention.ms",
                "abc",
                "Invalid value abc for configuration retention.ms: Not a number of type LONG",
            ),
            (
                "retention.ms",
                "-2",
                "Invalid value -2 for configuration retention.ms: Value must be at least -1",
            ),
            (
                "preallocate",
                "yes",
                "Invalid value yes for configuration preallocate: Expected value to be either true or false",
            ),
            (
                "segment.bytes",
                "100",
                "Invalid value 100 for configuration segment.bytes: Value must be at least 1048576",
            ),
            (
                "min.cleanable.dirty.ratio",
                "1.5",
                "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
            ),
            (
                "compression.type",
                "none",
                "Invalid value none for configuration compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
            ),
            (
                "cleanup.policy",
                "compacted",
                "Invalid value compacted for configuration cleanup.policy: String must be one of: compact, delete",
            ),
            (
                "compression.gzip.level",
                "0",
                "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1",
            ),
            (
                "segment.bytes",
                "3000000000",
                "Invalid value 3000000000 for configuration segment.bytes: Not a number of type INT",
            ),
            (
                "leader.replication.throttled.replicas",
                "a",
                "Invalid value [a] for configuration leader.replication.throttled.replicas: \
                 leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the \
                 following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
            ),
            ("no.such.config", "1", "Unknown topic config name: no.such.config"),
        ];
        for (name, value, message) in refused {
            assert_eq!(validate(name, Some(value)), Err(message.to_owned()), "{name}={value}");
        }
        assert_eq!(
            validate("retention.ms", None),
            Err("Null value not supported for topic configs: retention.ms".to_owned())
        );
    }

    #[test]
    fn marker_text_round_trips() {
        let configs: TopicConfigMap = [("cleanup.policy", "compact,delete"), ("retention.ms", "-1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(decode(&encode(&configs)), configs);
        assert!(decode("").is_empty(), "an empty marker holds no configs");
    }
}
