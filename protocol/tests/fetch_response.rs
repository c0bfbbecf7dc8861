//! The streaming Fetch response parser against an independent encoder (the
//! `kafka-protocol` crate) for every version 4–16, fed in random chunk sizes
//! with records moved by the "caller"; unknown tagged fields everywhere;
//! tansu's NodeEndpoints tag in v12–15; malformed, mutated and lying input
//! getting typed errors promptly and without allocating; and the
//! `min_bytes_needed` / `remaining` contract.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint as KpNodeEndpoint,
    PartitionData, SnapshotId,
};
use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use proptest::prelude::*;
use ringmirror_protocol::wire::fetch_response::{
    FetchHeader, FetchParseError, FetchResponseReader, FetchStep, NodeEndpoint, TopicRef,
};

// ---------------------------------------------------------------------------
// Allocation counting (per thread, so parallel tests do not disturb each other)

struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_allocation() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocations_during<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}

// ---------------------------------------------------------------------------
// Model of a response, independent of both encoder and parser

type Tags = BTreeMap<i32, Vec<u8>>;

#[derive(Debug, Clone, PartialEq)]
struct MPartition {
    partition_index: i32,
    error_code: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    aborted: Option<Vec<(i64, i64, Tags)>>,
    preferred_read_replica: i32,
    records: Option<Vec<u8>>,
    diverging_epoch: Option<(i32, i64, Tags)>,
    current_leader: Option<(i32, i32, Tags)>,
    snapshot_id: Option<(i64, i32, Tags)>,
    tags: Tags,
}

#[derive(Debug, Clone, PartialEq)]
struct MTopic {
    name: String,
    id: [u8; 16],
    partitions: Vec<MPartition>,
    tags: Tags,
}

#[derive(Debug, Clone, PartialEq)]
struct MNode {
    node_id: i32,
    host: String,
    port: i32,
    rack: Option<String>,
    tags: Tags,
}

#[derive(Debug, Clone, PartialEq)]
struct MResponse {
    correlation_id: i32,
    header_tags: Tags,
    throttle_time_ms: i32,
    error_code: i16,
    session_id: i32,
    topics: Vec<MTopic>,
    node_endpoints: Vec<MNode>,
    tags: Tags,
}

/// Drops what `version` cannot carry, the way the encoder expects it.
fn for_version(m: &MResponse, v: i16) -> MResponse {
    let mut m = m.clone();
    let flexible = v >= 12;
    let strip = |t: &mut Tags| {
        if !flexible {
            t.clear();
        }
    };
    strip(&mut m.header_tags);
    strip(&mut m.tags);
    if v < 7 {
        m.error_code = 0;
        m.session_id = 0;
    }
    if v < 16 {
        m.node_endpoints.clear();
    }
    for n in &mut m.node_endpoints {
        strip(&mut n.tags);
    }
    for t in &mut m.topics {
        strip(&mut t.tags);
        if v >= 13 {
            t.name.clear();
        } else {
            t.id = [0; 16];
        }
        for p in &mut t.partitions {
            strip(&mut p.tags);
            if v < 5 {
                p.log_start_offset = -1;
            }
            if v < 11 {
                p.preferred_read_replica = -1;
            }
            if let Some(a) = &mut p.aborted {
                for e in a {
                    strip(&mut e.2);
                }
            }
            if !flexible {
                p.diverging_epoch = None;
                p.current_leader = None;
                p.snapshot_id = None;
            }
            // The encoder leaves out tagged structs equal to their defaults.
            if matches!(&p.diverging_epoch, Some((-1, -1, t)) if t.is_empty()) {
                p.diverging_epoch = None;
            }
            if matches!(&p.current_leader, Some((-1, -1, t)) if t.is_empty()) {
                p.current_leader = None;
            }
            if matches!(&p.snapshot_id, Some((-1, -1, t)) if t.is_empty()) {
                p.snapshot_id = None;
            }
        }
    }
    m
}

fn kp_tags(t: &Tags) -> BTreeMap<i32, Bytes> {
    t.iter().map(|(k, v)| (*k, Bytes::from(v.clone()))).collect()
}

