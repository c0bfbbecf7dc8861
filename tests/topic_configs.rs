//! Topic config sync (`ringmirror_control::metadata_sync::topic_config_sync`, issue 6) end
//! to end, run as the control plane runs it but without the coordinator
//! (which calls the same functions each metadata round):
//!
//! - **Serving**: a listener whose catalog holds a topic's overrides (set
//!   before its partitions were served) answers an rdkafka AdminClient's
//!   `describe_configs` with them as DYNAMIC_TOPIC_CONFIG, and with the log
//!   settings as defaults for the rest.
//! - **Another ringmirror listener as the source**: `fetch_topic_configs`
//!   takes its overrides minus the exclude list; published into the
//!   destination's catalog and stored in `__mirror_state`, they are served
//!   there. A change at the source (changed, added, removed keys) arrives in
//!   the next round, with its `diff`.
//! - **librdkafka's mock cluster as the source**: it serves no
//!   DescribeConfigs (not in its ApiVersions), so a round ends with
//!   `ClientError::NoCommonVersion` naming DescribeConfigs — a clear error
//!   the caller treats as "this source cannot tell", never as "no overrides".
//!
//! The listeners here are single shards with a catalog of the test's own
//! (the agent does not hand out its catalog).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::DescribeConfigsRequest;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::mocking::MockCluster;
use ringmirror_control::metadata_sync::topic_config_sync::{
    EXCLUDED_CONFIGS, TopicConfigs, diff, excluded, fetch_topic_configs, fetch_topic_configs_report,
};
use ringmirror_control::state_store::{MirrorStateStore, TopicConfigKey, TopicConfigRecord};
use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions};
use ringmirror_dataplane::fetch::{ShardEventCounts, ShardEventReceiver, event_queue};
use ringmirror_dataplane::kafka::ListenerSettings;
use ringmirror_dataplane::partition::{CatalogHandle, MirrorReportsHandle, ProducerIds, ServerIdentity, ShardLinks};
use ringmirror_dataplane::security::AclStore;
use ringmirror_dataplane::shard::{ShardCommand, ShardHandle, ShardPlan, ShardServing, spawn_shard};
use ringmirror_storage::log::{LogConfig, LogDir, ReserveBudget, TopicPartition};

const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Small enough for a low RLIMIT_MEMLOCK.
const IO_MEMORY_BYTES: usize = 1 << 20;

type Configs = BTreeMap<String, String>;

