//! Append throughput of `PartitionLog` against plain copies into the page cache.
//!
//! The log stores fetched batches byte for byte in its segment files, so an
//! append should cost little more than copying the bytes. Each iteration
//! appends a 64 MiB round of incompressible batches (16 KiB or 1 MiB each),
//! in fetch-sized chunks of whole batches (≤ 1 MiB), to an empty log in a
//! tempdir; the log is emptied (`truncate_fully_and_start_at(0)`, which
//! deletes the files) between iterations, outside the timed region, so the
//! disk never fills. Every append therefore lands on fresh page-cache pages,
//! as a growing log's appends do: the log's `fallocate` reservation and, on
//! the mapped path, its `MADV_POPULATE_WRITE` pre-faulting are measured. A
//! fresh segment per round also means fresh `.index`/`.timeindex` files
//! every 64 MiB (a 1 GiB segment spreads that cost over 16× the data).
//!
//! Variants, per batch size:
//! * `log_append`: `PartitionLog::append` with the default config (the
//!   copying path: `pwrite` since 41c083f, stores into the mapping before).
//! * `log_tail_commit`: the zero-copy pair — `tail_mut` (reserve and
//!   pre-fault the mapped tail), copy the chunk in (standing in for the
//!   socket receive), `commit_tail` of all of it.
//! * `log_tail_commit_prefault0`: the same with `prefault_bytes = 0`: the log
//!   then populates exactly the pages of each chunk (one madvise per chunk)
//!   instead of 8 MiB ahead.
//! * `log_tail_validate_commit`: `log_tail_commit` plus `validate_batches`
//!   over the tail before committing: the full per-byte ingest path.
//! * `memcpy_prefaulted`: copy the same chunks into a file mapping whose
//!   pages were all written beforehand (the goal's baseline: the log should
//!   reach ≥ 0.8× of this).
//! * `memcpy_fresh_pages`: copy into a freshly created (sparse) file mapping,
//!   taking the page faults on first touch.
//! * `memcpy_fresh_populated`: the same, with one `MADV_POPULATE_WRITE` over
//!   the whole range first (inside the timed region): what pre-faulting buys.
//! * `pwrite_fresh_pages`: the same chunks written with `pwrite` into a
//!   fresh file instead of through a mapping (whole-page writes need no
//!   zero-fill of the new page-cache pages and take no page faults).

mod common;

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::hint::black_box;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use memmap2::{Advice, MmapMut, MmapOptions};
use ringmirror_storage::batch::{Validation, validate_batches};
use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

use common::{MAX_BATCH_BYTES, MIB, NOW_MS, build_run, chunks, size_label};

/// Bytes appended per timed iteration.
const ROUND_BYTES: usize = 64 * MIB;
/// Largest run of whole batches handed to one append (a Fetch partition's worth).
const CHUNK_BYTES: usize = MIB;

struct Workload {
    buf: Vec<u8>,
    chunks: Vec<Range<usize>>,
    end_offset: i64,
}

fn open_empty_log(dir: &Path, config: LogConfig) -> PartitionLog {
    let (log, _) = PartitionLog::open(OpenOptions {
        dir: dir.to_owned(),
        topic_id: None,
        config,
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: true,
        now_ms: NOW_MS,
    })
    .expect("open log");
    log
}

/// Times `round` on a log emptied before each iteration (emptying untimed).
fn bench_log(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    w: &Workload,
    config: LogConfig,
    round: impl Fn(&mut PartitionLog, &Workload),
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = open_empty_log(&dir.path().join("bench-0"), config);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                log.truncate_fully_and_start_at(0).expect("truncate");
                let start = Instant::now();
                round(&mut log, w);
                elapsed += start.elapsed();
                assert_eq!(log.log_end_offset(), w.end_offset, "every batch appended");
            }
            elapsed
        })
    });
    log.close(NOW_MS).expect("close");
}

fn append_round(log: &mut PartitionLog, w: &Workload) {
    for r in &w.chunks {
        black_box(log.append(&w.buf[r.clone()], NOW_MS).expect("append"));
    }
}