/// Encodes header + body with the kafka-protocol crate (no size prefix).
fn encode(m: &MResponse, v: i16) -> Vec<u8> {
    let header = ResponseHeader::default()
        .with_correlation_id(m.correlation_id)
        .with_unknown_tagged_fields(kp_tags(&m.header_tags));
    let topics = m
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut d = PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(p.error_code)
                        .with_high_watermark(p.high_watermark)
                        .with_last_stable_offset(p.last_stable_offset)
                        .with_log_start_offset(p.log_start_offset)
                        .with_aborted_transactions(p.aborted.as_ref().map(|a| {
                            a.iter()
                                .map(|(pid, first, tags)| {
                                    AbortedTransaction::default()
                                        .with_producer_id(ProducerId(*pid))
                                        .with_first_offset(*first)
                                        .with_unknown_tagged_fields(kp_tags(tags))
                                })
                                .collect()
                        }))
                        .with_preferred_read_replica(BrokerId(p.preferred_read_replica))
                        .with_records(p.records.clone().map(Bytes::from))
                        .with_unknown_tagged_fields(kp_tags(&p.tags));
                    if let Some((epoch, end_offset, tags)) = &p.diverging_epoch {
                        d = d.with_diverging_epoch(
                            EpochEndOffset::default()
                                .with_epoch(*epoch)
                                .with_end_offset(*end_offset)
                                .with_unknown_tagged_fields(kp_tags(tags)),
                        );
                    }
                    if let Some((leader_id, leader_epoch, tags)) = &p.current_leader {
                        d = d.with_current_leader(
                            LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(*leader_id))
                                .with_leader_epoch(*leader_epoch)
                                .with_unknown_tagged_fields(kp_tags(tags)),
                        );
                    }
                    if let Some((end_offset, epoch, tags)) = &p.snapshot_id {
                        d = d.with_snapshot_id(
                            SnapshotId::default()
                                .with_end_offset(*end_offset)
                                .with_epoch(*epoch)
                                .with_unknown_tagged_fields(kp_tags(tags)),
                        );
                    }
                    d
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_string(t.name.clone())))
                .with_topic_id(t.id.to_vec().try_into().expect("16 bytes"))
                .with_partitions(partitions)
                .with_unknown_tagged_fields(kp_tags(&t.tags))
        })
        .collect();
    let nodes = m
        .node_endpoints
        .iter()
        .map(|n| {
            KpNodeEndpoint::default()
                .with_node_id(BrokerId(n.node_id))
                .with_host(StrBytes::from_string(n.host.clone()))
                .with_port(n.port)
                .with_rack(n.rack.clone().map(StrBytes::from_string))
                .with_unknown_tagged_fields(kp_tags(&n.tags))
        })
        .collect();
    let body = FetchResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code)
        .with_session_id(m.session_id)
        .with_responses(topics)
        .with_node_endpoints(nodes)
        .with_unknown_tagged_fields(kp_tags(&m.tags));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, FetchResponse::header_version(v))
        .expect("encode header");
    body.encode(&mut buf, v).expect("encode body");
    buf.to_vec()
}

// ---------------------------------------------------------------------------
// What the parser reports, in the model's shape

