//! Property tests of appends whose bytes are written by someone else (the
//! shard's io_uring ring), against a model: the batches submitted, in order,
//! and for each write whether the kernel has put its bytes in the file.
//!
//! Random interleavings of submitting writes, the kernel finishing or
//! failing any of them in any order, and crashes must keep: the log end
//! readers see is the end of the longest prefix of writes that finished
//! (and were reported, in order); reads return exactly those batches; after
//! a crash, recovery keeps exactly the committed batches plus the writes
//! that had reached the file without a hole before them — never a batch
//! after a hole.

use std::os::unix::fs::FileExt;
use std::path::Path;

use proptest::prelude::*;
use ringmirror_storage::batch::{BatchBuilder, BatchIter, BuildRecord};
use ringmirror_storage::log::{
    BeginWrite, LogConfig, LogError, OpenOptions, PartitionLog, WRITES_IN_FLIGHT_MAX, WriteTarget,
};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Submit a write of `batches` batches of `value_bytes`-byte records.
    Submit { batches: usize, value_bytes: usize },
    /// The kernel finishes (or, `fail`, fails) the `pick`-th unfinished write.
    Finish { pick: usize, fail: bool },
    /// The process dies; the log is opened again without a clean stop.
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..4, 0usize..900).prop_map(|(batches, value_bytes)| Op::Submit { batches, value_bytes }),
        6 => (0usize..8, prop::bool::weighted(0.03)).prop_map(|(pick, fail)| Op::Finish { pick, fail }),
        1 => Just(Op::Crash),
    ]
}

/// A write handed to the "kernel": its target, bytes, batches, and outcome.
struct Submitted {
    target: WriteTarget,
    bytes: Vec<u8>,
    batches: Vec<Vec<u8>>,
    outcome: Option<std::io::Result<usize>>,
}

struct Harness {
    log: PartitionLog,
    config: LogConfig,
    /// Batches whose writes were reported complete: what readers may see.
    committed: Vec<Vec<u8>>,
    in_flight: Vec<Submitted>,
    next_offset: i64,
    epoch: i32,
    failed: bool,
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 512,
        segment_index_bytes: 4096,
        preallocate_bytes: 8 * 1024,
        prefault_bytes: 0,
        max_batch_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: LogConfig) -> PartitionLog {
    PartitionLog::open(OpenOptions::new(dir, config)).expect("open log").0
}

