//! A small Kafka-protocol server on 127.0.0.1 that serves a pre-built
//! [`Dataset`] from memory, as cheaply as it can, so that it is never the
//! bottleneck of a measurement.
//!
//! * One thread per connection (`std::net`), optionally pinned to a CPU.
//! * ApiVersions (v0–3), Metadata (v1–12; one broker, itself; topic ids;
//!   leader epoch 0), ListOffsets (v1–7), OffsetForLeaderEpoch (v2–4),
//!   FindCoordinator (v0–3, itself: librdkafka consumers with a group id ask),
//!   Fetch (v4–12, so topics are named; sessionless, or with
//!   incremental fetch sessions (KIP-227) when `fetch_sessions` asks) and, when a sink topic is
//!   configured, Produce (v3–9) into that topic, counted and discarded.
//! * Fetch answers with as many whole batches from `fetch_offset` as
//!   `partition_max_bytes` and `max_bytes` allow (at least one batch, as
//!   KIP-74 says), written with `writev` straight from the pre-built buffers:
//!   the response framing is encoded by hand, the record bytes are never
//!   copied in user space. With less than `min_bytes` ready it waits, up to
//!   `max_wait_ms`, until the next batch becomes available (long poll).
//! * Two modes: a fixed dataset (everything available from the start) or a
//!   steady append rate (`rate_bytes_per_s`): the clock starts at the first
//!   Fetch request, and batch `i` of a partition becomes available once the
//!   partition's share of the rate has "written" its last byte, the
//!   partitions' phases spread over a batch interval. Each batch's
//!   availability time is known exactly ([`SyntheticSource::available_at`]),
//!   which is what the lag measurement compares commit times against.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, FindCoordinatorRequest,
    FindCoordinatorResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes, decode_request_header_from_buffer};
use ringmirror_storage::batch::BatchIter;

use crate::dataset::Dataset;
use crate::procstat;

mod fetch;
use fetch::{FetchSession, fetch};

const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNSUPPORTED_VERSION: i16 = 35;
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const CLUSTER_ID: &str = "ringmirror-perf-synthetic";
/// How often idle threads look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
const LARGEST_REQUEST: usize = 64 << 20;

/// Fetch versions served: v4 (leader epochs in batches) to v12 (the last
/// version that names topics; v13+ identify them by id).
pub const FETCH_VERSIONS: (i16, i16) = (4, 12);

#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// Steady append rate over all partitions; `None`: everything is available at once.
    pub rate_bytes_per_s: Option<f64>,
    /// Pin connection threads to this CPU.
    pub cpu: Option<usize>,
    /// Accept Produce requests to this topic (same partition count), counted and discarded.
    pub sink_topic: Option<String>,
    /// Port to listen on (0: any free port).
    pub port: u16,
    /// Rate mode: the batches within this many bytes of each partition's
    /// start are available from the first Fetch on (the partition's
    /// history); the rate applies to the rest.
    pub head_bytes: usize,
    /// Grant incremental fetch sessions (KIP-227, Fetch v7+), one per
    /// connection; without, every Fetch is a full one (session id 0).
    pub fetch_sessions: bool,
}

/// Counters of one source, for the harness.
#[derive(Debug, Clone, Default)]
pub struct SourceStats {
    pub fetch_requests: u64,
    /// Bytes of the Fetch requests received (frames, without the size prefix).
    pub fetch_request_bytes: u64,
    /// The largest Fetch request received (bytes).
    pub fetch_request_bytes_max: u64,
    /// Metadata requests answered, and the bytes of the answers.
    pub metadata_requests: u64,
    pub metadata_response_bytes: u64,
    /// Record bytes sent in Fetch responses.
    pub record_bytes_sent: u64,
    /// Record bytes received in Produce requests to the sink topic.
    pub record_bytes_produced: u64,
    /// CPU the source's connection threads spent handling requests.
    pub cpu: Duration,
}

struct Shared {
    dataset: Arc<Dataset>,
    options: SourceOptions,
    port: u16,
    stop: AtomicBool,
    /// Start of the append clock (rate mode): the first Fetch request.
    t0: OnceLock<Instant>,
    first_fetch: OnceLock<Instant>,
    /// When every partition was fetched at its end offset (fixed mode: all consumed).
    caught_up: OnceLock<Instant>,
    fetched_to: Vec<AtomicI64>,
    sink_offsets: Vec<AtomicI64>,
    fetch_requests: AtomicU64,
    fetch_request_bytes: AtomicU64,
    fetch_request_bytes_max: AtomicU64,
    metadata_requests: AtomicU64,
    metadata_response_bytes: AtomicU64,
    record_bytes_sent: AtomicU64,
    record_bytes_produced: AtomicU64,
    cpu_ns: AtomicU64,
    connections: Mutex<Vec<JoinHandle<()>>>,
    unsupported_logged: Mutex<BTreeSet<(i16, i16)>>,
}

