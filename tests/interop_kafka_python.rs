//! Interop with kafka-python's record-batch code, which we did not write.
//!
//! `tests/py/kafka_record_batches.py build` makes batches with kafka-python's
//! `DefaultRecordBatchBuilder` (the builder its producer uses) for every codec
//! (none, gzip, snappy, lz4, zstd), with idempotent and transactional
//! producers, COMMIT and ABORT control batches, offset gaps and odd records,
//! and describes every record in `expected.json`. These tests append those
//! batches to our [`PartitionLog`], check that the stored bytes are the input
//! bytes, that our decoder and our producer/transaction state agree with
//! `expected.json`, and then read our `.log` files back with kafka-python's
//! reader (`read` mode), which must see exactly the records that were built.
//!
//! python3 with kafka-python, lz4, python-snappy and zstandard is required:
//! without it these tests fail (they do not skip).

mod common;

use common::*;
use ringmirror_storage::batch::{BatchIter, Compression, Validation, decode_records, validate_batches};
use ringmirror_storage::log::{AbortedTxn, LogConfig, OpenOptions, PartitionLog};
use serde_json::Value;

/// Batches built by kafka-python, split as (base offset, bytes), with the expectations.
struct Built {
    _dir: tempfile::TempDir,
    bytes: Vec<u8>,
    batches: Vec<(i64, Vec<u8>)>,
    expected: Value,
}

fn build() -> Built {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bytes, expected) = kafka_python_build(dir.path());
    let batches = split_batches(&bytes);
    assert_eq!(
        batches.len(),
        json_array(&expected, "batches").len(),
        "batches.bin and expected.json disagree"
    );
    Built {
        _dir: dir,
        bytes,
        batches,
        expected,
    }
}

fn expected_batches(expected: &Value) -> &Vec<Value> {
    json_array(expected, "batches")
}

fn compression_name(c: Compression) -> &'static str {
    c.name()
}

/// Our view of each batch (header fields and decoded records) equals what
/// kafka-python says it built.
fn assert_our_decoding_matches(batches: &[(i64, Vec<u8>)], expected: &Value, context: &str) {
    let want = expected_batches(expected);
    assert_eq!(batches.len(), want.len(), "{context}: batch count");
    let mut codecs_seen = Vec::new();
    for ((base, bytes), want) in batches.iter().zip(want) {
        let batch = batch_view(bytes);
        let at = format!("{context}: batch at offset {base}");
        assert!(batch.crc_is_valid(), "{at}: CRC32C invalid");
        assert_eq!(batch.base_offset(), json_i64(want, "base_offset"), "{at}: base offset");
        assert_eq!(batch.last_offset(), json_i64(want, "last_offset"), "{at}: last offset");
        assert_eq!(
            i64::from(batch.partition_leader_epoch()),
            json_i64(want, "leader_epoch"),
            "{at}: leader epoch"
        );
        assert_eq!(
            compression_name(batch.compression()),
            json_str(want, "compression"),
            "{at}: codec"
        );
        assert_eq!(
            batch.is_transactional(),
            json_bool(want, "is_transactional"),
            "{at}: transactional"
        );
        assert_eq!(batch.is_control(), json_bool(want, "is_control"), "{at}: control");
        assert_eq!(batch.producer_id(), json_i64(want, "producer_id"), "{at}: producer id");
        assert_eq!(
            i64::from(batch.producer_epoch()),
            json_i64(want, "producer_epoch"),
            "{at}: producer epoch"
        );
        assert_eq!(
            i64::from(batch.base_sequence()),
            json_i64(want, "base_sequence"),
            "{at}: base sequence"
        );
        assert_eq!(
            i64::from(batch.records_count()),
            json_i64(want, "records_count"),
            "{at}: records count"
        );
        assert_eq!(batch.size_bytes() as i64, json_i64(want, "size_bytes"), "{at}: size");
        let ours: Vec<Rec> = decode_records(&batch, MAX_DECOMPRESSED_BYTES)
            .unwrap_or_else(|e| panic!("{at}: our decode_records failed: {e}"))
            .iter()
            .map(Rec::from)
            .collect();
        let theirs: Vec<Rec> = json_array(want, "records").iter().map(rec_from_json).collect();
        assert_eq!(ours, theirs, "{at} ({}): records differ", batch.compression().name());
        codecs_seen.push(batch.compression());
    }
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        assert!(
            codecs_seen.contains(&codec),
            "{context}: no {} batch was built",
            codec.name()
        );
    }
}

