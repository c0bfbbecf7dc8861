//! The log cleaner (`PartitionLog::clean`) against a model: random keyed
//! batches (a small key space, tombstones, null keys, offset gaps, every
//! codec, idempotent producers, committed and aborted transactions) are
//! appended over several segments and cleaned; the log must then hold
//! exactly what the model keeps — for every key its latest record at its
//! own offset, tombstones by `delete.retention.ms` of their segment,
//! transactional and control batches untouched, nothing else lost — and
//! keep holding it across clean and unclean reopens, a crash at every step
//! of the swap, and a reader that iterates the log while it is cleaned.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use proptest::prelude::*;
use ringmirror_dataplane::batch::{
    BatchBuilder, BatchIter, BuildRecord, Compression, ControlType, Record, RecordBatch, decode_records,
};
use ringmirror_dataplane::log::{AbortedTxn, CleanOptions, LogConfig, OpenOptions, PartitionLog, SwapStep};

const MAX_BATCH_BYTES: u32 = 1 << 20;
const DECOMPRESSED_MAX: usize = 1 << 24;
/// The clock the cleaner is given; record timestamps lie below it.
const NOW_MS: u64 = 100_000;
const IDEMPOTENT_PID: i64 = 1;

/// A generator step.
#[derive(Debug, Clone)]
enum Gen {
    /// A non-transactional batch: (key, value) per record, `None` for a
    /// null key or a tombstone.
    Data {
        gap: i64,
        codec: u8,
        log_append_time: bool,
        idempotent: bool,
        records: Vec<(Option<u8>, Option<u8>)>,
    },
    /// A transactional batch and its marker right after it.
    Txn { producer: i64, keys: Vec<u8>, commit: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Data,
    Txn { aborted: bool },
    Control,
}

#[derive(Debug, Clone)]
struct Built {
    bytes: Vec<u8>,
    base: i64,
    max_timestamp: i64,
    kind: Kind,
    records: Vec<Record>,
}

fn gen_step(keys: u8) -> impl Strategy<Value = Gen> {
    let record = (
        prop_oneof![12 => (0..keys).prop_map(Some), 1 => Just(None)],
        prop_oneof![5 => any::<u8>().prop_map(Some), 1 => Just(None)],
    );
    prop_oneof![
        10 => (
            prop_oneof![8 => Just(0i64), 1 => 1i64..5, 1 => 1000i64..5000],
            0u8..5,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.3),
            prop::collection::vec(record, 1..7),
        )
            .prop_map(|(gap, codec, log_append_time, idempotent, records)| Gen::Data {
                gap,
                codec,
                log_append_time,
                idempotent,
                records,
            }),
        1 => (10i64..12, prop::collection::vec(0..keys, 1..4), any::<bool>())
            .prop_map(|(producer, keys, commit)| Gen::Txn { producer, keys, commit }),
    ]
}

/// `bytes` (an uncompressed batch) with its records compressed by `codec`.
fn compress_batch(bytes: Vec<u8>, codec: u8) -> Vec<u8> {
    let records = &bytes[61..];
    let compressed = match codec {
        0 => return bytes,
        1 => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(records).unwrap();
            e.finish().unwrap()
        }
        // Raw snappy (librdkafka's form); the cleaner writes xerial framing.
        2 => snap::raw::Encoder::new().compress_vec(records).unwrap(),
        3 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(records).unwrap();
            e.finish().unwrap()
        }
        _ => ruzstd::encoding::compress_to_vec(records, ruzstd::encoding::CompressionLevel::Fastest),
    };
    let mut out = bytes[..61].to_vec();
    out.extend_from_slice(&compressed);
    let length = (out.len() - 12) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = i16::from_be_bytes([out[21], out[22]]) | i16::from(codec);
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

fn decoded(bytes: &[u8]) -> (RecordBatch<&[u8]>, Vec<Record>) {
    let batch = RecordBatch::new(bytes).unwrap();
    let records = decode_records(&batch, DECOMPRESSED_MAX).unwrap();
    (batch, records)
}

