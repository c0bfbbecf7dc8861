//! The listener against clients that send what they should not: frames cut
//! short or never finished, lying sizes, array counts that claim billions
//! of elements, unknown APIs, versions we do not serve, garbage. Each bad
//! request goes over its own connection to an agent serving one small
//! topic; the agent must close that connection (except for an ApiVersions
//! request at a version it does not speak, which Kafka answers with
//! UNSUPPORTED_VERSION and the versions it does), while a well-behaved
//! connection opened at the start, and a brand-new one, keep getting
//! correct answers. One shard, so every bad connection lands on the
//! executor that serves the good one.
//!
//! The agent runs in this process, so this binary registers the agent's
//! allocator: without it the lying counts abort the whole test run.
//! Every socket wait is bounded; everything stays on loopback.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::KafkaConnection;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use ringmirror::agent::Agent;
use ringmirror::config::AgentConfig;
use ringmirror_protocol::lazy_alloc::LazyHugeAlloc;
use ringmirror_protocol::request::{RequestError, SUPPORTED_APIS, decode_request};
use ringmirror_storage::batch::{BatchBuilder, BuildRecord};
use ringmirror_storage::log::{LogConfig, LogDir, TopicPartition};

#[global_allocator]
static ALLOCATOR: LazyHugeAlloc = LazyHugeAlloc;

const TOPIC: &str = "events";
const BATCHES: i64 = 3;
const RECORDS_PER_BATCH: i64 = 10;
/// Set low so that a size just above it is cheap to send.
const MAX_REQUEST_BYTES: i32 = 64 * 1024;
/// Bound on every connect, read and write.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on stopping the agent.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION: i16 = 35;
const CORRELATION_ID: i32 = 77;

/// Writes `TOPIC`-0 into `dir` and closes it cleanly; returns the log's bytes.
fn write_topic(dir: &Path) -> Vec<u8> {
    let log_dir = LogDir::open(dir).expect("open data dir");
    let tp = TopicPartition::new(TOPIC, 0);
    let config = LogConfig {
        preallocate_bytes: 1 << 16,
        prefault_bytes: 1 << 16,
        ..LogConfig::default()
    };
    let (mut log, _) = log_dir.open_partition(&tp, None, config, 0).expect("open partition");
    let mut bytes = Vec::new();
    for batch in 0..BATCHES {
        let base_offset = batch * RECORDS_PER_BATCH;
        let records = (0..RECORDS_PER_BATCH)
            .map(|i| BuildRecord {
                timestamp: 1_700_000_000_000 + base_offset + i,
                key: Some(format!("key-{}", base_offset + i).into_bytes()),
                value: Some(vec![b'v'; 100]),
                headers: Vec::new(),
            })
            .collect();
        bytes.extend(
            BatchBuilder {
                base_offset,
                records,
                ..BatchBuilder::default()
            }
            .build(),
        );
    }
    log.append(&bytes, 0).expect("append");
    log_dir.close(vec![(tp, log)], 0).expect("close data dir");
    bytes
}

fn start_agent(dir: &Path) -> Agent {
    let config = AgentConfig::parse(&format!(
        r#"
        data_dir = {dir:?}
        shards = 1
        [listener]
        address = "127.0.0.1:0"
        max_request_bytes = {MAX_REQUEST_BYTES}
        "#
    ))
    .expect("config");
    Agent::start(config).expect("start agent")
}

fn str(s: &'static str) -> StrBytes {
    StrBytes::from_static_str(s)
}