#[derive(Debug, Clone, PartialEq, Eq)]
enum TopicKey {
    Name(String),
    Id([u8; 16]),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PPartition {
    partition_index: i32,
    error_code: i16,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    aborted: Option<Vec<(i64, i64)>>,
    preferred_read_replica: i32,
    records: Option<Vec<u8>>,
    diverging_epoch: Option<(i32, i64)>,
    current_leader: Option<(i32, i32)>,
    snapshot_id: Option<(i64, i32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Parsed {
    header: FetchHeader,
    topics: Vec<(TopicKey, Vec<PPartition>)>,
    node_endpoints: Vec<NodeEndpoint>,
}

fn expected(m: &MResponse, v: i16) -> Parsed {
    Parsed {
        header: FetchHeader {
            correlation_id: m.correlation_id,
            throttle_time_ms: m.throttle_time_ms,
            error_code: m.error_code,
            session_id: m.session_id,
        },
        topics: m
            .topics
            .iter()
            .map(|t| {
                let key = if v >= 13 {
                    TopicKey::Id(t.id)
                } else {
                    TopicKey::Name(t.name.clone())
                };
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| PPartition {
                        partition_index: p.partition_index,
                        error_code: p.error_code,
                        high_watermark: p.high_watermark,
                        last_stable_offset: p.last_stable_offset,
                        log_start_offset: p.log_start_offset,
                        aborted: p.aborted.as_ref().map(|a| a.iter().map(|e| (e.0, e.1)).collect()),
                        preferred_read_replica: p.preferred_read_replica,
                        records: p.records.clone(),
                        diverging_epoch: p.diverging_epoch.as_ref().map(|e| (e.0, e.1)),
                        current_leader: p.current_leader.as_ref().map(|e| (e.0, e.1)),
                        snapshot_id: p.snapshot_id.as_ref().map(|e| (e.0, e.1)),
                    })
                    .collect();
                (key, partitions)
            })
            .collect(),
        node_endpoints: m
            .node_endpoints
            .iter()
            .map(|n| NodeEndpoint {
                node_id: n.node_id,
                host: n.host.clone(),
                port: n.port,
                rack: n.rack.clone(),
            })
            .collect(),
    }
}

// ---------------------------------------------------------------------------
// The caller: a socket simulated by a byte stream read in given chunk sizes

/// Parses `stream` (the frame, possibly followed by bytes of the next frame)
/// as a response of `frame_len` bytes, reading into a small buffer in the
/// given chunk sizes and moving records straight from buffer + stream, the
/// way the fetcher does. Checks the reader's contract at every step; panics
/// (test failure) on a contract violation, returns the parse error otherwise.
fn drive(version: i16, stream: &[u8], frame_len: usize, chunks: &[usize]) -> Result<Parsed, FetchParseError> {
    let mut reader = FetchResponseReader::new(version, frame_len)?;
    let mut pending: Vec<u8> = Vec::new();
    let mut read = 0; // bytes of `stream` read so far
    let mut accounted = 0; // bytes of the frame consumed by advance or moved as records
    let mut next_chunk = 0;
    let mut parsed = Parsed {
        header: FetchHeader::default(),
        topics: Vec::new(),
        node_endpoints: Vec::new(),
    };
    loop {
        assert_eq!(
            reader.remaining(),
            frame_len - accounted,
            "remaining tracks accounted bytes"
        );
        assert_eq!(reader.position(), accounted);
        let min = reader.min_bytes_needed();
        assert!(
            min <= reader.remaining(),
            "min_bytes_needed {min} > remaining {}",
            reader.remaining()
        );
        let (used, step) = reader.advance(&pending)?;
        assert!(used <= pending.len());
        if pending.len() < min {
            assert_eq!(
                (used, step),
                (0, FetchStep::NeedMore),
                "progress with fewer than min_bytes_needed bytes"
            );
        }
        pending.drain(..used);
        accounted += used;
        assert!(accounted <= frame_len, "consumed beyond the frame");
        match step {
            FetchStep::NeedMore => {
                if used == 0 {
                    assert!(
                        pending.len() < reader.min_bytes_needed(),
                        "NeedMore without progress must raise min_bytes_needed above the {} buffered bytes",
                        pending.len()
                    );
                }
                assert!(
                    read < stream.len(),
                    "reader stalled: wants more bytes than the stream (frame) holds"
                );
                let n = chunks[next_chunk % chunks.len()].max(1).min(stream.len() - read);
                next_chunk += 1;
                pending.extend_from_slice(&stream[read..read + n]);
                read += n;
            }
            FetchStep::Header => parsed.header = *reader.header(),
            FetchStep::Topic => {
                let key = match reader.topic() {
                    TopicRef::Name(name) => TopicKey::Name(name.to_owned()),
                    TopicRef::Id(id) => TopicKey::Id(id),
                };
                parsed.topics.push((key, Vec::new()));
            }
            FetchStep::Records { records_len } => {
                let p = reader.partition();
                assert_eq!(records_len, p.records_len.unwrap_or(0));
                assert!(records_len <= reader.remaining());
                // Caller moves the records: first what it already buffered, then straight from the socket.
                let from_buffer = records_len.min(pending.len());
                let mut records: Vec<u8> = pending.drain(..from_buffer).collect();
                let from_stream = records_len - from_buffer;
                records.extend_from_slice(&stream[read..read + from_stream]);
                read += from_stream;
                accounted += records_len;
                assert!(matches!(
                    reader.advance(&[]),
                    Err(FetchParseError::RecordsPending { .. })
                ));
                reader.records_consumed();
                let p = reader.partition();
                let topic = parsed.topics.last_mut().expect("records before a topic");
                topic.1.push(PPartition {
                    partition_index: p.partition_index,
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    aborted: p.aborted_transactions.clone(),
                    preferred_read_replica: p.preferred_read_replica,
                    records: p.records_len.map(|_| records),
                    diverging_epoch: None,
                    current_leader: None,
                    snapshot_id: None,
                });
            }
            FetchStep::PartitionEnd => {
                let p = reader.partition();
                let last = parsed
                    .topics
                    .last_mut()
                    .and_then(|t| t.1.last_mut())
                    .expect("partition end");
                assert_eq!(last.partition_index, p.partition_index);
                assert_eq!(last.aborted, p.aborted_transactions);
                last.diverging_epoch = p.diverging_epoch;
                last.current_leader = p.current_leader;
                last.snapshot_id = p.snapshot_id;
            }
            FetchStep::Done => {
                assert_eq!(reader.remaining(), 0);
                assert_eq!(accounted, frame_len);
                assert_eq!(reader.min_bytes_needed(), 0);
                assert!(reader.is_done());
                assert_eq!(reader.advance(&pending), Ok((0, FetchStep::Done)));
                parsed.node_endpoints = reader.node_endpoints().to_vec();
                return Ok(parsed);
            }
        }
    }
}

fn drive_all(version: i16, frame: &[u8]) -> Result<Parsed, FetchParseError> {
    drive(version, frame, frame.len(), &[usize::MAX])
}

// ---------------------------------------------------------------------------
// Strategies

fn tag_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => prop::collection::vec(any::<u8>(), 0..12),
        1 => prop::collection::vec(any::<u8>(), 200..1500),
    ]
}

fn tags(min_tag: i32) -> impl Strategy<Value = Tags> {
    prop_oneof![
        2 => Just(Tags::new()),
        1 => prop::collection::btree_map(min_tag..min_tag + 300, tag_value(), 1..3),
    ]
}

fn records() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::weighted(
        0.85,
        prop_oneof![
            6 => prop::collection::vec(any::<u8>(), 0..80),
            1 => prop::collection::vec(any::<u8>(), 500..5000),
        ],
    )
}

fn partition() -> impl Strategy<Value = MPartition> {
    (
        (
            any::<i32>(),
            prop_oneof![Just(0i16), Just(1), Just(6), Just(74), any::<i16>()],
        ),
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i32>()),
        prop::option::weighted(0.6, prop::collection::vec((any::<i64>(), any::<i64>(), tags(0)), 0..4)),
        records(),
        (
            prop::option::weighted(
                0.4,
                (
                    prop_oneof![Just(-1), any::<i32>()],
                    prop_oneof![Just(-1), any::<i64>()],
                    tags(0),
                ),
            ),
            prop::option::weighted(
                0.4,
                (
                    prop_oneof![Just(-1), any::<i32>()],
                    prop_oneof![Just(-1), any::<i32>()],
                    tags(0),
                ),
            ),
            prop::option::weighted(
                0.3,
                (
                    prop_oneof![Just(-1), any::<i64>()],
                    prop_oneof![Just(-1), any::<i32>()],
                    tags(0),
                ),
            ),
        ),
        tags(3),
    )
        .prop_map(
            |(
                (partition_index, error_code),
                (high_watermark, last_stable_offset, log_start_offset, preferred_read_replica),
                aborted,
                records,
                (diverging_epoch, current_leader, snapshot_id),
                tags,
            )| MPartition {
                partition_index,
                error_code,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                preferred_read_replica,
                records,
                diverging_epoch,
                current_leader,
                snapshot_id,
                tags,
            },
        )
}