/// Concrete batches with increasing offsets and non-decreasing timestamps.
fn build(steps: &[Gen]) -> Vec<Built> {
    let mut out = Vec::new();
    let mut next = 0i64;
    let mut ts = 1_000i64;
    let mut sequences: HashMap<i64, i32> = HashMap::new();
    let push = |bytes: Vec<u8>, kind: Kind, out: &mut Vec<Built>, next: &mut i64| {
        let (batch, records) = decoded(&bytes);
        *next = batch.next_offset();
        out.push(Built {
            base: batch.base_offset(),
            max_timestamp: batch.max_timestamp(),
            kind,
            records: if kind == Kind::Control { Vec::new() } else { records },
            bytes,
        });
    };
    for (i, step) in steps.iter().enumerate() {
        ts += 150;
        match step {
            Gen::Data {
                gap,
                codec,
                log_append_time,
                idempotent,
                records,
            } => {
                next += gap;
                let mut b = BatchBuilder {
                    base_offset: next,
                    log_append_time: *log_append_time,
                    records: records
                        .iter()
                        .enumerate()
                        .map(|(r, (key, value))| BuildRecord {
                            timestamp: ts + r as i64,
                            key: key.map(|k| format!("key-{k}").into_bytes()),
                            value: value.map(|v| format!("value-{i}-{r}-{v}").into_bytes()),
                            headers: vec![("h".into(), Some(vec![r as u8]))],
                        })
                        .collect(),
                    ..BatchBuilder::default()
                };
                if *idempotent {
                    let seq = sequences.entry(IDEMPOTENT_PID).or_insert(0);
                    b.producer_id = IDEMPOTENT_PID;
                    b.producer_epoch = 0;
                    b.base_sequence = *seq;
                    *seq += records.len() as i32;
                }
                push(compress_batch(b.build(), *codec), Kind::Data, &mut out, &mut next);
            }
            Gen::Txn { producer, keys, commit } => {
                let seq = sequences.entry(*producer).or_insert(0);
                let b = BatchBuilder {
                    base_offset: next,
                    producer_id: *producer,
                    producer_epoch: 0,
                    base_sequence: *seq,
                    transactional: true,
                    records: keys
                        .iter()
                        .enumerate()
                        .map(|(r, k)| BuildRecord {
                            timestamp: ts + r as i64,
                            key: Some(format!("key-{k}").into_bytes()),
                            value: Some(format!("txn-{i}-{r}").into_bytes()),
                            headers: Vec::new(),
                        })
                        .collect(),
                    ..BatchBuilder::default()
                };
                *seq += keys.len() as i32;
                push(b.build(), Kind::Txn { aborted: !commit }, &mut out, &mut next);
                let kind = if *commit {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                };
                let marker = BatchBuilder::control_marker(
                    next,
                    0,
                    *producer,
                    0,
                    kind,
                    BatchBuilder::end_txn_marker_value(3),
                    ts + 10,
                );
                push(marker.build(), Kind::Control, &mut out, &mut next);
            }
        }
    }
    out
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 128,
        segment_index_bytes: 4096,
        preallocate_bytes: 64 * 1024,
        prefault_bytes: 0,
        max_batch_bytes: MAX_BATCH_BYTES,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: &LogConfig, recovery_point: i64, clean: bool) -> PartitionLog {
    PartitionLog::open(OpenOptions {
        dir: dir.to_owned(),
        topic_id: Some([7; 16]),
        config: *config,
        recovery_point,
        log_start_offset: 0,
        clean_shutdown: clean,
        now_ms: 0,
    })
    .expect("open log")
    .0
}

/// A log holding `batches`, appended one by one, 10 ms apart (so segments
/// roll between them by size or by `segment.ms`: small segments make
/// groups of several segments).
fn write_log(dir: &Path, config: &LogConfig, batches: &[Built]) -> PartitionLog {
    let mut log = open(dir, config, 0, false);
    for (i, b) in batches.iter().enumerate() {
        log.append(&b.bytes, 10 * (i as u64 + 1)).unwrap();
    }
    log
}

