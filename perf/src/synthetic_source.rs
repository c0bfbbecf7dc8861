//! A small Kafka-protocol server on 127.0.0.1 that serves a pre-built
//! [`Dataset`] from memory, as cheaply as it can, so that it is never the
//! bottleneck of a measurement.
//!
//! * One thread per connection (`std::net`), optionally pinned to a CPU.
//! * ApiVersions (v0–3), Metadata (v1–12; one broker, itself; topic ids;
//!   leader epoch 0), ListOffsets (v1–7), OffsetForLeaderEpoch (v2–4),
//!   FindCoordinator (v0–3, itself: librdkafka consumers with a group id ask),
//!   Fetch (v4–12, so topics are named; sessionless) and, when a sink topic is
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
//!   partition's share of the rate has "written" its last byte. Each batch's
//!   availability time is known exactly ([`SyntheticSource::available_at`]),
//!   which is what the lag measurement compares commit times against.

use std::collections::BTreeSet;
use std::io::{IoSlice, Read, Write};
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

const NONE: i16 = 0;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNSUPPORTED_VERSION: i16 = 35;
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
}

/// Counters of one source, for the harness.
#[derive(Debug, Clone, Default)]
pub struct SourceStats {
    pub fetch_requests: u64,
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

    /// Nanoseconds after t0 at which the byte at `end_pos` of a partition has been appended.
    fn appended_after_ns(rate_per_partition: f64, end_pos: usize) -> u64 {
        (end_pos as f64 * 1e9 / rate_per_partition).ceil() as u64
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
        batches.partition_point(|b| Self::appended_after_ns(rate, b.end_pos()) <= elapsed)
    }