fn topic() -> impl Strategy<Value = MTopic> {
    (
        "\\PC{0,16}",
        any::<[u8; 16]>(),
        prop::collection::vec(partition(), 0..4),
        tags(0),
    )
        .prop_map(|(name, id, partitions, tags)| MTopic {
            name,
            id,
            partitions,
            tags,
        })
}

fn node() -> impl Strategy<Value = MNode> {
    (
        any::<i32>(),
        "[a-z0-9.-]{0,20}",
        any::<i32>(),
        prop::option::of("\\PC{0,8}"),
        tags(0),
    )
        .prop_map(|(node_id, host, port, rack, tags)| MNode {
            node_id,
            host,
            port,
            rack,
            tags,
        })
}

fn response() -> impl Strategy<Value = MResponse> {
    (
        (any::<i32>(), tags(0), any::<i32>(), any::<i16>(), any::<i32>()),
        prop::collection::vec(topic(), 0..4),
        prop::collection::vec(node(), 0..3),
        tags(1), // tag 0 is NodeEndpoints at this level
    )
        .prop_map(
            |(
                (correlation_id, header_tags, throttle_time_ms, error_code, session_id),
                topics,
                node_endpoints,
                tags,
            )| {
                MResponse {
                    correlation_id,
                    header_tags,
                    throttle_time_ms,
                    error_code,
                    session_id,
                    topics,
                    node_endpoints,
                    tags,
                }
            },
        )
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        prop::collection::vec(1usize..8, 1..16),
        prop::collection::vec(1usize..100, 1..16),
        prop::collection::vec(1usize..5000, 1..8),
    ]
}

// ---------------------------------------------------------------------------
// 1 + 2 + 4: round trip against kafka-protocol, every version, random chunks

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every field the encoder wrote comes back, records arrive byte-exact at
    /// their positions, unknown tagged fields at every position are skipped,
    /// and min_bytes_needed / remaining hold their contract throughout.
    #[test]
    fn round_trip_every_version_in_random_chunks(
        model in response(),
        chunks in chunk_sizes(),
        next_frame in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        for v in 4..=16i16 {
            let m = for_version(&model, v);
            let frame = encode(&m, v);
            let mut stream = frame.clone();
            stream.extend_from_slice(&next_frame);
            let parsed = drive(v, &stream, frame.len(), &chunks)
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
            prop_assert_eq!(&parsed, &expected(&m, v), "version {}", v);
            // Whole-buffer feeding agrees.
            prop_assert_eq!(drive_all(v, &frame).expect("whole"), parsed);
        }
    }

    /// A second response through a reset reader allocates nothing (buffers are
    /// reused) unless it carries node endpoints.
    #[test]
    fn reset_reader_reuses_its_buffers(model in response(), v in 4..=15i16) {
        let m = for_version(&model, v);
        let frame = encode(&m, v);
        let mut reader = FetchResponseReader::new(v, frame.len()).unwrap();
        let run = |reader: &mut FetchResponseReader| {
            let mut at = 0;
            loop {
                let (used, step) = reader.advance(&frame[at..]).unwrap();
                at += used;
                match step {
                    FetchStep::Records { records_len } => {
                        at += records_len;
                        reader.records_consumed();
                    }
                    FetchStep::Done => break,
                    FetchStep::NeedMore => panic!("whole frame given"),
                    _ => {}
                }
            }
        };
        run(&mut reader);
        reader.reset(v, frame.len()).unwrap();
        let (allocations, ()) = allocations_during(|| run(&mut reader));
        prop_assert_eq!(allocations, 0);
    }
}

// ---------------------------------------------------------------------------
// 2: tagged fields the schema does not define for the version

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_compact_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            put_uvarint(out, s.len() as u32 + 1);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

/// A NodeEndpoints array as tansu and Kafka v16 write it, hand-encoded.
fn node_endpoints_bytes(nodes: &[(i32, &str, i32, Option<&str>)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, nodes.len() as u32 + 1);
    for (node_id, host, port, rack) in nodes {
        out.extend_from_slice(&node_id.to_be_bytes());
        put_compact_string(&mut out, Some(host));
        out.extend_from_slice(&port.to_be_bytes());
        put_compact_string(&mut out, *rack);
        out.push(0); // no tagged fields
    }
    out
}

fn simple_model() -> MResponse {
    let partition = |i: i32, records: Option<Vec<u8>>| MPartition {
        partition_index: i,
        error_code: 0,
        high_watermark: 100 + i64::from(i),
        last_stable_offset: 90,
        log_start_offset: 3,
        aborted: Some(vec![(7, 42, Tags::new())]),
        preferred_read_replica: -1,
        records,
        diverging_epoch: None,
        current_leader: None,
        snapshot_id: None,
        tags: Tags::new(),
    };
    MResponse {
        correlation_id: 77,
        header_tags: Tags::new(),
        throttle_time_ms: 5,
        error_code: 0,
        session_id: 1234,
        topics: vec![MTopic {
            name: "mirror.events".into(),
            id: [9; 16],
            partitions: vec![
                partition(0, Some(vec![1, 2, 3])),
                partition(1, None),
                partition(2, Some(vec![])),
            ],
            tags: Tags::new(),
        }],
        node_endpoints: Vec::new(),
        tags: Tags::new(),
    }
}

