//! Disk reserved ahead of the data under a shard's budget: many partitions
//! of one shard append (synchronously and through writes someone else
//! performs, as the io_uring ring does) and the room they hold ahead of
//! their data and writes in flight — measured from the files, not from the
//! log's own accounting — never exceeds the budget, while every write still
//! finds its room reserved before its bytes land. Idle partitions give
//! their room back (fewer blocks on disk), and a crash after a release
//! still recovers every committed batch and nothing past it.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord};
use ringmirror_storage::log::{BeginWrite, LogConfig, OpenOptions, PartitionLog, ReserveBudget, WriteTarget};

const PAGE_BYTES: u64 = 4096;
const T0_MS: u64 = 1_700_000_000_000;

fn page_round_up(n: u64) -> u64 {
    n.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 512 * 1024,
        preallocate_bytes: 256 * 1024,
        prefault_bytes: 0,
        reserve_release_idle_ms: 30_000,
        ..LogConfig::default()
    }
}

fn batch(base_offset: i64, value_bytes: usize) -> Vec<u8> {
    BatchBuilder {
        base_offset,
        records: vec![BuildRecord {
            timestamp: 1_700_000_000_000 + base_offset,
            value: Some(vec![base_offset as u8; value_bytes]),
            ..Default::default()
        }],
        ..Default::default()
    }
    .build()
}

fn open(dir: &Path, now_ms: u64) -> PartitionLog {
    open_with(dir, now_ms, config())
}

fn open_with(dir: &Path, now_ms: u64, config: LogConfig) -> PartitionLog {
    PartitionLog::open(OpenOptions {
        now_ms,
        ..OpenOptions::new(dir, config)
    })
    .expect("open log")
    .0
}

/// The active segment's file: the log's last `.log`.
fn active_file(log: &PartitionLog) -> PathBuf {
    let base = *log.segment_base_offsets().last().expect("an active segment");
    log.dir().join(format!("{base:020}.log"))
}

/// Bytes of data in the active segment, from the files: the log's size
/// less its sealed segments (sealed files are trimmed to their data).
fn active_data_bytes(log: &PartitionLog) -> u64 {
    let bases = log.segment_base_offsets();
    let sealed: u64 = bases[..bases.len() - 1]
        .iter()
        .map(|base| {
            std::fs::metadata(log.dir().join(format!("{base:020}.log")))
                .unwrap()
                .len()
        })
        .sum();
    log.size_bytes() - sealed
}

/// A write handed out by `begin_write`, not yet written.
struct Pending {
    target: WriteTarget,
    bytes: Vec<u8>,
}

struct Partition {
    log: PartitionLog,
    next_offset: i64,
    /// Every batch committed, in order.
    committed: Vec<Vec<u8>>,
    in_flight: Vec<Pending>,
}

impl Partition {
    fn in_flight_bytes(&self) -> u64 {
        self.in_flight.iter().map(|w| w.bytes.len() as u64).sum()
    }

    /// Room the active file holds past its data and writes in flight.
    fn ahead_on_disk(&self) -> u64 {
        let len = std::fs::metadata(active_file(&self.log)).unwrap().len();
        assert_eq!(len, self.log.reserved_bytes(), "the file's length is what is reserved");
        len.saturating_sub(page_round_up(active_data_bytes(&self.log) + self.in_flight_bytes()))
    }

    fn next_batches(&mut self, count: usize, value_bytes: usize) -> Vec<Vec<u8>> {
        (0..count)
            .map(|_| {
                let b = batch(self.next_offset, value_bytes);
                self.next_offset += 1;
                b
            })
            .collect()
    }

    fn complete_oldest(&mut self, now_ms: u64) {
        let w = self.in_flight.remove(0);
        w.target.file.write_all_at(&w.bytes, w.target.position).unwrap();
        self.log
            .complete_oldest_write(w.target.seq, Ok(w.bytes.len()), &w.bytes, now_ms)
            .expect("complete a write");
        self.committed.extend(split(&w.bytes));
    }

    fn complete_all(&mut self, now_ms: u64) {
        while !self.in_flight.is_empty() {
            self.complete_oldest(now_ms);
        }
    }

    /// The log's batches, read back.
    fn read_all(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.log.for_each_batch(|b| out.push(b.bytes().to_vec())).unwrap();
        out
    }
}

