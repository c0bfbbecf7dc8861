//! `ringmirror demo`: the whole product in one process, on generated data.
//!
//! 1. Writes a source data directory (`source/`) the way a Kafka broker
//!    would hold it: keyed records in lz4 and gzip batches from idempotent
//!    producers (`orders`), transactions from two producers per partition
//!    with COMMIT and ABORT markers, one left open (`payments`), and a
//!    compacted topic whose offsets have gaps inside and between batches
//!    (`inventory`), across a few leader epochs.
//! 2. Starts a *source agent* serving that directory on a Kafka listener,
//!    and a *mirror agent* that mirrors every topic from it into `mirror/`
//!    — the same Fetch path that mirrors a Kafka cluster — showing progress.
//! 3. Stops both agents (so each directory is read by the log's own reader
//!    with nothing writing) and verifies that every partition of `mirror/`
//!    holds the source's batches byte for byte at the same offsets, with the
//!    same leader-epoch checkpoint, log start and end, last stable offset,
//!    aborted transactions and topic id.
//!
//! The rate it reports is the mirror agent's own, from its events: from
//! the first partition placed on a shard (its fetcher starts there) to the
//! last batch committed at the source's end — not the agents' start-up.
//!
//! With `--keep-running` both agents start again afterwards, on the ports
//! they had (the mirror keeps the source address it stored), and serve
//! until SIGINT or SIGTERM, for Kafka clients such as kcat and for
//! `ringmirror status` at the mirror agent's admin API to look at.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use ringmirror_dataplane::fetch::{ShardEvent, StateEvent, TelemetryEvent};
use ringmirror_storage::batch::{
    BATCH_HEADER_BYTES, BatchBuilder, BatchIter, BuildRecord, Compression, ControlType, LOG_OVERHEAD_BYTES, RecordBatch,
};
use ringmirror_storage::log::{LogConfig, LogDir, PartitionLog, TopicPartition};

use crate::agent::{Agent, EventObserver};
use crate::config::AgentConfig;
use ringmirror_storage::clock::now_ms;

/// The mirror's name in the mirror agent's configuration.
const MIRROR_NAME: &str = "demo";
/// The smallest `--size`: every partition still gets a few dozen batches.
const MIN_SIZE_BYTES: u64 = 1 << 20;
/// Generated batches are appended in runs of about this many bytes.
const APPEND_RUN_BYTES: usize = 1 << 20;
/// Mirroring fails when no partition has moved for this long.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often progress is redrawn from the agent's status.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);
/// Differences listed in full before the rest are only counted.
const DIFFERENCES_SHOWN: usize = 20;
/// Verification reads each log this many bytes (of whole batches) at a time.
const VERIFY_READ_BYTES: usize = 4 << 20;
const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

/// Offsets in a v2 batch header of the fields a compressed batch rewrites.
const OFF_LENGTH: usize = 8;
const OFF_CRC: usize = 17;
const OFF_ATTRIBUTES: usize = 21;

/// How a generated topic's batches look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Keyed records from an idempotent producer per partition; lz4, every
    /// eighth batch gzip.
    Orders,
    /// Transactions of two producers per partition, interleaved, most
    /// committed, some aborted; partition 0 ends inside an open transaction.
    Payments,
    /// A compacted topic: offsets missing inside and between batches,
    /// tombstones, no producer ids; half the batches lz4.
    Inventory,
}

/// The source's topics: name, partitions, percent of `--size`, shape.
const TOPICS: [(&str, i32, u64, Shape); 3] = [
    ("orders", 4, 60, Shape::Orders),
    ("payments", 2, 25, Shape::Payments),
    ("inventory", 2, 15, Shape::Inventory),
];

/// The codecs the demo writes (both are what real producers send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Gzip,
    Lz4,
}

impl Codec {
    fn compression(self) -> Compression {
        match self {
            Self::Gzip => Compression::Gzip,
            Self::Lz4 => Compression::Lz4,
        }
    }
}

