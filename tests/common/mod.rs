//! Shared helpers for the interop integration tests: running the kafka-python
//! script in `tests/py/`, comparing records in one shape whoever decoded them,
//! opening and inspecting a [`PartitionLog`], and [`KafkaConnection`], a small
//! blocking Kafka client that fetches raw record batches.
//!
//! Every wait here is bounded: child processes and sockets have timeouts, and
//! fetch loops have an iteration cap.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
pub use ringmirror_kafka_harness::ChildGuard;
use ringmirror_storage::batch::{BatchIter, Record, RecordBatch};
use ringmirror_storage::log::{LogConfig, LogDir, OpenOptions, PartitionLog, TopicPartition};
use serde_json::Value;

pub mod cut_proxy;
pub mod kafka;
pub mod metadata_proxy;
pub mod pki;
pub mod rewriting_proxy;
pub mod tansu;

/// Whole batches as (base offset, bytes), in log order.
pub type Batches = Vec<(i64, Vec<u8>)>;

/// Largest batch any helper accepts while framing.
pub const MAX_BATCH_BYTES: u32 = 64 * 1024 * 1024;
/// Bound on decompressed records per batch in tests.
pub const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------
// kafka-python
// ---------------------------------------------------------------------------

/// `tests/py/kafka_record_batches.py`.
pub fn kafka_python_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/kafka_record_batches.py")
}

/// Runs `cmd` to completion with a deadline, returning (status ok, stdout, stderr).
/// Kills the child when the deadline passes and panics.
fn run_bounded(mut cmd: Command, what: &str, timeout: Duration) -> (bool, Vec<u8>, Vec<u8>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e} (is python3 installed and on PATH?)"));
    // Drain both pipes on threads so a chatty child cannot block on a full pipe.
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_thread = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status.success(),
        out_thread.join().expect("stdout reader"),
        err_thread.join().expect("stderr reader"),
    )
}

/// Fails the test (never skips it) unless python3 with kafka-python and its
/// codec modules is available.
pub fn require_kafka_python() {
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import kafka, kafka.record, lz4, snappy, zstandard; print(kafka.__version__)",
    ]);
    let (ok, out, err) = run_bounded(cmd, "python3 (checking for kafka-python)", Duration::from_secs(60));
    assert!(
        ok,
        "these interop tests need python3 with kafka-python, lz4, python-snappy and zstandard \
         (pip install kafka-python lz4 python-snappy zstandard); the import failed:\n{}",
        String::from_utf8_lossy(&err)
    );
    let version = String::from_utf8_lossy(&out);
    let major: u32 = version
        .trim()
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 2,
        "kafka-python {} is too old: the record-batch API used here is kafka-python 2.x/3.x",
        version.trim()
    );
}

/// Runs the kafka-python script with `args`; panics with its stderr on failure.
pub fn run_kafka_python(args: &[&std::ffi::OsStr]) -> Vec<u8> {
    require_kafka_python();
    let mut cmd = Command::new("python3");
    cmd.arg(kafka_python_script()).args(args);
    let what = format!("kafka_record_batches.py {:?}", args);
    let (ok, out, err) = run_bounded(cmd, &what, Duration::from_secs(120));
    assert!(
        ok,
        "{what} failed:\nstderr:\n{}\nstdout (first 2000 bytes):\n{}",
        String::from_utf8_lossy(&err),
        String::from_utf8_lossy(&out[..out.len().min(2000)])
    );
    out
}

/// `build OUT_DIR`: kafka-python builds batches; returns (batches.bin, expected.json).
pub fn kafka_python_build(out_dir: &Path) -> (Vec<u8>, Value) {
    run_kafka_python(&["build".as_ref(), out_dir.as_os_str()]);
    let batches = std::fs::read(out_dir.join("batches.bin")).expect("read batches.bin");
    let expected = std::fs::read(out_dir.join("expected.json")).expect("read expected.json");
    (
        batches,
        serde_json::from_slice(&expected).expect("expected.json is JSON"),
    )
}

/// `read LOG_FILE`: kafka-python's reader over one of our segment files.
pub fn kafka_python_read(log_file: &Path) -> Value {
    let out = run_kafka_python(&["read".as_ref(), log_file.as_os_str()]);
    serde_json::from_slice(&out).unwrap_or_else(|e| panic!("kafka-python read printed no JSON ({e})"))
}

// ---------------------------------------------------------------------------
// One record shape for every decoder
// ---------------------------------------------------------------------------

/// A record as every decoder must see it; bytes kept as bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rec {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl From<&Record> for Rec {
    fn from(r: &Record) -> Self {
        Self {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.iter().map(|h| (h.key.clone(), h.value.clone())).collect(),
        }
    }
}

pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

fn opt_hex(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(unhex(s)),
        other => panic!("expected hex string or null, got {other}"),
    }
}

pub fn json_i64(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {v}"))
}

pub fn json_bool(v: &Value, field: &str) -> bool {
    v[field]
        .as_bool()
        .unwrap_or_else(|| panic!("{field} is not a bool in {v}"))
}

pub fn json_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} is not a string in {v}"))
}

pub fn json_array<'a>(v: &'a Value, field: &str) -> &'a Vec<Value> {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} is not an array in {v}"))
}

/// A record from the script's JSON (`build`'s expected.json or `read`'s output).
pub fn rec_from_json(v: &Value) -> Rec {
    Rec {
        offset: json_i64(v, "offset"),
        timestamp: json_i64(v, "timestamp"),
        key: opt_hex(&v["key"]),
        value: opt_hex(&v["value"]),
        headers: json_array(v, "headers")
            .iter()
            .map(|h| {
                let h = h.as_array().expect("header is [key, value]");
                (unhex(h[0].as_str().expect("header key is hex")), opt_hex(&h[1]))
            })
            .collect(),
    }
}

