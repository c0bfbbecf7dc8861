//! Property tests holding the partition log against a tiny model: a `Vec`
//! of batches. Random batch sequences (sizes, offset gaps, leader epochs,
//! idempotent and transactional producers, COMMIT/ABORT and
//! MIRROR_PID_RESET control batches) are appended, read back, reopened
//! cleanly and uncleanly, crashed (files cut and bytes flipped in the
//! unflushed tail), truncated and retention-trimmed; after each step the log
//! must equal the model.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use ringmirror_storage::batch::{
    BatchBuilder, BuildRecord, ControlType, NO_PRODUCER_ID, RecordBatch, encode_mirror_pid_reset_value,
};
use ringmirror_storage::log::{AbortedTxn, LogConfig, OpenOptions, PartitionLog};

/// One batch of the model, with the facts the log must derive from it.
#[derive(Debug, Clone)]
struct ModelBatch {
    bytes: Vec<u8>,
    base: i64,
    last: i64,
    epoch: i32,
    producer_id: i64,
    transactional: bool,
    control: Option<ControlType>,
    max_timestamp: i64,
}

/// A generator step: what kind of batch comes next.
#[derive(Debug, Clone, Copy)]
enum Step {
    Data {
        gap: i64,
        records: usize,
        value_bytes: usize,
        epoch_bump: i32,
        producer: Option<(i64, bool)>,
    },
    EndTxn {
        producer: i64,
        commit: bool,
    },
    PidReset,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (
            prop_oneof![6 => Just(0i64), 2 => 1i64..50, 1 => 1000i64..100_000],
            1usize..12,
            0usize..700,
            prop_oneof![8 => Just(0i32), 2 => 1i32..3],
            prop::option::of((1i64..4, any::<bool>())),
        )
            .prop_map(|(gap, records, value_bytes, epoch_bump, producer)| Step::Data {
                gap,
                records,
                value_bytes,
                epoch_bump,
                producer
            }),
        2 => (1i64..4, any::<bool>()).prop_map(|(producer, commit)| Step::EndTxn { producer, commit }),
        1 => Just(Step::PidReset),
    ]
}

/// Turns steps into concrete batches with increasing offsets, epochs and timestamps.
fn build_batches(steps: &[Step], start_offset: i64) -> Vec<ModelBatch> {
    let mut out = Vec::new();
    let mut next = start_offset;
    let mut epoch = 0;
    let mut ts = 1_700_000_000_000i64;
    let mut sequences: BTreeMap<i64, i32> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        ts += 7 + i as i64 % 5;
        let mut b = BatchBuilder {
            partition_leader_epoch: epoch,
            ..Default::default()
        };
        let (producer_id, transactional, control) = match s {
            Step::Data {
                gap,
                records,
                value_bytes,
                epoch_bump,
                producer,
            } => {
                epoch += epoch_bump;
                next += gap;
                b.partition_leader_epoch = epoch;
                b.records = (0..*records)
                    .map(|r| BuildRecord {
                        timestamp: ts + r as i64,
                        key: Some(format!("k{i}-{r}").into_bytes()),
                        value: Some(vec![(i * 31 + r) as u8; *value_bytes]),
                        headers: vec![("h".into(), Some(vec![r as u8]))],
                    })
                    .collect();
                if let Some((pid, txn)) = producer {
                    let seq = sequences.entry(*pid).or_insert(0);
                    b.producer_id = *pid;
                    b.producer_epoch = 0;
                    b.base_sequence = *seq;
                    b.transactional = *txn;
                    *seq += *records as i32;
                }
                (b.producer_id, b.transactional, None)
            }
            Step::EndTxn { producer, commit } => {
                let kind = if *commit {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                };
                b = BatchBuilder::control_marker(
                    0,
                    epoch,
                    *producer,
                    0,
                    kind,
                    BatchBuilder::end_txn_marker_value(5),
                    ts,
                );
                (*producer, true, Some(kind))
            }
            Step::PidReset => {
                let value = encode_mirror_pid_reset_value("source-cluster").unwrap();
                b = BatchBuilder::control_marker(0, epoch, NO_PRODUCER_ID, -1, ControlType::MirrorPidReset, value, ts);
                (NO_PRODUCER_ID, false, Some(ControlType::MirrorPidReset))
            }
        };
        b.base_offset = next;
        let bytes = b.build();
        let batch = RecordBatch::new(&bytes[..]).unwrap();
        let (base, last, max_timestamp) = (batch.base_offset(), batch.last_offset(), batch.max_timestamp());
        next = last + 1;
        out.push(ModelBatch {
            bytes,
            base,
            last,
            epoch,
            producer_id,
            transactional,
            control,
            max_timestamp,
        });
    }
    out
}

