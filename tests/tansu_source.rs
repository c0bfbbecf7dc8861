//! The `tansu` broker (crates.io `tansu` 0.6.0, an independent
//! Kafka-compatible broker; `scripts/setup.sh` installs it) as a mirror's
//! source, run as a process on loopback with in-memory storage — issue 6's
//! metadata sync "for what it supports", end to end through an in-process
//! agent:
//!
//! - **Data**: topics produced into by librdkafka (idempotent, lz4 and
//!   gzip) are mirrored byte for byte at the same offsets, with the same
//!   topic id and partition count.
//! - **Auto-discovery**: a topic created at tansu that matches
//!   `topics_include` starts mirroring by itself, one that does not stays
//!   out; `topics_exclude` updated to name a running topic stops it
//!   (STOPPED, data kept).
//! - **Consumer-group offsets** committed at tansu arrive at our listener,
//!   and a later commit arrives in a later round; a group active here (a
//!   live librdkafka consumer) is left alone until it is EMPTY again.
//! - **Topic configs**: tansu describes a topic's configs as DEFAULT_CONFIG
//!   (source 5), which by the protocol are not overrides: nothing is copied,
//!   and the round reports that without an error.
//! - **ACLs**: tansu answers DescribeAcls with none (its CreateAcls stores
//!   nothing), so an ACL of ours in the mirror's ACL filter is deleted as
//!   extra — what the source says.
//! - **Topic deletion** at tansu moves the topic's partitions to STOPPED
//!   once confirmed (absent by name and id over 3 rounds and 3 s; shown
//!   pending and still MIRRORING until then); its data stays served.
//! - **A changed cluster id** (tansu restarted with another one on the same
//!   address) halts sync with the reason in `describe`; no partition moves.
//!
//! Not covered because tansu 0.6.0 has no API for it: new partitions of an
//! existing topic (no CreatePartitions), share groups (no share-group
//! APIs), last mirror epochs (no DescribeClusterMirrors: every LME is -1).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DescribeConfigsRequest, DescribeConfigsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use ringmirror::agent::Agent;
use ringmirror_control::admin::{AdminRequest, PartitionView};
use ringmirror_control::mirror::MirrorConfig;
use ringmirror_dataplane::security::acls::{AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType};

use common::tansu::{Tansu, create_topics, delete_topic, free_addr, produce, tansu_binary};
use common::{KafkaConnection, SourcePartitionLog};

const DEADLINE: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const ORDERS: &str = "orders";
const TRADES: &str = "trades";
const EVENTS: &str = "events";
/// At tansu, never matching the mirror's include.
const AUDIT: &str = "audit";
const INCLUDE: &str = "orders|trades|events";
/// DescribeConfigs' config source of a value nobody set.
const DEFAULT_CONFIG: i8 = 5;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// A deletion at tansu is acted on after 3 rounds over 3 s (rounds every 1 s).
const DELETION_CONFIRM_ROUNDS: u32 = 3;
const DELETION_CONFIRM_MS: u64 = 3000;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

// ---------------------------------------------------------------------------
// Reading either side over the wire
// ---------------------------------------------------------------------------

fn conn(addr: &str) -> KafkaConnection {
    KafkaConnection::connect(addr, IO_TIMEOUT).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// Metadata v12 of `topics`: name → (topic id, partition count, error).
fn topics_at(addr: &str, topics: &[&str]) -> BTreeMap<String, ([u8; 16], usize, i16)> {
    let request = MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
                .collect(),
        ))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = conn(addr)
        .request(ApiKey::Metadata as i16, 12, &request)
        .expect("Metadata");
    response
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                (*t.topic_id.as_bytes(), t.partitions.len(), t.error_code),
            )
        })
        .collect()
}

/// Every batch of `topic`-`partition` as `addr` serves it.
fn served(addr: &str, topic: &str, partition: i32) -> SourcePartitionLog {
    common::source_partition_log(addr, topic, partition, DEADLINE)
}

