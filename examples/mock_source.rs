//! A Kafka source cluster in its own process: librdkafka's mock cluster,
//! fed by a real librdkafka producer on command. Tests run it as the source
//! a separately running `ringmirror run` mirrors over TCP; it is also handy
//! by hand (`cargo run --example mock_source -- --topic orders:3`).
//!
//! ```text
//! mock_source [--brokers N] [--topic NAME:PARTITIONS]... [--max-seconds S]
//! ```
//!
//! Prints `mock-source bootstrap HOST:PORT,...` once the topics exist, then
//! reads one command per line on stdin and answers each with one line,
//! `mock-source ok <command>` or `mock-source error <command>: <why>`:
//!
//! - `produce <topic> <count> [codec] [seed]`: `count` keyed records with
//!   headers, round-robin over the topic's partitions, from an idempotent
//!   producer in small batches; answers once all are acknowledged.
//! - `leader <topic> <partition> <broker>`: moves the partition's leader
//!   (which bumps its leader epoch).
//! - `rtt <broker|-1> <ms>`: delays every response of a broker (or all).
//! - `quit`: exits.
//!
//! Its lifetime is bounded: it exits when stdin closes, on `quit`, or after
//! `--max-seconds` (default 120) whatever happens, so a test that dies
//! never leaves it behind for long.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext};

/// Every line this program prints for its user starts with this.
pub const PREFIX: &str = "mock-source";

/// The value of record number `n`: mostly text that compresses, with a
/// pseudo-random tail that does not, of varying length.
pub fn record_value(n: u64) -> Vec<u8> {
    let mut value = format!("value-{n}-").into_bytes();
    value.extend(std::iter::repeat_n(b'a' + (n % 26) as u8, (n % 150) as usize));
    let mut x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for _ in 0..(n % 64) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        value.push(x as u8);
    }
    value
}

/// The key of record number `n` (every 11th has none).
pub fn record_key(n: u64) -> Option<Vec<u8>> {
    (n % 11 != 0).then(|| format!("key-{}", n % 101).into_bytes())
}

/// The headers of record number `n`: its number, and now and then one without a value.
pub fn record_headers(n: u64) -> Vec<(String, Option<Vec<u8>>)> {
    let mut headers = vec![("n".to_owned(), Some(n.to_be_bytes().to_vec()))];
    if n % 5 == 0 {
        headers.push(("null-header".to_owned(), None));
    }
    headers
}

/// Queues record number `n` for `topic`'s partition `n % partitions`,
/// waiting while the producer's queue is full.
pub fn send_record(producer: &BaseProducer<Deliveries>, topic: &str, partitions: i32, n: u64) -> Result<(), String> {
    let value = record_value(n);
    let key = record_key(n);
    let mut headers = OwnedHeaders::new();
    for (k, v) in record_headers(n) {
        headers = headers.insert(Header {
            key: &k,
            value: v.as_deref(),
        });
    }
    let mut record = BaseRecord::<[u8], [u8]>::to(topic)
        .partition((n % partitions as u64) as i32)
        .payload(&value)
        .headers(headers);
    if let Some(key) = &key {
        record = record.key(key);
    }
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = r;
                producer.poll(Duration::from_millis(5));
            }
            Err((e, _)) => return Err(format!("send record {n} to {topic}: {e}")),
        }
    }
    producer.poll(Duration::ZERO);
    Ok(())
}

/// Counts failed deliveries.
#[derive(Default)]
pub struct Deliveries {
    pub failed: AtomicU64,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A producer in small batches (so a mirror has many batches to fetch),
/// idempotent unless `extra` says otherwise.
pub fn producer(bootstrap: &str, codec: &str, extra: &[(&str, &str)]) -> Result<BaseProducer<Deliveries>, String> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", codec)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("batch.num.messages", "40")
        .set("message.timeout.ms", "30000");
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config
        .create_with_context(Deliveries::default())
        .map_err(|e| format!("create producer: {e}"))
}

/// Waits until everything sent is acknowledged; an error if anything failed.
pub fn flush<C: ProducerContext>(producer: &BaseProducer<C>) -> Result<(), String> {
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| format!("flush: {e}"))?;
    match producer.in_flight_count() {
        0 => Ok(()),
        n => Err(format!("{n} records not acknowledged")),
    }
}