/// Compresses the records of an uncompressed v2 batch (as [`BatchBuilder`]
/// builds them) with `codec`, as a producer would have sent them: the same
/// header with the codec in its attributes, length and CRC recomputed.
pub fn compress_batch(batch: &[u8], codec: Codec) -> anyhow::Result<Vec<u8>> {
    ensure!(batch.len() >= BATCH_HEADER_BYTES, "not a whole batch");
    let (header, records) = batch.split_at(BATCH_HEADER_BYTES);
    let mut out = match codec {
        Codec::Lz4 => {
            // Kafka's producers write independent 64 KiB blocks.
            let info = lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max64KB);
            let mut encoder = lz4_flex::frame::FrameEncoder::with_frame_info(info, header.to_vec());
            encoder.write_all(records)?;
            encoder.finish()?
        }
        Codec::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(header.to_vec(), flate2::Compression::fast());
            encoder.write_all(records)?;
            encoder.finish()?
        }
    };
    let attributes = i16::from_be_bytes([out[OFF_ATTRIBUTES], out[OFF_ATTRIBUTES + 1]]);
    ensure!(attributes & 0x07 == 0, "the batch is compressed already");
    // The codec's id goes in attributes bits 0-2.
    let attributes = attributes | i16::from(codec.compression().id());
    out[OFF_ATTRIBUTES..OFF_ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let length = i32::try_from(out.len() - LOG_OVERHEAD_BYTES)?;
    out[OFF_LENGTH..OFF_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let crc = RecordBatch::new(&out[..])?.computed_crc();
    out[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Parses `--size`: bytes with an optional suffix, KiB/MiB/GiB (also K/M/G)
/// or KB/MB/GB (powers of ten).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || format!("{text:?}: expected a size such as 256MiB or 1GiB");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit_bytes: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = number.checked_mul(unit_bytes).ok_or_else(bad)?;
    if bytes < MIN_SIZE_BYTES {
        return Err(format!("{text:?}: the demo needs at least 1MiB"));
    }
    Ok(bytes)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// A new random (version 4) topic id, as Kafka gives every topic.
fn random_topic_id() -> std::io::Result<[u8; 16]> {
    use std::io::Read;
    let mut id = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut id)?;
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Ok(id)
}

/// Segments small enough that every partition rolls a few, so the mirror
/// is read across segment boundaries too.
fn log_config(size_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: (size_bytes / 16).clamp(256 << 10, 64 << 20),
        ..LogConfig::default()
    }
}

/// xorshift64*: cheap and good enough for generated payloads.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// Words for free-text fields: text that compresses like real text does.
const WORDS: [&str; 24] = [
    "express",
    "gift",
    "fragile",
    "leave",
    "at",
    "door",
    "ring",
    "bell",
    "call",
    "before",
    "delivery",
    "weekend",
    "morning",
    "evening",
    "office",
    "reception",
    "parcel",
    "locker",
    "back",
    "side",
    "entrance",
    "please",
    "thanks",
    "urgent",
];

fn words(rng: &mut Rng, count: u64) -> String {
    let mut text = String::new();
    for i in 0..count {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    text
}

/// What was written to one source partition.
#[derive(Debug, Default)]
struct PartitionFacts {
    /// The offset after the last batch.
    end_offset: i64,
    bytes: u64,
    batches: u64,
    /// Data records (control records not counted).
    records: u64,
    committed: u64,
    aborted: u64,
    /// Transactions left open at the end.
    open: u64,
    /// (offset after a batch, bytes up to and including it), for progress.
    marks: Vec<(i64, u64)>,
}

impl PartitionFacts {
    /// Bytes of the whole batches below `offset`.
    fn bytes_below(&self, offset: i64) -> u64 {
        match self.marks.partition_point(|&(next, _)| next <= offset) {
            0 => 0,
            n => self.marks[n - 1].1,
        }
    }
}

/// One transactional producer of a `payments` partition.
struct TxnProducer {
    producer_id: i64,
    sequence: i32,
    /// Data batches still to write in the open transaction (None: no transaction open).
    open: Option<u64>,
}

/// Writes one source partition.
struct PartitionWriter<'a> {
    log: PartitionLog,
    partition: i32,
    rng: Rng,
    target_bytes: u64,
    pending: Vec<u8>,
    facts: PartitionFacts,
    sequence: i32,
    written: &'a AtomicU64,
}

impl PartitionWriter<'_> {
    /// The leader epoch of the next batch: leadership moved twice while the
    /// partition filled, as it does over a cluster's life.
    fn epoch(&self) -> i32 {
        1 + (self.facts.bytes * 3 / self.target_bytes.max(1)).min(2) as i32
    }

    fn full(&self) -> bool {
        self.facts.bytes >= self.target_bytes
    }

    fn push(&mut self, batch: Vec<u8>, data_records: usize) -> anyhow::Result<()> {
        let view = RecordBatch::new(&batch[..])?;
        self.facts.end_offset = view.next_offset();
        self.facts.bytes += batch.len() as u64;
        self.facts.batches += 1;
        self.facts.records += data_records as u64;
        self.facts.marks.push((self.facts.end_offset, self.facts.bytes));
        self.written.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.pending.extend_from_slice(&batch);
        if self.pending.len() >= APPEND_RUN_BYTES {
            self.flush_pending()?;
        }
        Ok(())
    }

    fn flush_pending(&mut self) -> anyhow::Result<()> {
        self.log.append(&self.pending, now_ms())?;
        self.pending.clear();
        Ok(())
    }

    fn builder(&self, records: Vec<BuildRecord>) -> BatchBuilder {
        BatchBuilder {
            base_offset: self.facts.end_offset,
            partition_leader_epoch: self.epoch(),
            records,
            ..BatchBuilder::default()
        }
    }

    fn orders_batch(&mut self) -> anyhow::Result<()> {
        let timestamp = now_ms() as i64;
        let count = 40 + self.rng.below(80);
        let records = (0..count)
            .map(|i| {
                let order = self.facts.end_offset as u64 + i;
                let customer = self.rng.below(2000);
                let note_words = 2 + self.rng.below(12);
                let value = format!(
                    r#"{{"order":{order},"customer":"customer-{customer:04}","sku":"sku-{:05}","qty":{},"price_cents":{},"note":"{}"}}"#,
                    self.rng.below(20_000),
                    1 + self.rng.below(5),
                    99 + self.rng.below(20_000),
                    words(&mut self.rng, note_words),
                );
                BuildRecord {
                    timestamp,
                    key: Some(format!("customer-{customer:04}").into_bytes()),
                    value: Some(value.into_bytes()),
                    headers: vec![
                        ("trace-id".into(), Some(self.rng.next().to_be_bytes().to_vec())),
                        ("origin".into(), Some(b"ringmirror-demo".to_vec())),
                    ],
                }
            })
            .collect();
        let batch = BatchBuilder {
            producer_id: 1000 + i64::from(self.partition),
            producer_epoch: 0,
            base_sequence: self.sequence,
            ..self.builder(records)
        }
        .build();
        self.sequence = self.sequence.wrapping_add(count as i32) & i32::MAX;
        let codec = if self.facts.batches % 8 == 7 {
            Codec::Gzip
        } else {
            Codec::Lz4
        };
        self.push(compress_batch(&batch, codec)?, count as usize)
    }

    /// One data batch of `producer`'s open transaction.
    fn payments_batch(&mut self, producer: &mut TxnProducer) -> anyhow::Result<()> {
        let timestamp = now_ms() as i64;
        let count = 10 + self.rng.below(30);
        let records = (0..count)
            .map(|_| {
                let account = self.rng.below(500);
                BuildRecord {
                    timestamp,
                    key: Some(format!("account-{account:03}").into_bytes()),
                    value: Some(
                        format!(
                            r#"{{"account":"account-{account:03}","amount_cents":{},"currency":"EUR","memo":"{}"}}"#,
                            self.rng.below(1_000_000),
                            words(&mut self.rng, 3),
                        )
                        .into_bytes(),
                    ),
                    headers: Vec::new(),
                }
            })
            .collect();
        let batch = BatchBuilder {
            producer_id: producer.producer_id,
            producer_epoch: 2,
            base_sequence: producer.sequence,
            transactional: true,
            ..self.builder(records)
        }
        .build();
        producer.sequence = producer.sequence.wrapping_add(count as i32) & i32::MAX;
        self.push(compress_batch(&batch, Codec::Lz4)?, count as usize)
    }

    fn end_transaction(&mut self, producer: &mut TxnProducer, kind: ControlType) -> anyhow::Result<()> {
        let marker = BatchBuilder::control_marker(
            self.facts.end_offset,
            self.epoch(),
            producer.producer_id,
            2,
            kind,
            BatchBuilder::end_txn_marker_value(5),
            now_ms() as i64,
        )
        .build();
        producer.open = None;
        match kind {
            ControlType::Abort => self.facts.aborted += 1,
            _ => self.facts.committed += 1,
        }
        self.push(marker, 0)
    }

    fn write_payments(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        let base = 2000 + 2 * i64::from(self.partition);
        let mut producers = [base, base + 1].map(|producer_id| TxnProducer {
            producer_id,
            sequence: 0,
            open: None,
        });
        while !self.full() {
            ensure!(!stop.load(Ordering::Relaxed), "interrupted");
            let producer = &mut producers[self.rng.below(2) as usize];
            let left = producer.open.unwrap_or(1 + self.rng.below(3));
            self.payments_batch(producer)?;
            producer.open = Some(left - 1);
            if left == 1 {
                let kind = if self.rng.one_in(4) {
                    ControlType::Abort
                } else {
                    ControlType::Commit
                };
                self.end_transaction(producer, kind)?;
            }
        }
        let [first, second] = &mut producers;
        if second.open.is_some() {
            self.end_transaction(second, ControlType::Commit)?;
        }
        if self.partition == 0 {
            // A transaction still running when the snapshot was taken: the
            // last stable offset stays at its first offset.
            if first.open.is_none() {
                self.payments_batch(first)?;
            }
            self.facts.open += 1;
        } else if first.open.is_some() {
            self.end_transaction(first, ControlType::Commit)?;
        }
        Ok(())
    }

    fn inventory_batch(&mut self) -> anyhow::Result<()> {
        // Whole batches the cleaner removed.
        if self.rng.one_in(3) {
            self.facts.end_offset += self.rng.below(50) as i64;
        }
        let timestamp = now_ms() as i64;
        let count = 20 + self.rng.below(40);
        let mut deltas = Vec::with_capacity(count as usize);
        let mut delta = 0i32;
        let records = (0..count)
            .map(|_| {
                deltas.push(delta);
                // Records the cleaner removed inside the batch.
                delta += 1 + if self.rng.one_in(4) {
                    self.rng.below(5) as i32
                } else {
                    0
                };
                let sku = self.rng.below(5000);
                let value = (!self.rng.one_in(20)).then(|| {
                    format!(
                        r#"{{"sku":"sku-{sku:05}","stock":{},"warehouse":"warehouse-{}"}}"#,
                        self.rng.below(10_000),
                        self.rng.below(8)
                    )
                    .into_bytes()
                });
                BuildRecord {
                    timestamp,
                    key: Some(format!("sku-{sku:05}").into_bytes()),
                    value,
                    headers: Vec::new(),
                }
            })
            .collect();
        // Sometimes the batch's trailing records went too; its last offset stays.
        let trailing = if self.rng.one_in(3) {
            self.rng.below(4) as i32
        } else {
            0
        };
        let last_offset_delta = deltas.last().copied().unwrap_or(0) + trailing;
        let batch = BatchBuilder {
            offset_deltas: Some(deltas),
            last_offset_delta: Some(last_offset_delta),
            ..self.builder(records)
        }
        .build();
        let batch = if self.rng.one_in(2) {
            compress_batch(&batch, Codec::Lz4)?
        } else {
            batch
        };
        self.push(batch, count as usize)
    }

    fn write(&mut self, shape: Shape, stop: &AtomicBool) -> anyhow::Result<()> {
        match shape {
            Shape::Payments => self.write_payments(stop)?,
            Shape::Orders | Shape::Inventory => {
                while !self.full() {
                    ensure!(!stop.load(Ordering::Relaxed), "interrupted");
                    if shape == Shape::Orders {
                        self.orders_batch()?;
                    } else {
                        self.inventory_batch()?;
                    }
                }
            }
        }
        self.flush_pending()
    }
}