fn configs(pairs: &[(&str, &str)]) -> Configs {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// A one-shard listener serving `topics` (empty logs), whose catalog the
/// test holds.
struct Listener {
    shard: Option<ShardHandle>,
    catalog: Arc<CatalogHandle>,
    addr: SocketAddr,
    _events: ShardEventReceiver,
    _reservation: socket2::Socket,
    _dir: tempfile::TempDir,
}

impl Listener {
    /// Starts the listener; `before_serving` runs on its catalog before any
    /// partition is served (as the control plane may publish configs before
    /// the shards have opened the logs).
    fn start(topics: &[(&str, i32)], before_serving: impl FnOnce(&CatalogHandle)) -> Self {
        use socket2::{Domain, Socket, Type};
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let log_dir = LogDir::open(&data).unwrap();
        for &(topic, partitions) in topics {
            for p in 0..partitions {
                let tp = TopicPartition::new(topic, p);
                let (log, _) = log_dir.open_partition(&tp, None, LogConfig::default(), 0).unwrap();
                log.close(0).unwrap();
            }
        }
        // The port, held with SO_REUSEPORT as the agent does, so the shard
        // can bind it too.
        let reservation = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        reservation.set_reuse_port(true).unwrap();
        reservation.set_reuse_address(true).unwrap();
        reservation
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let addr = reservation.local_addr().unwrap().as_socket().unwrap();
        let catalog = CatalogHandle::new(ServerIdentity {
            node_id: 1,
            cluster_id: "topic-configs-test".into(),
            host: "127.0.0.1".into(),
            port: addr.port(),
        });
        before_serving(&catalog);
        let (links, mut ends) = ShardLinks::new(1);
        let (ready, started) = std::sync::mpsc::channel();
        let (events_tx, events) = event_queue(64, &ShardEventCounts::default());
        let state = dir.path().join("state");
        let shard = spawn_shard(
            ShardPlan {
                index: 0,
                cpu: 0,
                io_memory_bytes: IO_MEMORY_BYTES,
                log_config: LogConfig::default(),
                reserve_budget: Arc::new(ReserveBudget::new(LogConfig::default().reserve_budget_bytes)),
                listener: Some(ListenerSettings::new(addr)),
            },
            Arc::new(log_dir),
            events_tx,
            ShardServing {
                ready,
                catalog: Arc::clone(&catalog),
                mirror_reports: Arc::new(MirrorReportsHandle::default()),
                acls: Arc::new(AclStore::open(state.join("acls")).unwrap()),
                producer_ids: Arc::new(ProducerIds::open(&state).unwrap()),
                links,
                end: ends.remove(0),
            },
        )
        .unwrap();
        started.recv().unwrap().unwrap();
        for &(topic, partitions) in topics {
            for p in 0..partitions {
                shard
                    .send(ShardCommand::ServePartition {
                        tp: TopicPartition::new(topic, p),
                    })
                    .unwrap();
            }
        }
        let (done, barrier) = std::sync::mpsc::channel();
        shard.send(ShardCommand::Barrier(done)).unwrap();
        barrier.recv_timeout(IO_TIMEOUT).unwrap();
        for &(topic, partitions) in topics {
            let served = catalog.snapshot().topic(topic).map_or(0, |t| t.partitions.len());
            assert_eq!(served, partitions as usize, "{topic} served");
        }
        Self {
            shard: Some(shard),
            catalog,
            addr,
            _events: events,
            _reservation: reservation,
            _dir: dir,
        }
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(shard) = self.shard.take() {
            shard.request_stop();
            let _ = shard.join();
        }
    }
}

/// What an rdkafka AdminClient's `describe_configs` says of each topic:
/// (value, source) by config name, or the error.
/// (rdkafka reports no per-resource error: an unknown topic has no entries.)
type Described = BTreeMap<String, Result<BTreeMap<String, (Option<String>, ConfigSource)>, String>>;

fn describe(addr: &str, topics: &[&str]) -> Described {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", addr)
        .set("broker.address.family", "v4")
        .create()
        .expect("admin client");
    let specifiers: Vec<_> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let options = AdminOptions::new().request_timeout(Some(IO_TIMEOUT));
    let results =
        futures_lite::future::block_on(admin.describe_configs(&specifiers, &options)).expect("describe_configs");
    assert_eq!(results.len(), topics.len());
    topics
        .iter()
        .zip(results)
        .map(|(topic, result)| {
            let entries = result
                .map(|r| r.entries.into_iter().map(|e| (e.name, (e.value, e.source))).collect())
                .map_err(|e| e.to_string());
            ((*topic).to_owned(), entries)
        })
        .collect()
}

/// The overrides (DYNAMIC_TOPIC_CONFIG entries) of a described topic.
fn overrides(described: &Described, topic: &str) -> Configs {
    described[topic]
        .as_ref()
        .unwrap_or_else(|e| panic!("{topic}: {e:?}"))
        .iter()
        .filter(|(_, (_, source))| *source == ConfigSource::DynamicTopic)
        .map(|(k, (v, _))| (k.clone(), v.clone().expect("a value")))
        .collect()
}

fn options() -> ConnectionOptions {
    ConnectionOptions {
        client_id: "topic-configs-test".into(),
        connect_timeout: IO_TIMEOUT,
        io_timeout: IO_TIMEOUT,
        ..ConnectionOptions::default()
    }
}

/// One round against `source`, as the control plane runs it.
fn fetch(source: &str, topics: &[&str]) -> Result<BTreeMap<String, TopicConfigs>, ClientError> {
    let source = source.to_owned();
    let topics: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
    common::on_glommio(move || async move {
        let mut conn = Connection::connect(&source, options()).await?;
        fetch_topic_configs(&mut conn, &topics).await
    })
}

#[test]
fn describe_configs_serves_a_topic_s_overrides() {
    let orders = configs(&[
        ("retention.ms", "86400000"),
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1048576"),
    ]);
    let published = orders.clone();
    let listener = Listener::start(&[("orders", 2), ("plain", 1)], move |catalog| {
        // Before the topic is served: kept for it.
        catalog.update(|c| c.set_topic_configs("orders", published));
    });
    let described = describe(&listener.addr(), &["orders", "plain", "nope"]);
    assert_eq!(overrides(&described, "orders"), orders);
    let entries = described["orders"].as_ref().unwrap();
    assert_eq!(
        entries["segment.ms"],
        (Some((7 * 24 * 3600 * 1000u64).to_string()), ConfigSource::Default),
        "log settings not overridden are defaults"
    );
    let plain = described["plain"].as_ref().unwrap();
    assert!(overrides(&described, "plain").is_empty(), "{plain:?}");
    assert_eq!(plain["cleanup.policy"], (Some("delete".into()), ConfigSource::Default));
    // rdkafka drops a resource's error code (an unknown topic comes back
    // with no entries); the code itself, at the protocol level:
    assert_eq!(described["nope"].as_ref().map(|e| e.len()), Ok(0));
    let addr = listener.addr();
    let codes = common::on_glommio(move || async move {
        let mut conn = Connection::connect(&addr, options()).await.unwrap();
        let request = DescribeConfigsRequest::default().with_resources(
            ["nope", "orders"]
                .map(|t| {
                    DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str(t))
                })
                .into(),
        );
        let response = conn.request(&request, 4).await.unwrap();
        response
            .results
            .iter()
            .map(|r| (r.resource_name.to_string(), r.error_code))
            .collect::<Vec<_>>()
    });
    assert_eq!(codes, [("nope".to_owned(), 3), ("orders".to_owned(), 0)]);

    // Published again from another thread (the control plane's): replaced;
    // publishing the same again changes nothing.
    let handle = Arc::clone(&listener.catalog);
    let changed = std::thread::spawn(move || {
        let next = configs(&[("retention.ms", "1000")]);
        [
            handle.publish_topic_configs("orders", next.clone()),
            handle.publish_topic_configs("orders", next),
        ]
    })
    .join()
    .unwrap();
    assert_eq!(changed, [true, false]);
    let described = describe(&listener.addr(), &["orders"]);
    assert_eq!(overrides(&described, "orders"), configs(&[("retention.ms", "1000")]));
    assert_eq!(
        described["orders"].as_ref().unwrap()["cleanup.policy"],
        (Some("delete".into()), ConfigSource::Default),
        "a removed override falls back to the log's setting"
    );
}

