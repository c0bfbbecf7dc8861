//! Real, unchanged Kafka clients read the agent's mirror exactly as they
//! read the source: kcat (librdkafka 2.0 from Debian), kafka-python and
//! confluent-kafka (a current librdkafka) consume from the agent's listener
//! what they consume from the source — every partition, offset, key, value,
//! header and timestamp — and their Produce requests to a mirror topic are
//! refused with READ_ONLY_TOPIC (134) without a byte being written.
//!
//! READ_COMMITTED is tested on a data directory built here with
//! [`BatchBuilder`]: committed and aborted transactions of two producers
//! interleaved, their COMMIT/ABORT control batches, non-transactional
//! batches, an offset gap, transactions left open at the end, and segments
//! small enough that a transaction's batches and its ABORT marker sit in
//! different segments. The agent serves that directory read-only; the
//! clients must see exactly the records a Kafka broker would give them
//! (computed here from what was built, not from the agent).
//!
//! Clients use assign() and no consumer group (the agent serves no group
//! APIs yet). A missing client (kcat, a Python package) fails the test
//! with the package to install (`scripts/setup.sh` installs them all).
//! kcat runs on its own librdkafka, not on the one `cargo test` puts on
//! LD_LIBRARY_PATH. Every wait is bounded and every child process is
//! killed if the test fails, so a broken listener fails these tests
//! instead of hanging them.

mod common;
#[allow(dead_code)]
#[path = "../examples/mock_source.rs"]
mod mock_source;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_storage::batch::{BatchBuilder, BuildRecord, ControlType};
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};
use serde_json::Value;

/// Bound on every wait for the source, the agent or a client.
const DEADLINE: Duration = Duration::from_secs(45);
/// Bound on one client process (kcat, Python), beyond its own deadline.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(50);
/// Kafka's READ_ONLY_TOPIC error code (librdkafka 2.0 has no name for it).
const READ_ONLY_TOPIC: i64 = 134;

// ---------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------

/// What a finished child process printed.
struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Output {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Runs `cmd` to completion with `stdin` as its input, killing it (and
/// failing the test) after `timeout`. The child is also killed if this
/// thread dies first ([`common::ChildGuard`]), so none outlives the test.
fn run(mut cmd: Command, what: &str, stdin: Option<&[u8]>, timeout: Duration) -> Output {
    common::without_cargo_libraries(&mut cmd);
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = common::ChildGuard::spawn(&mut cmd, what).unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.child().stdin.take().expect("piped stdin");
        pipe.write_all(input)
            .unwrap_or_else(|e| panic!("write to {what}'s stdin: {e}"));
        // Closing stdin is how kcat -P learns that the input is over.
        drop(pipe);
    }
    // Drained on threads so that a chatty child never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = drain(child.child().stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.child().stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = Instant::now();
    let Some(status) = child.wait_timeout(timeout) else {
        child.kill();
        let stderr = err.join().unwrap_or_default();
        panic!(
            "{what} did not finish within {timeout:?}; its stderr:\n{}",
            String::from_utf8_lossy(&stderr)
        );
    };
    // Said in the test's output, which is shown when a test fails.
    eprintln!("{what}: {status} after {:.1?}", started.elapsed());
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Fails the test (never skips it) unless kcat is installed; returns its
/// version line (which names the librdkafka it runs on).
fn require_kcat() -> String {
    let mut cmd = Command::new("kcat");
    cmd.arg("-V").stdin(Stdio::null());
    common::without_cargo_libraries(&mut cmd);
    let out = cmd.output().ok().filter(|o| o.status.success());
    let out = out.unwrap_or_else(|| {
        panic!("this test needs kcat (Debian package `kcat`: apt-get install kcat, or run scripts/setup.sh)")
    });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.starts_with("Version"))
        .unwrap_or(&text)
        .to_owned()
}

fn kcat(args: &[&str], stdin: Option<&[u8]>) -> Output {
    require_kcat();
    let mut cmd = Command::new("kcat");
    cmd.args(args);
    run(cmd, &format!("kcat {}", args.join(" ")), stdin, CLIENT_TIMEOUT)
}

/// `tests/py/serve_clients.py`.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/serve_clients.py")
}

/// Runs a subcommand of `serve_clients.py` and returns its JSON. A missing
/// Python package (exit status 3) fails the test with the package's name.
fn python(args: &[&str]) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(script()).args(args);
    let what = format!("serve_clients.py {}", args.join(" "));
    let out = run(cmd, &what, None, CLIENT_TIMEOUT);
    assert_ne!(
        out.status.code(),
        Some(3),
        "{what}: a Python package these tests need is missing (CI installs kafka-python, \
         confluent-kafka, lz4, python-snappy and zstandard with scripts/setup.sh):\n{}",
        out.stderr()
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstderr:\n{}\nstdout (first 4000 bytes):\n{}",
        out.status,
        out.stderr(),
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(4000)])
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what} printed no JSON ({e})"))
}

// ---------------------------------------------------------------------------
// Records as clients report them
// ---------------------------------------------------------------------------

/// A record as a client delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClientRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    timestamp: i64,
    timestamp_type: String,
}

/// (partition, offset) → record.
type ClientRecords = BTreeMap<(i32, i64), ClientRecord>;

fn opt_hex(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(common::unhex(s)),
        other => panic!("expected hex or null, got {other}"),
    }
}