/// Every record of every non-control batch in the log, in order, and the
/// control and transactional batches as bytes.
fn contents(log: &PartitionLog) -> (Vec<Record>, Vec<Vec<u8>>) {
    let mut records = Vec::new();
    let mut untouchable = Vec::new();
    let mut last = -1;
    log.for_each_batch(|b| {
        assert!(b.crc_is_valid(), "batch at {} has a bad CRC", b.base_offset());
        assert!(b.base_offset() > last, "batches overlap at {}", b.base_offset());
        last = b.last_offset();
        if b.is_control() || b.is_transactional() {
            untouchable.push(b.bytes().to_vec());
        }
        if !b.is_control() {
            records.extend(decode_records(&b, DECOMPRESSED_MAX).unwrap());
        }
    })
    .unwrap();
    (records, untouchable)
}

/// What the cleaner keeps when it cleans the batches whose base offset is
/// in `range`, given the segment layout before cleaning.
fn model(batches: &[Built], bases: &[i64], range: (i64, i64), retention_ms: u64) -> Vec<Record> {
    let mut latest: HashMap<&[u8], i64> = HashMap::new();
    for b in batches {
        if matches!(b.kind, Kind::Data | Kind::Txn { aborted: false }) {
            for r in &b.records {
                if let Some(k) = &r.key {
                    latest.insert(k, r.offset);
                }
            }
        }
    }
    let segment_of = |offset: i64| bases[bases.partition_point(|&x| x <= offset) - 1];
    let mut largest: BTreeMap<i64, i64> = BTreeMap::new();
    for b in batches {
        let e = largest.entry(segment_of(b.base)).or_insert(i64::MIN);
        *e = (*e).max(b.max_timestamp);
    }
    let mut out = Vec::new();
    for b in batches {
        let cleaned = b.kind == Kind::Data && range.0 <= b.base && b.base < range.1;
        let retain_deletes = largest[&segment_of(b.base)].saturating_add(retention_ms as i64) > NOW_MS as i64;
        for r in &b.records {
            let keep = !cleaned
                || match &r.key {
                    None => true,
                    Some(k) => latest[k.as_slice()] == r.offset && (r.value.is_some() || retain_deletes),
                };
            if keep {
                out.push(r.clone());
            }
        }
    }
    out
}

fn untouchable(batches: &[Built]) -> Vec<Vec<u8>> {
    batches
        .iter()
        .filter(|b| b.kind != Kind::Data)
        .map(|b| b.bytes.clone())
        .collect()
}

/// Reads the whole log through `read` (as the listener does) and returns
/// the records at or after each requested offset.
fn read_all(log: &PartitionLog, max_bytes: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, max_bytes).unwrap();
        assert!(slice.len > 0, "read at {offset} returned nothing before the log end");
        let bytes = slice.to_vec().unwrap();
        for item in BatchIter::new(&bytes, MAX_BATCH_BYTES) {
            let (_, b) = item.unwrap();
            if !b.is_control() {
                out.extend(
                    decode_records(&b, DECOMPRESSED_MAX)
                        .unwrap()
                        .into_iter()
                        .filter(|r| r.offset >= offset),
                );
            }
            offset = b.next_offset();
        }
    }
    out
}

fn no_strays(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".cleaned") && !name.ends_with(".swap"),
            "leftover {name}"
        );
    }
}

/// Producer state that must survive cleaning: (epoch, last sequence, last offset).
fn producers(log: &PartitionLog) -> BTreeMap<i64, (i16, i32, i64)> {
    log.producer_state()
        .producers()
        .map(|p| (p.producer_id, (p.producer_epoch, p.last_sequence, p.last_offset)))
        .collect()
}