/// What was written at the source.
struct Generated {
    partitions: BTreeMap<TopicPartition, PartitionFacts>,
}

impl Generated {
    fn sum(&self, f: impl Fn(&PartitionFacts) -> u64) -> u64 {
        self.partitions.values().map(f).sum()
    }

    fn topic_sum(&self, topic: &str, f: impl Fn(&PartitionFacts) -> u64) -> u64 {
        self.partitions
            .iter()
            .filter(|(tp, _)| tp.topic == topic)
            .map(|(_, facts)| f(facts))
            .sum()
    }
}

fn bar_style(template: &str) -> anyhow::Result<ProgressStyle> {
    Ok(ProgressStyle::with_template(template)?.progress_chars("=> "))
}

/// Writes the source's topics into `dir` (one thread per partition) and
/// closes the directory cleanly.
fn generate(dir: &Path, size_bytes: u64, config: LogConfig, stop: &AtomicBool) -> anyhow::Result<Generated> {
    let log_dir = LogDir::open(dir).context("open the source data dir")?;
    let written = AtomicU64::new(0);
    let bar = ProgressBar::new(size_bytes).with_style(bar_style(
        "generating {bar:40.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
    )?);
    let mut jobs = Vec::new();
    for (topic, partitions, percent, shape) in TOPICS {
        let topic_id = random_topic_id().context("topic id")?;
        for partition in 0..partitions {
            let target = size_bytes * percent / 100 / partitions as u64;
            jobs.push((TopicPartition::new(topic, partition), topic_id, target, shape));
        }
    }
    let results: Vec<anyhow::Result<(TopicPartition, PartitionLog, PartitionFacts)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .enumerate()
            .map(|(seed, (tp, topic_id, target_bytes, shape))| {
                let (log_dir, written) = (&log_dir, &written);
                scope.spawn(move || {
                    let (log, _) = log_dir.open_partition(&tp, Some(topic_id), config, now_ms())?;
                    let mut writer = PartitionWriter {
                        log,
                        partition: tp.partition,
                        rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (seed as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)),
                        target_bytes,
                        pending: Vec::with_capacity(2 * APPEND_RUN_BYTES),
                        facts: PartitionFacts::default(),
                        sequence: 0,
                        written,
                    };
                    writer.write(shape, stop).with_context(|| format!("write {tp}"))?;
                    Ok((tp, writer.log, writer.facts))
                })
            })
            .collect();
        while !handles.iter().all(|h| h.is_finished()) {
            bar.set_position(written.load(Ordering::Relaxed));
            std::thread::sleep(PROGRESS_INTERVAL);
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a generator thread panicked")))
            })
            .collect()
    });
    bar.set_position(written.load(Ordering::Relaxed));
    bar.finish_and_clear();
    let mut logs = Vec::new();
    let mut partitions = BTreeMap::new();
    for result in results {
        let (tp, log, facts) = result?;
        logs.push((tp.clone(), log));
        partitions.insert(tp, facts);
    }
    log_dir.close(logs, now_ms()).context("close the source data dir")?;
    Ok(Generated { partitions })
}