/// The records of a consume subcommand's JSON; a record delivered twice fails.
fn client_records(out: &Value) -> ClientRecords {
    let mut records = ClientRecords::new();
    for r in common::json_array(out, "records") {
        let partition = i32::try_from(common::json_i64(r, "partition")).expect("partition fits i32");
        let offset = common::json_i64(r, "offset");
        let record = ClientRecord {
            key: opt_hex(&r["key"]),
            value: opt_hex(&r["value"]),
            headers: common::json_array(r, "headers")
                .iter()
                .map(|h| (common::unhex(h[0].as_str().expect("header key is hex")), opt_hex(&h[1])))
                .collect(),
            timestamp: common::json_i64(r, "timestamp"),
            timestamp_type: common::json_str(r, "timestamp_type").to_owned(),
        };
        let client = common::json_str(out, "client");
        assert!(
            records.insert((partition, offset), record).is_none(),
            "{client} delivered {partition}/{offset} twice"
        );
    }
    records
}

/// Per partition, what the client reported under `field` (a JSON object keyed by partition).
fn per_partition(out: &Value, field: &str) -> BTreeMap<i32, Value> {
    out[field]
        .as_object()
        .unwrap_or_else(|| panic!("{field} is not an object in the client's output"))
        .iter()
        .map(|(p, v)| (p.parse().expect("partition number"), v.clone()))
        .collect()
}

/// Asserts two record maps are equal, naming the first difference rather
/// than printing thousands of records.
fn assert_same_records(what: &str, expected: &ClientRecords, actual: &ClientRecords) {
    if expected == actual {
        return;
    }
    let missing: Vec<_> = expected.keys().filter(|k| !actual.contains_key(k)).take(10).collect();
    let extra: Vec<_> = actual.keys().filter(|k| !expected.contains_key(k)).take(10).collect();
    let differing = expected
        .iter()
        .find(|(k, v)| actual.get(k).is_some_and(|a| a != *v))
        .map(|(k, v)| format!("at {k:?} expected {v:?}, got {:?}", actual[k]));
    panic!(
        "{what}: {} records expected, {} delivered; missing (partition, offset) {missing:?}; \
         unexpected {extra:?}; first different record: {differing:?}",
        expected.len(),
        actual.len()
    );
}

