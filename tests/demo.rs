//! `ringmirror demo` as a user runs it: the binary generates a small
//! source, serves it with one agent, mirrors it with another and reports
//! the mirror identical and the rate it mirrored at; the verification it
//! ran notices a single changed byte; the batches it compresses decode to
//! what was built; `--size` takes binary and decimal suffixes.

use std::process::Command;
use std::time::{Duration, Instant};

use ringmirror::demo::{Codec, compress_batch, parse_size, verify};
use ringmirror_dataplane::batch::{BatchBuilder, BuildRecord, Compression, RecordBatch, decode_records};

#[test]
fn demo_mirrors_its_generated_source_and_verifies_it_identical() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ringmirror"))
        .args(["demo", "--size", "8MiB", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "source: 3 topics, 8 partitions",
        " aborted, 1 open",
        "offsets removed",
        "both agents stopped cleanly",
        "verified: identical",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
    // The rate is the mirroring's own: its window is shorter than the one
    // that includes both agents' start-up.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("mirrored "))
        .expect("a mirrored line");
    let number_before = |marker: &str| -> f64 {
        let head = &line[..line.find(marker).unwrap_or_else(|| panic!("{marker:?} in {line:?}"))];
        head.rsplit([' ', '(']).next().unwrap().parse().unwrap()
    };
    let (mib_s, mirroring_s, with_start_s) = (
        number_before(" MiB/s"),
        number_before(" s from the first partition placed"),
        number_before(" s with both agents' start-up"),
    );
    assert!(mib_s > 0.0 && mirroring_s > 0.0, "{line}");
    assert!(mirroring_s <= with_start_s, "{line}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the demo took {:?}",
        started.elapsed()
    );

    // The same verification, run again on what the demo left, agrees — and
    // a single byte changed in a mirrored batch is reported.
    let (source, mirror) = (dir.path().join("source"), dir.path().join("mirror"));
    let v = verify(&source, &mirror).expect("verify");
    assert!(v.differences.is_empty(), "{:?}", v.differences);
    assert_eq!(v.partitions, 8);
    let segment = mirror.join("orders-0").join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    // Inside the first batch's records, past its 61-byte header.
    bytes[100] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    let v = verify(&source, &mirror).expect("verify");
    assert_eq!(v.differences.len(), 1, "{:?}", v.differences);
    assert!(
        v.differences[0].starts_with("orders-0: batch at offset 0 differs")
            && v.differences[0].contains("first difference at byte Some(100)"),
        "{:?}",
        v.differences
    );
}

#[test]
fn size_takes_binary_and_decimal_suffixes() {
    assert_eq!(parse_size("256MiB"), Ok(256 << 20));
    assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    assert_eq!(parse_size("8m"), Ok(8 << 20));
    assert_eq!(parse_size("100MB"), Ok(100_000_000));
    assert_eq!(parse_size("2097152"), Ok(2 << 20));
    for bad in ["", "MiB", "12", "512KiB", "5TiB", "1.5GiB", "-1MiB"] {
        assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn compressed_batches_decode_to_the_records_built() {
    let built = BatchBuilder {
        base_offset: 42,
        partition_leader_epoch: 3,
        producer_id: 7,
        producer_epoch: 1,
        base_sequence: 5,
        transactional: true,
        records: (0..50)
            .map(|i| BuildRecord {
                timestamp: 1_700_000_000_000 + i,
                key: Some(format!("key-{}", i % 7).into_bytes()),
                value: (i % 9 != 0).then(|| format!("value {i} ").repeat(1 + i as usize % 30).into_bytes()),
                headers: vec![("h".into(), Some(vec![i as u8]))],
            })
            .collect(),
        ..BatchBuilder::default()
    }
    .build();
    let plain = RecordBatch::new(&built[..]).unwrap();
    let expected = decode_records(&plain, 1 << 20).unwrap();
    for (codec, compression) in [(Codec::Lz4, Compression::Lz4), (Codec::Gzip, Compression::Gzip)] {
        let bytes = compress_batch(&built, codec).unwrap();
        let batch = RecordBatch::new(&bytes[..]).unwrap();
        assert!(batch.crc_is_valid(), "{codec:?}: CRC");
        assert!(bytes.len() < built.len(), "{codec:?}: smaller than the plain batch");
        assert_eq!(batch.compression(), compression);
        assert!(batch.is_transactional(), "{codec:?}: other attributes kept");
        assert_eq!(
            (
                batch.base_offset(),
                batch.last_offset(),
                batch.producer_id(),
                batch.base_sequence()
            ),
            (42, 91, 7, 5),
            "{codec:?}: header fields kept"
        );
        assert_eq!(decode_records(&batch, 1 << 20).unwrap(), expected, "{codec:?}: records");
    }
}
