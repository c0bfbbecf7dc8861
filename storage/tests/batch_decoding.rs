//! Record batch framing, validation and decoding: every kind of bad input
//! gets its typed error (naming the position and reason), and no input —
//! random or a mutated valid batch — makes any decoder panic.

use proptest::prelude::*;
use ringmirror_storage::batch::{
    BATCH_HEADER_BYTES, BatchBuilder, BatchErrorKind, BatchIter, BuildRecord, ControlRecord, ControlType, RecordBatch,
    Validation, decode_records, encode_mirror_pid_reset_value, validate_batches,
};

fn batch(base_offset: i64, epoch: i32, records: usize) -> Vec<u8> {
    BatchBuilder {
        base_offset,
        partition_leader_epoch: epoch,
        records: (0..records)
            .map(|i| BuildRecord {
                timestamp: 1000 + i as i64,
                key: Some(vec![b'k', i as u8]),
                value: Some(vec![i as u8; 100]),
                headers: vec![("h1".into(), Some(b"v".to_vec())), ("h2".into(), None)],
            })
            .collect(),
        ..BatchBuilder::default()
    }
    .build()
}

fn validation(next_offset: i64) -> Validation {
    Validation {
        next_offset,
        max_batch_bytes: 1 << 20,
        fetch_epoch: None,
        last_epoch: None,
    }
}

fn first_error(buf: &[u8], v: &Validation) -> (usize, BatchErrorKind) {
    let e = validate_batches(buf, v).error.expect("an error");
    (e.position, e.kind)
}

#[test]
fn header_fields_read_back_as_built() {
    let bytes = BatchBuilder {
        base_offset: 42,
        partition_leader_epoch: 7,
        producer_id: 1234,
        producer_epoch: 3,
        base_sequence: 10,
        transactional: true,
        records: vec![
            BuildRecord {
                timestamp: 5,
                ..Default::default()
            };
            4
        ],
        ..BatchBuilder::default()
    }
    .build();
    let b = RecordBatch::new(&bytes[..]).unwrap();
    assert_eq!((b.base_offset(), b.last_offset(), b.next_offset()), (42, 45, 46));
    assert_eq!((b.partition_leader_epoch(), b.magic(), b.records_count()), (7, 2, 4));
    assert_eq!(
        (
            b.producer_id(),
            b.producer_epoch(),
            b.base_sequence(),
            b.last_sequence()
        ),
        (1234, 3, 10, 13)
    );
    assert!(b.is_transactional() && !b.is_control() && b.crc_is_valid());
    assert_eq!(b.size_bytes(), bytes.len());
}

#[test]
fn records_decode_with_keys_headers_and_offsets() {
    let bytes = batch(100, 0, 3);
    let records = decode_records(&RecordBatch::new(&bytes[..]).unwrap(), 1 << 20).unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!((records[2].offset, records[2].timestamp), (102, 1002));
    assert_eq!(records[1].key.as_deref(), Some(&[b'k', 1][..]));
    assert_eq!(records[0].headers.len(), 2);
    assert_eq!(records[0].headers[1].value, None);
}

#[test]
fn iterator_stops_cleanly_at_a_partial_batch() {
    let mut buf = batch(0, 0, 2);
    let second = batch(2, 0, 2);
    buf.extend_from_slice(&second[..second.len() - 10]);
    let mut iter = BatchIter::new(&buf, 1 << 20);
    assert_eq!(iter.next().unwrap().unwrap().1.base_offset(), 0);
    assert!(iter.next().is_none());
    assert_eq!(iter.remaining().len(), second.len() - 10);
    let range = validate_batches(&buf, &validation(0));
    assert_eq!((range.batches, range.next_offset, range.error), (1, 2, None));
    // A header cut short is a partial batch too, not an error.
    assert!(BatchIter::new(&second[..10], 1 << 20).next().is_none());
}