/// The aborted transactions READ_COMMITTED readers are told of (each
/// transaction here ends right after its one batch).
fn aborted(batches: &[Built]) -> Vec<AbortedTxn> {
    let mut out = Vec::new();
    for pair in batches.windows(2) {
        if pair[0].kind == (Kind::Txn { aborted: true }) {
            let batch = RecordBatch::new(&pair[0].bytes[..]).unwrap();
            out.push(AbortedTxn {
                producer_id: batch.producer_id(),
                first_offset: pair[0].base,
                last_offset: pair[1].base,
                last_stable_offset: pair[1].base + 1,
            });
        }
    }
    out
}

fn assert_matches(log: &PartitionLog, want: &[Record], batches: &[Built], what: &str) {
    let untouched = untouchable(batches);
    assert_eq!(
        log.aborted_transactions(log.log_start_offset(), i64::MAX),
        aborted(batches),
        "{what}: aborted transactions"
    );
    assert_eq!(
        log.last_stable_offset(),
        log.log_end_offset(),
        "{what}: last stable offset"
    );
    let (records, kept_whole) = contents(log);
    assert_eq!(records.len(), want.len(), "{what}: record count");
    assert!(records == want, "{what}: records differ from the model");
    assert!(
        kept_whole == untouched,
        "{what}: transactional or control batches changed"
    );
    assert!(read_all(log, 700) == want, "{what}: reads differ from the model");
}