/// Every record of every batch in the script's JSON, in order.
pub fn recs_from_json_batches(batches: &[Value]) -> Vec<Rec> {
    batches
        .iter()
        .flat_map(|b| json_array(b, "records").iter().map(rec_from_json))
        .collect()
}

// ---------------------------------------------------------------------------
// Partition logs
// ---------------------------------------------------------------------------

/// Opens (creating) the partition log at `dir` with `config`.
pub fn open_log(dir: &Path, config: LogConfig) -> PartitionLog {
    let (log, _report) =
        PartitionLog::open(OpenOptions::new(dir, config)).unwrap_or_else(|e| panic!("open log {}: {e}", dir.display()));
    log
}

/// Every stored batch as (base offset, bytes), in log order.
pub fn stored_batches(log: &PartitionLog) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    log.for_each_batch(|b| out.push((b.base_offset(), b.bytes().to_vec())))
        .expect("iterate stored batches");
    out
}

/// The batches' bytes, concatenated in order.
pub fn concat_batches(batches: &[(i64, Vec<u8>)]) -> Vec<u8> {
    batches.iter().flat_map(|(_, b)| b.iter().copied()).collect()
}

/// Splits whole batches into (base offset, bytes); panics on a partial tail or bad framing.
pub fn split_batches(bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut iter = BatchIter::new(bytes, MAX_BATCH_BYTES);
    let mut out = Vec::new();
    for item in iter.by_ref() {
        let (_, batch) = item.expect("well-framed batches");
        out.push((batch.base_offset(), batch.bytes().to_vec()));
    }
    assert_eq!(iter.position(), bytes.len(), "bytes after the last whole batch");
    out
}

/// The segment `.log` files of a partition directory, by base offset.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list partition dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

/// A view over bytes that must be exactly one batch.
pub fn batch_view(bytes: &[u8]) -> RecordBatch<&[u8]> {
    RecordBatch::new(bytes).expect("exactly one batch")
}

// ---------------------------------------------------------------------------
// A small blocking Kafka client
// ---------------------------------------------------------------------------

