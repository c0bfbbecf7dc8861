use super::fetch::{ResponseHead, plan_fetch, resolve_session, write_fetch_response};
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
        let head = ResponseHead {
            session_id: 7,
            error: NONE,
        };
        write_fetch_response(shared, &mut server, (version, 42), head, &plan, total, &mut meta).unwrap();
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
        if version >= 7 {
            assert_eq!(response.session_id, 7, "v{version}");
        }
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
    // The second of two partitions runs half a batch interval ahead: the
    // partitions' batches arrive spread out, not in one burst.
    // (Half of partition 1's first batch, which is a few bytes off the mean.)
    let ahead = source.available_at(0, 4).unwrap() - source.available_at(1, 4).unwrap();
    assert!(
        ahead > Duration::from_micros(495) && ahead < Duration::from_micros(505),
        "partition 1 ahead by {ahead:?}, not half of 1 ms"
    );
    // Available exactly from its availability time on, never a nanosecond later.
    for p in 0..d.partitions.len() {
        for i in 0..d.partitions[p].batches.len() {
            let at = source.available_at(p, i).unwrap();
            assert_eq!(shared.available(p, at), i + 1);
            assert_eq!(shared.available(p, at - Duration::from_nanos(1)), i);
        }
    }
    source.stop();
}

/// KIP-227 as Kafka's `FetchSession` keeps it: epoch 0 opens a session, an
/// incremental request changes only what it names (and what it forgets),
/// the session stands for the rest; a wrong epoch or id is refused.
#[test]
fn fetch_sessions_keep_what_incremental_requests_leave_out() {
    let source = SyntheticSource::start(
        dataset(),
        SourceOptions {
            fetch_sessions: true,
            ..SourceOptions::default()
        },
    )
    .unwrap();
    let shared = &source.shared;
    let mut session = None;
    let mut full = request("perf", &[0, 5], 1000);
    full.session_epoch = 0;
    let (planned, id, incremental) = resolve_session(shared, 12, &full, &mut session).unwrap();
    assert!(planned.is_none() && !incremental && id != 0);
    let offsets = |r: &FetchRequest| -> Vec<(i32, i64)> {
        r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect()
    };
    // Nothing changed: an empty request stands for both partitions.
    let mut empty = request("perf", &[], 1000);
    (empty.session_id, empty.session_epoch) = (id, 1);
    let (planned, _, incremental) = resolve_session(shared, 12, &empty, &mut session).unwrap();
    assert!(incremental);
    assert_eq!(offsets(&planned.unwrap()), [(0, 0), (1, 5)]);
    // Partition 0 moved on, partition 1 leaves.
    let mut moved = request("perf", &[40], 1000);
    (moved.session_id, moved.session_epoch) = (id, 2);
    let mut forgotten = kafka_protocol::messages::fetch_request::ForgottenTopic::default();
    forgotten.topic = TopicName(StrBytes::from_static_str("perf"));
    forgotten.partitions = vec![1];
    moved.forgotten_topics_data = vec![forgotten];
    let (planned, _, _) = resolve_session(shared, 12, &moved, &mut session).unwrap();
    assert_eq!(offsets(&planned.unwrap()), [(0, 40)]);
    // The same epoch again, and an unknown id.
    assert_eq!(resolve_session(shared, 12, &moved, &mut session).err(), Some(71));
    moved.session_id = id + 1;
    assert_eq!(resolve_session(shared, 12, &moved, &mut session).err(), Some(70));
    // Sessionless (-1) and before v7: full requests, no session id.
    let mut sessionless = request("perf", &[0], 1000);
    sessionless.session_epoch = -1;
    assert_eq!(resolve_session(shared, 12, &sessionless, &mut session).unwrap().1, 0);
    assert_eq!(resolve_session(shared, 6, &full, &mut session).unwrap().1, 0);
}
