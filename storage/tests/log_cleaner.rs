//! The log cleaner (`PartitionLog::clean`) against a model: random keyed
//! batches (a small key space, tombstones, null keys, offset gaps, every
//! codec, idempotent producers, committed and aborted transactions with
//! their markers, MIRROR_PID_RESET records) are appended over several
//! segments and cleaned with various delete horizons; the log must then
//! hold exactly what the model keeps — for every key its latest committed
//! record at its own offset, tombstones by `delete.retention.ms` of their
//! segment, no record of an aborted transaction, no marker gone while a
//! batch of its transaction is left or before the horizon, nothing else
//! lost — give READ_COMMITTED readers the same latest value per key below
//! the same last stable offset, and keep all that across clean and unclean
//! reopens, truncations, a crash at every step of the swap, and a reader
//! that iterates the log while it is cleaned. The cleaner checkpoint
//! (`cleaner-offset-checkpoint`) is checked by hand-made cases at the end.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use proptest::prelude::*;
use ringmirror_storage::batch::{
    BatchBuilder, BatchIter, BuildRecord, Compression, ControlRecord, ControlType, NO_PRODUCER_ID, Record, RecordBatch,
    decode_records, encode_mirror_pid_reset_value,
};
use ringmirror_storage::log::{AbortedTxn, CleanOptions, CleanReport, LogConfig, OpenOptions, PartitionLog, SwapStep};

const MAX_BATCH_BYTES: u32 = 1 << 20;
const DECOMPRESSED_MAX: usize = 1 << 24;
/// The clock the cleaner is given; record timestamps lie below it.
const NOW_MS: u64 = 100_000;
const IDEMPOTENT_PID: i64 = 1;
const CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

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
    Txn {
        producer: i64,
        keys: Vec<u8>,
        tombstone: bool,
        commit: bool,
    },
    /// A MIRROR_PID_RESET record (producer state forgets every producer).
    Reset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Data,
    Txn {
        aborted: bool,
    },
    /// The COMMIT/ABORT marker of the transaction in the batch before it.
    Marker,
    Reset,
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
        20 => (
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
        6 => (10i64..12, prop::collection::vec(0..keys, 1..4), prop::bool::weighted(0.2), any::<bool>())
            .prop_map(|(producer, keys, tombstone, commit)| Gen::Txn { producer, keys, tombstone, commit }),
        1 => Just(Gen::Reset),
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
            records: if matches!(kind, Kind::Marker | Kind::Reset) {
                Vec::new()
            } else {
                records
            },
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
            Gen::Txn {
                producer,
                keys,
                tombstone,
                commit,
            } => {
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
                            // The first record may delete its key.
                            value: (r > 0 || !tombstone).then(|| format!("txn-{i}-{r}").into_bytes()),
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
                push(marker.build(), Kind::Marker, &mut out, &mut next);
            }
            Gen::Reset => {
                let reset = BatchBuilder::control_marker(
                    next,
                    0,
                    NO_PRODUCER_ID,
                    -1,
                    ControlType::MirrorPidReset,
                    encode_mirror_pid_reset_value("source").unwrap(),
                    ts,
                );
                push(reset.build(), Kind::Reset, &mut out, &mut next);
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

/// Every batch in the log by base offset (checking CRCs and order).
fn log_batches(log: &PartitionLog) -> BTreeMap<i64, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut last = -1;
    log.for_each_batch(|b| {
        assert!(b.crc_is_valid(), "batch at {} has a bad CRC", b.base_offset());
        assert!(b.base_offset() > last, "batches overlap at {}", b.base_offset());
        last = b.last_offset();
        out.insert(b.base_offset(), b.bytes().to_vec());
    })
    .unwrap();
    out
}

/// Every record of every non-control batch in the log, in order.
fn contents(log: &PartitionLog) -> Vec<Record> {
    let mut records = Vec::new();
    log.for_each_batch(|b| {
        if !b.is_control() {
            records.extend(decode_records(&b, DECOMPRESSED_MAX).unwrap());
        }
    })
    .unwrap();
    records
}

/// The base offset of the segment (in the layout `bases`) holding `offset`.
fn segment_of(bases: &[i64], offset: i64) -> i64 {
    bases[bases.partition_point(|&x| x <= offset) - 1]
}

/// Whether the cleaner must keep deletes (tombstones, markers) of the
/// segment holding `offset`, in the layout `bases`.
fn within_horizon(batches: &[Built], bases: &[i64], offset: i64, retention_ms: u64) -> bool {
    let segment = segment_of(bases, offset);
    let largest = batches
        .iter()
        .filter(|b| segment_of(bases, b.base) == segment)
        .map(|b| b.max_timestamp)
        .max()
        .unwrap_or(i64::MIN);
    largest.saturating_add(retention_ms as i64) > NOW_MS as i64
}

/// The latest committed offset of each key in the batches below `end`.
fn latest_offsets(batches: &[Built], end: i64) -> HashMap<&[u8], i64> {
    let mut latest = HashMap::new();
    for b in batches.iter().filter(|b| b.base < end) {
        if matches!(b.kind, Kind::Data | Kind::Txn { aborted: false }) {
            for r in &b.records {
                if let Some(k) = &r.key {
                    latest.insert(k.as_slice(), r.offset);
                }
            }
        }
    }
    latest
}

/// The records the log holds once the batches whose base offset is in
/// `range` are cleaned, given the segment layout before cleaning, with an
/// offset map of every sealed segment (the active one hides nothing).
fn model(batches: &[Built], bases: &[i64], range: (i64, i64), retention_ms: u64) -> Vec<Record> {
    model_mapped(batches, bases, range, *bases.last().expect("a segment"), retention_ms)
}

/// [`model`] with the offset maps of the passes so far covering the
/// batches below `mapped_end` only.
fn model_mapped(
    batches: &[Built],
    bases: &[i64],
    range: (i64, i64),
    mapped_end: i64,
    retention_ms: u64,
) -> Vec<Record> {
    let latest = latest_offsets(batches, mapped_end);
    let mut out = Vec::new();
    for b in batches {
        let cleaned = range.0 <= b.base && b.base < range.1;
        if cleaned && b.kind == (Kind::Txn { aborted: true }) {
            continue;
        }
        for r in &b.records {
            let keep = !cleaned
                || match &r.key {
                    None => true,
                    Some(k) => {
                        latest[k.as_slice()] == r.offset
                            && (r.value.is_some() || within_horizon(batches, bases, b.base, retention_ms))
                    }
                };
            if keep {
                out.push(r.clone());
            }
        }
    }
    out
}

/// The model's READ_COMMITTED view: key → latest committed value (`None`:
/// a tombstone still there), once the batches below `cleaned_end` are
/// cleaned with `retention_ms` (`None`: before cleaning).
fn model_view(
    batches: &[Built],
    bases: &[i64],
    cleaned_end: i64,
    retention_ms: Option<u64>,
) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut view: BTreeMap<Vec<u8>, (Option<Vec<u8>>, bool)> = BTreeMap::new();
    for b in batches {
        if matches!(b.kind, Kind::Data | Kind::Txn { aborted: false }) {
            let tombstone_goes =
                retention_ms.is_some_and(|ms| b.base < cleaned_end && !within_horizon(batches, bases, b.base, ms));
            for r in &b.records {
                if let Some(k) = &r.key {
                    view.insert(k.clone(), (r.value.clone(), tombstone_goes));
                }
            }
        }
    }
    view.into_iter()
        .filter(|(_, (value, tombstone_goes))| value.is_some() || !tombstone_goes)
        .map(|(k, (value, _))| (k, value))
        .collect()
}

