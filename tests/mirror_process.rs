//! The `ringmirror run` binary mirroring a source that runs as another OS
//! process (librdkafka's mock cluster, `examples/mock_source.rs`), over TCP,
//! as an operator would run them: a clean stop on SIGTERM, and SIGKILLs at
//! different points while data flows, each followed by a restart. After
//! every run our logs must hold exactly the batches a raw Fetch of the
//! source returns — byte for byte, same offsets, no gap, no duplicate.
//!
//! While an agent runs, its progress is read from its segment files,
//! read-only (tests/common `scan_partition_dir`): the logs themselves are
//! opened only once it has exited.
//!
//! The source process is this test binary run again with the test filter
//! `mock_source_process` and the source's arguments in an environment
//! variable: it runs `examples/mock_source.rs` (included below as a module),
//! needs no separate build step (`cargo test --test mirror_process` builds
//! no examples), and cannot be a stale binary.

mod common;

#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ringmirror_storage::log::TopicPartition;

use common::{ChildGuard, DiskScan, assert_mirrors_source, scan_partition_dir, source_high_watermark};

/// Where the child learns that it is the source, and its arguments.
const SOURCE_ARGS_ENV: &str = "RINGMIRROR_TEST_MOCK_SOURCE_ARGS";
const SOURCE_TIMEOUT: Duration = Duration::from_secs(20);
const MIRROR_DEADLINE: Duration = Duration::from_secs(40);
const STOP_DEADLINE: Duration = Duration::from_secs(20);

/// Not a test: the body of the source child process (see [`SourceProcess`]).
#[test]
#[ignore = "not a test: runs as the mock source child process of the other tests"]
fn mock_source_process() {
    let Ok(args) = std::env::var(SOURCE_ARGS_ENV) else {
        return;
    };
    let code = match mock_source::run(args.split_whitespace().map(String::from)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}: {e}", mock_source::PREFIX);
            2
        }
    };
    // Leave at once: no harness summary, no slow mock cluster teardown.
    std::process::exit(code);
}

/// The source cluster, running in a child process.
struct SourceProcess {
    child: ChildGuard,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    bootstrap: String,
}