/// Where the two agents listen: the first time on free loopback ports;
/// with `--keep-running` again on the same ones, because the mirror agent
/// keeps the source address its mirror was created with (`__mirror_state`
/// wins over the configuration file), so a source agent on another port
/// would leave it retrying a dead one.
struct Listeners {
    source: SocketAddr,
    mirror: SocketAddr,
    /// The mirror agent's admin API, for `ringmirror status`.
    admin: Option<SocketAddr>,
}

impl Listeners {
    const ANY_LOOPBACK: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

    fn any_free() -> Self {
        Self {
            source: Self::ANY_LOOPBACK,
            mirror: Self::ANY_LOOPBACK,
            admin: None,
        }
    }
}

/// An agent listening on `listen` (and serving its admin API on `admin`);
/// `mirror` is TOML for its `[[mirror]]` table, if any.
fn agent_config(
    dir: &Path,
    config: LogConfig,
    (listen, admin): (SocketAddr, Option<SocketAddr>),
    mirror: &str,
) -> anyhow::Result<AgentConfig> {
    let admin = admin.map_or_else(String::new, |addr| format!("[admin]\naddress = \"{addr}\""));
    AgentConfig::parse(&format!(
        r#"
        data_dir = {dir:?}
        [log]
        segment_bytes = {segment_bytes}
        [listener]
        address = "{listen}"
        {admin}
        {mirror}
        "#,
        segment_bytes = config.segment_bytes,
    ))
}