#[test]
fn configs_sync_from_a_ringmirror_source_and_a_change_arrives_in_the_next_round() {
    let at_source = configs(&[
        ("retention.ms", "604800000"),
        ("cleanup.policy", "compact,delete"),
        ("message.timestamp.type", "LogAppendTime"),
        ("min.insync.replicas", "2"),
        ("leader.replication.throttled.replicas", "0:1"),
        ("confluent.placement.constraints", "{\"version\":1}"),
    ]);
    let source = Listener::start(&[("orders", 2), ("plain", 1)], |_| {});
    source
        .catalog
        .update(|c| c.set_topic_configs("orders", at_source.clone()));
    let destination = Listener::start(&[("orders", 2), ("plain", 1)], |_| {});
    let state_dir = tempfile::tempdir().unwrap();
    let mut store = MirrorStateStore::open(state_dir.path(), 4).unwrap();

    // One round: fetch, diff with what is held, store, publish.
    let round = |store: &mut MirrorStateStore, now_ms: u64| {
        let fetched = fetch(&source.addr(), &["orders", "plain", "missing"]).expect("round");
        assert_eq!(
            fetched.keys().collect::<Vec<_>>(),
            ["orders", "plain"],
            "a topic missing at the source is absent"
        );
        let mut changes = BTreeMap::new();
        for (topic, synced) in &fetched {
            let key = TopicConfigKey {
                mirror: "dr".into(),
                topic: topic.clone(),
            };
            let held = store
                .topic_configs()
                .get(&key)
                .map(|r| r.configs.clone())
                .unwrap_or_default();
            changes.insert(topic.clone(), diff(&held, &synced.configs));
            store
                .put_topic_configs(
                    key,
                    TopicConfigRecord {
                        configs: synced.configs.clone(),
                        updated_ms: now_ms,
                    },
                )
                .unwrap();
            destination.catalog.publish_topic_configs(topic, synced.configs.clone());
        }
        (fetched, changes)
    };

    let (fetched, changes) = round(&mut store, 1);
    let expected = configs(&[
        ("retention.ms", "604800000"),
        ("cleanup.policy", "compact,delete"),
        ("message.timestamp.type", "LogAppendTime"),
    ]);
    assert_eq!(fetched["orders"].configs, expected);
    let skipped: BTreeSet<_> = fetched["orders"].skipped.keys().map(String::as_str).collect();
    assert_eq!(
        skipped,
        BTreeSet::from([
            "confluent.placement.constraints",
            "leader.replication.throttled.replicas",
            "min.insync.replicas"
        ])
    );
    assert!(skipped.iter().all(|k| excluded(k).is_some()));
    assert!(EXCLUDED_CONFIGS.iter().any(|(k, _)| *k == "min.insync.replicas"));
    assert_eq!(
        fetched["plain"],
        TopicConfigs::default(),
        "log settings are not overrides"
    );
    assert_eq!(changes["orders"].added, expected);
    assert!(changes["plain"].is_empty());
    assert_eq!(
        overrides(&describe(&destination.addr(), &["orders"]), "orders"),
        expected
    );

    // The source changes: a value, a new key, a key gone.
    let mut changed = at_source.clone();
    changed.insert("retention.ms".into(), "3600000".into());
    changed.insert("max.message.bytes".into(), "2097152".into());
    changed.remove("cleanup.policy");
    source.catalog.publish_topic_configs("orders", changed);
    let (fetched, changes) = round(&mut store, 2);
    let expected = configs(&[
        ("retention.ms", "3600000"),
        ("message.timestamp.type", "LogAppendTime"),
        ("max.message.bytes", "2097152"),
    ]);
    assert_eq!(fetched["orders"].configs, expected);
    assert_eq!(
        changes["orders"].to_string(),
        "added max.message.bytes=2097152; changed retention.ms: 604800000 -> 3600000; removed cleanup.policy"
    );
    let at_destination = describe(&destination.addr(), &["orders", "plain"]);
    assert_eq!(overrides(&at_destination, "orders"), expected);
    assert_eq!(
        at_destination["orders"].as_ref().unwrap()["cleanup.policy"],
        (Some("delete".into()), ConfigSource::Default)
    );
    assert!(overrides(&at_destination, "plain").is_empty());

    // What was stored survives a restart.
    let stored = store.topic_configs().clone();
    drop(store);
    let store = MirrorStateStore::open(state_dir.path(), 4).unwrap();
    assert_eq!(store.topic_configs(), &stored);
    let key = TopicConfigKey {
        mirror: "dr".into(),
        topic: "orders".into(),
    };
    assert_eq!(store.topic_configs()[&key].configs, expected);
    assert_eq!(store.topic_configs()[&key].updated_ms, 2);

    // The report says which topic is missing.
    let addr = source.addr();
    let report = common::on_glommio(move || async move {
        let mut conn = Connection::connect(&addr, options()).await.unwrap();
        fetch_topic_configs_report(&mut conn, &["missing".to_owned(), "orders".to_owned()])
            .await
            .unwrap()
    });
    assert_eq!(report.missing, BTreeSet::from(["missing".to_owned()]));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.topics["orders"].configs, expected);
}