#[test]
fn truncated_batch_is_a_typed_error_for_a_whole_batch_view() {
    let bytes = batch(0, 0, 2);
    let e = RecordBatch::new(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(matches!(e.kind, BatchErrorKind::Truncated { .. }), "{e}");
}

#[test]
fn oversized_and_undersized_lengths_are_typed_errors() {
    let good = batch(0, 0, 1);
    let mut huge = batch(1, 0, 1);
    huge[8..12].copy_from_slice(&(64i32 << 20).to_be_bytes());
    let mut buf = good.clone();
    buf.extend_from_slice(&huge);
    let (position, kind) = first_error(&buf, &validation(0));
    assert_eq!(position, good.len(), "error names the byte position");
    assert!(matches!(kind, BatchErrorKind::LengthTooLarge { length, limit: 1048576 } if length == 64 << 20));
    let mut tiny = batch(0, 0, 1);
    tiny[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert!(matches!(
        first_error(&tiny, &validation(0)).1,
        BatchErrorKind::LengthTooSmall { length: 10, .. }
    ));
}

#[test]
fn wrong_magic_and_bad_crc_are_typed_errors() {
    let mut old = batch(0, 0, 1);
    old[16] = 1;
    assert_eq!(
        first_error(&old, &validation(0)).1,
        BatchErrorKind::WrongMagic { magic: 1 }
    );
    let mut flipped = batch(0, 0, 1);
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    assert!(matches!(
        first_error(&flipped, &validation(0)).1,
        BatchErrorKind::CrcMismatch { .. }
    ));
    let e = validate_batches(&flipped, &validation(0)).error.unwrap();
    assert!(e.to_string().contains("CRC32C mismatch"), "{e}");
    assert_eq!(e.base_offset, Some(0));
}

#[test]
fn offset_and_epoch_rules() {
    let buf = batch(5, 2, 1);
    assert!(matches!(
        first_error(&buf, &validation(6)).1,
        BatchErrorKind::OffsetBelowExpected {
            base_offset: 5,
            expected: 6
        }
    ));
    let v = Validation {
        fetch_epoch: Some(1),
        ..validation(0)
    };
    assert_eq!(
        first_error(&buf, &v).1,
        BatchErrorKind::EpochAboveFetchEpoch {
            epoch: 2,
            fetch_epoch: 1
        }
    );
    let v = Validation {
        last_epoch: Some(3),
        ..validation(0)
    };
    assert_eq!(
        first_error(&buf, &v).1,
        BatchErrorKind::EpochDecreased { epoch: 2, previous: 3 }
    );
    // Gaps (compaction) are fine.
    let mut gappy = batch(0, 0, 2);
    gappy.extend(batch(100, 0, 2));
    let range = validate_batches(&gappy, &validation(0));
    assert_eq!((range.batches, range.next_offset, range.error), (2, 102, None));
}

#[test]
fn control_records_decode() {
    let abort = BatchBuilder::control_marker(
        9,
        1,
        77,
        2,
        ControlType::Abort,
        BatchBuilder::end_txn_marker_value(4),
        5,
    )
    .build();
    let c = ControlRecord::decode(&RecordBatch::new(&abort[..]).unwrap()).unwrap();
    assert_eq!((c.control_type, c.coordinator_epoch), (ControlType::Abort, Some(4)));
    let reset = BatchBuilder::control_marker(
        10,
        1,
        -1,
        -1,
        ControlType::MirrorPidReset,
        encode_mirror_pid_reset_value("c-1").unwrap(),
        5,
    )
    .build();
    let c = ControlRecord::decode(&RecordBatch::new(&reset[..]).unwrap()).unwrap();
    assert_eq!(c.control_type, ControlType::MirrorPidReset);
    assert_eq!(c.source_cluster_id.as_deref(), Some("c-1"));
    let data = batch(0, 0, 1);
    assert!(ControlRecord::decode(&RecordBatch::new(&data[..]).unwrap()).is_err());
}

/// Runs every decoder over `bytes`; only returns or errors are allowed.
fn decode_everything(bytes: &[u8]) {
    let _ = validate_batches(bytes, &validation(0));
    for (_, b) in BatchIter::new(bytes, 1 << 20).flatten() {
        let _ = decode_records(&b, 1 << 20);
        let _ = ControlRecord::decode(&b);
        let _ = (
            b.last_offset(),
            b.next_offset(),
            b.last_sequence(),
            b.compression().name(),
        );
    }
}

proptest! {
    #[test]
    fn decoders_never_panic_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        decode_everything(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_mutated_batches(
        mutations in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        control in any::<bool>(),
        codec in 0u8..8,
    ) {
        let mut bytes = if control {
            BatchBuilder::control_marker(0, 0, 1, 0, ControlType::MirrorPidReset, encode_mirror_pid_reset_value("x").unwrap(), 0)
                .build()
        } else {
            batch(0, 0, 3)
        };
        // Claim a compression codec over uncompressed bytes, as a hostile peer might.
        bytes[22] = (bytes[22] & !7) | (codec & 7);
        for (at, value) in mutations {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        // Keep the CRC valid for half the cases so decoding goes past validation.
        if control {
            let crc = crc32c_of(&bytes[21..]);
            bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        let cut = BATCH_HEADER_BYTES.min(bytes.len()) + cut.index(bytes.len() - BATCH_HEADER_BYTES.min(bytes.len()) + 1);
        decode_everything(&bytes[..cut.min(bytes.len())]);
    }
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}
