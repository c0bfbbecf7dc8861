//! Pre-built record batches for the synthetic source: per partition, one
//! contiguous buffer of valid magic-2 batches at consecutive offsets.
//!
//! A handful of template batches (random, incompressible values) are built
//! with [`BatchBuilder`]; every batch of the dataset is a copy of one of them
//! with its base offset patched in. The base offset lies outside the CRC, so
//! every copy stays valid without recomputing anything.

use bytes::Bytes;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord};

/// Distinct template batches (so consecutive batches differ).
const TEMPLATES: usize = 16;

/// What to build.
#[derive(Debug, Clone)]
pub struct DatasetSpec {
    pub topic: String,
    pub partitions: i32,
    /// Bytes of batches per partition (rounded up to whole batches).
    pub bytes_per_partition: u64,
    /// Value bytes per record (no key, no headers).
    pub record_bytes: usize,
    pub records_per_batch: usize,
    pub seed: u64,
}

/// Where one batch lies in its partition's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPos {
    pub base_offset: i64,
    /// The offset after the batch's last record.
    pub next_offset: i64,
    pub pos: usize,
    pub len: usize,
}

impl BatchPos {
    pub fn end_pos(&self) -> usize {
        self.pos + self.len
    }
}

#[derive(Debug, Clone)]
pub struct PartitionData {
    pub bytes: Bytes,
    pub batches: Vec<BatchPos>,
}

impl PartitionData {
    /// The offset after the last batch (the high watermark when all is available).
    pub fn end_offset(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.next_offset)
    }

    /// The index of the batch holding `offset` (or the first one above it).
    pub fn batch_index(&self, offset: i64) -> usize {
        self.batches.partition_point(|b| b.next_offset <= offset)
    }
}

#[derive(Debug, Clone)]
pub struct Dataset {
    pub spec: DatasetSpec,
    pub topic_id: [u8; 16],
    pub partitions: Vec<PartitionData>,
}

/// xorshift64*: fast, and its output does not compress.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn templates(spec: &DatasetSpec, rng: &mut Rng) -> Vec<Vec<u8>> {
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    (0..TEMPLATES)
        .map(|_| {
            let records = (0..spec.records_per_batch)
                .map(|_| {
                    let mut value = vec![0u8; spec.record_bytes];
                    rng.fill(&mut value);
                    BuildRecord {
                        timestamp,
                        key: None,
                        value: Some(value),
                        headers: Vec::new(),
                    }
                })
                .collect();
            BatchBuilder {
                records,
                ..BatchBuilder::default()
            }
            .build()
        })
        .collect()
}

fn build_partition(spec: &DatasetSpec, templates: &[Vec<u8>], partition: usize) -> PartitionData {
    let typical = templates[0].len() as u64;
    let count = spec.bytes_per_partition.div_ceil(typical).max(1) as usize;
    let mut buf = Vec::with_capacity(count * templates[0].len());
    let mut batches = Vec::with_capacity(count);
    let records = spec.records_per_batch as i64;
    for i in 0..count {
        let template = &templates[(i + partition * 7) % templates.len()];
        let pos = buf.len();
        let base_offset = i as i64 * records;
        buf.extend_from_slice(template);
        buf[pos..pos + 8].copy_from_slice(&base_offset.to_be_bytes());
        batches.push(BatchPos {
            base_offset,
            next_offset: base_offset + records,
            pos,
            len: template.len(),
        });
    }
    PartitionData {
        bytes: Bytes::from(buf),
        batches,
    }
}

impl Dataset {
    pub fn build(spec: DatasetSpec) -> Self {
        assert!(spec.partitions > 0 && spec.records_per_batch > 0, "empty dataset spec");
        let mut rng = Rng(spec.seed | 1);
        let templates = templates(&spec, &mut rng);
        // A few threads, each building a run of partitions (not a thread
        // per partition: 10 000 partitions would be 10 000 threads).
        let count = spec.partitions as usize;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(count);
        let per_thread = count.div_ceil(threads);
        let partitions = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (spec, templates) = (&spec, &templates);
                    let run = t * per_thread..((t + 1) * per_thread).min(count);
                    s.spawn(move || run.map(|p| build_partition(spec, templates, p)).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("build partitions"))
                .collect()
        });
        let mut topic_id = [0u8; 16];
        topic_id[..8].copy_from_slice(&rng.next().to_be_bytes());
        topic_id[8..].copy_from_slice(&rng.next().to_be_bytes());
        Self {
            spec,
            topic_id,
            partitions,
        }
    }

    pub fn topic(&self) -> &str {
        &self.spec.topic
    }

    /// Bytes of batches over all partitions.
    pub fn total_bytes(&self) -> u64 {
        self.partitions.iter().map(|p| p.bytes.len() as u64).sum()
    }

    /// Records over all partitions.
    pub fn total_records(&self) -> u64 {
        self.partitions.iter().map(|p| p.end_offset() as u64).sum()
    }

    /// Bytes of one batch (all batches have the same size).
    pub fn batch_bytes(&self) -> usize {
        self.partitions[0].batches[0].len
    }

    pub fn end_offsets(&self) -> Vec<i64> {
        self.partitions.iter().map(PartitionData::end_offset).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmirror_storage::batch::{Validation, validate_batches};

    #[test]
    fn every_batch_is_valid_at_consecutive_offsets() {
        let d = Dataset::build(DatasetSpec {
            topic: "t".into(),
            partitions: 2,
            bytes_per_partition: 300_000,
            record_bytes: 1000,
            records_per_batch: 16,
            seed: 7,
        });
        for p in &d.partitions {
            let r = validate_batches(
                &p.bytes,
                &Validation {
                    next_offset: 0,
                    max_batch_bytes: 1 << 20,
                    fetch_epoch: Some(0),
                    last_epoch: None,
                },
            );
            assert!(r.error.is_none(), "{:?}", r.error);
            assert_eq!(r.valid_bytes, p.bytes.len());
            assert_eq!(r.batches as usize, p.batches.len());
            assert_eq!(p.batch_index(0), 0);
            assert_eq!(p.batch_index(17), 1);
            assert_eq!(p.batch_index(p.end_offset()), p.batches.len());
        }
    }
}