    fn available_at(&self, partition: usize, index: usize) -> Option<Instant> {
        let batch = self.dataset.partitions.get(partition)?.batches.get(index)?;
        let Some(rate) = self.rate_per_partition() else {
            return self.first_fetch.get().copied();
        };
        Some(*self.t0.get()? + Duration::from_nanos(Self::appended_after_ns(rate, batch.end_pos())))
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
        let result = handle(&shared, &mut stream, Bytes::from(frame), &mut meta);
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
fn handle(shared: &Shared, stream: &mut TcpStream, mut frame: Bytes, meta: &mut Vec<u8>) -> anyhow::Result<bool> {
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
    let header = match decode_request_header_from_buffer(&mut frame) {
        Ok(h) => h,
        Err(_) => {
            shared.log_unsupported(key, version);
            return Ok(false);
        }
    };
    let cid = header.correlation_id;
    match api {
        Some(ApiKey::ApiVersions) => {
            let _ = ApiVersionsRequest::decode(&mut frame, version);
            respond(stream, cid, version, &api_versions(shared))
        }
        Some(ApiKey::Metadata) if (1..=12).contains(&version) => {
            let request = MetadataRequest::decode(&mut frame, version)?;
            respond(stream, cid, version, &metadata(shared, &request))
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
            let request = FetchRequest::decode(&mut frame, version)?;
            fetch(shared, stream, version, cid, &request, meta)?;
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

/// One partition of a Fetch answer.
struct PartPlan {
    partition: i32,
    /// Index into the dataset (None: unknown partition).
    index: Option<usize>,
    error: i16,
    high_watermark: i64,
    /// Byte range of the partition's buffer to send.
    range: (usize, usize),
}

struct TopicPlan {
    name: StrBytes,
    parts: Vec<PartPlan>,
}

/// Chooses what to send; returns the plan and its record bytes.
fn plan_fetch(shared: &Shared, request: &FetchRequest, now: Instant) -> (Vec<TopicPlan>, usize) {
    let mut total = 0usize;
    let max_bytes = request.max_bytes.max(0) as usize;
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in &request.topics {
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut plan = PartPlan {
                partition: p.partition,
                index: None,
                error: NONE,
                high_watermark: -1,
                range: (0, 0),
            };
            let Some(i) = shared.partition_index(&t.topic.0, p.partition) else {
                plan.error = UNKNOWN_TOPIC_OR_PARTITION;
                parts.push(plan);
                continue;
            };
            plan.index = Some(i);
            let data = &shared.dataset.partitions[i];
            let available = shared.available(i, now);
            plan.high_watermark = match available {
                0 => 0,
                n => data.batches[n - 1].next_offset,
            };
            if p.fetch_offset < 0 || p.fetch_offset > plan.high_watermark {
                plan.error = OFFSET_OUT_OF_RANGE;
                parts.push(plan);
                continue;
            }
            let first = data.batch_index(p.fetch_offset);
            let limit = (p.partition_max_bytes.max(0) as usize).min(max_bytes.saturating_sub(total));
            let mut end = first;
            let mut bytes = 0usize;
            while end < available {
                let len = data.batches[end].len;
                // At least one batch when nothing was sent yet (KIP-74).
                if bytes + len > limit && !(bytes == 0 && total == 0) {
                    break;
                }
                bytes += len;
                end += 1;
            }
            if end > first {
                plan.range = (data.batches[first].pos, data.batches[end - 1].end_pos());
            }
            total += bytes;
            parts.push(plan);
        }
        topics.push(TopicPlan {
            name: t.topic.0.clone(),
            parts,
        });
    }
    (topics, total)
}

/// When the next batch not yet available of any requested partition becomes available.
fn next_availability(shared: &Shared, request: &FetchRequest, now: Instant) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for t in &request.topics {
        for p in &t.partitions {
            let Some(i) = shared.partition_index(&t.topic.0, p.partition) else {
                continue;
            };
            let index = shared.dataset.partitions[i]
                .batch_index(p.fetch_offset.max(0))
                .max(shared.available(i, now));
            if let Some(at) = shared.available_at(i, index) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    }
    next
}

fn fetch(
    shared: &Shared,
    stream: &mut TcpStream,
    version: i16,
    correlation_id: i32,
    request: &FetchRequest,
    meta: &mut Vec<u8>,
) -> anyhow::Result<()> {
    let arrived = Instant::now();
    shared.first_fetch.get_or_init(|| arrived);
    if shared.options.rate_bytes_per_s.is_some() {
        shared.t0.get_or_init(|| arrived);
    }
    shared.fetch_requests.fetch_add(1, Ordering::Relaxed);
    for t in &request.topics {
        for p in &t.partitions {
            if let Some(i) = shared.partition_index(&t.topic.0, p.partition) {
                shared.fetched_to[i].fetch_max(p.fetch_offset, Ordering::Relaxed);
            }
        }
    }
    if shared.caught_up.get().is_none() {
        let all = shared
            .fetched_to
            .iter()
            .zip(&shared.dataset.partitions)
            .all(|(f, p)| f.load(Ordering::Relaxed) >= p.end_offset());
        if all {
            shared.caught_up.get_or_init(|| arrived);
        }
    }
    let (mut plan, mut total) = plan_fetch(shared, request, arrived);
    let has_error = plan.iter().flat_map(|t| &t.parts).any(|p| p.error != NONE);
    let min_bytes = request.min_bytes.max(1) as usize;
    if total < min_bytes && !has_error && request.max_wait_ms > 0 {
        let deadline = arrived + Duration::from_millis(request.max_wait_ms as u64);
        loop {
            let now = Instant::now();
            if now >= deadline || shared.stop.load(Ordering::Acquire) {
                break;
            }
            // A batch due now (or already) is picked up by planning again right away.
            let wake = next_availability(shared, request, now)
                .unwrap_or(deadline)
                .min(deadline)
                .min(now + POLL);
            if wake > now {
                std::thread::sleep(wake - now);
            }
            (plan, total) = plan_fetch(shared, request, Instant::now());
            if total >= min_bytes {
                break;
            }
        }
    }
    write_fetch_response(shared, stream, version, correlation_id, &plan, total, meta)?;
    shared.record_bytes_sent.fetch_add(total as u64, Ordering::Relaxed);
    Ok(())
}

fn put_uvarint(buf: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn put_len(buf: &mut Vec<u8>, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(buf, len as u32 + 1);
    } else {
        buf.extend_from_slice(&(len as i32).to_be_bytes());
    }
}

fn put_string(buf: &mut Vec<u8>, s: &str, flexible: bool) {
    if flexible {
        put_uvarint(buf, s.len() as u32 + 1);
    } else {
        buf.extend_from_slice(&(s.len() as i16).to_be_bytes());
    }
    buf.extend_from_slice(s.as_bytes());
}

/// A piece of the response: framing bytes from `meta`, or record bytes of a partition.
enum Piece {
    Meta(usize, usize),
    Records(usize, usize, usize),
}

/// Encodes a Fetch response (v4–12) by hand and writes it with `writev`:
/// framing bytes from one small buffer, record bytes straight from the dataset.
fn write_fetch_response(
    shared: &Shared,
    stream: &mut TcpStream,
    version: i16,
    correlation_id: i32,
    topics: &[TopicPlan],
    record_bytes: usize,
    meta: &mut Vec<u8>,
) -> std::io::Result<()> {
    let flexible = version >= 12;
    meta.clear();
    let mut pieces = Vec::with_capacity(2 + 2 * topics.iter().map(|t| t.parts.len()).sum::<usize>());
    let mut piece_start = 0;
    meta.extend_from_slice(&[0; 4]); // frame size, patched below
    meta.extend_from_slice(&correlation_id.to_be_bytes());
    if flexible {
        put_uvarint(meta, 0); // response header tagged fields
    }
    meta.extend_from_slice(&0i32.to_be_bytes()); // throttle_time_ms
    if version >= 7 {
        meta.extend_from_slice(&NONE.to_be_bytes()); // error_code
        meta.extend_from_slice(&0i32.to_be_bytes()); // session_id
    }
    put_len(meta, topics.len(), flexible);
    for t in topics {
        put_string(meta, &t.name, flexible);
        put_len(meta, t.parts.len(), flexible);
        for p in &t.parts {
            meta.extend_from_slice(&p.partition.to_be_bytes());
            meta.extend_from_slice(&p.error.to_be_bytes());
            meta.extend_from_slice(&p.high_watermark.to_be_bytes());
            meta.extend_from_slice(&p.high_watermark.to_be_bytes()); // last_stable_offset
            if version >= 5 {
                let log_start: i64 = if p.index.is_some() { 0 } else { -1 };
                meta.extend_from_slice(&log_start.to_be_bytes());
            }
            // aborted_transactions: null
            if flexible {
                put_uvarint(meta, 0);
            } else {
                meta.extend_from_slice(&(-1i32).to_be_bytes());
            }
            if version >= 11 {
                meta.extend_from_slice(&(-1i32).to_be_bytes()); // preferred_read_replica
            }
            let (from, to) = p.range;
            put_len(meta, to - from, flexible);
            if to > from {
                pieces.push(Piece::Meta(piece_start, meta.len()));
                pieces.push(Piece::Records(p.index.expect("records of a known partition"), from, to));
                piece_start = meta.len();
            }
            if flexible {
                put_uvarint(meta, 0); // partition tagged fields
            }
        }
        if flexible {
            put_uvarint(meta, 0); // topic tagged fields
        }
    }
    if flexible {
        put_uvarint(meta, 0); // response tagged fields
    }
    pieces.push(Piece::Meta(piece_start, meta.len()));
    let frame = meta.len() - 4 + record_bytes;
    meta[..4].copy_from_slice(&(frame as i32).to_be_bytes());
    let meta = &meta[..];
    let mut slices: Vec<IoSlice<'_>> = pieces
        .iter()
        .map(|piece| match *piece {
            Piece::Meta(a, b) => IoSlice::new(&meta[a..b]),
            Piece::Records(i, a, b) => IoSlice::new(&shared.dataset.partitions[i].bytes[a..b]),
        })
        .filter(|s| !s.is_empty())
        .collect();
    write_all_vectored(stream, &mut slices)
}

fn write_all_vectored(stream: &mut TcpStream, slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    let mut bufs = slices;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::DatasetSpec;
    use kafka_protocol::messages::FetchResponse;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};

    fn dataset() -> Arc<Dataset> {
        Arc::new(Dataset::build(DatasetSpec {
            topic: "perf".into(),
            partitions: 2,
            bytes_per_partition: 200_000,
            record_bytes: 500,
            records_per_batch: 8,
            seed: 1,
        }))
    }

    fn request(shared_topic: &str, offsets: &[i64], partition_max: i32) -> FetchRequest {
        let mut t = FetchTopic::default();
        t.topic = TopicName(StrBytes::from_string(shared_topic.into()));
        for (i, &o) in offsets.iter().enumerate() {
            let mut p = FetchPartition::default();
            p.partition = i as i32;
            p.fetch_offset = o;
            p.partition_max_bytes = partition_max;
            t.partitions.push(p);
        }
        let mut r = FetchRequest::default();
        r.max_bytes = 50 << 20;
        r.min_bytes = 1;
        r.topics = vec![t];
        r
    }

    /// Our hand-written Fetch encoding, decoded by the kafka-protocol crate, for every version served.
    #[test]
    fn hand_encoded_fetch_responses_decode_with_kafka_protocol() {
        let d = dataset();
        let source = SyntheticSource::start(Arc::clone(&d), SourceOptions::default()).unwrap();
        let shared = &source.shared;
        let batch = d.batch_bytes();
        let (plan, total) = plan_fetch(shared, &request("perf", &[0, 9], 3 * batch as i32), Instant::now());
        assert_eq!(total, 6 * batch, "three whole batches per partition");
        for version in FETCH_VERSIONS.0..=FETCH_VERSIONS.1 {
            let mut meta = Vec::new();
            // Encode into a socket pair and read the frame back.
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            write_fetch_response(shared, &mut server, version, 42, &plan, total, &mut meta).unwrap();
            drop(server);
            let mut frame = Vec::new();
            client.read_to_end(&mut frame).unwrap();
            let len = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(len, frame.len() - 4);
            let mut buf = Bytes::from(frame).slice(4..);
            let header = ResponseHeader::decode(&mut buf, FetchResponse::header_version(version)).unwrap();
            assert_eq!(header.correlation_id, 42);
            let response = FetchResponse::decode(&mut buf, version).unwrap();
            assert!(buf.is_empty());
            let parts = &response.responses[0].partitions;
            assert_eq!(parts.len(), 2);
            let p1 = &d.partitions[1];
            let want = &p1.bytes[p1.batches[1].pos..p1.batches[3].end_pos()];
            assert_eq!(parts[1].records.as_deref(), Some(want), "v{version}");
            assert_eq!(parts[1].high_watermark, p1.end_offset());
        }
        source.stop();
    }

    #[test]
    fn out_of_range_and_end_offsets() {
        let d = dataset();
        let source = SyntheticSource::start(Arc::clone(&d), SourceOptions::default()).unwrap();
        let end = d.partitions[0].end_offset();
        let (plan, total) = plan_fetch(
            &source.shared,
            &request("perf", &[end, end + 1], 1 << 20),
            Instant::now(),
        );
        assert_eq!(total, 0);
        assert_eq!(plan[0].parts[0].error, NONE);
        assert_eq!(plan[0].parts[1].error, OFFSET_OUT_OF_RANGE);
        source.stop();
    }

    #[test]
    fn rate_mode_makes_batches_available_over_time() {
        let d = dataset();
        let rate = 2.0 * d.batch_bytes() as f64 * 1000.0; // one batch per partition per ms
        let source = SyntheticSource::start(
            Arc::clone(&d),
            SourceOptions {
                rate_bytes_per_s: Some(rate),
                ..SourceOptions::default()
            },
        )
        .unwrap();
        let shared = &source.shared;
        let t0 = Instant::now();
        shared.t0.get_or_init(|| t0);
        assert_eq!(shared.available(0, t0), 0);
        assert_eq!(shared.available(0, t0 + Duration::from_micros(2500)), 2);
        let at = source.available_at(0, 4).unwrap();
        assert_eq!(at - t0, Duration::from_millis(5));
        // Available exactly from its availability time on, never a nanosecond later.
        for i in 0..d.partitions[0].batches.len() {
            let at = source.available_at(0, i).unwrap();
            assert_eq!(shared.available(0, at), i + 1);
            assert_eq!(shared.available(0, at - Duration::from_nanos(1)), i);
        }
        source.stop();
    }
}