fn split(bytes: &[u8]) -> Vec<Vec<u8>> {
    ringmirror_storage::batch::BatchIter::new(bytes, 1 << 20)
        .map(|item| item.unwrap().1.bytes().to_vec())
        .collect()
}

/// Blocks the file holds on disk, in bytes.
fn blocks_bytes(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Append `batches` batches of `value_bytes` to partition `p` with `append`.
    Append {
        p: usize,
        batches: usize,
        value_bytes: usize,
    },
    /// Hand out a write of them with `begin_write` (completed later).
    Begin {
        p: usize,
        batches: usize,
        value_bytes: usize,
    },
    /// The oldest write in flight of partition `p` lands and is reported.
    Complete { p: usize },
    /// Time goes by.
    Wait { ms: u64 },
    /// The shard's housekeeping: idle partitions give their room back.
    Release,
}

fn op(partitions: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..partitions, 1usize..4, 0usize..40_000)
            .prop_map(|(p, batches, value_bytes)| Op::Append { p, batches, value_bytes }),
        4 => (0..partitions, 1usize..4, 0usize..40_000)
            .prop_map(|(p, batches, value_bytes)| Op::Begin { p, batches, value_bytes }),
        3 => (0..partitions).prop_map(|p| Op::Complete { p }),
        2 => prop_oneof![1u64..2_000, 20_000u64..40_000].prop_map(|ms| Op::Wait { ms }),
        1 => Just(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Appends across many partitions of one shard: every one succeeds
    /// with its room reserved before its bytes land, and the room held
    /// ahead of data and writes in flight, on disk, stays within the budget.
    #[test]
    fn reserved_ahead_stays_within_the_budget_and_every_write_has_its_room(
        budget_pages in 0u64..160,
        ops in prop::collection::vec(op(12), 1..120),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let budget = Arc::new(ReserveBudget::new(budget_pages * PAGE_BYTES));
        let mut now = T0_MS;
        let mut partitions: Vec<Partition> = (0..12)
            .map(|i| {
                let mut log = open(&tmp.path().join(format!("t-{i}")), now);
                log.set_reserve_budget(Arc::clone(&budget)).unwrap();
                Partition { log, next_offset: 0, committed: Vec::new(), in_flight: Vec::new() }
            })
            .collect();
        for op in ops {
            match op {
                Op::Append { p, batches, value_bytes } => {
                    let part = &mut partitions[p];
                    part.complete_all(now);
                    let batches = part.next_batches(batches, value_bytes);
                    part.log.append(&batches.concat(), now).expect("an append never fails for the budget");
                    part.committed.extend(batches);
                }
                Op::Begin { p, batches, value_bytes } => {
                    let part = &mut partitions[p];
                    let batches = part.next_batches(batches, value_bytes);
                    let bytes = batches.concat();
                    match part.log.begin_write(&bytes, now).expect("a write never fails for the budget") {
                        BeginWrite::Ready(target) => {
                            // Its room is there before a byte is written.
                            let end = target.position + bytes.len() as u64;
                            let path = active_file(&part.log);
                            prop_assert!(std::fs::metadata(&path).unwrap().len() >= end);
                            prop_assert!(blocks_bytes(&path) >= end, "blocks below the write's end");
                            part.in_flight.push(Pending { target, bytes });
                        }
                        BeginWrite::Full | BeginWrite::NeedsRoll => {
                            part.complete_all(now);
                            part.log.append(&bytes, now).unwrap();
                            part.committed.extend(batches);
                        }
                    }
                }
                Op::Complete { p } => {
                    if !partitions[p].in_flight.is_empty() {
                        partitions[p].complete_oldest(now);
                    }
                }
                Op::Wait { ms } => now += ms,
                Op::Release => {
                    for part in &mut partitions {
                        let idle = part.log.release_idle_reservation(now).unwrap() > 0;
                        if idle {
                            prop_assert_eq!(part.ahead_on_disk(), 0, "released to the data's end");
                        }
                    }
                }
            }
            let on_disk: u64 = partitions.iter().map(Partition::ahead_on_disk).sum();
            prop_assert!(
                on_disk <= budget.budget_bytes(),
                "{} bytes reserved ahead on disk, budget {}", on_disk, budget.budget_bytes()
            );
            let charged: u64 = partitions.iter().map(|p| p.log.reserved_ahead_bytes()).sum();
            prop_assert_eq!(charged, budget.reserved_ahead_bytes(), "the budget counts what the logs hold");
            prop_assert!(on_disk <= charged, "held ahead without a grant: {} > {}", on_disk, charged);
        }
        for part in &mut partitions {
            part.complete_all(now);
            prop_assert_eq!(part.read_all(), part.committed.clone());
        }
        drop(partitions);
        prop_assert_eq!(budget.reserved_ahead_bytes(), 0, "closed logs hold nothing");
    }
}