/// DescribeConfigs v4 of `topic`: name → (value, config source).
fn described_configs(addr: &str, topic: &str) -> BTreeMap<String, (Option<String>, i8)> {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic)),
    ]);
    let response: DescribeConfigsResponse = conn(addr)
        .request(ApiKey::DescribeConfigs as i16, 4, &request)
        .expect("DescribeConfigs");
    let result = &response.results[0];
    assert_eq!(result.error_code, 0, "DescribeConfigs {topic} at {addr}");
    result
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                (c.value.as_ref().map(ToString::to_string), c.config_source),
            )
        })
        .collect()
}

fn topic_read(topic: &str, principal: &str) -> AclBinding {
    AclBinding::from_any_host(
        ResourceType::Topic,
        topic,
        PatternType::Literal,
        principal,
        AclOperation::Read,
        AclPermissionType::Allow,
    )
}

fn create_acl(addr: &str, binding: &AclBinding) {
    let request = CreateAclsRequest::default().with_creations(vec![binding.to_creation()]);
    let response: CreateAclsResponse = conn(addr)
        .request(ApiKey::CreateAcls as i16, 3, &request)
        .expect("CreateAcls");
    assert_eq!(response.results[0].error_code, 0, "CreateAcls at {addr}");
}

// ---------------------------------------------------------------------------
// The agent
// ---------------------------------------------------------------------------

fn mirror_definition(bootstrap: &str, exclude: &str) -> MirrorConfig {
    serde_json::from_value(serde_json::json!({
        "name": "dr",
        "bootstrap_servers": [bootstrap],
        "topics_include": INCLUDE,
        "topics_exclude": exclude,
        "fetch_max_wait_ms": 50,
        "fetch_partition_max_bytes": 32768,
        "metadata_refresh_interval_ms": 1000,
        "topic_deletion_confirm_rounds": DELETION_CONFIRM_ROUNDS,
        "topic_deletion_confirm_ms": DELETION_CONFIRM_MS,
    }))
    .expect("mirror definition")
}

/// The mirror's partitions of `topic`, by partition.
fn views_of(agent: &Agent, topic: &str) -> BTreeMap<i32, PartitionView> {
    common::describe_mirror(agent, "dr")
        .partitions
        .into_iter()
        .filter(|v| v.topic == topic)
        .map(|v| (v.partition, v))
        .collect()
}

/// Whether every one of `topic`'s `partitions` is in `state`.
fn all_in(agent: &Agent, topic: &str, partitions: i32, state: &str) -> Result<(), String> {
    let views = views_of(agent, topic);
    let states: Vec<&str> = views.values().map(|v| v.state.as_str()).collect();
    if views.len() == partitions as usize && states.iter().all(|s| *s == state) {
        Ok(())
    } else {
        Err(format!("{topic}: {states:?}"))
    }
}

