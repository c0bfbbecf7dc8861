use super::fetch::{plan_fetch, write_fetch_response};
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