#[test]
fn the_librdkafka_mock_serves_no_describe_configs_and_says_so() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("orders", 1, 1).expect("topic");
    let bootstrap = cluster.bootstrap_servers();
    let source = bootstrap.split(',').next().unwrap().to_owned();
    match fetch(&source, &["orders"]) {
        Err(ClientError::NoCommonVersion { api, .. }) => assert_eq!(api, "DescribeConfigs"),
        other => panic!("expected no common version of DescribeConfigs, got {other:?}"),
    }
    // Nothing asked, nothing to refuse.
    assert_eq!(fetch(&source, &[]).expect("no topics"), BTreeMap::new());
}

/// The coordinator does the rounds itself: an agent mirroring `orders`
/// from a source with overrides serves them (DescribeConfigs) after its
/// first metadata round, a change at the source arrives with the next one
/// (asked for on demand here: the interval is a minute), and `mirror
/// describe` says what the last round found.
#[test]
fn an_agent_mirroring_a_topic_serves_the_source_s_configs() {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    let source = Listener::start(&[("orders", 2)], |_| {});
    let first = configs(&[("retention.ms", "604800000"), ("min.insync.replicas", "2")]);
    source.catalog.update(|c| c.set_topic_configs("orders", first));
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::serving_mirror_config(dir.path(), &source.addr(), &["orders"], "");
    config.mirrors[0].metadata_refresh_interval_ms = 60_000;
    let agent = ringmirror::agent::Agent::start(config).expect("agent");
    let addr = agent.listener_addr().unwrap().to_string();
    let wait_for = |want: Configs| {
        let started = std::time::Instant::now();
        loop {
            let got = overrides(&describe(&addr, &["orders"]), "orders");
            if got == want {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "got {got:?}, want {want:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // min.insync.replicas is placement: never copied.
    wait_for(configs(&[("retention.ms", "604800000")]));
    source.catalog.update(|c| {
        c.set_topic_configs(
            "orders",
            configs(&[("retention.ms", "86400000"), ("cleanup.policy", "compact")]),
        )
    });
    agent
        .admin(AdminRequest::Sync { mirror: "dr".into() })
        .expect("sync now");
    wait_for(configs(&[("retention.ms", "86400000"), ("cleanup.policy", "compact")]));
    let described = match agent.admin(AdminRequest::DescribeMirror { mirror: "dr".into() }) {
        Ok(AdminAnswer::Mirror { mirror }) => mirror,
        other => panic!("{other:?}"),
    };
    assert!(described.topic_configs_synced_ms.is_some());
    assert!(
        described.topic_configs["orders"].starts_with("2 override(s)"),
        "{:?}",
        described.topic_configs
    );
    agent.stop().expect("stop");
}

/// A source serving a one-partition `topic` with `overrides`, and an agent
/// (small segments, its cleaner every 100 ms) that mirrored it, took the
/// synced configs and failed it over (STOPPED, writable). Returns the
/// source, the agent's data dir, the agent and its listener address.
fn failed_over(
    topic: &str,
    overrides_at_source: &[(&str, &str)],
) -> (Listener, tempfile::TempDir, ringmirror::agent::Agent, String) {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    let source = Listener::start(&[(topic, 1)], |_| {});
    let wanted = configs(overrides_at_source);
    source.catalog.update(|c| c.set_topic_configs(topic, wanted.clone()));
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::serving_mirror_config(dir.path(), &source.addr(), &[topic], "");
    config.log.segment_bytes = 2048;
    config.log.index_interval_bytes = 512;
    config.log.segment_index_bytes = 65536;
    config.log.preallocate_bytes = 65536;
    config.log.prefault_bytes = 0;
    config.log.log_cleaner_interval_ms = 100;
    let agent = ringmirror::agent::Agent::start(config).expect("agent");
    let addr = agent.listener_addr().unwrap().to_string();
    let started = std::time::Instant::now();
    let deadline = Duration::from_secs(60);
    while overrides(&describe(&addr, &[topic]), topic) != wanted {
        assert!(started.elapsed() < deadline, "configs not synced");
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.end_mirroring("dr", topic).expect("stop");
    let stopped = || match agent.admin(AdminRequest::Status).unwrap() {
        AdminAnswer::Status { partitions } => partitions.iter().all(|p| p.state == "STOPPED"),
        other => panic!("{other:?}"),
    };
    while !stopped() {
        assert!(started.elapsed() < deadline, "not stopped");
        std::thread::sleep(Duration::from_millis(50));
    }
    (source, dir, agent, addr)
}

/// After failover, the topic's synced `cleanup.policy=compact` applies
/// locally: the agent's log cleaner (every 100 ms here) compacts what
/// producers write to the failed-over topic — the latest value of every
/// key stays at its offset, nothing is invented or duplicated.
#[test]
fn a_failed_over_topic_is_compacted_as_its_synced_configs_say() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    const KEYS: usize = 20;
    const ROUNDS: usize = 30;
    let (_source, _dir, agent, addr) = failed_over(
        "ledger",
        &[("cleanup.policy", "compact"), ("min.cleanable.dirty.ratio", "0.01")],
    );
    let started = std::time::Instant::now();

    // Every key written ROUNDS times, one flush (so one batch or so) per round.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &addr)
        .create()
        .expect("producer");
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            let (key, value) = (format!("k{k}"), format!("v{}", round * KEYS + k));
            producer
                .send(BaseRecord::to("ledger").partition(0).key(&key).payload(&value))
                .expect("queued");
            latest.insert(key, value);
        }
        producer.flush(IO_TIMEOUT).expect("flushed");
    }

    let read_all = || -> Vec<(i64, String, String)> {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &addr)
            .set("group.id", "compaction-check")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .create()
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset("ledger", 0, Offset::Beginning).unwrap();
        consumer.assign(&assignment).expect("assign");
        let mut out = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < until {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => out.push((
                    m.offset(),
                    String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                )),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                _ => {}
            }
        }
        out
    };
    let written = ROUNDS * KEYS;
    let mut read = read_all();
    // Compacted: well under what was written (the active segment stays dirty).
    while read.len() > written / 2 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "not compacted: {} of {written} records",
            read.len()
        );
        std::thread::sleep(Duration::from_millis(200));
        read = read_all();
    }
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "offsets strictly increase");
    // Every record read is the one produced at that offset (offsets never move).
    let first = read[0].0 - read[0].2[1..].parse::<i64>().unwrap();
    for (offset, key, value) in &read {
        let i: i64 = value[1..].parse().unwrap();
        assert_eq!(*offset, first + i, "{key}={value} at {offset}");
        assert_eq!(*key, format!("k{}", i as usize % KEYS));
    }
    // The latest value of every key is there.
    let kept: BTreeMap<&str, &str> = read.iter().map(|(_, k, v)| (k.as_str(), v.as_str())).collect();
    for (key, value) in &latest {
        assert_eq!(kept.get(key.as_str()), Some(&value.as_str()), "{key}");
    }
    agent.stop().expect("stop");
}