/// The ends as the script's `--ends` wants them: `P:END,...`.
fn ends_arg(ends: &BTreeMap<i32, i64>) -> String {
    ends.iter()
        .map(|(p, e)| format!("{p}:{e}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A consume subcommand (`kafka-python-consume`, `confluent-consume`) with
/// `extra` arguments.
fn consume(
    command: &str,
    bootstrap: &str,
    topic: &str,
    ends: &BTreeMap<i32, i64>,
    isolation: &str,
    extra: &[&str],
) -> Value {
    let ends = ends_arg(ends);
    let mut args = vec![
        command,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--ends",
        &ends,
        "--isolation",
        isolation,
        "--timeout",
        "40",
    ];
    args.extend_from_slice(extra);
    python(&args)
}

// ---------------------------------------------------------------------------
// A mock source and an agent mirroring it
// ---------------------------------------------------------------------------

/// librdkafka's mock cluster with one topic of produced records, and an
/// agent that has mirrored all of it and serves it on its listener.
struct Mirrored {
    agent: Agent,
    // Kept alive for the agent; dropped after it.
    _cluster: MockCluster<'static, DefaultProducerContext>,
    dir: tempfile::TempDir,
    source: String,
    mirror: String,
    topic: String,
    /// Source high watermark per partition.
    ends: BTreeMap<i32, i64>,
    /// Record numbers produced (see `mock_source::record_value`).
    produced: BTreeSet<u64>,
}

impl Mirrored {
    /// Produces each `(count, codec, first record number)` to `topic`'s
    /// `partitions` at the mock source, starts an agent mirroring it, and
    /// waits until the agent holds everything.
    fn start(topic: &str, partitions: i32, loads: &[(u64, &str, u64)]) -> Self {
        let cluster = MockCluster::new(3).expect("mock cluster");
        cluster.create_topic(topic, partitions, 1).expect("create topic");
        let source = cluster.bootstrap_servers();
        let mut produced = BTreeSet::new();
        for &(count, codec, seed) in loads {
            mock_source::produce(&source, topic, partitions, count, codec, seed)
                .unwrap_or_else(|e| panic!("produce to the source: {e}"));
            produced.extend(seed..seed + count);
        }
        let ends: BTreeMap<i32, i64> = (0..partitions)
            .map(|p| (p, common::source_high_watermark(&source, topic, p, DEADLINE)))
            .collect();
        let dir = tempfile::tempdir().expect("temp dir");
        let config = AgentConfig::parse(&format!(
            r#"
            data_dir = {data_dir:?}
            shards = 2
            [listener]
            address = "127.0.0.1:0"
            [log]
            segment_bytes = 65536
            preallocate_bytes = 1048576
            prefault_bytes = 65536
            [[mirror]]
            name = "dr"
            bootstrap_servers = [{source:?}]
            topics = [{topic:?}]
            fetch_max_wait_ms = 100
            fetch_partition_max_bytes = 32768
            metadata_refresh_interval_ms = 1000
            "#,
            data_dir = dir.path()
        ))
        .expect("agent config");
        let agent = Agent::start(config).expect("start the agent");
        let mirror = agent.listener_addr().expect("the agent listens").to_string();
        let mirrored = Self {
            agent,
            _cluster: cluster,
            dir,
            source,
            mirror,
            topic: topic.to_owned(),
            ends,
            produced,
        };
        mirrored.wait_mirrored();
        mirrored
    }

    fn wait_mirrored(&self) {
        common::wait_mirrored(&self.agent, &self.topic, &self.ends, DEADLINE);
    }

    fn total(&self) -> usize {
        self.ends.values().sum::<i64>() as usize
    }

    /// The agent's high watermark of `partition`, from a raw Fetch at its listener.
    fn served_high_watermark(&self, partition: i32) -> i64 {
        let mut conn = common::KafkaConnection::connect(&self.mirror, Duration::from_secs(10))
            .expect("connect to the agent")
            .with_max_wait_ms(0);
        let fetched = conn.fetch(&self.topic, partition, 0, 1).expect("Fetch from the agent");
        assert_eq!(fetched.error_code, 0, "Fetch {}-{partition} from the agent", self.topic);
        fetched.high_watermark
    }

    /// Stops the agent and checks that its logs hold exactly the source's
    /// batches, byte for byte: nothing was written by anyone but the mirror.
    fn stop_and_check_logs(self) {
        self.agent.stop().expect("stop the agent");
        let tps: Vec<TopicPartition> = self.ends.keys().map(|&p| TopicPartition::new(&self.topic, p)).collect();
        common::assert_mirrors_source(self.dir.path(), &self.source, &tps);
    }
}

/// Checks that the records are exactly the ones produced to the source —
/// each one's key, value and headers follow from its number (header "n"),
/// and it sits in partition `n % partitions` — so the comparisons between
/// source and mirror are not between two equally wrong reads.
fn assert_records_are_the_produced_ones(records: &ClientRecords, partitions: i32, produced: &BTreeSet<u64>) {
    let mut seen = BTreeSet::new();
    for (&(partition, offset), r) in records {
        let n_header = r
            .headers
            .iter()
            .find(|(k, _)| k == b"n")
            .and_then(|(_, v)| v.as_deref())
            .unwrap_or_else(|| panic!("{partition}/{offset} has no header n"));
        let n = u64::from_be_bytes(n_header.try_into().expect("header n is a u64"));
        assert_eq!(
            i64::from(partition),
            (n % partitions as u64) as i64,
            "record {n} in the wrong partition"
        );
        assert_eq!(
            r.key,
            mock_source::record_key(n),
            "key of record {n} at {partition}/{offset}"
        );
        assert_eq!(
            r.value.as_deref(),
            Some(&mock_source::record_value(n)[..]),
            "value of record {n}"
        );
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = mock_source::record_headers(n)
            .into_iter()
            .map(|(k, v)| (k.into_bytes(), v))
            .collect();
        assert_eq!(r.headers, headers, "headers of record {n}");
        assert_eq!(r.timestamp_type, "create_time", "timestamp type of record {n}");
        assert!(seen.insert(n), "record {n} delivered twice");
    }
    assert_eq!(&seen, produced, "the records read are not the records produced");
}

// ---------------------------------------------------------------------------
// kcat
// ---------------------------------------------------------------------------

/// kcat's `-f '%t %p %o %k %s\n'` output, split back into records:
/// (partition, offset) → the bytes after `topic partition offset ` (key,
/// space, value). Values may hold newlines (they are binary), so a record
/// starts only where a line starts with `<topic> <digits> <digits> `; per
/// partition, offsets must come in increasing order, as kcat prints them.
fn kcat_records(topic: &str, out: &[u8]) -> BTreeMap<(i32, i64), Vec<u8>> {
    fn number(bytes: &[u8], at: &mut usize) -> Option<i64> {
        let start = *at;
        while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
            *at += 1;
        }
        let n = std::str::from_utf8(&bytes[start..*at]).ok()?.parse().ok()?;
        (bytes.get(*at) == Some(&b' ')).then(|| {
            *at += 1;
            n
        })
    }
    // (start of the line, partition, offset, start of the record's bytes)
    let header = |at: usize| -> Option<(usize, i32, i64, usize)> {
        let rest = &out[at..];
        let mut pos = topic.len() + 1;
        if !rest.starts_with(topic.as_bytes()) || rest.get(topic.len()) != Some(&b' ') {
            return None;
        }
        let partition = i32::try_from(number(rest, &mut pos)?).ok()?;
        let offset = number(rest, &mut pos)?;
        Some((at, partition, offset, at + pos))
    };
    if out.is_empty() {
        return BTreeMap::new();
    }
    let starts: Vec<_> = (0..out.len())
        .filter(|&i| i == 0 || out[i - 1] == b'\n')
        .filter_map(header)
        .collect();
    assert!(out.ends_with(b"\n"), "kcat output does not end with a record delimiter");
    assert_eq!(
        starts.first().map(|s| s.0),
        Some(0),
        "kcat output does not start with a record"
    );
    let mut records = BTreeMap::new();
    let mut last_offset: BTreeMap<i32, i64> = BTreeMap::new();
    for (i, &(_, partition, offset, body)) in starts.iter().enumerate() {
        // The record ends before the '\n' that precedes the next record.
        let end = starts.get(i + 1).map_or(out.len(), |next| next.0) - 1;
        let previous = last_offset.insert(partition, offset);
        assert!(
            previous.is_none_or(|p| p < offset),
            "kcat printed partition {partition} out of order: {previous:?} then {offset}"
        );
        records.insert((partition, offset), out[body..end].to_vec());
    }
    records
}

/// `kcat -C -o <start> -e -f '%t %p %o %k %s\n'` of the whole topic from
/// the source and from the mirror: the outputs must be the same, record for
/// record and (lines sorted, as partitions interleave) byte for byte.
fn assert_kcat_reads_mirror_as_source(m: &Mirrored, start: &str) {
    let format = "%t %p %o %k %s\n";
    let read = |bootstrap: &str| {
        let args = ["-C", "-b", bootstrap, "-t", &m.topic, "-o", start, "-e", "-f", format];
        let out = kcat(&args, None);
        assert!(
            out.status.success(),
            "kcat -C -b {bootstrap} -o {start} failed ({}): {}",
            out.status,
            out.stderr()
        );
        out.stdout
    };
    let from_source = read(&m.source);
    let from_mirror = read(&m.mirror);
    let source_records = kcat_records(&m.topic, &from_source);
    let mirror_records = kcat_records(&m.topic, &from_mirror);
    // Every offset of every partition (the source wrote no control batches).
    let all: BTreeSet<(i32, i64)> = m
        .ends
        .iter()
        .flat_map(|(&p, &end)| (0..end).map(move |o| (p, o)))
        .collect();
    assert_eq!(all.len(), m.total());
    assert_eq!(
        source_records.keys().copied().collect::<BTreeSet<_>>(),
        all,
        "kcat's records from the source"
    );
    if mirror_records != source_records {
        let first = source_records
            .iter()
            .find(|(k, v)| mirror_records.get(k) != Some(v))
            .map(|(k, _)| *k);
        panic!(
            "kcat read {} records from the mirror, {} from the source; first difference at {first:?}",
            mirror_records.len(),
            source_records.len()
        );
    }
    // The whole output, byte for byte, once partitions are de-interleaved.
    let mut sorted_source: Vec<&[u8]> = from_source.split(|&b| b == b'\n').collect();
    let mut sorted_mirror: Vec<&[u8]> = from_mirror.split(|&b| b == b'\n').collect();
    sorted_source.sort_unstable();
    sorted_mirror.sort_unstable();
    assert!(sorted_source == sorted_mirror, "kcat's sorted output lines differ");
}

/// Debian's kcat (with its own librdkafka 2.0.2) reads the mirror as it
/// reads the source, lists it, and cannot write to it.
///
/// It reads from `-o 0` rather than `-o beginning` (the same offset here:
/// both logs start at 0) because `-o beginning` makes librdkafka 2.0.2 ask
/// ListOffsets v2, which the agent cannot answer yet (the connection is
/// closed; see [`list_offsets_v1_to_v3_are_answered_too`] and
/// [`kcat_reads_the_mirror_from_the_beginning`]).
#[test]
fn kcat_reads_the_mirror_as_it_reads_the_source_and_cannot_write_it() {
    eprintln!("kcat: {}", require_kcat());
    let m = Mirrored::start("kcat-orders", 3, &[(450, "snappy", 0), (450, "zstd", 450)]);
    assert_eq!(m.total(), 900);
    assert_kcat_reads_mirror_as_source(&m, "0");

    // Metadata: the topic with every partition, led by the agent (node 0).
    let listing = kcat(&["-L", "-b", &m.mirror], None);
    assert!(listing.status.success(), "kcat -L failed: {}", listing.stderr());
    let listing = String::from_utf8(listing.stdout).expect("kcat -L prints text");
    let port = m.mirror.rsplit_once(':').expect("host:port").1;
    assert!(
        listing.contains(&format!("broker 0 at 127.0.0.1:{port}")),
        "kcat -L does not list the agent as broker 0:\n{listing}"
    );
    assert!(
        listing.contains(&format!("topic \"{}\" with 3 partitions:", m.topic)),
        "kcat -L does not list the topic with 3 partitions:\n{listing}"
    );
    for p in 0..3 {
        assert!(
            listing.contains(&format!("partition {p}, leader 0, replicas: 0, isrs: 0")),
            "kcat -L: partition {p} is not led by the agent:\n{listing}"
        );
    }

    // Produce: refused, and reported as a failure by kcat.
    let end_before = m.served_high_watermark(0);
    assert_eq!(end_before, m.ends[&0]);
    let produce = kcat(
        &["-P", "-b", &m.mirror, "-t", &m.topic, "-p", "0"],
        Some(b"this line must not be written\n"),
    );
    let said = format!("{}{}", String::from_utf8_lossy(&produce.stdout), produce.stderr());
    eprintln!("kcat -P to the mirror: {} and printed:\n{said}", produce.status);
    assert!(
        !produce.status.success() || said.to_lowercase().contains("delivery failed"),
        "kcat -P to a mirror topic reports no failure ({}):\n{said}",
        produce.status
    );
    // librdkafka 2.0 has no name for 134 and prints "Err-134?"; a newer
    // one may print the name instead.
    let lower = said.to_lowercase();
    assert!(
        said.contains("134") || lower.contains("read-only") || lower.contains("read_only"),
        "kcat's failure does not mention the broker's error (READ_ONLY_TOPIC, 134):\n{said}"
    );
    assert_eq!(
        m.served_high_watermark(0),
        end_before,
        "the agent's log end moved after a refused Produce"
    );
    m.stop_and_check_logs();
}

/// `kcat -C -o beginning -e`, as users read a topic, against the mirror:
/// librdkafka 2.0.2 (Debian's kcat) looks `beginning` up with ListOffsets
/// v2, a version without the leader-epoch field (answering it once closed
/// the connection).
#[test]
fn kcat_reads_the_mirror_from_the_beginning() {
    require_kcat();
    let m = Mirrored::start("kcat-beginning", 2, &[(200, "lz4", 0)]);
    assert_kcat_reads_mirror_as_source(&m, "beginning");
    m.stop_and_check_logs();
}

// ---------------------------------------------------------------------------
// kafka-python and confluent-kafka
// ---------------------------------------------------------------------------

/// Consumes the whole topic with `command` from the source and from the
/// mirror and checks they are the same, and the produced records.
fn assert_client_reads_mirror_as_source(command: &str, m: &Mirrored) {
    // kafka-python cannot parse the mock cluster's answer to ApiVersions
    // v3+ (a quirk of the mock, see DESIGN.md "Peers we test against"):
    // told the source is Kafka 2.3 it asks with v2. The agent is read with
    // whatever kafka-python negotiates.
    let source_extra: &[&str] = if command == "kafka-python-consume" {
        &["--api-version", "2.3"]
    } else {
        &[]
    };
    let from_source = consume(command, &m.source, &m.topic, &m.ends, "read_uncommitted", source_extra);
    let from_mirror = consume(command, &m.mirror, &m.topic, &m.ends, "read_uncommitted", &[]);
    let client = common::json_str(&from_mirror, "version").to_owned();
    let source_records = client_records(&from_source);
    let mirror_records = client_records(&from_mirror);
    assert_eq!(source_records.len(), m.total(), "{command} from the source");
    assert_records_are_the_produced_ones(&source_records, m.ends.len() as i32, &m.produced);
    assert_same_records(
        &format!("{command} ({client}) from the mirror vs the source"),
        &source_records,
        &mirror_records,
    );
    // The client's own view of the partitions: positions at the end, and
    // the watermarks it asks the agent for are the source's.
    let positions = per_partition(&from_mirror, "positions");
    let watermarks = per_partition(&from_mirror, "watermarks");
    let eof = (command == "confluent-consume").then(|| per_partition(&from_mirror, "eof_at"));
    for (&p, &end) in &m.ends {
        assert_eq!(
            positions[&p].as_i64(),
            Some(end),
            "{command}: position of partition {p}"
        );
        if let Some(eof) = &eof {
            assert_eq!(
                eof[&p].as_i64(),
                Some(end),
                "{command}: end-of-partition event of partition {p}"
            );
        }
        assert_eq!(
            watermarks[&p],
            serde_json::json!([0, end]),
            "{command}: watermarks of partition {p} from the agent"
        );
    }
    let errors = common::json_array(&from_mirror, "errors");
    assert!(
        errors.is_empty(),
        "{command} reported errors reading the mirror: {errors:?}"
    );
}

#[test]
fn kafka_python_reads_the_mirror_as_it_reads_the_source() {
    common::require_kafka_python();
    let m = Mirrored::start("kp-orders", 3, &[(400, "lz4", 0), (400, "gzip", 400)]);
    assert_client_reads_mirror_as_source("kafka-python-consume", &m);
    m.stop_and_check_logs();
}

#[test]
fn confluent_kafka_reads_the_mirror_as_it_reads_the_source_and_cannot_write_it() {
    let m = Mirrored::start("ck-orders", 3, &[(400, "zstd", 0), (400, "snappy", 400)]);
    assert_client_reads_mirror_as_source("confluent-consume", &m);

    let ends_before: Vec<i64> = (0..3).map(|p| m.served_high_watermark(p)).collect();
    let out = python(&[
        "confluent-produce",
        "--bootstrap",
        &m.mirror,
        "--topic",
        &m.topic,
        "--partition",
        "1",
        "--count",
        "3",
    ]);
    let reports = common::json_array(&out, "reports");
    assert_eq!(reports.len(), 3, "one delivery report per record: {out}");
    for report in reports {
        assert!(
            !report["error"].is_null(),
            "a record was delivered to a mirror topic: {report}"
        );
        assert_eq!(
            report["error"]["code"].as_i64(),
            Some(READ_ONLY_TOPIC),
            "the delivery error is not READ_ONLY_TOPIC: {report}"
        );
    }
    let ends_after: Vec<i64> = (0..3).map(|p| m.served_high_watermark(p)).collect();
    assert_eq!(ends_after, ends_before, "a refused Produce moved a log end");
    m.stop_and_check_logs();
}

// ---------------------------------------------------------------------------
// READ_COMMITTED on a data dir built here
// ---------------------------------------------------------------------------

/// One step of a partition's history.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A batch from no producer id.
    Plain(usize),
    /// A non-transactional batch of an idempotent producer.
    Idempotent(i64, usize),
    /// A transactional batch of producer `.0`.
    Txn(i64, usize),
    /// The COMMIT (true) or ABORT (false) marker of producer `.0`'s transaction.
    End(i64, bool),
    /// Offsets left unused before the next batch (as compaction leaves them).
    Gap(i64),
}

/// What happened to a data record, as a broker decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Not transactional, or in a committed transaction.
    Visible,
    Aborted,
    /// In a transaction that is still open.
    Open,
}