/// What a well-behaved client asks, checked against what was written:
/// the APIs we serve, the topic's one partition led by us, its end offset,
/// and its bytes.
fn assert_serves(conn: &mut KafkaConnection, log_bytes: &[u8], after: &str) {
    let versions: ApiVersionsResponse = conn
        .request(
            ApiKey::ApiVersions as i16,
            3,
            &ApiVersionsRequest::default()
                .with_client_software_name(str("serve-malformed"))
                .with_client_software_version(str("1")),
        )
        .unwrap_or_else(|e| panic!("ApiVersions after {after}: {e}"));
    assert_eq!(versions.error_code, 0, "ApiVersions after {after}");
    assert_lists_served_apis(&versions, after);

    let metadata: MetadataResponse = conn
        .request(
            ApiKey::Metadata as i16,
            4,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(TopicName(str(TOPIC)))),
                ]))
                .with_allow_auto_topic_creation(false),
        )
        .unwrap_or_else(|e| panic!("Metadata after {after}: {e}"));
    let [topic] = &metadata.topics[..] else {
        panic!("Metadata after {after}: {:?}", metadata.topics)
    };
    assert_eq!(topic.error_code, 0, "Metadata after {after}");
    let [partition] = &topic.partitions[..] else {
        panic!("Metadata after {after}: {:?}", topic.partitions)
    };
    assert_eq!(
        (partition.partition_index, partition.error_code),
        (0, 0),
        "Metadata after {after}"
    );
    assert_eq!(
        partition.leader_id.0, metadata.brokers[0].node_id.0,
        "Metadata after {after}"
    );

    let offsets: ListOffsetsResponse = conn
        .request(
            ApiKey::ListOffsets as i16,
            1,
            &ListOffsetsRequest::default()
                .with_replica_id((-1).into())
                .with_topics(vec![
                    ListOffsetsTopic::default()
                        .with_name(TopicName(str(TOPIC)))
                        .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-1)]),
                ]),
        )
        .unwrap_or_else(|e| panic!("ListOffsets after {after}: {e}"));
    let latest = &offsets.topics[0].partitions[0];
    assert_eq!(
        (latest.error_code, latest.offset),
        (0, BATCHES * RECORDS_PER_BATCH),
        "ListOffsets after {after}"
    );

    let fetched = conn
        .fetch(TOPIC, 0, 0, 1 << 20)
        .unwrap_or_else(|e| panic!("Fetch after {after}: {e}"));
    assert_eq!(fetched.error_code, 0, "Fetch after {after}");
    assert_eq!(&fetched.records[..], log_bytes, "Fetch after {after}");
}

fn assert_lists_served_apis(response: &ApiVersionsResponse, after: &str) {
    let listed: Vec<(i16, i16, i16)> = response
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    let served: Vec<(i16, i16, i16)> = SUPPORTED_APIS
        .iter()
        .map(|&(api, min, max)| (api as i16, min, max))
        .collect();
    assert_eq!(listed, served, "ApiVersions after {after}");
}

fn raw_connection(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A connection that has sent `bytes`.
fn sent(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = raw_connection(addr);
    stream.write_all(bytes).expect("send");
    stream
}

/// Waits (bounded) for the agent to close `stream` without answering.
fn assert_closed(mut stream: TcpStream, what: &str) {
    let mut buf = [0u8; 512];
    match stream.read(&mut buf) {
        Ok(0) => {}
        // Closed with our bytes unread.
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted) => {}
        Ok(n) => panic!("{what}: the agent answered ({n} bytes) instead of closing the connection"),
        Err(e) => panic!("{what}: the connection is still open after {IO_TIMEOUT:?} ({e})"),
    }
}

/// `body` with its size prefix.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// A request header for `api_key` at `version` in `header_version`.
fn header(api_key: i16, version: i16, header_version: i16) -> BytesMut {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(CORRELATION_ID)
        .with_client_id(Some(str("serve-malformed")))
        .encode(&mut buf, header_version)
        .expect("encode header");
    buf
}

/// The header a served `api` takes at `version`, then `body`, framed.
fn request(api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let mut frame = header(api as i16, version, api.request_header_version(version));
    frame.extend_from_slice(body);
    framed(&frame)
}

/// The first API Kafka defines that we do not serve.
fn unserved_api() -> ApiKey {
    (0..i16::MAX)
        .filter_map(|key| ApiKey::try_from(key).ok())
        .find(|api| SUPPORTED_APIS.iter().all(|(served, _, _)| served != api))
        .expect("an API we do not serve")
}

