//! The demo's source data: each topic's batches in the shape a Kafka
//! broker would hold them (idempotent producers' compressed batches,
//! transactions with their markers, a compacted topic with offset gaps),
//! written by one thread per partition into a source data directory.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, ensure};
use indicatif::ProgressBar;
use ringmirror_storage::batch::{
    BATCH_HEADER_BYTES, BatchBuilder, BuildRecord, Compression, ControlType, LOG_OVERHEAD_BYTES, RecordBatch,
};
use ringmirror_storage::clock::now_ms;
use ringmirror_storage::log::{LogConfig, LogDir, PartitionLog, TopicPartition};

use super::{PROGRESS_INTERVAL, bar_style};

/// Generated batches are appended in runs of about this many bytes.
const APPEND_RUN_BYTES: usize = 1 << 20;
/// Offsets in a v2 batch header of the fields a compressed batch rewrites.
const OFF_LENGTH: usize = 8;
const OFF_CRC: usize = 17;
const OFF_ATTRIBUTES: usize = 21;

/// How a generated topic's batches look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
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
pub(super) const TOPICS: [(&str, i32, u64, Shape); 3] = [
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

/// A new random (version 4) topic id, as Kafka gives every topic.
fn random_topic_id() -> std::io::Result<[u8; 16]> {
    use std::io::Read;
    let mut id = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut id)?;
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    Ok(id)
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
pub(super) struct PartitionFacts {
    /// The offset after the last batch.
    pub(super) end_offset: i64,
    pub(super) bytes: u64,
    pub(super) batches: u64,
    /// Data records (control records not counted).
    pub(super) records: u64,
    pub(super) committed: u64,
    pub(super) aborted: u64,
    /// Transactions left open at the end.
    pub(super) open: u64,
    /// (offset after a batch, bytes up to and including it), for progress.
    pub(super) marks: Vec<(i64, u64)>,
}

impl PartitionFacts {
    /// Bytes of the whole batches below `offset`.
    pub(super) fn bytes_below(&self, offset: i64) -> u64 {
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
pub(super) struct Generated {
    pub(super) partitions: BTreeMap<TopicPartition, PartitionFacts>,
}

impl Generated {
    pub(super) fn sum(&self, f: impl Fn(&PartitionFacts) -> u64) -> u64 {
        self.partitions.values().map(f).sum()
    }

    pub(super) fn topic_sum(&self, topic: &str, f: impl Fn(&PartitionFacts) -> u64) -> u64 {
        self.partitions
            .iter()
            .filter(|(tp, _)| tp.topic == topic)
            .map(|(_, facts)| f(facts))
            .sum()
    }
}

/// Writes the source's topics into `dir` (one thread per partition) and
/// closes the directory cleanly.
pub(super) fn generate(dir: &Path, size_bytes: u64, config: LogConfig, stop: &AtomicBool) -> anyhow::Result<Generated> {
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