fn small_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 256,
        segment_index_bytes: 4096,
        preallocate_bytes: 64 * 1024,
        prefault_bytes: 32 * 1024,
        max_batch_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: &LogConfig, recovery_point: i64, log_start: i64, clean: bool) -> PartitionLog {
    PartitionLog::open(OpenOptions {
        dir: dir.to_owned(),
        topic_id: Some([9; 16]),
        config: *config,
        recovery_point,
        log_start_offset: log_start,
        clean_shutdown: clean,
        now_ms: 0,
    })
    .expect("open log")
    .0
}

/// The model's view: transactions, aborted ones and epochs derived from the batches.
struct Derived {
    aborted: Vec<AbortedTxn>,
    ongoing_first: Option<i64>,
    epochs: Vec<(i32, i64)>,
}

fn derive(batches: &[ModelBatch], log_start: i64) -> Derived {
    let mut open_txns: BTreeMap<i64, i64> = BTreeMap::new(); // pid -> first offset
    let mut aborted = Vec::new();
    let mut epochs: Vec<(i32, i64)> = Vec::new();
    for b in batches {
        if epochs.last().is_none_or(|&(e, _)| e != b.epoch) {
            epochs.push((b.epoch, b.base));
        }
        match b.control {
            Some(ControlType::MirrorPidReset) => open_txns.clear(),
            Some(kind) => {
                if let Some(first) = open_txns.remove(&b.producer_id)
                    && kind == ControlType::Abort
                {
                    let lso = open_txns.values().min().copied().unwrap_or(b.last + 1);
                    aborted.push(AbortedTxn {
                        producer_id: b.producer_id,
                        first_offset: first,
                        last_offset: b.last,
                        last_stable_offset: lso,
                    });
                }
            }
            None if b.transactional => {
                open_txns.entry(b.producer_id).or_insert(b.base);
            }
            None => {}
        }
    }
    // The epoch cache keeps only what is at or above the log start.
    let keep_from = epochs
        .partition_point(|&(_, start)| start <= log_start)
        .saturating_sub(1);
    let mut epochs: Vec<(i32, i64)> = epochs.split_off(keep_from);
    if let Some(first) = epochs.first_mut() {
        first.1 = first.1.max(log_start);
    }
    // As Kafka's truncateFromEnd: no entry starts at or past the log end
    // (possible once the log start is clamped up to an empty log's end).
    let log_end = batches.last().map_or(log_start, |b| b.last + 1).max(log_start);
    epochs.retain(|&(_, start)| start < log_end);
    Derived {
        aborted,
        ongoing_first: open_txns.values().min().copied(),
        epochs,
    }
}