/// Key → latest value (`None`: a tombstone) of keyed `records`.
fn view_of(records: &[Record]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    records
        .iter()
        .filter_map(|r| Some((r.key.clone()?, r.value.clone())))
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

/// What a READ_COMMITTED consumer reading the whole log gets, by the Java
/// consumer's rule: from the first offset of each aborted transaction the
/// fetch lists, its producer's transactional batches are skipped until
/// that producer's ABORT marker; control batches are never returned.
fn read_committed(log: &PartitionLog) -> Vec<Record> {
    let lso = log.last_stable_offset();
    let mut aborted = log.aborted_transactions(log.log_start_offset(), lso);
    aborted.sort_by_key(|t| t.first_offset);
    let mut aborted = aborted.into_iter().peekable();
    let mut aborting = HashSet::new();
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < lso {
        let slice = log.read_below(offset, 700, lso).unwrap();
        if slice.len == 0 {
            break;
        }
        let bytes = slice.to_vec().unwrap();
        for item in BatchIter::new(&bytes, MAX_BATCH_BYTES) {
            let (_, b) = item.unwrap();
            while let Some(t) = aborted.next_if(|t| t.first_offset <= b.last_offset()) {
                aborting.insert(t.producer_id);
            }
            if b.is_control() {
                if ControlRecord::decode(&b).is_ok_and(|c| c.control_type == ControlType::Abort) {
                    aborting.remove(&b.producer_id());
                }
            } else if !(b.is_transactional() && aborting.contains(&b.producer_id())) {
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
            !name.ends_with(".cleaned") && !name.ends_with(".swap") && !name.ends_with(".tmp"),
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

/// The aborted transactions READ_COMMITTED readers were told of before
/// cleaning (each transaction here ends right after its one batch).
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

/// The transaction index entries that may be in the log once the
/// segments holding offsets in `cleaned` were cleaned: those of aborted
/// transactions with a batch left (which must be there), and those of the
/// segments left alone (which a recovery drops when their batches are gone).
fn txn_index_bounds(
    batches: &[Built],
    present: &BTreeMap<i64, Vec<u8>>,
    cleaned: (i64, i64),
) -> (Vec<AbortedTxn>, Vec<AbortedTxn>) {
    let all = aborted(batches);
    let needed = all
        .iter()
        .filter(|t| present.contains_key(&t.first_offset))
        .copied()
        .collect();
    let allowed = all
        .into_iter()
        .filter(|t| present.contains_key(&t.first_offset) || !(cleaned.0 <= t.last_offset && t.last_offset < cleaned.1))
        .collect();
    (needed, allowed)
}

/// Everything a cleaned log must show: the records `want`, through reads
/// too; the READ_COMMITTED view (nothing of an aborted transaction, the
/// last stable offset at the log end); markers and resets byte for byte,
/// a marker gone only with its transaction's batch, every reset there;
/// rebuilt batches with their producer and transactional flag; the
/// transaction index between its bounds (`cleaned`: the offsets cleaned).
fn assert_matches(log: &PartitionLog, want: &[Record], batches: &[Built], cleaned: (i64, i64), what: &str) {
    let present = log_batches(log);
    let records = contents(log);
    assert_eq!(records.len(), want.len(), "{what}: record count");
    assert!(records == want, "{what}: records differ from the model");
    assert!(read_all(log, 700) == want, "{what}: reads differ from the model");
    assert_eq!(
        log.last_stable_offset(),
        log.log_end_offset(),
        "{what}: last stable offset"
    );
    let aborted_offsets: HashSet<i64> = batches
        .iter()
        .filter(|b| b.kind == (Kind::Txn { aborted: true }))
        .flat_map(|b| b.records.iter().map(|r| r.offset))
        .collect();
    let committed: Vec<Record> = want
        .iter()
        .filter(|r| !aborted_offsets.contains(&r.offset))
        .cloned()
        .collect();
    assert!(
        read_committed(log) == committed,
        "{what}: READ_COMMITTED reads differ from the model"
    );

    let originals: HashMap<i64, &Built> = batches.iter().map(|b| (b.base, b)).collect();
    for (base, bytes) in &present {
        let original = originals
            .get(base)
            .unwrap_or_else(|| panic!("{what}: a batch at {base} was invented"));
        let (now, was) = (
            RecordBatch::new(&bytes[..]).unwrap(),
            RecordBatch::new(&original.bytes[..]).unwrap(),
        );
        if now.is_control() {
            assert_eq!(bytes, &original.bytes, "{what}: control batch at {base} changed");
        }
        assert_eq!(
            (
                now.is_control(),
                now.is_transactional(),
                now.producer_id(),
                now.last_offset()
            ),
            (
                was.is_control(),
                was.is_transactional(),
                was.producer_id(),
                was.last_offset()
            ),
            "{what}: batch header at {base}"
        );
    }
    for (i, b) in batches.iter().enumerate() {
        match b.kind {
            Kind::Reset => assert!(present.contains_key(&b.base), "{what}: reset at {} removed", b.base),
            Kind::Marker if !present.contains_key(&b.base) => assert!(
                !present.contains_key(&batches[i - 1].base),
                "{what}: marker at {} removed while its transaction's batch is there",
                b.base
            ),
            _ => {}
        }
    }
    let got = log.aborted_transactions(log.log_start_offset(), i64::MAX);
    let (needed, allowed) = txn_index_bounds(batches, &present, cleaned);
    for t in &needed {
        assert!(
            got.contains(t),
            "{what}: aborted transaction {t:?} missing from the index"
        );
    }
    for t in &got {
        assert!(
            allowed.contains(t),
            "{what}: aborted transaction {t:?} should be gone from the index"
        );
    }
}

/// The first record with a timestamp at or after `ts` (timestamps do not
/// decrease with offsets here).
fn first_at_or_after(records: &[Record], ts: i64) -> Option<(i64, i64)> {
    records
        .iter()
        .find(|r| r.timestamp >= ts)
        .map(|r| (r.timestamp, r.offset))
}

/// Options that clean only when something is dirty.
fn when_dirty(delete_retention_ms: u64) -> CleanOptions {
    CleanOptions {
        min_cleanable_ratio: Some(0.01),
        ..CleanOptions::new(delete_retention_ms)
    }
}

fn checkpoint_text(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(CHECKPOINT_FILE)).ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

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
        let everything = (i64::MIN, active);
        let want = model(&batches, &bases, everything, retention_ms);
        assert_matches(&log, &contents(&log), &batches, (0, 0), "before cleaning");
        prop_assert_eq!(view_of(&read_committed(&log)), model_view(&batches, &bases, active, None));
        prop_assert_eq!(log.cleanable_dirty_ratio(), if bases.len() > 1 { 1.0 } else { 0.0 });

        let report = log.clean(&CleanOptions::new(retention_ms), NOW_MS).unwrap();
        prop_assert_eq!(report.segments_cleaned as usize, bases.len() - 1);
        let before: usize = batches.iter().map(|b| b.records.len()).sum();
        prop_assert_eq!(report.records_removed as usize, before - want.len());
        prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
        prop_assert_eq!(producers(&log), pids.clone());
        assert_matches(&log, &want, &batches, everything, "after cleaning");
        prop_assert_eq!(
            view_of(&read_committed(&log)),
            model_view(&batches, &bases, active, Some(retention_ms)),
            "READ_COMMITTED latest value per key"
        );
        // Markers go only past the horizon; the index keeps exactly the
        // aborted transactions with a batch left, where it was cleaned.
        let present = log_batches(&log);
        let mut markers_gone = 0;
        for b in batches.iter().filter(|b| b.kind == Kind::Marker && !present.contains_key(&b.base)) {
            markers_gone += 1;
            prop_assert!(
                !within_horizon(&batches, &bases, b.base, retention_ms),
                "marker at {} removed before the delete horizon", b.base
            );
        }
        prop_assert_eq!(report.markers_removed, markers_gone);
        let (_, allowed) = txn_index_bounds(&batches, &present, everything);
        prop_assert_eq!(log.aborted_transactions(start, i64::MAX), allowed);
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
        // Lookups by timestamp see control records too (as Kafka's do).
        let mut timeline = want.clone();
        for b in batches.iter().filter(|b| matches!(b.kind, Kind::Marker | Kind::Reset) && present.contains_key(&b.base)) {
            timeline.extend(decoded(&b.bytes).1);
        }
        timeline.sort_by_key(|r| r.offset);
        for ts in [0, 1_500, 3_000, 6_000, i64::MAX] {
            let found = log.offset_for_timestamp(ts).unwrap().map(|t| (t.timestamp, t.offset));
            prop_assert_eq!(found, first_at_or_after(&timeline, ts), "offset for timestamp {}", ts);
        }

        // The checkpoint says everything cleanable was cleaned: with
        // nothing new dirty, a pass does nothing, whatever the horizon.
        if bases.len() > 1 {
            prop_assert_eq!(checkpoint_text(dir.path()), Some(format!("0\n1\n{active}\n")));
        }
        prop_assert_eq!(log.first_dirty_offset(), active);
        prop_assert_eq!(log.cleanable_dirty_ratio(), 0.0);
        prop_assert_eq!(log.clean(&when_dirty(0), NOW_MS).unwrap(), CleanReport::default());

        // Cleaning again, forced, removes nothing more (tombstones and
        // markers kept: a cleaned segment's largest timestamp may be lower
        // than its source's). Later passes may still merge segments and
        // drop the empty batches that kept emptied segments from being
        // empty, until none is left to drop.
        let mut rounds = 0;
        loop {
            let again = log.clean(&CleanOptions::new(1 << 40), NOW_MS).unwrap();
            prop_assert_eq!((again.records_removed, again.markers_removed), (0, 0));
            assert_matches(&log, &want, &batches, everything, "after cleaning again");
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
        let mut batches = batches;
        batches.push(Built { base: end, max_timestamp: 99_000, kind: Kind::Data, records: decoded(&more).1, bytes: more });
        // Only a new segment makes the log dirty again.
        let rolled = *log.segment_base_offsets().last().unwrap() != active;
        let dirty = log.cleanable_dirty_ratio();
        prop_assert_eq!(dirty > 0.0, rolled, "dirty ratio {}", dirty);

        // A clean close and reopen, then an unclean one that re-scans
        // everything: the checkpoint and the cleaned log stay.
        let recovery_point = log.log_end_offset();
        log.close(0).unwrap();
        let log = open(dir.path(), &config, recovery_point, true);
        assert_matches(&log, &want_more, &batches, everything, "after a clean reopen");
        prop_assert_eq!((log.first_dirty_offset(), log.cleanable_dirty_ratio()), (active, dirty));
        drop(log);
        let log = open(dir.path(), &config, 0, false);
        assert_matches(&log, &want_more, &batches, everything, "after an unclean reopen");
        prop_assert_eq!((log.first_dirty_offset(), log.cleanable_dirty_ratio()), (active, dirty));
        prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end + 1));
        prop_assert_eq!(producers(&log), pids);
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// An offset map with room for one segment's keys: each pass maps the
    /// next dirty segment(s) and cleans the log up to their end, never
    /// further; the passes end where one unbounded pass ends, with the same
    /// records, and every log in between is what the model keeps for the
    /// part mapped so far.
    #[test]
    fn a_full_offset_map_cleans_in_passes_that_end_as_one_pass_does(
        steps in prop::collection::vec(gen_step(6), 5..60),
        segment_bytes in 600u64..3000,
        retention_ms in prop_oneof![Just(0u64), Just(1u64 << 40)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = config(segment_bytes);
        let batches = build(&steps);
        let mut log = write_log(dir.path(), &config, &batches);
        let bases = log.segment_base_offsets();
        let active = *bases.last().unwrap();
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        let pids = producers(&log);
        let tiny = CleanOptions { offset_map_bytes: 1, ..CleanOptions::new(retention_ms) };
        let mut cleaned_end = log.first_dirty_offset();
        let mut passes = 0;
        while cleaned_end < active {
            let report = log.clean(&tiny, NOW_MS).unwrap();
            passes += 1;
            prop_assert!(report.cleaned_end > cleaned_end, "pass {} made no progress: {:?}", passes, report);
            prop_assert!(bases.contains(&report.cleaned_end), "pass {} ended inside a segment: {:?}", passes, report);
            cleaned_end = report.cleaned_end;
            prop_assert_eq!(log.first_dirty_offset(), cleaned_end);
            let range = (i64::MIN, cleaned_end);
            assert_matches(
                &log,
                &model_mapped(&batches, &bases, range, cleaned_end, retention_ms),
                &batches,
                range,
                &format!("after pass {passes}"),
            );
            prop_assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
            prop_assert_eq!(producers(&log), pids.clone());
        }
        prop_assert!(passes < bases.len().max(2), "{} passes for {} segments", passes, bases.len());
        let everything = (i64::MIN, active);
        assert_matches(&log, &model(&batches, &bases, everything, retention_ms), &batches, everything, "after the passes");
        prop_assert_eq!(
            view_of(&read_committed(&log)),
            model_view(&batches, &bases, active, Some(retention_ms)),
            "READ_COMMITTED latest value per key"
        );
    }

    #[test]
    fn no_transaction_is_left_open_by_a_rebuild_of_producer_state(
        steps in prop::collection::vec(gen_step(4), 10..50),
        segment_bytes in 600u64..2000,
        segment_ms in prop_oneof![Just(u64::MAX), 10u64..60],
        marker in any::<prop::sample::Index>(),
        recovery_segment in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_ms, ..config(segment_bytes) };
        let batches = build(&steps);
        let mut log = write_log(dir.path(), &config, &batches);
        // Markers of transactions that span a segment roll, where a
        // producer snapshot holds them open (any marker if none does).
        let bases = log.segment_base_offsets();
        let markers: Vec<i64> = batches.windows(2)
            .filter(|p| p[1].kind == Kind::Marker)
            .filter(|p| bases.iter().any(|&b| p[0].base < b && b <= p[1].base))
            .map(|p| p[1].base)
            .collect();
        let markers = if markers.is_empty() {
            batches.iter().filter(|b| b.kind == Kind::Marker).map(|b| b.base).collect()
        } else {
            markers
        };
        log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
        // A truncation right after a marker (gone or not) replays from the
        // producer snapshot below it.
        if !markers.is_empty() {
            let cut = marker.get(&markers) + 1;
            log.truncate_to(cut).unwrap();
            prop_assert!(log.log_end_offset() <= cut);
            prop_assert_eq!(log.producer_state().ongoing_transactions().count(), 0, "open after truncating to {}", cut);
            prop_assert_eq!(log.last_stable_offset(), log.log_end_offset());
        }
        // So does a recovery from any segment.
        let end = log.log_end_offset();
        let bases = log.segment_base_offsets();
        drop(log);
        let log = open(dir.path(), &config, *recovery_segment.get(&bases), false);
        prop_assert_eq!((log.log_end_offset(), log.last_stable_offset()), (end, end));
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
        let original = contents(&log);
        let options = CleanOptions { halt_after: Some(step), ..CleanOptions::new(0) };
        match log.clean(&options, NOW_MS) {
            // Nothing to remove: nothing swapped, nothing halted.
            Ok(report) => {
                prop_assert_eq!(report.segments_rewritten, 0);
                assert_matches(&log, &original, &batches, (0, 0), "nothing to clean");
                return Ok(());
            }
            Err(e) => prop_assert!(e.to_string().contains("halted"), "{}", e),
        }
        drop(log); // the crash
        prop_assert_eq!(checkpoint_text(dir.path()), None, "checkpoint written before the swaps");
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
        let (want, cleaned) = if committed {
            (model(&batches, &bases, group, 0), group)
        } else {
            (original.clone(), (0, 0))
        };
        assert_matches(&log, &want, &batches, cleaned, &format!("reopened after {step:?}"));
        // The cleaner then finishes the job.
        prop_assert_eq!(log.cleanable_dirty_ratio(), 1.0);
        log.clean(&when_dirty(0), NOW_MS).unwrap();
        let everything = (i64::MIN, *bases.last().unwrap());
        assert_matches(&log, &model(&batches, &bases, everything, 0), &batches, everything, "cleaned after the crash");
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
        let original = contents(&log);
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

/// A transactional batch of `producer` at `offset`.
fn txn(offset: i64, producer: i64, records: &[(&str, Option<&str>)]) -> Vec<u8> {
    BatchBuilder {
        base_offset: offset,
        producer_id: producer,
        producer_epoch: 0,
        base_sequence: offset as i32,
        transactional: true,
        records: records
            .iter()
            .map(|(k, v)| BuildRecord {
                timestamp: 1000,
                key: Some(k.as_bytes().to_vec()),
                value: v.map(|v| v.as_bytes().to_vec()),
                headers: Vec::new(),
            })
            .collect(),
        ..BatchBuilder::default()
    }
    .build()
}

/// A COMMIT or ABORT marker of `producer` (at `epoch`) at `offset`.
fn end_txn(offset: i64, producer: i64, epoch: i16, commit: bool) -> Vec<u8> {
    let kind = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    BatchBuilder::control_marker(
        offset,
        0,
        producer,
        epoch,
        kind,
        BatchBuilder::end_txn_marker_value(3),
        1000,
    )
    .build()
}

/// (base offset, is control, records) of every batch in the log.
fn batch_list(log: &PartitionLog) -> Vec<(i64, bool, i32)> {
    let mut out = Vec::new();
    log.for_each_batch(|b| out.push((b.base_offset(), b.is_control(), b.records_count())))
        .unwrap();
    out
}

/// A log of `appends` (each a list of batches), one `segment.ms` apart so
/// that each append starts a segment.
fn log_of_segments(dir: &Path, appends: &[&[Vec<u8>]]) -> (PartitionLog, LogConfig) {
    let config = LogConfig {
        segment_ms: 100,
        ..config(1 << 20)
    };
    let mut log = open(dir, &config, 0, false);
    for (i, batches) in appends.iter().enumerate() {
        for b in batches.iter() {
            log.append(b, 100 * i as u64).unwrap();
        }
    }
    assert_eq!(log.segment_base_offsets().len(), appends.len());
    (log, config)
}

#[test]
fn aborted_transactions_go_then_markers_past_the_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let reset = BatchBuilder::control_marker(
        0,
        0,
        NO_PRODUCER_ID,
        -1,
        ControlType::MirrorPidReset,
        encode_mirror_pid_reset_value("source").unwrap(),
        1000,
    )
    .build();
    let (mut log, config) = log_of_segments(
        dir.path(),
        &[
            &[reset],
            &[
                txn(1, 10, &[("a", Some("aborted")), ("b", Some("aborted"))]),
                end_txn(3, 10, 0, false),
            ],
            &[txn(4, 11, &[("a", Some("a11"))]), end_txn(5, 11, 0, true)],
            &[txn(6, 10, &[("c", Some("c10"))]), end_txn(7, 10, 0, true)],
            &[keyed(8, &[("a", Some("plain"))], 1000)],
            &[txn(9, 10, &[("d", Some("aborted"))]), end_txn(10, 10, 0, false)],
            &[txn(11, 11, &[("e", Some("e11"))]), end_txn(12, 11, 0, true)],
            &[txn(13, 10, &[("f", Some("f10"))]), end_txn(14, 10, 0, true)],
            &[txn(15, 12, &[("g", Some("g12"))]), end_txn(16, 12, 0, true)],
            // A fencing abort: no batch, a new epoch.
            &[end_txn(17, 12, 1, false)],
            &[keyed(18, &[("z", Some("active"))], 1000)],
        ],
    );
    let pids = producers(&log);
    assert_eq!(log.aborted_transactions(0, i64::MAX).len(), 2);
    let view = |log: &PartitionLog| -> Vec<(i64, String)> {
        read_committed(log)
            .into_iter()
            .map(|r| (r.offset, String::from_utf8(r.value.unwrap()).unwrap()))
            .collect()
    };
    let committed: Vec<(i64, String)> = [
        (4, "a11"),
        (6, "c10"),
        (8, "plain"),
        (11, "e11"),
        (13, "f10"),
        (15, "g12"),
        (18, "active"),
    ]
    .into_iter()
    .map(|(o, v)| (o, v.to_string()))
    .collect();
    assert_eq!(view(&log), committed);

    // Within the horizon: aborted batches and the overwritten committed
    // one go, every marker stays; no aborted transaction is left to list.
    let first = log.clean(&CleanOptions::new(1 << 40), NOW_MS).unwrap();
    assert_eq!((first.records_removed, first.markers_removed), (4, 0), "{first:?}");
    let bases = |list: &[(i64, bool, i32)]| list.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(
        bases(&batch_list(&log)),
        vec![0, 3, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    );
    assert_eq!(log.aborted_transactions(0, i64::MAX), Vec::new());
    assert_eq!(view(&log), committed[1..]);
    assert_eq!(checkpoint_text(dir.path()), Some("0\n1\n18\n".into()));

    // Past it: the markers of transactions with nothing left go; those
    // with a batch left stay, and so do the reset and the fencing abort
    // (its producer's last word: epoch 1).
    let second = log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
    assert_eq!((second.records_removed, second.markers_removed), (0, 3), "{second:?}");
    let after = batch_list(&log);
    assert_eq!(bases(&after), vec![0, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18]);
    assert!(after.iter().all(|&(_, control, records)| records == 1 || control));
    assert_eq!(view(&log), committed[1..]);
    assert_eq!(log.last_stable_offset(), log.log_end_offset());
    assert_eq!(log.clean(&CleanOptions::new(0), NOW_MS).unwrap().segments_rewritten, 0);

    // Producer state rebuilt from the cleaned log is the same.
    drop(log);
    let log = open(dir.path(), &config, 0, false);
    assert_eq!(producers(&log), pids);
    assert_eq!(pids[&12].0, 1, "the fencing epoch");
    assert_eq!(log.last_stable_offset(), log.log_end_offset());
    assert_eq!(view(&log), committed[1..]);
}

#[test]
fn a_marker_a_producer_snapshot_needs_stays() {
    let dir = tempfile::tempdir().unwrap();
    // The transaction spans a roll: the producer snapshot at offset 1
    // holds it open, and only its marker ends it.
    let (mut log, _) = log_of_segments(
        dir.path(),
        &[
            &[txn(0, 10, &[("a", Some("old"))])],
            &[end_txn(1, 10, 0, true), keyed(2, &[("a", Some("new"))], 1000)],
            &[txn(3, 10, &[("b", Some("b"))]), end_txn(4, 10, 0, true)],
            &[keyed(5, &[("z", Some("active"))], 1000)],
        ],
    );
    let report = log.clean(&CleanOptions::new(0), NOW_MS).unwrap();
    assert_eq!((report.records_removed, report.markers_removed), (1, 0), "{report:?}");
    assert_eq!(batch_list(&log)[0], (1, true, 1));
    // A truncation replays from that snapshot: the marker closes the transaction.
    log.truncate_to(2).unwrap();
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.producer_state().ongoing_transactions().count(), 0);
    assert_eq!(log.last_stable_offset(), 2);
}

/// Twelve one-record batches of one key over several 300-byte segments.
fn one_key_log(dir: &Path) -> PartitionLog {
    let mut log = open(dir, &config(300), 0, false);
    for i in 0..12 {
        log.append(&keyed(i, &[("k", Some("v"))], 1000), 0).unwrap();
    }
    assert!(log.segment_base_offsets().len() >= 3);
    log
}

#[test]
fn the_checkpoint_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = one_key_log(dir.path());
    let gated = when_dirty(0);
    assert_eq!(checkpoint_text(dir.path()), None);
    assert_eq!((log.first_dirty_offset(), log.cleanable_dirty_ratio()), (0, 1.0));
    let first = log.clean(&gated, NOW_MS).unwrap();
    assert!(first.segments_rewritten > 0 && first.records_removed > 0, "{first:?}");
    let active = *log.segment_base_offsets().last().unwrap();
    assert_eq!(checkpoint_text(dir.path()), Some(format!("0\n1\n{active}\n")));
    let recovery_point = log.log_end_offset();
    log.close(0).unwrap();
    for (recovery_point, clean_shutdown) in [(recovery_point, true), (0, false)] {
        let mut log = open(dir.path(), &config(300), recovery_point, clean_shutdown);
        assert_eq!((log.first_dirty_offset(), log.cleanable_dirty_ratio()), (active, 0.0));
        assert_eq!(log.clean(&gated, NOW_MS).unwrap(), CleanReport::default());
    }
    // New segments make it dirty again.
    let mut log = open(dir.path(), &config(300), 0, false);
    let mut offset = log.log_end_offset();
    while *log.segment_base_offsets().last().unwrap() == active {
        log.append(&keyed(offset, &[("k", Some("w"))], 1000), 0).unwrap();
        offset += 1;
    }
    assert!(log.cleanable_dirty_ratio() > 0.0);
    let again = log.clean(&gated, NOW_MS).unwrap();
    assert!(again.segments_cleaned > 0 && again.records_removed > 0, "{again:?}");
    let active = *log.segment_base_offsets().last().unwrap();
    assert_eq!(checkpoint_text(dir.path()), Some(format!("0\n1\n{active}\n")));
}

#[test]
fn truncation_lowers_the_checkpoint_and_emptying_the_log_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(300);
    let mut log = open(dir.path(), &config, 0, false);
    for i in 0..24 {
        log.append(&keyed(i, &[(&format!("k{i}"), Some("v"))], 1000), 0)
            .unwrap();
    }
    // Nothing to remove, yet all of it is cleaned.
    let report = log.clean(&when_dirty(0), NOW_MS).unwrap();
    assert_eq!((report.segments_rewritten, report.records_removed), (0, 0));
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 4);
    assert_eq!(log.first_dirty_offset(), *bases.last().unwrap());

    // Below the checkpoint: lowered to the new log end, on disk too.
    let cut = bases[1] + 1;
    log.truncate_to(cut).unwrap();
    assert_eq!(log.log_end_offset(), cut);
    assert_eq!(log.first_dirty_offset(), cut);
    assert_eq!(checkpoint_text(dir.path()), Some(format!("0\n1\n{cut}\n")));
    assert_eq!(log.cleanable_dirty_ratio(), 0.0);
    // The segment that now holds offsets on both sides of it is dirty once sealed.
    let mut offset = cut;
    while log.segment_base_offsets().len() <= 2 {
        log.append(&keyed(offset, &[("k1", Some("w"))], 1000), 0).unwrap();
        offset += 1;
    }
    assert!(log.cleanable_dirty_ratio() > 0.0);
    drop(log);
    let mut log = open(dir.path(), &config, 0, false);
    assert_eq!(log.first_dirty_offset(), cut);

    // A log start past it raises it (the file is clamped when read).
    let start = *log.segment_base_offsets().last().unwrap();
    log.advance_log_start(start).unwrap();
    assert_eq!(log.first_dirty_offset(), start);
    drop(log);
    let (mut log, _) = PartitionLog::open(OpenOptions {
        log_start_offset: start,
        ..OpenOptions::new(dir.path(), config)
    })
    .unwrap();
    assert_eq!(log.first_dirty_offset(), start);

    // An emptied log was never cleaned.
    log.truncate_fully_and_start_at(1000).unwrap();
    assert_eq!(log.first_dirty_offset(), 1000);
    assert_eq!(checkpoint_text(dir.path()), None);
}

#[test]
fn a_bad_checkpoint_means_one_full_clean() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = one_key_log(dir.path());
    let gated = when_dirty(0);
    log.clean(&gated, NOW_MS).unwrap();
    let active = *log.segment_base_offsets().last().unwrap();
    let end = log.log_end_offset();
    log.close(0).unwrap();
    for bad in [
        "garbage".to_string(),
        "0\n1\n-\n".into(),
        format!("0\n1\n{}\n", end + 1),
    ] {
        std::fs::write(dir.path().join(CHECKPOINT_FILE), bad.as_bytes()).unwrap();
        let mut log = open(dir.path(), &config(300), end, true);
        assert_eq!(
            (log.first_dirty_offset(), log.cleanable_dirty_ratio()),
            (0, 1.0),
            "{bad:?}"
        );
        let cleanable = log.segment_base_offsets().len() as u32 - 1;
        let full = log.clean(&gated, NOW_MS).unwrap();
        assert_eq!(full.segments_cleaned, cleanable, "{bad:?}");
        assert_eq!(checkpoint_text(dir.path()), Some(format!("0\n1\n{active}\n")));
        assert_eq!(log.clean(&gated, NOW_MS).unwrap(), CleanReport::default());
        log.close(0).unwrap();
    }
}
