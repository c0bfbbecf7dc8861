//! A reopened active segment's `.index` and `.timeindex` stay sparse, as
//! fresh ones are (and as Kafka's `AbstractIndex`, which sizes the file with
//! `RandomAccessFile.setLength`, keeps them): disk blocks only for their
//! entries and the page `reserve_entries` takes ahead, not the whole
//! `segment.index.bytes` (10 MiB each by default), after a clean close and
//! after an unclean stop with recovery alike.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

const T0_MS: u64 = 1_700_000_000_000;
/// Far below `segment.index.bytes` (10 MiB), far above a few pages.
const MAX_INDEX_DISK: u64 = 1024 * 1024;

fn batch(base_offset: i64) -> Vec<u8> {
    common::one_record_batch(base_offset, T0_MS, 8 * 1024)
}

fn open(dir: &Path, clean_shutdown: bool) -> PartitionLog {
    let (log, _) = PartitionLog::open(OpenOptions {
        now_ms: T0_MS,
        clean_shutdown,
        ..OpenOptions::new(dir, LogConfig::default())
    })
    .expect("open log");
    log
}

/// Appends `count` batches (8 KiB each: an index entry every batch or so).
fn append(log: &mut PartitionLog, count: usize) {
    for _ in 0..count {
        let offset = log.log_end_offset();
        log.append(&batch(offset), T0_MS).expect("append");
    }
}

/// Bytes on disk (allocated blocks) of the active segment's index files.
fn index_disk(log: &PartitionLog) -> (u64, u64) {
    let base = *log.segment_base_offsets().last().expect("an active segment");
    let disk = |suffix: &str| {
        let meta = std::fs::metadata(log.dir().join(format!("{base:020}.{suffix}"))).expect("index file");
        meta.blocks() * 512
    };
    (disk("index"), disk("timeindex"))
}

fn assert_sparse(log: &PartitionLog, when: &str) {
    let (index, time_index) = index_disk(log);
    eprintln!("{when}: .index {index} bytes on disk, .timeindex {time_index}");
    assert!(
        index < MAX_INDEX_DISK && time_index < MAX_INDEX_DISK,
        "{when}: .index holds {index} bytes of blocks, .timeindex {time_index}"
    );
}

#[test]
fn reopened_indexes_stay_sparse_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), false);
    append(&mut log, 16);
    assert_sparse(&log, "fresh");
    log.close(T0_MS).unwrap();

    let mut log = open(dir.path(), true);
    assert_sparse(&log, "reopened after a clean close");
    append(&mut log, 16);
    assert_sparse(&log, "appended after a clean close");
    log.close(T0_MS).unwrap();
}

#[test]
fn reopened_indexes_stay_sparse_after_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), false);
    append(&mut log, 16);
    log.flush(T0_MS).unwrap();
    drop(log); // no clean close: the index files keep their full length

    let mut log = open(dir.path(), false);
    assert_sparse(&log, "reopened with recovery");
    append(&mut log, 16);
    assert_sparse(&log, "appended after recovery");
    drop(log);

    // And once more through recovery of a recovered log.
    let mut log = open(dir.path(), false);
    append(&mut log, 4);
    assert_sparse(&log, "appended after a second recovery");
}
