//! The `ringmirror` binary as an operator runs it: `selfcheck` (kill -9 of a
//! writer, torn tail, recovery, verification) and `dump-log` on segment
//! files holding data, transaction markers and a torn tail.

use std::process::Command;

use ringmirror_storage::batch::{BatchBuilder, BuildRecord, ControlType, encode_mirror_pid_reset_value};
use ringmirror_storage::log::{LogConfig, OpenOptions, PartitionLog};

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
        encode_mirror_pid_reset_value("src-cluster").unwrap(),
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

// ---- The admin CLI (`mirror …`, `status`) against an admin API server in
// front of a scripted coordinator: what is tested here is the CLI's mapping
// of commands onto routes and of answers onto output; the coordinator
// itself is tested end to end elsewhere.

mod admin {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use ringmirror_control::admin::http::AdminServer;
    use ringmirror_control::admin::{
        AdminAnswer, AdminCall, AdminError, AdminRequest, MirrorDescription, MirrorSummary, PartitionView,
        TopicPartitionName,
    };
    use ringmirror_control::metadata_sync::deletion::TopicCheck;
    use ringmirror_control::mirror::MirrorConfig;

    use super::ringmirror;

    struct Scripted {
        server: AdminServer,
        seen: Arc<Mutex<Vec<AdminRequest>>>,
    }

    impl Scripted {
        fn url(&self) -> String {
            format!("http://{}", self.server.addr())
        }

        /// Runs `ringmirror <args> --admin <url>`: (exit code, stdout, stderr).
        fn run(&self, args: &[&str]) -> (i32, String, String) {
            let out = ringmirror()
                .args(args)
                .args(["--admin", &self.url()])
                .env_remove("RINGMIRROR_ADMIN")
                .output()
                .unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }

        fn seen(&self) -> Vec<AdminRequest> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    fn view(topic: &str, partition: i32, state: &str, source: i64, dest: i64, lag_s: f64) -> PartitionView {
        PartitionView {
            mirror: "dr".into(),
            topic: topic.into(),
            partition,
            topic_id: "00000000-0000-0000-0000-000000000009".into(),
            state: state.into(),
            source_offset: source,
            destination_offset: dest,
            lag_messages: if source < 0 { 0 } else { source - dest },
            lag_seconds: lag_s,
            last_mirror_epoch: -1,
            destination_leader_epoch: 10,
            retry_attempt: 0,
            error: (state == "FAILED").then(|| "source unreachable".into()),
        }
    }

    fn partitions() -> Vec<PartitionView> {
        vec![
            view("payments", 0, "FAILED", -1, 0, 0.0),
            view("orders", 1, "PAUSED", 120, 100, 12.25),
            view("orders", 0, "MIRRORING", 123456, 123456, 0.0),
        ]
    }

    fn config() -> MirrorConfig {
        let mut c: MirrorConfig = serde_json::from_str(
            r#"{"name": "dr", "bootstrap_servers": ["src-1:9092", "src-2:9092"], "topics": ["orders"]}"#,
        )
        .unwrap();
        c.topics_include = Some("pay.*".into());
        c
    }