/// Replaces the response's (empty) top-level tagged-field section with one
/// holding tag 0 = `payload`.
fn with_top_level_tag0(frame: &[u8], payload: &[u8]) -> Vec<u8> {
    assert_eq!(
        frame.last(),
        Some(&0),
        "expects an empty top-level tagged-field section"
    );
    let mut out = frame[..frame.len() - 1].to_vec();
    out.push(1);
    out.push(0);
    put_uvarint(&mut out, payload.len() as u32);
    out.extend_from_slice(payload);
    out
}

#[test]
fn node_endpoints_tag_in_v12_to_15_is_skipped_like_tansu_sends_it() {
    let nodes = node_endpoints_bytes(&[(1, "broker-1.local", 9092, Some("rack-a")), (2, "b2", 9093, None)]);
    for v in 12..=15i16 {
        let m = for_version(&simple_model(), v);
        let frame = with_top_level_tag0(&encode(&m, v), &nodes);
        // The kafka-protocol crate rejects these bytes ...
        let mut body = Bytes::from(frame.clone());
        ResponseHeader::decode(&mut body, FetchResponse::header_version(v)).unwrap();
        assert!(
            FetchResponse::decode(&mut body, v).is_err(),
            "kafka-protocol v{v} now accepts tag 0"
        );
        // ... we parse the response and skip the tag.
        for chunk in [1, 3, 1000] {
            let parsed = drive(v, &frame, frame.len(), &[chunk]).unwrap();
            assert_eq!(parsed, expected(&m, v), "v{v}");
            assert!(parsed.node_endpoints.is_empty());
        }
    }
}

#[test]
fn node_endpoints_in_v16_are_read_and_trailing_bytes_inside_the_tag_ignored() {
    let mut payload = node_endpoints_bytes(&[(1, "broker-1.local", 9092, Some("rack-a")), (2, "b2", 9093, None)]);
    payload.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // a newer writer's extra field
    let m = for_version(&simple_model(), 16);
    let frame = with_top_level_tag0(&encode(&m, 16), &payload);
    for chunk in [1, 2, 7, 1000] {
        let parsed = drive(16, &frame, frame.len(), &[chunk]).unwrap();
        assert_eq!(
            parsed.node_endpoints,
            vec![
                NodeEndpoint {
                    node_id: 1,
                    host: "broker-1.local".into(),
                    port: 9092,
                    rack: Some("rack-a".into())
                },
                NodeEndpoint {
                    node_id: 2,
                    host: "b2".into(),
                    port: 9093,
                    rack: None
                },
            ]
        );
        assert_eq!(parsed.topics, expected(&m, 16).topics);
    }
}