#[derive(Debug)]
struct BuiltPartition {
    /// (offset, fate, record) of every data record.
    records: Vec<(i64, Fate, ClientRecord)>,
    control_offsets: Vec<i64>,
    log_end: i64,
    last_stable: i64,
}

const PRODUCER_EPOCH: i16 = 3;
const COORDINATOR_EPOCH: i32 = 9;

/// Builds `steps` into batches at consecutive offsets (plus gaps), appends
/// them to `log`, and says independently of the log what a READ_COMMITTED
/// reader must see: the fate of every record, where the control records
/// are, and the last stable offset (the first offset of the earliest
/// transaction still open, else the log end).
fn build_partition(log: &mut ringmirror_storage::log::PartitionLog, partition: i32, steps: &[Step]) -> BuiltPartition {
    let mut offset = 0i64;
    let mut sequences: BTreeMap<i64, i32> = BTreeMap::new();
    // Producer id → (first offset, indices of its records) of its open transaction.
    let mut open: BTreeMap<i64, (i64, Vec<usize>)> = BTreeMap::new();
    let mut built = BuiltPartition {
        records: Vec::new(),
        control_offsets: Vec::new(),
        log_end: 0,
        last_stable: 0,
    };
    let t0 = 1_700_000_000_000 + i64::from(partition) * 1_000_000;
    for (i, &step) in steps.iter().enumerate() {
        // Leader epochs change halfway, as after a leader move at the source.
        let epoch = if i < steps.len() / 2 { 4 } else { 6 };
        let (producer, transactional, count) = match step {
            Step::Gap(n) => {
                offset += n;
                continue;
            }
            Step::End(pid, commit) => {
                let kind = if commit {
                    ControlType::Commit
                } else {
                    ControlType::Abort
                };
                let marker = BatchBuilder::control_marker(
                    offset,
                    epoch,
                    pid,
                    PRODUCER_EPOCH,
                    kind,
                    BatchBuilder::end_txn_marker_value(COORDINATOR_EPOCH),
                    t0 + offset,
                );
                log.append(&marker.build(), 0).expect("append a marker");
                let (_, indices) = open.remove(&pid).expect("a marker ends an open transaction");
                for i in indices {
                    built.records[i].1 = if commit { Fate::Visible } else { Fate::Aborted };
                }
                built.control_offsets.push(offset);
                offset += 1;
                continue;
            }
            Step::Plain(n) => (None, false, n),
            Step::Idempotent(pid, n) => (Some(pid), false, n),
            Step::Txn(pid, n) => (Some(pid), true, n),
        };
        let records: Vec<BuildRecord> = (0..count as i64)
            .map(|k| {
                let at = offset + k;
                BuildRecord {
                    // Timestamps not in offset order within a batch.
                    timestamp: t0 + 10 * at - 3 * (k % 2),
                    // Every seventh record has no key, every fifth no value.
                    key: (at % 7 != 3).then(|| format!("p{partition}-key-{at}").into_bytes()),
                    value: (at % 5 != 4).then(|| {
                        let mut v = format!("p{partition} offset {at} {step:?} ").into_bytes();
                        v.extend((0..at % 40).map(|b| (b * 37 + at) as u8));
                        v
                    }),
                    headers: if at % 3 == 0 {
                        Vec::new()
                    } else {
                        vec![
                            ("at".to_string(), Some(at.to_be_bytes().to_vec())),
                            ("empty".to_string(), (at % 2 == 0).then(Vec::new)),
                        ]
                    },
                }
            })
            .collect();
        let mut batch = BatchBuilder {
            base_offset: offset,
            partition_leader_epoch: epoch,
            transactional,
            records: records.clone(),
            ..BatchBuilder::default()
        };
        if let Some(pid) = producer {
            let sequence = sequences.entry(pid).or_insert(0);
            batch.producer_id = pid;
            batch.producer_epoch = PRODUCER_EPOCH;
            batch.base_sequence = *sequence;
            *sequence += count as i32;
        }
        log.append(&batch.build(), 0).expect("append a batch");
        for (k, r) in records.into_iter().enumerate() {
            let fate = if transactional {
                let (_, indices) = open
                    .entry(producer.expect("transactional"))
                    .or_insert((offset, Vec::new()));
                indices.push(built.records.len());
                Fate::Open
            } else {
                Fate::Visible
            };
            let record = ClientRecord {
                key: r.key,
                value: r.value,
                headers: r.headers.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect(),
                timestamp: r.timestamp,
                timestamp_type: "create_time".into(),
            };
            built.records.push((offset + k as i64, fate, record));
        }
        offset += count as i64;
    }
    built.log_end = offset;
    built.last_stable = open.values().map(|(first, _)| *first).min().unwrap_or(offset);
    assert_eq!(log.log_end_offset(), built.log_end, "partition {partition}: log end");
    built
}