    fn coordinator(request: &AdminRequest) -> Result<AdminAnswer, AdminError> {
        Ok(match request {
            AdminRequest::ListMirrors => AdminAnswer::Mirrors {
                mirrors: vec![
                    MirrorSummary {
                        name: "dr".into(),
                        bootstrap_servers: vec!["src-1:9092".into(), "src-2:9092".into()],
                        source_cluster_id: Some("c1".into()),
                        partitions: 3,
                        states: BTreeMap::from([("MIRRORING".into(), 1), ("PAUSED".into(), 1), ("FAILED".into(), 1)]),
                    },
                    MirrorSummary {
                        name: "backup-eu".into(),
                        bootstrap_servers: vec!["eu:9092".into()],
                        source_cluster_id: None,
                        partitions: 0,
                        states: BTreeMap::new(),
                    },
                ],
            },
            AdminRequest::DescribeMirror { mirror } if mirror == "dr" => AdminAnswer::Mirror {
                mirror: MirrorDescription {
                    config: config(),
                    source_cluster_id: Some("c1".into()),
                    created_ms: 1_709_210_096_000,
                    topics: vec!["orders".into(), "payments".into()],
                    partitions: partitions(),
                    last_sync_ms: None,
                    sync_error: None,
                    topic_configs_synced_ms: None,
                    topic_configs: BTreeMap::new(),
                    acls_synced_ms: None,
                    acls: String::new(),
                    topic_checks: vec![TopicCheck {
                        topic: "payments".into(),
                        topic_id: "0000002a-0000-0000-0000-000000000000".into(),
                        kind: "deleted".into(),
                        since_ms: 1_709_210_096_000,
                        round: 2,
                        rounds_min: 3,
                        confirm_ms: 120_000,
                        brokers: vec![1, 2],
                        new_topic_id: None,
                        by_id: true,
                        error_code: None,
                    }],
                    groups_synced_ms: Some(1_709_210_096_000),
                    groups: BTreeMap::from([("billing".to_string(), "synced: 2 committed, 0 unchanged".to_string())]),
                    partition_events: Vec::new(),
                },
            },
            AdminRequest::DescribeMirror { mirror } | AdminRequest::Pause { mirror, .. } if mirror != "dr" => {
                return Err(AdminError::UnknownMirror { mirror: mirror.clone() });
            }
            AdminRequest::CreateMirror { config } => AdminAnswer::Accepted {
                mirror: config.name.clone(),
                partitions: vec![],
            },
            AdminRequest::Pause { mirror, .. } | AdminRequest::AddTopics { mirror, .. } => AdminAnswer::Accepted {
                mirror: mirror.clone(),
                partitions: [("orders", 1), ("orders", 0), ("payments", 0)]
                    .map(|(topic, partition)| TopicPartitionName {
                        topic: topic.into(),
                        partition,
                    })
                    .to_vec(),
            },
            AdminRequest::Status => AdminAnswer::Status {
                partitions: partitions(),
            },
            other => return Err(AdminError::Internal(format!("not scripted: {other:?}"))),
        })
    }