/// Asserts that the log holds exactly `batches` (those at or above
/// `log_start`), readable through `read` from every batch's offsets.
fn assert_log_matches(log: &PartitionLog, batches: &[ModelBatch], log_start: i64) {
    let visible: Vec<&ModelBatch> = batches.iter().filter(|b| b.last >= log_start).collect();
    assert_eq!(log.log_start_offset(), log_start, "log start");
    let expected_end = batches.last().map_or(log_start, |b| b.last + 1).max(log_start);
    assert_eq!(log.log_end_offset(), expected_end, "log end offset");
    // Reading from the start returns every visible batch, byte for byte.
    let mut got = Vec::new();
    let mut offset = log_start;
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 3000).unwrap();
        assert!(slice.len > 0, "read at {offset} returned nothing before the log end");
        let bytes = slice.to_vec().unwrap();
        let mut last = offset;
        for item in ringmirror_storage::batch::BatchIter::new(&bytes, 1 << 20) {
            let (_, b) = item.unwrap();
            got.push(b.bytes().to_vec());
            last = b.last_offset();
        }
        offset = last + 1;
    }
    let want: Vec<Vec<u8>> = visible.iter().map(|b| b.bytes.clone()).collect();
    assert_eq!(got.len(), want.len(), "batch count");
    assert!(got == want, "log bytes differ from the model");
    // Every offset inside a batch reads from that batch.
    for b in &visible {
        for offset in [b.base.max(log_start), b.last] {
            let slice = log.read(offset, 1).unwrap();
            assert_eq!(slice.first_offset, b.base, "read({offset}) starts at its batch");
        }
    }
    let derived = derive(batches, log_start);
    let cache: Vec<(i32, i64)> = log
        .epoch_cache()
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(cache, derived.epochs, "leader epoch cache");
    for &(epoch, _) in &derived.epochs {
        let (e, end) = log.end_offset_for_epoch(epoch);
        let next_start = derived
            .epochs
            .iter()
            .find(|&&(x, _)| x > epoch)
            .map_or(log.log_end_offset(), |&(_, s)| s);
        assert_eq!((e, end), (epoch, next_start), "end offset for epoch {epoch}");
    }
    assert_eq!(
        log.last_stable_offset(),
        derived.ongoing_first.unwrap_or(log.log_end_offset()),
        "last stable offset"
    );
    let aborted: Vec<AbortedTxn> = derived
        .aborted
        .iter()
        .filter(|t| t.last_offset >= log_start)
        .copied()
        .collect();
    assert_eq!(
        log.aborted_transactions(log_start, i64::MAX),
        aborted,
        "aborted transactions"
    );
    // What a READ_COMMITTED fetch of each batch must be told, even when the
    // ABORT marker lies in a later segment.
    for b in &visible {
        let want: Vec<AbortedTxn> = aborted
            .iter()
            .filter(|t| t.last_offset >= b.base && t.first_offset < b.last + 1)
            .copied()
            .collect();
        assert_eq!(
            log.aborted_transactions(b.base, b.last + 1),
            want,
            "aborted transactions for a fetch at {}",
            b.base
        );
    }
}

fn concat(batches: &[ModelBatch]) -> Vec<u8> {
    batches.iter().flat_map(|b| b.bytes.iter().copied()).collect()
}

/// Appends `batches` in chunks, alternating the copying and zero-copy paths.
fn append_in_chunks(log: &mut PartitionLog, batches: &[ModelBatch], chunk: usize, zero_copy: bool) {
    for part in batches.chunks(chunk.max(1)) {
        let bytes = concat(part);
        if zero_copy {
            let tail = log.tail_mut(bytes.len(), 0).unwrap();
            tail.copy_from_slice(&bytes);
            let info = log.commit_tail(bytes.len(), bytes.len(), 0).unwrap();
            assert_eq!(info.batches as usize, part.len());
        } else {
            let info = log.append(&bytes, 0).unwrap();
            assert_eq!(
                (info.first_offset, info.last_offset),
                (part[0].base, part.last().unwrap().last)
            );
        }
    }
}

