//! `ringmirror demo` as a user runs it: the binary generates a small
//! source, serves it with one agent, mirrors it with another and reports
//! the mirror identical and the rate it mirrored at; the verification it
//! ran notices a single changed byte; `--keep-running` leaves a healthy
//! pair running; the batches it compresses decode to what was built;
//! `--size` takes binary and decimal suffixes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ringmirror::tools::demo::{Codec, compress_batch, parse_size, verify};
use ringmirror_kafka_harness::ChildGuard;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord, Compression, RecordBatch, decode_records};

/// Bounds each wait of the kept-running test (start, health, stop).
const KEEP_RUNNING_WAIT: Duration = Duration::from_secs(60);
/// How long the kept-running pair is watched once healthy: the bug it
/// guards against logged a WARN line every second.
const KEEP_RUNNING_WATCH: Duration = Duration::from_secs(3);

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

/// The `ringmirror status --json` answer of the agent at `admin`.
fn status(admin: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ringmirror"))
        .args(["status", "--json", "--admin", admin])
        .output()
        .unwrap();
    assert!(out.status.success(), "status: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Why the partitions in a status answer are not all mirroring, caught up
/// at the source's end, without an error (`None`: they are).
fn unhealthy(status: &serde_json::Value, partitions: usize) -> Option<String> {
    let rows = status["partitions"].as_array().expect("partitions");
    if rows.len() != partitions {
        return Some(format!("{} partitions", rows.len()));
    }
    rows.iter()
        .find(|p| {
            p["state"] != "MIRRORING"
                || !p["error"].is_null()
                || p["source_offset"].as_i64() != p["destination_offset"].as_i64()
                || p["source_offset"].as_i64() <= Some(0)
        })
        .map(|p| p.to_string())
}

/// The WARN lines of the demo's log so far.
fn warnings(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains(" WARN "))
        .map(str::to_owned)
        .collect()
}

/// `--keep-running` starts both agents again on the ports they had: the
/// mirror agent, which keeps the source address its mirror was stored
/// with, fetches from the restarted source (status: every partition
/// MIRRORING, caught up, no error, at its admin API) and logs no warning
/// while watched nor any warning twice; SIGINT stops both.
#[test]
fn kept_running_pair_keeps_its_ports_and_mirrors_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let mut demo = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_ringmirror"))
            .args(["demo", "--size", "2MiB", "--keep-running", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap()),
        "ringmirror demo --keep-running",
    )
    .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = demo.child().stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // What the demo prints, up to the kept-running pair's admin API.
    let mut printed = Vec::new();
    let deadline = Instant::now() + KEEP_RUNNING_WAIT;
    while !printed.iter().any(|l: &String| l.starts_with("try:")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => printed.push(line),
            Err(e) => panic!(
                "{e}: the demo printed {printed:#?}; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
        }
    }
    let after = |prefix: &str| -> String {
        let line = printed.iter().find_map(|l| l.trim_start().strip_prefix(prefix));
        let line = line.unwrap_or_else(|| panic!("no {prefix:?} line in {printed:#?}"));
        line.split_whitespace().next().unwrap().trim_end_matches(';').to_owned()
    };
    let first_source = after("source agent serving source/ on ");
    assert_eq!(after("source agent  "), first_source, "the source agent moved");
    let admin = after("admin API     ");

    // Healthy: every partition mirroring and caught up again, which needs
    // a fetch from the restarted source agent.
    let deadline = Instant::now() + KEEP_RUNNING_WAIT;
    let mut answer = status(&admin);
    while let Some(why) = unhealthy(&answer, 8) {
        assert!(
            Instant::now() < deadline,
            "not healthy: {why}; WARN lines: {:#?}",
            warnings(&log)
        );
        std::thread::sleep(Duration::from_millis(100));
        answer = status(&admin);
    }
    // And staying so, with no warning logged, while watched.
    let warned = warnings(&log);
    let watched = Instant::now();
    while watched.elapsed() < KEEP_RUNNING_WATCH {
        let answer = status(&admin);
        assert_eq!(unhealthy(&answer, 8), None, "{answer}");
        let new: Vec<String> = warnings(&log).into_iter().skip(warned.len()).collect();
        assert!(new.is_empty(), "WARN lines while kept running: {new:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Nor, anywhere in its log, a warning said again and again.
    let mut said = std::collections::BTreeMap::<String, usize>::new();
    for line in warnings(&log) {
        let message = line.split_once(" WARN ").map_or(line.clone(), |(_, m)| m.to_owned());
        *said.entry(message).or_default() += 1;
    }
    said.retain(|_, count| *count > 1);
    assert!(said.is_empty(), "repeated WARN lines: {said:#?}");

    demo.signal(libc::SIGINT);
    let exit = demo.wait_timeout(KEEP_RUNNING_WAIT).expect("the demo stops on SIGINT");
    assert!(exit.success(), "{exit}; WARN lines: {:#?}", warnings(&log));
    // The rest of its output, up to the end of its stdout.
    let mut rest = Vec::new();
    while let Ok(line) = lines.recv_timeout(KEEP_RUNNING_WAIT) {
        rest.push(line);
    }
    assert!(
        rest.iter().any(|l| l == "signal received; stopping both agents"),
        "{rest:#?}"
    );
}