/// The first record with a timestamp at or after `ts` (timestamps do not
/// decrease with offsets here).
fn first_at_or_after(records: &[Record], ts: i64) -> Option<(i64, i64)> {
    records
        .iter()
        .find(|r| r.timestamp >= ts)
        .map(|r| (r.timestamp, r.offset))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn cleaning_keeps_what_the_model_keeps_across_reopens(
        steps in prop::collection::vec(gen_step(6), 5..60),
        segment_bytes in 600u64..3000,
        segment_ms in prop_oneof![Just(u64::MAX), 10u64..60],
        retention_ms in prop_oneof![Just(0u64), 90_000u64..100_000, Just(1u64 << 40)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_ms, ..config(segment_bytes) };
        let batches = build(&steps);
        let mut log = write_log(dir.path(), &config, &batches);
        let bases = log.segment_base_offsets();
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let pids = producers(&log);
        let active = *bases.last().unwrap();
        let want = model(&batches, &bases, (i64::MIN, active), retention_ms);

        let report = log.clean(&CleanOptions::new(retention_ms), NOW_MS).unwrap();
        prop_assert_eq!(report.segments_cleaned as usize, bases.len() - 1);
        let before: usize = batches.iter().map(|b| b.records.len()).sum();
        prop_assert_eq!(report.records_removed as usize, before - want.len());
        prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
        prop_assert_eq!(producers(&log), pids.clone());
        assert_matches(&log, &want, &batches, "after cleaning");
        no_strays(dir.path());
        // Rebuilt batches keep their base offsets and codecs.
        let codecs: HashMap<i64, Compression> = batches
            .iter()
            .map(|b| (b.base, RecordBatch::new(&b.bytes[..]).unwrap().compression()))
            .collect();
        let mut rebuilt_codecs = Vec::new();
        log.for_each_batch(|b| {
            if b.records_count() > 0 {
                rebuilt_codecs.push((b.base_offset(), codecs.get(&b.base_offset()).copied(), b.compression()));
            }
        })
        .unwrap();
        for (base, was, is) in rebuilt_codecs {
            prop_assert_eq!(was, Some(is), "codec of the batch at {}", base);
        }
        for ts in [0, 1_500, 3_000, 6_000, i64::MAX] {
            let found = log.offset_for_timestamp(ts).unwrap().map(|t| (t.timestamp, t.offset));
            prop_assert_eq!(found, first_at_or_after(&want, ts), "offset for timestamp {}", ts);
        }

        // Cleaning again changes nothing (tombstones kept: a cleaned
        // segment's largest timestamp may be lower than its source's).
        // Later passes may still merge segments and drop the empty batches
        // that kept emptied segments from being empty, until none is left
        // to drop.
        let mut rounds = 0;
        loop {
            let again = log.clean(&CleanOptions::new(1 << 40), NOW_MS).unwrap();
            prop_assert_eq!(again.records_removed, 0);
            assert_matches(&log, &want, &batches, "after cleaning again");
            if again.segments_rewritten == 0 {
                break;
            }
            rounds += 1;
            prop_assert!(rounds < 10, "cleaning does not settle");
        }
        let mut empty = 0;
        log.for_each_batch(|b| {
            let last_of_producer = log
                .producer_state()
                .producer(b.producer_id())
                .is_some_and(|p| p.last_offset == b.last_offset());
            if b.records_count() == 0 && !b.is_control() && !last_of_producer {
                empty += 1;
            }
        })
        .unwrap();
        prop_assert!(empty < log.segment_base_offsets().len(), "{} empty batches", empty);

        // Appends go on at the log end.
        let more = BatchBuilder {
            base_offset: end,
            records: vec![BuildRecord { timestamp: 99_000, key: Some(b"key-0".to_vec()), value: Some(b"after".to_vec()), headers: Vec::new() }],
            ..BatchBuilder::default()
        }.build();
        log.append(&more, 0).unwrap();
        let mut want_more = want.clone();
        want_more.extend(decoded(&more).1);

        // A clean close and reopen, then an unclean one that re-scans everything.
        let recovery_point = log.log_end_offset();
        log.close(0).unwrap();
        let log = open(dir.path(), &config, recovery_point, true);
        assert_matches(&log, &want_more, &batches, "after a clean reopen");
        drop(log);
        let log = open(dir.path(), &config, 0, false);
        assert_matches(&log, &want_more, &batches, "after an unclean reopen");
        prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end + 1));
        prop_assert_eq!(producers(&log), pids);
    }

    #[test]
    fn a_crash_at_any_step_of_the_swap_recovers_the_old_or_the_new_segments(
        steps in prop::collection::vec(gen_step(4), 10..50),
        segment_bytes in 600u64..2000,
        segment_ms in prop_oneof![Just(u64::MAX), 10u64..60],
        step in 0usize..6,
        lose_one_old_segment in any::<bool>(),
        rescan_all in any::<bool>(),
    ) {
        let step = SwapStep::ALL[step];
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_ms, ..config(segment_bytes) };
        let batches = build(&steps);
        let mut log = write_log(dir.path(), &config, &batches);
        let bases = log.segment_base_offsets();
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let recovery_point = if rescan_all { 0 } else { log.recovery_point() };
        let original = contents(&log).0;
        let options = CleanOptions { halt_after: Some(step), ..CleanOptions::new(0) };
        match log.clean(&options, NOW_MS) {
            // Nothing to remove: nothing swapped, nothing halted.
            Ok(report) => {
                prop_assert_eq!(report.segments_rewritten, 0);
                assert_matches(&log, &original, &batches, "nothing to clean");
                return Ok(());
            }
            Err(e) => prop_assert!(e.to_string().contains("halted"), "{}", e),
        }
        drop(log); // the crash
        // Which group the halted swap was replacing.
        let range_file = std::fs::read_dir(dir.path()).unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains(".cleaner-range."))
            .expect("the range file of the halted swap");
        let head: i64 = range_file.file_name().unwrap().to_string_lossy()[..20].parse().unwrap();
        let group_end: i64 = std::fs::read_to_string(&range_file).unwrap().trim().parse().unwrap();
        let group = (head, group_end);
        let committed = step >= SwapStep::Committed;
        if committed && step == SwapStep::Committed && lose_one_old_segment {
            // A crash in the middle of deleting the group's old segments.
            if let Some(&doomed) = bases.iter().find(|&&b| b > group.0 && b < group.1) {
                std::fs::remove_file(dir.path().join(format!("{doomed:020}.log"))).unwrap();
            }
        }
        let mut log = open(dir.path(), &config, recovery_point, false);
        no_strays(dir.path());
        prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
        let want = if committed { model(&batches, &bases, group, 0) } else { original.clone() };
        assert_matches(&log, &want, &batches, &format!("reopened after {step:?}"));
        // The cleaner then finishes the job.
        log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
        let active = *bases.last().unwrap();
        assert_matches(&log, &model(&batches, &bases, (i64::MIN, active), 0), &batches, "cleaned after the crash");
    }

    #[test]
    fn a_reader_during_cleaning_sees_no_offset_twice_and_none_missing(
        steps in prop::collection::vec(gen_step(5), 10..50),
        segment_bytes in 600u64..2000,
        segment_ms in prop_oneof![Just(u64::MAX), 10u64..60],
        max_bytes in 1usize..1500,
        clean_at_read in 0usize..12,
        hold_slice in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_ms, ..config(segment_bytes) };
        let batches = build(&steps);
        let mut log = write_log(dir.path(), &config, &batches);
        let bases = log.segment_base_offsets();
        let original = contents(&log).0;
        let cleaned = model(&batches, &bases, (i64::MIN, *bases.last().unwrap()), 0);
        let mut seen: Vec<Record> = Vec::new();
        let mut offset = log.log_start_offset();
        let mut reads = 0;
        // Where the reader stood when the log was cleaned: below it, it
        // read the log as it was; from it on, the cleaned log.
        let mut switched_at = None;
        while offset < log.log_end_offset() {
            let slice = log.read(offset, max_bytes).unwrap();
            if reads == clean_at_read && switched_at.is_none() {
                // Cleaned between two reads, or while the reader still
                // holds a slice of a segment about to be replaced.
                switched_at = Some(if hold_slice { slice.end_offset } else { offset });
                log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
                if !hold_slice {
                    continue;
                }
            }
            reads += 1;
            let bytes = slice.to_vec().unwrap();
            for item in BatchIter::new(&bytes, MAX_BATCH_BYTES) {
                let (_, b) = item.unwrap();
                if !b.is_control() {
                    for r in decode_records(&b, DECOMPRESSED_MAX).unwrap() {
                        if r.offset < offset {
                            continue;
                        }
                        if let Some(last) = seen.last() {
                            prop_assert!(r.offset > last.offset, "offset {} after {}", r.offset, last.offset);
                        }
                        prop_assert!(original.contains(&r), "record at {} is not in the log", r.offset);
                        seen.push(r);
                    }
                }
                offset = b.next_offset();
            }
        }
        let switched_at = switched_at.unwrap_or(i64::MAX);
        let want: Vec<Record> = original.iter().filter(|r| r.offset < switched_at)
            .chain(cleaned.iter().filter(|r| r.offset >= switched_at))
            .cloned()
            .collect();
        prop_assert_eq!(seen.len(), want.len());
        prop_assert!(seen == want, "the reader missed or invented records");
    }
}