fn source_agent_config(dir: &Path, config: LogConfig, listen: SocketAddr) -> anyhow::Result<AgentConfig> {
    agent_config(dir, config, (listen, None), "")
}

fn mirror_agent_config(
    dir: &Path,
    config: LogConfig,
    at: &Listeners,
    source: SocketAddr,
) -> anyhow::Result<AgentConfig> {
    let mirror =
        format!("[[mirror]]\nname = \"{MIRROR_NAME}\"\nbootstrap_servers = [\"{source}\"]\ntopics_include = \".*\"");
    agent_config(dir, config, (at.mirror, at.admin), &mirror)
}

/// Starts the source agent on `source_dir` and the mirror agent on
/// `mirror_dir` (handing its events to `observer`), mirroring every topic
/// from the former, both listening where `at` says.
fn start_agents(
    (source_dir, mirror_dir): (&Path, &Path),
    config: LogConfig,
    at: &Listeners,
    observer: EventObserver,
) -> anyhow::Result<(Agent, Agent)> {
    let source = Agent::start(source_agent_config(source_dir, config, at.source)?).context("start the source agent")?;
    let source_addr = source.listener_addr().context("the source agent does not listen")?;
    match Agent::start_observed(mirror_agent_config(mirror_dir, config, at, source_addr)?, observer) {
        Ok(mirror) => Ok((source, mirror)),
        Err(e) => {
            // The source agent is stopped either way; the start error is the news.
            let _ = source.stop();
            Err(e.context("start the mirror agent"))
        }
    }
}

/// When the mirror agent mirrored, as its own events tell: from the first
/// partition placed on its shard (its fetcher starts there, after the
/// agent's start-up and first metadata round) to the progress report that
/// brings the last partition to the source's end offset. Each moment is
/// taken on the agent's events thread as the event arrives, so polling the
/// status cannot blur it.
#[derive(Debug, Default)]
struct MirroringClock {
    started: Option<Instant>,
    caught_up: Option<Instant>,
    /// Partitions short of their end offset, with that offset.
    behind: BTreeMap<TopicPartition, i64>,
}

impl MirroringClock {
    /// A clock for mirroring `generated`, and the observer that keeps it.
    fn observe(generated: &Generated) -> (Arc<Mutex<Self>>, EventObserver) {
        let behind = generated
            .partitions
            .iter()
            .filter(|(_, facts)| facts.end_offset > 0)
            .map(|(tp, facts)| (tp.clone(), facts.end_offset))
            .collect();
        let clock = Arc::new(Mutex::new(Self {
            behind,
            ..Self::default()
        }));
        let kept = Arc::clone(&clock);
        let observer: EventObserver = Box::new(move |event: &ShardEvent| {
            let now = Instant::now();
            let mut clock = kept.lock().expect("mirroring clock lock");
            match event {
                ShardEvent::State(StateEvent::Placed { mirror, .. }) if mirror == MIRROR_NAME => {
                    clock.started.get_or_insert(now);
                }
                ShardEvent::Telemetry(TelemetryEvent::Progress {
                    mirror,
                    tp,
                    log_end_offset,
                    ..
                }) if mirror == MIRROR_NAME && clock.behind.get(tp).is_some_and(|end| log_end_offset >= end) => {
                    clock.behind.remove(tp);
                    if clock.behind.is_empty() {
                        clock.caught_up = Some(now);
                    }
                }
                _ => {}
            }
        });
        (clock, observer)
    }

    /// From the first partition placed to the last one caught up.
    fn mirroring_time(&self) -> Option<Duration> {
        Some(self.caught_up?.saturating_duration_since(self.started?))
    }
}

