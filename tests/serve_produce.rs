//! The write path for local topics, with librdkafka as the client: a topic
//! created with CreateTopics (the admin client) accepts writes; an
//! idempotent producer whose connection is cut after its Produce requests
//! reach the agent — before any answer gets back — retries them, and every
//! record is stored exactly once, in order; after a restart the topic is
//! still local and writable, and producer ids are not handed out twice.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;

const TOPIC: &str = "local-orders";
const PARTITIONS: i32 = 3;
const RECORDS: usize = 3000;
const DEADLINE: Duration = Duration::from_secs(60);
/// Produce requests after which the proxy cuts the connection unanswered.
const CUTS: usize = 3;
const PRODUCE: i16 = 0;

fn config(data_dir: &Path, advertised_port: Option<u16>) -> AgentConfig {
    let advertised = advertised_port.map_or(String::new(), |p| format!("advertised_port = {p}"));
    AgentConfig::parse(&format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        {advertised}
        "#
    ))
    .expect("config")
}

/// A proxy in front of the agent that forwards whole request frames and,
/// for the first `CUTS` Produce requests, waits for the agent to act on the
/// request and then closes both sides, so the client never sees the answer.
struct CuttingProxy {
    port: u16,
    cuts: Arc<AtomicUsize>,
}

impl CuttingProxy {
    fn start(target: Arc<OnceLock<String>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cuts = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&cuts);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Some(target) = target.get() else { continue };
                let Ok(agent) = TcpStream::connect(target) else {
                    continue;
                };
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || proxy_connection(client, agent, &counter));
            }
        });
        Self { port, cuts }
    }
}

fn proxy_connection(mut client: TcpStream, agent: TcpStream, cuts: &AtomicUsize) {
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut from_agent = agent.try_clone().unwrap();
    let mut to_client = client.try_clone().unwrap();
    let answers = std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_agent, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let mut to_agent = agent;
    loop {
        let mut size = [0u8; 4];
        if client.read_exact(&mut size).is_err() {
            break;
        }
        let mut frame = vec![0u8; i32::from_be_bytes(size).max(0) as usize];
        if client.read_exact(&mut frame).is_err() {
            break;
        }
        let api_key = i16::from_be_bytes([frame[0], frame[1]]);
        if to_agent
            .write_all(&size)
            .and_then(|()| to_agent.write_all(&frame))
            .is_err()
        {
            break;
        }
        if api_key == PRODUCE && cuts.fetch_add(1, Ordering::SeqCst) < CUTS {
            // Let the agent append, then lose the answer.
            std::thread::sleep(Duration::from_millis(200));
            let _ = to_agent.shutdown(Shutdown::Both);
            let _ = client.shutdown(Shutdown::Both);
            break;
        }
    }
    let _ = to_agent.shutdown(Shutdown::Both);
    let _ = answers.join();
}

fn create_topic(bootstrap: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(1));
    let results =
        futures_lite::future::block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("create topics");
    assert!(matches!(&results[0], Ok(name) if name == TOPIC), "{results:?}");
}

fn produce(bootstrap: &str, from: usize, count: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.num.messages", "100")
        .set("message.timeout.ms", "50000")
        .set("retry.backoff.ms", "50")
        .create()
        .expect("producer");
    for n in from..from + count {
        let key = format!("k{n}");
        let value = format!("v{n}");
        let mut record = BaseRecord::to(TOPIC)
            .partition(n as i32 % PARTITIONS)
            .key(&key)
            .payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(DEADLINE).expect("every record acknowledged");
}

/// Every value per partition, in offset order.
fn consume(bootstrap: &str, total: usize) -> BTreeMap<i32, Vec<(i64, String)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "unused")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment.add_partition_offset(TOPIC, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let started = Instant::now();
    let mut seen = 0;
    // Read until the expected count, then a little longer to catch extras.
    let mut quiet_since = None;
    loop {
        assert!(started.elapsed() < DEADLINE, "consumed {seen} of {total}");
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                out.entry(m.partition()).or_default().push((m.offset(), value));
                seen += 1;
                quiet_since = None;
            }
            Some(Err(e)) => panic!("consume: {e}"),
            None if seen >= total
                && quiet_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_millis(500) =>
            {
                return out;
            }
            None => {}
        }
    }
}

fn assert_exactly_once(read: &BTreeMap<i32, Vec<(i64, String)>>, total: usize) {
    for (&p, records) in read {
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        assert_eq!(
            offsets,
            (0..records.len() as i64).collect::<Vec<_>>(),
            "partition {p}: offsets"
        );
        let values: Vec<usize> = records.iter().map(|r| r.1[1..].parse().unwrap()).collect();
        let expected: Vec<usize> = (0..total).filter(|n| *n as i32 % PARTITIONS == p).collect();
        assert_eq!(values, expected, "partition {p}: each record once, in order");
    }
}

#[test]
fn idempotent_retries_after_cut_connections_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let target = Arc::new(OnceLock::new());
    let proxy = CuttingProxy::start(Arc::clone(&target));
    let agent = Agent::start(config(dir.path(), Some(proxy.port))).expect("agent");
    target.set(agent.listener_addr().unwrap().to_string()).unwrap();
    let via_proxy = format!("127.0.0.1:{}", proxy.port);
    create_topic(&via_proxy);
    produce(&via_proxy, 0, RECORDS);
    assert!(
        proxy.cuts.load(Ordering::SeqCst) > CUTS,
        "the proxy cut fewer connections than planned"
    );
    let direct = agent.listener_addr().unwrap().to_string();
    let read = consume(&via_proxy, RECORDS);
    assert_eq!(read.values().map(Vec::len).sum::<usize>(), RECORDS);
    assert_exactly_once(&read, RECORDS);

    // Producer ids: a bump keeps the id, a new producer gets a new one.
    let mut c = common::KafkaConnection::connect(&direct, Duration::from_secs(10)).unwrap();
    let init = |c: &mut common::KafkaConnection, id: i64, epoch: i16| -> InitProducerIdResponse {
        let r = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch)
            .with_transaction_timeout_ms(60_000);
        c.request(ApiKey::InitProducerId as i16, 4, &r)
            .expect("init producer id")
    };
    let before = init(&mut c, -1, -1);
    assert_eq!(before.error_code, 0);
    let bumped = init(&mut c, before.producer_id.0, before.producer_epoch);
    assert_eq!((bumped.producer_id, bumped.producer_epoch), (before.producer_id, 1));
    agent.stop().expect("stop");

    // After a restart: still local and writable, ids not reused.
    let target = Arc::new(OnceLock::new());
    let proxy = CuttingProxy::start(Arc::clone(&target));
    let agent = Agent::start(config(dir.path(), None)).expect("restart");
    target.set(agent.listener_addr().unwrap().to_string()).unwrap();
    drop(proxy);
    let direct = agent.listener_addr().unwrap().to_string();
    let mut c = common::KafkaConnection::connect(&direct, Duration::from_secs(10)).unwrap();
    let after = init(&mut c, -1, -1);
    assert!(
        after.producer_id.0 > before.producer_id.0,
        "producer id reused after restart"
    );
    produce(&direct, RECORDS, 300);
    let read = consume(&direct, RECORDS + 300);
    assert_exactly_once(&read, RECORDS + 300);
    agent.stop().expect("stop");
}
