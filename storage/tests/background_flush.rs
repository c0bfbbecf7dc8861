//! A roll leaves the sealed segment's write-back to the background flusher
//! (as Kafka's `UnifiedLog.roll` leaves it to its scheduler): the recovery
//! point moves to the roll's base offset once the flusher has synced the
//! sealed segment, its indexes and the roll's producer snapshot, and not
//! before; a clean flush syncs whatever is pending itself; a log cut below
//! a rolled segment is not moved back up by that segment's flush. Every
//! 8 MiB appended to the active segment are handed to the kernel's
//! write-back early, so they do not wait for the roll.
//!
//! Dirty pages are read per file with `cachestat(2)` (Linux 6.5+).

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

const T0_MS: u64 = 1_700_000_000_000;
const SEGMENT_BYTES: u64 = 256 * 1024;

fn batch(base_offset: i64) -> Vec<u8> {
    common::one_record_batch(base_offset, T0_MS, 8 * 1024)
}

fn open(dir: &Path, recovery_point: i64) -> PartitionLog {
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let (log, _) = PartitionLog::open(OpenOptions {
        now_ms: T0_MS,
        recovery_point,
        ..OpenOptions::new(dir, config)
    })
    .expect("open log");
    log
}

/// Appends one-batch appends until the log has `segments` segments.
fn append_until_segments(log: &mut PartitionLog, segments: usize) {
    while log.segment_base_offsets().len() < segments {
        let offset = log.log_end_offset();
        log.append(&batch(offset), T0_MS).expect("append");
    }
}

/// `struct cachestat` of Linux's uapi: pages of a file in the page cache.
#[repr(C)]
#[derive(Default, Debug)]
struct CacheStat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// Dirty pages of the file at `path` (the whole file).
fn dirty_pages(path: &Path) -> u64 {
    dirty_pages_in(path, 0, 0)
}

/// Dirty pages of the file at `path` in [offset, offset + len); `len` 0
/// means to the end.
fn dirty_pages_in(path: &Path, offset: u64, len: u64) -> u64 {
    // cachestat(2) is system call 451 on every architecture (Linux 6.5).
    const SYS_CACHESTAT: libc::c_long = 451;
    let file = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let range = [offset, len];
    let mut stat = CacheStat::default();
    // SAFETY: both pointers are to live values of the layouts the call takes.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            range.as_ptr(),
            &mut stat as *mut CacheStat,
            0u32,
        )
    };
    assert_eq!(
        rc,
        0,
        "cachestat {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    stat.nr_dirty
}

fn segment_file(log: &PartitionLog, base: i64, suffix: &str) -> std::path::PathBuf {
    log.dir().join(format!("{base:020}.{suffix}"))
}

/// Polls until the recovery point reaches `offset` (the flusher's work).
fn wait_for_recovery_point(log: &PartitionLog, offset: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.recovery_point() < offset {
        assert!(
            Instant::now() < deadline,
            "the recovery point stayed at {} (waiting for {offset})",
            log.recovery_point()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_rolled_segment_is_synced_in_the_background_before_the_recovery_point_passes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 0);
    append_until_segments(&mut log, 3);
    let bases = log.segment_base_offsets();
    let active = bases[2];

    wait_for_recovery_point(&log, active);
    assert_eq!(
        log.recovery_point(),
        active,
        "exactly the last roll's base: the active segment is not flushed"
    );
    for &base in &bases[..2] {
        for suffix in ["log", "index", "timeindex"] {
            let path = segment_file(&log, base, suffix);
            assert_eq!(dirty_pages(&path), 0, "{} still dirty after its flush", path.display());
        }
        let snapshot = segment_file(
            &log,
            bases[bases.iter().position(|&b| b == base).unwrap() + 1],
            "snapshot",
        );
        assert_eq!(dirty_pages(&snapshot), 0, "{} still dirty", snapshot.display());
    }
    // The measure can see dirt: the active segment's bytes were never flushed.
    assert!(
        dirty_pages(&segment_file(&log, active, "log")) > 0,
        "the active segment is dirty"
    );

    // A crash now: recovery rescans from the recovery point and keeps every batch.
    let end = log.log_end_offset();
    let recovery_point = log.recovery_point();
    drop(log);
    let log = open(dir.path(), recovery_point);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.segment_base_offsets(), bases);
}

#[test]
fn a_clean_flush_right_after_a_roll_syncs_the_rolled_segment_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 0);
    append_until_segments(&mut log, 2);
    log.flush(T0_MS).expect("flush");
    assert_eq!(log.recovery_point(), log.log_end_offset());
    let bases = log.segment_base_offsets();
    for base in bases {
        for suffix in ["log", "index", "timeindex"] {
            let path = segment_file(&log, base, suffix);
            assert_eq!(dirty_pages(&path), 0, "{} dirty after a clean flush", path.display());
        }
    }
}

#[test]
fn a_cut_below_a_rolled_segment_is_not_moved_back_up_by_its_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), 0);
    append_until_segments(&mut log, 2);
    let rolled_at = log.segment_base_offsets()[1];
    log.truncate_to(rolled_at - 3).expect("truncate");
    assert_eq!(log.log_end_offset(), rolled_at - 3);

    // The flusher runs jobs in order: once another log's later roll is
    // flushed, the cut log's roll has been too.
    let other_dir = tempfile::tempdir().unwrap();
    let mut other = open(other_dir.path(), 0);
    append_until_segments(&mut other, 2);
    wait_for_recovery_point(&other, other.segment_base_offsets()[1]);

    assert!(
        log.recovery_point() <= log.log_end_offset(),
        "recovery point {} above the log end {} after the cut",
        log.recovery_point(),
        log.log_end_offset()
    );
}

#[test]
fn every_8_mib_of_the_active_segment_are_written_back_without_a_flush() {
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 64 * MIB,
        ..LogConfig::default()
    };
    let (mut log, _) = PartitionLog::open(OpenOptions {
        now_ms: T0_MS,
        ..OpenOptions::new(dir.path(), config)
    })
    .expect("open log");
    // Past the first 8 MiB by a little: one write-behind request covers
    // [0, ~8 MiB); the bytes after it are left to the roll.
    let mut written = 0u64;
    while written < 8 * MIB + 512 * 1024 {
        let offset = log.log_end_offset();
        let batch = batch(offset);
        written += batch.len() as u64;
        log.append(&batch, T0_MS).expect("append");
    }
    assert_eq!(log.segment_base_offsets(), vec![0], "one active segment");
    let path = segment_file(&log, 0, "log");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let dirty = dirty_pages_in(&path, 0, 8 * MIB - 64 * 1024);
        if dirty == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{dirty} pages of the first 8 MiB still dirty: no write-behind"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        dirty_pages_in(&path, 8 * MIB + 64 * 1024, 0) > 0,
        "the bytes after the last write-behind request stay dirty until the roll"
    );
    assert_eq!(log.recovery_point(), 0, "write-behind does not move the recovery point");
}