/// Follows the mirror agent until every partition reaches the source's end,
/// drawing a bar of mirrored bytes and a lag line per partition.
fn follow_mirroring(mirror: &Agent, generated: &Generated, stop: &AtomicBool) -> anyhow::Result<()> {
    let multi = MultiProgress::new();
    let total = multi.add(ProgressBar::new(generated.sum(|f| f.bytes)).with_style(bar_style(
        "mirroring  {bar:40.green/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {elapsed}",
    )?));
    // Lag is drawn from the same state as the position, so the two always agree.
    let line_style = bar_style("  {prefix:<12} {bar:24} {pos:>9}/{len:<9} offsets, lag {lag}")?.with_key(
        "lag",
        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}", state.len().unwrap_or(0).saturating_sub(state.pos()));
        },
    );
    let lines: Vec<ProgressBar> = generated
        .partitions
        .iter()
        .map(|(tp, facts)| {
            multi.add(
                ProgressBar::new(facts.end_offset.max(0) as u64)
                    .with_style(line_style.clone())
                    .with_prefix(tp.to_string()),
            )
        })
        .collect();
    let mut last_move = (Instant::now(), 0u64);
    loop {
        ensure!(!stop.load(Ordering::Relaxed), "interrupted");
        let status = mirror.status();
        let mut mirrored = 0;
        let mut caught_up = true;
        for ((tp, facts), line) in generated.partitions.iter().zip(&lines) {
            let state = status.get(&(MIRROR_NAME.to_owned(), tp.clone()));
            if let Some(reason) = state.and_then(|s| s.stopped.as_ref()) {
                bail!("{tp} stopped mirroring: {reason:?}");
            }
            let end = state.map_or(0, |s| s.log_end_offset);
            mirrored += facts.bytes_below(end);
            caught_up &= end >= facts.end_offset;
            line.set_position(end.clamp(0, facts.end_offset) as u64);
        }
        total.set_position(mirrored);
        if caught_up {
            break;
        }
        if mirrored != last_move.1 {
            last_move = (Instant::now(), mirrored);
        } else if last_move.0.elapsed() >= STALL_TIMEOUT {
            let behind: Vec<String> = lines
                .iter()
                .filter(|l| l.position() < l.length().unwrap_or(0))
                .map(|l| format!("{} at {}/{}", l.prefix(), l.position(), l.length().unwrap_or(0)))
                .collect();
            bail!(
                "mirroring made no progress for {} s; behind: {}",
                STALL_TIMEOUT.as_secs(),
                behind.join(", ")
            );
        }
        std::thread::sleep(PROGRESS_INTERVAL);
    }
    total.finish();
    for line in &lines {
        line.finish();
    }
    Ok(())
}

/// What [`verify`] compared, and every difference it found.
#[derive(Debug, Default)]
pub struct Verification {
    pub partitions: usize,
    pub batches: u64,
    pub bytes: u64,
    /// One line per difference, naming the partition.
    pub differences: Vec<String>,
}

/// Compares every partition log of `mirror_dir` with `source_dir`'s (no
/// agent may have either open): the same partitions, the same batches byte
/// for byte at the same offsets, leader-epoch checkpoint files, log start
/// and end offsets, last stable offsets, aborted transactions and topic
/// ids. Both directories are closed cleanly again.
pub fn verify(source_dir: &Path, mirror_dir: &Path) -> anyhow::Result<Verification> {
    // Only reading: reserve and pre-fault little ahead of the active segments.
    let config = LogConfig {
        preallocate_bytes: 4096,
        prefault_bytes: 4096,
        ..LogConfig::default()
    };
    let source = LogDir::open(source_dir).context("open the source data dir")?;
    let mirror = LogDir::open(mirror_dir).context("open the mirror data dir")?;
    let on_source = source.partitions_on_disk()?;
    let on_mirror = mirror.partitions_on_disk()?;
    let mut v = Verification {
        partitions: on_source.len(),
        ..Verification::default()
    };
    for tp in on_mirror.iter().filter(|tp| !on_source.contains(tp)) {
        v.differences.push(format!("{tp}: in the mirror, not at the source"));
    }
    let (mut source_logs, mut mirror_logs) = (Vec::new(), Vec::new());
    for tp in &on_source {
        if !on_mirror.contains(tp) {
            v.differences.push(format!("{tp}: at the source, not in the mirror"));
            continue;
        }
        let checkpoint =
            |dir: &LogDir| std::fs::read_to_string(dir.partition_dir(tp).join(LEADER_EPOCH_CHECKPOINT)).ok();
        let (source_epochs, mirror_epochs) = (checkpoint(&source), checkpoint(&mirror));
        if source_epochs != mirror_epochs {
            v.differences.push(format!(
                "{tp}: {LEADER_EPOCH_CHECKPOINT} differs: source {source_epochs:?}, mirror {mirror_epochs:?}"
            ));
        }
        let (source_log, _) = source.open_partition(tp, None, config, now_ms())?;
        let (mirror_log, _) = mirror.open_partition(tp, None, config, now_ms())?;
        compare_logs(tp, &source_log, &mirror_log, &mut v)?;
        source_logs.push((tp.clone(), source_log));
        mirror_logs.push((tp.clone(), mirror_log));
    }
    source.close(source_logs, now_ms())?;
    mirror.close(mirror_logs, now_ms())?;
    Ok(v)
}