/// Writes topic `topic` into a fresh data dir, closed cleanly as an agent
/// leaves it: partition 0 interleaves two producers' committed and aborted
/// transactions and leaves two open at the end; partition 1 has an offset
/// gap and everything decided. Segments of 512 bytes put transactions and their
/// markers in different segments.
fn build_data_dir(dir: &Path, topic: &str) -> BTreeMap<i32, BuiltPartition> {
    use Step::*;
    const A: i64 = 1000;
    const B: i64 = 2000;
    const C: i64 = 3000;
    const IDEMPOTENT: i64 = 500;
    let partitions: [Vec<Step>; 2] = [
        vec![
            Plain(3),
            Txn(A, 3),
            Txn(B, 2),
            Idempotent(IDEMPOTENT, 2),
            Txn(A, 2),
            Txn(B, 3),
            End(A, true),
            Txn(B, 1),
            End(B, false),
            Plain(2),
            Txn(B, 2),
            Txn(A, 2),
            Plain(1),
            Txn(A, 4),
            End(A, false),
            Txn(B, 1),
            End(B, true),
            Idempotent(IDEMPOTENT, 1),
            Txn(C, 2),
            Plain(2),
            Txn(A, 1),
            Plain(1),
        ],
        vec![
            Txn(B, 2),
            Plain(2),
            Txn(A, 3),
            Gap(5),
            Plain(2),
            End(B, false),
            Txn(A, 2),
            End(A, true),
            Txn(B, 3),
            Txn(A, 1),
            End(B, true),
            End(A, false),
            Plain(3),
        ],
    ];
    let log_dir = LogDir::open(dir).expect("open the data dir");
    let config = LogConfig {
        segment_bytes: 512,
        preallocate_bytes: 4096,
        prefault_bytes: 4096,
        ..LogConfig::default()
    };
    let mut logs = Vec::new();
    let mut built = BTreeMap::new();
    for (partition, steps) in (0..).zip(&partitions) {
        let tp = TopicPartition::new(topic, partition);
        let (mut log, _) = log_dir.open_partition(&tp, None, config, 0).expect("open a log");
        built.insert(partition, build_partition(&mut log, partition, steps));
        assert!(
            log.segment_base_offsets().len() > 3,
            "{tp}: the scenario should span several segments: {:?}",
            log.segment_base_offsets()
        );
        logs.push((tp, log));
    }
    log_dir.close(logs, 0).expect("close the data dir");
    built
}