fn keyed(offset: i64, records: &[(&str, Option<&str>)], ts: i64) -> Vec<u8> {
    BatchBuilder {
        base_offset: offset,
        records: records
            .iter()
            .map(|(k, v)| BuildRecord {
                timestamp: ts,
                key: Some(k.as_bytes().to_vec()),
                value: v.map(|v| v.as_bytes().to_vec()),
                headers: Vec::new(),
            })
            .collect(),
        ..BatchBuilder::default()
    }
    .build()
}

#[test]
fn latest_value_per_key_with_its_own_codec_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(100);
    let mut log = open(dir.path(), &config, 0, false);
    let batches = [
        compress_batch(
            keyed(0, &[("a", Some("a0")), ("b", Some("b0")), ("c", Some("c0"))], 1000),
            1,
        ),
        compress_batch(keyed(3, &[("a", Some("a1")), ("d", None)], 1000), 2),
        compress_batch(keyed(5, &[("b", Some("b1")), ("e", Some("e0"))], 1000), 3),
        compress_batch(keyed(7, &[("c", None), ("f", Some("f0"))], 99_000), 4),
        keyed(9, &[("z", Some("active"))], 99_000),
    ];
    for b in &batches {
        log.append(b, 0).unwrap();
    }
    assert!(log.segment_base_offsets().len() >= 3);
    let report = log.clean(&CleanOptions::new(10_000), NOW_MS).unwrap();
    assert!(report.records_removed >= 4, "{report:?}");
    let mut got = Vec::new();
    let mut codecs = Vec::new();
    log.for_each_batch(|b| {
        codecs.push((b.base_offset(), b.compression()));
        for r in decode_records(&b, DECOMPRESSED_MAX).unwrap() {
            got.push((
                r.offset,
                String::from_utf8(r.key.unwrap()).unwrap(),
                r.value.map(|v| String::from_utf8(v).unwrap()),
            ));
        }
    })
    .unwrap();
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        got,
        vec![
            (3, "a".into(), s("a1")),
            // "d": a tombstone whose segment is older than the retention: gone.
            (5, "b".into(), s("b1")),
            (6, "e".into(), s("e0")),
            // "c": a young tombstone stays.
            (7, "c".into(), None),
            (8, "f".into(), s("f0")),
            (9, "z".into(), s("active")),
        ]
    );
    // Rebuilt batches keep their base offsets and codecs.
    for (base, codec) in codecs {
        let want = match base {
            3 => Compression::Snappy,
            5 => Compression::Lz4,
            7 => Compression::Zstd,
            _ => Compression::None,
        };
        assert_eq!(codec, want, "batch at {base}");
    }
}