fn compare_logs(
    tp: &TopicPartition,
    source: &PartitionLog,
    mirror: &PartitionLog,
    v: &mut Verification,
) -> anyhow::Result<()> {
    let mut differ = |what: String| v.differences.push(format!("{tp}: {what}"));
    for (what, s, m) in [
        ("log start offset", source.log_start_offset(), mirror.log_start_offset()),
        ("log end offset", source.log_end_offset(), mirror.log_end_offset()),
        (
            "last stable offset",
            source.last_stable_offset(),
            mirror.last_stable_offset(),
        ),
    ] {
        if s != m {
            differ(format!("{what}: source {s}, mirror {m}"));
        }
    }
    if source.topic_id() != mirror.topic_id() {
        differ(format!(
            "topic id: source {:02x?}, mirror {:02x?}",
            source.topic_id(),
            mirror.topic_id()
        ));
    }
    let (source_aborted, mirror_aborted) = (
        source.aborted_transactions(0, i64::MAX),
        mirror.aborted_transactions(0, i64::MAX),
    );
    if source_aborted != mirror_aborted {
        let at = (source_aborted.iter().zip(&mirror_aborted))
            .position(|(s, m)| s != m)
            .unwrap_or(source_aborted.len().min(mirror_aborted.len()));
        differ(format!(
            "aborted transactions: {} at the source, {} in the mirror; entry #{at} is {:?} at the source, {:?} in the mirror",
            source_aborted.len(),
            mirror_aborted.len(),
            source_aborted.get(at),
            mirror_aborted.get(at)
        ));
    }
    let (mut source, mut mirror) = (BatchReader::new(source), BatchReader::new(mirror));
    for index in 0.. {
        let difference = match (source.next()?, mirror.next()?) {
            (None, None) => break,
            (Some((offset, _)), None) => {
                format!("the mirror ends after {index} batches, before the source's batch at offset {offset}")
            }
            (None, Some((offset, _))) => format!("the mirror has a batch at offset {offset} after the source's last"),
            (Some((s_offset, _)), Some((m_offset, _))) if s_offset != m_offset => {
                format!("batch #{index} is at offset {m_offset} in the mirror, at {s_offset} at the source")
            }
            (Some((offset, s)), Some((_, m))) if s != m => {
                let at = s.iter().zip(&m).position(|(s, m)| s != m);
                format!(
                    "batch at offset {offset} differs ({} and {} bytes, first difference at byte {at:?})",
                    s.len(),
                    m.len()
                )
            }
            (Some((_, bytes)), Some(_)) => {
                v.batches += 1;
                v.bytes += bytes.len() as u64;
                continue;
            }
        };
        // Past the first difference, every later batch would be reported too.
        differ(difference);
        break;
    }
    Ok(())
}

/// A log's batches in offset order, read a few MiB at a time, so that
/// verifying a partition of any size takes little memory.
struct BatchReader<'a> {
    log: &'a PartitionLog,
    next_offset: i64,
    chunk: VecDeque<(i64, Vec<u8>)>,
}

impl<'a> BatchReader<'a> {
    fn new(log: &'a PartitionLog) -> Self {
        Self {
            log,
            next_offset: log.log_start_offset(),
            chunk: VecDeque::new(),
        }
    }

    /// The next batch as (base offset, bytes), or `None` at the log end.
    fn next(&mut self) -> anyhow::Result<Option<(i64, Vec<u8>)>> {
        if self.chunk.is_empty() && self.next_offset < self.log.log_end_offset() {
            let slice = self.log.read(self.next_offset, VERIFY_READ_BYTES)?;
            let bytes = slice.to_vec()?;
            for item in BatchIter::new(&bytes, self.log.config().max_batch_bytes) {
                let (_, batch) = item?;
                self.chunk.push_back((batch.base_offset(), batch.bytes().to_vec()));
            }
            // An empty read would repeat forever: it ends the log instead.
            self.next_offset = if slice.len == 0 { i64::MAX } else { slice.end_offset };
        }
        Ok(self.chunk.pop_front())
    }
}