/// Deterministic garbage (xorshift64).
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The bad requests that must close their connection, by name.
fn closing_cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut fetch_v4 = BytesMut::new();
    // replica id, max wait, min bytes, max bytes, isolation level, then topics.
    for field in [-1, 100, 1, 1 << 20] {
        fetch_v4.put_i32(field);
    }
    fetch_v4.put_i8(0);
    fetch_v4.put_i32(i32::MAX);

    let mut list_offsets_v1 = BytesMut::new();
    // replica id, one topic named TOPIC, then its partitions.
    list_offsets_v1.put_i32(-1);
    list_offsets_v1.put_i32(1);
    list_offsets_v1.put_i16(TOPIC.len() as i16);
    list_offsets_v1.put_slice(TOPIC.as_bytes());
    list_offsets_v1.put_i32(i32::MAX);

    let mut produce_v9 = BytesMut::new();
    // null transactional id, acks, timeout, then a compact topic count of 2^32 - 2.
    produce_v9.put_u8(0);
    produce_v9.put_i16(-1);
    produce_v9.put_i32(1000);
    produce_v9.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);

    let mut cut_metadata = BytesMut::new();
    // One topic whose name claims 100 bytes; 3 follow.
    cut_metadata.put_i32(1);
    cut_metadata.put_i16(100);
    cut_metadata.put_slice(b"eve");

    let mut garbage_frame = garbage(7, 200);
    // An API key no one assigns, so the garbage cannot be a request by luck.
    garbage_frame[..2].copy_from_slice(&(-7i16).to_be_bytes());

    vec![
        ("a negative size", (-1i32).to_be_bytes().to_vec()),
        ("a size of zero", 0i32.to_be_bytes().to_vec()),
        ("a frame shorter than a request header", framed(&[0, 3, 0, 4, 0, 0, 0])),
        (
            "a size just above max_request_bytes",
            (MAX_REQUEST_BYTES + 1).to_be_bytes().to_vec(),
        ),
        ("a size of i32::MAX", i32::MAX.to_be_bytes().to_vec()),
        (
            "Metadata v4 claiming 0x7fffffff topics",
            request(ApiKey::Metadata, 4, &[0x7f, 0xff, 0xff, 0xff, 1]),
        ),
        (
            "Metadata v12 claiming 2^32 - 2 topics (compact array)",
            request(ApiKey::Metadata, 12, &[0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1, 0]),
        ),
        (
            "Fetch v4 claiming 0x7fffffff topics",
            request(ApiKey::Fetch, 4, &fetch_v4),
        ),
        (
            "ListOffsets v1 claiming 0x7fffffff partitions of a topic",
            request(ApiKey::ListOffsets, 1, &list_offsets_v1),
        ),
        (
            "Produce v9 claiming 2^32 - 2 topics (compact array)",
            request(ApiKey::Produce, 9, &produce_v9),
        ),
        (
            "Metadata v4 cut inside a topic name",
            request(ApiKey::Metadata, 4, &cut_metadata),
        ),
        ("unknown API key 999", framed(&header(999, 0, 1))),
        ("a Kafka API we do not serve", request(unserved_api(), 0, &[])),
        ("Fetch v99", framed(&header(ApiKey::Fetch as i16, 99, 1))),
        (
            "Fetch v3 (below the served versions)",
            request(ApiKey::Fetch, 3, &fetch_v4),
        ),
        ("garbage in a well-sized frame", framed(&garbage_frame)),
        ("garbage from the first byte on", garbage(11, 300)),
    ]
}

/// Reads one response frame of `stream`: its correlation id and body.
fn read_response(stream: &mut TcpStream) -> (i32, Bytes) {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("response size");
    let size = i32::from_be_bytes(size);
    assert!((4..=1 << 20).contains(&size), "response size {size}");
    let mut frame = vec![0u8; size as usize];
    stream.read_exact(&mut frame).expect("response");
    let mut frame = Bytes::from(frame);
    let header = ResponseHeader::decode(&mut frame, 0).expect("response header");
    (header.correlation_id, frame)
}

