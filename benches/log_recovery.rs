//! Recovery scan throughput: reopening a log after an unclean stop.
//!
//! After a crash the log re-validates everything from the recovery point
//! (framing + CRC32C over every batch) and rebuilds the indexes, the
//! leader-epoch cache and producer state, then cuts a torn tail; start-up
//! time after a crash is this scan. The bench writes 256 MiB of incompressible
//! 64 KiB batches into one segment, flushes, drops the log without `close()`
//! (an unclean stop), and then times `PartitionLog::open` with
//! `clean_shutdown: false` and `recovery_point: 0`, which re-validates the
//! whole log every time (checked: `bytes_validated` equals the data size).
//! The segment stays in the page cache, so this is the CPU side of recovery
//! (mapping faults, CRC, index rebuild), not disk reads. For scale, the same
//! group times `crc32c::crc32c` over an in-memory copy of the same bytes
//! (larger than L3, like the scan).

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog, RecoveryReport};

use common::{KIB, MIB, NOW_MS, build_run, chunks};

const LOG_BYTES: usize = 256 * MIB;
const BATCH_BYTES: usize = 64 * KIB;

fn open_unclean(dir: &Path) -> (PartitionLog, RecoveryReport) {
    PartitionLog::open(OpenOptions {
        dir: dir.to_owned(),
        topic_id: None,
        config: LogConfig::default(),
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: NOW_MS,
    })
    .expect("open log")
}

fn check_full_scan(report: &RecoveryReport, log: &PartitionLog, end_offset: i64) {
    assert_eq!(report.scanned_from_offset, Some(0), "{report:?}");
    assert_eq!(report.bytes_validated, LOG_BYTES as u64, "{report:?}");
    assert_eq!(report.batches_validated, (LOG_BYTES / BATCH_BYTES) as u64, "{report:?}");
    assert_eq!(log.log_end_offset(), end_offset, "{report:?}");
}

fn log_recovery(c: &mut Criterion) {
    let (buf, end_offset) = build_run(23, BATCH_BYTES, LOG_BYTES, 0);
    assert_eq!(buf.len(), LOG_BYTES);

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("bench-0");
    {
        let (mut log, _) = open_unclean(&dir);
        for r in chunks(&buf, MIB) {
            log.append(&buf[r], NOW_MS).expect("append");
        }
        assert_eq!(log.log_end_offset(), end_offset);
        // On disk (no writeback during the timed opens), but no clean close.
        log.flush(NOW_MS).expect("flush");
        drop(log);
    }
    // The first recovery also trims the preallocated tail; report it once.
    let (log, report) = open_unclean(&dir);
    eprintln!("log_recovery: first unclean reopen: {report:?}");
    check_full_scan(&report, &log, end_offset);
    drop(log);

    let mut group = c.benchmark_group("log_recovery");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(LOG_BYTES as u64));

    group.bench_function(BenchmarkId::new("open_unclean_full_scan", "64KiB"), |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let (log, report) = open_unclean(black_box(&dir));
                elapsed += start.elapsed();
                check_full_scan(&report, &log, end_offset);
                // Unclean again: the next open rescans everything.
                drop(log);
            }
            elapsed
        })
    });
    group.bench_function(BenchmarkId::new("crc32c_reference", "64KiB"), |b| {
        b.iter(|| crc32c::crc32c(black_box(&buf)))
    });
    group.finish();
}

criterion_group!(benches, log_recovery);
criterion_main!(benches);
