//! Shared helpers for the data-plane benches: deterministic, incompressible
//! v2 record batches of an exact size, and their grouping into fetch-sized
//! chunks of whole batches (the unit a fetcher hands to the log).
//!
//! Included by each bench with `mod common;`; every bench uses only part of it.
#![allow(dead_code)]

use std::ops::Range;

use ringmirror_storage::batch::{BatchBuilder, BatchIter, BuildRecord};

pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * KIB;
/// A fixed wall clock for appends (segment.ms never fires within a bench).
pub const NOW_MS: u64 = 1_700_000_000_000;
/// The `max_batch_bytes` used for framing in every bench (LogConfig's default).
pub const MAX_BATCH_BYTES: u32 = 64 * MIB as u32;

const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 1000;
/// Rough bytes per record besides key and value (attributes and varints).
const RECORD_OVERHEAD: usize = 12;
const BATCH_HEADER: usize = 61;

/// xorshift64*: deterministic and cheap; its output does not compress,
/// so nothing downstream can take a shortcut on repetitive data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// One uncompressed batch of exactly `target` bytes (when `target` is at
/// least one small record) starting at `base_offset`: ~1 KiB random records,
/// the last one's value sized to make up the difference.
pub fn build_batch(rng: &mut Rng, base_offset: i64, target: usize) -> Vec<u8> {
    let count = (target.saturating_sub(BATCH_HEADER) / (KEY_BYTES + VALUE_BYTES + RECORD_OVERHEAD)).max(1);
    let records = (0..count)
        .map(|i| BuildRecord {
            timestamp: NOW_MS as i64 + i as i64,
            key: Some(rng.bytes(KEY_BYTES)),
            value: Some(rng.bytes(VALUE_BYTES)),
            headers: Vec::new(),
        })
        .collect();
    let mut builder = BatchBuilder {
        base_offset,
        partition_leader_epoch: 0,
        records,
        ..Default::default()
    };
    // Varint lengths move by a byte or two as the last value grows: iterate.
    for _ in 0..4 {
        let built = builder.build();
        if built.len() == target {
            return built;
        }
        let value = builder
            .records
            .last_mut()
            .and_then(|r| r.value.as_mut())
            .expect("one record with a value");
        let old = value.len();
        let want = (old + target).saturating_sub(built.len());
        value.resize(want, 0);
        if want > old {
            rng.fill(&mut value[old..]);
        }
    }
    builder.build()
}

/// Concatenated batches of `batch_bytes` each, as many as fit in
/// `total_bytes`, with consecutive offsets from `first_offset`.
/// Returns the bytes and the offset after the last batch.
pub fn build_run(seed: u64, batch_bytes: usize, total_bytes: usize, first_offset: i64) -> (Vec<u8>, i64) {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(total_bytes);
    let mut next = first_offset;
    while out.len() + batch_bytes <= total_bytes {
        let batch = build_batch(&mut rng, next, batch_bytes);
        let (_, view) = BatchIter::new(&batch, MAX_BATCH_BYTES)
            .next()
            .expect("one batch")
            .expect("well framed");
        next = view.next_offset();
        out.extend_from_slice(&batch);
    }
    (out, next)
}

/// Splits `buf` (whole batches) into consecutive runs of whole batches of at
/// most `max_chunk` bytes each (at least one batch per run), like the
/// per-partition `records` of successive Fetch responses.
pub fn chunks(buf: &[u8], max_chunk: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for item in BatchIter::new(buf, MAX_BATCH_BYTES) {
        let (position, batch) = item.expect("well framed");
        let batch_end = position + batch.size_bytes();
        if end > start && batch_end - start > max_chunk {
            out.push(start..end);
            start = end;
        }
        end = batch_end;
    }
    assert_eq!(end, buf.len(), "buffer holds whole batches only");
    if end > start {
        out.push(start..end);
    }
    out
}

/// "16KiB", "1MiB": labels for benchmark ids.
pub fn size_label(bytes: usize) -> String {
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{}KiB", bytes / KIB)
    }
}
