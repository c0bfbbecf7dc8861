//! A full disk is an error, never a SIGBUS. The partition log's files that
//! are written through memory mappings (segments and their `.index` and
//! `.timeindex`) must have their disk blocks reserved before a store lands
//! in a page; a store into an unbacked page of a full file system kills the
//! process with SIGBUS. Each test runs in a mount namespace of its own
//! thread with a small tmpfs (needs root, as the agent's full-disk tests
//! in tests/control_cli.rs do), fills it with ballast and appends on.

use std::ffi::CString;
use std::io::Write;
use std::path::Path;

use ringmirror_storage::batch::{BatchBuilder, BuildRecord};
use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

/// Mounts a tmpfs of `size_kib` on `dir` in a mount namespace that only
/// the calling thread enters (unshare(CLONE_NEWNS) from a test thread:
/// nothing is mounted for the rest of the process or the host).
fn mount_small_tmpfs(dir: &Path, size_kib: u64) {
    // SAFETY: plain syscalls with valid, NUL-terminated arguments.
    unsafe {
        assert_eq!(
            libc::unshare(libc::CLONE_NEWNS),
            0,
            "unshare(CLONE_NEWNS) (these tests need root): {}",
            std::io::Error::last_os_error()
        );
        let root = CString::new("/").unwrap();
        let none = CString::new("none").unwrap();
        assert_eq!(
            libc::mount(
                none.as_ptr(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null()
            ),
            0,
            "make / private: {}",
            std::io::Error::last_os_error()
        );
        let target = CString::new(dir.to_str().unwrap()).unwrap();
        let fstype = CString::new("tmpfs").unwrap();
        let options = CString::new(format!("size={size_kib}k")).unwrap();
        assert_eq!(
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                options.as_ptr().cast()
            ),
            0,
            "mount tmpfs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// Writes zeros into `path` until the file system is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("fill {}: {e}", path.display()),
        }
    }
    let _ = file.sync_all();
}

fn batch(base_offset: i64, timestamp: i64) -> Vec<u8> {
    BatchBuilder {
        base_offset,
        records: vec![BuildRecord {
            timestamp,
            key: Some(b"k".to_vec()),
            value: Some(vec![7u8; 40]),
            ..Default::default()
        }],
        ..Default::default()
    }
    .build()
}

/// Segment space reserved well ahead (1 MiB), an index entry for every
/// batch: the indexes cross pages long before the segment needs more room.
fn config() -> LogConfig {
    LogConfig {
        preallocate_bytes: 1 << 20,
        prefault_bytes: 0,
        index_interval_bytes: 0,
        ..LogConfig::default()
    }
}

/// Runs `f` on a thread of its own with a 4 MiB tmpfs mounted at the
/// directory it is given.
fn on_a_small_disk(f: impl FnOnce(&Path) + Send + 'static) {
    let tmp = tempfile::tempdir().unwrap();
    let disk = tmp.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    std::thread::spawn(move || {
        mount_small_tmpfs(&disk, 4096);
        f(&disk)
    })
    .join()
    .expect("the log thread");
}

#[test]
fn a_full_disk_when_an_index_crosses_a_page_is_an_error_and_loses_nothing() {
    on_a_small_disk(move |disk| {
        let dir = disk.join("t-0");
        let (mut log, _) = PartitionLog::open(OpenOptions::new(&dir, config())).unwrap();
        log.append(&batch(0, 1_000), 1).unwrap();
        fill(&disk.join("ballast"));

        // Every batch adds an entry to both indexes: the time index (12-byte
        // entries) needs a new page after 341 of them, the offset index
        // after 512, while the segment still has reserved room.
        let mut appended = 1i64;
        let error = loop {
            assert!(appended < 2_000, "the indexes never needed a new page");
            match log.append(&batch(appended, 1_000 + appended), 1) {
                Ok(_) => appended += 1,
                Err(e) => break e,
            }
        };
        assert!(error.is_disk_full(), "want a full-disk error, got {error}");
        assert!(appended > 300, "failed before an index crossed a page: {appended}");
        assert_eq!(log.log_end_offset(), appended, "the refused batch is not in the log");

        // Space comes back: the same batch goes in, and everything reads back
        // after a clean close and reopen, through the indexes.
        std::fs::remove_file(disk.join("ballast")).unwrap();
        log.append(&batch(appended, 1_000 + appended), 1).unwrap();
        let end = appended + 1;
        log.close(2).unwrap();
        let (log, _) = PartitionLog::open(OpenOptions::new(&dir, config())).unwrap();
        assert_eq!(log.log_end_offset(), end);
        for offset in [0, 1, 340, 341, 342, 511, 512, 513, end - 1] {
            let offset = offset.min(end - 1);
            let bytes = log.read(offset, 1).unwrap().to_vec().unwrap();
            assert_eq!(bytes, batch(offset, 1_000 + offset), "batch at offset {offset}");
            let found = log
                .offset_for_timestamp(1_000 + offset)
                .unwrap()
                .expect("a timestamp in the log");
            assert_eq!(found.offset, offset, "time index lookup of offset {offset}");
        }
    });
}