/// A running source; stops (and joins its threads) on [`SyntheticSource::stop`] or drop.
pub struct SyntheticSource {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl SyntheticSource {
    pub fn start(dataset: Arc<Dataset>, options: SourceOptions) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", options.port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let partitions = dataset.partitions.len();
        let shared = Arc::new(Shared {
            dataset,
            options,
            port: addr.port(),
            stop: AtomicBool::new(false),
            t0: OnceLock::new(),
            first_fetch: OnceLock::new(),
            caught_up: OnceLock::new(),
            fetched_to: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            sink_offsets: (0..partitions).map(|_| AtomicI64::new(0)).collect(),
            fetch_requests: AtomicU64::new(0),
            fetch_request_bytes: AtomicU64::new(0),
            fetch_request_bytes_max: AtomicU64::new(0),
            metadata_requests: AtomicU64::new(0),
            metadata_response_bytes: AtomicU64::new(0),
            record_bytes_sent: AtomicU64::new(0),
            record_bytes_produced: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            connections: Mutex::new(Vec::new()),
            unsupported_logged: Mutex::new(BTreeSet::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("source-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.shared.dataset
    }

    /// When the first Fetch request arrived.
    pub fn first_fetch(&self) -> Option<Instant> {
        self.shared.first_fetch.get().copied()
    }

    /// When every partition had been fetched at its end offset.
    pub fn caught_up(&self) -> Option<Instant> {
        self.shared.caught_up.get().copied()
    }

    /// Start of the append clock (rate mode).
    pub fn t0(&self) -> Option<Instant> {
        self.shared.t0.get().copied()
    }

    /// When batch `index` of `partition` became (or becomes) available.
    pub fn available_at(&self, partition: usize, index: usize) -> Option<Instant> {
        self.shared.available_at(partition, index)
    }

    pub fn stats(&self) -> SourceStats {
        let s = &self.shared;
        SourceStats {
            fetch_requests: s.fetch_requests.load(Ordering::Relaxed),
            fetch_request_bytes: s.fetch_request_bytes.load(Ordering::Relaxed),
            fetch_request_bytes_max: s.fetch_request_bytes_max.load(Ordering::Relaxed),
            metadata_requests: s.metadata_requests.load(Ordering::Relaxed),
            metadata_response_bytes: s.metadata_response_bytes.load(Ordering::Relaxed),
            record_bytes_sent: s.record_bytes_sent.load(Ordering::Relaxed),
            record_bytes_produced: s.record_bytes_produced.load(Ordering::Relaxed),
            cpu: Duration::from_nanos(s.cpu_ns.load(Ordering::Relaxed)),
        }
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let handles: Vec<_> = self.shared.connections.lock().expect("lock").drain(..).collect();
        for h in handles {
            let _ = h.join();
        }
    }
}

impl Drop for SyntheticSource {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => {
                let conn_shared = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("source-conn".into())
                    .spawn(move || serve(stream, conn_shared));
                match spawned {
                    Ok(h) => shared.connections.lock().expect("lock").push(h),
                    Err(e) => eprintln!("synthetic source: cannot start a connection thread: {e}"),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                eprintln!("synthetic source: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Shared {
    fn rate_per_partition(&self) -> Option<f64> {
        self.options
            .rate_bytes_per_s
            .map(|r| r / self.dataset.partitions.len() as f64)
    }

    /// Nanoseconds after t0 at which the byte at `end_pos` of `partition`
    /// has been appended (the first `head_bytes` at t0). Partition `p` of
    /// `n` runs `p / n` of a batch ahead of partition 0, so the partitions'
    /// batches arrive spread over each batch interval, a steady stream as
    /// producers spread over a topic make it, not all partitions' batch `i`
    /// at one instant (1 000 partitions' batches in one burst).
    fn appended_after_ns(&self, partition: usize, rate_per_partition: f64, end_pos: usize) -> u64 {
        let partitions = &self.dataset.partitions;
        let batch_len = partitions[partition].batches.first().map_or(0, |b| b.len);
        let phase = partition * batch_len / partitions.len();
        let appended = end_pos.saturating_sub(self.options.head_bytes).saturating_sub(phase);
        (appended as f64 * 1e9 / rate_per_partition).ceil() as u64
    }

    /// How many batches of `partition` are available at `now`. Uses the same
    /// rounding as [`Shared::available_at`], so a batch is available exactly
    /// from its availability time on.
    fn available(&self, partition: usize, now: Instant) -> usize {
        let batches = &self.dataset.partitions[partition].batches;
        let Some(rate) = self.rate_per_partition() else {
            return batches.len();
        };
        let Some(t0) = self.t0.get() else { return 0 };
        let elapsed = now.saturating_duration_since(*t0).as_nanos() as u64;
        batches.partition_point(|b| self.appended_after_ns(partition, rate, b.end_pos()) <= elapsed)
    }

    fn available_at(&self, partition: usize, index: usize) -> Option<Instant> {
        let batch = self.dataset.partitions.get(partition)?.batches.get(index)?;
        let Some(rate) = self.rate_per_partition() else {
            return self.first_fetch.get().copied();
        };
        Some(*self.t0.get()? + Duration::from_nanos(self.appended_after_ns(partition, rate, batch.end_pos())))
    }

    /// The high watermark of `partition` at `now`.
    fn high_watermark(&self, partition: usize, now: Instant) -> i64 {
        let p = &self.dataset.partitions[partition];
        match self.available(partition, now) {
            0 => 0,
            n => p.batches[n - 1].next_offset,
        }
    }

    fn partition_index(&self, topic: &str, partition: i32) -> Option<usize> {
        (topic == self.dataset.topic() && partition >= 0 && (partition as usize) < self.dataset.partitions.len())
            .then_some(partition as usize)
    }

    fn log_unsupported(&self, key: i16, version: i16) {
        if self.unsupported_logged.lock().expect("lock").insert((key, version)) {
            eprintln!("synthetic source: unsupported request api_key={key} version={version}; closing the connection");
        }
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean EOF before the
/// first byte or when stopping.
fn read_full(stream: &mut TcpStream, buf: &mut [u8], stop: &AtomicBool) -> std::io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match stream.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::Acquire) {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    if let Some(cpu) = shared.options.cpu {
        procstat::pin_current_thread(cpu);
    }
    // Precise long-poll wake-ups (the default timer slack is 50 µs).
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(POLL));
    let mut meta = Vec::with_capacity(64 * 1024);
    let mut session = None;
    loop {
        let mut len = [0u8; 4];
        match read_full(&mut stream, &mut len, &shared.stop) {
            Ok(true) => {}
            _ => return,
        }
        let len = i32::from_be_bytes(len);
        if len < 4 || len as usize > LARGEST_REQUEST {
            eprintln!("synthetic source: bad request size {len}");
            return;
        }
        let mut frame = vec![0u8; len as usize];
        match read_full(&mut stream, &mut frame, &shared.stop) {
            Ok(true) => {}
            _ => return,
        }
        let started = procstat::thread_cpu();
        let result = handle(&shared, &mut stream, Bytes::from(frame), &mut meta, &mut session);
        let spent = procstat::thread_cpu().saturating_sub(started);
        shared.cpu_ns.fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
        match result {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                if !shared.stop.load(Ordering::Acquire) && !is_disconnect(&e) {
                    eprintln!("synthetic source: connection error: {e:#}");
                }
                return;
            }
        }
    }
}

fn is_disconnect(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
        )
    })
}

fn respond<R: Encodable + HeaderVersion>(
    stream: &mut TcpStream,
    correlation_id: i32,
    version: i16,
    response: &R,
) -> anyhow::Result<bool> {
    let mut buf = BytesMut::with_capacity(1024);
    buf.extend_from_slice(&[0; 4]);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header.encode(&mut buf, R::header_version(version))?;
    response.encode(&mut buf, version)?;
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    stream.write_all(&buf)?;
    Ok(true)
}

/// Handles one request; `Ok(false)` closes the connection.
fn handle(
    shared: &Shared,
    stream: &mut TcpStream,
    mut frame: Bytes,
    meta: &mut Vec<u8>,
    session: &mut Option<FetchSession>,
) -> anyhow::Result<bool> {
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).ok();
    if api == Some(ApiKey::ApiVersions) && version > 3 {
        // As Kafka does: an ApiVersions v0 answer with UNSUPPORTED_VERSION and our ranges.
        let header = decode_request_header_from_buffer(&mut frame.slice(..))
            .or_else(|_| RequestHeader::decode(&mut frame.slice(..), 1))?;
        let mut response = api_versions(shared);
        response.error_code = UNSUPPORTED_VERSION;
        return respond(stream, header.correlation_id, 0, &response);
    }
    let frame_bytes = frame.len();
    let header = match decode_request_header_from_buffer(&mut frame) {
        Ok(h) => h,
        Err(_) => {
            shared.log_unsupported(key, version);
            return Ok(false);
        }
    };
    let cid = header.correlation_id;
    // What the header took: the request's size on the wire is 4 + the whole frame.
    let header_bytes = frame_bytes - frame.len();
    match api {
        Some(ApiKey::ApiVersions) => {
            let _ = ApiVersionsRequest::decode(&mut frame, version);
            respond(stream, cid, version, &api_versions(shared))
        }
        Some(ApiKey::Metadata) if (1..=12).contains(&version) => {
            let request = MetadataRequest::decode(&mut frame, version)?;
            let response = metadata(shared, &request);
            shared.metadata_requests.fetch_add(1, Ordering::Relaxed);
            let bytes = response.compute_size(version).unwrap_or(0) as u64;
            shared.metadata_response_bytes.fetch_add(bytes, Ordering::Relaxed);
            respond(stream, cid, version, &response)
        }
        Some(ApiKey::ListOffsets) if (1..=7).contains(&version) => {
            let request = ListOffsetsRequest::decode(&mut frame, version)?;
            respond(stream, cid, version, &list_offsets(shared, &request))
        }
        Some(ApiKey::OffsetForLeaderEpoch) if (2..=4).contains(&version) => {
            let request = OffsetForLeaderEpochRequest::decode(&mut frame, version)?;
            respond(stream, cid, version, &offset_for_leader_epoch(shared, &request))
        }
        Some(ApiKey::FindCoordinator) if (0..=3).contains(&version) => {
            let _ = FindCoordinatorRequest::decode(&mut frame, version)?;
            let mut response = FindCoordinatorResponse::default();
            response.node_id = BrokerId(0);
            response.host = StrBytes::from_static_str("127.0.0.1");
            response.port = i32::from(shared.port);
            respond(stream, cid, version, &response)
        }
        Some(ApiKey::Produce) if (3..=9).contains(&version) && shared.options.sink_topic.is_some() => {
            let request = ProduceRequest::decode(&mut frame, version)?;
            let response = produce(shared, &request);
            if request.acks == 0 {
                return Ok(true);
            }
            respond(stream, cid, version, &response)
        }
        Some(ApiKey::Fetch) if (FETCH_VERSIONS.0..=FETCH_VERSIONS.1).contains(&version) => {
            let request_bytes = (4 + frame.len() + header_bytes) as u64;
            shared.fetch_request_bytes.fetch_add(request_bytes, Ordering::Relaxed);
            shared
                .fetch_request_bytes_max
                .fetch_max(request_bytes, Ordering::Relaxed);
            let request = FetchRequest::decode(&mut frame, version)?;
            fetch(shared, stream, (version, cid), &request, meta, session)?;
            Ok(true)
        }
        _ => {
            shared.log_unsupported(key, version);
            Ok(false)
        }
    }
}

fn api_versions(shared: &Shared) -> ApiVersionsResponse {
    let mut ranges = vec![
        (ApiKey::ApiVersions, 0, 3),
        (ApiKey::Metadata, 1, 12),
        (ApiKey::ListOffsets, 1, 7),
        (ApiKey::OffsetForLeaderEpoch, 2, 4),
        (ApiKey::FindCoordinator, 0, 3),
        (ApiKey::Fetch, FETCH_VERSIONS.0, FETCH_VERSIONS.1),
    ];
    if shared.options.sink_topic.is_some() {
        ranges.push((ApiKey::Produce, 3, 9));
    }
    let mut response = ApiVersionsResponse::default();
    response.api_keys = ranges
        .into_iter()
        .map(|(key, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = key as i16;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    response
}

fn topic_id(shared: &Shared, sink: bool) -> uuid::Uuid {
    let mut id = shared.dataset.topic_id;
    if sink {
        id[15] ^= 0xff;
    }
    uuid::Uuid::from_bytes(id)
}

fn metadata(shared: &Shared, request: &MetadataRequest) -> MetadataResponse {
    let mut response = MetadataResponse::default();
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = BrokerId(0);
    broker.host = StrBytes::from_static_str("127.0.0.1");
    broker.port = i32::from(shared.port);
    response.brokers = vec![broker];
    response.cluster_id = Some(StrBytes::from_static_str(CLUSTER_ID));
    response.controller_id = BrokerId(0);
    let source = shared.dataset.topic().to_string();
    let sink = shared.options.sink_topic.clone();
    let names: Vec<String> = match &request.topics {
        None => std::iter::once(source.clone()).chain(sink.clone()).collect(),
        Some(topics) => topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .collect(),
    };
    for name in names {
        let mut topic = MetadataResponseTopic::default();
        topic.name = Some(TopicName(StrBytes::from_string(name.clone())));
        let is_sink = sink.as_deref() == Some(name.as_str());
        if name != source && !is_sink {
            topic.error_code = UNKNOWN_TOPIC_OR_PARTITION;
            response.topics.push(topic);
            continue;
        }
        topic.topic_id = topic_id(shared, is_sink);
        topic.partitions = (0..shared.dataset.partitions.len() as i32)
            .map(|i| {
                let mut p = MetadataResponsePartition::default();
                p.partition_index = i;
                p.leader_id = BrokerId(0);
                p.leader_epoch = 0;
                p.replica_nodes = vec![BrokerId(0)];
                p.isr_nodes = vec![BrokerId(0)];
                p
            })
            .collect();
        response.topics.push(topic);
    }
    response
}

fn list_offsets(shared: &Shared, request: &ListOffsetsRequest) -> ListOffsetsResponse {
    let now = Instant::now();
    let mut response = ListOffsetsResponse::default();
    for t in &request.topics {
        let mut topic = ListOffsetsTopicResponse::default();
        topic.name = t.name.clone();
        for p in &t.partitions {
            let mut out = ListOffsetsPartitionResponse::default();
            out.partition_index = p.partition_index;
            out.timestamp = -1;
            match shared.partition_index(&t.name.0, p.partition_index) {
                None => {
                    out.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                    out.offset = -1;
                }
                Some(i) => {
                    out.offset = if p.timestamp == -1 {
                        shared.high_watermark(i, now)
                    } else {
                        0
                    };
                    out.leader_epoch = 0;
                }
            }
            topic.partitions.push(out);
        }
        response.topics.push(topic);
    }
    response
}

fn offset_for_leader_epoch(shared: &Shared, request: &OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let now = Instant::now();
    let mut response = OffsetForLeaderEpochResponse::default();
    for t in &request.topics {
        let mut topic = OffsetForLeaderTopicResult::default();
        topic.topic = t.topic.clone();
        for p in &t.partitions {
            let mut out = EpochEndOffset::default();
            out.partition = p.partition;
            match shared.partition_index(&t.topic.0, p.partition) {
                None => {
                    out.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                    (out.leader_epoch, out.end_offset) = (-1, -1);
                }
                // Everything was written in epoch 0; later epochs are unknown.
                Some(i) if p.leader_epoch == 0 => {
                    (out.leader_epoch, out.end_offset) = (0, shared.high_watermark(i, now))
                }
                Some(_) => (out.leader_epoch, out.end_offset) = (-1, -1),
            }
            topic.partitions.push(out);
        }
        response.topics.push(topic);
    }
    response
}

fn produce(shared: &Shared, request: &ProduceRequest) -> ProduceResponse {
    let sink = shared.options.sink_topic.as_deref().unwrap_or_default();
    let mut response = ProduceResponse::default();
    for t in &request.topic_data {
        let mut topic = TopicProduceResponse::default();
        topic.name = t.name.clone();
        for p in &t.partition_data {
            let mut out = PartitionProduceResponse::default();
            out.index = p.index;
            out.log_append_time_ms = -1;
            let slot = (t.name.0.as_str() == sink)
                .then(|| shared.sink_offsets.get(p.index as usize))
                .flatten();
            match slot {
                None => {
                    out.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                    out.base_offset = -1;
                }
                Some(next) => {
                    let records = p.records.as_deref().unwrap_or_default();
                    let count: i64 = BatchIter::new(records, u32::MAX)
                        .map_while(Result::ok)
                        .map(|(_, b)| i64::from(b.last_offset_delta()) + 1)
                        .sum();
                    shared
                        .record_bytes_produced
                        .fetch_add(records.len() as u64, Ordering::Relaxed);
                    out.base_offset = next.fetch_add(count, Ordering::Relaxed);
                }
            }
            topic.partition_responses.push(out);
        }
        response.responses.push(topic);
    }
    response
}

#[cfg(test)]
mod tests;
