//! A corrupt batch from the source is never appended: it is logged,
//! counted and fetched again. A TCP proxy between librdkafka's mock cluster
//! and the agent flips one byte inside a record batch of the first Fetch
//! responses (found with our own streaming parser), and rewrites Metadata
//! so the agent reaches the broker only through the proxy. The mirror must
//! end byte-identical to a raw Fetch of the source, with the bad batches
//! counted.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_protocol::wire::{FetchResponseReader, FetchStep};
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};

use common::rewriting_proxy::{self, API_FETCH, API_METADATA};

const DEADLINE: Duration = Duration::from_secs(60);

/// Flips a byte inside the first batch of the first non-empty records.
fn corrupt_fetch(body: &mut [u8], version: i16) -> bool {
    let mut reader = FetchResponseReader::new(version, body.len()).expect("fetch version");
    let mut pos = 0;
    loop {
        let Ok((n, step)) = reader.advance(&body[pos..]) else {
            return false;
        };
        pos += n;
        match step {
            FetchStep::Records { records_len } if records_len > 70 => {
                // Byte 25 of a batch is in lastOffsetDelta, inside the CRC's coverage.
                body[pos + 25] ^= 0x40;
                return true;
            }
            FetchStep::Records { records_len } => {
                pos += records_len;
                reader.records_consumed();
            }
            FetchStep::Done | FetchStep::NeedMore => return false,
            _ => {}
        }
    }
}

/// Starts the proxy in front of `upstream`: Metadata points every broker
/// at it, and Fetch responses are corrupted while `budget` lasts.
fn start_proxy(upstream: SocketAddr, budget: Arc<AtomicUsize>) -> SocketAddr {
    rewriting_proxy::start(
        upstream,
        Arc::new(move |key, version, proxy, body| match key {
            API_METADATA => {
                *body = rewriting_proxy::edit_metadata(body, version, |response| {
                    for broker in &mut response.brokers {
                        broker.host = StrBytes::from_string(proxy.ip().to_string());
                        broker.port = i32::from(proxy.port());
                    }
                });
            }
            API_FETCH if budget.load(Ordering::SeqCst) > 0 && corrupt_fetch(body, version) => {
                budget.fetch_sub(1, Ordering::SeqCst);
            }
            _ => {}
        }),
    )
}

#[test]
fn corrupt_batches_are_refused_counted_and_fetched_again() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    cluster.create_topic("bad", 1, 1).expect("create topic");
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for i in 0..500 {
        let value = format!("value-{i}");
        producer
            .send(BaseRecord::<str, str>::to("bad").partition(0).key("k").payload(&value))
            .unwrap();
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).unwrap();

    let budget = Arc::new(AtomicUsize::new(3));
    let proxy = start_proxy(bootstrap.parse().unwrap(), Arc::clone(&budget));
    let dir = tempfile::tempdir().unwrap();
    let config = AgentConfig::parse(&format!(
        r#"
        data_dir = {:?}
        shards = 1
        [[mirror]]
        name = "dr"
        bootstrap_servers = ["{proxy}"]
        topics = ["bad"]
        fetch_max_wait_ms = 100
        fetch_partition_max_bytes = 4096
        "#,
        dir.path()
    ))
    .unwrap();
    let tp = TopicPartition::new("bad", 0);
    let mut conn = common::KafkaConnection::connect(&bootstrap, Duration::from_secs(5)).unwrap();
    let (source, high_watermark) = conn.fetch_all("bad", 0, 0, 10_000).unwrap();
    let source: Vec<(i64, Vec<u8>)> = source.into_iter().flatten().collect();

    let agent = Agent::start(config).expect("start agent");
    let started = Instant::now();
    let key = ("dr".to_string(), tp.clone());
    while agent
        .status()
        .get(&key)
        .is_none_or(|s| s.log_end_offset < high_watermark)
    {
        assert!(
            started.elapsed() < DEADLINE,
            "not mirrored: {:?}",
            agent.status().get(&key)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = agent.status()[&key].clone();
    agent.stop().unwrap();
    assert_eq!(budget.load(Ordering::SeqCst), 0, "the proxy corrupted three responses");
    assert_eq!(status.bad_batches, 3, "each corrupt batch is counted");

    let log_dir = LogDir::open(dir.path()).unwrap();
    let (log, _) = log_dir.open_partition(&tp, None, LogConfig::default(), 0).unwrap();
    let ours = common::stored_batches(&log);
    assert_eq!(ours.len(), source.len());
    assert!(ours == source, "mirror differs from the source after corrupt batches");
}
