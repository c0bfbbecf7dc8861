//! Fuzzes log recovery on a segment file of arbitrary bytes: opening the log
//! after an unclean stop must never panic, and whatever it keeps must be
//! CRC-valid whole batches.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("00000000000000000000.log"), data).expect("write segment");
    let opened = PartitionLog::open(OpenOptions {
        dir: dir.path().to_owned(),
        topic_id: None,
        config: LogConfig { segment_bytes: 1 << 20, preallocate_bytes: 1 << 16, prefault_bytes: 1 << 16, ..LogConfig::default() },
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: 0,
    });
    if let Ok((log, _)) = opened {
        log.for_each_batch(|b| assert!(b.crc_is_valid())).expect("iterate recovered log");
    }
});