/// Writes `steps` (the first `flushed_fraction` of them flushed), damages
/// one batch at or after the recovery point (cut inside it, or bytes
/// flipped), reopens uncleanly, and checks that exactly the batches before
/// the damaged one survive and that appends go on after them.
fn check_recovery(
    steps: &[Step],
    segment_bytes: u64,
    flushed_fraction: f64,
    cut: bool,
    where_frac: f64,
    flips: &[u8],
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(segment_bytes);
    let batches = build_batches(steps, 0);
    let flushed = ((batches.len() as f64) * flushed_fraction) as usize;
    let mut log = open(dir.path(), &config, 0, 0, false);
    append_in_chunks(&mut log, &batches[..flushed], 3, false);
    log.flush(0).unwrap();
    let recovery_point = log.recovery_point();
    append_in_chunks(&mut log, &batches[flushed..], 2, true);
    let bases = log.segment_base_offsets();
    drop(log); // crash: no clean close

    // Lay the model batches out over segment files as the log did.
    let seg_of = |b: &ModelBatch| *bases.iter().rev().find(|&&s| s <= b.base).unwrap();
    let mut layout: Vec<(i64, usize, usize)> = Vec::new(); // (segment, position, len)
    let mut pos_in: BTreeMap<i64, usize> = BTreeMap::new();
    for b in &batches {
        let s = seg_of(b);
        let p = pos_in.entry(s).or_insert(0);
        layout.push((s, *p, b.bytes.len()));
        *p += b.bytes.len();
    }
    // Damage only what recovery scans: the segment holding the recovery
    // point and later ones (flushed, sealed data below is trusted, as in Kafka).
    let rp_segment = *bases.iter().rev().find(|&&s| s <= recovery_point).unwrap_or(&bases[0]);
    let candidates: Vec<usize> = (0..batches.len()).filter(|&i| layout[i].0 >= rp_segment).collect();
    prop_assume!(!candidates.is_empty());
    let victim = candidates[((candidates.len() as f64) * where_frac) as usize % candidates.len()];
    let (segment, position, len) = layout[victim];
    let path = dir.path().join(format!("{segment:020}.log"));
    let survivors: Vec<ModelBatch> = if cut {
        // Cut the file strictly inside the victim batch. (A cut exactly at
        // a batch boundary of a segment followed by another one leaves two
        // well-formed segments with an offset gap between them, which is
        // what compaction leaves too: no log format can tell them apart.
        // It cannot happen here anyway: a segment is flushed when it rolls.)
        let at = position + 1 + (len - 2) * flips[0] as usize / 255;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(at as u64).unwrap();
        batches[..victim].to_vec()
    } else {
        // Flip bytes inside the victim's CRC-covered part or its length or
        // magic. baseOffset and partitionLeaderEpoch lie outside the CRC by
        // the format's design, so a flip there is indistinguishable from
        // valid data (for Kafka too) and is not a corruption this can see.
        let mut data = std::fs::read(&path).unwrap();
        for (k, f) in flips.iter().enumerate() {
            let covered: Vec<usize> = (8..12).chain(16..17).chain(17..len).collect();
            let off = covered[(k * 7919 + *f as usize * 31) % covered.len()];
            data[position + off] ^= f | 1;
        }
        std::fs::write(&path, &data).unwrap();
        batches[..victim].to_vec()
    };
    let log = open(dir.path(), &config, recovery_point, 0, false);
    assert_log_matches(&log, &survivors, 0);
    // The recovered log keeps accepting appends right after the prefix.
    let mut log = log;
    let more = build_batches(
        &[Step::Data {
            gap: 0,
            records: 2,
            value_bytes: 10,
            epoch_bump: 0,
            producer: None,
        }],
        log.log_end_offset(),
    );
    log.append(&concat(&more), 0).unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn appended_batches_read_back_identical_across_clean_and_unclean_reopen(
        steps in prop::collection::vec(step(), 1..60),
        segment_bytes in prop_oneof![Just(2048u64), Just(8192), Just(1 << 20)],
        chunk in 1usize..6,
        zero_copy in any::<bool>(),
        start in prop_oneof![Just(0i64), 1i64..1000],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = small_config(segment_bytes);
        let batches = build_batches(&steps, start);
        let mut log = open(dir.path(), &config, 0, start, false);
        append_in_chunks(&mut log, &batches, chunk, zero_copy);
        assert_log_matches(&log, &batches, start);

        log.close(0).unwrap();
        let log = open(dir.path(), &config, 0, start, true);
        assert_log_matches(&log, &batches, start);

        // Unclean: drop without close, then a full re-validation from 0.
        drop(log);
        let log = open(dir.path(), &config, 0, start, false);
        assert_log_matches(&log, &batches, start);
    }

    #[test]
    fn recovery_keeps_exactly_the_longest_valid_prefix(
        steps in prop::collection::vec(step(), 2..50),
        segment_bytes in prop_oneof![Just(4096u64), Just(1 << 20)],
        flushed_fraction in 0.0f64..1.0,
        cut in any::<bool>(),
        where_frac in 0.0f64..1.0,
        flips in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        check_recovery(&steps, segment_bytes, flushed_fraction, cut, where_frac, &flips)?;
    }

    /// LME truncation keeps exactly the batches of epochs up to the last
    /// mirror epoch (epochs never decrease along a log), survives a reopen,
    /// and with an LME of -1 leaves an empty log at offset 0.
    #[test]
    fn lme_truncation_keeps_the_epochs_up_to_the_last_mirror_epoch(
        steps in prop::collection::vec(step(), 1..40),
        lme in -1i32..12,
        segment_bytes in prop_oneof![Just(2048u64), Just(1 << 20)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = small_config(segment_bytes);
        let model = build_batches(&steps, 0);
        let mut log = open(dir.path(), &config, 0, 0, false);
        append_in_chunks(&mut log, &model, 4, false);
        let cut = log.truncate_above_epoch(lme).unwrap();
        let kept: Vec<ModelBatch> = if lme < 0 {
            Vec::new()
        } else {
            model.iter().filter(|b| b.epoch <= lme).cloned().collect()
        };
        let changed = kept.len() != model.len();
        prop_assert_eq!(cut.is_some(), changed);
        assert_log_matches(&log, &kept, 0);
        prop_assert!(log.epoch_cache().latest().is_none_or(|e| lme >= 0 && e.epoch <= lme));
        // A second cut at the same LME changes nothing.
        prop_assert_eq!(log.truncate_above_epoch(lme.max(0)).unwrap(), None);
        drop(log);
        let log = open(dir.path(), &config, 0, 0, false);
        assert_log_matches(&log, &kept, 0);
    }

    #[test]
    fn truncation_and_log_start_moves_keep_every_invariant(
        steps in prop::collection::vec(step(), 4..50),
        ops in prop::collection::vec((0u8..4, 0.0f64..1.0), 1..6),
        segment_bytes in prop_oneof![Just(2048u64), Just(1 << 20)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let config = small_config(segment_bytes);
        let mut model = build_batches(&steps, 0);
        let mut log_start = 0;
        let mut log = open(dir.path(), &config, 0, 0, false);
        append_in_chunks(&mut log, &model, 4, false);
        for (op, frac) in ops {
            let end = log.log_end_offset();
            let target = log_start + ((end - log_start) as f64 * frac) as i64;
            match op {
                0 => {
                    log.truncate_to(target).unwrap();
                    if target <= log_start {
                        model.clear();
                        log_start = target;
                    } else {
                        model.retain(|b| b.last < target);
                        if model.last().is_none_or(|b| b.last + 1 < log_start) {
                            // Nothing at or above the log start is left.
                            model.clear();
                            log_start = log.log_start_offset();
                        }
                    }
                }
                1 => {
                    log.advance_log_start(target).unwrap();
                    log_start = log_start.max(target);
                }
                2 => {
                    drop(log);
                    log = open(dir.path(), &config, 0, log_start, false);
                }
                _ => {
                    log.close(0).unwrap();
                    log = open(dir.path(), &config, 0, log_start, true);
                }
            }
            if model.is_empty() {
                // An emptied log may end anywhere from its start to the target.
                prop_assert!(log.log_end_offset() >= log.log_start_offset());
                log_start = log.log_start_offset();
                let next = build_batches(&steps[..1], log.log_end_offset());
                log.append(&concat(&next), 0).unwrap();
                model = next;
            }
            assert_log_matches(&log, &model, log_start);
        }
    }
}

#[test]
fn append_below_log_end_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(1 << 20);
    let batches = build_batches(
        &[Step::Data {
            gap: 0,
            records: 3,
            value_bytes: 5,
            epoch_bump: 0,
            producer: None,
        }; 2],
        10,
    );
    let mut log = open(dir.path(), &config, 0, 10, false);
    log.append(&concat(&batches), 0).unwrap();
    let err = log.append(&batches[1].bytes, 0).unwrap_err();
    assert!(matches!(
        err,
        ringmirror_storage::log::LogError::OffsetBelowLogEnd {
            base_offset: 13,
            log_end_offset: 16
        }
    ));
    assert_log_matches(&log, &batches, 10);
    let mut partial = batches[0].bytes.clone();
    partial.truncate(partial.len() - 1);
    assert!(log.append(&partial, 0).is_err());
    assert_log_matches(&log, &batches, 10);
}

#[test]
fn timestamp_lookups_find_the_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(2048);
    let steps = vec![
        Step::Data {
            gap: 0,
            records: 4,
            value_bytes: 200,
            epoch_bump: 0,
            producer: None
        };
        20
    ];
    let batches = build_batches(&steps, 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    log.append(&concat(&batches), 0).unwrap();
    assert!(log.segment_base_offsets().len() > 3, "spans several segments");
    for b in &batches {
        let record_ts = b.max_timestamp - 3; // first record of the batch
        let found = log.offset_for_timestamp(record_ts).unwrap().unwrap();
        assert_eq!((found.offset, found.timestamp), (b.base, record_ts));
        let found = log.offset_for_timestamp(record_ts + 2).unwrap().unwrap();
        assert_eq!(found.offset, b.base + 2);
    }
    assert_eq!(log.offset_for_timestamp(i64::MAX).unwrap(), None);
    let max = log.max_timestamp().unwrap().unwrap();
    let last = batches.last().unwrap();
    assert_eq!((max.offset, max.timestamp), (last.last, last.max_timestamp));
}

#[test]
fn kafka_file_layout_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(2048);
    let steps = vec![
        Step::Data {
            gap: 0,
            records: 4,
            value_bytes: 300,
            epoch_bump: 1,
            producer: Some((1, true))
        };
        6
    ];
    let mut steps = steps;
    steps.push(Step::EndTxn {
        producer: 1,
        commit: false,
    });
    let batches = build_batches(&steps, 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    log.append(&concat(&batches), 0).unwrap();
    log.close(0).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for expected in [
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "leader-epoch-checkpoint",
        "partition.metadata",
    ] {
        assert!(names.iter().any(|n| n == expected), "missing {expected} in {names:?}");
    }
    assert!(
        names.iter().any(|n| n.ends_with(".txnindex")),
        "aborted txn index written: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.ends_with(".snapshot")),
        "producer snapshot written: {names:?}"
    );
    let epochs = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
    assert!(epochs.starts_with("0\n6\n1 0\n2 4\n"), "{epochs}");
    // Sealed segment files hold exactly their batches.
    let total: u64 = names
        .iter()
        .filter(|n| n.ends_with(".log"))
        .map(|n| std::fs::metadata(dir.path().join(n)).unwrap().len())
        .sum();
    assert_eq!(total as usize, concat(&batches).len());
}

#[test]
fn received_but_uncommitted_batches_do_not_come_back_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(1 << 20);
    let step = Step::Data {
        gap: 0,
        records: 2,
        value_bytes: 50,
        epoch_bump: 0,
        producer: None,
    };
    let batches = build_batches(&[step; 3], 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    // Receive three whole, CRC-valid batches but commit only the first (as a
    // fetcher does when the second breaks a rule such as the fetch epoch).
    let bytes = concat(&batches);
    log.tail_mut(bytes.len(), 0).unwrap().copy_from_slice(&bytes);
    log.commit_tail(batches[0].bytes.len(), bytes.len(), 0).unwrap();
    assert_log_matches(&log, &batches[..1], 0);
    drop(log);
    let log = open(dir.path(), &config, 0, 0, false);
    assert_log_matches(&log, &batches[..1], 0);
}

#[test]
fn truncated_batches_do_not_come_back_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(1 << 20);
    let step = Step::Data {
        gap: 0,
        records: 2,
        value_bytes: 50,
        epoch_bump: 0,
        producer: None,
    };
    let batches = build_batches(&[step; 4], 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    log.append(&concat(&batches), 0).unwrap();
    log.truncate_to(batches[2].base).unwrap();
    // A same-sized batch replaces the first truncated one; the second must
    // not reappear behind it after a crash.
    let replacement = build_batches(&[step], batches[2].base);
    log.append(&concat(&replacement), 0).unwrap();
    drop(log);
    let log = open(dir.path(), &config, 0, 0, false);
    let mut want = batches[..2].to_vec();
    want.extend(replacement);
    assert_log_matches(&log, &want, 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever a disk hands back — valid batches, then garbage — opening
    /// the log never panics and keeps exactly the valid batches before the
    /// garbage. The small files (checkpoints, snapshot, transaction index,
    /// partition metadata) filled with garbage give errors or are rebuilt,
    /// never a panic.
    #[test]
    fn garbage_on_disk_is_survived(
        valid in 0usize..6,
        garbage in prop::collection::vec(any::<u8>(), 0..300),
        small_file_garbage in prop::collection::vec(any::<u8>(), 0..80),
        which in 0usize..5,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let step = Step::Data { gap: 0, records: 2, value_bytes: 20, epoch_bump: 0, producer: Some((1, true)) };
        let batches = build_batches(&vec![step; valid], 0);
        let mut bytes = concat(&batches);
        bytes.extend_from_slice(&garbage);
        std::fs::write(dir.path().join("00000000000000000000.log"), &bytes).unwrap();
        let small = ["leader-epoch-checkpoint", "00000000000000000000.snapshot", "00000000000000000000.txnindex",
            "00000000000000000000.index", "partition.metadata"][which];
        std::fs::write(dir.path().join(small), &small_file_garbage).unwrap();
        let opened = PartitionLog::open(OpenOptions {
            dir: dir.path().to_owned(),
            topic_id: None,
            config: small_config(1 << 20),
            recovery_point: 0,
            log_start_offset: 0,
            clean_shutdown: false,
            now_ms: 0,
        });
        if let Ok((log, _)) = opened {
            let mut kept = Vec::new();
            log.for_each_batch(|b| kept.push(b.bytes().to_vec())).unwrap();
            let want: Vec<Vec<u8>> = batches.iter().map(|b| b.bytes.clone()).collect();
            // Garbage can only extend the log if it happens to be a valid
            // batch (vanishingly unlikely); it never loses a valid one.
            prop_assert!(kept.len() >= want.len() && kept[..want.len()] == want[..]);
        }
    }
}

#[test]
fn unclean_reopen_of_a_healthy_log_reports_no_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(1 << 20);
    let step = Step::Data {
        gap: 0,
        records: 3,
        value_bytes: 100,
        epoch_bump: 0,
        producer: None,
    };
    let batches = build_batches(&[step; 20], 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    log.append(&concat(&batches), 0).unwrap();
    drop(log); // the active segment keeps its zero-filled reserved space
    let (log, report) = PartitionLog::open(OpenOptions {
        dir: dir.path().to_owned(),
        topic_id: Some([9; 16]),
        config,
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: 0,
    })
    .unwrap();
    assert_eq!(report.scanned_from_offset, Some(0));
    assert_eq!(report.corruption, None, "reserved zeros are not corruption");
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(report.bytes_validated as usize, concat(&batches).len());
    assert_log_matches(&log, &batches, 0);
}

/// A case proptest found in CI (minimized): the cut fell exactly on a batch
/// boundary of a sealed segment (see `check_recovery`); now it falls inside
/// the batch and everything from there on is dropped.
#[test]
fn recovery_regression_cut_after_the_recovery_segment() {
    let data = |gap, records, value_bytes, epoch_bump, producer| Step::Data {
        gap,
        records,
        value_bytes,
        epoch_bump,
        producer,
    };
    let end = |producer, commit| Step::EndTxn { producer, commit };
    let mut steps: Vec<Step> = (0..7).map(|_| data(0, 1, 0, 0, None)).collect();
    steps.extend([
        data(0, 1, 0, 0, Some((1, false))),
        end(3, false),
        end(1, true),
        end(3, false),
        data(0, 9, 473, 1, Some((3, true))),
        data(0, 4, 504, 0, None),
        data(0, 3, 297, 0, None),
        data(2, 10, 478, 2, None),
        data(0, 5, 289, 0, None),
        end(2, false),
        end(1, true),
        data(0, 10, 254, 2, Some((1, false))),
    ]);
    check_recovery(
        &steps,
        4096,
        0.7633793452807104,
        true,
        0.45555624067669487,
        &[2, 35, 48, 230, 32, 121],
    )
    .unwrap();
}

/// Local retention: sealed segments go from the oldest while their newest
/// record is older than retention.ms, or while the rest still holds
/// retention.bytes; the active segment always stays; the log start moves to
/// the first kept segment and reads below it are refused.
#[test]
fn retention_deletes_the_oldest_sealed_segments_by_time_and_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(2048);
    let step = Step::Data {
        gap: 0,
        records: 4,
        value_bytes: 200,
        epoch_bump: 0,
        producer: None,
    };
    let batches = build_batches(&[step; 24], 0);
    let mut log = open(dir.path(), &config, 0, 0, false);
    append_in_chunks(&mut log, &batches, 1, false);
    let newest = batches.iter().map(|b| b.max_timestamp).max().unwrap() as u64;
    let middle = batches[batches.len() / 2].max_timestamp as u64;
    // Nothing is old enough yet, and no size bound: nothing moves.
    assert_eq!(log.apply_retention(Some(3_600_000), None, newest).unwrap(), None);
    // By time: segments whose newest record is older than the middle batch
    // go (whole sealed segments only: the log start lands on a segment base).
    let moved = log
        .apply_retention(Some(newest - middle), None, newest)
        .unwrap()
        .expect("the first segments are older than the cutoff");
    assert!(moved > 0 && moved <= batches[batches.len() / 2].base, "{moved}");
    assert_log_matches(&log, &batches, moved);
    assert!(log.read(0, 1 << 20).is_err(), "below the log start");
    // By size: the log shrinks to at most a bound plus one segment; the
    // active segment stays.
    let before = log.size_bytes();
    let start = log.apply_retention(None, Some(4096), newest).unwrap().expect("too big");
    assert!(log.size_bytes() < before && log.size_bytes() >= 4096 - 2048);
    assert_log_matches(&log, &batches, start);
    // Everything old, and a tiny bound: only the active segment is left.
    log.apply_retention(Some(1), Some(1), newest + 10).unwrap();
    assert!(log.log_start_offset() <= log.log_end_offset());
    assert_eq!(log.log_end_offset(), batches.last().unwrap().last + 1);
    drop(log);
    let log = open(dir.path(), &config, 0, 0, false);
    assert_eq!(log.log_end_offset(), batches.last().unwrap().last + 1);
}