#[test]
fn malformed_requests_close_their_connection_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let log_bytes = write_topic(dir.path());
    let agent = start_agent(dir.path());
    let addr = agent.listener_addr().expect("listening");
    let bootstrap = addr.to_string();
    let mut good = KafkaConnection::connect(&bootstrap, IO_TIMEOUT).expect("connect");
    assert_serves(&mut good, &log_bytes, "nothing");
    let check = |good: &mut KafkaConnection, after: &str| {
        assert_serves(good, &log_bytes, after);
        let mut fresh = KafkaConnection::connect(&bootstrap, IO_TIMEOUT).expect("connect");
        assert_serves(&mut fresh, &log_bytes, after);
    };

    // A frame that ends early: the client closes, and so does the agent.
    let cut = sent(addr, &[&100i32.to_be_bytes()[..], &[0; 10]].concat());
    cut.shutdown(Shutdown::Write).expect("shutdown");
    assert_closed(cut, "a frame of 100 bytes ended after 10");
    check(&mut good, "a frame of 100 bytes ended after 10");

    // Connections that stall mid-frame hold only themselves up; they stay
    // open until the agent stops.
    let stalled = [
        sent(addr, &[&100i32.to_be_bytes()[..], &[0; 10]].concat()),
        sent(addr, &[0, 0]),
        raw_connection(addr),
    ];
    check(&mut good, "connections stalled mid-frame, mid-size and before sending");

    for (what, bytes) in closing_cases() {
        assert_closed(sent(addr, &bytes), what);
        check(&mut good, what);
    }

    // Requests before a bad one are answered, in order, before the close.
    let mut pipelined = framed(&header(ApiKey::ApiVersions as i16, 0, 1));
    pipelined.extend(framed(&header(999, 0, 1)));
    let mut stream = sent(addr, &pipelined);
    let (correlation_id, mut body) = read_response(&mut stream);
    assert_eq!(correlation_id, CORRELATION_ID);
    assert_eq!(
        ApiVersionsResponse::decode(&mut body, 0)
            .expect("ApiVersions v0")
            .error_code,
        0
    );
    assert_closed(stream, "an unknown API after a good request");
    check(&mut good, "an unknown API after a good request");

    // ApiVersions at a version we do not speak is answered (v0, with
    // UNSUPPORTED_VERSION and what we serve), and the client may go on.
    let mut stream = sent(addr, &framed(&header(ApiKey::ApiVersions as i16, 99, 2)));
    let (correlation_id, mut body) = read_response(&mut stream);
    assert_eq!(correlation_id, CORRELATION_ID);
    let response = ApiVersionsResponse::decode(&mut body, 0).expect("ApiVersions v0");
    assert_eq!(response.error_code, UNSUPPORTED_VERSION);
    assert_lists_served_apis(&response, "ApiVersions v99");
    stream
        .write_all(&framed(&header(ApiKey::ApiVersions as i16, 0, 1)))
        .expect("send");
    let (_, mut body) = read_response(&mut stream);
    assert_eq!(
        ApiVersionsResponse::decode(&mut body, 0)
            .expect("ApiVersions v0")
            .error_code,
        0
    );
    check(&mut good, "ApiVersions v99");

    // Stalled connections do not hold up a clean stop either.
    let (stopped_tx, stopped) = mpsc::channel();
    std::thread::spawn(move || stopped_tx.send(agent.stop()));
    stopped
        .recv_timeout(STOP_TIMEOUT)
        .expect("the agent did not stop within the bound")
        .expect("stop");
    drop(stalled);
}

/// Every served (API, version) with a body of lying counts, decoded in
/// process: non-flexible versions read 0x7f7f7f7f from every count and
/// flexible ones a compact count of 2^32 - 1, each an attempt to reserve
/// tens of GiB before the first element. Refused as malformed (a few
/// versions with no counts decode), never an abort.
#[test]
fn every_served_version_refuses_lying_counts() {
    for &(api, min, max) in SUPPORTED_APIS {
        for version in min..=max {
            for filler in [0x7f, 0xff] {
                let mut frame = header(api as i16, version, api.request_header_version(version));
                frame.put_bytes(filler, 64);
                match decode_request(frame.freeze()) {
                    Ok(_) | Err(RequestError::Malformed { .. }) => {}
                    Err(e) => panic!("{api:?} v{version} filled with {filler:#x}: {e}"),
                }
            }
        }
    }
}

/// A connection that goes quiet (before a request, or in the middle of
/// one) is closed after `connections_max_idle_ms`, as Kafka closes idle
/// connections, so stalled clients cannot pile up sockets.
#[test]
fn idle_connections_are_closed() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_topic(dir.path());
    let config = AgentConfig::parse(&format!(
        "data_dir = {:?}\nshards = 1\n[listener]\naddress = \"127.0.0.1:0\"\nconnections_max_idle_ms = 300\n",
        dir.path()
    ))
    .expect("config");
    let agent = Agent::start(config).expect("start agent");
    let addr = agent.listener_addr().expect("listening");
    let silent = raw_connection(addr);
    let mid_frame = sent(addr, &[0, 0, 0, 100, 1, 2, 3]);
    assert_closed(silent, "a connection that never sent anything");
    assert_closed(mid_frame, "a connection that stalled mid-frame");
    agent.stop().expect("stop");
}