/// What a Fetch returned for one partition.
#[derive(Debug, Clone)]
pub struct FetchedPartition {
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The raw `records` bytes, exactly as the broker sent them (may end in a
    /// partial batch and may start below the fetch offset).
    pub records: Bytes,
}

/// A blocking, single-connection Kafka client for tests: speaks just enough
/// of the protocol (size-prefixed frames, request header v1, Fetch v4–v11
/// encoded and decoded with the `kafka-protocol` crate) to pull the raw
/// record batches of one partition from a broker — the bytes a mirror
/// stores. No ApiVersions handshake (brokers, and librdkafka's mock cluster,
/// answer Fetch without one), no metadata: point it at the partition's leader.
///
/// Reads and writes time out, so a silent broker fails a test instead of
/// hanging it.
pub struct KafkaConnection {
    stream: TcpStream,
    correlation_id: i32,
    fetch_version: i16,
    max_wait_ms: i32,
}

impl KafkaConnection {
    /// Connects to the first address of `bootstrap` (a `host:port[,host:port…]`
    /// list) with `timeout` on connect, reads and writes.
    pub fn connect(bootstrap: &str, timeout: Duration) -> std::io::Result<Self> {
        let first = bootstrap.split(',').next().unwrap_or(bootstrap).trim();
        let first = first.rsplit_once("://").map_or(first, |(_, rest)| rest);
        let addrs: Vec<SocketAddr> = first.to_socket_addrs()?.collect();
        let mut last_err = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout))?;
                    stream.set_write_timeout(Some(timeout))?;
                    stream.set_nodelay(true)?;
                    return Ok(Self {
                        stream,
                        correlation_id: 0,
                        // v10: without v11's client metadata a Kafka
                        // follower refuses a consumer's Fetch, so only the
                        // leader answers (at v11+ followers serve it, up to
                        // their lagging high watermark).
                        fetch_version: 10,
                        max_wait_ms: 100,
                    });
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other(format!("no address for {first}"))))
    }

    /// Fetch version to use, 4..=11 (the non-flexible versions that name topics).
    pub fn with_fetch_version(mut self, version: i16) -> Self {
        assert!(
            (4..=11).contains(&version),
            "Fetch v{version} is not supported by this helper"
        );
        self.fetch_version = version;
        self
    }

    /// How long the broker may wait for data before answering a Fetch (100 ms
    /// unless set; brokers, and the mock cluster, wait this long whenever
    /// there is nothing to return — 0 makes probes past the end quick).
    pub fn with_max_wait_ms(mut self, max_wait_ms: i32) -> Self {
        self.max_wait_ms = max_wait_ms;
        self
    }

    /// The versions advertised in ApiVersions (v3): (min, max) by API key.
    pub fn advertised_versions(&mut self) -> BTreeMap<i16, (i16, i16)> {
        let versions: kafka_protocol::messages::ApiVersionsResponse = self
            .request(
                kafka_protocol::messages::ApiKey::ApiVersions as i16,
                3,
                &kafka_protocol::messages::ApiVersionsRequest::default(),
            )
            .expect("ApiVersions");
        versions
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect()
    }

    /// Sends one request and decodes its response (any API and version
    /// the `kafka-protocol` crate knows).
    pub fn request<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
        &mut self,
        api_key: i16,
        version: i16,
        request: &Req,
    ) -> std::io::Result<Resp> {
        let mut body = self.round_trip::<Req, Resp>(api_key, version, request)?;
        Resp::decode(&mut body, version).map_err(std::io::Error::other)
    }

    /// Sends one request frame and returns the response body after its header.
    fn round_trip<Req: Encodable + HeaderVersion, Resp: HeaderVersion>(
        &mut self,
        api_key: i16,
        version: i16,
        request: &Req,
    ) -> std::io::Result<Bytes> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api_key)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("ringmirror-interop-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(std::io::Error::other)?;
        request.encode(&mut body, version).map_err(std::io::Error::other)?;
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame)?;

        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let size = i32::from_be_bytes(size);
        if !(0..=256 * 1024 * 1024).contains(&size) {
            return Err(std::io::Error::other(format!(
                "response frame size {size} out of bounds"
            )));
        }
        let mut response = vec![0u8; size as usize];
        self.stream.read_exact(&mut response)?;
        let mut response = Bytes::from(response);
        let header =
            ResponseHeader::decode(&mut response, Resp::header_version(version)).map_err(std::io::Error::other)?;
        if header.correlation_id != self.correlation_id {
            return Err(std::io::Error::other(format!(
                "correlation id {} in response, {} expected",
                header.correlation_id, self.correlation_id
            )));
        }
        Ok(response)
    }

    /// One Fetch (READ_UNCOMMITTED, no session) of one partition from `offset`.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
    ) -> std::io::Result<FetchedPartition> {
        let version = self.fetch_version;
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(self.max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(offset)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(max_bytes),
                    ]),
            ]);
        let mut body = self.round_trip::<FetchRequest, FetchResponse>(1, version, &request)?;
        let response = FetchResponse::decode(&mut body, version).map_err(std::io::Error::other)?;
        if response.error_code != 0 {
            return Err(std::io::Error::other(format!(
                "Fetch failed with error code {}",
                response.error_code
            )));
        }
        let data = response
            .responses
            .iter()
            .filter(|t| t.topic.0.as_str() == topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| std::io::Error::other(format!("no {topic}-{partition} in the Fetch response")))?;
        Ok(FetchedPartition {
            error_code: data.error_code,
            high_watermark: data.high_watermark,
            last_stable_offset: data.last_stable_offset,
            log_start_offset: data.log_start_offset,
            records: data.records.clone().unwrap_or_default(),
        })
    }

    /// Fetches whole batches from `from_offset` until the high watermark, as a
    /// mirror would: a partial batch at the end of a response is dropped (and
    /// fetched again next time), a batch that starts below the fetch offset is
    /// dropped, and each next Fetch starts after the last whole batch. Stops
    /// with an error after `max_requests` Fetches without reaching the high
    /// watermark. Returns every whole batch as (base offset, bytes exactly as
    /// received), grouped per Fetch response, and the last high watermark.
    pub fn fetch_all(
        &mut self,
        topic: &str,
        partition: i32,
        from_offset: i64,
        max_requests: usize,
    ) -> std::io::Result<(Vec<Batches>, i64)> {
        let mut out = Vec::new();
        let mut offset = from_offset;
        let mut high_watermark = -1;
        for _ in 0..max_requests {
            let fetched = self.fetch(topic, partition, offset, 1024 * 1024)?;
            if fetched.error_code != 0 {
                return Err(std::io::Error::other(format!(
                    "Fetch {topic}-{partition} at {offset}: error code {}",
                    fetched.error_code
                )));
            }
            high_watermark = fetched.high_watermark;
            let mut batches = Vec::new();
            for item in BatchIter::new(&fetched.records, MAX_BATCH_BYTES) {
                let (_, batch) = item.map_err(std::io::Error::other)?;
                if batch.base_offset() < offset {
                    continue;
                }
                batches.push((batch.base_offset(), batch.bytes().to_vec()));
                offset = batch.next_offset();
            }
            if !batches.is_empty() {
                out.push(batches);
            }
            if offset >= high_watermark {
                return Ok((out, high_watermark));
            }
        }
        Err(std::io::Error::other(format!(
            "{topic}-{partition}: reached offset {offset} of high watermark {high_watermark} in {max_requests} Fetches"
        )))
    }
}

// ---------------------------------------------------------------------------
// Mirror checks: our logs against a raw Fetch of the source
// ---------------------------------------------------------------------------

/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// One source partition as raw Fetches from its leader see it.
#[derive(Debug, Clone)]
pub struct SourcePartitionLog {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Every whole batch from the log start to the high watermark, exactly as served.
    pub batches: Batches,
}