/// Serves from both agents until SIGINT or SIGTERM, then stops them.
fn keep_running(source: Agent, mirror: Agent, stop: &AtomicBool) -> anyhow::Result<()> {
    let (Some(source_addr), Some(mirror_addr), Some(admin_addr)) =
        (source.listener_addr(), mirror.listener_addr(), mirror.admin_addr())
    else {
        bail!("an agent does not listen");
    };
    println!();
    println!("both agents are running; Ctrl-C stops them");
    println!("  source agent  {source_addr}  (serves source/)");
    println!("  mirror agent  {mirror_addr}  (mirrors every topic from the source into mirror/, and serves it)");
    println!("  admin API     http://{admin_addr}  (the mirror agent's)");
    println!("try:");
    println!("  kcat -b {mirror_addr} -L");
    println!("  kcat -b {mirror_addr} -C -t orders -e");
    println!("  kcat -b {source_addr} -C -t payments -e");
    println!("  ringmirror status --admin http://{admin_addr}");
    std::io::stdout().flush()?;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("signal received; stopping both agents");
    let mirrored = mirror.stop();
    source.stop()?;
    mirrored
}

/// `ringmirror demo`.
pub fn run(data_dir: Option<PathBuf>, size_bytes: u64, keep: bool) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let temp;
    let dir = match data_dir {
        Some(dir) => dir,
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_owned()
        }
    };
    let (source_dir, mirror_dir) = (dir.join("source"), dir.join("mirror"));
    for d in [&source_dir, &mirror_dir] {
        let used = std::fs::read_dir(d).is_ok_and(|mut entries| entries.next().is_some());
        ensure!(!used, "{} is not empty: give the demo a fresh --data-dir", d.display());
    }
    let config = log_config(size_bytes);
    println!("ringmirror demo: data dir {} (source/ and mirror/)", dir.display());

    let started = Instant::now();
    let generated = generate(&source_dir, size_bytes, config, &stop)?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "source: {} topics, {} partitions, {} records in {} batches, {} written in {secs:.1} s",
        TOPICS.len(),
        generated.partitions.len(),
        generated.sum(|f| f.records),
        generated.sum(|f| f.batches),
        mib(generated.sum(|f| f.bytes)),
    );
    println!("  orders     keyed records, lz4 and gzip batches, idempotent producers");
    println!(
        "  payments   transactions of two producers per partition: {} committed, {} aborted, {} open",
        generated.topic_sum("payments", |f| f.committed),
        generated.topic_sum("payments", |f| f.aborted),
        generated.topic_sum("payments", |f| f.open),
    );
    println!(
        "  inventory  compacted: {} of {} offsets removed (gaps inside and between batches)",
        generated.topic_sum("inventory", |f| f.end_offset as u64 - f.records),
        generated.topic_sum("inventory", |f| f.end_offset as u64),
    );

    let started = Instant::now();
    let (clock, observer) = MirroringClock::observe(&generated);
    let (source, mirror) = start_agents((&source_dir, &mirror_dir), config, &Listeners::any_free(), observer)?;
    let (Some(source_addr), Some(mirror_addr)) = (source.listener_addr(), mirror.listener_addr()) else {
        bail!("an agent does not listen");
    };
    println!("source agent serving source/ on {source_addr}; mirror agent mirroring every topic from it into mirror/");
    let followed = follow_mirroring(&mirror, &generated, &stop);
    let secs = started.elapsed().as_secs_f64();
    let mirror_stopped = mirror.stop();
    source.stop().context("stop the source agent")?;
    followed?;
    mirror_stopped.context("stop the mirror agent")?;
    let bytes = generated.sum(|f| f.bytes);
    let mirroring = clock
        .lock()
        .expect("mirroring clock lock")
        .mirroring_time()
        .context("the mirror agent reported no start or no end of mirroring")?;
    println!(
        "mirrored {} at {:.1} MiB/s ({:.2} s from the first partition placed to the last batch committed; \
         {secs:.1} s with both agents' start-up), both agents stopped cleanly",
        mib(bytes),
        bytes as f64 / mirroring.as_secs_f64().max(1e-9) / 1048576.0,
        mirroring.as_secs_f64()
    );

    let v = verify(&source_dir, &mirror_dir)?;
    if !v.differences.is_empty() {
        println!("verified: the mirror DIFFERS from the source");
        for d in v.differences.iter().take(DIFFERENCES_SHOWN) {
            println!("  {d}");
        }
        if v.differences.len() > DIFFERENCES_SHOWN {
            println!("  … and {} more", v.differences.len() - DIFFERENCES_SHOWN);
        }
        bail!("{} differences between mirror/ and source/", v.differences.len());
    }
    println!(
        "verified: identical — {} partitions, {} batches, {}: the same bytes at the same offsets",
        v.partitions,
        v.batches,
        mib(v.bytes)
    );
    println!(
        "  and the same leader-epoch checkpoints, log start/end and last stable offsets, aborted transactions, topic ids"
    );
    if keep {
        let kept = Listeners {
            source: source_addr,
            mirror: mirror_addr,
            admin: Some(Listeners::ANY_LOOPBACK),
        };
        let (source, mirror) = start_agents((&source_dir, &mirror_dir), config, &kept, Box::new(|_| {}))?;
        keep_running(source, mirror, &stop)?;
    }
    Ok(())
}