/// Waits until the agent serves every built partition, and checks the
/// offsets a raw Fetch reports for it.
fn wait_served(addr: &str, topic: &str, built: &BTreeMap<i32, BuiltPartition>) {
    let started = Instant::now();
    for (&p, b) in built {
        let fetched = loop {
            let answer = common::KafkaConnection::connect(addr, Duration::from_secs(5))
                .and_then(|conn| conn.with_max_wait_ms(0).fetch(topic, p, 0, 1));
            match answer {
                Ok(f) if f.error_code == 0 => break f,
                other => assert!(
                    started.elapsed() < DEADLINE,
                    "the agent does not serve {topic}-{p}: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(fetched.high_watermark, b.log_end, "{topic}-{p}: high watermark");
        assert_eq!(
            fetched.last_stable_offset, b.last_stable,
            "{topic}-{p}: last stable offset"
        );
        assert_eq!(fetched.log_start_offset, 0, "{topic}-{p}: log start offset");
    }
}

#[test]
fn read_committed_clients_see_only_committed_records_at_their_offsets() {
    common::require_kafka_python();
    let topic = "txn-mix";
    let dir = tempfile::tempdir().expect("temp dir");
    let built = build_data_dir(dir.path(), topic);
    // The scenario has what it should: records of every fate, and partition
    // 0's last stable offset stops before its log end.
    let fates: BTreeSet<_> = built
        .values()
        .flat_map(|b| b.records.iter().map(|r| format!("{:?}", r.1)))
        .collect();
    assert_eq!(fates.len(), 3, "every fate occurs: {fates:?}");
    assert!(built[&0].last_stable < built[&0].log_end);
    assert_eq!(built[&1].last_stable, built[&1].log_end);

    let config = AgentConfig::parse(&format!(
        r#"
        data_dir = {:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        [log]
        segment_bytes = 512
        preallocate_bytes = 4096
        prefault_bytes = 4096
        "#,
        dir.path()
    ))
    .expect("agent config");
    let agent = Agent::start(config).expect("start the agent");
    let addr = agent.listener_addr().expect("the agent listens").to_string();
    wait_served(&addr, topic, &built);

    let visible = |committed: bool| -> ClientRecords {
        built
            .iter()
            .flat_map(|(&p, b)| {
                b.records
                    .iter()
                    .filter(move |(offset, fate, _)| !committed || (*fate == Fate::Visible && *offset < b.last_stable))
                    .map(move |(offset, _, r)| ((p, *offset), r.clone()))
            })
            .collect()
    };
    let log_ends: BTreeMap<i32, i64> = built.iter().map(|(&p, b)| (p, b.log_end)).collect();
    let stable_ends: BTreeMap<i32, i64> = built.iter().map(|(&p, b)| (p, b.last_stable)).collect();
    let controls: BTreeSet<(i32, i64)> = built
        .iter()
        .flat_map(|(&p, b)| b.control_offsets.iter().map(move |&o| (p, o)))
        .collect();

    // Four independent client runs, all at once (each is a process).
    let runs = [
        ("kafka-python-consume", "read_committed"),
        ("kafka-python-consume", "read_uncommitted"),
        ("confluent-consume", "read_committed"),
        ("confluent-consume", "read_uncommitted"),
    ];
    let outputs: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|&(command, isolation)| {
                let ends = if isolation == "read_committed" {
                    &stable_ends
                } else {
                    &log_ends
                };
                let addr = &addr;
                s.spawn(move || consume(command, addr, topic, ends, isolation, &[]))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client run")).collect()
    });
    for ((command, isolation), out) in runs.iter().zip(&outputs) {
        let committed = *isolation == "read_committed";
        let what = format!("{command} {isolation} ({})", common::json_str(out, "version"));
        let records = client_records(out);
        let leaked: Vec<_> = records.keys().filter(|k| controls.contains(k)).collect();
        assert!(leaked.is_empty(), "{what}: control records delivered at {leaked:?}");
        assert_same_records(&what, &visible(committed), &records);
        let ends = if committed { &stable_ends } else { &log_ends };
        // Where each client says it stopped: exactly at the end (the last
        // stable offset for READ_COMMITTED), not past it.
        let positions = per_partition(out, "positions");
        for (p, &end) in ends {
            assert_eq!(positions[p].as_i64(), Some(end), "{what}: position of partition {p}");
        }
        if *command == "confluent-consume" {
            let eof = per_partition(out, "eof_at");
            for (p, &end) in ends {
                assert_eq!(
                    eof[p].as_i64(),
                    Some(end),
                    "{what}: end-of-partition event of partition {p}"
                );
            }
        }
        // ListOffsets at the client's isolation level: LSO or log end.
        let watermarks = per_partition(out, "watermarks");
        for (p, &end) in ends {
            assert_eq!(
                watermarks[p],
                serde_json::json!([0, end]),
                "{what}: watermarks of partition {p}"
            );
        }
        let errors = common::json_array(out, "errors");
        assert!(errors.is_empty(), "{what}: the client reported errors: {errors:?}");
    }
    agent.stop().expect("stop the agent");
}

// ---------------------------------------------------------------------------
// ListOffsets at every advertised version (an agent bug, see below)
// ---------------------------------------------------------------------------

/// One ListOffsets request at `version` for one partition over a fresh
/// connection: (error code, offset, leader epoch) of the answer, or the I/O
/// error when the agent closed the connection instead of answering.
fn list_offsets_raw(
    addr: &str,
    version: i16,
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation_level: i8,
) -> std::io::Result<(i16, i64, i32)> {
    use bytes::BytesMut;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{
        ApiKey, ListOffsetsRequest, ListOffsetsResponse, RequestHeader, ResponseHeader, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let api = ApiKey::ListOffsets;
    let mut frame = BytesMut::new();
    frame.extend_from_slice(&[0; 4]);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("ringmirror-serve-test")))
        .encode(&mut frame, api.request_header_version(version))
        .map_err(std::io::Error::other)?;
    ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        // The field exists from v2 on.
        .with_isolation_level(if version >= 2 { isolation_level } else { 0 })
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(timestamp),
                ]),
        ])
        .encode(&mut frame, version)
        .map_err(std::io::Error::other)?;
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    stream.write_all(&frame)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let mut body = vec![0u8; i32::from_be_bytes(size).clamp(0, 1 << 20) as usize];
    stream.read_exact(&mut body)?;
    let mut body = bytes::Bytes::from(body);
    let header =
        ResponseHeader::decode(&mut body, api.response_header_version(version)).map_err(std::io::Error::other)?;
    assert_eq!(header.correlation_id, 7, "ListOffsets v{version}: correlation id");
    let response = ListOffsetsResponse::decode(&mut body, version).map_err(std::io::Error::other)?;
    let p = &response.topics[0].partitions[0];
    Ok((p.error_code, p.offset, p.leader_epoch))
}