/// kafka-python's reader sees exactly the batches and records that were built.
fn assert_kafka_python_reads(log_files: &[std::path::PathBuf], expected: &Value, context: &str) {
    let mut read_batches = Vec::new();
    let mut file_bytes = 0;
    for file in log_files {
        let read = kafka_python_read(file);
        assert_eq!(
            json_i64(&read, "valid_bytes"),
            json_i64(&read, "file_bytes"),
            "{context}: kafka-python found bytes after the last whole batch of {}",
            file.display()
        );
        file_bytes += json_i64(&read, "file_bytes");
        read_batches.extend(json_array(&read, "batches").iter().cloned());
    }
    let want = expected_batches(expected);
    let want_bytes: i64 = want.iter().map(|b| json_i64(b, "size_bytes")).sum();
    assert_eq!(
        file_bytes, want_bytes,
        "{context}: segment files hold other bytes than the batches"
    );
    assert_eq!(
        read_batches.len(),
        want.len(),
        "{context}: kafka-python read another number of batches"
    );
    for (got, want) in read_batches.iter().zip(want) {
        let at = format!(
            "{context}: kafka-python, batch at offset {}",
            json_i64(want, "base_offset")
        );
        assert!(
            json_bool(got, "crc_valid"),
            "{at}: kafka-python says the CRC is invalid"
        );
        for field in [
            "base_offset",
            "last_offset",
            "leader_epoch",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "records_count",
            "size_bytes",
        ] {
            assert_eq!(got[field], want[field], "{at}: {field}");
        }
        for field in [
            "compression",
            "is_transactional",
            "is_control",
            "control_type",
            "coordinator_epoch",
        ] {
            assert_eq!(got[field], want[field], "{at}: {field}");
        }
        let got_recs: Vec<Rec> = json_array(got, "records").iter().map(rec_from_json).collect();
        let want_recs: Vec<Rec> = json_array(want, "records").iter().map(rec_from_json).collect();
        assert_eq!(got_recs, want_recs, "{at}: records differ");
    }
}

/// Producer and transaction state of a log holding the built batches.
fn assert_transaction_state(log: &PartitionLog, expected: &Value, context: &str) {
    let txns = &expected["transactions"];
    let leo = json_i64(expected, "log_end_offset");
    assert_eq!(log.log_end_offset(), leo, "{context}: log end offset");
    assert_eq!(
        log.last_stable_offset(),
        json_i64(txns, "last_stable_offset"),
        "{context}: last stable offset (an open transaction must hold it back)"
    );
    let want_open: Vec<(i64, i64)> = json_array(txns, "open")
        .iter()
        .map(|t| (json_i64(t, "producer_id"), json_i64(t, "first_offset")))
        .collect();
    let open: Vec<(i64, i64)> = log.producer_state().ongoing_transactions().collect();
    assert_eq!(open, want_open, "{context}: ongoing transactions");

    let want_aborted: Vec<AbortedTxn> = json_array(txns, "aborted")
        .iter()
        .map(|t| AbortedTxn {
            producer_id: json_i64(t, "producer_id"),
            first_offset: json_i64(t, "first_offset"),
            last_offset: json_i64(t, "last_offset"),
            last_stable_offset: json_i64(t, "last_stable_offset"),
        })
        .collect();
    assert_eq!(
        log.aborted_transactions(0, leo),
        want_aborted,
        "{context}: aborted transactions over the whole log"
    );
    for t in &want_aborted {
        // Fetches that start after its marker do not list it.
        assert!(
            !log.aborted_transactions(t.last_offset + 1, leo).contains(t),
            "{context}: aborted transaction listed for a fetch after its ABORT marker"
        );
    }
    // Committed transactions are never listed as aborted, and are closed.
    for t in json_array(txns, "committed") {
        let pid = json_i64(t, "producer_id");
        assert!(
            log.aborted_transactions(0, leo).iter().all(|a| a.producer_id != pid),
            "{context}: committed producer {pid} listed as aborted"
        );
        let entry = log
            .producer_state()
            .producer(pid)
            .unwrap_or_else(|| panic!("{context}: producer {pid} unknown"));
        assert_eq!(
            entry.current_txn_first_offset, None,
            "{context}: producer {pid}'s transaction still open after COMMIT"
        );
        let marker = expected_batches(expected)
            .iter()
            .find(|b| json_bool(b, "is_control") && json_i64(b, "producer_id") == pid)
            .expect("the committed transaction has a marker");
        assert_eq!(
            i64::from(entry.coordinator_epoch),
            json_i64(marker, "coordinator_epoch"),
            "{context}: coordinator epoch from the COMMIT marker of {pid}"
        );
    }
    for p in json_array(expected, "producers") {
        let pid = json_i64(p, "producer_id");
        let entry = log
            .producer_state()
            .producer(pid)
            .unwrap_or_else(|| panic!("{context}: producer {pid} unknown"));
        assert_eq!(
            i64::from(entry.producer_epoch),
            json_i64(p, "producer_epoch"),
            "{context}: epoch of {pid}"
        );
        assert_eq!(
            i64::from(entry.last_sequence),
            json_i64(p, "last_sequence"),
            "{context}: last sequence of {pid}"
        );
        assert_eq!(
            entry.last_offset,
            json_i64(p, "last_offset"),
            "{context}: last offset of {pid}"
        );
    }
}

