//! DescribeConfigs: a topic's configs as Kafka names them — its synced or
//! created overrides from the catalog, then its log's settings with their
//! source (the agent's file or the built-in default); a broker resource
//! has none. DESCRIBE_CONFIGS on the topic, or on the cluster for a
//! broker, is checked first (Kafka's `ConfigHelper`).

use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::connection::ClientConnection;
use super::handlers::str;
use crate::partition::registry::ServedPartition;
use crate::security::acls::{AclOperation, ResourceType};
use ringmirror_protocol::error_codes as ec;
use ringmirror_storage::log::{PartitionLog, TopicPartition};

/// DescribeConfigs resource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs config sources: the topic's own setting (an override,
/// DYNAMIC_TOPIC_CONFIG), a setting of the agent's configuration file
/// (STATIC_BROKER_CONFIG), a built-in default (DEFAULT_CONFIG).
const SOURCE_TOPIC_CONFIG: i8 = 1;
const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
const SOURCE_DEFAULT_CONFIG: i8 = 5;

/// A topic's configs as Kafka names them, from its log's settings, each
/// with its source: the agent's file when it differs from the built-in
/// default, else the default. Never DYNAMIC_TOPIC_CONFIG: a topic's own
/// settings are its overrides in the catalog ([`with_overrides`]), so a
/// peer syncing configs from us takes exactly those.
fn topic_configs(_p: &ServedPartition, log: &PartitionLog, _: &()) -> Vec<(&'static str, String, i8)> {
    ringmirror_storage::topic_config::log_settings(log.config())
        .into_iter()
        .map(|(name, value, differs)| {
            let source = if differs {
                SOURCE_STATIC_BROKER_CONFIG
            } else {
                SOURCE_DEFAULT_CONFIG
            };
            (name, value, source)
        })
        .collect()
}

/// A topic's configs as DescribeConfigs answers them: its overrides from
/// the catalog (DYNAMIC_TOPIC_CONFIG, in place of the log's value of the
/// same name, the others after the log's settings, by name), and the log's
/// settings for the rest.
fn with_overrides(
    log_settings: Vec<(&'static str, String, i8)>,
    overrides: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String, i8)> {
    let mut configs: Vec<(String, String, i8)> = log_settings
        .into_iter()
        .map(|(name, value, source)| match overrides.get(name) {
            Some(v) => (name.to_owned(), v.clone(), SOURCE_TOPIC_CONFIG),
            None => (name.to_owned(), value, source),
        })
        .collect();
    let extra: Vec<_> = overrides
        .iter()
        .filter(|(name, _)| !configs.iter().any(|(n, _, _)| n == *name))
        .map(|(name, value)| (name.clone(), value.clone(), SOURCE_TOPIC_CONFIG))
        .collect();
    configs.extend(extra);
    configs
}

pub(super) async fn describe_configs(
    conn: &mut ClientConnection,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let catalog = conn.catalog.get();
    let mut results = Vec::new();
    for resource in &request.resources {
        let name = resource.resource_name.to_string();
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        // DESCRIBE_CONFIGS on the topic, or on the cluster for a broker
        // (Kafka's ConfigHelper / handleDescribeConfigsRequest).
        let denied = match resource.resource_type {
            RESOURCE_TOPIC if !conn.authorized(AclOperation::DescribeConfigs, ResourceType::Topic, &name) => {
                Some(ec::TOPIC_AUTHORIZATION_FAILED)
            }
            RESOURCE_BROKER if !conn.authorized_cluster(AclOperation::DescribeConfigs) => {
                Some(ec::CLUSTER_AUTHORIZATION_FAILED)
            }
            _ => None,
        };
        if let Some(code) = denied {
            results.push(
                result
                    .with_error_code(code)
                    .with_error_message(Some(str("Authorization failed."))),
            );
            continue;
        }
        let configs = match resource.resource_type {
            RESOURCE_TOPIC => {
                let Some(topic) = catalog.topic(&name) else {
                    results.push(
                        result
                            .with_error_code(ec::UNKNOWN_TOPIC_OR_PARTITION)
                            .with_error_message(Some(str("unknown topic"))),
                    );
                    continue;
                };
                let owner = topic.partitions.iter().next().map(|(&p, e)| (p, e.shard));
                let log_settings = match owner {
                    Some((partition, shard)) => {
                        let item = (shard, TopicPartition::new(name.clone(), partition), ());
                        conn.access
                            .query(vec![item], topic_configs)
                            .await
                            .pop()
                            .flatten()
                            .unwrap_or_default()
                    }
                    None => Vec::new(),
                };
                with_overrides(log_settings, &topic.configs)
            }
            RESOURCE_BROKER => Vec::new(),
            _ => {
                results.push(
                    result
                        .with_error_code(ec::INVALID_REQUEST)
                        .with_error_message(Some(str("unsupported resource type"))),
                );
                continue;
            }
        };
        let wanted = |key: &str| {
            resource
                .configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|k| &**k == key))
        };
        let configs = configs
            .into_iter()
            .filter(|(k, _, _)| wanted(k))
            .map(|(k, v, source)| {
                DescribeConfigsResourceResult::default()
                    .with_name(StrBytes::from_string(k))
                    .with_value(Some(StrBytes::from_string(v)))
                    .with_read_only(true)
                    .with_config_source(source)
            })
            .collect();
        results.push(result.with_configs(configs));
    }
    DescribeConfigsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn overrides_replace_log_settings_and_come_as_the_topic_s_own() {
        let log = vec![
            ("cleanup.policy", "delete".to_owned(), SOURCE_DEFAULT_CONFIG),
            ("segment.bytes", "100".to_owned(), SOURCE_STATIC_BROKER_CONFIG),
        ];
        let overrides = BTreeMap::from([
            ("retention.ms".to_owned(), "60000".to_owned()),
            ("cleanup.policy".to_owned(), "compact".to_owned()),
        ]);
        let own = |n: &str, v: &str, s| (n.to_owned(), v.to_owned(), s);
        assert_eq!(
            with_overrides(log.clone(), &overrides),
            [
                own("cleanup.policy", "compact", SOURCE_TOPIC_CONFIG),
                own("segment.bytes", "100", SOURCE_STATIC_BROKER_CONFIG),
                own("retention.ms", "60000", SOURCE_TOPIC_CONFIG),
            ]
        );
        assert_eq!(
            with_overrides(log, &BTreeMap::new()),
            [
                own("cleanup.policy", "delete", SOURCE_DEFAULT_CONFIG),
                own("segment.bytes", "100", SOURCE_STATIC_BROKER_CONFIG),
            ]
        );
    }
}