/// Asks the agent serving the built data dir for partition 0's earliest,
/// latest and last stable offsets with ListOffsets at each of `versions`;
/// returns what went wrong.
fn list_offsets_failures(versions: std::ops::RangeInclusive<i16>) -> Vec<String> {
    let topic = "txn-mix";
    let dir = tempfile::tempdir().expect("temp dir");
    let built = build_data_dir(dir.path(), topic);
    let config = AgentConfig::parse(&format!(
        "data_dir = {:?}\nshards = 1\n[listener]\naddress = \"127.0.0.1:0\"\n",
        dir.path()
    ))
    .expect("agent config");
    let agent = Agent::start(config).expect("start the agent");
    let addr = agent.listener_addr().expect("the agent listens").to_string();
    wait_served(&addr, topic, &built);
    let b = &built[&0];
    let mut failures = Vec::new();
    for version in versions {
        // (what, timestamp, isolation level, expected offset); v1 has no
        // isolation level, so it always gets the log end.
        let questions = [
            ("EARLIEST", -2, 0, 0),
            ("LATEST", -1, 0, b.log_end),
            (
                "LATEST read_committed",
                -1,
                1,
                if version >= 2 { b.last_stable } else { b.log_end },
            ),
        ];
        for (what, timestamp, isolation, expected) in questions {
            match list_offsets_raw(&addr, version, topic, 0, timestamp, isolation) {
                Ok((0, offset, _)) if offset == expected => {}
                other => failures.push(format!("v{version} {what}: {other:?}, expected offset {expected}")),
            }
        }
    }
    agent.stop().expect("stop the agent");
    failures
}