/// What a READ_COMMITTED Fetch does: read whole batches from `offset` (one
/// segment's worth at most, as `read` returns), then list the aborted
/// transactions overlapping [offset, offset after the last batch read).
/// Every fetch that starts inside an aborted transaction must list it, or a
/// READ_COMMITTED consumer delivers the aborted records.
fn assert_aborted_txns_listed_for_fetches_inside_them(log: &PartitionLog, expected: &Value, context: &str) {
    let aborted = json_array(&expected["transactions"], "aborted");
    assert!(!aborted.is_empty(), "the scenario has an aborted transaction");
    for t in aborted {
        let (pid, first, last) = (
            json_i64(t, "producer_id"),
            json_i64(t, "first_offset"),
            json_i64(t, "last_offset"),
        );
        for offset in first..last {
            let slice = log.read(offset, usize::MAX / 2).expect("read");
            let bytes = slice.to_vec().expect("read slice");
            let upper = split_batches(&bytes)
                .last()
                .map_or(offset, |(_, b)| batch_view(b).next_offset());
            let listed = log.aborted_transactions(offset, upper);
            assert!(
                listed
                    .iter()
                    .any(|a| a.producer_id == pid && a.first_offset == first && a.last_offset == last),
                "{context}: a READ_COMMITTED fetch at {offset} reads [{offset}, {upper}) but the aborted \
                 transaction of producer {pid} [{first}, {last}] is not listed (got {listed:?}; segments at {:?})",
                log.segment_base_offsets()
            );
        }
    }
}

/// Reads at every offset land on the batch holding it, or on the next batch
/// for an offset in a gap, and return the stored bytes from there.
fn assert_reads_by_offset(log: &PartitionLog, built: &Built, context: &str) {
    let leo = log.log_end_offset();
    for offset in 0..leo {
        let (index, (base, bytes)) = built
            .batches
            .iter()
            .enumerate()
            .find(|(_, (_, b))| batch_view(b).last_offset() >= offset)
            .expect("offset below the log end");
        let slice = log
            .read(offset, bytes.len())
            .unwrap_or_else(|e| panic!("{context}: read({offset}): {e}"));
        assert_eq!(
            slice.first_offset, *base,
            "{context}: read({offset}) starts at the wrong batch"
        );
        assert_eq!(
            &slice.to_vec().expect("read slice"),
            bytes,
            "{context}: read({offset}) bytes (batch #{index})"
        );
    }
    let all = log.read(0, usize::MAX / 2).expect("read everything");
    let all_bytes = all.to_vec().expect("read slice");
    // One segment holds everything unless the log rolled: then `read` stops at the segment end.
    assert!(
        built.bytes.starts_with(&all_bytes) && !all_bytes.is_empty(),
        "{context}: read(0) is not a prefix"
    );
}

