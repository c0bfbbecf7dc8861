//! The `ringmirror` binary as an operator runs it: `selfcheck` (kill -9 of a
//! writer, torn tail, recovery, verification) and `dump-log` on segment
//! files holding data, transaction markers and a torn tail.

use std::process::Command;

use ringmirror_dataplane::batch::{BatchBuilder, BuildRecord, ControlType, encode_mirror_pid_reset_value};
use ringmirror_dataplane::log::{LogConfig, OpenOptions, PartitionLog};

fn ringmirror() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ringmirror"))
}

#[test]
fn selfcheck_survives_a_killed_writer_and_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let out = ringmirror()
        .args(["selfcheck", "--size-mb", "12", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "selfcheck failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "writer killed (signal: 9",
        "tore ",
        "bytes truncated (partial batch at the tail)",
        "batches byte-for-byte",
        "reopened without a scan",
        "selfcheck passed",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
}

#[test]
fn dump_log_prints_batches_markers_and_the_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = PartitionLog::open(OpenOptions {
        dir: dir.path().join("t-0"),
        topic_id: None,
        config: LogConfig::default(),
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: 0,
    })
    .unwrap();
    let data = BatchBuilder {
        producer_id: 7,
        producer_epoch: 1,
        base_sequence: 0,
        transactional: true,
        partition_leader_epoch: 3,
        records: vec![
            BuildRecord {
                timestamp: 1000,
                key: Some(b"alpha".to_vec()),
                value: Some(b"one".to_vec()),
                headers: vec![("trace".into(), Some(b"x".to_vec()))],
            },
            BuildRecord {
                timestamp: 1001,
                key: None,
                value: Some(b"two".to_vec()),
                headers: vec![],
            },
        ],
        ..BatchBuilder::default()
    }
    .build();
    let abort = BatchBuilder::control_marker(
        2,
        3,
        7,
        1,
        ControlType::Abort,
        BatchBuilder::end_txn_marker_value(9),
        1002,
    )
    .build();
    let reset = BatchBuilder::control_marker(
        3,
        3,
        -1,
        -1,
        ControlType::MirrorPidReset,
        encode_mirror_pid_reset_value("src-cluster"),
        1003,
    )
    .build();
    for b in [&data, &abort, &reset] {
        log.append(b, 0).unwrap();
    }
    log.close(0).unwrap();
    let segment = dir.path().join("t-0/00000000000000000000.log");
    // A torn half-batch after the data, as a crash leaves it.
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend_from_slice(&data[..30]);
    std::fs::write(&segment, &bytes).unwrap();

    let out = ringmirror()
        .args(["dump-log", "--deep"])
        .arg(&segment)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("Dumping "), "{stdout}");
    assert_eq!(lines[1], "Log starting offset: 0");
    assert!(
        lines[2].starts_with(
            "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 \
        producerEpoch: 1 partitionLeaderEpoch: 3 isTransactional: true isControl: false position: 0"
        ),
        "{}",
        lines[2]
    );
    assert!(
        lines[2].contains("compresscodec: none") && lines[2].ends_with("isvalid: true"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3]
            .contains("offset: 0 CreateTime: 1000 keySize: 5 valueSize: 3 headerKeys: [trace] key: alpha payload: one"),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].contains("offset: 1 CreateTime: 1001 keySize: -1 valueSize: 3 headerKeys: [] key: null payload: two")
    );
    assert!(
        lines[5].contains("isControl: true") && lines[5].ends_with("controlType: ABORT"),
        "{}",
        lines[5]
    );
    assert_eq!(lines[6], "| offset: 2 endTxnMarker: ABORT coordinatorEpoch: 9");
    assert!(lines[7].ends_with("controlType: MIRROR_PID_RESET"), "{}", lines[7]);
    assert_eq!(lines[8], "| offset: 3 mirrorPidReset sourceClusterId: src-cluster");
    assert_eq!(
        lines[9],
        format!("Found 30 bytes of a partial batch at the end of {}", segment.display())
    );

    // A corrupt CRC is shown, not hidden.
    let mut bytes = std::fs::read(&segment).unwrap();
    let last_of_first = data.len() - 1;
    bytes[last_of_first] ^= 1;
    std::fs::write(&segment, &bytes).unwrap();
    let out = ringmirror().arg("dump-log").arg(&segment).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().nth(2).unwrap().ends_with("isvalid: false"), "{stdout}");
}

#[test]
fn dump_log_reports_a_missing_file_clearly() {
    let out = ringmirror()
        .args(["dump-log", "/nonexistent/00000000000000000000.log"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("open /nonexistent/00000000000000000000.log"));
}
