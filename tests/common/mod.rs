//! Shared helpers for the interop integration tests: running the kafka-python
//! script in `tests/py/`, comparing records in one shape whoever decoded them,
//! opening and inspecting a [`PartitionLog`], and [`KafkaConnection`], a small
//! blocking Kafka client that fetches raw record batches.
//!
//! Every wait here is bounded: child processes and sockets have timeouts, and
//! fetch loops have an iteration cap.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use ringmirror_dataplane::batch::{BatchIter, Record, RecordBatch};
use ringmirror_dataplane::log::{LogConfig, OpenOptions, PartitionLog};
use serde_json::Value;

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
    let (log, _report) = PartitionLog::open(OpenOptions {
        dir: dir.to_owned(),
        topic_id: None,
        config,
        recovery_point: 0,
        log_start_offset: 0,
        clean_shutdown: false,
        now_ms: 0,
    })
    .unwrap_or_else(|e| panic!("open log {}: {e}", dir.display()));
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
                        fetch_version: 11,
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
            .with_max_wait_ms(100)
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