fn append_in_runs(log: &mut PartitionLog, built: &Built, run_lengths: &[usize], context: &str) {
    let mut i = 0;
    let mut runs = run_lengths.iter().cycle();
    while i < built.batches.len() {
        let n = (*runs.next().expect("cycle")).min(built.batches.len() - i);
        let run: Vec<u8> = built.batches[i..i + n]
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect();
        let first = built.batches[i].0;
        let last = batch_view(&built.batches[i + n - 1].1).last_offset();
        let info = log
            .append(&run, 1_000 + i as u64)
            .unwrap_or_else(|e| panic!("{context}: append of batches {i}..{}: {e}", i + n));
        assert_eq!(
            (info.first_offset, info.last_offset),
            (first, last),
            "{context}: append info offsets"
        );
        assert_eq!(info.batches as usize, n, "{context}: append info batches");
        assert_eq!(info.bytes as usize, run.len(), "{context}: append info bytes");
        assert_eq!(
            log.log_end_offset(),
            last + 1,
            "{context}: log end after appending batches {i}..{}",
            i + n
        );
        i += n;
    }
}

#[test]
fn kafka_python_batches_are_framed_and_validated_by_us() {
    let built = build();
    let range = validate_batches(
        &built.bytes,
        &Validation {
            next_offset: 0,
            max_batch_bytes: MAX_BATCH_BYTES,
            fetch_epoch: Some(2),
            last_epoch: None,
        },
    );
    assert_eq!(range.error, None, "our validation rejects a batch kafka-python built");
    assert_eq!(range.valid_bytes, built.bytes.len());
    assert_eq!(range.batches as usize, built.batches.len());
    assert_eq!(range.next_offset, json_i64(&built.expected, "log_end_offset"));
    let positions: Vec<usize> = BatchIter::new(&built.bytes, MAX_BATCH_BYTES)
        .map(|r| r.expect("framed").0)
        .collect();
    assert_eq!(positions.len(), built.batches.len());
    assert_our_decoding_matches(&built.batches, &built.expected, "kafka-python's bytes");
}

#[test]
fn kafka_python_batches_round_trip_through_our_log_for_every_codec() {
    let built = build();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("kafka-python-0");
    let mut log = open_log(&dir, LogConfig::default());

    let info = log
        .append(&built.bytes, 1_000)
        .expect("append all kafka-python batches in one call");
    let leo = json_i64(&built.expected, "log_end_offset");
    assert_eq!((info.first_offset, info.last_offset), (0, leo - 1));
    assert_eq!(info.batches as usize, built.batches.len());
    let records: i64 = expected_batches(&built.expected)
        .iter()
        .map(|b| json_i64(b, "records_count"))
        .sum();
    assert_eq!(info.records as i64, records);
    assert_eq!(info.bytes as usize, built.bytes.len());

    // Stored byte for byte, at their own offsets.
    let stored = stored_batches(&log);
    assert_eq!(stored.len(), built.batches.len(), "stored batch count");
    for ((got_base, got), (want_base, want)) in stored.iter().zip(&built.batches) {
        assert_eq!(got_base, want_base, "stored batch offset");
        assert!(got == want, "batch at offset {want_base} was not stored byte for byte");
    }
    assert_eq!(
        concat_batches(&stored),
        built.bytes,
        "stored bytes differ from the appended bytes"
    );
    assert_reads_by_offset(&log, &built, "one append");

    assert_our_decoding_matches(&stored, &built.expected, "stored in our log");
    assert_transaction_state(&log, &built.expected, "after one append");
    assert_aborted_txns_listed_for_fetches_inside_them(&log, &built.expected, "one segment");

    log.close(2_000).expect("clean close");
    let files = segment_files(&dir);
    assert_eq!(files.len(), 1, "one segment expected: {files:?}");
    assert!(files[0].ends_with("00000000000000000000.log"));
    assert_eq!(
        std::fs::read(&files[0]).expect("read segment"),
        built.bytes,
        "segment file is not the batches"
    );
    assert_kafka_python_reads(&files, &built.expected, "one append");

    // The state survives a clean close and reopen.
    let (log, _report) = PartitionLog::open(OpenOptions {
        dir: dir.clone(),
        topic_id: None,
        config: LogConfig::default(),
        recovery_point: leo,
        log_start_offset: 0,
        clean_shutdown: true,
        now_ms: 3_000,
    })
    .expect("reopen");
    assert_eq!(concat_batches(&stored_batches(&log)), built.bytes, "bytes after reopen");
    assert_transaction_state(&log, &built.expected, "after clean close and reopen");
}