#[test]
fn dirty_ratio_gates_the_next_cleaning() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path(), &config(300), 0, false);
    for i in 0..12 {
        log.append(&keyed(i, &[("k", Some("v"))], 1000), 0).unwrap();
    }
    let options = CleanOptions {
        min_cleanable_ratio: Some(0.5),
        ..CleanOptions::new(0)
    };
    assert_eq!(log.cleanable_dirty_ratio(), 1.0);
    let first = log.clean(&options, NOW_MS).unwrap();
    assert!(first.segments_cleaned > 0 && first.records_removed > 0, "{first:?}");
    assert_eq!(log.cleanable_dirty_ratio(), 0.0);
    let second = log.clean(&options, NOW_MS).unwrap();
    assert_eq!(second, Default::default(), "nothing dirty: nothing done");
}

#[test]
fn a_producers_last_batch_stays_as_an_empty_batch() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(400);
    let mut log = open(dir.path(), &config, 0, false);
    let idempotent = |offset: i64, seq: i32, value: &str| {
        let record = BuildRecord {
            timestamp: 1000,
            key: Some(b"k".to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: Vec::new(),
        };
        BatchBuilder {
            base_offset: offset,
            producer_id: 42,
            producer_epoch: 3,
            base_sequence: seq,
            records: vec![record.clone(), record],
            ..BatchBuilder::default()
        }
        .build()
    };
    log.append(&idempotent(0, 0, "a"), 0).unwrap();
    log.append(&idempotent(2, 2, "b"), 0).unwrap();
    // Another producer overwrites the key; a large batch rolls the segment.
    log.append(&keyed(4, &[("k", Some("c"))], 1000), 0).unwrap();
    let large = "x".repeat(500);
    log.append(&keyed(5, &[("other", Some(large.as_str()))], 1000), 0)
        .unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 5]);
    let before = producers(&log);
    let report = log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
    assert_eq!(report.records_removed, 4, "{report:?}");
    let mut batches = Vec::new();
    log.for_each_batch(|b| {
        batches.push((
            b.base_offset(),
            b.last_offset(),
            b.records_count(),
            b.producer_id(),
            b.last_sequence(),
        ))
    })
    .unwrap();
    // The producer's first batch is gone; its last stays, empty, with its
    // offsets and sequences.
    assert_eq!(batches[0], (2, 3, 0, 42, 3), "{batches:?}");
    assert_eq!(batches[1].0, 4);
    drop(log);
    let log = open(dir.path(), &config, 0, false);
    assert_eq!(producers(&log), before);
}