/// Fetches every batch of `topic`-`partition` the source still holds, from
/// its log start offset (learned from a Fetch at offset 0, which answers
/// OFFSET_OUT_OF_RANGE with the log start once retention has moved it) to
/// the high watermark. Asks each broker of `bootstrap` in turn (only the
/// leader answers) and retries whatever goes wrong meanwhile — injected
/// errors, a moving leader, retention racing the fetch — until `timeout`.
pub fn source_partition_log(bootstrap: &str, topic: &str, partition: i32, timeout: Duration) -> SourcePartitionLog {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::from("no broker answered");
    loop {
        for broker in bootstrap.split(',') {
            match try_source_partition_log(broker, topic, partition) {
                Ok(log) => return log,
                Err(e) => last_error = format!("{broker}: {e}"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "cannot fetch {topic}-{partition} from the source within {timeout:?}: {last_error}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn try_source_partition_log(broker: &str, topic: &str, partition: i32) -> std::io::Result<SourcePartitionLog> {
    let mut conn = KafkaConnection::connect(broker, Duration::from_secs(5))?.with_max_wait_ms(0);
    let probe = conn.fetch(topic, partition, 0, 1)?;
    let log_start_offset = match probe.error_code {
        0 | OFFSET_OUT_OF_RANGE => probe.log_start_offset.max(0),
        code => return Err(std::io::Error::other(format!("Fetch at 0: error code {code}"))),
    };
    let (responses, high_watermark) = conn.fetch_all(topic, partition, log_start_offset, 1_000_000)?;
    let batches: Batches = responses.into_iter().flatten().collect();
    // Retention may have moved the start while we fetched: ask again.
    let again = conn.fetch(topic, partition, high_watermark, 1)?;
    if again.error_code != 0 || again.log_start_offset != log_start_offset {
        return Err(std::io::Error::other(format!(
            "log start moved from {log_start_offset} to {} (error code {}) while fetching",
            again.log_start_offset, again.error_code
        )));
    }
    // A compacted log may have lost its first records to the cleaner (the
    // first batch above the log start); nothing lies below the log start.
    if let Some((first, _)) = batches.first()
        && *first < log_start_offset
    {
        return Err(std::io::Error::other(format!(
            "first batch at {first}, below the log start {log_start_offset}"
        )));
    }
    Ok(SourcePartitionLog {
        log_start_offset,
        high_watermark,
        batches,
    })
}

/// One of our partition logs as the data dir holds it.
#[derive(Debug, Clone)]
pub struct MirroredPartitionLog {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// Every stored batch, including any kept below the log start in its first segment.
    pub batches: Batches,
    /// The leader-epoch cache: (epoch, start offset).
    pub epochs: Vec<(i32, i64)>,
    /// Base offsets of the segments.
    pub segment_bases: Vec<i64>,
}

/// Opens the data dir and the logs of `tps` (the agent must be stopped),
/// reads them, and closes them cleanly again, so the next agent start sees
/// the same clean (or unclean) state as before — except that opening after
/// an unclean stop runs recovery.
pub fn mirrored_partition_logs(
    data_dir: &Path,
    tps: &[TopicPartition],
) -> BTreeMap<TopicPartition, MirroredPartitionLog> {
    let was_clean = data_dir.join(".kafka_cleanshutdown").exists();
    let log_dir = LogDir::open(data_dir).unwrap_or_else(|e| panic!("open data dir {}: {e}", data_dir.display()));
    // Only reading: reserve and pre-fault little for the active segments.
    let config = LogConfig {
        preallocate_bytes: 4096,
        prefault_bytes: 4096,
        ..LogConfig::default()
    };
    let mut out = BTreeMap::new();
    let mut logs = Vec::new();
    for tp in tps {
        let (log, _) = log_dir
            .open_partition(tp, None, config, 0)
            .unwrap_or_else(|e| panic!("open our log of {tp}: {e}"));
        out.insert(
            tp.clone(),
            MirroredPartitionLog {
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.log_end_offset(),
                batches: stored_batches(&log),
                epochs: log
                    .epoch_cache()
                    .entries()
                    .iter()
                    .map(|e| (e.epoch, e.start_offset))
                    .collect(),
                segment_bases: log.segment_base_offsets(),
            },
        );
        logs.push((tp.clone(), log));
    }
    if was_clean {
        log_dir.close(logs, 0).expect("close the logs cleanly again");
    }
    out
}

/// Asserts that our log of every partition in `tps` holds exactly what the
/// source serves: the same log start offset, and from there to the source's
/// high watermark the same batches, byte for byte, at the same offsets — no
/// gap, no duplicate, nothing more. Batches we keep below the log start (in
/// the segment that holds it, as Kafka does) must end at or below it.
/// Returns both sides per partition for further checks.
pub fn assert_mirrors_source(
    data_dir: &Path,
    bootstrap: &str,
    tps: &[TopicPartition],
) -> BTreeMap<TopicPartition, (SourcePartitionLog, MirroredPartitionLog)> {
    let ours = mirrored_partition_logs(data_dir, tps);
    let mut out = BTreeMap::new();
    for (tp, ours) in ours {
        let source = source_partition_log(bootstrap, &tp.topic, tp.partition, Duration::from_secs(30));
        assert_partition_mirrors_source(&tp, &source, &ours);
        out.insert(tp, (source, ours));
    }
    out
}

/// The per-partition check of [`assert_mirrors_source`].
pub fn assert_partition_mirrors_source(tp: &TopicPartition, source: &SourcePartitionLog, ours: &MirroredPartitionLog) {
    assert!(
        !source.batches.is_empty(),
        "{tp}: the source holds no data (a test that checks nothing)"
    );
    // Offsets strictly increase through our whole log: nothing is stored twice.
    let mut next = i64::MIN;
    for (base, bytes) in &ours.batches {
        let batch = batch_view(bytes);
        assert!(
            *base >= next,
            "{tp}: our batch at {base} overlaps the previous one (ends at {next}): a duplicate"
        );
        assert!(batch.crc_is_valid(), "{tp}: our batch at {base} fails its CRC");
        next = batch.next_offset();
    }
    assert_eq!(
        ours.log_start_offset, source.log_start_offset,
        "{tp}: our log start offset must be the source's"
    );
    assert_eq!(
        ours.log_end_offset, source.high_watermark,
        "{tp}: our log end offset must be the source's high watermark"
    );
    let from_start: Vec<&(i64, Vec<u8>)> = ours
        .batches
        .iter()
        .filter(|(base, _)| *base >= source.log_start_offset)
        .collect();
    if let Some((base, bytes)) = ours.batches.iter().rfind(|(base, _)| *base < source.log_start_offset) {
        assert!(
            batch_view(bytes).next_offset() <= source.log_start_offset,
            "{tp}: our batch at {base} straddles the log start {}",
            source.log_start_offset
        );
    }
    for (i, (s_base, s_bytes)) in source.batches.iter().enumerate() {
        let Some((o_base, o_bytes)) = from_start.get(i) else {
            panic!(
                "{tp}: we hold {} batches from the log start {}, the source {}: ours end before its batch at {s_base}",
                from_start.len(),
                source.log_start_offset,
                source.batches.len()
            );
        };
        assert_eq!(
            o_base, s_base,
            "{tp}: batch #{i} from the log start is at {o_base} in ours, at {s_base} at the source (a gap or a duplicate)"
        );
        if o_bytes != s_bytes {
            let at = o_bytes.iter().zip(s_bytes).position(|(a, b)| a != b);
            panic!(
                "{tp}: batch at {o_base} differs from the source's bytes (lengths {} and {}, first difference at byte {at:?})",
                o_bytes.len(),
                s_bytes.len()
            );
        }
    }
    assert_eq!(
        from_start.len(),
        source.batches.len(),
        "{tp}: we hold batches the source does not"
    );
}

/// Checks that our leader-epoch cache says where each epoch of the
/// mirrored batches (from the log start on) begins; returns how many epochs.
pub fn assert_epoch_cache_matches_batches(tp: &TopicPartition, ours: &MirroredPartitionLog) -> usize {
    let mut expected: Vec<(i32, i64)> = Vec::new();
    for (base, bytes) in ours.batches.iter().filter(|(b, _)| *b >= ours.log_start_offset) {
        let epoch = batch_view(bytes).partition_leader_epoch();
        if expected.last().is_none_or(|&(e, _)| e != epoch) {
            expected.push((epoch, *base));
        }
    }
    assert_eq!(ours.epochs, expected, "{tp}: leader-epoch cache");
    expected.len()
}

// ---------------------------------------------------------------------------
// Watching a running agent's segment files from outside
// ---------------------------------------------------------------------------

/// What a read-only scan of a partition directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskScan {
    /// Base offsets of the `.log` files.
    pub segment_bases: Vec<i64>,
    /// (base offset, next offset) of each whole, CRC-valid batch, in order,
    /// up to the first byte that is not one.
    pub batches: Vec<(i64, i64)>,
}

impl DiskScan {
    /// The offset after the last whole batch, if any.
    pub fn end_offset(&self) -> Option<i64> {
        self.batches.last().map(|&(_, next)| next)
    }
}

/// Reads a partition directory's segment files read-only — an agent may be
/// writing them at the same time — and lists the whole, CRC-valid batches
/// with increasing offsets, stopping at the first byte that is not one (a
/// batch still being received, preallocated zeros). Never opens the log,
/// so it cannot disturb the writer.
pub fn scan_partition_dir(dir: &Path) -> DiskScan {
    let mut scan = DiskScan::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return scan;
    };
    let mut files: Vec<(i64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter_map(|p| Some((p.file_stem()?.to_str()?.parse().ok()?, p)))
        .collect();
    files.sort();
    scan.segment_bases = files.iter().map(|(b, _)| *b).collect();
    let mut next = i64::MIN;
    for (_, path) in files {
        // A segment may be deleted (truncation, retention) under our feet.
        let Ok(bytes) = std::fs::read(&path) else { break };
        let mut whole = true;
        let mut iter = BatchIter::new(&bytes, MAX_BATCH_BYTES);
        for item in iter.by_ref() {
            let Ok((_, batch)) = item else {
                whole = false;
                break;
            };
            if !batch.crc_is_valid() || batch.base_offset() < next {
                whole = false;
                break;
            }
            next = batch.next_offset();
            scan.batches.push((batch.base_offset(), next));
        }
        if !whole || iter.position() != bytes.len() {
            break;
        }
    }
    scan
}

/// The source's (log start offset, high watermark) of `topic`-`partition`,
/// from a Fetch far past the end of its leader: librdkafka's mock cluster
/// answers OFFSET_OUT_OF_RANGE with both filled in and no records (a Kafka
/// broker may leave them -1: then this keeps retrying until `timeout`).
/// Retries like [`source_partition_log`].
pub fn source_offsets(bootstrap: &str, topic: &str, partition: i32, timeout: Duration) -> (i64, i64) {
    let deadline = Instant::now() + timeout;
    let mut last_error = String::from("no broker answered");
    loop {
        for broker in bootstrap.split(',') {
            let answer = KafkaConnection::connect(broker, Duration::from_secs(5))
                .and_then(|conn| conn.with_max_wait_ms(0).fetch(topic, partition, i64::MAX / 2, 1));
            match answer {
                Ok(f)
                    if matches!(f.error_code, 0 | OFFSET_OUT_OF_RANGE)
                        && f.high_watermark >= 0
                        && f.log_start_offset >= 0 =>
                {
                    return (f.log_start_offset, f.high_watermark);
                }
                Ok(f) => last_error = format!("{broker}: error code {}", f.error_code),
                Err(e) => last_error = format!("{broker}: {e}"),
            }
        }
        assert!(
            Instant::now() < deadline,
            "no offsets of {topic}-{partition} from the source within {timeout:?}: {last_error}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The source's high watermark of `topic`-`partition` (see [`source_offsets`]).
pub fn source_high_watermark(bootstrap: &str, topic: &str, partition: i32, timeout: Duration) -> i64 {
    source_offsets(bootstrap, topic, partition, timeout).1
}

/// Config of an agent serving on a free loopback port (2 shards, small
/// segments) that mirrors nothing; `extra` is TOML appended to the
/// `[listener]` table.
pub fn serving_config(data_dir: &Path, extra: &str) -> ringmirror::config::AgentConfig {
    ringmirror::config::AgentConfig::parse(&serving_toml(data_dir, extra)).expect("agent config")
}

/// [`serving_config`]'s TOML, which ends in the `[log]` table.
fn serving_toml(data_dir: &Path, extra: &str) -> String {
    format!(
        r#"
        data_dir = {data_dir:?}
        shards = 2
        [listener]
        address = "127.0.0.1:0"
        {extra}
        [log]
        segment_bytes = 65536
        "#
    )
}

/// [`serving_config`], mirroring `topics` from `source` as mirror "dr"
/// with quick fetch settings.
pub fn serving_mirror_config(
    data_dir: &Path,
    source: &str,
    topics: &[&str],
    extra: &str,
) -> ringmirror::config::AgentConfig {
    let topics = topics.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ");
    let serving = serving_toml(data_dir, extra);
    ringmirror::config::AgentConfig::parse(&format!(
        r#"{serving}
        [[mirror]]
        name = "dr"
        bootstrap_servers = [{source:?}]
        topics = [{topics}]
        fetch_max_wait_ms = 50
        fetch_partition_max_bytes = 32768
        metadata_refresh_interval_ms = 1000
        "#
    ))
    .expect("agent config")
}

/// Waits (bounded by `deadline`) until mirror "dr" of `topic` has reached
/// each partition's end offset in `ends`.
pub fn wait_mirrored(agent: &ringmirror::agent::Agent, topic: &str, ends: &BTreeMap<i32, i64>, deadline: Duration) {
    let started = Instant::now();
    while !ends.iter().all(|(&p, &end)| {
        agent
            .status()
            .get(&("dr".to_string(), TopicPartition::new(topic, p)))
            .is_some_and(|s| s.log_end_offset >= end)
    }) {
        assert!(
            started.elapsed() < deadline,
            "mirroring {topic} timed out: {:?}",
            agent.status()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `check` every 50 ms until it answers `Ok` (returned) or `deadline`
/// passes (a panic with `what` and its last answer).
pub fn wait_until<T>(deadline: Duration, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let started = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(e) if started.elapsed() > deadline => panic!("{what}: not within {deadline:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// `mirror describe` of `mirror` at an in-process agent.
pub fn describe_mirror(agent: &ringmirror::agent::Agent, mirror: &str) -> ringmirror_control::admin::MirrorDescription {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    match agent.admin(AdminRequest::DescribeMirror { mirror: mirror.into() }) {
        Ok(AdminAnswer::Mirror { mirror }) => mirror,
        other => panic!("describe {mirror} answered {other:?}"),
    }
}

/// Runs `f`'s future on a fresh glommio executor thread (our Kafka client
/// is glommio's) and returns its output.
pub fn on_glommio<T, G, F>(f: F) -> T
where
    F: FnOnce() -> G + Send + 'static,
    G: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("test-client")
        .io_memory(1 << 20)
        .spawn(f)
        .expect("start a glommio executor")
        .join()
        .expect("the glommio executor")
}

/// `ringmirror run --config <config>` with its log (stderr, info level, no
/// colors) in `log_path`; `env` adds variables (such as a crash point).
pub fn run_agent_binary(config: &Path, log_path: &Path, env: &[(&str, &str)]) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringmirror"));
    command.arg("run").arg("--config").arg(config);
    agent_process_setup(&mut command, log_path);
    for (key, value) in env {
        command.env(key, value);
    }
    ChildGuard::spawn(&mut command, "ringmirror run").expect("start ringmirror run")
}

/// `cargo test` puts the build's dependencies on LD_LIBRARY_PATH, among
/// them rdkafka-sys's freshly built librdkafka.so: kcat or confluent-kafka
/// would load that (2.12) instead of their own (Debian's 2.0.2, the
/// wheel's), and we would not be testing the clients users have. Children
/// get LD_LIBRARY_PATH without the entries under the target directory.
pub fn without_cargo_libraries(cmd: &mut Command) {
    let Some(path) = std::env::var_os("LD_LIBRARY_PATH") else {
        return;
    };
    // <target dir>/<profile>/deps/<this test>
    let exe = std::env::current_exe().expect("test executable path");
    let Some(target_dir) = exe.ancestors().nth(3) else {
        return;
    };
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|entry| !entry.starts_with(target_dir))
        .collect();
    cmd.env("LD_LIBRARY_PATH", std::env::join_paths(kept).expect("paths joined"));
}

/// What every agent process of the tests gets: info logs without colour
/// into `log_path` (stderr), no crash point, no stdin or stdout.
pub fn agent_process_setup(command: &mut Command, log_path: &Path) {
    let log = std::fs::File::create(log_path).expect("create agent log file");
    command
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove(ringmirror_storage::failpoint::CRASH_AT_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
}

/// `s` without ANSI escape sequences (CSI: ESC [ parameters final-byte).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Creates a local topic at an agent (CreateTopics through librdkafka's
/// admin client, `timeout` the operation's).
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, timeout: Duration) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = futures_lite::future::block_on(admin.create_topics([&new], &options)).expect("create topics");
    assert!(matches!(&results[0], Ok(name) if name == topic), "{results:?}");
}

/// An admin commit (generation -1, OffsetCommit v8) to `group` at `addr`
/// of `topic`'s `(partition, offset, leader epoch)`s, each with `metadata`;
/// every partition must be taken.
pub fn admin_commit(addr: &str, group: &str, topic: &str, offsets: &[(i32, i64, i32)], metadata: &str) {
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::{ApiKey, GroupId, OffsetCommitRequest, OffsetCommitResponse};
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    let partitions = offsets
        .iter()
        .map(|&(p, o, e)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(o)
                .with_committed_leader_epoch(e)
                .with_committed_metadata(Some(s(metadata)))
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(partitions),
        ]);
    let response: OffsetCommitResponse = KafkaConnection::connect(addr, GROUP_SYNC_IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
        .request(ApiKey::OffsetCommit as i16, 8, &request)
        .expect("OffsetCommit");
    for p in &response.topics[0].partitions {
        assert_eq!(
            p.error_code, 0,
            "commit {group} {topic}-{} at {addr}",
            p.partition_index
        );
    }
}

/// Bounds every wait of the consumers below.
const CONSUMER_DEADLINE: Duration = Duration::from_secs(60);

/// A librdkafka consumer of `group` at `bootstrap`: manual commits, from
/// the earliest offset, quick heartbeats and metadata refreshes.
pub fn consumer(bootstrap: &str, group: &str) -> rdkafka::consumer::BaseConsumer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "300")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .expect("consumer")
}

/// Polls until `consumer` has joined its group and been assigned partitions.
pub fn wait_assigned(consumer: &rdkafka::consumer::BaseConsumer) {
    use rdkafka::consumer::Consumer;
    let started = Instant::now();
    while consumer.assignment().expect("assignment").count() == 0 {
        assert!(started.elapsed() < CONSUMER_DEADLINE, "no assignment");
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(50)) {
            panic!("poll: {e}");
        }
    }
}

/// A consumer of `group`, subscribed to `topic`, kept alive (polled) on a
/// thread until stopped, so the group is active where it joined; stopping
/// closes it (LeaveGroup).
pub struct LiveConsumer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LiveConsumer {
    pub fn start(bootstrap: &str, group: &str, topic: &str) -> Self {
        use rdkafka::consumer::Consumer;
        use std::sync::atomic::Ordering;
        let c = consumer(bootstrap, group);
        c.subscribe(&[topic]).expect("subscribe");
        wait_assigned(&c);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < 2 * CONSUMER_DEADLINE {
                let _ = c.poll(Duration::from_millis(50));
            }
            drop(c);
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    pub fn close(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("running").join().expect("consumer thread");
    }
}

impl Drop for LiveConsumer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Bounds every socket operation of [`admin_commit`] and [`sync_groups`].
const GROUP_SYNC_IO_TIMEOUT: Duration = Duration::from_secs(10);

/// One group sync round (`ringmirror_control::metadata_sync::groups`) from `source`
/// (its first address) into the agent at `destination`, for the `mirrored`
/// partitions, as the control plane runs it.
pub fn sync_groups(
    source: &str,
    destination: &str,
    mirrored: BTreeSet<(String, i32)>,
    filter: &ringmirror_control::metadata_sync::groups::GroupFilter,
) -> ringmirror_control::metadata_sync::groups::GroupSyncReport {
    use ringmirror_dataplane::client::{Connection, ConnectionOptions};
    let source = source.split(',').next().expect("an address").to_owned();
    let destination = destination.to_owned();
    let filter = filter.clone();
    on_glommio(move || async move {
        let options = ConnectionOptions {
            client_id: "group-sync-test".into(),
            connect_timeout: GROUP_SYNC_IO_TIMEOUT,
            io_timeout: GROUP_SYNC_IO_TIMEOUT,
            ..ConnectionOptions::default()
        };
        let mut source = Connection::connect(&source, options.clone()).await.expect("source");
        let mut destination = Connection::connect(&destination, options).await.expect("destination");
        ringmirror_control::metadata_sync::groups::sync_group_offsets(&mut source, &mut destination, &mirrored, &filter)
            .await
            .expect("sync")
    })
}

/// (committed, unchanged) of a group `report` says was synced, none
/// refused.
pub fn synced(report: &ringmirror_control::metadata_sync::groups::GroupSyncReport, group: &str) -> (usize, usize) {
    match report.outcome(group) {
        Some(ringmirror_control::metadata_sync::groups::GroupOutcome::Synced {
            committed,
            unchanged,
            refused,
        }) => {
            assert!(refused.is_empty(), "{group}: refused {refused:?}");
            (*committed, *unchanged)
        }
        other => panic!("{group}: {other:?} in {report:?}"),
    }
}

/// Every log line the in-process agents of one test binary write, captured
/// in memory so tests can look for lines and print them when they fail.
pub mod logs {
    use std::io::Write;
    use std::sync::{Mutex, Once};

    static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

    struct LogWriter;

    impl Write for LogWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            LOGS.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Starts capturing with `filter` (an `EnvFilter`; the first call in a
    /// binary wins); the guard prints the captured log if the test fails.
    #[must_use]
    pub fn capture(filter: &str) -> LogsOnFailure {
        static INIT: Once = Once::new();
        INIT.call_once(|| {
            let _ = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(|| LogWriter)
                .try_init();
        });
        LogsOnFailure
    }

    /// Everything captured so far (every test of the binary).
    pub fn all() -> String {
        String::from_utf8_lossy(&LOGS.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    /// The captured lines holding every one of `needles`.
    pub fn lines_with(needles: &[&str]) -> Vec<String> {
        all()
            .lines()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .map(str::to_owned)
            .collect()
    }

    /// Prints the captured log when the test holding it fails.
    pub struct LogsOnFailure;

    impl Drop for LogsOnFailure {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("captured log:\n{}", all());
            }
        }
    }
}

/// A [`KafkaConnection`] authenticated (SaslHandshake v1, framed
/// SaslAuthenticate v2) as `user` with `mechanism`; the broker's error
/// message on failure.
pub fn sasl_connect(
    addr: &str,
    mechanism: ringmirror_protocol::sasl::Mechanism,
    user: &str,
    password: &str,
    timeout: Duration,
) -> Result<KafkaConnection, String> {
    use kafka_protocol::messages::{
        ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    };
    use ringmirror_protocol::sasl::{ClientExchange, ClientStep, Secret};
    let mut conn = KafkaConnection::connect(addr, timeout).map_err(|e| e.to_string())?;
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    let r: SaslHandshakeResponse = conn
        .request(ApiKey::SaslHandshake as i16, 1, &handshake)
        .map_err(|e| e.to_string())?;
    if r.error_code != 0 {
        return Err(format!("SaslHandshake: error code {}", r.error_code));
    }
    let (mut exchange, mut token) =
        ClientExchange::start(mechanism, user, &Secret::new(password)).map_err(|e| e.to_string())?;
    loop {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let r: SaslAuthenticateResponse = conn
            .request(ApiKey::SaslAuthenticate as i16, 2, &request)
            .map_err(|e| e.to_string())?;
        if r.error_code != 0 {
            return Err(format!(
                "error code {}: {}",
                r.error_code,
                r.error_message.as_deref().unwrap_or_default()
            ));
        }
        match exchange.step(&r.auth_bytes)? {
            ClientStep::Send(next) => token = next,
            ClientStep::Done => return Ok(conn),
        }
    }
}

/// What a client process printed, and how it ended.
pub struct ClientOutput {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cmd` (stdin `input`) to its end; killed, and the test failed,
/// after `timeout`.
pub fn run_client(mut cmd: Command, what: &str, input: &str, timeout: Duration) -> ClientOutput {
    without_cargo_libraries(&mut cmd);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = ChildGuard::spawn(&mut cmd, what).unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    if let Some(mut stdin) = child.child().stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(child.child().stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.child().stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = Instant::now();
    let Some(status) = child.wait_timeout(timeout) else {
        child.kill();
        panic!(
            "{what} did not finish within {timeout:?}: {}",
            err.join().unwrap_or_default()
        );
    };
    eprintln!("{what}: {status} after {:.1?}", started.elapsed());
    ClientOutput {
        status,
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
    }
}

/// Committed offsets of `group` at `addr` for `topic`'s partitions
/// (OffsetFetch v8); uncommitted ones left out.
pub fn committed_offsets(addr: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    try_committed_offsets(addr, group, topic, partitions)
        .unwrap_or_else(|code| panic!("OffsetFetch {group} at {addr}: error code {code}"))
}

/// [`committed_offsets`], or the group's error code (NOT_COORDINATOR from
/// a broker that is not the group's coordinator).
pub fn try_committed_offsets(addr: &str, group: &str, topic: &str, partitions: i32) -> Result<BTreeMap<i32, i64>, i16> {
    use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
    use kafka_protocol::messages::{ApiKey, GroupId, OffsetFetchRequest, OffsetFetchResponse};
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes((0..partitions).collect()),
            ])),
    ]);
    let response: OffsetFetchResponse = KafkaConnection::connect(addr, GROUP_SYNC_IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
        .request(ApiKey::OffsetFetch as i16, 8, &request)
        .expect("OffsetFetch");
    let g = &response.groups[0];
    if g.error_code != 0 {
        return Err(g.error_code);
    }
    Ok(g.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.committed_offset >= 0)
        .map(|p| (p.partition_index, p.committed_offset))
        .collect())
}

/// A KIP-848 member's first ConsumerGroupHeartbeat (epoch 0) in `group`,
/// subscribed to `topic`; `member` empty lets the coordinator name it (v0).
pub fn consumer_group_join(
    group: &str,
    member: &str,
    topic: &str,
) -> kafka_protocol::messages::ConsumerGroupHeartbeatRequest {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId};
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_member_id(StrBytes::from_string(member.to_owned()))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(topic.to_owned()))]))
        .with_topic_partitions(Some(Vec::new()))
}

/// Every ACL `addr` describes (DescribeAcls v3, any filter).
pub fn acls_at(addr: &str) -> Vec<ringmirror_dataplane::security::acls::AclBinding> {
    use kafka_protocol::messages::{ApiKey, DescribeAclsResponse};
    use ringmirror_dataplane::security::acls::{AclBinding, AclBindingFilter};
    let response: DescribeAclsResponse = KafkaConnection::connect(addr, GROUP_SYNC_IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
        .request(
            ApiKey::DescribeAcls as i16,
            3,
            &AclBindingFilter::any().to_describe_request(),
        )
        .expect("DescribeAcls");
    assert_eq!(response.error_code, 0, "DescribeAcls at {addr}");
    let (bindings, unreadable) = AclBinding::from_describe_response(&response);
    assert!(unreadable.is_empty(), "{unreadable:?}");
    bindings
}

/// The topic id (UUID string) the broker at `addr` gives `topic` (Metadata v12).
pub fn topic_id(addr: &str, topic: &str, deadline: Duration) -> String {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    let request = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
        TopicName(kafka_protocol::protocol::StrBytes::from_string(topic.into())),
    ))]));
    let response: MetadataResponse = KafkaConnection::connect(addr, deadline)
        .expect("connect")
        .request(ApiKey::Metadata as i16, 12, &request)
        .expect("Metadata");
    response.topics[0].topic_id.to_string()
}

/// The state of `topic`-`partition` of `mirror` as the coordinator reports
/// it, or "absent".
pub fn partition_state(agent: &ringmirror::agent::Agent, mirror: &str, topic: &str, partition: i32) -> String {
    use ringmirror_control::admin::{AdminAnswer, AdminRequest};
    match agent.admin(AdminRequest::Status).expect("status") {
        AdminAnswer::Status { partitions } => partitions
            .into_iter()
            .find(|p| p.mirror == mirror && p.topic == topic && p.partition == partition)
            .map_or_else(|| "absent".into(), |p| p.state),
        other => panic!("status answered {other:?}"),
    }
}