impl Harness {
    fn batches(&mut self, count: usize, value_bytes: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|i| {
                self.epoch += i32::from(self.next_offset % 7 == 3);
                let records = 1 + (value_bytes + i) % 3;
                let bytes = BatchBuilder {
                    base_offset: self.next_offset,
                    partition_leader_epoch: self.epoch,
                    records: (0..records)
                        .map(|r| BuildRecord {
                            timestamp: 1_700_000_000_000 + self.next_offset + r as i64,
                            key: None,
                            value: Some(vec![(self.next_offset as usize + r) as u8; value_bytes]),
                            headers: Vec::new(),
                        })
                        .collect(),
                    ..Default::default()
                }
                .build();
                self.next_offset += records as i64;
                bytes
            })
            .collect()
    }

    /// Reports finished writes oldest first, as the ring does.
    fn report_in_order(&mut self) {
        while self.in_flight.first().is_some_and(|w| w.outcome.is_some()) {
            let w = self.in_flight.remove(0);
            let result = self
                .log
                .complete_oldest_write(w.target.seq, w.outcome.unwrap(), &w.bytes, 0);
            match result {
                Ok(info) => {
                    assert_eq!(info.batches as usize, w.batches.len());
                    self.committed.extend(w.batches);
                }
                Err(_) => {
                    // The writes after a failed one are abandoned, never committed.
                    self.failed = true;
                    for later in &self.in_flight {
                        assert!(!self.log.write_is_pending(later.target.seq));
                    }
                    self.in_flight.clear();
                }
            }
        }
    }

    fn kernel_writes(w: &mut Submitted) {
        w.target.file.write_all_at(&w.bytes, w.target.position).unwrap();
        w.outcome = Some(Ok(w.bytes.len()));
    }

    fn submit(&mut self, count: usize, value_bytes: usize) {
        let in_flight_before = self.log.writes_in_flight();
        let batches = self.batches(count, value_bytes);
        let bytes: Vec<u8> = batches.concat();
        match self.log.begin_write(&bytes, 0) {
            Ok(BeginWrite::Ready(target)) => self.in_flight.push(Submitted {
                target,
                bytes,
                batches,
                outcome: None,
            }),
            Ok(BeginWrite::Full) => {
                assert_eq!(in_flight_before, WRITES_IN_FLIGHT_MAX);
                self.next_offset = self.log.append_end_offset();
            }
            Ok(BeginWrite::NeedsRoll) => {
                // Complete everything in flight, then append synchronously.
                for w in &mut self.in_flight {
                    Self::kernel_writes(w);
                }
                self.report_in_order();
                self.log.append(&bytes, 0).unwrap();
                self.committed.extend(batches);
            }
            Err(LogError::WriteFailed { .. }) => {
                assert!(self.failed);
                self.next_offset = self.log.append_end_offset();
            }
            Err(e) => panic!("begin_write: {e}"),
        }
    }

    fn finish(&mut self, pick: usize, fail: bool) {
        let unfinished: Vec<usize> = (0..self.in_flight.len())
            .filter(|&i| self.in_flight[i].outcome.is_none())
            .collect();
        if unfinished.is_empty() {
            return;
        }
        let w = &mut self.in_flight[unfinished[pick % unfinished.len()]];
        if fail {
            w.outcome = Some(Err(std::io::Error::from_raw_os_error(libc::EIO)));
        } else {
            Self::kernel_writes(w);
        }
        self.report_in_order();
    }

    fn crash(&mut self, dir: &Path) {
        // Writes that reached the file before any hole survive as well.
        let mut survivors = self.committed.clone();
        if !self.failed {
            for w in self.in_flight.iter().take_while(|w| matches!(w.outcome, Some(Ok(_)))) {
                survivors.extend(w.batches.iter().cloned());
            }
        }
        self.in_flight.clear();
        // Drop the crashed log (no close) behind a stand-in before reopening.
        let crashed = std::mem::replace(&mut self.log, open(&dir.join("stand-in"), self.config));
        drop(crashed);
        self.log = open(&dir.join("log"), self.config);
        // Nothing past the recovered end: bytes written behind a hole are
        // zeroed, or a later recovery could take them for the log's tail.
        let tail = self.log.read(self.log.log_end_offset(), 1).unwrap();
        let file_len = tail.file.metadata().unwrap().len();
        let mut rest = vec![0; (file_len - tail.position) as usize];
        tail.file.read_exact_at(&mut rest, tail.position).unwrap();
        assert!(rest.iter().all(|&b| b == 0), "bytes left past the recovered end");
        self.committed = survivors;
        self.failed = false;
        self.next_offset = self.log.log_end_offset();
    }

    fn check(&self) {
        let want_end = self.committed.last().map_or(0, |b| {
            let (_, batch) = BatchIter::new(b, 1 << 20).next().unwrap().unwrap();
            batch.next_offset()
        });
        assert_eq!(self.log.log_end_offset(), want_end, "visible end");
        let mut got = Vec::new();
        let mut offset = 0;
        while offset < self.log.log_end_offset() {
            let slice = self.log.read(offset, 4096).unwrap();
            assert!(slice.len > 0);
            assert!(
                slice.end_offset <= self.log.log_end_offset(),
                "read past the visible end"
            );
            let bytes = slice.to_vec().unwrap();
            for item in BatchIter::new(&bytes, 1 << 20) {
                let (_, batch) = item.unwrap();
                got.push(batch.bytes().to_vec());
                offset = batch.next_offset();
            }
        }
        assert_eq!(self.log.read(offset, 4096).unwrap().len, 0);
        assert_eq!(got.len(), self.committed.len(), "batch count");
        assert!(got == self.committed, "visible bytes differ from the committed writes");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn visible_end_is_the_longest_completed_prefix_and_recovery_keeps_a_valid_prefix(
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let mut h = Harness {
            log: open(&dir.path().join("log"), config),
            config,
            committed: Vec::new(),
            in_flight: Vec::new(),
            next_offset: 0,
            epoch: 0,
            failed: false,
        };
        for op in ops {
            match op {
                Op::Submit { batches, value_bytes } => h.submit(batches, value_bytes),
                Op::Finish { pick, fail } => h.finish(pick, fail),
                Op::Crash => h.crash(dir.path()),
            }
            h.check();
        }
        // The kernel finishes everything; then the log closes cleanly.
        for w in &mut h.in_flight {
            Harness::kernel_writes(w);
        }
        h.report_in_order();
        h.check();
        let Harness { log, committed, .. } = h;
        log.close(0).unwrap();
        let log = open(&dir.path().join("log"), config);
        let mut got = Vec::new();
        log.for_each_batch(|b| got.push(b.bytes().to_vec())).unwrap();
        prop_assert!(got == committed);
    }
}