/// With the budget spent, a write gets exactly the room it needs.
#[test]
fn a_spent_budget_reserves_exactly_what_each_write_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut log = open(tmp.path(), T0_MS);
    log.set_reserve_budget(Arc::new(ReserveBudget::new(0))).unwrap();
    for offset in 0..50 {
        log.append(&batch(offset, 3_000 + offset as usize * 100), T0_MS)
            .unwrap();
        let len = std::fs::metadata(active_file(&log)).unwrap().len();
        assert_eq!(len, page_round_up(active_data_bytes(&log)), "after offset {offset}");
    }
}

/// A partition fast enough reserves its full step; once idle for the
/// bound its blocks go back to the file system (fewer blocks, file cut to
/// its data), and the budget with them.
#[test]
fn an_idle_partition_gives_its_blocks_back() {
    let tmp = tempfile::tempdir().unwrap();
    let budget = Arc::new(ReserveBudget::new(64 << 20));
    let config = LogConfig {
        segment_bytes: 1 << 30,
        ..config()
    };
    let mut log = open_with(tmp.path(), T0_MS, config);
    log.set_reserve_budget(Arc::clone(&budget)).unwrap();
    // 50 KB a millisecond: the step grows to the ceiling, `preallocate_bytes`
    // (256 KiB), within the rate's first window.
    let mut offset = 0;
    while log.reserved_ahead_bytes() < 200 * 1024 {
        assert!(offset < 40, "the step never reached the ceiling");
        log.append(&batch(offset, 50_000), T0_MS + offset as u64).unwrap();
        offset += 1;
    }
    let last_append_ms = T0_MS + offset as u64 - 1;
    let data = log.size_bytes();
    let path = active_file(&log);
    let before = blocks_bytes(&path);
    assert!(
        before >= page_round_up(data) + 200 * 1024,
        "{before} bytes of blocks for {data} of data"
    );
    assert_eq!(budget.reserved_ahead_bytes(), log.reserved_ahead_bytes());

    // Not idle long enough: nothing moves.
    let idle_ms = config.reserve_release_idle_ms;
    assert_eq!(log.release_idle_reservation(last_append_ms + idle_ms - 1).unwrap(), 0);
    assert_eq!(blocks_bytes(&path), before);

    let released = log.release_idle_reservation(last_append_ms + idle_ms).unwrap();
    let after = blocks_bytes(&path);
    assert!(released >= 200 * 1024, "released {released}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), page_round_up(data));
    assert!(
        after + released <= before && after < page_round_up(data) + 64 * 1024,
        "blocks {before} → {after} after releasing {released}"
    );
    assert_eq!(budget.reserved_ahead_bytes(), 0);
    assert_eq!(budget.released_bytes_total(), released);
    // Released once: a second pass finds nothing.
    assert_eq!(log.release_idle_reservation(last_append_ms + 2 * idle_ms).unwrap(), 0);
}

/// A release keeps the room of the writes in flight, and after a crash
/// — following a release, with writes landed after it or not — the log
/// reopens with every committed batch and nothing past it.
#[test]
fn a_crash_after_a_release_recovers_every_committed_batch_and_nothing_more() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    let idle_ms = config().reserve_release_idle_ms;
    let mut now = T0_MS;
    let mut part = Partition {
        log: open(&dir, now),
        next_offset: 0,
        committed: Vec::new(),
        in_flight: Vec::new(),
    };
    part.log
        .set_reserve_budget(Arc::new(ReserveBudget::new(16 << 20)))
        .unwrap();
    for _ in 0..20 {
        let batches = part.next_batches(1, 20_000);
        part.log.append(&batches.concat(), now).unwrap();
        part.committed.extend(batches);
    }
    // Two writes handed out, then the partition idles past the bound.
    for _ in 0..2 {
        let bytes = part.next_batches(1, 30_000).concat();
        let BeginWrite::Ready(target) = part.log.begin_write(&bytes, now).unwrap() else {
            panic!("room for the write")
        };
        part.in_flight.push(Pending { target, bytes });
    }
    now += idle_ms;
    assert!(part.log.release_idle_reservation(now).unwrap() > 0);
    let len = std::fs::metadata(active_file(&part.log)).unwrap().len();
    let needed = active_data_bytes(&part.log) + part.in_flight_bytes();
    assert_eq!(len, page_round_up(needed), "the writes in flight keep their room");
    part.complete_all(now);

    // Crash right after the release: every batch is there, nothing past it.
    let reopen = |part: &mut Partition, now| {
        let crashed = std::mem::replace(&mut part.log, open(&tmp.path().join("stand-in"), now));
        drop(crashed);
        part.log = open(&dir, now);
        assert_eq!(part.read_all(), part.committed, "the committed batches, in order");
        assert_eq!(part.log.log_end_offset(), part.next_offset, "nothing past them");
    };
    reopen(&mut part, now);

    // More data after the release (room reserved again), a torn write
    // behind it, then a crash: the same.
    part.log
        .set_reserve_budget(Arc::new(ReserveBudget::new(16 << 20)))
        .unwrap();
    let batches = part.next_batches(3, 10_000);
    part.log.append(&batches.concat(), now).unwrap();
    part.committed.extend(batches);
    let torn = part.next_batches(1, 10_000).concat();
    part.next_offset -= 1;
    let BeginWrite::Ready(target) = part.log.begin_write(&torn, now).unwrap() else {
        panic!("room for the write")
    };
    target
        .file
        .write_all_at(&torn[..torn.len() / 2], target.position)
        .unwrap();
    now += idle_ms;
    part.log.release_idle_reservation(now).unwrap();
    reopen(&mut part, now);
}