#[test]
fn node_endpoints_array_overrunning_its_tag_is_rejected() {
    let payload = node_endpoints_bytes(&[(1, "broker-1.local", 9092, None)]);
    let m = for_version(&simple_model(), 16);
    // Declare the tag 3 bytes shorter than its array.
    let mut frame = encode(&m, 16);
    frame.pop();
    frame.extend_from_slice(&[1, 0]);
    put_uvarint(&mut frame, payload.len() as u32 - 3);
    frame.extend_from_slice(&payload[..payload.len() - 3]);
    let err = drive_all(16, &frame).unwrap_err();
    assert!(
        matches!(
            err,
            FetchParseError::Truncated {
                region: "node_endpoints tagged field",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn unknown_tags_everywhere_and_a_huge_one_skipped_in_small_reads() {
    let mut m = simple_model();
    let big = vec![0xab; 100_000];
    m.header_tags.insert(5, vec![1, 2]);
    m.tags.insert(1, big.clone());
    m.tags.insert(9, vec![]);
    m.topics[0].tags.insert(0, vec![3]);
    let p = &mut m.topics[0].partitions[0];
    p.tags.insert(3, big.clone());
    p.tags.insert(200, vec![4; 3]);
    p.aborted.as_mut().unwrap()[0].2.insert(0, vec![5; 4]);
    p.diverging_epoch = Some((4, 1000, BTreeMap::from([(0, vec![6; 8])])));
    p.current_leader = Some((2, 5, BTreeMap::from([(7, vec![])])));
    p.snapshot_id = Some((500, 3, BTreeMap::from([(1, vec![8])])));
    for v in 12..=16i16 {
        let m = for_version(&m, v);
        let frame = encode(&m, v);
        for chunk in [1, 64, 4096] {
            assert_eq!(
                drive(v, &frame, frame.len(), &[chunk]).unwrap(),
                expected(&m, v),
                "v{v} chunk {chunk}"
            );
        }
    }
    // Skipping a huge unknown tag never needs it buffered whole.
    let v = 16;
    let m = for_version(&m, v);
    let frame = encode(&m, v);
    let mut reader = FetchResponseReader::new(v, frame.len()).unwrap();
    let mut at = 0;
    let mut max_min = 0;
    loop {
        max_min = max_min.max(reader.min_bytes_needed());
        let end = (at + reader.min_bytes_needed().max(16)).min(frame.len());
        let (used, step) = reader.advance(&frame[at..end]).unwrap();
        at += used;
        match step {
            FetchStep::Records { records_len } => {
                at += records_len;
                reader.records_consumed();
            }
            FetchStep::Done => break,
            _ => {}
        }
    }
    assert!(max_min <= 64, "min_bytes_needed peaked at {max_min}");
}

#[test]
fn known_partition_tag_shorter_than_its_fields_is_rejected() {
    let mut m = simple_model();
    m.topics[0].partitions.truncate(1);
    m.topics[0].partitions[0].current_leader = Some((1, 2, Tags::new()));
    let mut frame = encode(&m, 12);
    // current_leader is tag 1, size 9 (8 bytes + empty tagged fields): find "01 01 09" before it.
    let at = frame
        .windows(3)
        .rposition(|w| w == [1, 1, 9])
        .expect("current leader tag");
    frame[at + 2] = 7;
    frame.truncate(at + 3 + 7);
    frame.extend_from_slice(&[0, 0]); // topic + top-level tagged fields
    let err = drive_all(12, &frame).unwrap_err();
    assert!(
        matches!(
            err,
            FetchParseError::TagTooShort {
                field: "responses.partitions.current_leader",
                size: 7,
                minimum: 8,
                ..
            }
        ),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------
// 3: malformed input

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Random bytes: a typed error or a full parse, never a panic or a stall.
    #[test]
    fn random_bytes_never_panic(
        v in 2..=18i16,
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        chunks in chunk_sizes(),
    ) {
        let _ = drive(v, &bytes, bytes.len(), &chunks);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Mutated, truncated, extended valid encodings, parsed as any version,
    /// with a frame length that may lie: never a panic or a stall.
    #[test]
    fn mutated_encodings_never_panic(
        model in response(),
        encode_v in 4..=16i16,
        parse_v in prop_oneof![Just(None), (4..=16i16).prop_map(Some)],
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in prop_oneof![Just(None), any::<prop::sample::Index>().prop_map(Some)],
        frame_delta in prop_oneof![3 => Just(0i64), 1 => -8i64..8],
        chunks in chunk_sizes(),
    ) {
        let mut bytes = encode(&for_version(&model, encode_v), encode_v);
        for (i, b) in &flips {
            let i = i.index(bytes.len());
            bytes[i] = *b;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let frame_len = (bytes.len() as i64 + frame_delta).max(0) as usize;
        let v = parse_v.unwrap_or(encode_v);
        if frame_len <= bytes.len() {
            // All of the frame is at hand (perhaps followed by more bytes):
            // a full parse or a typed error.
            let result = drive(v, &bytes, frame_len, &chunks);
            if flips.is_empty() && cut.is_none() && frame_delta == 0 && parse_v.is_none() {
                prop_assert!(result.is_ok(), "{:?}", result);
            }
        } else {
            // The frame claims more than arrives: the reader may wait for it,
            // but must not panic or consume what it was not given.
            let Ok(mut reader) = FetchResponseReader::new(v, frame_len) else { return Ok(()) };
            let mut at = 0;
            loop {
                prop_assert!(reader.min_bytes_needed() <= reader.remaining());
                match reader.advance(&bytes[at..]) {
                    Ok((used, FetchStep::NeedMore)) => {
                        prop_assert!(at + used <= bytes.len());
                        break;
                    }
                    Ok((used, FetchStep::Records { records_len })) => {
                        at += used + records_len;
                        reader.records_consumed();
                        if at > bytes.len() {
                            break;
                        }
                    }
                    Ok((_, FetchStep::Done)) => {
                        prop_assert_eq!(reader.remaining(), 0);
                        break;
                    }
                    Ok((used, _)) => at += used,
                    Err(_) => break,
                }
            }
        }
    }
}

/// Valid v4 prefix: correlation id, throttle time.
fn v4_prefix() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&77i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out
}

/// Feeds `bytes` claiming a frame of `frame_len` bytes; expects an error
/// before running out of the given bytes. Parsing the same bytes again with
/// the reset reader must allocate nothing (lying counts never size a buffer);
/// returns the error and the allocations of the first, fresh run (only the
/// reusable buffers growing for what came before the error).
fn reject(v: i16, bytes: &[u8], frame_len: usize) -> (FetchParseError, usize) {
    let mut reader = FetchResponseReader::new(v, frame_len).unwrap();
    let run = |reader: &mut FetchResponseReader| {
        allocations_during(|| {
            let mut at = 0;
            loop {
                match reader.advance(bytes.get(at..).unwrap_or_default()) {
                    Ok((used, FetchStep::NeedMore)) => {
                        panic!("needs more after {} of {} bytes", at + used, bytes.len())
                    }
                    Ok((used, FetchStep::Records { records_len })) => {
                        at += used + records_len;
                        reader.records_consumed();
                    }
                    Ok((used, _)) => at += used,
                    Err(e) => return e,
                }
            }
        })
    };
    let (fresh, err) = run(&mut reader);
    // Poisoned: the same error again.
    assert_eq!(reader.advance(bytes).unwrap_err(), err);
    reader.reset(v, frame_len).unwrap();
    let (again, err2) = run(&mut reader);
    assert_eq!(err2, err);
    assert_eq!(again, 0, "allocated while rejecting with warm buffers");
    (err, fresh)
}

/// [`reject`] for input that fails before any buffer is needed: no allocation at all.
fn reject_promptly(v: i16, bytes: &[u8], frame_len: usize) -> FetchParseError {
    let (err, fresh) = reject(v, bytes, frame_len);
    assert_eq!(fresh, 0, "allocated while rejecting");
    err
}

#[test]
fn lying_topic_count_is_rejected_without_allocating() {
    let mut b = v4_prefix();
    b.extend_from_slice(&i32::MAX.to_be_bytes());
    let err = reject_promptly(4, &b, 1 << 20);
    assert!(
        matches!(
            err,
            FetchParseError::CountTooLarge {
                field: "responses",
                position: 8,
                count: 0x7fff_ffff,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("responses at byte 8"), "{err}");
}

#[test]
fn lying_counts_and_lengths_are_rejected() {
    // Negative count other than null.
    let mut b = v4_prefix();
    b.extend_from_slice(&(-2i32).to_be_bytes());
    let err = reject_promptly(4, &b, 100);
    assert!(
        matches!(
            err,
            FetchParseError::InvalidLength {
                field: "responses",
                length: -2,
                ..
            }
        ),
        "{err:?}"
    );

    // Null topics array.
    let mut b = v4_prefix();
    b.extend_from_slice(&(-1i32).to_be_bytes());
    let err = reject_promptly(4, &b, 100);
    assert!(
        matches!(err, FetchParseError::UnexpectedNull { field: "responses", .. }),
        "{err:?}"
    );

    // Topic name longer than the frame.
    let mut b = v4_prefix();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&30000i16.to_be_bytes());
    let err = reject_promptly(4, &b, 200);
    assert!(
        matches!(
            err,
            FetchParseError::LengthTooLarge {
                field: "responses.topic",
                position: 12,
                ..
            }
        ),
        "{err:?}"
    );

    // Topic name not UTF-8.
    let mut b = v4_prefix();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&2i16.to_be_bytes());
    b.extend_from_slice(&[0xff, 0xfe]);
    b.extend_from_slice(&0i32.to_be_bytes());
    let err = reject_promptly(4, &b, b.len());
    assert!(
        matches!(
            err,
            FetchParseError::InvalidUtf8 {
                field: "responses.topic",
                position: 12
            }
        ),
        "{err:?}"
    );

    // A partition whose aborted-transactions count lies.
    let mut m = for_version(&simple_model(), 4);
    m.topics[0].partitions.truncate(1);
    m.topics[0].partitions[0].aborted = Some(vec![]);
    let good = encode(&m, 4);
    // v4 partition: index 4, error 2, hw 8, lso 8, then aborted count.
    let count_at = good.len() - 4 - 3 - 4;
    assert_eq!(&good[count_at..count_at + 4], &0i32.to_be_bytes());
    let mut b = good.clone();
    b[count_at..count_at + 4].copy_from_slice(&0x4000_0000i32.to_be_bytes());
    let (err, _) = reject(4, &b, b.len());
    assert!(
        matches!(
            err,
            FetchParseError::CountTooLarge { field: "responses.partitions.aborted_transactions", position, .. }
            if position == count_at
        ),
        "{err:?}"
    );

    // Records longer than what is left of the frame.
    let mut b = good.clone();
    let records_at = good.len() - 7;
    b[records_at..records_at + 4].copy_from_slice(&1000i32.to_be_bytes());
    let (err, _) = reject(4, &b, b.len());
    assert!(
        matches!(
            err,
            FetchParseError::LengthTooLarge {
                field: "responses.partitions.records",
                length: 1000,
                ..
            }
        ),
        "{err:?}"
    );
    // ... and negative ones.
    b[records_at..records_at + 4].copy_from_slice(&(-5i32).to_be_bytes());
    let (err, _) = reject(4, &b, b.len());
    assert!(
        matches!(err, FetchParseError::InvalidLength { length: -5, .. }),
        "{err:?}"
    );
}

#[test]
fn lying_flexible_counts_and_tag_sizes_are_rejected() {
    // v12: correlation id, header tags, throttle, error, session, then a compact array count of 2^32-2.
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.push(0);
    b.extend_from_slice(&[0; 10]);
    let prefix = b.clone();
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let err = reject_promptly(12, &b, 1 << 30);
    assert!(
        matches!(
            err,
            FetchParseError::CountTooLarge {
                field: "responses",
                position: 15,
                count: 0xffff_fffe,
                ..
            }
        ),
        "{err:?}"
    );

    // Overlong varint.
    let mut b = prefix.clone();
    b.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    let err = reject_promptly(12, &b, 1 << 30);
    assert!(
        matches!(
            err,
            FetchParseError::InvalidVarint {
                field: "responses",
                position: 15
            }
        ),
        "{err:?}"
    );

    // Header tagged-field count, then a tag whose size lies.
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let err = reject_promptly(12, &b, 1 << 20);
    assert!(
        matches!(
            err,
            FetchParseError::CountTooLarge {
                field: "header._tagged_fields",
                ..
            }
        ),
        "{err:?}"
    );
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&[1, 5, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let err = reject_promptly(12, &b, 1 << 20);
    assert!(
        matches!(
            err,
            FetchParseError::LengthTooLarge {
                field: "header._tagged_fields",
                position: 6,
                ..
            }
        ),
        "{err:?}"
    );

    // Compact string longer than Kafka allows.
    let mut b = prefix.clone();
    b.push(2);
    put_uvarint(&mut b, 40_000);
    let err = reject_promptly(12, &b, 1 << 20);
    assert!(
        matches!(
            err,
            FetchParseError::InvalidLength {
                field: "responses.topic",
                ..
            }
        ),
        "{err:?}"
    );

    // NodeEndpoints count lying inside its tag (v16).
    let m = for_version(&simple_model(), 16);
    let frame = with_top_level_tag0(&encode(&m, 16), &[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    let (err, _) = reject(16, &frame, frame.len());
    assert!(
        matches!(
            err,
            FetchParseError::CountTooLarge {
                field: "node_endpoints",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn trailing_and_missing_bytes_are_errors() {
    for v in [4i16, 11, 12, 16] {
        let m = for_version(&simple_model(), v);
        let frame = encode(&m, v);
        // A frame longer than the response.
        let mut longer = frame.clone();
        longer.extend_from_slice(&[0, 0, 0]);
        let err = drive_all(v, &longer).unwrap_err();
        assert_eq!(
            err,
            FetchParseError::TrailingBytes {
                field: "_end",
                position: frame.len(),
                remaining: 3
            },
            "v{v}"
        );
        // A frame shorter than the response: every cut is a typed error, found
        // with only the frame's bytes at hand.
        for cut in 0..frame.len() {
            let err = drive(v, &frame, cut, &[1]).unwrap_err();
            assert!(err.position() <= cut, "v{v} cut {cut}: {err:?}");
        }
    }
}

#[test]
fn version_out_of_range_and_misuse() {
    for v in [-1i16, 0, 3, 17, 18, i16::MAX] {
        assert!(matches!(
            FetchResponseReader::new(v, 100),
            Err(FetchParseError::UnsupportedVersion { version, .. }) if version == v
        ));
    }
    let m = for_version(&simple_model(), 9);
    let frame = encode(&m, 9);
    let mut reader = FetchResponseReader::new(9, frame.len()).unwrap();
    reader.records_consumed(); // no records pending: ignored
    let mut at = 0;
    let mut partitions = 0;
    loop {
        let (used, step) = reader.advance(&frame[at..]).unwrap();
        at += used;
        match step {
            FetchStep::Records { records_len } => {
                if partitions == 0 {
                    assert_eq!(records_len, 3);
                    assert_eq!(reader.partition().records_len, Some(3));
                    assert_eq!(reader.partition().aborted_transactions.as_deref(), Some(&[(7, 42)][..]));
                    // Forgetting records_consumed is reported, and leaves the reader usable.
                    let err = reader.advance(&frame[at..]).unwrap_err();
                    assert!(
                        matches!(err, FetchParseError::RecordsPending { records_len: 3, .. }),
                        "{err:?}"
                    );
                }
                partitions += 1;
                at += records_len;
                reader.records_consumed();
            }
            FetchStep::Done => break,
            _ => {}
        }
    }
    assert_eq!(partitions, 3);
    assert_eq!(at, frame.len());
}

// ---------------------------------------------------------------------------
// 4: min_bytes_needed / remaining, step by step on a fixed response

#[test]
fn min_bytes_needed_and_remaining_walkthrough() {
    let m = for_version(&simple_model(), 4);
    let frame = encode(&m, 4);
    let mut reader = FetchResponseReader::new(4, frame.len()).unwrap();
    assert_eq!(reader.remaining(), frame.len());
    assert_eq!(reader.min_bytes_needed(), 4);
    assert_eq!(reader.advance(&frame[..3]).unwrap(), (0, FetchStep::NeedMore));
    assert_eq!(reader.min_bytes_needed(), 4);
    // correlation id + throttle: Header.
    assert_eq!(reader.advance(&frame[..8]).unwrap(), (8, FetchStep::Header));
    assert_eq!(reader.header().correlation_id, 77);
    assert_eq!(reader.header().throttle_time_ms, 5);
    assert_eq!(reader.remaining(), frame.len() - 8);
    // Topic count + name length known, name not yet there: min rises to the whole name.
    assert_eq!(reader.advance(&frame[8..15]).unwrap(), (4, FetchStep::NeedMore));
    assert_eq!(reader.min_bytes_needed(), 2 + "mirror.events".len());
    let (used, step) = reader.advance(&frame[12..]).unwrap();
    assert_eq!(step, FetchStep::Topic);
    assert_eq!(reader.topic(), TopicRef::Name("mirror.events"));
    let mut at = 12 + used;
    let mut steps = Vec::new();
    loop {
        let (used, step) = reader.advance(&frame[at..]).unwrap();
        at += used;
        steps.push(step);
        match step {
            FetchStep::Records { records_len } => {
                assert_eq!(reader.min_bytes_needed(), 0);
                at += records_len;
                reader.records_consumed();
            }
            FetchStep::Done => break,
            _ => {}
        }
        assert_eq!(reader.remaining(), frame.len() - at);
    }
    assert_eq!(
        steps,
        [
            FetchStep::Records { records_len: 3 },
            FetchStep::PartitionEnd,
            FetchStep::Records { records_len: 0 },
            FetchStep::PartitionEnd,
            FetchStep::Records { records_len: 0 },
            FetchStep::PartitionEnd,
            FetchStep::Done
        ]
    );
    assert_eq!(reader.remaining(), 0);
    assert_eq!(reader.min_bytes_needed(), 0);
}