/// Waits until our listener serves exactly tansu's batches of every
/// partition of `topic`, and checks they are the same bytes at the same
/// offsets (and the same topic id and partition count).
fn assert_served_as_at_tansu(tansu: &str, ours: &str, topic: &str, partitions: i32) {
    let at_tansu = topics_at(tansu, &[topic]);
    let at_ours = common::wait_until(DEADLINE, &format!("{topic} served by us"), || {
        let t = topics_at(ours, &[topic]);
        match t.get(topic) {
            Some(&(_, n, 0)) if n == partitions as usize => Ok(t),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(
        at_ours[topic], at_tansu[topic],
        "{topic}: (topic id, partitions, error)"
    );
    for p in 0..partitions {
        let source = served(tansu, topic, p);
        assert!(!source.batches.is_empty(), "{topic}-{p}: nothing produced at tansu");
        let mirrored = common::wait_until(DEADLINE, &format!("{topic}-{p} caught up"), || {
            let m = served(ours, topic, p);
            if m.high_watermark >= source.high_watermark {
                Ok(m)
            } else {
                Err(format!("at {} of {}", m.high_watermark, source.high_watermark))
            }
        });
        assert_eq!(
            (mirrored.log_start_offset, mirrored.high_watermark),
            (source.log_start_offset, source.high_watermark),
            "{topic}-{p}: (log start, high watermark)"
        );
        assert_eq!(mirrored.batches.len(), source.batches.len(), "{topic}-{p}: batches");
        for ((o_base, o_bytes), (s_base, s_bytes)) in mirrored.batches.iter().zip(&source.batches) {
            assert_eq!(o_base, s_base, "{topic}-{p}: batch offsets");
            assert!(
                o_bytes == s_bytes,
                "{topic}-{p}: batch at {o_base} differs from tansu's bytes"
            );
        }
    }
}

/// A stopped partition keeps every mirrored batch it served before
/// (`before`, per partition) and adds only the stop's own markers (a
/// MIRROR_PID_RESET; ABORTs of open transactions, none here): nothing more
/// from the source.
fn assert_kept_as_stopped(ours: &str, topic: &str, before: &[SourcePartitionLog]) {
    for (p, before) in before.iter().enumerate() {
        let now = served(ours, topic, p as i32);
        assert!(
            now.batches.starts_with(&before.batches),
            "{topic}-{p}: the mirrored batches are kept as they were"
        );
        let added = &now.batches[before.batches.len()..];
        assert!(
            !added.is_empty() && added.iter().all(|(_, b)| common::batch_view(b).is_control()),
            "{topic}-{p}: after stopping, only the stop's markers: {} batch(es) added",
            added.len()
        );
    }
}

#[test]
fn tansu_as_a_source_mirrors_data_and_syncs_what_it_supports() {
    let _logs = common::logs::capture("info");
    let binary = tansu_binary();
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let tansu = Tansu::start(&binary, &addr, "tansu-east", dir.path().join("tansu-east.log"));

    create_topics(
        &addr,
        &[
            (ORDERS, 3, &[("retention.ms", "86400000")]),
            (TRADES, 2, &[]),
            (AUDIT, 1, &[]),
        ],
    );
    produce(&addr, ORDERS, 3, 60, "lz4");
    produce(&addr, ORDERS, 3, 25, "gzip");
    produce(&addr, TRADES, 2, 30, "none");
    produce(&addr, AUDIT, 1, 5, "none");
    common::admin_commit(&addr, "billing", ORDERS, &[(0, 40, -1), (1, 12, -1), (2, 85, -1)], "m1");
    // Why no config is copied: tansu describes the configs set at creation
    // as DEFAULT_CONFIG, which a Kafka client reads as "no override".
    assert_eq!(
        described_configs(&addr, ORDERS).get("retention.ms"),
        Some(&(Some("86400000".into()), DEFAULT_CONFIG)),
        "tansu's DescribeConfigs"
    );

    let agent = Agent::start(common::serving_config(&dir.path().join("data"), "")).expect("agent");
    let ours = agent.listener_addr().expect("listening").to_string();
    // An ACL of ours in the default ACL filter (topics and groups); tansu
    // holds none, so the first round deletes it.
    let local_acl = topic_read(ORDERS, "User:reporting");
    create_acl(&ours, &local_acl);
    assert_eq!(common::acls_at(&ours), [local_acl]);

    agent
        .admin(AdminRequest::CreateMirror {
            config: mirror_definition(&addr, "__.*"),
        })
        .expect("create the mirror");

    // Data, topic ids and partition counts.
    assert_served_as_at_tansu(&addr, &ours, ORDERS, 3);
    assert_served_as_at_tansu(&addr, &ours, TRADES, 2);
    common::wait_until(DEADLINE, "orders and trades MIRRORING", || {
        all_in(&agent, ORDERS, 3, "MIRRORING").and(all_in(&agent, TRADES, 2, "MIRRORING"))
    });
    let d = common::describe_mirror(&agent, "dr");
    assert_eq!(d.source_cluster_id.as_deref(), Some("tansu-east"));
    assert_eq!(d.topics, [ORDERS, TRADES], "audit does not match the include");
    assert_eq!(
        topics_at(&ours, &[AUDIT]).get(AUDIT).map(|t| t.2),
        Some(UNKNOWN_TOPIC_OR_PARTITION)
    );

    // Group offsets, and a later commit.
    common::wait_until(DEADLINE, "billing synced", || {
        let c = common::committed_offsets(&ours, "billing", ORDERS, 3);
        if c == BTreeMap::from([(0, 40), (1, 12), (2, 85)]) {
            Ok(())
        } else {
            Err(format!("{c:?}"))
        }
    });
    common::admin_commit(&addr, "billing", ORDERS, &[(1, 30, -1)], "m2");
    common::wait_until(DEADLINE, "billing's new commit synced", || {
        let c = common::committed_offsets(&ours, "billing", ORDERS, 3);
        if c.get(&1) == Some(&30) {
            Ok(())
        } else {
            Err(format!("{c:?}"))
        }
    });

    // A group active here (a live librdkafka consumer at our listener) is
    // left alone, and synced once it is EMPTY again.
    let live = common::LiveConsumer::start(&ours, "dashboards", ORDERS);
    common::admin_commit(&addr, "dashboards", ORDERS, &[(0, 7, -1), (2, 9, -1)], "");
    common::wait_until(DEADLINE, "dashboards left alone", || {
        let d = common::describe_mirror(&agent, "dr");
        match d.groups.get("dashboards") {
            Some(outcome) if outcome == "left alone: active here (Stable)" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(
        common::committed_offsets(&ours, "dashboards", ORDERS, 3),
        BTreeMap::new()
    );
    live.close();
    common::wait_until(DEADLINE, "dashboards synced once empty", || {
        let c = common::committed_offsets(&ours, "dashboards", ORDERS, 3);
        if c == BTreeMap::from([(0, 7), (2, 9)]) {
            Ok(())
        } else {
            Err(format!("{c:?}"))
        }
    });

    // Configs, ACLs and the sync's own record of both.
    let d = common::wait_until(DEADLINE, "a round with configs and ACLs", || {
        let d = common::describe_mirror(&agent, "dr");
        if d.acls_synced_ms.is_some() && d.topic_configs.contains_key(ORDERS) && common::acls_at(&ours).is_empty() {
            Ok(d)
        } else {
            Err(format!(
                "{:?} {:?} {:?}",
                d.acls_synced_ms,
                d.topic_configs,
                common::acls_at(&ours)
            ))
        }
    });
    assert_eq!(d.sync_error, None);
    assert!(
        d.topic_configs[ORDERS].starts_with("0 override(s)"),
        "{:?}",
        d.topic_configs
    );
    assert_ne!(
        described_configs(&ours, ORDERS)
            .get("retention.ms")
            .and_then(|(v, _)| v.as_deref()),
        Some("86400000"),
        "tansu's default is not an override here"
    );
    assert!(d.groups["billing"].starts_with("synced"), "{:?}", d.groups);

    // A new topic matching the include starts by itself.
    create_topics(&addr, &[(EVENTS, 2, &[])]);
    produce(&addr, EVENTS, 2, 20, "lz4");
    assert_served_as_at_tansu(&addr, &ours, EVENTS, 2);
    common::wait_until(DEADLINE, "events MIRRORING", || all_in(&agent, EVENTS, 2, "MIRRORING"));

    // The exclude, updated to name it, stops it; its data stays.
    let events_before: Vec<SourcePartitionLog> = (0..2).map(|p| served(&ours, EVENTS, p)).collect();
    agent
        .admin(AdminRequest::UpdateMirror {
            config: mirror_definition(&addr, "__.*|events"),
        })
        .expect("update the mirror");
    common::wait_until(DEADLINE, "events STOPPED", || all_in(&agent, EVENTS, 2, "STOPPED"));
    produce(&addr, EVENTS, 2, 5, "none");
    assert_kept_as_stopped(&ours, EVENTS, &events_before);

    // A topic deleted at tansu: shown pending, absent by name and by id,
    // for the whole confirmation window (still MIRRORING), then STOPPED,
    // data kept and served.
    let trades_before: Vec<SourcePartitionLog> = (0..2).map(|p| served(&ours, TRADES, p)).collect();
    delete_topic(&addr, TRADES);
    let mut pending = None;
    let acted_at = common::wait_until(DEADLINE, "trades stopping", || {
        let now = ringmirror_storage::clock::now_ms();
        let views = views_of(&agent, TRADES);
        if views.values().any(|v| v.state == "STOPPING" || v.state == "STOPPED") {
            return Ok(now);
        }
        assert!(
            views.len() == 2 && views.values().all(|v| v.state == "MIRRORING"),
            "MIRRORING until confirmed: {views:?}"
        );
        let d = common::describe_mirror(&agent, "dr");
        if let Some(check) = d.topic_checks.iter().find(|c| c.topic == TRADES) {
            assert_eq!(check.kind, "deleted", "{check:?}");
            pending.get_or_insert(check.clone());
        }
        Err(format!("pending: {pending:?}"))
    });
    let pending = pending.expect("the deletion was shown pending before it was acted on");
    assert!(
        acted_at >= pending.since_ms + DELETION_CONFIRM_MS,
        "stopped {} ms after the first absent answer, inside the {DELETION_CONFIRM_MS} ms window",
        acted_at - pending.since_ms
    );
    assert_eq!(
        (pending.rounds_min, pending.confirm_ms),
        (DELETION_CONFIRM_ROUNDS, DELETION_CONFIRM_MS)
    );
    common::wait_until(DEADLINE, "trades STOPPED", || all_in(&agent, TRADES, 2, "STOPPED"));
    assert_kept_as_stopped(&ours, TRADES, &trades_before);
    common::wait_until(DEADLINE, "orders still MIRRORING", || {
        all_in(&agent, ORDERS, 3, "MIRRORING")
    });

    // tansu comes back on the same address as another cluster: sync
    // halts, no partition moves, nothing of ours changes.
    let orders_before: Vec<SourcePartitionLog> = (0..3).map(|p| served(&ours, ORDERS, p)).collect();
    let east_log = tansu.log();
    drop(tansu);
    let west = Tansu::start(&binary, &addr, "tansu-west", dir.path().join("tansu-west.log"));
    create_topics(&west.addr, &[(ORDERS, 3, &[])]);
    produce(&west.addr, ORDERS, 3, 3, "none");
    let d = common::wait_until(DEADLINE, "sync halted", || {
        let d = common::describe_mirror(&agent, "dr");
        match &d.sync_error {
            Some(e) if e.contains("tansu-west") => Ok(d),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(
        d.sync_error.as_deref(),
        Some("source cluster id is tansu-west, not the recorded tansu-east")
    );
    std::thread::sleep(Duration::from_secs(2));
    all_in(&agent, ORDERS, 3, "MIRRORING").expect("orders untouched");
    all_in(&agent, TRADES, 2, "STOPPED").expect("trades untouched");
    for (p, before) in orders_before.iter().enumerate() {
        assert_eq!(served(&ours, ORDERS, p as i32).batches, before.batches, "{ORDERS}-{p}");
    }
    assert_eq!(
        common::committed_offsets(&ours, "billing", ORDERS, 3),
        BTreeMap::from([(0, 40), (1, 30), (2, 85)])
    );

    agent.stop().expect("stop the agent");
    assert!(!east_log.contains("panicked"), "tansu: {east_log}");
}