/// After failover, the topic's synced `retention.ms` applies locally: the
/// agent deletes the segments whose newest record is older, and the log
/// start moves (ListOffsets earliest) while the newest records stay.
#[test]
fn a_failed_over_topic_keeps_its_synced_retention() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let (_source, _dir, agent, addr) = failed_over("aging", &[("retention.ms", "2000")]);
    let started = std::time::Instant::now();
    let deadline = Duration::from_secs(60);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &addr)
        .create()
        .expect("producer");
    let produce = |from: usize| {
        for round in 0..10 {
            for i in 0..10 {
                let value = format!("v{}-{}", from + round, i);
                producer
                    .send(BaseRecord::to("aging").partition(0).key("k").payload(&value))
                    .expect("queued");
            }
            producer.flush(IO_TIMEOUT).expect("flushed");
        }
    };
    produce(0);
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &addr)
        .create()
        .expect("consumer");
    let watermarks = || consumer.fetch_watermarks("aging", 0, IO_TIMEOUT).expect("watermarks");
    let (_, first_end) = watermarks();
    // Older than 2 s: once newer records come, the old segments go.
    std::thread::sleep(Duration::from_millis(2500));
    produce(100);
    let (_, end) = watermarks();
    loop {
        let (start, now_end) = watermarks();
        if start >= first_end / 2 {
            assert_eq!(now_end, end, "the newest records stay");
            assert!(start < end, "the active segment stays");
            break;
        }
        assert!(started.elapsed() < deadline, "log start still {start} (end {end})");
        std::thread::sleep(Duration::from_millis(100));
    }
    agent.stop().expect("stop");
}
