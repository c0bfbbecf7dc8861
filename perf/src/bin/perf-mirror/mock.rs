//! librdkafka's mock cluster as the server of `mock-consume`: the hidden
//! `mock-cluster` child (one broker, pinned, until killed) and loading the
//! mock's dataset into it with Produce requests that keep its offsets equal
//! to the dataset's. The mock keeps only ~5 MiB per partition, so it
//! never holds the main dataset.

use std::io::Write;

use anyhow::Context;
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use ringmirror_perf::dataset::Dataset;
use ringmirror_perf::procstat;

use crate::TOPIC;

/// librdkafka's mock cluster deletes a partition's oldest message sets once
/// it holds more than this (`mpart->max_size` in rdkafka_mock.c).
pub const MOCK_PARTITION_MAX_BYTES: u64 = 5 << 20;

#[derive(clap::Args, Clone, Debug)]
pub struct MockArgs {
    #[arg(long)]
    partitions: i32,
    /// Pin the mock (all its threads) to this CPU.
    #[arg(long)]
    cpu: usize,
}

/// The child: prints `bootstrap <servers>`, then serves until killed.
pub fn child_mock(a: &MockArgs) -> anyhow::Result<()> {
    // Before librdkafka starts the mock's threads, so that they inherit the mask.
    procstat::pin_current_thread(a.cpu);
    let cluster = rdkafka::mocking::MockCluster::new(1).context("start the mock cluster")?;
    cluster
        .create_topic(TOPIC, a.partitions, 1)
        .context("create the mock's topic")?;
    println!("bootstrap {}", cluster.bootstrap_servers());
    // The mock runs on its own threads; the harness kills this process when done.
    loop {
        std::thread::park();
    }
}

/// Produces `dataset` into the mock at `bootstrap`, one batch per partition
/// per request: the mock stores a request's records as one message set and
/// counts only its first batch's records, so this keeps its offsets equal to
/// the dataset's (checked against each response's base offset).
pub fn produce_into(bootstrap: &str, dataset: &Dataset) -> anyhow::Result<()> {
    use std::io::Read;

    use bytes::BytesMut;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    const VERSION: i16 = 8;
    let addr = bootstrap.split(',').next().context("empty bootstrap list")?;
    let mut stream = std::net::TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let rounds = dataset.partitions.iter().map(|p| p.batches.len()).max().unwrap_or(0);
    let mut buf = BytesMut::new();
    for round in 0..rounds {
        let mut topic = TopicProduceData::default();
        topic.name = TopicName(StrBytes::from_static_str(TOPIC));
        for (p, part) in dataset.partitions.iter().enumerate() {
            if let Some(b) = part.batches.get(round) {
                topic.partition_data.push(
                    PartitionProduceData::default()
                        .with_index(p as i32)
                        .with_records(Some(part.bytes.slice(b.pos..b.end_pos()))),
                );
            }
        }
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![topic]);
        let correlation_id = round as i32;
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(VERSION)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("perf-mirror")));
        buf.clear();
        buf.extend_from_slice(&[0; 4]);
        header.encode(&mut buf, ProduceRequest::header_version(VERSION))?;
        request.encode(&mut buf, VERSION)?;
        let len = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        stream.write_all(&buf)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let mut frame = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
        stream.read_exact(&mut frame)?;
        let mut frame = bytes::Bytes::from(frame);
        let header = ResponseHeader::decode(&mut frame, ProduceResponse::header_version(VERSION))?;
        anyhow::ensure!(header.correlation_id == correlation_id, "correlation id mismatch");
        let response = ProduceResponse::decode(&mut frame, VERSION)?;
        for p in response.responses.iter().flat_map(|t| &t.partition_responses) {
            let want = dataset.partitions[p.index as usize].batches[round].base_offset;
            anyhow::ensure!(
                p.error_code == 0 && p.base_offset == want,
                "mock partition {}: error {}, base offset {} (want {want})",
                p.index,
                p.error_code,
                p.base_offset
            );
        }
    }
    Ok(())
}