/// A measurement, not a check of behaviour (run it with `--ignored
/// --nocapture`): the disk reserved by `RESERVE_MEASURE_PARTITIONS`
/// partitions of one shard with the default settings and half the default
/// budget (two shards) — after each wrote one small batch (idle), after
/// each appended 2 MiB at 2 MiB/s (active), and after the idle release.
#[test]
#[ignore]
fn measure_disk_reserved_by_many_partitions() {
    let partitions: usize = std::env::var("RESERVE_MEASURE_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let tmp = tempfile::tempdir().unwrap();
    let config = LogConfig::default();
    let budget = Arc::new(ReserveBudget::new(config.reserve_budget_bytes / 2));
    let mut logs: Vec<PartitionLog> = (0..partitions)
        .map(|i| {
            let mut log = open_with(&tmp.path().join(format!("t-{i}")), T0_MS, config);
            log.set_reserve_budget(Arc::clone(&budget)).unwrap();
            log
        })
        .collect();
    let blocks = |logs: &[PartitionLog]| -> u64 { logs.iter().map(|l| blocks_bytes(&active_file(l))).sum() };
    let data = |logs: &[PartitionLog]| -> u64 { logs.iter().map(PartitionLog::size_bytes).sum() };
    let report = |what: &str, logs: &[PartitionLog]| {
        let (b, d) = (blocks(logs), data(logs));
        println!(
            "{partitions} partitions, {what}: {:.1} MiB of blocks for {:.1} MiB of data; {:.1} MiB ahead (budget {:.0} MiB)",
            b as f64 / 1048576.0,
            d as f64 / 1048576.0,
            budget.reserved_ahead_bytes() as f64 / 1048576.0,
            budget.budget_bytes() as f64 / 1048576.0
        );
        assert!(budget.reserved_ahead_bytes() <= budget.budget_bytes());
    };
    for log in &mut logs {
        log.append(&batch(0, 1_000), T0_MS).unwrap();
    }
    report("one 1 KB batch each (idle)", &logs);
    // 2 MiB each at 2 MiB/s: 16 appends of 128 KiB, 62 ms apart.
    for step in 0..16u64 {
        for log in &mut logs {
            let offset = log.log_end_offset();
            log.append(&batch(offset, 128 * 1024), T0_MS + 1_000 + step * 62)
                .unwrap();
        }
    }
    report("2 MiB each at 2 MiB/s (active)", &logs);
    let later = T0_MS + 2_000 + config.reserve_release_idle_ms;
    let released: u64 = logs
        .iter_mut()
        .map(|l| l.release_idle_reservation(later).unwrap())
        .sum();
    report(
        &format!(
            "idle {} s, {:.1} MiB released",
            config.reserve_release_idle_ms / 1000,
            released as f64 / 1048576.0
        ),
        &logs,
    );
}