/// ListOffsets v4–v7 (what current clients use): earliest, latest, and
/// the last stable offset for READ_COMMITTED.
#[test]
fn list_offsets_v4_to_v7_give_earliest_latest_and_last_stable_offsets() {
    let failures = list_offsets_failures(4..=7);
    assert!(failures.is_empty(), "ListOffsets answers:\n{}", failures.join("\n"));
}

/// ListOffsets v1–v3, which the agent advertises too, must be answered
/// even where a leader epoch is known (the field exists only from v4 on;
/// kcat 1.7 with librdkafka 2.0.2 sends v2, kafka-python set to Kafka 2.0
/// sends v3).
#[test]
fn list_offsets_v1_to_v3_are_answered_too() {
    let failures = list_offsets_failures(1..=3);
    assert!(failures.is_empty(), "ListOffsets answers:\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------
// A second agent on a running one's port or data dir
// ---------------------------------------------------------------------------

fn listener_only_config(data_dir: &Path, address: &str) -> AgentConfig {
    AgentConfig::parse(&format!(
        "data_dir = {data_dir:?}\nshards = 1\n[listener]\naddress = {address:?}\n"
    ))
    .expect("agent config")
}

/// Starting a second agent where one already runs must fail, as a Kafka
/// broker fails on a port in use or on a log dir whose `.lock` another
/// broker holds. (The listener binds with SO_REUSEPORT so that every shard
/// accepts on the port; without a check another process could share it.)
#[test]
fn a_second_agent_cannot_take_a_running_agents_port_or_data_dir() {
    let first_dir = tempfile::tempdir().expect("temp dir");
    let other_dir = tempfile::tempdir().expect("temp dir");
    let first = Agent::start(listener_only_config(first_dir.path(), "127.0.0.1:0")).expect("start the agent");
    let addr = first.listener_addr().expect("the agent listens").to_string();
    let mut started = Vec::new();
    // The same address, another data dir.
    if let Ok(second) = Agent::start(listener_only_config(other_dir.path(), &addr)) {
        started.push(format!("a second agent listening on {addr} too"));
        second.stop().expect("stop the second agent");
    }
    // The same data dir, another port.
    if let Ok(second) = Agent::start(listener_only_config(first_dir.path(), "127.0.0.1:0")) {
        started.push(format!("a second agent on {}", first_dir.path().display()));
        second.stop().expect("stop the second agent");
    }
    first.stop().expect("stop the first agent");
    assert!(started.is_empty(), "started while the first agent ran: {started:?}");
}