impl SourceProcess {
    fn start(brokers: u32, topics: &[(&str, i32)]) -> Self {
        let mut args = format!("--brokers {brokers} --max-seconds 120");
        for (t, n) in topics {
            args += &format!(" --topic {t}:{n}");
        }
        let mut child = ChildGuard::spawn(
            Command::new(std::env::current_exe().expect("test binary path"))
                .args([
                    "--exact",
                    "mock_source_process",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SOURCE_ARGS_ENV, args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
            "mock source",
        )
        .expect("start the mock source process");
        let stdin = child.child().stdin.take().expect("piped stdin");
        let stdout = child.child().stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The test harness may have started the line ("test … ").
                if let Some(at) = line.find(mock_source::PREFIX) {
                    let rest = &line[at + mock_source::PREFIX.len()..];
                    if tx.send(rest.trim().to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut source = Self {
            child,
            stdin,
            lines,
            bootstrap: String::new(),
        };
        let first = source.next_line(Duration::from_secs(30));
        source.bootstrap = first
            .strip_prefix("bootstrap ")
            .unwrap_or_else(|| panic!("expected the bootstrap servers, got {first:?}"))
            .to_owned();
        source
    }

    fn next_line(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => line,
            Err(e) => panic!(
                "no answer from the mock source within {timeout:?} ({e}); running: {}",
                self.child.is_running()
            ),
        }
    }

    /// Sends a command without waiting for its answer.
    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .expect("write to the mock source");
    }

    /// Waits for the answer to `command` (answers come in command order).
    fn wait_done(&mut self, command: &str) {
        let line = self.next_line(Duration::from_secs(60));
        assert_eq!(line, format!("ok {command}"), "mock source answered");
    }

    fn run(&mut self, command: &str) {
        self.send(command);
        self.wait_done(command);
    }
}

/// A `ringmirror run` process; its stderr (the log) goes to a file.
struct AgentProcess {
    child: ChildGuard,
    log_path: PathBuf,
}

impl AgentProcess {
    fn start(config: &Path, log_path: PathBuf) -> Self {
        let child = common::run_agent_binary(config, &log_path, &[]);
        Self { child, log_path }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if !self.child.is_running() {
            let status = self.child.child().wait().expect("reap agent");
            panic!("the agent exited early ({status}); its log:\n{}", self.log());
        }
    }

    /// SIGTERM, then waits for the exit.
    fn terminate(mut self) -> (ExitStatus, String) {
        self.child.signal(libc::SIGTERM);
        let Some(status) = self.child.wait_timeout(STOP_DEADLINE) else {
            panic!(
                "the agent did not exit within {STOP_DEADLINE:?} of SIGTERM; its log:\n{}",
                self.log()
            );
        };
        (status, self.log())
    }

    /// SIGKILL.
    fn kill(self) -> String {
        let log = self.log();
        let status = self.child.kill();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        log
    }
}

/// Writes the agent's configuration; `ingest` is "mmap" or "aligned_copy".
fn write_config(
    dir: &Path,
    data_dir: &Path,
    bootstrap: &str,
    topics: &[&str],
    (ingest, segment_bytes): (&str, u64),
) -> PathBuf {
    let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
    let path = dir.join("ringmirror.toml");
    std::fs::write(
        &path,
        format!(
            r#"
data_dir = {data_dir:?}
shards = 2
[log]
segment_bytes = {segment_bytes}
[[mirror]]
name = "dr"
bootstrap_servers = [{bootstrap:?}]
topics = [{topics}]
fetch_max_wait_ms = 100
metadata_refresh_interval_ms = 1000
ingest = {ingest:?}
"#
        ),
    )
    .expect("write config");
    path
}

fn partitions(topics: &[(&str, i32)]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|&(t, n)| (0..n).map(move |p| TopicPartition::new(t, p)))
        .collect()
}

fn scans(data_dir: &Path, tps: &[TopicPartition]) -> BTreeMap<TopicPartition, DiskScan> {
    tps.iter()
        .map(|tp| (tp.clone(), scan_partition_dir(&data_dir.join(tp.to_string()))))
        .collect()
}

fn high_watermarks(bootstrap: &str, tps: &[TopicPartition]) -> BTreeMap<TopicPartition, i64> {
    tps.iter()
        .map(|tp| {
            (
                tp.clone(),
                source_high_watermark(bootstrap, &tp.topic, tp.partition, SOURCE_TIMEOUT),
            )
        })
        .collect()
}

/// Offsets mirrored so far over all partitions, read from the segment files.
fn mirrored_offsets(data_dir: &Path, tps: &[TopicPartition]) -> i64 {
    scans(data_dir, tps).values().filter_map(DiskScan::end_offset).sum()
}

/// Waits until the segment files of every partition hold whole batches up
/// to the source's high watermark (data must have stopped coming).
fn wait_on_disk(agent: &mut AgentProcess, data_dir: &Path, bootstrap: &str, tps: &[TopicPartition]) {
    let targets = high_watermarks(bootstrap, tps);
    let started = Instant::now();
    loop {
        agent.assert_running();
        let now = scans(data_dir, tps);
        let behind: Vec<String> = targets
            .iter()
            .filter(|(tp, end)| now[*tp].end_offset().unwrap_or(0) < **end)
            .map(|(tp, end)| format!("{tp}: {:?} of {end}", now[tp].end_offset()))
            .collect();
        if behind.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < MIRROR_DEADLINE,
            "not mirrored within {MIRROR_DEADLINE:?}: {behind:?}; agent log:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the agent with SIGTERM and checks that it stopped cleanly.
fn stop_cleanly(agent: AgentProcess, data_dir: &Path) -> String {
    let (status, log) = agent.terminate();
    assert!(
        status.success(),
        "ringmirror run exited with {status} on SIGTERM; log:\n{log}"
    );
    assert!(
        data_dir.join(".kafka_cleanshutdown").exists(),
        "no clean-shutdown marker after SIGTERM; log:\n{log}"
    );
    assert!(log.contains("agent stopped cleanly"), "log:\n{log}");
    log
}

#[test]
fn agent_process_mirrors_a_source_process_and_stops_cleanly_on_sigterm() {
    let topics = [("p-orders", 3), ("p-events", 2)];
    let tps = partitions(&topics);
    let mut source = SourceProcess::start(3, &topics);
    source.run("produce p-orders 3000 lz4 0");
    source.run("produce p-events 1500 zstd 100000");
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config = write_config(
        dir.path(),
        &data_dir,
        &source.bootstrap,
        &["p-orders", "p-events"],
        ("aligned_copy", 65536),
    );
    let mut agent = AgentProcess::start(&config, dir.path().join("agent.log"));

    // More data, and leaders moving, while it mirrors.
    source.run("produce p-orders 1500 gzip 10000");
    source.run("leader p-orders 0 2");
    source.run("leader p-events 1 3");
    source.run("produce p-events 800 snappy 110000");
    source.run("produce p-orders 600 none 20000");

    wait_on_disk(&mut agent, &data_dir, &source.bootstrap, &tps);
    stop_cleanly(agent, &data_dir);
    assert_mirrors_source(&data_dir, &source.bootstrap, &tps);
    source.run("quit");
}

/// What must survive a restart: each partition's first segment file (same
/// inode) and the whole batches on disk when the agent was killed.
struct OnDisk {
    scans: BTreeMap<TopicPartition, DiskScan>,
    first_segment_inodes: BTreeMap<TopicPartition, u64>,
}

fn on_disk(data_dir: &Path, tps: &[TopicPartition]) -> OnDisk {
    let scans = scans(data_dir, tps);
    let first_segment_inodes = scans
        .iter()
        .filter_map(|(tp, scan)| {
            let base = scan.segment_bases.first()?;
            let path = data_dir.join(tp.to_string()).join(format!("{base:020}.log"));
            Some((tp.clone(), std::fs::metadata(path).ok()?.ino()))
        })
        .collect();
    OnDisk {
        scans,
        first_segment_inodes,
    }
}

/// Asserts that a later state kept everything of an earlier one: the same
/// first segment file, and the earlier batches as a prefix (nothing
/// refetched, nothing lost, nothing duplicated).
fn assert_kept(before: &OnDisk, after: &OnDisk, when: &str) {
    for (tp, scan) in &before.scans {
        let later = &after.scans[tp];
        assert!(
            later.batches.len() >= scan.batches.len() && later.batches[..scan.batches.len()] == scan.batches[..],
            "{when}: {tp} lost or rewrote batches it had ({} before, {} after; ends {:?} and {:?})",
            scan.batches.len(),
            later.batches.len(),
            scan.end_offset(),
            later.end_offset()
        );
        if let Some(inode) = before.first_segment_inodes.get(tp) {
            assert_eq!(
                after.first_segment_inodes.get(tp),
                Some(inode),
                "{when}: {tp}'s first segment was replaced (the log was refetched)"
            );
        }
    }
}

/// How an agent is stopped mid-stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Kill,
    Term,
}

/// Runs an agent until the offsets mirrored reach `fraction` of the
/// source's total when it started, then stops it with SIGKILL or SIGTERM —
/// mid-stream: the source must still hold more than it mirrored. Returns
/// its log.
fn stop_at(
    config: &Path,
    log_path: PathBuf,
    data_dir: &Path,
    bootstrap: &str,
    tps: &[TopicPartition],
    fraction: f64,
    how: Stop,
) -> String {
    let total: i64 = high_watermarks(bootstrap, tps).values().sum();
    // A clean stop finishes in-flight appends, so the disk may already hold
    // the target: the stop waits for this run's own appends too, so that it
    // never lands before the agent has even opened its data dir.
    let before = mirrored_offsets(data_dir, tps);
    let mut agent = AgentProcess::start(config, log_path);
    let started = Instant::now();
    loop {
        agent.assert_running();
        let done = mirrored_offsets(data_dir, tps);
        if done > before && done as f64 >= fraction * total as f64 {
            let log = match how {
                Stop::Kill => agent.kill(),
                Stop::Term => stop_cleanly(agent, data_dir),
            };
            let now: i64 = high_watermarks(bootstrap, tps).values().sum();
            eprintln!("{how:?} with {done} of {now} offsets mirrored (aimed at {fraction} of {total})");
            assert!(done < now, "the {how:?} came too late: everything ({now}) was mirrored");
            return log;
        }
        assert!(
            started.elapsed() < MIRROR_DEADLINE,
            "{done} of {total} offsets mirrored; log:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Log lines that mean a restarted agent cut (and so would refetch) data.
const TRUNCATION_LINES: [&str; 5] = [
    "truncating log",
    "truncating to converge",
    "log truncated",
    "restarting there",
    "starting the log at its base",
];

/// Checks a restarted agent's log: it recovered its logs after a crash (or
/// not, after a clean stop), and truncated nothing — so it resumed at each
/// log end instead of refetching.
fn assert_restarted(log: &str, after_crash: bool, when: &str) {
    // The agent's own state logs (under __ringmirror/) are flushed on
    // every write and scanned at every open; only partition logs count.
    let recovered = log
        .lines()
        .any(|l| l.contains("recovering log") && !l.contains("__ringmirror"));
    assert_eq!(
        recovered, after_crash,
        "{when}: crash recovery expected: {after_crash}; log:\n{log}"
    );
    for needle in TRUNCATION_LINES {
        assert!(
            !log.contains(needle),
            "{when}: the restarted agent truncated ({needle:?}); log:\n{log}"
        );
    }
}

#[test]
fn agent_killed_or_stopped_mid_stream_restarts_without_gaps_duplicates_or_refetching() {
    killed_or_stopped_mid_stream(("mmap", 65536));
}

/// The same through the io_uring write path, with segments large enough
/// that whole responses (above the plain-pwrite size) go to the ring: the
/// kills land with writes in flight, and whatever they lose is fetched again.
#[test]
fn agent_killed_mid_stream_with_ring_writes_in_flight_keeps_a_valid_prefix() {
    killed_or_stopped_mid_stream(("uring", 1 << 20));
}

fn killed_or_stopped_mid_stream(agent: (&str, u64)) {
    let topics = [("k-data", 3), ("k-side", 2)];
    let tps = partitions(&topics);
    let mut source = SourceProcess::start(3, &topics);
    source.run("produce k-data 9000 lz4 0");
    source.run("produce k-side 2000 zstd 500000");
    // Slow responses, so there is time to kill the agent mid-stream.
    source.run("rtt -1 8");
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config = write_config(dir.path(), &data_dir, &source.bootstrap, &["k-data", "k-side"], agent);
    let log = |n: usize| dir.path().join(format!("agent-{n}.log"));
    let source_bootstrap = source.bootstrap.clone();

    let stop_at = |n: usize, fraction: f64, how: Stop| {
        stop_at(&config, log(n), &data_dir, &source_bootstrap, &tps, fraction, how)
    };

    // 1: killed early.
    stop_at(1, 0.2, Stop::Kill);
    let after_1 = on_disk(&data_dir, &tps);

    // 2: restarted (crash recovery) while more data arrives; killed again.
    source.send("produce k-data 3000 zstd 100000");
    let agent_log = stop_at(2, 0.45, Stop::Kill);
    assert_restarted(&agent_log, true, "run 2");
    let after_2 = on_disk(&data_dir, &tps);
    assert_kept(&after_1, &after_2, "run 2");
    source.wait_done("produce k-data 3000 zstd 100000");

    // 3: changes while it is down; stopped cleanly mid-stream.
    source.run("leader k-data 1 3");
    source.run("produce k-side 800 gzip 600000");
    let agent_log = stop_at(3, 0.65, Stop::Term);
    assert_restarted(&agent_log, true, "run 3");
    let after_3 = on_disk(&data_dir, &tps);
    assert_kept(&after_2, &after_3, "run 3");

    // 4: a leader moved while it was down; restarted without recovery, killed late.
    source.run("leader k-data 0 2");
    let agent_log = stop_at(4, 0.8, Stop::Kill);
    assert_restarted(&agent_log, false, "run 4");
    let after_4 = on_disk(&data_dir, &tps);
    assert_kept(&after_3, &after_4, "run 4");

    // 5: runs to the end and stops cleanly.
    let mut agent = AgentProcess::start(&config, log(5));
    source.run("produce k-data 600 snappy 200000");
    source.run("rtt -1 0");
    wait_on_disk(&mut agent, &data_dir, &source.bootstrap, &tps);
    let agent_log = stop_cleanly(agent, &data_dir);
    assert_restarted(&agent_log, true, "run 5");
    assert_kept(&after_4, &on_disk(&data_dir, &tps), "run 5");
    let checked = assert_mirrors_source(&data_dir, &source.bootstrap, &tps);
    // Crash recovery rebuilt the leader-epoch cache from the batches.
    let epochs: Vec<usize> = checked
        .iter()
        .map(|(tp, (_, ours))| common::assert_epoch_cache_matches_batches(tp, ours))
        .collect();
    assert!(
        epochs.iter().any(|&n| n > 1),
        "precondition: leaders moved ({epochs:?})"
    );
    source.run("quit");
}