#[test]
fn kafka_python_batches_appended_in_runs_across_segments_are_stored_byte_for_byte() {
    let built = build();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("kafka-python-runs-0");
    // Small segments, so runs of batches roll the log several times.
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 512,
        ..LogConfig::default()
    };
    let mut log = open_log(&dir, config);
    append_in_runs(&mut log, &built, &[1, 3, 2, 5, 1, 4], "runs");

    let stored = stored_batches(&log);
    assert_eq!(
        stored, built.batches,
        "batches stored in runs differ from kafka-python's"
    );
    assert!(log.segment_base_offsets().len() > 1, "the log was expected to roll");
    assert_reads_by_offset(&log, &built, "runs");
    assert_our_decoding_matches(&stored, &built.expected, "stored in runs");
    assert_transaction_state(&log, &built.expected, "after appends in runs");

    let segments = log.segment_base_offsets();
    log.close(9_000).expect("clean close");
    let files = segment_files(&dir);
    assert_eq!(files.len(), segments.len(), "one .log per segment");
    let on_disk: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).expect("read segment"))
        .collect();
    assert_eq!(on_disk, built.bytes, "segment files together are not the batches");
    for (file, base) in files.iter().zip(&segments) {
        assert_eq!(file.file_name().unwrap().to_string_lossy(), format!("{base:020}.log"));
    }
    assert_kafka_python_reads(&files, &built.expected, "runs across segments");
}

#[test]
fn kafka_python_batches_appended_one_by_one_are_stored_byte_for_byte() {
    let built = build();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("kafka-python-single-0");
    let mut log = open_log(&dir, LogConfig::default());
    append_in_runs(&mut log, &built, &[1], "one by one");
    assert_eq!(stored_batches(&log), built.batches);
    assert_transaction_state(&log, &built.expected, "after appends one by one");
    log.close(5_000).expect("clean close");
    let files = segment_files(&dir);
    assert_eq!(std::fs::read(&files[0]).expect("read segment"), built.bytes);
    assert_kafka_python_reads(&files, &built.expected, "one by one");
}

#[test]
fn aborted_transaction_spanning_a_segment_roll_is_listed_for_read_committed_fetches() {
    // kafka-python's producer 2000 writes offsets 53-54 and 58-59, then its
    // ABORT marker at 60. With 4 KiB segments the log rolls between the
    // transaction's first batch and its marker, so the marker (and thus the
    // .txnindex entry) lives in a later segment than the records a fetch at
    // 53 or 54 reads. Kafka keeps collecting aborted transactions from
    // later segments until one's last stable offset reaches the fetch's
    // upper bound; so must we.
    let built = build();
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().join("kafka-python-txn-roll-0");
    let config = LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 512,
        ..LogConfig::default()
    };
    let mut log = open_log(&dir, config);
    append_in_runs(&mut log, &built, &[1, 3, 2, 5, 1, 4], "runs");
    let segments = log.segment_base_offsets();
    let txn = &json_array(&built.expected["transactions"], "aborted")[0];
    let (first, marker) = (json_i64(txn, "first_offset"), json_i64(txn, "last_offset"));
    let segment_of = |o: i64| segments.iter().rev().find(|&&b| b <= o).copied();
    assert_ne!(
        segment_of(first),
        segment_of(marker),
        "scenario: the transaction must span a roll ({segments:?})"
    );
    assert_aborted_txns_listed_for_fetches_inside_them(&log, &built.expected, "transaction across a segment roll");
}