    fn scripted() -> Scripted {
        let (calls, incoming) = async_channel::unbounded::<AdminCall>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            while let Ok(AdminCall { request, reply }) = incoming.recv_blocking() {
                let answer = coordinator(&request);
                log.lock().unwrap().push(request);
                let _ = reply.send_blocking(answer);
            }
        });
        let server = AdminServer::start("127.0.0.1:0".parse().unwrap(), calls).unwrap();
        Scripted { server, seen }
    }

    #[test]
    fn mirror_list_prints_an_aligned_table() {
        let s = scripted();
        let (code, stdout, stderr) = s.run(&["mirror", "list"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            stdout,
            "\
NAME       BOOTSTRAP-SERVERS      SOURCE-CLUSTER  PARTITIONS  STATES
dr         src-1:9092,src-2:9092  c1                       3  FAILED=1 MIRRORING=1 PAUSED=1
backup-eu  eu:9092                -                        0
"
        );
        assert_eq!(s.seen(), [AdminRequest::ListMirrors]);
    }

    #[test]
    fn mirror_describe_prints_the_answer_as_json_or_as_text() {
        let s = scripted();
        let (code, stdout, stderr) = s.run(&["mirror", "describe", "dr", "--json"]);
        assert_eq!(code, 0, "{stderr}");
        let printed: AdminAnswer = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            printed,
            coordinator(&AdminRequest::DescribeMirror { mirror: "dr".into() }).unwrap()
        );
        assert!(
            stdout.starts_with("{\n  \"answer\": \"mirror\","),
            "pretty-printed: {stdout}"
        );

        // --admin and --json may come before the subcommand too.
        let out = ringmirror()
            .args(["mirror", "--admin", &s.url(), "describe", "dr"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success());
        for line in [
            "name:              dr",
            "bootstrap servers: src-1:9092, src-2:9092",
            "created:           2024-02-29 12:34:56 UTC",
            "topics include:    pay.*",
            "topics mirrored:   orders, payments",
            "ingest:            uring",
            "last sync:         never",
            "groups:            .* (exclude: -)",
            "groups synced:     2024-02-29 12:34:56 UTC",
            "  group billing: synced: 2 committed, 0 unchanged",
            "topic deletion:    confirmed after 3 rounds over at least 120000 ms",
            "  topic payments: absent at the source since 2024-02-29 12:34:56 UTC, round 2 of 3 (and at least 120000 ms); brokers 1, 2; by name and id",
            "MIRROR  TOPIC     PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  LAG-S",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
        }
    }

    #[test]
    fn errors_print_the_servers_message_and_exit_1() {
        let s = scripted();
        let (code, stdout, stderr) = s.run(&["mirror", "describe", "nope"]);
        assert_eq!((code, stdout.as_str()), (1, ""));
        assert_eq!(stderr.trim_end(), r#"error: unknown mirror "nope" (HTTP 404)"#);
        let (code, _, stderr) = s.run(&["mirror", "pause", "nope", "orders"]);
        assert_eq!(code, 1);
        assert!(stderr.contains(r#"unknown mirror "nope""#), "{stderr}");

        // An invalid definition is refused before anything is sent.
        let (code, _, stderr) = s.run(&["mirror", "create", "dr", "--bootstrap-servers", "h:1"]);
        assert_eq!(code, 1);
        assert!(stderr.contains("names no topics"), "{stderr}");
        assert!(s.seen().iter().all(|r| !matches!(r, AdminRequest::CreateMirror { .. })));

        // Usage errors are clap's: exit 2.
        let (code, _, stderr) = s.run(&["mirror", "add-topics", "dr"]);
        assert_eq!(code, 2, "{stderr}");

        // Nobody listening.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let out = ringmirror()
            .args(["status"])
            .env("RINGMIRROR_ADMIN", format!("127.0.0.1:{port}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("cannot reach the admin API at http://127.0.0.1:{port}")),
            "{stderr}"
        );
    }

    #[test]
    fn mirror_commands_send_the_right_requests() {
        let s = scripted();
        let (code, stdout, stderr) = s.run(&[
            "mirror",
            "create",
            "dr",
            "--bootstrap-servers",
            "src-1:9092,src-2:9092",
            "--topics",
            "orders",
            "--topics-include",
            "pay.*",
        ]);
        assert_eq!(
            (code, stdout.as_str()),
            (0, "create dr: accepted (0 partitions)\n"),
            "{stderr}"
        );
        assert_eq!(s.seen(), [AdminRequest::CreateMirror { config: config() }]);

        let (code, stdout, stderr) = s.run(&["mirror", "pause", "dr", "orders,payments"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            stdout,
            "pause dr: accepted (3 partitions)\n  orders: 0, 1\n  payments: 0\n"
        );
        let (code, _, stderr) = s.run(&["mirror", "add-topics", "dr", "a", "b,c"]);
        assert_eq!(code, 0, "{stderr}");
        let topics = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            s.seen(),
            [
                AdminRequest::Pause {
                    mirror: "dr".into(),
                    topics: topics(&["orders", "payments"])
                },
                AdminRequest::AddTopics {
                    mirror: "dr".into(),
                    topics: topics(&["a", "b", "c"])
                }
            ]
        );
    }

    #[test]
    fn status_prints_the_partition_table() {
        let s = scripted();
        let (code, stdout, stderr) = s.run(&["status"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            stdout,
            "\
MIRROR  TOPIC     PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  LAG-S
dr      orders            0  MIRRORING         123456       123456    0    0.0
dr      orders            1  PAUSED               120          100   20   12.2
dr      payments          0  FAILED                 -            0    0    0.0
dr/payments-0: source unreachable
"
        );
    }

    #[test]
    fn status_watch_redraws_until_interrupted() {
        let s = scripted();
        let child = ringmirror()
            .args(["status", "--watch", "--interval-ms", "100", "--admin", &s.url()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        // SAFETY: a plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let screens: Vec<&str> = stdout.split("\x1b[H\x1b[2J").skip(1).collect();
        assert!(screens.len() >= 2, "expected redraws, got {stdout:?}");
        assert!(
            screens
                .iter()
                .all(|s| s.contains("dr      orders            1  PAUSED")),
            "{stdout}"
        );
        assert!(s.seen().len() >= 2);
    }
}