fn tail_commit_round(log: &mut PartitionLog, w: &Workload, validate: bool) {
    for r in &w.chunks {
        let len = r.len();
        let validation = Validation {
            next_offset: log.log_end_offset(),
            max_batch_bytes: MAX_BATCH_BYTES,
            fetch_epoch: Some(0),
            last_epoch: None,
        };
        let tail = log.tail_mut(len, NOW_MS).expect("tail_mut");
        tail.copy_from_slice(&w.buf[r.clone()]);
        if validate {
            // In place, as a fetcher validates what it received into the tail.
            let range = validate_batches(tail, &validation);
            assert_eq!(range.valid_bytes, len);
        }
        black_box(log.commit_tail(len, len, NOW_MS).expect("commit_tail"));
    }
}

fn copy_chunks(map: &mut [u8], w: &Workload) {
    for r in &w.chunks {
        map[r.clone()].copy_from_slice(&w.buf[r.clone()]);
    }
    black_box(&map[..]);
}

fn create_mapped_file(path: &Path, len: usize) -> (File, MmapMut) {
    let file = FsOpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("create file");
    file.set_len(len as u64).expect("set_len");
    // SAFETY: the file is private to this bench and not resized while mapped.
    let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.expect("mmap");
    (file, map)
}

/// Times copying into a new sparse file mapping per iteration; creating,
/// unmapping and deleting the file are untimed.
fn bench_memcpy_fresh(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    w: &Workload,
    populate: bool,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fresh.bin");
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let (file, mut map) = create_mapped_file(&path, w.buf.len());
                let start = Instant::now();
                if populate {
                    map.advise(Advice::PopulateWrite).expect("MADV_POPULATE_WRITE");
                }
                copy_chunks(&mut map, w);
                elapsed += start.elapsed();
                drop(map);
                drop(file);
                std::fs::remove_file(&path).expect("remove");
            }
            elapsed
        })
    });
}

/// Times `pwrite`-ing the chunks into a new file per iteration (creating and
/// deleting it untimed).
fn bench_pwrite_fresh(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    w: &Workload,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pwrite.bin");
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let file = FsOpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .expect("create");
                let start = Instant::now();
                for r in &w.chunks {
                    file.write_all_at(&w.buf[r.clone()], r.start as u64).expect("pwrite");
                }
                elapsed += start.elapsed();
                drop(file);
                std::fs::remove_file(&path).expect("remove");
            }
            elapsed
        })
    });
}

fn log_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("log_append");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    for batch_bytes in [16 * 1024, MIB] {
        let label = size_label(batch_bytes);
        let (buf, end_offset) = build_run(11, batch_bytes, ROUND_BYTES, 0);
        let w = Workload {
            chunks: chunks(&buf, CHUNK_BYTES),
            buf,
            end_offset,
        };
        group.throughput(Throughput::Bytes(w.buf.len() as u64));

        bench_log(
            &mut group,
            BenchmarkId::new("log_append", &label),
            &w,
            LogConfig::default(),
            append_round,
        );
        bench_log(
            &mut group,
            BenchmarkId::new("log_tail_commit", &label),
            &w,
            LogConfig::default(),
            |log, w| tail_commit_round(log, w, false),
        );
        bench_log(
            &mut group,
            BenchmarkId::new("log_tail_commit_prefault0", &label),
            &w,
            LogConfig {
                prefault_bytes: 0,
                ..LogConfig::default()
            },
            |log, w| tail_commit_round(log, w, false),
        );
        bench_log(
            &mut group,
            BenchmarkId::new("log_tail_validate_commit", &label),
            &w,
            LogConfig::default(),
            |log, w| tail_commit_round(log, w, true),
        );

        // Baseline: the same copies into pages that are already faulted in.
        let dir = tempfile::tempdir().expect("tempdir");
        let (_file, mut map) = create_mapped_file(&dir.path().join("prefaulted.bin"), w.buf.len());
        map.fill(0xA5);
        group.bench_function(BenchmarkId::new("memcpy_prefaulted", &label), |b| {
            b.iter(|| copy_chunks(&mut map, &w))
        });
        drop(map);

        bench_memcpy_fresh(&mut group, BenchmarkId::new("memcpy_fresh_pages", &label), &w, false);
        bench_memcpy_fresh(&mut group, BenchmarkId::new("memcpy_fresh_populated", &label), &w, true);
        bench_pwrite_fresh(&mut group, BenchmarkId::new("pwrite_fresh_pages", &label), &w);
    }
    group.finish();
}

criterion_group!(benches, log_append);
criterion_main!(benches);