/// The io_uring path: [`PartitionLog::begin_write`] reserves the room of a
/// write before anyone writes it, so a full disk refuses the write there;
/// the writes already handed out (their room reserved) still land and
/// commit, and nothing acknowledged is lost. The kernel's side is played by
/// pwrite into the target, as the ring's workers would.
#[test]
fn a_full_disk_refuses_a_ring_write_before_it_is_written_and_loses_nothing() {
    use std::os::unix::fs::FileExt;

    use ringmirror_storage::log::{BeginWrite, WriteTarget};

    const IN_FLIGHT: usize = 4;
    let big_batch = |base_offset: i64| {
        BatchBuilder {
            base_offset,
            records: vec![BuildRecord {
                timestamp: 1_000 + base_offset,
                value: Some(vec![base_offset as u8; 20_000]),
                ..Default::default()
            }],
            ..Default::default()
        }
        .build()
    };
    let config = LogConfig {
        preallocate_bytes: 64 * 1024,
        prefault_bytes: 0,
        ..LogConfig::default()
    };
    let write_and_complete = |log: &mut PartitionLog, (target, bytes): (WriteTarget, Vec<u8>)| {
        target.file.write_all_at(&bytes, target.position).unwrap();
        log.complete_oldest_write(target.seq, Ok(bytes.len()), &bytes, 1)
            .unwrap();
    };
    on_a_small_disk(move |disk| {
        let dir = disk.join("t-0");
        let (mut log, _) = PartitionLog::open(OpenOptions::new(&dir, config)).unwrap();
        // The first write reserves `preallocate_bytes` ahead; then the disk fills.
        let first = big_batch(0);
        match log.begin_write(&first, 1).unwrap() {
            BeginWrite::Ready(target) => write_and_complete(&mut log, (target, first)),
            other => panic!("unexpected {other:?}"),
        }
        fill(&disk.join("ballast"));

        let mut in_flight = std::collections::VecDeque::new();
        let mut begun = 1i64;
        let error = loop {
            assert!(begun < 1_000, "the disk never filled");
            let bytes = big_batch(begun);
            match log.begin_write(&bytes, 1) {
                Ok(BeginWrite::Ready(target)) => in_flight.push_back((target, bytes)),
                Ok(other) => panic!("unexpected {other:?}"),
                Err(e) => break e,
            }
            begun += 1;
            if in_flight.len() == IN_FLIGHT {
                write_and_complete(&mut log, in_flight.pop_front().unwrap());
            }
        };
        assert!(error.is_disk_full(), "want a full-disk error, got {error}");
        assert!(begun > 2, "failed before the reserved room was used: {begun}");
        assert_eq!(log.append_end_offset(), begun, "the refused write is not planned");
        // What was handed out had its room: it lands and commits.
        while let Some(write) = in_flight.pop_front() {
            write_and_complete(&mut log, write);
        }
        assert_eq!(log.log_end_offset(), begun, "every handed-out write committed");

        // Space comes back: the refused batch goes in; everything reads back.
        std::fs::remove_file(disk.join("ballast")).unwrap();
        let bytes = big_batch(begun);
        match log.begin_write(&bytes, 1).unwrap() {
            BeginWrite::Ready(target) => write_and_complete(&mut log, (target, bytes)),
            other => panic!("unexpected {other:?}"),
        }
        let end = begun + 1;
        log.close(2).unwrap();
        let (log, _) = PartitionLog::open(OpenOptions::new(&dir, config)).unwrap();
        assert_eq!(log.log_end_offset(), end);
        for offset in 0..end {
            let bytes = log.read(offset, 1).unwrap().to_vec().unwrap();
            assert_eq!(bytes, big_batch(offset), "batch at offset {offset}");
        }
    });
}