/// Produces records numbered `seed..seed + count` to `topic`'s partitions,
/// round-robin, and waits until every one is acknowledged.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    count: u64,
    codec: &str,
    seed: u64,
) -> Result<(), String> {
    produce_with(bootstrap, topic, partitions, count, codec, seed, &[])
}

/// [`produce`] with more producer settings.
pub fn produce_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    count: u64,
    codec: &str,
    seed: u64,
    extra: &[(&str, &str)],
) -> Result<(), String> {
    let producer = producer(bootstrap, codec, extra)?;
    for n in seed..seed + count {
        send_record(&producer, topic, partitions, n)?;
    }
    flush(&producer)?;
    match producer.context().failed.load(Ordering::Relaxed) {
        0 => Ok(()),
        failed => Err(format!("{failed} of {count} records to {topic} failed")),
    }
}

fn parse<T: std::str::FromStr>(word: Option<&str>, what: &str) -> Result<T, String> {
    word.ok_or_else(|| format!("missing {what}"))?
        .parse()
        .map_err(|_| format!("bad {what}"))
}

fn command(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    topics: &BTreeMap<String, i32>,
    line: &str,
) -> Result<(), String> {
    let bootstrap = cluster.bootstrap_servers();
    let mut words = line.split_whitespace();
    match words.next() {
        Some("produce") => {
            let topic: String = parse(words.next(), "topic")?;
            let partitions = *topics.get(&topic).ok_or_else(|| format!("no topic {topic}"))?;
            let count: u64 = parse(words.next(), "count")?;
            let codec = words.next().unwrap_or("none");
            let seed: u64 = words.next().map_or(Ok(0), |s| parse(Some(s), "seed"))?;
            produce(&bootstrap, &topic, partitions, count, codec, seed)
        }
        Some("leader") => {
            let topic: String = parse(words.next(), "topic")?;
            let partition: i32 = parse(words.next(), "partition")?;
            let broker: i32 = parse(words.next(), "broker")?;
            cluster
                .partition_leader(&topic, partition, Some(broker))
                .map_err(|e| e.to_string())
        }
        Some("rtt") => {
            let broker: i32 = parse(words.next(), "broker")?;
            let ms: u64 = parse(words.next(), "milliseconds")?;
            cluster
                .broker_round_trip_time(broker, Duration::from_millis(ms))
                .map_err(|e| e.to_string())
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

/// Runs the source with `args` (without the program name) until stdin
/// closes, `quit`, or the time limit.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), String> {
    let mut brokers = 3;
    let mut max_seconds = 120;
    let mut topics = BTreeMap::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--brokers" => brokers = parse(args.next().as_deref(), "--brokers")?,
            "--max-seconds" => max_seconds = parse(args.next().as_deref(), "--max-seconds")?,
            "--topic" => {
                let spec = args.next().ok_or("missing --topic NAME:PARTITIONS")?;
                let (name, partitions) = spec.rsplit_once(':').ok_or("--topic takes NAME:PARTITIONS")?;
                topics.insert(name.to_owned(), parse(Some(partitions), "partition count")?);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(max_seconds));
        eprintln!("{PREFIX}: time limit of {max_seconds} s reached; exiting");
        std::process::exit(3);
    });
    let cluster = MockCluster::new(brokers).map_err(|e| format!("mock cluster: {e}"))?;
    for (name, &partitions) in &topics {
        cluster
            .create_topic(name, partitions, 1)
            .map_err(|e| format!("create topic {name}: {e}"))?;
    }
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, line: String| {
        // The reader may be gone; then there is no one left to tell.
        let _ = writeln!(out, "{PREFIX} {line}").and_then(|()| out.flush());
    };
    say(&mut out, format!("bootstrap {}", cluster.bootstrap_servers()));
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "quit" {
            say(&mut out, "ok quit".into());
            break;
        }
        match command(&cluster, &topics, line) {
            Ok(()) => say(&mut out, format!("ok {line}")),
            Err(e) => say(&mut out, format!("error {line}: {e}")),
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(std::env::args().skip(1)) {
        eprintln!("{PREFIX}: {e}");
        std::process::exit(2);
    }
}
